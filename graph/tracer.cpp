// Recording ops on placeholders.
#include "graph/tracer.h"

#include "graph/sym_shapes.h"
#include "runtime/grad_mode.h"

namespace kiln::graph {

namespace {

thread_local int current_region = 0, last_region = 0;

}  // namespace

CheckpointScope::CheckpointScope() : previous_(current_region) {
  if (current_region == 0) current_region = ++last_region;
}
CheckpointScope::CheckpointScope(int region) : previous_(current_region) {
  current_region = region;
}
CheckpointScope::~CheckpointScope() {
  current_region = previous_;
}

Tracer::Tracer(std::string name) {
  graph_.name = std::move(name);
  last_region = 0;  // regions are numbered alike in every trace of a function
}

Tensor Tracer::placeholder(int value, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nullptr, 0, device, nullptr);
  impl->shape = graph_.values[value].meta.shape;
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = graph_.values[value].meta.dtype;
  impl->trace_value = value;
  return Tensor(std::move(impl));
}

Tensor Tracer::add_argument(const Tensor& real, int arg_index, std::string name, const Shape& shape,
                            std::vector<SymExpr> sizes) {
  Input in;
  in.kind = InputKind::argument;
  in.arg_index = arg_index;
  in.name = std::move(name);
  Value like;
  like.meta = {shape, real.dtype()};
  like.sizes = std::move(sizes);
  like.device = real.device();
  like.strides = stride_class(real.impl().shape, real.strides());
  return add_input(std::move(in), like);
}

Tensor Tracer::add_input(Input in, const Value& like) {
  const TensorImpl* real = in.tensor.defined() ? &in.tensor.impl() : nullptr;
  int v = graph_.add_input(std::move(in), like.meta);
  if (real) lifted_.emplace(real, v);
  given_inputs_.insert(v);
  Value& value = graph_.values[v];
  value.sizes = like.sizes;
  value.device = like.device;
  value.strides = like.strides;
  return placeholder(v, like.device);
}

void Tracer::declare_state(const Tensor* slot, std::string name) {
  if (slot->defined()) state_[slot->impl_ptr().get()] = {slot, std::move(name)};
}

int Tracer::value_of(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  if (impl.trace_value >= 0) return static_cast<int>(impl.trace_value);
  // A real tensor used by the traced code: lift it into an input.
  KILN_CHECK(impl.storage->data() != nullptr || kiln::numel(impl.shape) == 0,
             "compile: tracing '{}' met a tensor of shape {} that aliases a traced placeholder "
             "without going through an op; this is a kiln bug",
             graph_.name, shape_str(impl.shape));
  if (auto it = lifted_.find(&impl); it != lifted_.end()) return it->second;
  Input in;
  in.tensor = t;
  if (auto s = state_.find(&impl); s != state_.end()) {
    in.kind = InputKind::state;
    in.slot = s->second.first;
    in.name = s->second.second;
  } else {
    in.kind = InputKind::captured;  // until classify_lifted shows it is a constant
    in.name = fmt::format("captured{}", lifted_.size());
  }
  int v = graph_.add_input(std::move(in), {impl.shape, impl.dtype});
  graph_.values[v].device = t.device();
  graph_.values[v].strides = stride_class(impl.shape, impl.strides);
  lifted_.emplace(&impl, v);
  return v;
}

std::vector<Tensor> Tracer::intercept(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                                      std::span<const TensorMeta> outputs) {
  Node node;
  node.op = op;
  node.attrs = attrs;
  node.grad = grad_enabled();
  node.checkpoint = current_region;
  Device device = op == OpId::to_device || is_random(op) ? attrs.device
                  : inputs.empty()                       ? Device::cpu()
                                                         : inputs[0].device();
  std::vector<SizeExprs> input_sizes;
  std::vector<TensorMeta> input_meta;
  for (const auto& t : inputs) {
    int v = value_of(t);
    node.inputs.push_back(v);
    input_sizes.push_back(graph_.values[v].sizes);
    input_meta.push_back(graph_.values[v].meta);
  }
  StrideClass in_strides =
      node.inputs.empty() ? StrideClass::contiguous : graph_.values[node.inputs[0]].strides;
  auto sizes = infer_size_exprs(op, input_sizes, input_meta, attrs, outputs);
  int index = graph_.add_node(std::move(node), outputs);
  std::vector<Tensor> placeholders;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    int v = graph_.nodes[index].outputs[k];
    Value& value = graph_.values[v];
    value.sizes = std::move(sizes[k]);
    value.device = device;
    value.strides = k == 0 ? output_strides(op, attrs, in_strides) : StrideClass::contiguous;
    placeholders.push_back(placeholder(v, device));
  }
  return placeholders;
}

SymExpr Tracer::size_expr(const TensorImpl& tensor, std::int64_t dim) {
  if (tensor.trace_value < 0) return SymExpr::constant(tensor.shape[dim]);
  return graph_.values[tensor.trace_value].sizes.at(dim);
}

void Tracer::on_size_read(const SymExpr& size) {
  if (size.is_opaque()) read_opaque_ = true;
  for (auto [symbol, power] : size.factors()) read_symbols_.insert(symbol);
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
  for (const auto& in : graph_.inputs)
    if (given_inputs_.count(in.value)) {
      constants += in.kind == InputKind::constant;
      captured += in.kind == InputKind::captured;
    }
  for (auto& in : graph_.inputs) {
    if (in.kind == InputKind::state) in.tensor = Tensor();  // the slot is read per call
    if (in.kind == InputKind::argument || in.kind == InputKind::state) continue;
    if (given_inputs_.count(in.value)) continue;  // described by whoever added it
    bool sole_owner =
        in.tensor.impl_ptr().use_count() == 1 && in.tensor.impl().storage.use_count() == 1;
    in.kind = sole_owner ? InputKind::constant : InputKind::captured;
    in.name =
        sole_owner ? fmt::format("const{}", constants++) : fmt::format("captured{}", captured++);
  }
  lifted_.clear();
}

}  // namespace kiln::graph
