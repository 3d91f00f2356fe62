// The FlashAttention kernels (jit/codegen/attention) on the virtual GPU against scaled-dot-product
// attention and its gradients written here as plain loops in double: f32 (FMA path) within 1e-4,
// f16/bf16 (tensor cores) within 2e-2, over head dims 16 to 128, T != S and sizes that are not
// whole tiles, causal, bool and additive broadcast masks, fully masked rows, strided inputs, k and
// v broadcast over heads; the backward's determinism; tensor-core use in the profile; and the
// errors bad calls raise.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/lt_matmul.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/random.h"
#include "support/profiling_scope.h"
#include "support/scope_exit.h"
#include "support/virtual_device.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double tolerance(DType t) {
  return t == DType::f32 && !codegen::allow_tf32() ? 1e-4 : 2e-2;
}

// Host values of `t` expanded to `shape`, in double, row-major.
std::vector<double> values(const Tensor& t, const Shape& shape) {
  return t.to(Device::cpu()).to(DType::f64).expand(shape).contiguous().to_vector<double>();
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Attention over `batches` independent rows of q [T, d], k [S, d], v [S, dv] (row-major, batch
// outermost); mask [T, S] per batch (additive, -inf where dropped) or empty.
Reference reference(const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& mask,
                    const std::vector<double>& dout, long batches, long t, long s, long d, long dv,
                    double scale, bool causal) {
  Reference r;
  r.out.assign(batches * t * dv, 0);
  r.lse.assign(batches * t, -kInf);
  r.dq.assign(batches * t * d, 0);
  r.dk.assign(batches * s * d, 0);
  r.dv.assign(batches * s * dv, 0);
  std::vector<double> p(s), dp(s);
  for (long b = 0; b < batches; ++b) {
    const double* qb = &q[b * t * d];
    const double* kb = &k[b * s * d];
    const double* vb = &v[b * s * dv];
    for (long i = 0; i < t; ++i) {
      double mx = -kInf;
      for (long j = 0; j < s; ++j) {
        double x = 0;
        for (long c = 0; c < d; ++c) x += qb[i * d + c] * kb[j * d + c];
        x *= scale;
        if (!mask.empty()) x += mask[(b * t + i) * s + j];
        if (causal && j > i) x = -kInf;
        p[j] = x;
        mx = std::max(mx, x);
      }
      if (mx == -kInf) continue;  // fully masked: out 0, lse -inf, no gradient
      double sum = 0;
      for (long j = 0; j < s; ++j) sum += std::exp(p[j] - mx);
      r.lse[b * t + i] = mx + std::log(sum);
      for (long j = 0; j < s; ++j) p[j] = std::exp(p[j] - mx) / sum;
      for (long c = 0; c < dv; ++c)
        for (long j = 0; j < s; ++j) r.out[(b * t + i) * dv + c] += p[j] * vb[j * dv + c];
      if (dout.empty()) continue;
      const double* go = &dout[(b * t + i) * dv];
      double delta = 0;
      for (long j = 0; j < s; ++j) {
        dp[j] = 0;
        for (long c = 0; c < dv; ++c) dp[j] += go[c] * vb[j * dv + c];
        delta += p[j] * dp[j];
      }
      for (long j = 0; j < s; ++j) {
        double ds = p[j] * (dp[j] - delta);
        for (long c = 0; c < d; ++c) {
          r.dq[(b * t + i) * d + c] += scale * ds * kb[j * d + c];
          r.dk[(b * s + j) * d + c] += scale * ds * qb[i * d + c];
        }
        for (long c = 0; c < dv; ++c) r.dv[(b * s + j) * dv + c] += p[j] * go[c];
      }
    }
  }
  return r;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol,
                  const char* what) {
  std::vector<double> g = got.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  BOOST_REQUIRE_EQUAL(g.size(), want.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    double err;
    if (std::isinf(want[i]) || std::isinf(g[i]))
      err = g[i] == want[i] ? 0 : kInf;
    else
      err = std::isnan(g[i]) ? kInf : std::fabs(g[i] - want[i]) / (1 + std::fabs(want[i]));
    if (err > worst) worst = err, at = i;
  }
  BOOST_TEST(worst <= tol, what << ": error " << worst << " at " << at << " (got " << g[at]
                                << ", want " << want[at] << ")");
}

struct Case {
  DType dtype = DType::f32;
  Shape batch = {2};
  long t = 5, s = 7, d = 16, dv = 16;
  bool causal = false;
  std::optional<Tensor> mask;  // CPU, broadcastable to batch + [t, s]
  bool backward = true;
  // Batch [B, H], T == S, d == dv: out written into a [B, T, H, dv] buffer seen as [B, H, T, dv],
  // and dq, dk, dv into the three head slices of one [B, T, 3H, d] buffer (a fused qkv's
  // gradient), as a compiled step places them.
  bool placed = false;
  // Makes q, k, v from [batch.., rows, h] CPU f32 draws: contiguous unless overridden.
  std::function<Tensor(const Shape& batch, long rows, long h, DType dtype)> make;
};

Tensor contiguous_input(const Shape& batch, long rows, long h, DType dtype) {
  Shape shape = batch;
  shape.push_back(rows);
  shape.push_back(h);
  return randn(shape).to(dtype).to(Device::cuda());
}

// A CUDA tensor of NaNs: an element a kernel fails to write shows as an error.
Tensor full_like_nan(const Shape& shape, DType dtype) {
  return full(shape, std::numeric_limits<double>::quiet_NaN(), dtype).to(Device::cuda());
}

void run_case(const Case& c) {
  auto make = c.make ? c.make : contiguous_input;
  Tensor q = make(c.batch, c.t, c.d, c.dtype), k = make(c.batch, c.s, c.d, c.dtype),
         v = make(c.batch, c.s, c.dv, c.dtype);
  double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  codegen::AttentionCall call{q, k, v, std::nullopt, scale, c.causal};
  if (c.mask) call.mask = c.mask->to(Device::cuda());
  BOOST_REQUIRE_EQUAL(codegen::attention_unsupported(call), "");
  long batches = 1;
  for (auto b : c.batch) batches *= b;
  auto full = [&](long rows, long h) {
    Shape s = c.batch;
    s.push_back(rows);
    s.push_back(h);
    return s;
  };
  std::vector<double> mask;
  if (c.mask) {
    mask = values(*c.mask, full(c.t, c.s));
    if (c.mask->dtype() == DType::bool_)
      for (double& m : mask) m = m != 0 ? 0.0 : -kInf;
  }
  Tensor dout = make(c.batch, c.t, c.dv, c.dtype);
  Reference want =
      reference(values(q, full(c.t, c.d)), values(k, full(c.s, c.d)), values(v, full(c.s, c.dv)),
                mask, c.backward ? values(dout, full(c.t, c.dv)) : std::vector<double>{}, batches,
                c.t, c.s, c.d, c.dv, scale, c.causal);
  std::optional<Tensor> out_into;
  codegen::AttentionGradsInto grads_into;
  Tensor joined;
  if (c.placed) {
    long b = c.batch.at(0), h = c.batch.at(1);
    out_into = full_like_nan({b, c.t, h, c.dv}, c.dtype).transpose(1, 2);
    joined = full_like_nan({b, c.t, 3 * h, c.d}, c.dtype);
    grads_into.dq = joined.slice(2, 0, h).transpose(1, 2);
    grads_into.dk = joined.slice(2, h, 2 * h).transpose(1, 2);
    grads_into.dv = joined.slice(2, 2 * h, 3 * h).transpose(1, 2);
  }
  auto fwd = codegen::attention_forward(call, out_into);
  if (out_into) BOOST_TEST(fwd.out.raw_data() == out_into->raw_data());
  BOOST_TEST((fwd.out.dtype() == c.dtype));
  BOOST_TEST((fwd.lse.dtype() == DType::f32));
  BOOST_TEST((fwd.out.shape() == full(c.t, c.dv)));
  double tol = tolerance(c.dtype);
  expect_close(fwd.out, want.out, tol, "out");
  expect_close(fwd.lse, want.lse, tol, "lse");
  if (!c.backward) return;
  auto grads = codegen::attention_backward(call, fwd.out, fwd.lse, dout, grads_into);
  if (c.placed) {
    BOOST_TEST(grads.dq.raw_data() == grads_into.dq->raw_data());
    BOOST_TEST(grads.dk.raw_data() == grads_into.dk->raw_data());
    BOOST_TEST(grads.dv.raw_data() == grads_into.dv->raw_data());
  }
  BOOST_TEST((grads.dq.shape() == q.shape()));
  BOOST_TEST((grads.dk.shape() == k.shape()));
  BOOST_TEST((grads.dv.shape() == v.shape()));
  expect_close(grads.dq, want.dq, tol, "dq");
  expect_close(grads.dk, want.dk, tol, "dk");
  expect_close(grads.dv, want.dv, tol, "dv");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_attention)

BOOST_AUTO_TEST_CASE(f32_head_dim_16_forward_and_backward) {
  Case c;
  c.batch = {2, 3};
  run_case(c);
}

BOOST_AUTO_TEST_CASE(f16_head_dim_64_causal_with_partial_tiles_and_t_not_s) {
  for (auto [t, s] : {std::pair{70L, 45L}, std::pair{20L, 90L}}) {
    BOOST_TEST_CONTEXT("T " << t << " S " << s) {
      Case c;
      c.dtype = DType::f16;
      c.t = t;
      c.s = s;
      c.d = c.dv = 64;
      c.causal = true;
      run_case(c);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_head_dim_128_bool_mask_broadcast_with_a_fully_masked_row) {
  Case c;
  c.dtype = DType::bf16;
  c.batch = {1, 2};
  c.t = 19;
  c.s = 40;
  c.d = c.dv = 128;
  // [T, S], shared by every batch row; row 3 keeps no key.
  Tensor m = rand({c.t, c.s}) > 0.3;
  Tensor row3 = zeros({c.s}, DType::bool_);
  m.select(0, 3).copy_(row3);
  c.mask = m;
  run_case(c);
}

BOOST_AUTO_TEST_CASE(f32_additive_key_padding_mask_and_different_value_head_dim) {
  Case c;
  c.batch = {2, 2};
  c.t = 17;
  c.s = 70;
  c.d = 64;
  c.dv = 32;
  // [B, 1, 1, S]: -inf on each batch's padded keys, small offsets elsewhere.
  Tensor m = randn({2, 1, 1, c.s}) * 0.5;
  m.slice(3, 60, c.s).select(0, 1).fill_(-std::numeric_limits<double>::infinity());
  c.mask = m;
  run_case(c);
}

BOOST_AUTO_TEST_CASE(bf16_additive_mask_causal_with_fully_masked_rows) {
  // An additive mask of -inf over the first keys makes the first queries see nothing under the
  // causal mask: out 0, lse -inf, no gradient (PyTorch's flash path; its math path gives NaN).
  Case c;
  c.dtype = DType::bf16;
  c.t = 24;
  c.s = 24;
  c.d = c.dv = 32;
  c.causal = true;
  Tensor m = zeros({c.s});
  m.slice(0, 0, 3).fill_(-std::numeric_limits<double>::infinity());
  c.mask = m.to(DType::bf16);
  run_case(c);
}

BOOST_AUTO_TEST_CASE(strided_inputs_heads_made_by_transposing_and_column_strides) {
  // [B, T, H, d] transposed to [B, H, T, d], as attention heads are made: rows contiguous
  // (cp.async path) but strided by H * d.
  for (DType dtype : {DType::f16, DType::f32}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Case c;
      c.dtype = dtype;
      c.batch = {2, 3};
      c.t = c.s = 21;
      c.d = c.dv = 32;
      c.make = [](const Shape& batch, long rows, long h, DType t) {
        return randn({batch[0], rows, batch[1], h}).to(t).to(Device::cuda()).transpose(1, 2);
      };
      run_case(c);
    }
  }
  // Columns strided (a transpose of [.., d, T]) and a head dim that is not a whole 16 bytes:
  // plain loads.
  Case c;
  c.dtype = DType::bf16;
  c.batch = {2};
  c.t = 9;
  c.s = 13;
  c.d = c.dv = 20;
  c.make = [](const Shape& batch, long rows, long h, DType t) {
    return randn({batch[0], h, rows}).to(t).to(Device::cuda()).transpose(1, 2);
  };
  run_case(c);
}

BOOST_AUTO_TEST_CASE(outputs_written_into_permuted_and_sliced_views) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (bool causal : {false, true}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << (causal ? " causal" : "")) {
        Case c;
        c.dtype = dtype;
        c.batch = {2, 3};
        c.t = c.s = 13;
        c.d = c.dv = 16;
        c.causal = causal;
        c.placed = true;
        run_case(c);
      }
    }
}

BOOST_AUTO_TEST_CASE(k_and_v_shared_by_heads_broadcast_and_get_summed_gradients) {
  // q [2, 3, T, d] against k, v [2, 1, S, d] (one key/value head for three query heads).
  const long t = 11, s = 18, d = 16;
  Tensor q = randn({2, 3, t, d}).to(Device::cuda()), k = randn({2, 1, s, d}).to(Device::cuda()),
         v = randn({2, 1, s, d}).to(Device::cuda()), dout = randn({2, 3, t, d}).to(Device::cuda());
  codegen::AttentionCall call{q, k, v, std::nullopt, 0.3, false};
  Reference want =
      reference(values(q, {2, 3, t, d}), values(k, {2, 3, s, d}), values(v, {2, 3, s, d}), {},
                values(dout, {2, 3, t, d}), 6, t, s, d, d, 0.3, false);
  // Gradients of the shared k and v: the sum over the three heads.
  std::vector<double> dk(2 * s * d, 0), dv(2 * s * d, 0);
  for (long b = 0; b < 2; ++b)
    for (long h = 0; h < 3; ++h)
      for (long i = 0; i < s * d; ++i) {
        dk[b * s * d + i] += want.dk[(b * 3 + h) * s * d + i];
        dv[b * s * d + i] += want.dv[(b * 3 + h) * s * d + i];
      }
  auto fwd = codegen::attention_forward(call);
  expect_close(fwd.out, want.out, 1e-4, "out");
  auto grads = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
  BOOST_TEST((grads.dk.shape() == Shape{2, 1, s, d}));
  expect_close(grads.dq, want.dq, 1e-4, "dq");
  expect_close(grads.dk, dk, 1e-4, "dk");
  expect_close(grads.dv, dv, 1e-4, "dv");
}

BOOST_AUTO_TEST_CASE(f32_on_tf32_tensor_cores_when_allowed) {
  // KILN_MATMUL_TF32=1 (set_allow_tf32): operands rounded to 10 significand bits, as f16's.
  codegen::set_allow_tf32(true);
  test::ScopeExit tf32_off([] { codegen::set_allow_tf32(false); });
  namespace vgpu = kiln::cuda::vgpu;
  test::ProfilingScope profiling;
  Case c;
  c.t = 33;
  c.s = 21;
  c.d = c.dv = 64;
  c.causal = true;
  std::string failure;
  try {
    run_case(c);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  profiling.stop();
  BOOST_TEST(failure == "");
  std::uint64_t tf32_flops = 0;
  for (const auto& p : vgpu::profiles()) tf32_flops += p.mma_flops_tf32;
  vgpu::clear_profiles();
  BOOST_TEST(tf32_flops > 0u);
}

BOOST_AUTO_TEST_CASE(backward_is_deterministic_and_uses_tensor_cores_for_bf16) {
  Tensor q = randn({1, 2, 40, 64}).to(DType::bf16).to(Device::cuda());
  Tensor k = randn({1, 2, 50, 64}).to(DType::bf16).to(Device::cuda());
  Tensor v = randn({1, 2, 50, 64}).to(DType::bf16).to(Device::cuda());
  Tensor dout = randn({1, 2, 40, 64}).to(DType::bf16).to(Device::cuda());
  codegen::AttentionCall call{q, k, v, std::nullopt, 0.125, false};
  namespace vgpu = kiln::cuda::vgpu;
  test::ProfilingScope profiling;
  auto fwd = codegen::attention_forward(call);
  auto a = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
  profiling.stop();
  std::uint64_t mma = 0;
  for (const auto& p : vgpu::profiles()) mma += p.mma_instructions;
  // Forward: per (batch row, 16 queries, 8 keys, 16 of d) one mma for Q K^T, and per
  // (16 queries, 16 keys, 8 of dv) one for P V, over every stored key tile (zero-padded).
  BOOST_TEST(mma > 0u);
  auto b = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
  for (auto [x, y] : {std::pair{a.dq, b.dq}, std::pair{a.dk, b.dk}, std::pair{a.dv, b.dv}}) {
    auto xs = x.to(Device::cpu()).to(DType::f32).to_vector<float>();
    auto ys = y.to(Device::cpu()).to(DType::f32).to_vector<float>();
    BOOST_TEST(xs == ys);
  }
}

BOOST_AUTO_TEST_CASE(bad_calls_name_the_op_and_shapes) {
  auto cuda = [](const Shape& s, DType t = DType::f32) { return zeros(s, t).to(Device::cuda()); };
  auto reason = [](const codegen::AttentionCall& call) {
    return codegen::attention_unsupported(call);
  };
  // `call` raises an Error naming attention and `part`.
  auto raises_from = [](const std::function<void()>& call, const std::string& part) {
    try {
      call();
      BOOST_ERROR("no error for " << part);
    } catch (const Error& e) {
      std::string what = e.what();
      BOOST_TEST(what.find("attention") != std::string::npos, what);
      BOOST_TEST(what.find(part) != std::string::npos, what);
    }
  };
  auto raises = [&](const codegen::AttentionCall& call, const std::string& part) {
    raises_from([&] { codegen::attention_forward(call); }, part);
  };
  codegen::AttentionCall ints{cuda({2, 4, 16}, DType::i32),
                              cuda({2, 4, 16}, DType::i32),
                              cuda({2, 4, 16}, DType::i32),
                              std::nullopt,
                              0.25,
                              false};
  BOOST_TEST(reason(ints).find("floating") != std::string::npos);
  raises(ints, "[2, 4, 16] i32");
  codegen::AttentionCall dims{
      cuda({2, 4, 16}), cuda({2, 5, 32}), cuda({2, 5, 16}), std::nullopt, 0.25, false};
  BOOST_TEST(reason(dims).find("head dims differ") != std::string::npos);
  raises(dims, "k [2, 5, 32]");
  codegen::AttentionCall wide{
      cuda({2, 4, 300}), cuda({2, 5, 300}), cuda({2, 5, 300}), std::nullopt, 0.25, false};
  BOOST_TEST(reason(wide).find("head dim 300") != std::string::npos);
  raises(wide, "q [2, 4, 300]");
  // f32 at head dim 256 on a device of 48 KB a block: even one warp's 16-row tiles need more.
  if (test::needs_virtual_gpu().empty()) {
    test::VirtualDeviceScope small(9, 0, 48 * 1024);
    codegen::AttentionCall wide_f32{
        cuda({2, 4, 256}), cuda({2, 5, 256}), cuda({2, 5, 256}), std::nullopt, 0.25, false};
    BOOST_TEST(reason(wide_f32).find("tiling fits head dims 256") != std::string::npos,
               reason(wide_f32));
    raises(wide_f32, "q [2, 4, 256] f32");
  }
  codegen::AttentionCall masked{cuda({2, 4, 16}),
                                cuda({2, 5, 16}),
                                cuda({2, 5, 16}),
                                cuda({3, 5}, DType::bool_),
                                0.25,
                                false};
  BOOST_TEST(reason(masked).find("mask does not broadcast") != std::string::npos);
  raises(masked, "mask [3, 5] bool");
  codegen::AttentionCall f64{cuda({2, 4, 16}, DType::f64),
                             cuda({2, 5, 16}, DType::f64),
                             cuda({2, 5, 16}, DType::f64),
                             std::nullopt,
                             0.25,
                             false};
  BOOST_TEST(reason(f64).find("f64") != std::string::npos);
  codegen::AttentionCall ok{
      cuda({2, 4, 16}), cuda({2, 5, 16}), cuda({2, 5, 16}), std::nullopt, 0.25, false};
  BOOST_TEST(reason(ok) == "");
  // Placed outputs of the wrong shape or dtype, and a placed gradient of a broadcast operand.
  raises_from(
      [&] {
        codegen::attention_forward(ok, cuda({2, 5, 16}));
      },
      "out must be f32 [2, 4, 16]");
  raises_from(
      [&] {
        codegen::attention_forward(ok, cuda({2, 4, 16}, DType::f16));
      },
      "got f16 [2, 4, 16]");
  auto fwd = codegen::attention_forward(ok);
  codegen::AttentionGradsInto into;
  into.dk = cuda({2, 5, 16}, DType::bf16);
  raises_from([&] { codegen::attention_backward(ok, fwd.out, fwd.lse, fwd.out, into); },
              "dk must be f32 [2, 5, 16]");
  // k and v shared along an outer batch dim (the dk/dv blocks sum only the innermost one).
  codegen::AttentionCall shared_kv{
      cuda({2, 3, 4, 16}), cuda({1, 3, 5, 16}), cuda({1, 3, 5, 16}), std::nullopt, 0.25, false};
  auto fwd_shared = codegen::attention_forward(shared_kv);
  into.dk = cuda({1, 3, 5, 16});
  raises_from(
      [&] {
        codegen::attention_backward(shared_kv, fwd_shared.out, fwd_shared.lse, fwd_shared.out,
                                    into);
      },
      "broadcast");
}

BOOST_AUTO_TEST_SUITE_END()
