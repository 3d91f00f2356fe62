// The fuser's partition (graph/fusion.h): one test per rule on traced graphs whose right
// partition is known by hand, and invariants (every node in one group, groups in dependency
// order, a reason on every unfused edge) over the op table's samples.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/op_samples.h"

using namespace kiln;
using graph::FusionKind;

namespace {

// The optimized graph of the newest entry after calling `fn` once on `args`.
template <typename Fn, typename... Args>
graph::Graph traced(Fn fn, const Args&... args) {
  auto f = jit::compile(fn);
  f(args...);
  return f.core().graph(static_cast<int>(f.core().num_entries()) - 1);
}

std::vector<FusionKind> kinds(const graph::Partition& p) {
  std::vector<FusionKind> out;
  for (const auto& g : p.groups) out.push_back(g.kind);
  return out;
}

const graph::UnfusedEdge* edge_into(const graph::Graph& g, const graph::Partition& p, OpId op) {
  for (const auto& e : p.unfused)
    if (g.nodes[e.consumer_node].op == op) return &e;
  return nullptr;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Invariants every partition keeps: each node in exactly one group, the group list respects
// every edge, group inputs/outputs agree with the edges, every crossing edge has a reason.
void check_invariants(const graph::Graph& g, const graph::Partition& p) {
  BOOST_TEST_REQUIRE(p.group_of.size() == g.nodes.size());
  std::vector<int> seen(g.nodes.size(), 0);
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi)
    for (int n : p.groups[gi].nodes) {
      ++seen[n];
      BOOST_TEST(p.group_of[n] == static_cast<int>(gi));
    }
  for (int count : seen) BOOST_TEST(count == 1);
  std::size_t crossing = 0;
  for (std::size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs) {
      int prod = g.values[v].producer;
      if (prod < 0) continue;
      int a = p.group_of[prod], b = p.group_of[n];
      BOOST_TEST(a <= b, "edge %" << v << " goes from group " << a << " back to group " << b);
      if (a == b) continue;
      ++crossing;
      const auto& outs = p.groups[a].outputs;
      const auto& ins = p.groups[b].inputs;
      BOOST_TEST((std::find(outs.begin(), outs.end(), v) != outs.end()));
      BOOST_TEST((std::find(ins.begin(), ins.end(), v) != ins.end()));
    }
  BOOST_TEST(p.unfused.size() == crossing);
  for (const auto& e : p.unfused) BOOST_TEST(!e.reason.empty());
  for (int v : g.outputs) {
    int prod = g.values[v].producer;
    if (prod < 0) continue;
    const auto& outs = p.groups[p.group_of[prod]].outputs;
    BOOST_TEST((std::find(outs.begin(), outs.end(), v) != outs.end()));
  }
}

graph::Partition checked_partition(const graph::Graph& g, graph::FusionLimits limits = {}) {
  auto p = graph::partition(g, limits);
  check_invariants(g, p);
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fusion)

BOOST_AUTO_TEST_CASE(an_elementwise_chain_with_a_broadcast_bias_is_one_kernel) {
  auto g = traced([](const Tensor& x, const Tensor& b) { return relu(x + b) * 2.0 - sigmoid(x); },
                  randn({3, 4}), randn({4}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::pointwise));
  BOOST_TEST(p.groups[0].inputs.size() == 3u);  // x, b and the constant 2
  BOOST_TEST(p.groups[0].outputs.size() == 1u);
  for (const char* op : {"add", "relu", "mul", "sigmoid", "sub"})
    BOOST_TEST(contains(p.groups[0].name, op));
}

BOOST_AUTO_TEST_CASE(layer_norm_is_one_normalization_kernel) {
  auto g = traced([](const Tensor& x, const Tensor& w,
                     const Tensor& b) { return layer_norm(x, {8}, w, b, 1e-5); },
                  randn({5, 8}), randn({8}), randn({8}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::normalization));
  BOOST_TEST(p.groups[0].reduce_dims == std::vector<std::int64_t>{1});
  BOOST_TEST(p.groups[0].domain.size() == 2u);
  BOOST_TEST(p.groups[0].outputs.size() == 1u);
  BOOST_TEST(p.launch_count() == 1);
}

BOOST_AUTO_TEST_CASE(a_cast_of_half_precision_weights_is_recomputed_not_a_boundary) {
  // layer_norm widens f16 weight and bias to f32: [8] casts read over [5, 8].
  auto g =
      traced([](const Tensor& x, const Tensor& w,
                const Tensor& b) { return layer_norm(x, {8}, w, b, 1e-5); },
             randn({5, 8}).to(DType::f16), randn({8}).to(DType::f16), randn({8}).to(DType::f16));
  auto p = checked_partition(g);
  BOOST_TEST(p.launch_count() == 1, p.str(g));
  // Any other computed value broadcast into a kernel stays a boundary (see below), and so does a
  // cast that another kernel also reads.
  auto h = traced(
      [](const Tensor& x, const Tensor& w) {
        Tensor wide = w.to(DType::f32);
        return std::vector<Tensor>{x * wide, wide};
      },
      randn({5, 8}), randn({8}).to(DType::f16));
  BOOST_TEST(checked_partition(h).launch_count() == 2);
}

BOOST_AUTO_TEST_CASE(an_input_cast_used_as_a_matmul_bias_stays_its_own_kernel) {
  // autocast's linear: the f32 bias cast to bf16 is added to the bf16 product. Recomputed in
  // the add's kernel it would keep that kernel from being the product's cuBLASLt epilogue, so
  // it stays apart (one cast of 16 values) and the add + gelu group reads the product alone.
  auto g = traced(
      [](const Tensor& x, const Tensor& w, const Tensor& b) {
        Tensor y = matmul(cast(x, DType::bf16), transpose(cast(w, DType::bf16), 0, 1));
        return gelu(y + cast(b, DType::bf16), GeluApproximation::tanh);
      },
      randn({4, 8}), randn({16, 8}), randn({16}));
  auto p = checked_partition(g);
  const graph::UnfusedEdge* bias_edge = nullptr;
  for (const auto& e : p.unfused)
    if (g.nodes[e.consumer_node].op == OpId::add && g.values[e.value].meta.shape == Shape{16})
      bias_edge = &e;
  BOOST_TEST_REQUIRE(bias_edge != nullptr, p.str(g));
  BOOST_TEST(contains(bias_edge->reason, "is the bias of matmul product"), bias_edge->reason);
  int epilogue_nodes = -1, bias_casts = 0;
  for (const auto& group : p.groups) {
    std::multiset<OpId> ops;
    for (int n : group.nodes) ops.insert(g.nodes[n].op);
    if (ops.contains(OpId::add)) epilogue_nodes = static_cast<int>(group.nodes.size());
    if (ops.size() == 1 && ops.contains(OpId::cast) &&
        g.values[group.outputs[0]].meta.shape == Shape{16})
      ++bias_casts;
  }
  BOOST_TEST(epilogue_nodes == 2, p.str(g));  // add + gelu_tanh
  BOOST_TEST(bias_casts == 1, p.str(g));
  // A cast added to anything but a matmul's product is still recomputed where it is read.
  auto h = traced(
      [](const Tensor& x, const Tensor& b) {
        return gelu(cast(x, DType::bf16) + cast(b, DType::bf16), GeluApproximation::tanh);
      },
      randn({4, 16}), randn({16}));
  BOOST_TEST(checked_partition(h).launch_count() == 1);
}

BOOST_AUTO_TEST_CASE(softmax_with_prologue_and_epilogue_is_one_kernel) {
  auto g = traced([](const Tensor& x) { return softmax(x * 0.5, -1) + 1.0; }, randn({4, 6}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::normalization));
}

BOOST_AUTO_TEST_CASE(rms_norm_and_cross_entropy_forward) {
  auto rms = traced([](const Tensor& x, const Tensor& w) { return rms_norm(x, {8}, w, 1e-6); },
                    randn({3, 8}), randn({8}));
  BOOST_TEST(checked_partition(rms).launch_count() == 1);
  // cross_entropy's gather picks one log-probability per row: a row select, fused into the
  // log_softmax kernel; the mean over the batch folds other dims, so it is a second kernel.
  auto ce = traced([](const Tensor& x, const Tensor& t) { return cross_entropy(x, t); },
                   randn({4, 5}), from_vector(std::vector<std::int64_t>{0, 3, 1, 4}));
  auto p = checked_partition(ce);
  auto k = kinds(p);
  BOOST_TEST(p.launch_count() == 2, p.str(ce));
  BOOST_TEST((std::count(k.begin(), k.end(), FusionKind::normalization) == 1));
  BOOST_TEST((std::count(k.begin(), k.end(), FusionKind::index) == 0));
  for (const auto& g : p.groups)
    if (g.kind == FusionKind::normalization) {
      bool has_gather = false;
      for (int n : g.nodes) has_gather = has_gather || ce.nodes[n].op == OpId::gather;
      BOOST_TEST(has_gather, p.str(ce));
    }
  const auto* e = edge_into(ce, p, OpId::sum);
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(contains(e->reason, "reductions over different rows"), e->reason);
}

BOOST_AUTO_TEST_CASE(a_value_shaped_like_the_rows_that_broadcasts_along_them_is_a_boundary) {
  // [3, 3] normalized over dim 1: abs(y) + 1 has the rows' shape [3], but dividing the [3, 3]
  // result by it broadcasts it along dim 1 (one value per column), not per row.
  auto fn = [](const Tensor& x, const Tensor& y) { return log_softmax(x, 1) / (abs(y) + 1.0); };
  Tensor x = randn({3, 3}), y = randn({3});
  auto g = traced(fn, x, y);
  auto p = checked_partition(g);
  BOOST_TEST(p.launch_count() == 2, p.str(g));
  const auto* e = edge_into(g, p, OpId::div);
  BOOST_TEST_REQUIRE(e != nullptr, p.str(g));
  BOOST_TEST(contains(e->reason, "has the rows' shape without keepdim"), e->reason);
  // Over dim 0 the rows are the trailing dim: the same shape lines up, and it is one kernel.
  auto rows_last = traced(
      [](const Tensor& x, const Tensor& y) { return log_softmax(x, 0) / (abs(y) + 1.0); }, x, y);
  BOOST_TEST(checked_partition(rows_last).launch_count() == 1,
             checked_partition(rows_last).str(rows_last));
  // And the result on the device is the CPU's.
  auto f = jit::compile(fn);
  Tensor got = f(x.to(Device::cuda()), y.to(Device::cuda()));
  Tensor want = fn(x, y);
  Tensor diff = abs(got.to(Device::cpu()) - want);
  BOOST_TEST(amax(diff, {0, 1}, false).item() < 1e-5);
}

BOOST_AUTO_TEST_CASE(only_a_gather_of_one_element_per_row_is_a_row_select) {
  // Two indices per row is a gather proper: an indexing kernel of its own.
  auto two = traced([](const Tensor& x, const Tensor& i) { return gather(exp(x), 1, i) * 2.0; },
                    randn({4, 5}),
                    from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2}).reshape({4, 2}));
  auto p = checked_partition(two);
  auto k = kinds(p);
  BOOST_TEST((std::count(k.begin(), k.end(), FusionKind::index) == 1), p.str(two));
  const auto* e = edge_into(two, p, OpId::gather);
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(contains(e->reason, "gather is an indexing op"), e->reason);
  // One per row joins the producer's rows.
  auto one =
      traced([](const Tensor& x, const Tensor& i) { return gather(exp(x), 1, i) * 2.0; },
             randn({4, 5}), from_vector(std::vector<std::int64_t>{0, 1, 2, 3}).reshape({4, 1}));
  BOOST_TEST(checked_partition(one).launch_count() == 1, checked_partition(one).str(one));
}

