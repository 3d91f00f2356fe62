// The generated GEMM (jit/codegen/matmul) on the virtual GPU, launched directly (cuBLASLt never
// sees these calls), against products computed here in double: f16/bf16 on tensor cores
// (mma.sync.m16n8k16, f32 accumulation) within their output's rounding, f32 on TF32 tensor cores
// within TF32's rounding bound, f32 without TF32 and integers on the FMA kernel; sizes that are not
// whole tiles, transposed and strided views, misaligned views, broadcast batch dims of rank 2,
// k = 0 and empty products; the tensor-core instructions and flops the profiler counts; the
// eager op's fallback onto the tensor-core kernel; and the errors a forced variant raises.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/codegen/matmul.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/random.h"
#include "support/profiling_scope.h"
#include "support/scope_exit.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;

namespace {

Device cuda_device() {
  return Device::cuda();
}

// Host values of `t` expanded to `shape`, in double, row-major.
std::vector<double> values(const Tensor& t, const Shape& shape) {
  return t.to(Device::cpu()).to(DType::f64).expand(shape).contiguous().to_vector<double>();
}

Shape out_shape_of(const Tensor& a, const Tensor& b) {
  Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2), "test");
  batch.push_back(a.shape()[a.dim() - 2]);
  batch.push_back(b.shape().back());
  return batch;
}

// The product in double, and per element the sum of |a_ik b_kj| (what rounding errors scale by).
struct Reference {
  std::vector<double> out, magnitude;
};
Reference reference(const Tensor& a, const Tensor& b, const Shape& out_shape) {
  auto r = static_cast<long>(out_shape.size());
  long m = out_shape[r - 2], n = out_shape[r - 1], k = a.shape().back();
  Shape a_shape(out_shape.begin(), out_shape.end() - 2), b_shape = a_shape;
  long batches = 1;
  for (auto s : a_shape) batches *= s;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  auto av = values(a, a_shape), bv = values(b, b_shape);
  Reference ref{std::vector<double>(batches * m * n, 0.0),
                std::vector<double>(batches * m * n, 0.0)};
  for (long z = 0; z < batches; ++z)
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (long c = 0; c < k; ++c) {
          double p = av[(z * m + i) * k + c] * bv[(z * k + c) * n + j];
          sum += p;
          mag += std::abs(p);
        }
        ref.out[(z * m + i) * n + j] = sum;
        ref.magnitude[(z * m + i) * n + j] = mag;
      }
  return ref;
}

// The generated GEMM's a @ b, writing `out` (default: the op's promoted dtype).
Tensor generated(const Tensor& a, const Tensor& b, DType out) {
  Shape shape = out_shape_of(a, b);
  auto kernel =
      codegen::render_matmul(a.dtype(), b.dtype(), out, static_cast<int>(shape.size()) - 2);
  return codegen::run_matmul(kernel, a, b, TensorMeta{shape, out});
}

