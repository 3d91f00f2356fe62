// Node-by-node execution through autograd::record, so compiled functions are differentiable.
#include "jit/executor.h"

#include "autograd/record.h"

namespace kiln::jit {

std::vector<Tensor> execute(const graph::Graph& g, std::span<const CallArg> args,
                            const std::vector<std::int64_t>& symbol_values) {
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs)
    values[in.value] =
        in.kind == graph::InputKind::argument ? *args[in.arg_index].tensor : in.tensor;
  std::vector<Tensor> operands;
  for (const auto& n : g.nodes) {
    operands.clear();
    for (int v : n.inputs) operands.push_back(values[v]);
    if (n.shape_symbols.empty()) {
      values[n.output] = autograd::record(n.op, operands, n.attrs);
      continue;
    }
    OpAttrs attrs = n.attrs;  // symbolic sizes take this call's values
    for (std::size_t i = 0; i < attrs.shape.size(); ++i)
      if (n.shape_symbols[i] >= 0) attrs.shape[i] = symbol_values[n.shape_symbols[i]];
    values[n.output] = autograd::record(n.op, operands, attrs);
  }
  std::vector<Tensor> outputs;
  for (int v : g.outputs) outputs.push_back(values[v]);
  return outputs;
}

}  // namespace kiln::jit
