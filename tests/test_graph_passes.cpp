// The graph IR and its passes, on traced graphs whose optimized form is known: dead code,
// common subexpressions, constant folding, algebraic simplification; printing; the registry.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "graph/passes.h"
#include "jit/compile.h"
#include "jit/reference_executor.h"
#include "support/device_compare.h"

using namespace kiln;

namespace {

template <typename Fn, typename... Args>
std::vector<OpId> traced_ops(Fn fn, const Args&... args) {
  auto f = jit::compile(fn);
  f(args...);
  std::vector<OpId> ops;
  for (const auto& n : f.core().graph(0).nodes) ops.push_back(n.op);
  return ops;
}

using Ops = std::vector<OpId>;

}  // namespace

BOOST_AUTO_TEST_SUITE(passes)

BOOST_AUTO_TEST_CASE(dead_code_is_removed) {
  auto ops = traced_ops(
      [](const Tensor& x) {
        Tensor unused = exp(x) * 3.0;
        (void)unused;
        return sin(x);
      },
      tensor({1, 2}));
  BOOST_TEST(ops == Ops{OpId::sin});
}

BOOST_AUTO_TEST_CASE(values_of_removed_nodes_name_no_producer) {
  // Value ids outlive the nodes a pass removes; an old node index would name another node.
  auto f = jit::compile([](const Tensor& x) { return exp(x) + exp(x) + sin(x); });
  f(tensor({1, 2}));
  const auto& g = f.core().graph(0);
  std::vector<bool> made(g.values.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs) {
      made[v] = true;
      BOOST_TEST(g.values[v].producer == static_cast<int>(i));
    }
  int removed = 0;
  for (std::size_t v = 0; v < g.values.size(); ++v)
    if (!made[v] && !g.input_of(static_cast<int>(v))) {
      ++removed;
      BOOST_TEST(g.values[v].producer == -1);
    }
  BOOST_TEST(removed >= 1);  // the second exp, merged into the first
}

BOOST_AUTO_TEST_CASE(common_subexpressions_are_merged) {
  auto ops =
      traced_ops([](const Tensor& x) { return exp(x) + exp(x) + exp(x * 2.0); }, tensor({1}));
  // C++ leaves the evaluation order of operands open: count ops rather than list them.
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::exp) == 2);
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::add) == 2);
  BOOST_TEST(ops.size() == 5u);
}

BOOST_AUTO_TEST_CASE(constants_fold_and_keep_their_values) {
  auto fn = [](const Tensor& x) { return x + (tensor({1, 2, 3}) * 2.0 + 1.0).sum(); };
  auto f = jit::compile(fn);
  Tensor x = tensor({10, 20});
  BOOST_TEST(f(x).to_vector<float>() == (std::vector<float>{25, 35}));
  const auto& g = f.core().graph(0);
  BOOST_TEST(g.nodes.size() == 1u);  // only the add of x and the folded 15
  BOOST_TEST(g.str().find("= 15") != std::string::npos, g.str());
}

BOOST_AUTO_TEST_CASE(captured_tensors_are_not_folded) {
  Tensor w = tensor({1, 2});  // held outside: may change between calls
  auto f = jit::compile([&](const Tensor& x) { return x + w * 2.0; });
  BOOST_TEST(f(tensor({0, 0})).to_vector<float>() == (std::vector<float>{2, 4}));
  BOOST_TEST(f.core().graph(0).nodes.size() == 2u);
  {
    NoGradGuard no_grad;
    w.fill_(5);
  }
  BOOST_TEST(f(tensor({0, 0})).to_vector<float>() == (std::vector<float>{10, 10}));
}

BOOST_AUTO_TEST_CASE(algebraic_identities_simplify_away) {
  Tensor x = tensor({1, -2, 3});
  BOOST_TEST(traced_ops([](const Tensor& t) { return (t * 1.0 + 0.0 - 0.0) / 1.0; }, x).empty());
  BOOST_TEST(traced_ops([](const Tensor& t) { return 1.0 * (0.0 + t); }, x).empty());
  BOOST_TEST(traced_ops([](const Tensor& t) { return neg(neg(t)); }, x).empty());
  BOOST_TEST(
      traced_ops([](const Tensor& t) { return t.to(DType::f64).to(DType::f32); }, x).empty());
  BOOST_TEST(traced_ops([](const Tensor& t) { return t.reshape({3, 1}).reshape({3}); }, x).empty());
  BOOST_TEST(traced_ops([](const Tensor& t) { return t.permute({0}); }, x).empty());
  BOOST_TEST((traced_ops(
                  [](const Tensor& t) {
                    return t.reshape({1, 3}).reshape({3, 1});
                  },
                  x) == Ops{OpId::reshape}));
}