// ||got - want|| / ||want|| (0 when both are empty or zero).
double relative_to_norm(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// The worst relative-to-norm error seen per output dtype, reported at the end of a test.
struct Worst {
  double f16 = 0, bf16 = 0, f32 = 0;
  void note(DType t, double e) {
    double& w = t == DType::f16 ? f16 : t == DType::bf16 ? bf16 : f32;
    w = std::max(w, e);
  }
};

// The tolerance of a product with f32 accumulation and `out` rounding: relative-to-norm, the
// output's unit roundoff (half an ulp) plus the accumulation's.
double tolerance(DType out) {
  return out == DType::f16 ? 1e-3 : out == DType::bf16 ? 8e-3 : 1e-5;
}

// a @ b through the generated GEMM against the double reference; returns the error.
double check_product(const Tensor& a, const Tensor& b, DType out, const std::string& label) {
  Shape shape = out_shape_of(a, b);
  Tensor got = generated(a, b, out);
  BOOST_TEST_CONTEXT(label) {
    BOOST_TEST((got.shape() == shape));
    BOOST_TEST((got.dtype() == out));
  }
  Reference want = reference(a, b, shape);
  double e = relative_to_norm(got.to(Device::cpu()).to(DType::f64).to_vector<double>(), want.out);
  BOOST_TEST(e <= tolerance(out), label << ": relative-to-norm error " << e);
  return e;
}

// A rows x cols operand of `dtype` on the device: row-major, or (transposed) the transpose of a
// row-major cols x rows tensor, so that its rows are strided and its columns contiguous.
Tensor operand(long rows, long cols, DType dtype, bool transposed) {
  if (transposed) return randn({cols, rows}).to(dtype).to(cuda_device()).t();
  return randn({rows, cols}).to(dtype).to(cuda_device());
}

struct ProfileTotals {
  std::uint64_t mma = 0, flops_f16 = 0, flops_tf32 = 0;
};
ProfileTotals totals() {
  ProfileTotals t;
  for (const auto& p : vgpu::profiles()) {
    t.mma += p.mma_instructions;
    t.flops_f16 += p.mma_flops_f16;
    t.flops_tf32 += p.mma_flops_tf32;
  }
  return t;
}

long round_up(long x, long to) {
  return (x + to - 1) / to * to;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sizes_that_are_not_whole_tiles_on_tensor_cores) {
  manual_seed(1);
  // Each of 1, 15, 17, 63, 65, 130 in each of m, n, k.
  const long sizes[] = {1, 15, 17, 63, 65, 130};
  Worst worst;
  for (DType t : {DType::f16, DType::bf16})
    for (int i = 0; i < 6; ++i) {
      long m = sizes[i], n = sizes[(i + 2) % 6], k = sizes[(i + 4) % 6];
      Tensor a = operand(m, k, t, false), b = operand(k, n, t, false);
      BOOST_TEST(codegen::matmul_variant(a, b, t).tensor_cores);
      std::string label = fmt::format("{} {}x{}x{}", dtype_name(t), m, n, k);
      worst.note(t, check_product(a, b, t, label));
    }
  BOOST_TEST_MESSAGE("f16 worst relative-to-norm error " << worst.f16 << ", bf16 " << worst.bf16);
}

BOOST_AUTO_TEST_CASE(whole_tiles_and_f32_outputs_of_16_bit_operands) {
  manual_seed(2);
  Worst worst;
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor a = operand(128, 64, t, false), b = operand(64, 192, t, false);
    auto v = codegen::matmul_variant(a, b, t);
    BOOST_TEST((v.tensor_cores && v.vector_loads && v.a_k_contiguous && !v.b_k_contiguous));
    worst.note(t, check_product(a, b, t, fmt::format("{} 128x192x64", dtype_name(t))));
    // f32 outputs: only the accumulation rounds.
    Tensor c = operand(65, 130, t, false), d = operand(130, 63, t, false);
    worst.note(DType::f32,
               check_product(c, d, DType::f32, fmt::format("{} -> f32", dtype_name(t))));
  }
  BOOST_TEST_MESSAGE("f16 " << worst.f16 << ", bf16 " << worst.bf16 << ", f32 out " << worst.f32);
}

BOOST_AUTO_TEST_CASE(transposed_operands_in_every_layout) {
  manual_seed(3);
  Worst worst;
  for (DType t : {DType::f16, DType::bf16})
    for (bool at : {false, true})
      for (bool bt : {false, true})
        for (long m : {64L, 65L}) {
          // m = 64 keeps a transposed a's columns 16-byte aligned (cp.async), 65 does not.
          long n = 72, k = 40;
          Tensor a = operand(m, k, t, at), b = operand(k, n, t, bt);
          auto v = codegen::matmul_variant(a, b, t);
          BOOST_TEST(v.tensor_cores);
          BOOST_TEST(v.a_k_contiguous == !at);
          BOOST_TEST(v.b_k_contiguous == bt);
          BOOST_TEST(v.vector_loads == (!at || m % 8 == 0));
          std::string label =
              fmt::format("{} m={} a{} b{}", dtype_name(t), m, at ? "^T" : "", bt ? "^T" : "");
          worst.note(t, check_product(a, b, t, label));
        }
  BOOST_TEST_MESSAGE("f16 " << worst.f16 << ", bf16 " << worst.bf16);
}

BOOST_AUTO_TEST_CASE(strided_and_misaligned_views_take_plain_loads) {
  manual_seed(4);
  for (DType t : {DType::f16, DType::bf16}) {
    // Every other column: no dim is contiguous.
    Tensor wide = randn({33, 80}).to(t).to(cuda_device());
    Tensor a = wide.slice(1, 0, 80, 2);  // 33 x 40, strides (80, 2)
    Tensor b = operand(40, 17, t, false);
    auto v = codegen::matmul_variant(a, b, t);
    BOOST_TEST((v.tensor_cores && !v.vector_loads));
    check_product(a, b, t, fmt::format("{} column-strided a", dtype_name(t)));
    // Rows contiguous, 16-byte multiples apart, but starting one element past a 16-byte boundary.
    Tensor shifted = randn({40, 72}).to(t).to(cuda_device()).slice(1, 1, 65);  // 40 x 64
    Tensor c = operand(20, 40, t, false);
    v = codegen::matmul_variant(c, shifted, t);
    BOOST_TEST((v.tensor_cores && !v.vector_loads));
    check_product(c, shifted, t, fmt::format("{} misaligned b", dtype_name(t)));
    // Rows 48 elements apart with 43 used: cp.async, and the chunk the edge cuts element-wise.
    Tensor cut = randn({70, 48}).to(t).to(cuda_device()).slice(1, 0, 43);
    Tensor d = operand(43, 64, t, false);
    v = codegen::matmul_variant(cut, d, t);
    BOOST_TEST((v.tensor_cores && v.vector_loads));
    check_product(cut, d, t, fmt::format("{} k = 43 in rows of 48", dtype_name(t)));
  }
}