BOOST_AUTO_TEST_CASE(matmul_is_a_library_call_and_its_epilogue_a_kernel) {
  auto g = traced(
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return gelu(linear(x, w, b)); },
      randn({3, 4}), randn({5, 4}), randn({5}));
  auto p = checked_partition(g);
  BOOST_TEST((kinds(p) == std::vector<FusionKind>{FusionKind::view, FusionKind::matmul,
                                                  FusionKind::pointwise}));
  BOOST_TEST(p.launch_count() == 2);  // the transpose of w is a host-side view
  BOOST_TEST(p.groups[2].name == "add_gelu");
  const auto* e = edge_into(g, p, OpId::add);
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(contains(e->reason, "matmul is a library call"));
}

BOOST_AUTO_TEST_CASE(a_computed_value_broadcast_to_a_larger_shape_is_a_boundary) {
  // exp over [3, 1] then broadcast over [3, 4]: fusing would compute each exp four times.
  auto g = traced([](const Tensor& x, const Tensor& y) { return exp(x) * y; }, randn({3, 1}),
                  randn({3, 4}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 2u);
  const auto* e = edge_into(g, p, OpId::mul);
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(contains(e->reason, "is broadcast over [3, 4]"), e->reason);
  // The same broadcast of a graph input is just a strided read: one kernel.
  auto h = traced([](const Tensor& x, const Tensor& y) { return exp(y) * x; }, randn({3, 1}),
                  randn({3, 4}));
  BOOST_TEST(checked_partition(h).groups.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_slice_of_a_computed_value_is_a_boundary_and_reshape_is_not) {
  auto sliced = traced([](const Tensor& x) { return exp(x).slice(1, 0, 2) + 1.0; }, randn({3, 4}));
  auto p = checked_partition(sliced);
  BOOST_TEST(p.launch_count() == 2);
  BOOST_TEST(!p.unfused.empty());
  BOOST_TEST(contains(p.unfused[0].reason, "larger than the domain"), p.unfused[0].reason);
  auto reshaped = traced(
      [](const Tensor& x) {
        return exp(x).reshape({4, 3}) + 1.0;
      },
      randn({3, 4}));
  BOOST_TEST(checked_partition(reshaped).launch_count() == 1);
}

BOOST_AUTO_TEST_CASE(a_full_reduction_read_back_over_every_element_is_a_boundary) {
  auto g = traced([](const Tensor& x) { return x - sum(x); }, randn({3, 4}));
  auto p = checked_partition(g);
  BOOST_TEST(p.launch_count() == 2);
  const auto* e = edge_into(g, p, OpId::sub);
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(contains(e->reason, "grid-wide barrier"), e->reason);
  // Over rows, the same pattern stays in one kernel.
  auto rows = traced([](const Tensor& x) { return x - sum(x, {1}, true); }, randn({3, 4}));
  auto q = checked_partition(rows);
  BOOST_TEST(q.launch_count() == 1);
  BOOST_TEST((q.groups[0].kind == FusionKind::normalization));
}

BOOST_AUTO_TEST_CASE(independent_reductions_over_the_same_rows_share_one_kernel) {
  auto g = traced(
      [](const Tensor& x) {
        return std::vector<Tensor>{sum(x, {1}), sum(x * x, {1}), amax(x, {1})};
      },
      randn({6, 5}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::reduction));
  BOOST_TEST(p.groups[0].outputs.size() == 3u);
  BOOST_TEST(p.groups[0].inputs.size() == 1u);  // x is read once
}

BOOST_AUTO_TEST_CASE(reductions_over_different_dims_are_separate_and_share_a_written_value) {
  auto g = traced(
      [](const Tensor& x) {
        Tensor e = exp(x);
        return std::vector<Tensor>{sum(e, {0}), sum(e, {1})};
      },
      randn({3, 4}));
  auto p = checked_partition(g);
  BOOST_TEST(p.groups.size() == 2u);
  BOOST_TEST_REQUIRE(p.unfused.size() == 1u);
  BOOST_TEST(contains(p.unfused[0].reason, "reductions over different rows"), p.unfused[0].reason);
  // exp is computed once, in the first kernel, which writes it for the second.
  BOOST_TEST(p.groups[0].outputs.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_merge_that_would_make_a_cycle_is_refused) {
  // exp -> matmul -> add and exp -> add: fusing exp with add would need the matmul inside.
  auto g = traced(
      [](const Tensor& x, const Tensor& w) {
        Tensor a = exp(x);
        return a + matmul(a, w);
      },
      randn({4, 4}), randn({4, 4}));
  auto p = checked_partition(g);
  BOOST_TEST(p.groups.size() == 3u);
  bool cycle = std::any_of(p.unfused.begin(), p.unfused.end(), [](const auto& e) {
    return contains(e.reason, "cycle") && contains(e.reason, "matmul");
  });
  BOOST_TEST(cycle);
}

BOOST_AUTO_TEST_CASE(kernels_respect_the_input_and_node_bounds) {
  auto sum_of = [](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d,
                   const Tensor& e, const Tensor& f) { return a + b + c + d + e + f; };
  std::vector<Tensor> in;
  for (int i = 0; i < 6; ++i) in.push_back(randn({8}));
  auto g = traced(sum_of, in[0], in[1], in[2], in[3], in[4], in[5]);
  BOOST_TEST(checked_partition(g).groups.size() == 1u);
  auto p = checked_partition(g, {.max_inputs = 4, .max_nodes = 96});
  BOOST_TEST(p.groups.size() == 2u);
  for (const auto& group : p.groups) BOOST_TEST(group.inputs.size() <= 4u);
  BOOST_TEST(contains(p.unfused.at(0).reason, "(limit 4)"), p.unfused.at(0).reason);
  auto q = checked_partition(g, {.max_inputs = 24, .max_nodes = 2});
  BOOST_TEST(q.groups.size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_view_read_by_two_kernels_stays_on_the_host) {
  auto g = traced(
      [](const Tensor& x, const Tensor& w) {
        Tensor wt = w.t();
        return std::vector<Tensor>{matmul(x, wt), exp(wt)};
      },
      randn({3, 4}), randn({5, 4}));
  auto p = checked_partition(g);
  auto k = kinds(p);
  BOOST_TEST((std::count(k.begin(), k.end(), FusionKind::view) == 1));
  BOOST_TEST(p.launch_count() == 2);
}

BOOST_AUTO_TEST_CASE(max_over_a_dim_is_a_multi_output_reduction_with_epilogues) {
  auto g = traced(
      [](const Tensor& x) {
        auto [values, indices] = max(x, 1, true);
        return std::vector<Tensor>{x - values, indices};
      },
      randn({4, 5}));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::normalization));
  BOOST_TEST(p.groups[0].outputs.size() == 2u);
}

BOOST_AUTO_TEST_CASE(symbolic_sizes_keep_one_partition_for_every_batch) {
  auto f = jit::compile([](const Tensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {8}, w, b, 1e-5);
  });
  Tensor w = randn({8}), b = randn({8});
  f(randn({3, 8}), w, b);
  f(randn({5, 8}), w, b);  // a size recompile: the batch dim becomes symbolic
  const auto& g = f.core().graph(static_cast<int>(f.core().num_entries()) - 1);
  BOOST_TEST_REQUIRE(contains(g.str(), "s0"));
  auto p = checked_partition(g);
  BOOST_TEST_REQUIRE(p.groups.size() == 1u);
  BOOST_TEST((p.groups[0].kind == FusionKind::normalization));
  BOOST_TEST(p.groups[0].domain.at(0).str() == "s0");
}

BOOST_AUTO_TEST_CASE(printing_names_groups_and_reasons_and_dot_has_clusters) {
  auto g = traced([](const Tensor& x, const Tensor& w) { return relu(matmul(x, w)) + 1.0; },
                  randn({2, 3}), randn({3, 4}));
  auto p = checked_partition(g);
  std::string s = p.str(g);
  BOOST_TEST(contains(s, "2 groups, 2 launches"), s);
  BOOST_TEST(contains(s, "pointwise 'relu_add'"), s);
  BOOST_TEST(contains(s, "not fused: %"), s);
  BOOST_TEST(contains(s, "matmul is a library call"), s);
  std::string dot = p.dot(g);
  BOOST_TEST(contains(dot, "subgraph cluster_0"));
  BOOST_TEST(contains(dot, "subgraph cluster_1"));
  BOOST_TEST(contains(dot, "group 1: pointwise relu_add"));
}

BOOST_AUTO_TEST_CASE(kiln_log_fusion_and_explain_show_the_plan) {
  setenv("KILN_LOG", "fusion", 1);
  reload_log_settings();
  std::string explained;
  std::string err = kiln::test::capture_output(STDERR_FILENO, [&] {
    auto f = jit::compile([](const Tensor& x) { return softmax(x, -1) * 2.0; });
    f(randn({2, 3}));
    explained = f.explain();
  });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(contains(err, "kiln: fusion of"), err);
  BOOST_TEST(contains(err, "normalization 'softmax_mul'"), err);
  BOOST_TEST(contains(explained, "fusion plan"), explained);
  BOOST_TEST(contains(explained, "1 groups, 1 launches"), explained);
}

BOOST_AUTO_TEST_CASE(every_op_sample_partitions_with_the_invariants) {
  int partitions = 0;
  for (OpId op : all_ops()) {
    for (const auto& s : test::op_samples(op, DType::f32)) {
      BOOST_TEST_CONTEXT(s.label) {
        graph::Graph g;
        if (s.inputs.size() == 1)
          g = traced([&](const Tensor& a) { return s.run({a}); }, s.inputs[0]);
        else if (s.inputs.size() == 2)
          g = traced(
              [&](const Tensor& a, const Tensor& b) {
                return s.run({a, b});
              },
              s.inputs[0], s.inputs[1]);
        else
          continue;
        auto p = checked_partition(g);
        // A non-fusible op stays alone in its group.
        for (const auto& group : p.groups)
          if (group.nodes.size() > 1)
            for (int n : group.nodes) {
              OpClass c = op_class(g.nodes[n].op);
              BOOST_TEST((c == OpClass::elementwise || c == OpClass::reduction ||
                          c == OpClass::normalization || c == OpClass::view));
            }
        ++partitions;
      }
    }
  }
  BOOST_TEST(partitions > 100);
}

BOOST_AUTO_TEST_SUITE_END()
