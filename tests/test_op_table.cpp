// The op table (runtime/ops.def) walked entry by entry: every op has a name, shape inference, a
// CPU kernel and a derivative rule (or is declared without one), and the consistency sweep runs
// every op on samples in several shapes and dtypes three ways: eager, traced and run, and
// differentiated (gradcheck in f64; compiled gradients equal eager ones). Composites are traced
// and checked against the primitives the composite table lists for them.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <set>

#include "autograd/composites.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "jit/compile.h"
#include "runtime/dispatch.h"
#include "support/op_samples.h"
#include "support/reference.h"

using namespace kiln;
using kiln::test::OpSample;

namespace {

// Same dtype, shape and values, NaN equal to NaN: the reference executor runs eager's kernels.
bool identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

bool graph_has(const graph::Graph& g, OpId op) {
  for (const auto& n : g.nodes)
    if (n.op == op) return true;
  return false;
}

// Runs the sample through jit::compile; `recorded` tells whether the op is in the graph.
std::vector<Tensor> run_compiled(const OpSample& s, OpId op, bool& recorded,
                                 const std::vector<Tensor>& inputs) {
  jit::CompileOptions options;
  options.name = std::string(op_name(op));
  options.dynamic = jit::DynamicMode::never;
  auto check = [&](const auto& f) { recorded = recorded || graph_has(f.core().graph(0), op); };
  switch (inputs.size()) {
    case 1: {
      auto f = jit::compile([&](const Tensor& a) { return s.run({a}); }, options);
      auto out = f(inputs[0]);
      check(f);
      return out;
    }
    case 2: {
      auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return s.run({a, b}); }, options);
      auto out = f(inputs[0], inputs[1]);
      check(f);
      return out;
    }
    case 3: {
      auto f = jit::compile(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) { return s.run({a, b, c}); }, options);
      auto out = f(inputs[0], inputs[1], inputs[2]);
      check(f);
      return out;
    }
    case 5: {
      auto f = jit::compile(
          [&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d, const Tensor& e) {
            return s.run({a, b, c, d, e});
          },
          options);
      auto out = f(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
      check(f);
      return out;
    }
  }
  BOOST_FAIL("samples take 1, 2, 3 or 5 inputs");
  return {};
}

// Fresh leaves for the sample's inputs; floating ones require grad.
std::vector<Tensor> leaves(const OpSample& s) {
  std::vector<Tensor> out;
  for (const auto& t : s.inputs) {
    Tensor leaf = t.detach().clone();
    if (is_floating(leaf.dtype())) leaf.requires_grad_();
    out.push_back(leaf);
  }
  return out;
}

