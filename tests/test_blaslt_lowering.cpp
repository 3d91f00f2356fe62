// The cuBLASLt lowering on CUDA tensors (the virtual GPU's cuBLASLt here): eager matmul and
// linear as one library call without transpose copies, matmul + bias + relu/gelu_tanh in compiled
// graphs as one call with the matching epilogue (descriptors read back and asserted per pattern),
// the aux outputs, and every documented rule falling back to the generated GEMM + epilogue
// kernel with the reason on KILN_LOG=fusion. References are kiln's CPU (Eigen) kernels.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda_backend.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/device_compare.h"
#include "support/lt_epilogue_table.h"

using namespace kiln;
using jit::codegen::Activation;
using jit::codegen::lt_stats;
using test::relative_error;
namespace lt = kiln::cuda::blaslt;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
Tensor dev(const Tensor& t) {
  return t.to(Device::cuda());
}
lt::MatmulSpec last_spec() {
  return lt::service(cuda::backend()).last_call();
}
double tolerance(DType t) {
  return t == DType::f16 ? 4e-3 : t == DType::bf16 ? 3e-2 : 1e-5;
}

Tensor act_ref(const Tensor& x, Activation act) {
  if (act == Activation::relu) return relu(x);
  if (act == Activation::gelu_tanh) return gelu(x, GeluApproximation::tanh);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(blaslt_eager)

BOOST_AUTO_TEST_CASE(eager_matmul_is_one_library_call_for_every_layout) {
  struct Case {
    Shape a, b;
    bool transpose_b;
  };
  for (const Case& c : {Case{{5, 7}, {7, 3}, false}, Case{{5, 7}, {3, 7}, true},
                        Case{{2, 4, 7}, {7, 3}, false}, Case{{2, 4, 7}, {3, 7}, true},
                        Case{{3, 4, 6}, {3, 6, 5}, false}, Case{{3, 4, 6}, {1, 6, 5}, false},
                        Case{{2, 3, 4, 6}, {2, 3, 6, 5}, false}, Case{{1, 6}, {6, 1}, false}}) {
    BOOST_TEST_CONTEXT(shape_str(c.a) << " @ " << shape_str(c.b) << (c.transpose_b ? "^T" : "")) {
      Tensor a = randn(c.a), b = randn(c.b);
      Tensor bt = c.transpose_b ? transpose(b, -1, -2) : b;
      auto calls = lt_stats().calls.load();
      auto launches = jit::codegen::launch_stats().launches.load();
      Tensor got = matmul(dev(a), c.transpose_b ? transpose(dev(b), -1, -2) : dev(b));
      BOOST_TEST(lt_stats().calls.load() == calls + 1);
      BOOST_TEST(jit::codegen::launch_stats().launches.load() == launches);  // no copy kernel
      BOOST_TEST(relative_error(got, matmul(a, bt)) <= 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_hands_the_weight_over_transposed) {
  Tensor x = randn({6, 8}), w = randn({4, 8});
  Tensor got = matmul(dev(x), transpose(dev(w), 0, 1));
  lt::MatmulSpec s = last_spec();
  // out^T = w x^T: A is the weight (row-major [4, 8] = column-major 8 x 4, op T), B is x.
  BOOST_TEST(s.trans_a == CUBLAS_OP_T);
  BOOST_TEST(s.trans_b == CUBLAS_OP_N);
  BOOST_TEST(s.m() == 4u);
  BOOST_TEST(s.n() == 6u);
  BOOST_TEST(s.k() == 8u);
  BOOST_TEST(s.a.ld == 8);
  BOOST_TEST(s.b.ld == 8);
  BOOST_TEST(s.d.ld == 4);
  BOOST_TEST(s.epilogue == CUBLASLT_EPILOGUE_DEFAULT);
  BOOST_TEST(relative_error(got, matmul(x, transpose(w, 0, 1))) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(half_types_and_f64) {
  for (DType t : {DType::f16, DType::bf16, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Tensor a = randn({9, 33}).to(t), b = randn({33, 17}).to(t);
      Tensor got = matmul(dev(a), dev(b));
      BOOST_TEST(last_spec().compute ==
                 (t == DType::f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F));
      BOOST_TEST(relative_error(got, matmul(a, b)) <= tolerance(t));
    }
  }
}

BOOST_AUTO_TEST_CASE(what_cublaslt_does_not_take_runs_the_generated_gemm) {
  // Integers, and a view whose last dim is strided, are the generated GEMM's.
  Tensor ai = randint(-3, 3, {4, 5}), bi = randint(-3, 3, {5, 2});
  auto calls = lt_stats().calls.load();
  Tensor got = matmul(dev(ai), dev(bi));
  BOOST_TEST(lt_stats().calls.load() == calls);
  BOOST_TEST(relative_error(got.to(DType::f64), matmul(ai, bi).to(DType::f64)) == 0.0);
  // b broadcast over the first of two batch dims: its batches are not one stride apart.
  Tensor a4 = randn({2, 3, 4, 6}), b3 = randn({3, 6, 5});
  jit::codegen::LtForward q;
  q.a = dev(a4), q.b = dev(b3);
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(q), "batch dims do not collapse"));
  BOOST_TEST(relative_error(matmul(q.a, q.b), matmul(a4, b3)) <= 1e-5);
  Tensor big = randn({4, 10});
  Tensor strided = slice(dev(big), 1, 0, 10, 2);  // [4, 5], strides (10, 2)
  jit::codegen::LtForward p;
  p.a = strided, p.b = dev(randn({5, 3}));
  std::string why = jit::codegen::lt_rule_failure(p);
  BOOST_TEST(contains(why, "neither row- nor column-major"), why);
  Tensor w = randn({5, 3}, DType::f32);
  calls = lt_stats().calls.load();
  got = matmul(strided, dev(w));
  BOOST_TEST(lt_stats().calls.load() == calls);  // the generated GEMM, not the library
  BOOST_TEST(got.shape() == (Shape{4, 3}));
  // Its values against the CPU's product of the same strided view.
  BOOST_TEST(relative_error(got, matmul(slice(big, 1, 0, 10, 2), w)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(forward_epilogues_with_aux) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu_tanh})
      for (bool aux : {false, true}) {
        if (aux && act == Activation::none) continue;
        BOOST_TEST_CONTEXT(dtype_name(t)
                           << " " << jit::codegen::activation_name(act) << " aux " << aux) {
          Tensor x = randn({2, 5, 24}).to(t), w = randn({16, 24}).to(t), b = randn({16}).to(t);
          jit::codegen::LtForward p;
          p.a = dev(x);
          p.b = transpose(dev(w), 0, 1);
          p.bias = dev(b);
          p.act = act;
          p.save_aux = aux;
          std::string why;
          auto r = jit::codegen::try_lt_forward(p, &why);
          BOOST_REQUIRE_MESSAGE(r.has_value(), why);
          lt::MatmulSpec s = last_spec();
          BOOST_TEST(static_cast<int>(s.epilogue) ==
                     test::expected_forward_epilogue(true, act, aux));
          BOOST_TEST(s.bias == reinterpret_cast<cuda::DevicePtr>(p.bias.raw_data()));
          BOOST_TEST(s.m() == 16u);
          BOOST_TEST(s.n() == 10u);  // the batch dim folds into the rows
          BOOST_TEST(s.d.batch_count == 1);
          Tensor pre =
              matmul(x.to(DType::f32), transpose(w.to(DType::f32), 0, 1)) + b.to(DType::f32);
          BOOST_TEST(relative_error(r->out.to(DType::f32), act_ref(pre, act)) <= tolerance(t));
          if (!aux) continue;
          BOOST_TEST(s.aux == reinterpret_cast<cuda::DevicePtr>(r->aux.raw_data()));
          if (act == Activation::gelu_tanh) {
            BOOST_TEST(s.aux_ld == 16);
            BOOST_TEST(relative_error(r->aux.to(DType::f32), pre) <= tolerance(t));
          } else {
            BOOST_TEST(s.aux_ld == 128);  // bits, padded to cuBLASLt's multiple of 128
            // Bit (row * 128 + feature) of the mask is set where the pre-activation is > 0.
            Tensor mask = r->aux.to(Device::cpu());
            auto bytes = static_cast<const std::uint8_t*>(mask.raw_data());
            Tensor pre_cpu = pre.reshape({10, 16});
            auto pv = static_cast<const float*>(pre_cpu.contiguous().raw_data());
            int wrong = 0;
            for (int row = 0; row < 10; ++row)
              for (int f = 0; f < 16; ++f) {
                int bit = row * 128 + f;
                bool on = bytes[bit / 8] >> (bit % 8) & 1;
                if (std::abs(pv[row * 16 + f]) > 0.05 && on != (pv[row * 16 + f] > 0)) ++wrong;
              }
            BOOST_TEST(wrong == 0);
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(documented_rules_name_themselves) {
  Tensor x = dev(randn({4, 12})), w = dev(randn({12, 6}));
  jit::codegen::LtForward p;
  p.a = x, p.b = w, p.act = Activation::gelu_tanh, p.save_aux = true;
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "not a multiple of 8"));
  p.save_aux = false;
  BOOST_TEST(jit::codegen::lt_rule_failure(p) == "");
  Tensor storage = dev(randn({7}));
  p.bias = slice(storage, 0, 1, 7, 1);  // 4 bytes past a 256-byte boundary
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "16-byte aligned"));
  p.bias = dev(randn({6}));
  p.a = x.to(DType::f64), p.b = w.to(DType::f64), p.bias = p.bias.to(DType::f64);
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "f64 with an epilogue"));
  p.a = x, p.b = w.to(DType::f16), p.bias = {};
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "differ"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blaslt_compiled)

BOOST_AUTO_TEST_CASE(linear_bias_activation_is_one_library_call) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int act = 0; act < 3; ++act) {
      BOOST_TEST_CONTEXT(dtype_name(t) << " activation " << act) {
        Tensor x = randn({2, 6, 32}).to(t), w = randn({24, 32}).to(t), b = randn({24}).to(t);
        auto fn = [act](const Tensor& x, const Tensor& w, const Tensor& b) {
          Tensor y = linear(x, w, b);
          return act == 0 ? y : act == 1 ? relu(y) : gelu(y, GeluApproximation::tanh);
        };
        auto f = jit::compile(fn);
        Tensor xd = dev(x), wd = dev(w), bd = dev(b);
        (void)f(xd, wd, bd);
        auto calls = lt_stats().calls.load();
        auto launches = jit::codegen::launch_stats().launches.load();
        Tensor got = f(xd, wd, bd);
        BOOST_TEST(lt_stats().calls.load() == calls + 1);
        BOOST_TEST(jit::codegen::launch_stats().launches.load() == launches);  // 0 kernels
        lt::MatmulSpec s = last_spec();
        const cublasLtEpilogue_t want[] = {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                                           CUBLASLT_EPILOGUE_GELU_BIAS};
        BOOST_TEST(s.epilogue == want[act]);
        BOOST_TEST(s.bias == reinterpret_cast<cuda::DevicePtr>(bd.raw_data()));
        BOOST_TEST(s.trans_a == CUBLAS_OP_T);  // the weight, not a transposed copy
        BOOST_TEST(s.a.type == (t == DType::f32   ? CUDA_R_32F
                                : t == DType::f16 ? CUDA_R_16F
                                                  : CUDA_R_16BF));
        BOOST_TEST(s.compute == CUBLAS_COMPUTE_32F);
        BOOST_TEST(contains(f.explain(), "cuBLASLt " + lt::epilogue_name(want[act])), f.explain());
        Tensor ref = fn(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32));
        BOOST_TEST(relative_error(got.to(DType::f32), ref) <= tolerance(t));
      }
    }
}

