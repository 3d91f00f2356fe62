// Building and printing graphs.
#include "graph/graph.h"

#include <sstream>

namespace kiln::graph {

bool Value::is_symbolic() const {
  for (const auto& s : sizes)
    if (!s.is_constant()) return true;
  return false;
}

std::vector<std::int64_t> last_two_swapped(std::size_t rank) {
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < rank; ++i) dims.push_back(static_cast<std::int64_t>(i));
  if (rank >= 2) std::swap(dims[rank - 1], dims[rank - 2]);
  return dims;
}

bool swaps_last_two(const std::vector<std::int64_t>& dims) {
  return dims.size() >= 2 && dims == last_two_swapped(dims.size());
}

// The layout an op's output has on the backends: views keep or permute their input's layout,
// every other op writes a fresh contiguous tensor.
StrideClass output_strides(OpId op, const OpAttrs& attrs, StrideClass input) {
  switch (op) {
    case OpId::detach:
      return input;
    case OpId::reshape:
      return input == StrideClass::contiguous ? input : StrideClass::general;
    case OpId::permute: {
      bool identity = true;
      for (std::size_t i = 0; i < attrs.dims.size(); ++i)
        identity = identity && attrs.dims[i] == static_cast<std::int64_t>(i);
      bool swap = swaps_last_two(attrs.dims);
      if (identity) return input;
      if (swap && input == StrideClass::contiguous) return StrideClass::transposed;
      if (swap && input == StrideClass::transposed) return StrideClass::contiguous;
      return StrideClass::general;
    }
    case OpId::expand:
    case OpId::slice:
      return StrideClass::general;
      // Every other op writes a fresh contiguous tensor
#define KILN_HANDLED_view
#include "runtime/op_class_cases.inc"
      break;
  }
  return StrideClass::contiguous;
}

int Graph::add_value(TensorMeta meta, int producer, int output_index) {
  Value v;
  for (auto d : meta.shape) v.sizes.push_back(SymExpr::constant(d));
  v.meta = std::move(meta);
  v.producer = producer;
  v.output_index = output_index;
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

int Graph::add_input(Input input, TensorMeta meta) {
  input.value = add_value(std::move(meta), -1);
  inputs.push_back(std::move(input));
  return inputs.back().value;
}

int Graph::add_node(Node node, std::span<const TensorMeta> outputs) {
  int index = static_cast<int>(nodes.size());
  node.outputs.clear();
  for (std::size_t k = 0; k < outputs.size(); ++k)
    node.outputs.push_back(add_value(outputs[k], index, static_cast<int>(k)));
  nodes.push_back(std::move(node));
  return index;
}

const Input* Graph::input_of(int value) const {
  for (const auto& in : inputs)
    if (in.value == value) return &in;
  return nullptr;
}

bool Graph::is_constant(int value) const {
  const Input* in = input_of(value);
  return in && in->kind == InputKind::constant;
}

std::string value_type_str(const Value& v) {
  std::vector<std::string> dims;
  for (const auto& s : v.sizes) dims.push_back(s.str());
  std::string out = fmt::format("{}[{}]", v.meta.dtype, fmt::join(dims, ", "));
  if (v.strides != StrideClass::contiguous)
    out += fmt::format("{{{}}}", stride_class_name(v.strides));
  if (!v.device.is_cpu()) out += "@" + v.device.str();
  return out;
}

int Graph::draw_of(const Tensor* slot) const {
  for (std::size_t i = 0; i < random_draws.size(); ++i)
    if (random_draws[i].seed.get() == slot || random_draws[i].offset.get() == slot)
      return static_cast<int>(i);
  return -1;
}

namespace {

std::string constant_str(const Tensor& t) {
  if (t.numel() > 4) return "...";
  auto values = t.to_vector<double>();
  return fmt::format("{}", fmt::join(values, ", "));
}

const char* kind_str(InputKind k) {
  switch (k) {
    case InputKind::argument:
      return "argument";
    case InputKind::state:
      return "state";
    case InputKind::captured:
      return "captured";
    case InputKind::constant:
      return "constant";
  }
  return "?";
}

std::string node_str(const Graph& g, const Node& n) {
  std::vector<std::string> outs, types, args;
  for (int v : n.outputs) {
    outs.push_back(fmt::format("%{}", v));
    types.push_back(value_type_str(g.values[v]));
  }
  for (int v : n.inputs) args.push_back(fmt::format("%{}", v));
  std::string attrs = attrs_str(n.op, n.attrs);
  return fmt::format("{}: {} = {}({}{}{}){}{}", fmt::join(outs, ", "), fmt::join(types, ", "), n.op,
                     fmt::join(args, ", "), attrs.empty() ? "" : ", ", attrs,
                     n.grad ? "" : " no_grad",
                     n.checkpoint ? fmt::format(" checkpoint {}", n.checkpoint) : "");
}

}  // namespace

std::string Graph::str() const {
  std::string out = fmt::format("graph {}(", name);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    if (i) out += ",\n" + std::string(name.size() + 7, ' ');
    out += fmt::format("%{}: {} {} '{}'", in.value, value_type_str(values[in.value]),
                       kind_str(in.kind), in.name);
    if (in.kind == InputKind::constant) out += " = " + constant_str(in.tensor);
  }
  out += "):\n";
  for (const Node& n : nodes) out += "  " + node_str(*this, n) + "\n";
  std::vector<std::string> outs;
  for (std::size_t k = 0; k < num_returned(); ++k) outs.push_back(fmt::format("%{}", outputs[k]));
  out += fmt::format("  return ({})\n", fmt::join(outs, ", "));
  for (std::size_t k = 0; k < mutated_inputs.size(); ++k)
    out += fmt::format("  write %{} into '{}'\n", outputs[num_returned() + k],
                       input_of(mutated_inputs[k])->name);
  return out;
}

