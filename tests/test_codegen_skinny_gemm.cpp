// The skinny GEMM (jit/codegen/skinny_gemm.h): a compiled matmul of at most 8 rows against a
// weight is ONE generated kernel that also computes the pointwise group after it (bias,
// activation, residual) and reads an int8 weight through its cast; more rows, a small weight or
// KILN_SKINNY_GEMM=0 keep the cuBLASLt call. Results against the same function in f64 on the CPU.
#include <boost/test/unit_test.hpp>

#include <string>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/device_compare.h"
#include "support/plan_steps.h"
#include "support/scoped_env.h"

using namespace kiln;
using test::relative_error;

namespace {

using test::count_steps;

// A transformer layer's projection at decode: residual + gelu(x W^T + b).
Tensor projection(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r) {
  return r + gelu(matmul(x, w.transpose(0, 1)) + b, GeluApproximation::tanh);
}

struct Operands {
  Tensor x, w, b, r;
};

Operands operands(std::int64_t rows, std::int64_t k, std::int64_t n, DType dtype) {
  Generator gen(7);
  return {randn({rows, 1, k}, DType::f32, &gen).to(dtype),
          (randn({n, k}, DType::f32, &gen) * 0.1).to(dtype), randn({n}, DType::f32, &gen).to(dtype),
          randn({rows, 1, n}, DType::f32, &gen).to(dtype)};
}

Tensor on_cuda(const Tensor& t) {
  return t.to(Device::cuda());
}
Tensor in_f64(const Tensor& t) {
  return t.to(DType::f64);
}

// The tolerance of a product over k terms in `dtype` (bf16 rounds the product, the bias sum and
// the activation once each).
double tolerance(DType dtype) {
  return dtype == DType::bf16 ? 3e-2 : 2e-5;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(skinny_gemm)

BOOST_AUTO_TEST_CASE(a_few_rows_are_one_kernel_with_bias_activation_and_residual) {
  // K = 264: 16-byte weight loads in both dtypes; K = 257: the scalar loop. N = 130: a block's
  // last warps have no column.
  for (DType dtype : {DType::f32, DType::bf16})
    for (std::int64_t rows : {1, 3, 8})
      for (std::int64_t k : {264, 257}) {
        BOOST_TEST_CONTEXT(dtype_name(dtype) << ", " << rows << " rows, K = " << k) {
          auto f = jit::compile(projection);
          Operands o = operands(rows, k, 130, dtype);
          auto& stats = jit::codegen::launch_stats();
          Tensor got = f(on_cuda(o.x), on_cuda(o.w), on_cuda(o.b), on_cuda(o.r));
          Tensor want = projection(in_f64(o.x), in_f64(o.w), in_f64(o.b), in_f64(o.r));
          BOOST_TEST(relative_error(got, want) <= tolerance(dtype));
          const jit::KernelPlan* plan = f.core().plan(0);
          BOOST_TEST_REQUIRE(plan != nullptr);
          BOOST_TEST(count_steps<jit::SkinnyGemmStep>(*plan) == 1, plan->str());
          BOOST_TEST(count_steps<jit::LibraryStep>(*plan) == 0, plan->str());
          BOOST_TEST(count_steps<jit::AbsorbedStep>(*plan) == 1, plan->str());
          BOOST_TEST(plan->kernel_count() == 1, plan->str());
          BOOST_TEST(plan->str().find("skinny GEMM: matmul + add + gelu_tanh + add (M = " +
                                      std::to_string(rows) + " rows") != std::string::npos,
                     plan->str());
          // A warm call: the one kernel, nothing through dispatch.
          std::int64_t launches = stats.launches, dispatches = stats.plan_dispatches;
          Tensor again = f(on_cuda(o.x), on_cuda(o.w), on_cuda(o.b), on_cuda(o.r));
          BOOST_TEST(stats.launches - launches == 1);
          BOOST_TEST(stats.plan_dispatches - dispatches == 0);
          BOOST_TEST(relative_error(again, got) == 0.0);
        }
      }
}

BOOST_AUTO_TEST_CASE(an_int8_weight_is_read_through_its_cast_and_scaled_in_the_epilogue) {
  // nn::Linear::forward after quantize_int8: (x @ cast(q)^T) * scale + bias.
  auto fn = [](const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& b) {
    return matmul(x, q.to(x.dtype()).transpose(0, 1)) * scale + b;
  };
  const std::int64_t k = 512, n = 96;
  Generator gen(3);
  Tensor x = randn({2, 1, k}, DType::f32, &gen).to(DType::bf16);
  Tensor q = clamp(round(randn({n, k}, DType::f32, &gen) * 40), -127, 127).to(DType::i8);
  Tensor scale = (rand({n}, DType::f32, &gen) * 0.01 + 0.001).to(DType::bf16);
  Tensor b = randn({n}, DType::f32, &gen).to(DType::bf16);
  auto f = jit::compile(fn);
  auto& stats = jit::codegen::launch_stats();
  Tensor got = f(on_cuda(x), on_cuda(q), on_cuda(scale), on_cuda(b));
  Tensor want = fn(in_f64(x), q, in_f64(scale), in_f64(b));
  BOOST_TEST(relative_error(got, want) <= 3e-2);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(count_steps<jit::SkinnyGemmStep>(*plan) == 1, plan->str());
  BOOST_TEST(plan->kernel_count() == 1, plan->str());
  BOOST_TEST(plan->str().find("as i8 in registers") != std::string::npos, plan->str());
  // The warm call reads the int8 weight (1 byte an element), never a widened copy of it.
  std::int64_t launches = stats.launches, read = stats.bytes_read;
  f(on_cuda(x), on_cuda(q), on_cuda(scale), on_cuda(b));
  BOOST_TEST(stats.launches - launches == 1);
  BOOST_TEST(stats.bytes_read - read < n * k * 2);
  BOOST_TEST(stats.bytes_read - read >= n * k);
}

BOOST_AUTO_TEST_CASE(strided_rows_and_a_product_read_by_others_are_taken) {
  // x is every other row of a larger tensor and the product is returned besides: the kernel
  // writes the product alone, and its readers run as kernels of their own.
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor y = matmul(x.slice(0, 0, 8, 2), w.transpose(0, 1));
    return std::vector<Tensor>{y, sum(y, {1})};
  };
  Generator gen(11);
  Tensor x = randn({8, 200}, DType::f32, &gen);
  Tensor w = randn({160, 200}, DType::f32, &gen);
  auto f = jit::compile(fn);
  std::vector<Tensor> got = f(on_cuda(x), on_cuda(w));
  std::vector<Tensor> want = fn(in_f64(x), in_f64(w));
  BOOST_TEST(relative_error(got[0], want[0]) <= 1e-5);
  BOOST_TEST(relative_error(got[1], want[1]) <= 1e-5);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(count_steps<jit::SkinnyGemmStep>(*plan) == 1, plan->str());
  BOOST_TEST(count_steps<jit::AbsorbedStep>(*plan) == 0, plan->str());
}

BOOST_AUTO_TEST_CASE(a_view_of_the_product_keeps_its_readers_apart) {
  // The product is never stored: a reader over a view of it (another shape) runs as a kernel of
  // its own, reading the product the skinny GEMM writes.
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& r) {
    return matmul(x, w.transpose(0, 1)).reshape({2, 2, 160}) * 2.0 + r;
  };
  Generator gen(5);
  Tensor x = randn({4, 200}, DType::f32, &gen), w = randn({160, 200}, DType::f32, &gen);
  Tensor r = randn({2, 2, 160}, DType::f32, &gen);
  auto f = jit::compile(fn);
  Tensor got = f(on_cuda(x), on_cuda(w), on_cuda(r));
  BOOST_TEST(relative_error(got, fn(in_f64(x), in_f64(w), in_f64(r))) <= 1e-5);
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(count_steps<jit::SkinnyGemmStep>(*plan) == 1, plan->str());
  BOOST_TEST(count_steps<jit::AbsorbedStep>(*plan) == 0, plan->str());
}

