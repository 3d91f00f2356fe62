// Eager autograd on cuBLASLt epilogues (the virtual GPU's cuBLASLt here): linear(x, W, b, act)
// and feed_forward / nn::FeedForward as library calls with their own backward nodes. References
// are independent of the library path: kiln's CPU composite (matmul + add + activation under CPU
// autograd, in f32) and finite differences in f64. Counts read lt_stats() (library calls) and
// launch_stats() (generated kernels).
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/nn.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "jit/aot/aot_program.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda_backend.h"
#include "support/autograd_leaves.h"
#include "support/device_compare.h"
#include "support/lt_epilogue_table.h"
#include "support/reference.h"

using namespace kiln;
using jit::codegen::lt_stats;
using test::grad_fn_name;
using test::leaf;
using test::relative_error;
namespace lt = kiln::cuda::blaslt;

namespace {

const Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu_tanh};

// Library calls and generated-kernel launches made by `run`.
struct Counts {
  std::int64_t calls = 0, kernels = 0;
};
template <typename Run>
Counts count(Run&& run) {
  auto calls = lt_stats().calls.load();
  auto kernels = jit::codegen::launch_stats().launches.load();
  run();
  return {lt_stats().calls.load() - calls, jit::codegen::launch_stats().launches.load() - kernels};
}

double forward_tolerance(DType t) {
  return t == DType::f16 ? 4e-3 : t == DType::bf16 ? 3e-2 : 1e-5;
}
double grad_tolerance(DType t) {
  return t == DType::f16 ? 1e-2 : t == DType::bf16 ? 5e-2 : 5e-5;
}

lt::MatmulSpec last_spec() {
  return lt::service(cuda::backend()).last_call();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(blaslt_linear)

BOOST_AUTO_TEST_CASE(linear_matches_the_cpu_composite_forward_and_backward) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Activation act : kActivations)
      for (bool with_bias : {true, false}) {
        BOOST_TEST_CONTEXT(dtype_name(t) << " " << activation_name(act) << " bias " << with_bias) {
          Tensor x0 = randn({2, 5, 24}).to(t), w0 = randn({16, 24}).to(t), b0 = randn({16}).to(t),
                 gy = randn({2, 5, 16}).to(t);
          // Reference: the composite on the CPU, in f32, from the same rounded values.
          Tensor x = leaf(x0, DType::f32, Device::cpu()), w = leaf(w0, DType::f32, Device::cpu()),
                 b = with_bias ? leaf(b0, DType::f32, Device::cpu()) : Tensor();
          Tensor want = linear(x, w, b, act);
          want.backward(gy.to(DType::f32));
          Tensor xd = leaf(x0, t, Device::cuda()), wd = leaf(w0, t, Device::cuda()),
                 bd = with_bias ? leaf(b0, t, Device::cuda()) : Tensor();
          Tensor got;
          Counts forward = count([&] { got = linear(xd, wd, bd, act); });
          BOOST_TEST(forward.calls == 1);
          BOOST_TEST(forward.kernels == 0);
          BOOST_TEST(grad_fn_name(got) == "LinearBackward");
          // With grad required, GELU saves its pre-activation; ReLU's mask is the output itself.
          BOOST_TEST(static_cast<int>(last_spec().epilogue) ==
                     test::expected_forward_epilogue(with_bias, act, act == Activation::gelu_tanh));
          Counts backward = count([&] { got.backward(gy.to(Device::cuda())); });
          // dW (with db from the same GEMM: BGRADB) and dX; only the activation's derivative
          // is a generated kernel.
          BOOST_TEST(backward.calls == 2);
          if (act == Activation::none) BOOST_TEST(backward.kernels == 0);
          BOOST_TEST(relative_error(got.detach().to(DType::f32), want.detach()) <=
                     forward_tolerance(t));
          BOOST_TEST(relative_error(xd.grad().to(DType::f32), x.grad()) <= grad_tolerance(t));
          BOOST_TEST(relative_error(wd.grad().to(DType::f32), w.grad()) <= grad_tolerance(t));
          if (with_bias)
            BOOST_TEST(relative_error(bd.grad().to(DType::f32), b.grad()) <= grad_tolerance(t));
        }
      }
}