BOOST_AUTO_TEST_CASE(exact_gelu_keeps_the_generated_epilogue_and_says_why) {
  setenv("KILN_LOG", "fusion", 1);
  reload_log_settings();
  Tensor x = randn({4, 16}), w = randn({8, 16}), b = randn({8});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) { return gelu(linear(x, w, b)); };
  auto f = jit::compile(fn);
  Tensor got;
  std::string err = kiln::test::capture_output(2, [&] { got = f(dev(x), dev(w), dev(b)); });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(contains(err, "GEMM + generated epilogue kernel"), err);
  BOOST_TEST(contains(err, "exact-erf gelu"), err);
  BOOST_TEST(relative_error(got, fn(x, w, b)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_per_call_rule_failure_falls_back_to_the_generated_kernels) {
  // The bias is a view 4 bytes into its storage: not 16-byte aligned, so this call falls back.
  Tensor x = randn({4, 16}), w = randn({8, 16}), bb = randn({9});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) { return relu(linear(x, w, b)); };
  auto f = jit::compile(fn);
  Tensor bias = slice(dev(bb), 0, 1, 9, 1);
  auto fallbacks = lt_stats().fallbacks.load();
  Tensor got = f(dev(x), dev(w), bias);
  BOOST_TEST(lt_stats().fallbacks.load() > fallbacks);
  BOOST_TEST(relative_error(got, fn(x, w, slice(bb, 0, 1, 9, 1))) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_product_read_elsewhere_keeps_its_own_call) {
  Tensor x = randn({4, 16}), w = randn({8, 16}), b = randn({8});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = matmul(x, transpose(w, 0, 1));
    return relu(y + b) + y;
  };
  auto f = jit::compile(fn);
  Tensor got = f(dev(x), dev(w), dev(b));
  BOOST_TEST(!contains(f.explain(), "cuBLASLt RELU"), f.explain());
  BOOST_TEST(relative_error(got, fn(x, w, b)) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blaslt_backward)

// An MLP layer pair y = linear(act(linear(x, w1, b1)), w2, b2) differentiated with four library
// calls (BGRADB, D*_BGRAD, two plain) against CPU autograd.
BOOST_AUTO_TEST_CASE(mlp_gradients_come_out_of_the_gemms) {
  namespace cg = jit::codegen;
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Activation act : {Activation::relu, Activation::gelu_tanh}) {
      BOOST_TEST_CONTEXT(dtype_name(t) << " " << cg::activation_name(act)) {
        Tensor x = randn({12, 16}).to(t), w1 = randn({24, 16}).to(t), b1 = randn({24}).to(t),
               w2 = randn({8, 24}).to(t), b2 = randn({8}).to(t), gy = randn({12, 8}).to(t);
        // CPU reference in f32.
        std::vector<Tensor> ref;
        for (const Tensor& p : {x, w1, b1, w2, b2})
          ref.push_back(p.to(DType::f32).requires_grad_());
        Tensor pre = linear(ref[0], ref[1], ref[2]);
        Tensor y = linear(act_ref(pre, act), ref[3], ref[4]);
        y.backward(gy.to(DType::f32));
        // Forward: GELU/RELU_AUX_BIAS then BIAS.
        cg::LtForward f1;
        f1.a = dev(x), f1.b = transpose(dev(w1), 0, 1), f1.bias = dev(b1), f1.act = act;
        f1.save_aux = true;
        std::string why;
        auto l1 = cg::try_lt_forward(f1, &why);
        BOOST_REQUIRE_MESSAGE(l1.has_value(), why);
        cg::LtForward f2;
        f2.a = l1->out, f2.b = transpose(dev(w2), 0, 1), f2.bias = dev(b2);
        auto l2 = cg::try_lt_forward(f2, &why);
        BOOST_REQUIRE_MESSAGE(l2.has_value(), why);
        BOOST_TEST(relative_error(l2->out.to(DType::f32), y.detach()) <= tolerance(t));
        Tensor g = dev(gy);
        // dW2 = gy^T h, db2 = sum of gy's rows: BGRADB.
        cg::LtBackward d2;
        d2.a = transpose(g, 0, 1), d2.b = l1->out, d2.bias_grad = true;
        auto r2 = cg::try_lt_backward(d2, &why);
        BOOST_REQUIRE_MESSAGE(r2.has_value(), why);
        BOOST_TEST(last_spec().epilogue == CUBLASLT_EPILOGUE_BGRADB);
        // dz1 = (gy @ w2) * act'(pre), db1 = sum(dz1): DRELU_BGRAD / DGELU_BGRAD on the aux.
        cg::LtBackward dz;
        dz.a = g, dz.b = dev(w2), dz.act = act, dz.aux = l1->aux, dz.aux_ld = l1->aux_ld;
        dz.bias_grad = true;
        auto rz = cg::try_lt_backward(dz, &why);
        BOOST_REQUIRE_MESSAGE(rz.has_value(), why);
        lt::MatmulSpec s = last_spec();
        BOOST_TEST(s.epilogue == (act == Activation::relu ? CUBLASLT_EPILOGUE_DRELU_BGRAD
                                                          : CUBLASLT_EPILOGUE_DGELU_BGRAD));
        BOOST_TEST(s.aux == reinterpret_cast<cuda::DevicePtr>(l1->aux.raw_data()));
        BOOST_TEST(s.aux_ld == l1->aux_ld);
        BOOST_TEST(s.bias == reinterpret_cast<cuda::DevicePtr>(rz->bias_grad.raw_data()));
        // dW1 = dz1^T x and dx = dz1 w1: plain GEMMs.
        cg::LtBackward d1;
        d1.a = transpose(rz->out, 0, 1), d1.b = dev(x);
        auto r1 = cg::try_lt_backward(d1, &why);
        BOOST_REQUIRE_MESSAGE(r1.has_value(), why);
        cg::LtBackward dx;
        dx.a = rz->out, dx.b = dev(w1);
        auto rx = cg::try_lt_backward(dx, &why);
        BOOST_REQUIRE_MESSAGE(rx.has_value(), why);
        double tol = t == DType::f32 ? 5e-5 : t == DType::f16 ? 1e-2 : 5e-2;
        BOOST_TEST(relative_error(r2->out.to(DType::f32), ref[3].grad()) <= tol);
        BOOST_TEST(relative_error(r2->bias_grad.to(DType::f32), ref[4].grad()) <= tol);
        BOOST_TEST(relative_error(rz->bias_grad.to(DType::f32), ref[2].grad()) <= tol);
        BOOST_TEST(relative_error(r1->out.to(DType::f32), ref[1].grad()) <= tol);
        BOOST_TEST(relative_error(rx->out.to(DType::f32), ref[0].grad()) <= tol);
      }
    }
}

