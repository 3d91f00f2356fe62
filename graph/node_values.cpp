// Per-call values of a graph's inputs and attributes (see node_values.h).
#include "graph/node_values.h"

#include "runtime/error.h"
#include "runtime/random.h"

namespace kiln::graph {

Tensor input_value(const Input& in, std::span<const CallArg> args) {
  return input_ref(in, args);
}

const Tensor& input_ref(const Input& in, std::span<const CallArg> args) {
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

void draw_random_inputs(const Graph& g, std::span<const std::int64_t> symbol_values) {
  for (const RandomDraw& d : g.random_draws) {
    std::int64_t n = 1;
    for (const auto& e : d.shape) {
      auto size = e.evaluate(symbol_values);
      KILN_CHECK(size.has_value(),
                 "compile: size {} of a {} draw in '{}' is not an integer in this call (a guard "
                 "should have caught it; this is a kiln bug)",
                 e.str(), d.op, g.name);
      n *= *size;
    }
    // New tensors, not writes: a backward holding the last call's keeps its numbers.
    *d.seed = draw_number(d.generator->seed());
    *d.offset = draw_number(d.generator->advance(random_counters(d.op, n)));
  }
}

}  // namespace kiln::graph