std::vector<Tensor> floating_leaves(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (const auto& t : inputs)
    if (t.requires_grad()) out.push_back(t);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(op_table)

BOOST_AUTO_TEST_CASE(every_op_is_declared_once_with_consistent_facts) {
  std::set<std::string_view> names;
  for (OpId op : all_ops()) {
    const OpDef& def = op_def(op);
    BOOST_TEST_CONTEXT("op " << def.name) {
      BOOST_TEST(names.insert(def.name).second);
      BOOST_TEST(def.num_outputs >= 1);
      BOOST_TEST((def.arity == -1 || def.arity >= 1));
      // Shape inference names the op when the input count is wrong.
      if (def.arity > 0) {
        std::vector<TensorMeta> wrong(static_cast<std::size_t>(def.arity) + 1, {{2}, DType::f32});
        BOOST_CHECK_EXCEPTION(infer_meta(op, wrong, {}), Error, [&](const Error& e) {
          return std::string(e.what()).find(def.name) != std::string::npos;
        });
      }
      // Saved outputs must exist, and non-differentiable ops save nothing.
      for (std::size_t k = 4; k < 8; ++k)
        if (def.saved >> k & 1) BOOST_TEST(static_cast<int>(k - 4) < def.num_outputs);
      if (def.grad != Grad::derivative) BOOST_TEST(def.saved == saved::none);
    }
  }
  BOOST_TEST(names.size() == kNumOps);
}

BOOST_AUTO_TEST_CASE(attributes_print_compare_and_hash_by_the_fields_each_op_reads) {
  OpAttrs a, b;
  a.dims = {1};
  b.dims = {2};
  a.dim = b.dim = 3;
  // add reads no attribute: differing dims do not matter; sum reads dims: they do.
  BOOST_TEST(attrs_equal(OpId::add, a, b));
  BOOST_TEST(attrs_hash(OpId::add, a) == attrs_hash(OpId::add, b));
  BOOST_TEST(!attrs_equal(OpId::sum, a, b));
  BOOST_TEST(attrs_equal(OpId::gather, a, b));  // reads dim only
  BOOST_TEST(attrs_str(OpId::add, a) == "");
  BOOST_TEST(attrs_str(OpId::sum, a) == "dims=[1], keepdim=false");
  BOOST_TEST(attrs_str(OpId::slice, a) == "dim=3, start=0, end=0, step=1");
  OpAttrs p, q;
  p.value = std::nan("");
  q.value = std::nan("");
  BOOST_TEST(attrs_equal(OpId::pad, p, q));  // by bits: NaN fill equals NaN fill
  q.value = -0.0;
  p.value = 0.0;
  BOOST_TEST(!attrs_equal(OpId::pad, p, q));
  // Symbolic target shapes compare by expression, not by the traced sizes.
  OpAttrs r, s;
  r.shape = {4, 3};
  s.shape = {8, 3};
  r.shape_exprs = s.shape_exprs = {SymExpr::symbol(0) * SymExpr::constant(2), SymExpr::constant(3)};
  BOOST_TEST(attrs_equal(OpId::reshape, r, s));
  BOOST_TEST(attrs_str(OpId::reshape, r) == "shape=[2*s0, 3]");
}

BOOST_AUTO_TEST_CASE(every_op_has_samples_in_every_sweep_dtype) {
  for (OpId op : all_ops())
    for (DType t : test::sample_dtypes(op))
      BOOST_TEST(!test::op_samples(op, t).empty(), "no sample for " << op_name(op) << " in " << dtype_name(t));
}

BOOST_AUTO_TEST_CASE(eager_equals_traced_and_run_for_every_op) {
  for (OpId op : all_ops()) {
    bool recorded = false;
    for (DType t : test::sample_dtypes(op)) {
      for (const OpSample& s : test::op_samples(op, t)) {
        BOOST_TEST_CONTEXT(s.label << " in " << dtype_name(t)) {
          std::vector<Tensor> eager = s.run(s.inputs);
          std::vector<Tensor> traced = run_compiled(s, op, recorded, s.inputs);
          BOOST_TEST_REQUIRE(eager.size() == traced.size());
          for (std::size_t k = 0; k < eager.size(); ++k)
            BOOST_TEST(identical(eager[k], traced[k]), "output " << k << ": eager " << eager[k]
                                                                 << " traced " << traced[k]);
        }
      }
    }
    BOOST_TEST(recorded, "no sample of " << op_name(op) << " records it in a graph");
  }
}

BOOST_AUTO_TEST_CASE(gradients_of_every_op_match_finite_differences_and_compiled_backward) {
  for (OpId op : all_ops()) {
    if (op_def(op).grad == Grad::none || op_def(op).grad == Grad::refused) continue;
    for (const OpSample& s : test::op_samples(op, DType::f64)) {
      BOOST_TEST_CONTEXT(s.label) {
        std::vector<Tensor> in = leaves(s);
        std::vector<Tensor> wrt = floating_leaves(in);
        Tensor out = s.run(in)[0];
        if (!is_floating(out.dtype())) continue;  // cast to an integer type: no gradient
        BOOST_TEST_REQUIRE(out.requires_grad());
        if (op_def(op).grad == Grad::zero) {
          auto grads = autograd::grad({out}, wrt, {ones_like(out)});
          for (const auto& g : grads)
            BOOST_TEST((g.defined() && allclose(g, zeros_like(g), 0, 0)), "gradient " << g);
          continue;
        }
        if (out.dtype() == DType::f64) {
          auto result = autograd::gradcheck(
              [&](const std::vector<Tensor>& x) {
                std::vector<Tensor> full = in;
                for (std::size_t i = 0, j = 0; i < full.size(); ++i)
                  if (full[i].requires_grad()) full[i] = x[j++];
                return s.run(full)[0];
              },
              wrt);
          BOOST_TEST(result.ok, result.report);
        }
        // The compiled function's gradient equals eager's for the same output gradient.
        Generator gen(99);
        Tensor seed = randn(out.shape(), out.dtype(), &gen);
        auto eager_grads = autograd::grad({out}, wrt, {seed});
        bool recorded = false;
        Tensor compiled_out = run_compiled(s, op, recorded, in)[0];
        auto compiled_grads = autograd::grad({compiled_out}, wrt, {seed});
        for (std::size_t i = 0; i < wrt.size(); ++i)
          BOOST_TEST(allclose(eager_grads[i], compiled_grads[i], 1e-12, 1e-12),
                     "input " << i << ": eager " << eager_grads[i] << " compiled "
                              << compiled_grads[i]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ops_without_gradient_give_outputs_that_do_not_require_grad) {
  for (OpId op : all_ops()) {
    const Grad grad = op_def(op).grad;
    if ((grad != Grad::none && grad != Grad::refused) || op == OpId::detach) continue;
    for (DType t : test::sample_dtypes(op)) {
      if (!is_floating(t)) continue;
      for (const OpSample& s : test::op_samples(op, t)) {
        BOOST_TEST_CONTEXT(s.label << " in " << dtype_name(t)) {
          // An inference-only op refuses inputs that require grad rather than drop the gradient.
          if (grad == Grad::refused) {
            KILN_CHECK_THROWS(s.run(leaves(s)), Error, std::string(op_name(op)), "requires grad");
          } else {
            for (const Tensor& out : s.run(leaves(s))) BOOST_TEST(!out.requires_grad());
          }
        }
      }
    }
  }
  // detach stops the gradient: d/dx (x * detach(x)) is detach(x) = x, not 2x.
  Tensor x = from_vector(std::vector<double>{1, -2, 3});
  x.requires_grad_();
  (x * x.detach()).sum().backward();
  BOOST_TEST(x.grad().to_vector<double>() == (std::vector<double>{1, -2, 3}));
}

BOOST_AUTO_TEST_CASE(composites_record_only_the_primitives_they_list) {
  Generator gen(5);
  Tensor x = randn({3, 4}, DType::f64, &gen), w = randn({4}, DType::f64, &gen);
  Tensor m = randn({4, 5}, DType::f64, &gen), b3 = randn({2, 3, 4}, DType::f64, &gen);
  Tensor idx = from_vector(std::vector<std::int64_t>{1, 0, 2});
  Tensor weight = m.t().contiguous(), bias = randn({5}, DType::f64, &gen);
  Tensor mask = gt(randn({3, 4}, DType::f64, &gen), 0), b3t = b3.transpose(1, 2).contiguous();
  using Fn = std::function<Tensor(const Tensor&)>;
  std::map<std::string_view, Fn> calls = {
      {"mean", [](const Tensor& a) { return mean(a, {1}); }},
      {"var", [](const Tensor& a) { return var(a, {0}); }},
      {"std", [](const Tensor& a) { return kiln::std(a, {1}); }},
      {"logsumexp", [](const Tensor& a) { return logsumexp(a, {1}); }},
      {"layer_norm", [&](const Tensor& a) { return layer_norm(a, {4}, w, w); }},
      {"rms_norm", [&](const Tensor& a) { return rms_norm(a, {4}, w); }},
      {"cross_entropy", [&](const Tensor& a) { return cross_entropy(a, idx); }},
      {"mse_loss", [](const Tensor& a) { return mse_loss(a, a * 2); }},
      {"linear", [&](const Tensor& a) { return linear(a, weight, bias); }},
      {"embedding", [&](const Tensor& a) { return embedding(a, idx); }},
      {"stack", [](const Tensor& a) { return stack({a, a}, 1); }},
      {"select", [](const Tensor& a) { return a.select(1, 2); }},
      {"square", [](const Tensor& a) { return square(a); }},
      {"leaky_relu", [](const Tensor& a) { return leaky_relu(a, 0.1); }},
      {"clamp", [](const Tensor& a) { return clamp(a, -0.5, 0.5); }},
      {"masked_fill", [&](const Tensor& a) { return masked_fill(a, mask, 7.0); }},
      {"bmm", [&](const Tensor&) { return bmm(b3, b3t); }},
      {"einsum", [&](const Tensor& a) { return einsum("ij,jk->ik", {a, m}); }},
  };
  for (const CompositeInfo& c : all_composites()) {
    BOOST_TEST_CONTEXT(c.name) {
      auto it = calls.find(c.name);
      BOOST_TEST_REQUIRE((it != calls.end()), "the test has no call of " << c.name);
      jit::CompileOptions options;
      options.dynamic = jit::DynamicMode::never;
      const Fn& fn = it->second;
      auto f = jit::compile([&](const Tensor& a) { return fn(a); }, options);
      BOOST_TEST(identical(f(x), fn(x)));
      std::set<OpId> listed(c.primitives.begin(), c.primitives.end());
      for (const auto& n : f.core().graph(0).nodes)
        BOOST_TEST(listed.count(n.op), c.name << " recorded " << op_name(n.op)
                                              << ", which its table entry does not list");
    }
  }
  BOOST_TEST(calls.size() == all_composites().size());
}

BOOST_AUTO_TEST_SUITE_END()