BOOST_AUTO_TEST_CASE(identities_that_would_change_results_are_kept) {
  Tensor x = tensor({1, -2, 3});
  // Rounding through f16 is not the identity.
  BOOST_TEST((traced_ops([](const Tensor& t) { return t.to(DType::f16).to(DType::f32); }, x) ==
              Ops{OpId::cast, OpId::cast}));
  // Multiplying by a broadcast one changes the shape.
  BOOST_TEST((traced_ops([](const Tensor& t) { return t * ones({2, 3}); }, x) == Ops{OpId::mul}));
  // Multiplying by 1.0 promotes an integer tensor.
  Tensor xi = from_vector(std::vector<std::int32_t>{1, 2});
  BOOST_TEST(traced_ops([](const Tensor& t) { return t * 1.5; }, xi) == Ops{OpId::mul});
  BOOST_TEST(traced_ops([](const Tensor& t) { return t * 2.0; }, x) == Ops{OpId::mul});
}

BOOST_AUTO_TEST_CASE(an_expand_that_broadcasting_does_anyway_is_dropped) {
  // A derivative rule's expand(grad) read by ops that broadcast it against a full operand: the
  // readers take the small value (so a kernel reducing it can also compute them). An expand a
  // unary op reads, or one that is returned, is a real result and stays.
  auto f = jit::compile([](const Tensor& x, const Tensor& r) {
    Tensor wide = r.expand_as(x);
    return std::make_tuple(x * wide + wide, exp(r.expand_as(x)), r.expand_as(x));
  });
  Tensor x = randn({3, 4}, DType::f64), r = randn({3, 1}, DType::f64);
  auto [a, b, c] = f(x, r);
  const auto& g = f.core().graph(0);
  // The mul and the add read r itself; the expand is left to exp and the returned value.
  for (const auto& n : g.nodes)
    if (n.op == OpId::mul || n.op == OpId::add)
      for (int v : n.inputs) {
        int p = g.values[v].producer;
        BOOST_TEST((p < 0 || g.nodes[p].op != OpId::expand));
      }
  BOOST_TEST(std::count_if(g.nodes.begin(), g.nodes.end(),
                           [](const auto& n) { return n.op == OpId::expand; }) == 1);
  std::vector<double> xs = x.to_vector<double>(), rs = r.to_vector<double>(),
                      av = a.to_vector<double>(), bv = b.to_vector<double>(),
                      cv = c.to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      BOOST_TEST(av[i * 4 + j] == xs[i * 4 + j] * rs[i] + rs[i]);
      BOOST_TEST(bv[i * 4 + j] == std::exp(rs[i]));
      BOOST_TEST(cv[i * 4 + j] == rs[i]);
    }
}

BOOST_AUTO_TEST_CASE(zero_pads_that_tile_a_dim_become_one_cat) {
  // The gradient of q, k, v sliced from one projection: a pad of each, summed. It is their cat,
  // and when each piece is a reshape merging trailing dims, the cat of the unmerged pieces.
  auto f = jit::compile([](const Tensor& q, const Tensor& k, const Tensor& v) {
    Tensor q2 = q.permute({0, 2, 1, 3}).reshape({2, 3, 8});
    Tensor k2 = k.permute({0, 2, 1, 3}).reshape({2, 3, 8});
    Tensor v2 = v.permute({0, 2, 1, 3}).reshape({2, 3, 8});
    Tensor tiled = pad(v2, {16, 0}) + pad(q2, {0, 16}) + pad(k2, {8, 8});
    Tensor gap = pad(q2, {0, 17}) + pad(k2, {9, 8});  // a zero column between: not a cat
    return std::make_tuple(tiled, gap);
  });
  Tensor q = randn({2, 2, 3, 4}, DType::f64), k = randn({2, 2, 3, 4}, DType::f64),
         v = randn({2, 2, 3, 4}, DType::f64);
  auto [tiled, gap] = f(q, k, v);
  Ops ops;
  for (const auto& n : f.core().graph(0).nodes) ops.push_back(n.op);
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::cat) == 1);
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::pad) == 2);  // the gap's
  // The cat reads the permuted pieces themselves (no reshape of a permute copies them).
  const auto& g = f.core().graph(0);
  for (const auto& n : g.nodes)
    if (n.op == OpId::cat)
      for (int in : n.inputs) BOOST_TEST(g.values[in].meta.shape.size() == 4u);
  // Element by element from the inputs: out[b, t, c] with c = piece * 8 + h * 4 + d.
  std::vector<double> got = tiled.to_vector<double>(), got_gap = gap.to_vector<double>();
  const Tensor* pieces[3] = {&q, &k, &v};
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      for (int c = 0; c < 24; ++c) {
        int piece = c / 8, h = c % 8 / 4, d = c % 4;
        double want = pieces[piece]->to_vector<double>()[((b * 2 + h) * 3 + t) * 4 + d];
        BOOST_TEST(got[(b * 3 + t) * 24 + c] == want);
        double q_part = c < 8 ? q.to_vector<double>()[((b * 2 + h) * 3 + t) * 4 + d] : 0.0;
        double k_part =
            c >= 9 && c < 17
                ? k.to_vector<double>()[((b * 2 + (c - 9) / 4) * 3 + t) * 4 + (c - 9) % 4]
                : 0.0;
        if (c < 24) BOOST_TEST(got_gap[(b * 3 + t) * 25 + c] == q_part + k_part);
      }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(graph_ir)

