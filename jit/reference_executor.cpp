// Node-by-node execution through autograd::record, so compiled functions are differentiable;
// nodes traced under no-grad record no history, whatever the caller's grad mode.
#include "jit/reference_executor.h"

#include <optional>

#include "autograd/record.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {

Tensor input_value(const graph::Input& in, std::span<const CallArg> args) {
  switch (in.kind) {
    case graph::InputKind::argument:
      return *args[in.arg_index].tensor;
    case graph::InputKind::state:
      return *in.slot;
    default:
      return in.tensor;
  }
}

OpAttrs attrs_at(const graph::Graph& g, const graph::Node& n,
                 std::span<const std::int64_t> symbol_values) {
  OpAttrs sized = n.attrs;
  if (n.attrs.shape_exprs.empty()) return sized;
  for (std::size_t i = 0; i < sized.shape.size(); ++i) {
    auto size = sized.shape_exprs[i].evaluate(symbol_values);
    KILN_CHECK(size.has_value(),
               "compile: size {} of {} in '{}' is not an integer in this call (a guard should "
               "have caught it; this is a kiln bug)",
               sized.shape_exprs[i].str(), n.op, g.name);
    sized.shape[i] = *size;
  }
  sized.shape_exprs.clear();
  return sized;
}

std::vector<Tensor> run_reference(const graph::Graph& g, std::span<const CallArg> args,
                                  std::span<const std::int64_t> symbol_values) {
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs) values[in.value] = input_value(in, args);
  std::vector<Tensor> operands;
  for (const auto& n : g.nodes) {
    operands.clear();
    for (int v : n.inputs) operands.push_back(values[v]);
    std::optional<NoGradGuard> no_grad;
    if (!n.grad) no_grad.emplace();
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
