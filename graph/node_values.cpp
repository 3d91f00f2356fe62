// Per-call values of a graph's inputs and attributes (see node_values.h).
#include "graph/node_values.h"

#include "runtime/error.h"

namespace kiln::graph {

Tensor input_value(const Input& in, std::span<const CallArg> args) {
  switch (in.kind) {
    case InputKind::argument:
      return *args[in.arg_index].tensor;
    case InputKind::state:
      return *in.slot;
    default:
      return in.tensor;
  }
}

OpAttrs attrs_at(const Graph& g, const Node& n, std::span<const std::int64_t> symbol_values) {
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

}  // namespace kiln::graph
