// scaled_dot_product_attention (the `attention` op): the CPU reference against attention written
// as plain loops in this file, its gradients against finite differences (f64) and second
// derivatives through create_graph, the bad-input errors, and the CUDA path (primitive ops on
// the virtual GPU until a fused kernel takes the call) against the CPU.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/record.h"
#include "runtime/dispatch.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/reference.h"
#include "support/scoped_env.h"

using namespace kiln;
using test::host_random;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One attention call: shapes, mask, flags.
struct Case {
  std::string label;
  Shape q, k, v;
  Shape mask;  // empty: no mask
  DType mask_dtype = DType::bool_;
  bool causal = false;
  std::optional<double> scale;
  bool masked_row = false;  // mask row 1 out entirely (bool masks only)
};

std::vector<Case> cases() {
  return {
      {"T 3, S 5, dv 2 != d 4", {3, 4}, {5, 4}, {5, 2}, {}, DType::bool_, false, {}, false},
      {"batch [2, 3] heads, scale 0.3",
       {2, 3, 4, 3},
       {2, 3, 6, 3},
       {2, 3, 6, 5},
       {},
       DType::bool_,
       false,
       0.3,
       false},
      {"k and v broadcast over heads",
       {2, 3, 4, 3},
       {2, 1, 5, 3},
       {2, 1, 5, 2},
       {},
       DType::bool_,
       false,
       {},
       false},
      {"bool mask [T, S] broadcast",
       {2, 4, 3},
       {2, 5, 3},
       {2, 5, 3},
       {4, 5},
       DType::bool_,
       false,
       {},
       false},
      {"bool mask [B, 1, S] per batch",
       {2, 4, 3},
       {2, 5, 3},
       {2, 5, 3},
       {2, 1, 5},
       DType::bool_,
       false,
       {},
       false},
      {"additive mask [T, S]",
       {2, 4, 3},
       {2, 5, 3},
       {2, 5, 2},
       {4, 5},
       DType::f64,
       false,
       {},
       false},
      {"additive mask [S] broadcast",
       {2, 3, 4},
       {2, 6, 4},
       {2, 6, 4},
       {6},
       DType::f64,
       false,
       {},
       false},
      {"causal T 5 > S 3", {2, 5, 3}, {2, 3, 3}, {2, 3, 4}, {}, DType::bool_, true, {}, false},
      {"causal T 3 < S 6 with a bool mask",
       {2, 3, 4},
       {2, 6, 4},
       {2, 6, 2},
       {3, 6},
       DType::bool_,
       true,
       {},
       false},
      {"a fully masked row",
       {2, 4, 3},
       {2, 5, 3},
       {2, 5, 3},
       {4, 5},
       DType::bool_,
       false,
       {},
       true},
  };
}

Tensor make(const Shape& shape, DType dtype, std::uint64_t seed, double lo = -1, double hi = 1) {
  return test::typed(dtype, host_random(static_cast<std::size_t>(numel(shape)), lo, hi, seed),
                     shape);
}

Tensor make_mask(const Case& c, DType float_dtype, std::uint64_t seed) {
  if (c.mask.empty()) return {};
  if (c.mask_dtype != DType::bool_) return make(c.mask, float_dtype, seed, -2, 1);
  auto u = host_random(static_cast<std::size_t>(numel(c.mask)), 0, 1, seed);
  std::vector<double> keep;
  for (double x : u) keep.push_back(x > 0.3 ? 1 : 0);
  // Every row keeps one key at least, but the row chosen to be fully masked.
  std::int64_t s = c.mask.back();
  for (std::size_t r = 0; r * s < keep.size(); ++r) {
    keep[r * s + r % s] = 1;
    if (c.masked_row && c.mask.size() >= 2 && r % c.mask[c.mask.size() - 2] == 1)
      for (std::int64_t j = 0; j < s; ++j) keep[r * s + j] = 0;
  }
  return test::typed(DType::bool_, keep, c.mask);
}

