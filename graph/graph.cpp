// Building and printing graphs.
#include "graph/graph.h"

#include <sstream>

#include "runtime/op.h"

namespace kiln::graph {

int Graph::add_value(TensorMeta meta, int producer) {
  Value v;
  v.symbols.assign(meta.shape.size(), -1);
  v.meta = std::move(meta);
  v.producer = producer;
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

int Graph::add_input(Input input, TensorMeta meta) {
  input.value = add_value(std::move(meta), -1);
  inputs.push_back(std::move(input));
  return inputs.back().value;
}

int Graph::add_node(Node node, TensorMeta out) {
  node.output = add_value(std::move(out), static_cast<int>(nodes.size()));
  nodes.push_back(std::move(node));
  return nodes.back().output;
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

namespace {

std::string dims_str(const Shape& shape, const std::vector<int>& symbols) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    int s = i < symbols.size() ? symbols[i] : -1;
    out += s >= 0 ? fmt::format("s{}", s) : s == -2 ? fmt::format("?{}", shape[i])
                                                      : std::to_string(shape[i]);
  }
  return out + "]";
}

std::string type_str(const Value& v) {
  std::string out = fmt::format("{}{}", v.meta.dtype, dims_str(v.meta.shape, v.symbols));
  if (v.strides != StrideClass::contiguous) out += fmt::format("{{{}}}", stride_class_name(v.strides));
  if (!v.device.is_cpu()) out += "@" + v.device.str();
  return out;
}

std::string constant_str(const Tensor& t) {
  if (t.numel() > 4) return "...";
  auto values = t.to_vector<double>();
  return fmt::format("{}", fmt::join(values, ", "));
}

const char* kind_str(InputKind k) {
  switch (k) {
    case InputKind::argument: return "argument";
    case InputKind::captured: return "captured";
    case InputKind::constant: return "constant";
  }
  return "?";
}

}  // namespace

std::string attrs_str(OpId op, const OpAttrs& a, const std::vector<int>& shape_symbols) {
  switch (op_class(op)) {
    case OpClass::reduction:
      return fmt::format("dims=[{}], keepdim={}", fmt::join(a.dims, ", "), a.keepdim);
    case OpClass::view:
      switch (op) {
        case OpId::reshape:
        case OpId::expand: return "shape=" + dims_str(a.shape, shape_symbols);
        case OpId::permute: return fmt::format("dims=[{}]", fmt::join(a.dims, ", "));
        case OpId::slice:
          return fmt::format("dim={}, start={}, end={}, step={}", a.dim, a.start, a.end, a.step);
        default: return "";
      }
    case OpClass::index: return fmt::format("dim={}", a.dim);
    default: break;
  }
  switch (op) {
    case OpId::cast: return fmt::format("dtype={}", a.dtype);
    case OpId::cat: return fmt::format("dim={}", a.dim);
    case OpId::pad: return fmt::format("pads=[{}], value={}", fmt::join(a.dims, ", "), a.value);
    default: return "";
  }
}

std::string Graph::str() const {
  std::string out = fmt::format("graph {}(", name);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    if (i) out += ",\n" + std::string(name.size() + 7, ' ');
    out += fmt::format("%{}: {} {} '{}'", in.value, type_str(values[in.value]), kind_str(in.kind),
                       in.name);
    if (in.kind == InputKind::constant) out += " = " + constant_str(in.tensor);
  }
  out += "):\n";
  for (const Node& n : nodes) {
    std::vector<std::string> args;
    for (int v : n.inputs) args.push_back(fmt::format("%{}", v));
    std::string attrs = attrs_str(n.op, n.attrs, n.shape_symbols);
    out += fmt::format("  %{}: {} = {}({}{}{})\n", n.output, type_str(values[n.output]), n.op,
                       fmt::join(args, ", "), attrs.empty() ? "" : ", ", attrs);
  }
  std::vector<std::string> outs;
  for (int v : outputs) outs.push_back(fmt::format("%{}", v));
  out += fmt::format("  return ({})\n", fmt::join(outs, ", "));
  return out;
}

std::string Graph::dot() const {
  std::ostringstream os;
  os << "digraph \"" << name << "\" {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
  for (const Input& in : inputs)
    os << fmt::format("  v{} [shape=ellipse, label=\"{} '{}'\\n{}\"];\n", in.value,
                      kind_str(in.kind), in.name, type_str(values[in.value]));
  for (const Node& n : nodes) {
    std::string attrs = attrs_str(n.op, n.attrs, n.shape_symbols);
    os << fmt::format("  v{} [shape=box, label=\"%{} = {}{}{}\\n{}\"];\n", n.output, n.output,
                      n.op, attrs.empty() ? "" : "\\n", attrs, type_str(values[n.output]));
    for (int v : n.inputs) os << fmt::format("  v{} -> v{};\n", v, n.output);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    os << fmt::format("  out{} [shape=doublecircle, label=\"out{}\"];\n", i, i);
    os << fmt::format("  v{} -> out{};\n", outputs[i], i);
  }
  os << "}\n";
  return os.str();
}

}  // namespace kiln::graph
