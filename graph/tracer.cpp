// Recording ops on placeholders.
#include "graph/tracer.h"

namespace kiln::graph {

namespace {

// The layout an op's output has on the backends: views keep or permute their input's layout,
// every other op writes a fresh contiguous tensor.
StrideClass output_strides(OpId op, const OpAttrs& attrs, StrideClass input) {
  switch (op) {
    case OpId::reshape: return input == StrideClass::contiguous ? input : StrideClass::general;
    case OpId::permute: {
      auto rank = static_cast<std::int64_t>(attrs.dims.size());
      bool identity = true, swaps_last_two = rank >= 2;
      for (std::int64_t i = 0; i < rank; ++i) {
        identity = identity && attrs.dims[i] == i;
        std::int64_t swapped = i == rank - 1 ? rank - 2 : i == rank - 2 ? rank - 1 : i;
        swaps_last_two = swaps_last_two && attrs.dims[i] == swapped;
      }
      if (identity) return input;
      if (swaps_last_two && input == StrideClass::contiguous) return StrideClass::transposed;
      if (swaps_last_two && input == StrideClass::transposed) return StrideClass::contiguous;
      return StrideClass::general;
    }
    case OpId::expand:
    case OpId::slice: return StrideClass::general;
    default: return StrideClass::contiguous;
  }
}

}  // namespace

Tracer::Tracer(std::string name) { graph_.name = std::move(name); }

Tensor Tracer::placeholder(int value, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nullptr, 0, device, nullptr);
  impl->shape = graph_.values[value].meta.shape;
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = graph_.values[value].meta.dtype;
  impl->trace_value = value;
  return Tensor(std::move(impl));
}

Tensor Tracer::add_argument(const Tensor& real, int arg_index, std::string name,
                            const Shape& shape, const std::vector<int>& symbols) {
  Input in;
  in.kind = InputKind::argument;
  in.arg_index = arg_index;
  in.name = std::move(name);
  int v = graph_.add_input(std::move(in), {shape, real.dtype()});
  graph_.values[v].symbols = symbols;
  graph_.values[v].device = real.device();
  graph_.values[v].strides = stride_class(real);
  return placeholder(v, real.device());
}

int Tracer::value_of(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  if (impl.trace_value >= 0) return static_cast<int>(impl.trace_value);
  // A real tensor used by the traced code: lift it into an input (captured until proven const).
  KILN_CHECK(impl.storage->data() != nullptr || kiln::numel(impl.shape) == 0,
             "compile: tracing '{}' met a tensor of shape {} that aliases a traced placeholder "
             "without going through an op; this is a kiln bug",
             graph_.name, shape_str(impl.shape));
  if (auto it = lifted_.find(&impl); it != lifted_.end()) return it->second;
  Input in;
  in.kind = InputKind::captured;
  in.tensor = t;
  in.name = fmt::format("captured{}", lifted_.size());
  int v = graph_.add_input(std::move(in), {impl.shape, impl.dtype});
  graph_.values[v].device = t.device();
  graph_.values[v].strides = stride_class(impl);
  lifted_.emplace(&impl, v);
  return v;
}

std::vector<Tensor> Tracer::intercept(OpId op, std::span<const Tensor> inputs,
                                      const OpAttrs& attrs, std::span<const TensorMeta> outputs) {
  Node node;
  node.op = op;
  node.attrs = attrs;
  Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  for (const auto& t : inputs) node.inputs.push_back(value_of(t));
  StrideClass strides = output_strides(op, attrs, node.inputs.empty() ? StrideClass::contiguous
                                                    : graph_.values[node.inputs[0]].strides);
  int v = graph_.add_node(std::move(node), outputs[0]);
  graph_.values[v].device = device;
  graph_.values[v].strides = strides;
  return {placeholder(v, device)};
}

void Tracer::on_size_read(const TensorImpl& tensor, std::int64_t dim) {
  if (tensor.trace_value >= 0) size_reads_.emplace(static_cast<int>(tensor.trace_value), dim);
}

void Tracer::set_outputs(const std::vector<Tensor>& outputs) {
  graph_.outputs.clear();
  for (const auto& t : outputs) {
    KILN_CHECK(t.defined(), "compile: the traced function '{}' returned an undefined tensor",
               graph_.name);
    graph_.outputs.push_back(value_of(t));
  }
}

void Tracer::classify_lifted() {
  // A tensor made during tracing (a scalar operand, a factory result) is referenced only by the
  // graph: nothing can change it later, so it is a constant and may be folded.
  int constants = 0, captured = 0;
  for (auto& in : graph_.inputs) {
    if (in.kind == InputKind::argument) continue;
    bool sole_owner =
        in.tensor.impl_ptr().use_count() == 1 && in.tensor.impl().storage.use_count() == 1;
    in.kind = sole_owner ? InputKind::constant : InputKind::captured;
    in.name = sole_owner ? fmt::format("const{}", constants++)
                         : fmt::format("captured{}", captured++);
  }
  lifted_.clear();
}

}  // namespace kiln::graph
