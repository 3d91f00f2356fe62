// Attention outputs written where their readers want them (jit/output_placement.h): a compiled
// block with a fused qkv projection, its gradients against the CPU in f64, where the fused
// kernels place o and dq, dk, dv (f32: no copy, no cat) and where they refuse the call (f64:
// the primitive ops and the cat run as before).
#include <boost/test/unit_test.hpp>

#include <string>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"
#include "support/reference.h"
#include "support/scope_exit.h"

using namespace kiln;
namespace vgpu = kiln::cuda::vgpu;

namespace {

constexpr std::int64_t kBatch = 2, kLength = 6, kHeads = 2, kHeadDim = 16;
constexpr std::int64_t kWidth = kHeads * kHeadDim;

// The heads of q, k or v: columns [part * C, (part + 1) * C) of the fused projection, [B, H, T, d].
Tensor heads(const Tensor& qkv, std::int64_t part) {
  return qkv.slice(2, part * kWidth, (part + 1) * kWidth)
      .reshape({kBatch, kLength, kHeads, kHeadDim})
      .transpose(1, 2);
}

// A causal self-attention block as users write it: one projection to q, k, v, heads merged back.
Tensor block(const Tensor& x, const Tensor& w) {
  Tensor qkv = matmul(x, w);
  Tensor o = scaled_dot_product_attention(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), {}, true);
  return o.transpose(1, 2).reshape({kBatch, kLength, kWidth});
}

Tensor draw(const Shape& shape, std::uint64_t seed) {
  return test::typed(DType::f64,
                     test::host_random(static_cast<std::size_t>(numel(shape)), -1, 1, seed), shape);
}

struct Launches {
  int cats = 0, copies = 0, attention = 0;
};

// Compiles the block on CUDA in `dtype`, runs it and its backward once warm, and compares the
// output and the gradients of x and w with the CPU's f64 ones.
Launches check_compiled_block(DType dtype, double tol) {
  Tensor x = draw({kBatch, kLength, kWidth}, 1), w = draw({kWidth, 3 * kWidth}, 2) * 0.3;
  Tensor seed = draw({kBatch, kLength, kWidth}, 3);
  Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
  Tensor want = block(xr, wr);
  auto want_grads = autograd::grad({want}, {xr, wr}, {seed});

  auto on_device = [&](const Tensor& t) { return t.to(dtype).to(Device::cuda()); };
  Tensor xc = on_device(x).requires_grad_(), wc = on_device(w).requires_grad_();
  jit::CompileOptions options;
  options.name = "attention_block";
  options.dynamic = jit::DynamicMode::never;
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return block(a, b); }, options);
  autograd::grad({f(xc, wc)}, {xc, wc}, {on_device(seed)});  // compiles both graphs
  vgpu::clear_profiles();
  Tensor got;
  std::vector<Tensor> got_grads;
  {
    vgpu::set_profiling(true);
    test::ScopeExit profiling_off([] { vgpu::set_profiling(false); });
    got = f(xc, wc);
    got_grads = autograd::grad({got}, {xc, wc}, {on_device(seed)});
  }
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f64); };
  BOOST_TEST(allclose(host(got), want, tol, tol), "out");
  BOOST_TEST(allclose(host(got_grads[0]), want_grads[0], tol, tol), "dx");
  BOOST_TEST(allclose(host(got_grads[1]), want_grads[1], tol, tol), "dw");
  Launches n;
  for (const auto& p : vgpu::profiles()) {
    n.cats += p.kernel.rfind("k_cat", 0) == 0;
    n.copies += p.kernel.rfind("k_copy", 0) == 0;
    n.attention += p.kernel.rfind("k_attention", 0) == 0;
  }
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(output_placement)

BOOST_AUTO_TEST_CASE(the_fused_kernels_write_o_and_the_qkv_gradient_in_place) {
  Launches n = check_compiled_block(DType::f32, 1e-4);
  BOOST_TEST(n.attention == 2);  // forward and backward
  BOOST_TEST(n.cats == 0);
  BOOST_TEST(n.copies == 0);
}

BOOST_AUTO_TEST_CASE(a_call_the_kernels_refuse_runs_the_ops_and_the_cat) {
  // No f64 attention kernel: the primitive ops run, and the cat joins their gradients.
  Launches n = check_compiled_block(DType::f64, 1e-10);
  BOOST_TEST(n.attention == 0);
  BOOST_TEST(n.cats >= 1);
}

// k and v shared by the batch (batch size 1 against q's 2) under grouped-query heads, each read
// through a permute: their gradients are sums over the batch, made apart and not placed, and
// the compiled gradients match f64 on the CPU.
BOOST_AUTO_TEST_CASE(gradients_of_k_and_v_the_batch_shares_are_not_placed) {
  auto fn = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    Tensor o = scaled_dot_product_attention(q, k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}));
    return sum(o * o);
  };
  Tensor q = draw({2, 4, 8, 16}, 4), k = draw({1, 8, 2, 16}, 5), v = draw({1, 8, 2, 16}, 6);
  Tensor qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(),
         vr = v.clone().requires_grad_();
  auto want = autograd::grad({fn(qr, kr, vr)}, {qr, kr, vr}, {});
  auto on_device = [](const Tensor& t) {
    return t.to(DType::f32).to(Device::cuda()).requires_grad_();
  };
  Tensor qc = on_device(q), kc = on_device(k), vc = on_device(v);
  auto f = jit::compile(fn);
  f(qc, kc, vc);
  auto got = autograd::grad({f(qc, kc, vc)}, {qc, kc, vc}, {});
  for (std::size_t i = 0; i < 3; ++i)
    BOOST_TEST(allclose(got[i].to(Device::cpu()).to(DType::f64), want[i], 1e-4, 1e-4),
               "gradient " << i);
}

BOOST_AUTO_TEST_SUITE_END()