BOOST_AUTO_TEST_CASE(more_rows_a_small_weight_or_the_switch_keep_the_library_call) {
  auto compile_and_run = [](std::int64_t rows, std::int64_t k, std::int64_t n) {
    auto f = jit::compile(projection);
    Operands o = operands(rows, k, n, DType::f32);
    Tensor got = f(on_cuda(o.x), on_cuda(o.w), on_cuda(o.b), on_cuda(o.r));
    Tensor want = projection(in_f64(o.x), in_f64(o.w), in_f64(o.b), in_f64(o.r));
    BOOST_TEST(relative_error(got, want) <= 2e-5);
    const jit::KernelPlan* plan = f.core().plan(0);
    BOOST_TEST_REQUIRE(plan != nullptr);
    return count_steps<jit::SkinnyGemmStep>(*plan);
  };
  BOOST_TEST(compile_and_run(9, 256, 128) == 0);  // M = 9 rows
  BOOST_TEST(compile_and_run(4, 64, 64) == 0);    // a 4096-element weight
  {
    test::ScopedEnv every_size("KILN_SKINNY_GEMM", "1");
    BOOST_TEST(compile_and_run(4, 64, 64) == 1);
  }
  test::ScopedEnv off("KILN_SKINNY_GEMM", "0");
  BOOST_TEST(compile_and_run(4, 256, 128) == 0);
}

BOOST_AUTO_TEST_CASE(a_cuda_graph_replays_the_kernel) {
  jit::CompileOptions options;
  options.cuda_graphs = true;
  auto f = jit::compile(projection, options);
  Operands o = operands(2, 256, 128, DType::bf16);
  Tensor x = on_cuda(o.x), w = on_cuda(o.w), b = on_cuda(o.b), r = on_cuda(o.r);
  auto& stats = jit::codegen::launch_stats();
  Tensor want = projection(in_f64(o.x), in_f64(o.w), in_f64(o.b), in_f64(o.r));
  for (int call = 0; call < 3; ++call) {
    std::int64_t graphs = stats.graph_launches;
    Tensor got = f(x, w, b, r);
    BOOST_TEST(relative_error(got, want) <= tolerance(DType::bf16));
    if (call == 2) BOOST_TEST(stats.graph_launches - graphs == 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()
