// Node-by-node execution through autograd::record, so compiled functions are differentiable;
// nodes traced under no-grad record no history, whatever the caller's grad mode. On CUDA tensors
// a run of matmul (+ bias) (+ relu / gelu_tanh) is one autograd `linear`, whose forward and
// backward are cuBLASLt epilogues, as the same layer eagerly.
#include "jit/reference_executor.h"

#include <optional>

#include "autograd/ops.h"
#include "autograd/record.h"
#include "graph/node_values.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {
namespace {

// matmul(a, b) [+ bias] [-> relu / gelu_tanh] whose intermediates only the next node of the
// run reads; run where its last node was, when every input is computed.
struct LinearRun {
  int a = -1, b = -1, bias = -1;  // values
  Activation act = Activation::none;
  int last = -1;  // the node whose output the run computes
};

// Runs by their last node; `absorbed_a[n]` is the `a` value of the run node n is an earlier node
// of (skipped when that run runs), else -1.
std::vector<std::optional<LinearRun>> linear_runs(const graph::Graph& g,
                                                  std::vector<int>& absorbed_a) {
  // Per value: how many nodes (and the caller, for a returned value) read it, and one reader.
  std::vector<int> readers(g.values.size(), 0), reader(g.values.size(), -1);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs) ++readers[v], reader[v] = static_cast<int>(i);
  for (int v : g.outputs) ++readers[v];
  auto only_reader = [&](int v) { return readers[v] == 1 ? reader[v] : -1; };
  std::vector<std::optional<LinearRun>> runs(g.nodes.size());
  for (std::size_t m = 0; m < g.nodes.size(); ++m) {
    const graph::Node& mm = g.nodes[m];
    if (mm.op != OpId::matmul) continue;
    const auto& a = g.values[mm.inputs[0]].meta;
    const auto& b = g.values[mm.inputs[1]].meta;
    if (a.shape.size() < 2 || b.shape.size() != 2 || a.dtype != b.dtype) continue;
    LinearRun run{mm.inputs[0], mm.inputs[1]};
    std::vector<int> nodes{static_cast<int>(m)};
    int out = mm.output();
    int next = only_reader(out);
    if (next >= 0 && g.nodes[next].op == OpId::add && g.nodes[next].grad == mm.grad) {
      const graph::Node& add = g.nodes[next];
      int bias = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
      const auto& meta = g.values[bias].meta;
      if (add.inputs[0] != add.inputs[1] && meta.shape == Shape{b.shape[1]} &&
          meta.dtype == b.dtype && g.values[add.output()].meta.shape == g.values[out].meta.shape) {
        run.bias = bias;
        nodes.push_back(next);
        out = add.output();
        next = only_reader(out);
      }
    }
    if (next >= 0 && g.nodes[next].grad == mm.grad &&
        (g.nodes[next].op == OpId::relu || g.nodes[next].op == OpId::gelu_tanh)) {
      run.act = g.nodes[next].op == OpId::relu ? Activation::relu : Activation::gelu_tanh;
      nodes.push_back(next);
    }
    if (nodes.size() < 2) continue;  // a lone matmul is a library call already
    run.last = nodes.back();
    for (std::size_t i = 0; i + 1 < nodes.size(); ++i) absorbed_a[nodes[i]] = run.a;
    runs[run.last] = run;
  }
  return runs;
}

}  // namespace

std::vector<Tensor> run_reference(const graph::Graph& g, std::span<const CallArg> args,
                                  std::span<const std::int64_t> symbol_values) {
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs) values[in.value] = input_value(in, args);
  std::vector<int> absorbed_a(g.nodes.size(), -1);
  auto runs = linear_runs(g, absorbed_a);
  std::vector<Tensor> operands;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    std::optional<NoGradGuard> no_grad;
    if (!n.grad) no_grad.emplace();
    if (runs[i] && values[runs[i]->a].device().is_cuda()) {
      const LinearRun& r = *runs[i];
      values[n.output()] = linear(values[r.a], transpose(values[r.b], 0, 1),
                                  r.bias >= 0 ? values[r.bias] : Tensor(), r.act);
      continue;
    }
    if (absorbed_a[i] >= 0 && values[absorbed_a[i]].device().is_cuda()) continue;  // in a run
    operands.clear();
    for (int v : n.inputs) operands.push_back(values[v]);
    const OpAttrs* attrs = &n.attrs;
    OpAttrs sized;
    if (!n.attrs.shape_exprs.empty()) {  // symbolic target sizes take this call's values
      sized = attrs_at(g, n, symbol_values);
      attrs = &sized;
    }
    std::vector<Tensor> results = autograd::record_outputs(n.op, operands, *attrs);
    for (std::size_t k = 0; k < results.size(); ++k) values[n.outputs[k]] = std::move(results[k]);
  }
  std::vector<Tensor> outputs;
  for (int v : g.outputs) outputs.push_back(values[v]);
  return outputs;
}

}  // namespace kiln::jit