BOOST_AUTO_TEST_CASE(broadcast_batch_dims_of_rank_2) {
  manual_seed(5);
  for (DType t : {DType::f16, DType::bf16}) {
    // [3, 1, m, k] @ [1, 2, k, n]: both broadcast, 6 products.
    Tensor a = randn({3, 1, 17, 24}).to(t).to(cuda_device());
    Tensor b = randn({1, 2, 24, 72}).to(t).to(cuda_device());
    BOOST_TEST(codegen::matmul_variant(a, b, t).vector_loads);
    check_product(a, b, t, fmt::format("{} [3,1] @ [1,2]", dtype_name(t)));
    // [2, 3, m, k] @ [k, n]: b shared by every batch; a's batch dims permuted (not one stride).
    Tensor x = randn({3, 2, 65, 32}).to(t).to(cuda_device()).permute({1, 0, 2, 3});
    Tensor w = operand(32, 15, t, true);
    check_product(x, w, t, fmt::format("{} permuted batch @ matrix", dtype_name(t)));
  }
}

BOOST_AUTO_TEST_CASE(k_zero_and_empty_products) {
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    Tensor a = randn({5, 0}).to(t).to(cuda_device()), b = randn({0, 7}).to(t).to(cuda_device());
    Tensor z = generated(a, b, t);
    BOOST_TEST((z.shape() == Shape{5, 7}));
    auto zs = z.to(Device::cpu()).to(DType::f64).to_vector<double>();
    BOOST_TEST(zs == std::vector<double>(35, 0.0), boost::test_tools::per_element());
    Tensor e =
        generated(randn({0, 9}).to(t).to(cuda_device()), randn({9, 4}).to(t).to(cuda_device()), t);
    BOOST_TEST((e.shape() == Shape{0, 4}));
    Tensor eb = generated(randn({2, 0, 3, 9}).to(t).to(cuda_device()),
                          randn({9, 4}).to(t).to(cuda_device()), t);
    BOOST_TEST((eb.shape() == Shape{2, 0, 3, 4}));
  }
}

BOOST_AUTO_TEST_CASE(tensor_core_instructions_and_flops_in_the_profile) {
  manual_seed(6);
  // One mma.m16n8k16 per warp, m16 x n8 piece and k16 step of every whole tile: a 64 x 64 tile,
  // K-steps of 32 (the tails are zero-padded).
  test::ProfilingScope profiling;
  const long m = 100, n = 70, k = 40;
  check_product(operand(m, k, DType::bf16, false), operand(k, n, DType::bf16, true), DType::bf16,
                "bf16 profiled");
  profiling.stop();
  ProfileTotals p = totals();
  vgpu::clear_profiles();
  auto padded_flops =
      static_cast<std::uint64_t>(2 * round_up(m, 64) * round_up(n, 64) * round_up(k, 32));
  BOOST_TEST(p.flops_f16 == padded_flops);
  BOOST_TEST(p.mma == padded_flops / (2 * 16 * 8 * 16));
  BOOST_TEST(p.flops_tf32 == 0u);
}