Shape batch_of(const Case& c) {
  auto b = [](const Shape& s) { return Shape(s.begin(), s.end() - 2); };
  return broadcast_shapes(broadcast_shapes(b(c.q), b(c.k), "test"), b(c.v), "test");
}

// Attention as loops in double over inputs broadcast to the full batch (expand is a view), with
// the masked row giving out 0 and lse -inf.
struct Reference {
  std::vector<double> out, lse;
};
Reference reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& mask, double scale) {
  Shape batch = batch_of(c);
  std::int64_t t = c.q[c.q.size() - 2], d = c.q.back(), s = c.k[c.k.size() - 2], dv = c.v.back();
  auto full = [&](std::int64_t r, std::int64_t col) {
    Shape x = batch;
    x.push_back(r);
    x.push_back(col);
    return x;
  };
  auto qv = q.expand(full(t, d)).contiguous().to_vector<double>();
  auto kv = k.expand(full(s, d)).contiguous().to_vector<double>();
  auto vv = v.expand(full(s, dv)).contiguous().to_vector<double>();
  std::vector<double> mv;
  if (mask.defined()) mv = mask.expand(full(t, s)).contiguous().to_vector<double>();
  Reference r;
  std::int64_t batches = numel(batch);
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> row(static_cast<std::size_t>(s));
      double m = -kInf;
      for (std::int64_t j = 0; j < s; ++j) {
        double x = 0;
        for (std::int64_t e = 0; e < d; ++e) x += qv[(b * t + i) * d + e] * kv[(b * s + j) * d + e];
        x *= scale;
        if (mask.defined()) {
          double mk = mv[(b * t + i) * s + j];
          if (c.mask_dtype == DType::bool_)
            x = mk != 0 ? x : -kInf;
          else
            x += mk;
        }
        if (c.causal && j > i) x = -kInf;
        row[j] = x;
        m = std::max(m, x);
      }
      if (m == -kInf) {
        r.lse.push_back(-kInf);
        for (std::int64_t e = 0; e < dv; ++e) r.out.push_back(0);
        continue;
      }
      double l = 0;
      for (auto& x : row) l += (x = std::exp(x - m));
      r.lse.push_back(m + std::log(l));
      for (std::int64_t e = 0; e < dv; ++e) {
        double o = 0;
        for (std::int64_t j = 0; j < s; ++j) o += row[j] / l * vv[(b * s + j) * dv + e];
        r.out.push_back(o);
      }
    }
  return r;
}

double scale_of(const Case& c) {
  return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.q.back()));
}

// The op's two outputs (out, lse) through the dispatch point.
std::vector<Tensor> attention_op(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& mask, double scale, bool causal) {
  OpAttrs attrs;
  attrs.scale = scale;
  attrs.causal = causal;
  std::vector<Tensor> in{q, k, v};
  if (mask.defined()) in.push_back(mask);
  return dispatch(OpId::attention, in, attrs);
}

Shape out_shape(const Case& c) {
  Shape s = batch_of(c);
  s.push_back(c.q[c.q.size() - 2]);
  s.push_back(c.v.back());
  return s;
}
Shape lse_shape(const Case& c) {
  Shape s = batch_of(c);
  s.push_back(c.q[c.q.size() - 2]);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention)