std::string Graph::dot(std::span<const int> cluster_of,
                       std::span<const std::string> cluster_labels) const {
  std::ostringstream os;
  os << "digraph \"" << name << "\" {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
  for (const Input& in : inputs)
    os << fmt::format("  v{} [shape=ellipse, label=\"{} '{}'\\n{}\"];\n", in.value,
                      kind_str(in.kind), in.name, value_type_str(values[in.value]));
  auto node_line = [&](std::size_t i) {
    const Node& n = nodes[i];
    std::string attrs = attrs_str(n.op, n.attrs);
    std::vector<std::string> types;
    for (int v : n.outputs) types.push_back(value_type_str(values[v]));
    return fmt::format("n{} [shape=box, label=\"{}{}{}{}\\n{}\"];\n", i, n.op,
                       attrs.empty() ? "" : "\\n", attrs, n.grad ? "" : "\\nno_grad",
                       fmt::join(types, ", "));
  };
  bool clustered = cluster_of.size() == nodes.size();
  if (clustered) {
    for (std::size_t c = 0; c < cluster_labels.size(); ++c) {
      os << fmt::format("  subgraph cluster_{} {{\n    label=\"{}\";\n", c, cluster_labels[c]);
      for (std::size_t i = 0; i < nodes.size(); ++i)
        if (cluster_of[i] == static_cast<int>(c)) os << "    " << node_line(i);
      os << "  }\n";
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!clustered) os << "  " << node_line(i);
    for (int v : n.inputs) {
      int p = values[v].producer;
      if (p < 0)
        os << fmt::format("  v{} -> n{};\n", v, i);
      else
        os << fmt::format("  n{} -> n{} [label=\"%{}\"];\n", p, i, v);
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    int p = values[outputs[i]].producer;
    os << fmt::format("  out{} [shape=doublecircle, label=\"out{}\"];\n", i, i);
    os << (p < 0 ? fmt::format("  v{} -> out{};\n", outputs[i], i)
                 : fmt::format("  n{} -> out{} [label=\"%{}\"];\n", p, i, outputs[i]));
  }
  os << "}\n";
  return os.str();
}

}  // namespace kiln::graph
