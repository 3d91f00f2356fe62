// Comparing traces input by input and node by node.
#include "graph/compare.h"

namespace kiln::graph {

namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.impl().shape != b.impl().shape || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

std::string values_str(const Tensor& t) {
  if (t.numel() > 4) return fmt::format("a {}{} tensor", t.dtype(), shape_str(t.impl().shape));
  return fmt::format("[{}]", fmt::join(t.to_vector<double>(), ", "));
}

// The ops that read value `v`, for naming an input in a message.
std::string users(const Graph& g, int v) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes)
    for (int in : n.inputs)
      if (in == v) ops.push_back(std::string(op_name(n.op)));
  return ops.empty() ? "returned as is" : fmt::format("read by {}", fmt::join(ops, ", "));
}

std::string type_of(const Graph& g, int v) {
  const Value& value = g.values[v];
  return fmt::format("{}{}", value.meta.dtype, shape_str(value.meta.shape));
}

// Whether two state inputs read the same slot: a module's, or the same random draw's seed or
// offset (each trace makes slots of its own for its draws).
bool same_slot(const Graph& a, const Input& x, const Graph& b, const Input& y) {
  if (x.slot == y.slot) return true;
  int dx = a.draw_of(x.slot), dy = b.draw_of(y.slot);
  if (dx < 0 || dx != dy) return false;
  const RandomDraw &rx = a.random_draws[dx], &ry = b.random_draws[dy];
  return rx.generator == ry.generator && rx.op == ry.op &&
         (x.slot == rx.seed.get()) == (y.slot == ry.seed.get());
}

}  // namespace

std::optional<std::string> structural_difference(const Graph& a, const Graph& b) {
  if (a.random_draws.size() != b.random_draws.size())
    return fmt::format("the function now draws random numbers {} times instead of {}",
                       b.random_draws.size(), a.random_draws.size());
  if (a.inputs.size() != b.inputs.size())
    return fmt::format("the function now reads {} inputs instead of {}", b.inputs.size(),
                       a.inputs.size());
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const Input &x = a.inputs[i], &y = b.inputs[i];
    if (x.kind != y.kind || x.arg_index != y.arg_index || x.value != y.value ||
        !same_slot(a, x, b, y))
      return fmt::format("input '{}' of the first trace is now '{}'", x.name, y.name);
    const Value &vx = a.values[x.value], &vy = b.values[y.value];
    if (vx.meta.dtype != vy.meta.dtype || vx.meta.shape.size() != vy.meta.shape.size())
      return fmt::format("input '{}' was {} and is now {}", x.name, type_of(a, x.value),
                         type_of(b, y.value));
    if (x.kind == InputKind::captured && !x.tensor.same(y.tensor))
      return fmt::format(
          "captured tensor '{}' ({}, {}) is a different tensor than when the function was "
          "traced",
          x.name, type_of(a, x.value), users(a, x.value));
    if (x.kind == InputKind::constant && !same_values(x.tensor, y.tensor))
      return fmt::format("constant '{}' ({}, {}) was {} when the function was traced and is {} now",
                         x.name, type_of(a, x.value), users(a, x.value), values_str(x.tensor),
                         values_str(y.tensor));
  }
  if (a.nodes.size() != b.nodes.size())
    return fmt::format("the function now records {} ops instead of {}", b.nodes.size(),
                       a.nodes.size());
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    const Node &x = a.nodes[i], &y = b.nodes[i];
    if (x.op != y.op || x.inputs != y.inputs || x.outputs != y.outputs || x.grad != y.grad ||
        x.checkpoint != y.checkpoint || !attrs_equal(x.op, x.attrs, y.attrs))
      return fmt::format("op {} of the trace was {}({}) and is now {}({})", i, x.op,
                         attrs_str(x.op, x.attrs), y.op, attrs_str(y.op, y.attrs));
    for (std::size_t k = 0; k < x.outputs.size(); ++k) {
      const Value &vx = a.values[x.outputs[k]], &vy = b.values[y.outputs[k]];
      if (vx.meta.dtype != vy.meta.dtype || vx.meta.shape.size() != vy.meta.shape.size())
        return fmt::format("op {} ({}) made {} and now makes {}", i, x.op, type_of(a, x.outputs[k]),
                           type_of(b, y.outputs[k]));
    }
  }
  if (a.outputs != b.outputs) return std::string("the function now returns other values");
  if (a.mutated_inputs != b.mutated_inputs)
    return std::string("the function now writes in place to other inputs");
  return std::nullopt;
}

}  // namespace kiln::graph