BOOST_AUTO_TEST_CASE(a_mismatched_aux_is_a_named_rule) {
  namespace cg = jit::codegen;
  cg::LtBackward d;
  d.a = dev(randn({4, 8})), d.b = dev(randn({8, 16})), d.act = Activation::gelu_tanh;
  d.aux = dev(randn({4, 8})), d.aux_ld = 16;
  std::string why;
  BOOST_TEST(!cg::try_lt_backward(d, &why).has_value());
  BOOST_TEST(contains(why, "aux does not match"), why);
}

BOOST_AUTO_TEST_SUITE_END()

// A cast of an f16/bf16 product to f32 (autocast's weight gradients, f32 results of 16-bit
// matmuls) is the call's output type: cuBLASLt writes f32 from its f32 accumulator, so the
// 16-bit product is neither rounded nor stored and read back by a cast kernel.
BOOST_AUTO_TEST_SUITE(blaslt_widening)

// The f64 product of the operands as the device holds them (already rounded to `t`).
Tensor exact_product(const Tensor& a, const Tensor& b) {
  return matmul(a.to(DType::f64), b.to(DType::f64));
}

BOOST_AUTO_TEST_CASE(a_widening_cast_is_the_calls_output_type) {
  const std::int64_t M = 6, K = 40, N = 24;
  for (DType t : {DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Tensor a = randn({M, K}).to(t), b = randn({K, N}).to(t);
      auto fn = [](const Tensor& a, const Tensor& b) { return cast(matmul(a, b), DType::f32); };
      auto f = jit::compile(fn);
      Tensor ad = dev(a), bd = dev(b);
      (void)f(ad, bd);
      const auto calls = lt_stats().calls.load(), read = lt_stats().bytes_read.load(),
                 written = lt_stats().bytes_written.load();
      const auto launches = jit::codegen::launch_stats().launches.load();
      Tensor got = f(ad, bd);
      BOOST_TEST(lt_stats().calls.load() == calls + 1);
      BOOST_TEST(jit::codegen::launch_stats().launches.load() == launches);  // no cast kernel
      // The operands at 2 bytes an element, the product written once at 4.
      BOOST_TEST(lt_stats().bytes_read.load() - read == (M * K + K * N) * 2);
      BOOST_TEST(lt_stats().bytes_written.load() - written == M * N * 4);
      lt::MatmulSpec s = last_spec();
      BOOST_TEST(s.a.type == (t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF));
      BOOST_TEST(s.d.type == CUDA_R_32F);
      BOOST_TEST(s.c.type == CUDA_R_32F);
      BOOST_TEST(s.epilogue == CUBLASLT_EPILOGUE_DEFAULT);
      BOOST_TEST(contains(f.explain(), "writing f32"), f.explain());
      BOOST_TEST((got.dtype() == DType::f32));
      // Not rounded to 16 bits: within f32's accuracy of the exact product, which the
      // 16-bit product rounded and widened is not.
      Tensor want = exact_product(a, b);
      BOOST_TEST(relative_error(got, want) <= 1e-5);
      BOOST_TEST(relative_error(matmul(a, b).to(DType::f32), want) > 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_weight_gradient_comes_out_of_the_gemm_in_f32) {
  // The autocast pattern: f32 weights cast to bf16 for the matmul, so the weight's gradient is
  // the bf16 product dyᵀ x cast back to f32.
  Tensor x = randn({2, 8, 32}), w = randn({16, 32}), g = randn({2, 8, 16});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& g) {
    Tensor y = matmul(cast(x, DType::bf16), transpose(cast(w, DType::bf16), 0, 1));
    return sum(cast(y, DType::f32) * g);
  };
  auto f = jit::compile(fn);
  Tensor xd = dev(x), gd = dev(g), wd = dev(w);
  wd.requires_grad_();
  Tensor loss;
  for (int i = 0; i < 2; ++i) {
    wd.set_grad(Tensor());
    loss = f(xd, wd, gd);
    loss.backward();
  }
  BOOST_TEST(contains(f.explain(), "cuBLASLt DEFAULT: matmul + cast, writing f32"), f.explain());
  // dW = cast(g, bf16)ᵀ @ cast(x, bf16) over the 16 rows, exactly in f64.
  Tensor gb = g.to(DType::bf16).reshape({16, 16}), xb = x.to(DType::bf16).reshape({16, 32});
  Tensor want = exact_product(transpose(gb, 0, 1), xb);
  BOOST_TEST((wd.grad().dtype() == DType::f32));
  BOOST_TEST(relative_error(wd.grad(), want) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(an_autocast_bias_is_the_epilogues_bias) {
  // f32 parameters cast to bf16 (autocast's linear): the bias cast is a kernel of its own, so
  // matmul + bias + gelu is one GELU_BIAS call reading it, not a GEMM and an epilogue kernel.
  Tensor x = randn({2, 6, 32}), w = randn({24, 32}), b = randn({24});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = matmul(cast(x, DType::bf16), transpose(cast(w, DType::bf16), 0, 1));
    return gelu(y + cast(b, DType::bf16), GeluApproximation::tanh);
  };
  auto f = jit::compile(fn);
  Tensor xd = dev(x), wd = dev(w), bd = dev(b);
  (void)f(xd, wd, bd);
  const auto calls = lt_stats().calls.load(), written = lt_stats().bytes_written.load();
  Tensor got = f(xd, wd, bd);
  BOOST_TEST(lt_stats().calls.load() == calls + 1);
  BOOST_TEST(last_spec().epilogue == CUBLASLT_EPILOGUE_GELU_BIAS);
  BOOST_TEST(lt_stats().bytes_written.load() - written == 2 * 6 * 24 * 2);  // the output, once
  BOOST_TEST(contains(f.explain(), "cuBLASLt GELU_BIAS"), f.explain());
  // Against the CPU's bf16 ops on the same rounded operands.
  BOOST_TEST(relative_error(got.to(DType::f32), fn(x, w, b).to(DType::f32)) <=
             tolerance(DType::bf16));
}

BOOST_AUTO_TEST_CASE(an_autocast_gelu_layers_bias_gradient_comes_out_of_the_gemm) {
  // autocast's MLP: the gradient through gelu_tanh and its bias's gradient (summed in bf16, cast
  // to the f32 parameter's dtype) are one DGELU_BGRAD call; the cast of the 64 sums is left.
  // Weights at a layer's scale (1/sqrt(fan-in)), so that pre-activations are O(1).
  Tensor x = randn({2, 8, 16}), w1 = randn({64, 16}) * 0.25, b1 = randn({64}),
         w2 = randn({8, 64}) * 0.125, g = randn({2, 8, 8});
  auto fn = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
               const Tensor& g) {
    auto lin = [](const Tensor& a, const Tensor& w) {
      return matmul(a, transpose(cast(w, DType::bf16), 0, 1));
    };
    Tensor h = gelu(lin(cast(x, DType::bf16), w1) + cast(b1, DType::bf16), GeluApproximation::tanh);
    return sum(cast(lin(h, w2), DType::f32) * g);
  };
  auto f = jit::compile(fn);
  std::vector<Tensor> params = {dev(w1), dev(b1), dev(w2)};
  for (Tensor& p : params) p.requires_grad_();
  for (int i = 0; i < 2; ++i) {
    for (Tensor& p : params) p.set_grad(Tensor());
    f(dev(x), params[0], params[1], params[2], dev(g)).backward();
  }
  BOOST_TEST(contains(f.explain(), "cuBLASLt DGELU_BGRAD"), f.explain());
  // Against CPU autograd in f64 on the operands rounded to bf16 as the device reads them (the
  // device rounds intermediates to bf16 too: h, its pre-activation and the gradient dz).
  auto f64_of_bf16 = [](const Tensor& t) { return t.to(DType::bf16).to(DType::f64); };
  std::vector<Tensor> ref = {f64_of_bf16(w1), f64_of_bf16(b1), f64_of_bf16(w2)};
  for (Tensor& p : ref) p.requires_grad_();
  Tensor h =
      gelu(matmul(f64_of_bf16(x), transpose(ref[0], 0, 1)) + ref[1], GeluApproximation::tanh);
  sum(matmul(h, transpose(ref[2], 0, 1)) * g.to(DType::f64)).backward();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    BOOST_TEST((params[i].grad().dtype() == DType::f32));
    double err = relative_error(params[i].grad(), ref[i].grad());
    BOOST_TEST(err <= 3e-2, "parameter " << i << ": " << err);
  }
}

BOOST_AUTO_TEST_CASE(what_does_not_widen_names_its_rule) {
  Tensor x = dev(randn({4, 16})), w = dev(randn({16, 8}));
  jit::codegen::LtForward p;
  p.a = x, p.b = w, p.out_dtype = DType::f32;
  BOOST_TEST(jit::codegen::lt_rule_failure(p) == "");  // f32 as it is
  p.out_dtype = DType::bf16;
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "widens only f16/bf16 to f32"));
  p.a = x.to(DType::bf16), p.b = w.to(DType::bf16), p.out_dtype = DType::f32;
  BOOST_TEST(jit::codegen::lt_rule_failure(p) == "");
  p.bias = dev(randn({8})).to(DType::bf16);
  BOOST_TEST(contains(jit::codegen::lt_rule_failure(p), "with a bias"));
  // In a graph, a 16-bit bias before the cast keeps the generated epilogue, and says why.
  setenv("KILN_LOG", "fusion", 1);
  reload_log_settings();
  Tensor a = randn({4, 16}).to(DType::bf16), b = randn({16, 8}).to(DType::bf16),
         bias = randn({8}).to(DType::bf16);
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& bias) {
    return cast(matmul(a, b) + bias, DType::f32);
  };
  auto f = jit::compile(fn);
  Tensor got;
  std::string err = kiln::test::capture_output(2, [&] { got = f(dev(a), dev(b), dev(bias)); });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(contains(err, "a cast to f32 after a bf16 bias"), err);
  BOOST_TEST(relative_error(got, fn(a, b, bias)) <= tolerance(DType::bf16));
}

BOOST_AUTO_TEST_SUITE_END()