BOOST_AUTO_TEST_CASE(cpu_op_matches_loops_in_f64_f32_bf16_f16) {
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (const Case& c : cases()) {
      BOOST_TEST_CONTEXT(c.label << " in " << dtype_name(t)) {
        Tensor q = make(c.q, t, 1), k = make(c.k, t, 2), v = make(c.v, t, 3);
        Tensor mask = make_mask(c, t, 4);
        auto got = attention_op(q, k, v, mask, scale_of(c), c.causal);
        // The reference reads the same (rounded) inputs, in double.
        Reference want = reference(c, q, k, v, mask, scale_of(c));
        BOOST_TEST(got[0].dtype() == t);
        BOOST_TEST(got[1].dtype() == (t == DType::f64 ? DType::f64 : DType::f32));
        double tol = t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-5 : 2e-2;
        test::check_close(got[0], out_shape(c), want.out, tol, tol);
        test::check_close(got[1], lse_shape(c), want.lse, tol, tol);
        // The public API: the same output, 1/sqrt(d) when no scale is given.
        Tensor api = scaled_dot_product_attention(q, k, v, mask, c.causal, c.scale);
        BOOST_TEST(allclose(api, got[0], 0, 0));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_fully_masked_row_gives_zero_and_minus_infinity_not_nan) {
  Tensor q = make({2, 3}, DType::f32, 5), k = make({4, 3}, DType::f32, 6),
         v = make({4, 2}, DType::f32, 7);
  Tensor mask = test::bools({true, false, true, false, false, false, false, false}, {2, 4});
  auto got = attention_op(q, k, v, mask, 0.5, false);
  auto out = got[0].to_vector<double>(), lse = got[1].to_vector<double>();
  BOOST_TEST(out[2] == 0.0);
  BOOST_TEST(out[3] == 0.0);
  BOOST_TEST(lse[1] == -kInf);
  BOOST_TEST(std::isfinite(lse[0]));
  // An additive mask of -inf everywhere in a row does the same.
  Tensor additive =
      test::f32s({0, -INFINITY, 0, 1, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, {2, 4});
  auto add = attention_op(q, k, v, additive, 0.5, false);
  BOOST_TEST(add[0].to_vector<double>()[2] == 0.0);
  BOOST_TEST(add[1].to_vector<double>()[1] == -kInf);
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_in_f64) {
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.label) {
      Tensor q = make(c.q, DType::f64, 11).requires_grad_();
      Tensor k = make(c.k, DType::f64, 12).requires_grad_();
      Tensor v = make(c.v, DType::f64, 13).requires_grad_();
      Tensor mask = make_mask(c, DType::f64, 14);
      std::vector<Tensor> wrt{q, k, v};
      // An additive mask is differentiable too (its gradient is the scores').
      if (mask.defined() && is_floating(mask.dtype())) wrt.push_back(mask.requires_grad_());
      auto result = autograd::gradcheck(
          [&](const std::vector<Tensor>& x) {
            Tensor m = wrt.size() > 3 ? x[3] : mask;
            return scaled_dot_product_attention(x[0], x[1], x[2], m, c.causal, c.scale);
          },
          wrt);
      BOOST_TEST(result.ok, result.report);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_log_sum_exp_output_is_differentiable_too) {
  Case c{"lse", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}, {3, 5}, DType::bool_, true, 0.6, false};
  Tensor q = make(c.q, DType::f64, 21).requires_grad_(),
         k = make(c.k, DType::f64, 22).requires_grad_();
  Tensor v = make(c.v, DType::f64, 23).requires_grad_();
  Tensor mask = make_mask(c, DType::f64, 24);
  Tensor w = make(lse_shape(c), DType::f64, 25);
  auto result = autograd::gradcheck(
      [&](const std::vector<Tensor>& x) {
        std::vector<Tensor> in{x[0], x[1], x[2], mask};
        OpAttrs attrs;
        attrs.scale = 0.6;
        attrs.causal = true;
        auto outs = autograd::record_outputs(OpId::attention, in, attrs);
        return sum(outs[0], {-1}) + outs[1] * w;  // both outputs carry gradient
      },
      {q, k, v});
  BOOST_TEST(result.ok, result.report);
}

BOOST_AUTO_TEST_CASE(second_derivatives_through_create_graph_match_finite_differences) {
  // d/dq of <grad_q(L), w>, with grad_q taken with create_graph: the rule then differentiates
  // primitive ops instead of the backward op.
  Case c{"2nd", {2, 3, 2}, {2, 4, 2}, {2, 4, 2}, {3, 4}, DType::bool_, false, 0.8, false};
  Tensor mask = make_mask(c, DType::f64, 31);
  Tensor k = make(c.k, DType::f64, 32), v = make(c.v, DType::f64, 33);
  Tensor w = make(c.q, DType::f64, 34), seed = make(out_shape(c), DType::f64, 35);
  Tensor q = make(c.q, DType::f64, 36).requires_grad_();
  auto result = autograd::gradcheck(
      [&](const std::vector<Tensor>& x) {
        // Finite differences call this without gradients: the inner gradient needs them.
        GradModeGuard on(true);
        Tensor xq = x[0].requires_grad() ? x[0] : x[0].detach().requires_grad_();
        Tensor out = scaled_dot_product_attention(xq, k, v, mask, false, 0.8);
        auto g = autograd::grad({out}, {xq}, {seed}, true, true);
        return sum(g[0] * w);
      },
      {q});
  BOOST_TEST(result.ok, result.report);
}

BOOST_AUTO_TEST_CASE(backward_op_matches_the_gradients_of_primitive_attention) {
  // Attention written with matmul/where/softmax (kiln's primitives, not the new kernels); its
  // autograd gradients against the attention_backward op's.
  for (const Case& c : cases()) {
    if (c.masked_row) continue;  // softmax over a row of -inf is NaN there, by definition
    BOOST_TEST_CONTEXT(c.label) {
      Tensor q = make(c.q, DType::f64, 41).requires_grad_(),
             k = make(c.k, DType::f64, 42).requires_grad_();
      Tensor v = make(c.v, DType::f64, 43).requires_grad_();
      Tensor mask = make_mask(c, DType::f64, 44);
      Tensor s = matmul(q, k.transpose(-2, -1)) * scale_of(c);
      if (mask.defined()) s = mask.dtype() == DType::bool_ ? where(mask, s, -kInf) : s + mask;
      if (c.causal) {
        Tensor keep = ne(tril(ones({s.shape()[s.dim() - 2], s.shape().back()}, DType::f64)), 0.0);
        s = where(keep, s, -kInf);
      }
      Tensor want_out = matmul(softmax(s, -1), v);
      Tensor seed = make(want_out.shape(), DType::f64, 45);
      auto want = autograd::grad({want_out}, {q, k, v}, {seed});
      Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal, c.scale);
      BOOST_TEST(allclose(out, want_out, 1e-12, 1e-12));
      auto got = autograd::grad({out}, {q, k, v}, {seed});
      for (std::size_t i = 0; i < 3; ++i)
        BOOST_TEST(allclose(got[i], want[i], 1e-10, 1e-12),
                   "input " << i << ": " << got[i] << " vs " << want[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_op_and_the_shapes) {
  Tensor q = make({2, 3, 4}, DType::f32, 1), k = make({2, 5, 4}, DType::f32, 2),
         v = make({2, 5, 3}, DType::f32, 3);
  KILN_CHECK_THROWS(scaled_dot_product_attention(make({4}, DType::f32, 1), k, v), Error,
                    "attention", "rank >= 2", "[4]");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, make({2, 5, 6}, DType::f32, 2), v), ShapeError,
                    "attention", "head dims of q and k differ", "[2, 5, 6]");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k, make({2, 4, 3}, DType::f32, 3)), ShapeError,
                    "attention", "k and v lengths differ", "[2, 4, 3]");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k, v, test::bools({true, false}, {2})),
                    ShapeError, "attention", "mask of shape [2]", "[2, 3, 5]");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, make({7, 5, 4}, DType::f32, 2), v), ShapeError,
                    "attention", "k and v have different numbers of heads", "[7, 5, 4]");
  // Grouped-query attention needs q's heads to be a multiple of k and v's.
  KILN_CHECK_THROWS(scaled_dot_product_attention(make({1, 3, 3, 4}, DType::f32, 1),
                                                 make({1, 2, 5, 4}, DType::f32, 2),
                                                 make({1, 2, 5, 3}, DType::f32, 3)),
                    ShapeError, "attention", "H % Hkv", "[1, 3, 3, 4]", "[1, 2, 5, 4]");
  KILN_CHECK_THROWS(
      scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)),
      DTypeError, "attention", "floating", "i64");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k.to(DType::f64), v), DTypeError, "attention",
                    "f32, f64 and f32");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k, v, test::i64s({1, 0, 1, 1, 0}, {5})),
                    DTypeError, "attention", "mask must be bool", "i64");
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k, v, {}, false, kInf), Error, "attention",
                    "scale must be finite");
}