BOOST_AUTO_TEST_CASE(text_printing_is_deterministic_and_exact) {
  jit::CompileOptions options;
  options.name = "affine";
  options.arg_names = {"x", "w"};
  auto f = jit::compile(
      [](const Tensor& x, const Tensor& w) { return relu(matmul(x, w)).sum({1}); }, options);
  f(ones({2, 3}), ones({3, 4}));
  std::string expected =
      "graph affine(%0: f32[2, 3] argument 'x',\n"
      "             %1: f32[3, 4] argument 'w'):\n"
      "  %2: f32[2, 4] = matmul(%0, %1)\n"
      "  %3: f32[2, 4] = relu(%2)\n"
      "  %4: f32[2] = sum(%3, dims=[1], keepdim=false)\n"
      "  return (%4)\n";
  BOOST_TEST(f.core().graph(0).str() == expected);
  std::string dot = f.core().graph(0).dot();
  BOOST_TEST(dot.find("v0 -> n0;") != std::string::npos);                 // input x into matmul
  BOOST_TEST(dot.find("n0 -> n1 [label=\"%2\"];") != std::string::npos);  // matmul into relu
  BOOST_TEST(dot.find("n2 -> out0 [label=\"%4\"];") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(permute_chains_compose_and_zero_pads_vanish) {
  // A transpose of a transpose is the tensor; a general pair composes into one permute.
  auto f = jit::compile([](const Tensor& x) {
    return std::make_tuple(x.transpose(0, 1).transpose(0, 1) + 1.0,
                           x.permute({1, 2, 0}).permute({1, 2, 0}), pad(x, {0, 0, 0, 0}) * 2.0);
  });
  Tensor x = randn({2, 3, 4});
  auto [a, b, c] = f(x);
  Ops ops;
  for (const auto& n : f.core().graph(0).nodes) ops.push_back(n.op);
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::permute) == 1);
  BOOST_TEST(std::count(ops.begin(), ops.end(), OpId::pad) == 0);
  BOOST_TEST(test::relative_error(a, x + 1.0) == 0.0);
  BOOST_TEST(test::relative_error(b, x.permute({2, 0, 1})) == 0.0);
  BOOST_TEST(test::relative_error(c, x * 2.0) == 0.0);
}

BOOST_AUTO_TEST_CASE(a_transposed_matmul_result_is_computed_transposed) {
  auto f = jit::compile([](const Tensor& a, const Tensor& b) {
    Tensor c = matmul(a.transpose(0, 1), a);
    return std::make_tuple(matmul(a, b).transpose(0, 1), c.transpose(0, 1) + c);
  });
  Tensor a = randn({3, 5}, DType::f64), b = randn({5, 4}, DType::f64);
  f(a, b);
  graph::Graph g = f.core().graph(0);
  graph::transpose_matmul_results(g);
  // The first product is read only by its transpose: it becomes matmul(bᵀ, aᵀ), returned as
  // is; the second has two readers and stays.
  int matmuls = 0;
  for (const auto& n : g.nodes) {
    if (n.op != OpId::matmul) continue;
    ++matmuls;
    if (n.output() == g.outputs[0])
      for (int v : n.inputs) BOOST_TEST((g.nodes[g.values[v].producer].op == OpId::permute));
  }
  BOOST_TEST(matmuls == 2);
  BOOST_TEST((g.nodes[g.values[g.outputs[0]].producer].op == OpId::matmul));
  std::array<jit::CallArg, 2> args{jit::CallArg{true, &a, 0.0}, jit::CallArg{true, &b, 0.0}};
  std::vector<Tensor> got = jit::run_reference(g, args, {});
  BOOST_TEST(test::relative_error(got[0], matmul(b.transpose(0, 1), a.transpose(0, 1))) <= 1e-12);
  BOOST_TEST(test::relative_error(got[0], matmul(a, b).transpose(0, 1)) <= 1e-12);
  BOOST_TEST(got[0].is_contiguous());
}

BOOST_AUTO_TEST_SUITE_END()