BOOST_AUTO_TEST_CASE(only_the_gradients_asked_for_are_computed) {
  Tensor x0 = randn({6, 8}), w0 = randn({4, 8}), b0 = randn({4}), gy = randn({6, 4});
  // A frozen weight: dX alone, one GEMM.
  Tensor x = leaf(x0, DType::f32, Device::cuda()), w = w0.to(Device::cuda());
  Tensor y = linear(x, w, b0.to(Device::cuda()), Activation::none);
  Counts c = count([&] { y.backward(gy.to(Device::cuda())); });
  BOOST_TEST(c.calls == 1);
  BOOST_TEST(relative_error(x.grad(), matmul(gy, w0)) <= 1e-5);
  // Only the bias trains: no GEMM at all, a column sum of dy.
  Tensor b = leaf(b0, DType::f32, Device::cuda());
  y = linear(x0.to(Device::cuda()), w0.to(Device::cuda()), b, Activation::none);
  c = count([&] { y.backward(gy.to(Device::cuda())); });
  BOOST_TEST(c.calls == 0);
  BOOST_TEST(relative_error(b.grad(), gy.sum({0})) <= 1e-5);
}

// cuBLASLt's epilogues are documented for f32, f16 and bf16 storage with f32 compute (the
// datatypes table of cublasLtMatmul), and kiln's rules lower f64 only as a plain GEMM
// (lt_matmul.cpp: "f64 with an epilogue"). So the library node is gradchecked on the f64 plain
// GEMMs (no bias, no activation); f64 with a bias or an activation takes the composite, which
// is gradchecked here too.
BOOST_AUTO_TEST_CASE(gradcheck_in_f64_through_the_library) {
  Generator gen(7);
  auto f64_leaf = [&](const Shape& shape) {
    Tensor t = rand(shape, DType::f64, &gen) * 2 - 1;
    t.requires_grad_();
    return t;
  };
  Tensor x = f64_leaf({3, 4}), w = f64_leaf({5, 4}), b = f64_leaf({5}), w2 = f64_leaf({2, 5});
  auto cuda = [](const Tensor& t) { return t.to(Device::cuda()); };
  Tensor probe = linear(cuda(x), cuda(w));
  BOOST_TEST(grad_fn_name(probe) == "LinearBackward");
  auto plain = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return linear(cuda(in[0]), cuda(in[1])).to(Device::cpu());
      },
      {x, w});
  BOOST_TEST(plain.ok, plain.report);
  Tensor probe_ff = feed_forward(cuda(x), cuda(w), {}, cuda(w2), {}, Activation::none);
  BOOST_TEST(grad_fn_name(probe_ff) == "FeedForwardBackward");
  auto ff = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return feed_forward(cuda(in[0]), cuda(in[1]), {}, cuda(in[2]), {}, Activation::none)
            .to(Device::cpu());
      },
      {x, w, w2});
  BOOST_TEST(ff.ok, ff.report);
  for (Activation act : {Activation::relu, Activation::gelu_tanh}) {
    BOOST_TEST_CONTEXT(activation_name(act)) {
      Tensor y = linear(cuda(x), cuda(w), cuda(b), act);
      BOOST_TEST(grad_fn_name(y) != "LinearBackward");  // the composite
      auto r = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return linear(cuda(in[0]), cuda(in[1]), cuda(in[2]), act).to(Device::cpu());
          },
          {x, w, b});
      BOOST_TEST(r.ok, r.report);
    }
  }
}