BOOST_AUTO_TEST_CASE(on_cuda_the_decomposition_matches_the_cpu_and_says_why) {
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Case& c : cases()) {
      BOOST_TEST_CONTEXT(c.label << " in " << dtype_name(t)) {
        Tensor q = make(c.q, t, 51), k = make(c.k, t, 52), v = make(c.v, t, 53);
        Tensor mask = make_mask(c, DType::f32, 54);  // an f32 additive mask next to bf16 q
        Tensor dout = make(out_shape(c), t, 55);
        auto cpu = attention_op(q, k, v, mask, scale_of(c), c.causal);
        auto on = [](const Tensor& x) { return x.defined() ? x.to(Device::cuda()) : x; };
        auto gpu = attention_op(on(q), on(k), on(v), on(mask), scale_of(c), c.causal);
        BOOST_TEST(gpu[0].device().is_cuda());
        double tol = t == DType::f32 ? 1e-5 : 2e-2;
        test::check_close(gpu[0].to(Device::cpu()), out_shape(c), cpu[0].to_vector<double>(), tol,
                          tol);
        test::check_close(gpu[1].to(Device::cpu()), lse_shape(c), cpu[1].to_vector<double>(), tol,
                          tol);
        // Backward on the device against the CPU backward op.
        OpAttrs attrs;
        attrs.scale = scale_of(c);
        attrs.causal = c.causal;
        std::vector<Tensor> bin{q, k, v, cpu[0], cpu[1], dout};
        if (mask.defined()) bin.push_back(mask);
        auto want = dispatch(OpId::attention_backward, bin, attrs);
        std::vector<Tensor> gin;
        for (const auto& x : bin) gin.push_back(x.to(Device::cuda()));
        auto got = dispatch(OpId::attention_backward, gin, attrs);
        for (std::size_t i = 0; i < 3; ++i) {
          BOOST_TEST(got[i].dtype() == want[i].dtype());
          test::check_close(got[i].to(Device::cpu()), want[i].shape(), want[i].to_vector<double>(),
                            t == DType::f32 ? 1e-4 : 5e-2, t == DType::f32 ? 1e-5 : 2e-2);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_cuda_fallback_is_reported_on_kiln_log_fusion) {
  // f64: no fused kernel.
  Tensor q = make({2, 3, 4}, DType::f64, 61).to(Device::cuda());
  Tensor k = make({2, 5, 4}, DType::f64, 62).to(Device::cuda());
  Tensor v = make({2, 5, 4}, DType::f64, 63).to(Device::cuda());
  test::ScopedEnv env("KILN_LOG", "fusion");
  reload_log_settings();
  // The only test that turns the log on: the line is logged once per process.
  std::string log = test::capture_output(2, [&] {
    OpAttrs attrs;
    attrs.scale = 0.123;
    std::vector<Tensor> in{q, k, v};
    dispatch(OpId::attention, in, attrs);
  });
  reload_log_settings();
  BOOST_TEST(log.find("attention -> primitive ops") != std::string::npos, log);
}

BOOST_AUTO_TEST_SUITE_END()