BOOST_AUTO_TEST_CASE(f32_on_tf32_tensor_cores_within_tf32_rounding) {
  manual_seed(7);
  codegen::set_allow_tf32(true);
  test::ScopeExit tf32_off([] { codegen::set_allow_tf32(false); });
  test::ProfilingScope profiling;
  std::string failure;
  double worst = 0;
  try {
    for (bool at : {false, true})
      for (bool bt : {false, true}) {
        const long m = 65, n = 66, k = 130;
        Tensor a = operand(m, k, DType::f32, at), b = operand(k, n, DType::f32, bt);
        auto v = codegen::matmul_variant(a, b, DType::f32);
        BOOST_TEST((v.tf32 && !v.tensor_cores));
        Tensor got = generated(a, b, DType::f32);
        Reference want = reference(a, b, Shape{m, n});
        auto gv = got.to(Device::cpu()).to(DType::f64).to_vector<double>();
        // Each operand rounds to 10 significand bits (relative 2^-11), their product to within
        // 2^-10 + 2^-22; the f32 accumulation of k terms adds at most k 2^-23 of the magnitude
        // (an ulp per addition: tensor cores need not round to nearest).
        double bound = std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + k * std::ldexp(1.0, -23);
        bool within = true;
        for (std::size_t i = 0; i < gv.size(); ++i)
          within = within && std::abs(gv[i] - want.out[i]) <= bound * want.magnitude[i];
        BOOST_TEST(within, "TF32 a" << at << " b" << bt);
        worst = std::max(worst, relative_to_norm(gv, want.out));
      }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  profiling.stop();
  BOOST_TEST(failure == "");
  ProfileTotals p = totals();
  vgpu::clear_profiles();
  BOOST_TEST(p.flops_tf32 > 0u);
  BOOST_TEST(p.flops_f16 == 0u);
  BOOST_TEST_MESSAGE("TF32 relative-to-norm error " << worst);
}

BOOST_AUTO_TEST_CASE(f32_without_tf32_and_integers_stay_on_the_fma_kernel) {
  manual_seed(8);
  test::ProfilingScope profiling;
  Tensor a = operand(33, 47, DType::f32, true), b = operand(47, 18, DType::f32, false);
  BOOST_TEST(!codegen::matmul_variant(a, b, DType::f32).mma());
  double e = check_product(a, b, DType::f32, "f32 FMA");
  Tensor ai = randint(-50, 50, {2, 9, 13}, DType::i32).to(cuda_device());
  Tensor bi = randint(-50, 50, {13, 6}, DType::i32).to(cuda_device());
  BOOST_TEST(!codegen::matmul_variant(ai, bi, DType::i32).mma());
  Tensor gi = generated(ai, bi, DType::i32);
  Reference want = reference(ai, bi, Shape{2, 9, 6});
  BOOST_TEST(gi.to(Device::cpu()).to(DType::f64).to_vector<double>() == want.out,
             boost::test_tools::per_element());
  // Mixed 16-bit dtypes have no one mma type: the FMA kernel.
  Tensor h = operand(8, 16, DType::f16, false), bh = operand(16, 8, DType::bf16, false);
  BOOST_TEST(!codegen::matmul_variant(h, bh, DType::f32).mma());
  check_product(h, bh, DType::f32, "f16 @ bf16 -> f32 FMA");
  profiling.stop();
  BOOST_TEST(totals().mma == 0u);
  vgpu::clear_profiles();
  BOOST_TEST_MESSAGE("f32 FMA relative-to-norm error " << e);
}

BOOST_AUTO_TEST_CASE(eager_matmul_cublaslt_refuses_runs_on_tensor_cores) {
  manual_seed(9);
  // A last dim with stride 2 is neither row- nor column-major: cuBLASLt's rules refuse it.
  Tensor wide = randn({24, 96}).to(DType::bf16).to(cuda_device());
  Tensor a = wide.slice(1, 0, 96, 2);
  Tensor b = randn({48, 40}).to(DType::bf16).to(cuda_device());
  auto calls = codegen::lt_stats().calls.load();
  test::ProfilingScope profiling;
  Tensor got = matmul(a, b);
  profiling.stop();
  BOOST_TEST(codegen::lt_stats().calls.load() == calls);
  BOOST_TEST(totals().mma > 0u);
  vgpu::clear_profiles();
  Reference want = reference(a, b, Shape{24, 40});
  double e = relative_to_norm(got.to(Device::cpu()).to(DType::f64).to_vector<double>(), want.out);
  BOOST_TEST(e <= tolerance(DType::bf16));
}

BOOST_AUTO_TEST_CASE(a_variant_the_operands_do_not_fit_is_an_error_naming_them) {
  Tensor a = randn({8, 32}).to(cuda_device()).slice(1, 0, 32, 2);
  Tensor b = randn({16, 8}).to(cuda_device());
  auto kernel = codegen::render_matmul(DType::f32, DType::f32, DType::f32, 0);
  codegen::MatmulVariant v;
  v.tf32 = true;
  v.vector_loads = true;
  try {
    codegen::run_matmul(kernel, a, b, TensorMeta{Shape{8, 8}, DType::f32}, v);
    BOOST_ERROR("no error");
  } catch (const Error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("matmul") != std::string::npos, what);
    BOOST_TEST(what.find("[8, 16]") != std::string::npos, what);
  }
  auto ints = codegen::render_matmul(DType::i32, DType::i32, DType::i32, 0);
  codegen::MatmulVariant tc;
  tc.tensor_cores = true;
  try {
    (void)ints.kernel(tc);
    BOOST_ERROR("no error");
  } catch (const Error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("i32") != std::string::npos, what);
  }
}