// create_graph through the library nodes: their backward is then made of differentiable ops,
// so second derivatives match the CPU composite's.
BOOST_AUTO_TEST_CASE(double_backward_matches_the_composite) {
  for (Activation act : kActivations)
    for (bool ff : {false, true}) {
      BOOST_TEST_CONTEXT(activation_name(act) << (ff ? " feed_forward" : " linear")) {
        // Small values keep the fourth-order sums within f32's reach of both summation orders;
        // 8 hidden features meet GELU's aux rule.
        Tensor x0 = randn({4, 8}) * 0.3, w0 = randn({8, 8}) * 0.3, b0 = randn({8}) * 0.3,
               w20 = randn({3, 8}) * 0.3, b20 = randn({3}) * 0.3;
        std::vector<Tensor> grads_by_device[2];
        for (int d = 0; d < 2; ++d) {
          Device dev = d ? Device::cuda() : Device::cpu();
          Tensor x = leaf(x0, DType::f32, dev), w = leaf(w0, DType::f32, dev),
                 b = leaf(b0, DType::f32, dev), w2 = leaf(w20, DType::f32, dev),
                 b2 = leaf(b20, DType::f32, dev);
          Tensor y = ff ? feed_forward(x, w, b, w2, b2, act) : linear(x, w, b, act);
          if (d) BOOST_TEST(grad_fn_name(y) == (ff ? "FeedForwardBackward" : "LinearBackward"));
          Tensor gx = autograd::grad({(y * y).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
          (gx * gx).sum().backward();
          for (const Tensor& p : {x, w, b, w2, b2})
            grads_by_device[d].push_back(p.grad().defined() ? p.grad() : zeros_like(p));
          grads_by_device[d].push_back(gx.detach());
        }
        for (std::size_t i = 0; i < grads_by_device[0].size(); ++i)
          BOOST_TEST(relative_error(grads_by_device[1][i], grads_by_device[0][i]) <= 1e-4,
                     "gradient " << i);
      }
    }
}

BOOST_AUTO_TEST_CASE(a_layout_the_rules_refuse_takes_the_composite) {
  // x whose last dim is strided (every other column), and a bias 4 bytes past an aligned
  // address: neither goes to cuBLASLt, and the composite gives the same values and gradients.
  Tensor wide = randn({6, 16}), w0 = randn({4, 8}), bb = randn({5}), gy = randn({6, 4});
  for (int which = 0; which < 2; ++which) {
    BOOST_TEST_CONTEXT((which == 0 ? "strided x" : "misaligned bias")) {
      Tensor xc = leaf(wide, DType::f32, Device::cpu()), wc = leaf(w0, DType::f32, Device::cpu()),
             bc = leaf(bb, DType::f32, Device::cpu());
      Tensor xd = leaf(wide, DType::f32, Device::cuda()), wd = leaf(w0, DType::f32, Device::cuda()),
             bd = leaf(bb, DType::f32, Device::cuda());
      auto pick_x = [&](const Tensor& x) {
        return which == 0 ? slice(x, 1, 0, 16, 2) : slice(x, 1, 0, 8, 1);
      };
      auto pick_b = [&](const Tensor& b) {
        return which == 1 ? slice(b, 0, 1, 5, 1) : slice(b, 0, 0, 4, 1);
      };
      Tensor want = linear(pick_x(xc), wc, pick_b(bc), Activation::gelu_tanh);
      want.backward(gy);
      auto fallbacks = lt_stats().fallbacks.load();
      Tensor got = linear(pick_x(xd), wd, pick_b(bd), Activation::gelu_tanh);
      BOOST_TEST(lt_stats().fallbacks.load() > fallbacks);
      BOOST_TEST(grad_fn_name(got) != "LinearBackward");
      got.backward(gy.to(Device::cuda()));
      BOOST_TEST(relative_error(got.detach(), want.detach()) <= 1e-5);
      for (const auto& [d, c] :
           std::vector<std::pair<Tensor, Tensor>>{{xd, xc}, {wd, wc}, {bd, bc}})
        BOOST_TEST(relative_error(d.grad(), c.grad()) <= 5e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_in_place_change_of_a_saved_input_is_an_error) {
  Tensor x = randn({4, 8}).to(Device::cuda()), b = randn({8}).to(Device::cuda());
  Tensor w = leaf(randn({8, 8}), DType::f32, Device::cuda());
  Tensor gy = randn({4, 8}).to(Device::cuda());
  Tensor y = linear(x, w, b, Activation::gelu_tanh);
  BOOST_TEST(grad_fn_name(y) == "LinearBackward");
  x.mul_(2);  // dW reads x
  KILN_CHECK_THROWS(y.backward(gy), AutogradError, "modified by an in-place operation",
                    "LinearBackward");
  Tensor w2 = leaf(randn({3, 8}), DType::f32, Device::cuda());
  Tensor x2 = leaf(randn({4, 8}), DType::f32, Device::cuda());
  Tensor w1 = randn({8, 8}).to(Device::cuda());
  Tensor z = feed_forward(x2, w1, b, w2, {}, Activation::relu);
  BOOST_TEST(grad_fn_name(z) == "FeedForwardBackward");
  w1.add_(w1);  // dX reads W1
  KILN_CHECK_THROWS(z.backward(randn({4, 3}).to(Device::cuda())), AutogradError,
                    "modified by an in-place operation", "FeedForwardBackward");
}

BOOST_AUTO_TEST_CASE(errors_name_linear_and_the_shapes_on_every_device) {
  for (Device dev : {Device::cpu(), Device::cuda()}) {
    BOOST_TEST_CONTEXT(dev.str()) {
      Tensor x = zeros({2, 3}).to(dev), w = zeros({4, 5}).to(dev), w3 = zeros({4, 3}).to(dev);
      KILN_CHECK_THROWS(linear(x, w, {}, Activation::relu), ShapeError, "linear", "[2, 3]",
                        "[4, 5]");
      KILN_CHECK_THROWS(linear(x, w3, zeros({3}).to(dev), Activation::gelu_tanh), ShapeError,
                        "linear", "bias", "[3]", "[4, 3]");
      KILN_CHECK_THROWS(feed_forward(x, w3, {}, zeros({2, 5}).to(dev), {}), ShapeError,
                        "feed_forward", "[2, 5]", "[4, 3]");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_trace_records_the_primitives) {
  // Compiled, linear(..., gelu_tanh) is matmul + add + gelu_tanh in the graph, which the
  // epilogue lowering turns back into one GELU_BIAS call.
  Tensor x = randn({4, 16}), w = randn({8, 16}), b = randn({8});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return linear(x, w, b, Activation::gelu_tanh);
  };
  auto f = jit::compile(fn);
  Tensor got = f(x.to(Device::cuda()), w.to(Device::cuda()), b.to(Device::cuda()));
  BOOST_TEST(f.explain().find("cuBLASLt GELU_BIAS") != std::string::npos, f.explain());
  BOOST_TEST(relative_error(got, gelu(linear(x, w, b), GeluApproximation::tanh)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_compiled_linear_backward_gets_the_bias_gradient_from_bgradb) {
  // The backward of x @ Wᵀ + b over a 3-D input: dW = dYᵀ @ X and db = dY summed over every
  // row. BGRADB gives db from the dW call, so the backward launches no kernel; references are
  // eager f64 on the CPU.
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return matmul(x, w.transpose(0, 1)) + b;
  };
  auto f = jit::compile(fn);
  Tensor x0 = randn({3, 4, 16}), w0 = randn({8, 16}), b0 = randn({8}), gy = randn({3, 4, 8});
  Tensor x = leaf(x0, DType::f64, Device::cpu()), w = leaf(w0, DType::f64, Device::cpu()),
         b = leaf(b0, DType::f64, Device::cpu());
  fn(x, w, b).backward(gy.to(DType::f64));
  Tensor xd = leaf(x0, DType::f32, Device::cuda()), wd = leaf(w0, DType::f32, Device::cuda()),
         bd = leaf(b0, DType::f32, Device::cuda());
  Tensor got = f(xd, wd, bd);
  Counts backward = count([&] { got.backward(gy.to(Device::cuda())); });
  BOOST_TEST(backward.kernels == 0);
  BOOST_TEST(backward.calls == 2);  // dW with db, and dX
  BOOST_TEST(f.core().aot(0)->backward_plan().str().find("cuBLASLt BGRADB") != std::string::npos,
             f.core().aot(0)->backward_plan().str());
  BOOST_TEST(relative_error(xd.grad(), x.grad()) <= 5e-5);
  BOOST_TEST(relative_error(wd.grad(), w.grad()) <= 5e-5);
  BOOST_TEST(relative_error(bd.grad(), b.grad()) <= 5e-5);
}

BOOST_AUTO_TEST_CASE(a_compiled_mlp_backward_takes_gelus_derivative_into_dgelu_bgrad) {
  // Linear, gelu(x, tanh), linear: the hidden gradient dh = dY @ W2 times gelu'(z) with its
  // bias gradient is one DGELU_BGRAD call reading the pre-activation the forward's
  // GELU_AUX_BIAS saved, so the backward launches no kernel. Exact-erf GELU has another
  // derivative: the matcher, which checks the arithmetic on probe values, leaves it a kernel.
  for (auto approximation : {GeluApproximation::tanh, GeluApproximation::none}) {
    auto fn = [approximation](const Tensor& x, const Tensor& w1, const Tensor& b1,
                              const Tensor& w2) {
      Tensor h = gelu(matmul(x, w1.transpose(0, 1)) + b1, approximation);
      return matmul(h, w2.transpose(0, 1));
    };
    auto f = jit::compile(fn);
    Tensor x0 = randn({2, 4, 16}), w10 = randn({32, 16}) * 0.3, b10 = randn({32}),
           w20 = randn({8, 32}) * 0.3, gy = randn({2, 4, 8});
    Tensor x = leaf(x0, DType::f64, Device::cpu()), w1 = leaf(w10, DType::f64, Device::cpu()),
           b1 = leaf(b10, DType::f64, Device::cpu()), w2 = leaf(w20, DType::f64, Device::cpu());
    fn(x, w1, b1, w2).backward(gy.to(DType::f64));
    Tensor xd = leaf(x0, DType::f32, Device::cuda()), w1d = leaf(w10, DType::f32, Device::cuda()),
           b1d = leaf(b10, DType::f32, Device::cuda()), w2d = leaf(w20, DType::f32, Device::cuda());
    Tensor got = f(xd, w1d, b1d, w2d);
    Counts backward = count([&] { got.backward(gy.to(Device::cuda())); });
    std::string plan = f.core().aot(0)->backward_plan().str();
    bool tanh = approximation == GeluApproximation::tanh;
    BOOST_TEST((plan.find("cuBLASLt DGELU_BGRAD") != std::string::npos) == tanh, plan);
    if (tanh) BOOST_TEST(backward.kernels == 0);
    BOOST_TEST(backward.calls == 4);  // dz with db1, dW1, dX, dW2
    BOOST_TEST(relative_error(xd.grad(), x.grad()) <= 5e-5);
    BOOST_TEST(relative_error(w1d.grad(), w1.grad()) <= 5e-5);
    BOOST_TEST(relative_error(b1d.grad(), b1.grad()) <= 5e-5);
    BOOST_TEST(relative_error(w2d.grad(), w2.grad()) <= 5e-5);
  }
}

BOOST_AUTO_TEST_CASE(a_compiled_function_that_needs_gradients_keeps_the_library_calls) {
  // A PyTorch user's layer, written with the primitives, compiled for training: the forward is
  // one library call and no kernel (GELU_AUX_BIAS writes the output and the pre-activation the
  // backward needs, which the partition saves rather than the bare product); the backward is one
  // kernel (GELU's derivative with the bias gradient's column sum) and the two gradient matmuls (dW
  // computed transposed, so it comes out contiguous and .grad takes it without a copy, as it takes
  // db's reshape of a fresh sum).
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return gelu(matmul(x, w.transpose(0, 1)) + b, GeluApproximation::tanh);
  };
  auto f = jit::compile(fn);
  Tensor x0 = randn({6, 16}), w0 = randn({8, 16}), b0 = randn({8}), gy = randn({6, 8});
  Tensor x = leaf(x0, DType::f32, Device::cpu()), w = leaf(w0, DType::f32, Device::cpu()),
         b = leaf(b0, DType::f32, Device::cpu());
  Tensor want = fn(x, w, b);
  want.backward(gy);
  Tensor xd = leaf(x0, DType::f32, Device::cuda()), wd = leaf(w0, DType::f32, Device::cuda()),
         bd = leaf(b0, DType::f32, Device::cuda());
  Tensor got;
  Counts forward = count([&] { got = f(xd, wd, bd); });
  BOOST_TEST(forward.calls == 1);
  BOOST_TEST(forward.kernels == 0);
  BOOST_TEST(f.explain().find("cuBLASLt GELU_AUX_BIAS") != std::string::npos, f.explain());
  BOOST_TEST(grad_fn_name(got) == "CompiledFunctionBackward(fn)");
  Counts backward = count([&] { got.backward(gy.to(Device::cuda())); });
  BOOST_TEST(backward.calls == 2);
  BOOST_TEST(backward.kernels == 1);
  BOOST_TEST(relative_error(got, want) <= 1e-5);
  BOOST_TEST(relative_error(xd.grad(), x.grad()) <= 5e-5);
  BOOST_TEST(relative_error(wd.grad(), w.grad()) <= 5e-5);
  BOOST_TEST(relative_error(bd.grad(), b.grad()) <= 5e-5);
  // An intermediate the function returns is not folded into a run: the values stay right.
  auto g = jit::compile([](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor z = matmul(x, w.transpose(0, 1)) + b;
    return std::vector<Tensor>{z, relu(z)};
  });
  auto both = g(xd, wd, bd);
  Tensor z = matmul(x0, w0.transpose(0, 1)) + b0;
  BOOST_TEST(relative_error(both[0], z) <= 1e-5);
  BOOST_TEST(relative_error(both[1], relu(z)) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blaslt_feed_forward)

BOOST_AUTO_TEST_CASE(feed_forward_matches_the_cpu_composite) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Activation act : kActivations) {
      BOOST_TEST_CONTEXT(dtype_name(t) << " " << activation_name(act)) {
        std::vector<Tensor> init = {randn({3, 4, 16}), randn({32, 16}), randn({32}), randn({8, 32}),
                                    randn({8})};
        Tensor gy = randn({3, 4, 8}).to(t);
        std::vector<Tensor> ref, dev;
        for (const Tensor& p : init) {
          ref.push_back(leaf(p.to(t), DType::f32, Device::cpu()));
          dev.push_back(leaf(p, t, Device::cuda()));
        }
        // The hidden activation is stored in the dtype on the device: the reference rounds it too.
        Tensor hidden = linear(ref[0], ref[1], ref[2], act).to(t).to(DType::f32);
        Tensor want = linear(hidden, ref[3], ref[4]);
        want.backward(gy.to(DType::f32));
        Tensor got;
        Counts forward =
            count([&] { got = feed_forward(dev[0], dev[1], dev[2], dev[3], dev[4], act); });
        BOOST_TEST(forward.calls == 2);
        BOOST_TEST(forward.kernels == 0);
        BOOST_TEST(last_spec().epilogue == CUBLASLT_EPILOGUE_BIAS);
        Counts backward = count([&] { got.backward(gy.to(Device::cuda())); });
        BOOST_TEST(backward.calls == 4);
        BOOST_TEST(backward.kernels == 0);
        BOOST_TEST(relative_error(got.detach().to(DType::f32), want.detach()) <=
                   forward_tolerance(t));
        for (std::size_t i = 0; i < dev.size(); ++i)
          BOOST_TEST(
              relative_error(dev[i].grad().to(DType::f32), ref[i].grad()) <= grad_tolerance(t),
              "input " << i);
      }
    }
}

// The counts on the modules: Linear(gelu_tanh) forward is one call and no kernel;
// FeedForward is 2 calls forward and 4 backward (bias gradients included), no kernels. Counted
// from the zero-grad state: the gradients are the GEMMs' own outputs, adopted by .grad (a later
// backward that adds into an existing .grad launches one add kernel per parameter).
BOOST_AUTO_TEST_CASE(module_counts) {
  nn::Linear fc(64, 32, Activation::gelu_tanh, true, DType::f16);
  fc.to(Device::cuda());
  Tensor x = randn({16, 64}, DType::f16).to(Device::cuda());
  Counts c = count([&] { (void)fc(x); });
  BOOST_TEST(c.calls == 1);
  BOOST_TEST(c.kernels == 0);
  BOOST_TEST(last_spec().epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);

  nn::FeedForward ff(64, 128, 64, Activation::gelu_tanh, true, DType::f16);
  ff.to(Device::cuda());
  Tensor xg = x.detach();
  xg.requires_grad_();
  Tensor y;
  c = count([&] { y = ff(xg); });
  BOOST_TEST(c.calls == 2);
  BOOST_TEST(c.kernels == 0);
  Tensor gy = randn({16, 64}, DType::f16).to(Device::cuda());
  c = count([&] { y.backward(gy); });
  BOOST_TEST(c.calls == 4);
  BOOST_TEST(c.kernels == 0);
  for (const Tensor& p : ff.parameters()) BOOST_TEST(p.grad().defined());
  BOOST_TEST(xg.grad().defined());
}

BOOST_AUTO_TEST_CASE(feed_forward_state_dict_names) {
  nn::FeedForward ff(4, 8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : ff.state_dict()) names.push_back(name);
  BOOST_TEST(
      (names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  BOOST_TEST(ff.fc1.weight.shape() == (Shape{8, 4}));
  BOOST_TEST(ff.fc2.weight.shape() == (Shape{2, 8}));
  BOOST_TEST((ff.fc1.activation() == Activation::gelu_tanh));
  BOOST_TEST((ff.fc2.activation() == Activation::none));
  nn::Linear plain(4, 8);  // the existing constructor: no activation
  BOOST_TEST((plain.activation() == Activation::none));
}

BOOST_AUTO_TEST_CASE(a_refused_second_layer_finishes_with_the_composite) {
  // b2 4 bytes past an aligned address: the first layer stays one library call with its own
  // node, the second runs as primitives.
  std::vector<Tensor> init = {randn({5, 8}), randn({16, 8}), randn({16}), randn({4, 16}),
                              randn({5})};
  Tensor gy = randn({5, 4});
  std::vector<Tensor> ref, dev;
  for (const Tensor& p : init) {
    ref.push_back(leaf(p, DType::f32, Device::cpu()));
    dev.push_back(leaf(p, DType::f32, Device::cuda()));
  }
  auto run = [](const std::vector<Tensor>& p) {
    return feed_forward(p[0], p[1], p[2], p[3], slice(p[4], 0, 1, 5, 1), Activation::relu);
  };
  Tensor want = run(ref);
  want.backward(gy);
  Tensor got = run(dev);
  got.backward(gy.to(Device::cuda()));
  BOOST_TEST(relative_error(got.detach(), want.detach()) <= 1e-5);
  for (std::size_t i = 0; i < dev.size(); ++i)
    BOOST_TEST(relative_error(dev[i].grad(), ref[i].grad()) <= 5e-5, "input " << i);
}

BOOST_AUTO_TEST_CASE(sgd_on_a_tiny_regression_matches_the_cpu) {
  Generator data(11);
  Tensor x = randn({32, 8}, DType::f32, &data), target = randn({32, 2}, DType::f32, &data);
  std::vector<double> losses[2];
  for (int d = 0; d < 2; ++d) {
    Device dev = d ? Device::cuda() : Device::cpu();
    Generator init(3);
    nn::FeedForward model(8, 16, 2, Activation::gelu_tanh, true, DType::f32, &init);
    nn::Linear head(2, 2, Activation::relu, true, DType::f32, &init);
    model.to(dev);
    head.to(dev);
    auto params = model.parameters();
    for (const Tensor& p : head.parameters()) params.push_back(p);
    optim::SGD opt(params, 0.05, 0.9);
    Tensor xd = x.to(dev), td = target.to(dev);
    for (int step = 0; step < 5; ++step) {
      Tensor loss = mse_loss(head(model(xd)) + model(xd), td);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[d].push_back(loss.item<double>());
    }
  }
  for (int step = 0; step < 5; ++step)
    BOOST_TEST(std::abs(losses[1][step] - losses[0][step]) <= 1e-5 * (1 + losses[0][step]),
               "step " << step << ": cuda " << losses[1][step] << " cpu " << losses[0][step]);
  BOOST_TEST(losses[0][4] < losses[0][0]);
}

BOOST_AUTO_TEST_SUITE_END()
