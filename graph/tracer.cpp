// Recording ops on placeholders.
#include "graph/tracer.h"

#include <algorithm>

#include "graph/sym_shapes.h"
#include "runtime/dispatch.h"
#include "runtime/grad_mode.h"
#include "runtime/random.h"

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

Tensor Tracer::held(int value) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nullptr, 0, graph_.values[value].device, nullptr);
  impl->shape = graph_.values[value].meta.shape;
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = graph_.values[value].meta.dtype;
  impl->trace_value = value;
  return Tensor(std::move(impl));
}

Tensor Tracer::placeholder(int value, Device device) {
  graph_.values[value].device = device;
  return held(value);
}

void Tracer::hold_input(const std::shared_ptr<TensorImpl>& tensor, int value, bool requires_grad) {
  input_holders_.push_back({static_cast<int>(graph_.inputs.size()) - 1, tensor});
  KILN_CHECK(graph_.inputs.back().value == value, "tracer: input bookkeeping out of order");
  if (requires_grad) grad_holders_.insert(tensor.get());
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
  Tensor t = add_input(std::move(in), like);
  hold_input(t.impl_ptr(), static_cast<int>(t.impl().trace_value), real.requires_grad());
  return t;
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
  hold_input(t.impl_ptr(), v, impl.requires_grad);
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
  if (op_class(op) == OpClass::view) {  // of a placeholder or of a real tensor (a buffer)
    const auto& base = inputs[0].impl_ptr();
    view_of_[graph_.nodes[index].output()] = {index, base->trace_value >= 0 ? base : nullptr,
                                              placeholders[0].impl_ptr(), base};
  }
  return placeholders;
}

SymExpr Tracer::size_expr(const TensorImpl& tensor, std::int64_t dim) {
  if (tensor.trace_value < 0) return SymExpr::constant(tensor.shape[dim]);
  return graph_.values[tensor.trace_value].sizes.at(dim);
}

void Tracer::on_size_read(const SymExpr& size) {
  if (size.is_opaque()) read_opaque_ = true;
  for (int symbol : size.symbols()) read_symbols_.insert(symbol);
}

std::array<Tensor, 2> Tracer::random_inputs(OpId op, const OpAttrs& attrs, Generator& gen) {
  RandomDraw draw;
  draw.generator = &gen;
  draw.op = op;
  for (std::size_t d = 0; d < attrs.shape.size(); ++d)
    draw.shape.push_back(attrs.shape_exprs.empty() ? SymExpr::constant(attrs.shape[d])
                                                   : attrs.shape_exprs[d]);
  // The numbers an eager run would use here; each call sets its own before running.
  draw.seed = std::make_shared<Tensor>(draw_number(gen.seed()));
  draw.offset = std::make_shared<Tensor>(draw_number(gen.offset()));
  std::size_t k = graph_.random_draws.size();
  declare_state(draw.seed.get(), fmt::format("draw{}.seed", k));
  declare_state(draw.offset.get(), fmt::format("draw{}.offset", k));
  graph_.random_draws.push_back(draw);
  return {*draw.seed, *draw.offset};
}

void Tracer::set_outputs(const std::vector<Tensor>& outputs) {
  graph_.outputs.clear();
  graph_.mutated_inputs.clear();
  for (const auto& t : outputs) {
    KILN_CHECK(t.defined(), "compile: the traced function '{}' returned an undefined tensor",
               graph_.name);
    graph_.outputs.push_back(value_of(t));
  }
  for (const auto& holder : input_holders_) {
    auto t = holder.tensor.lock();
    if (!t) continue;
    int value = current_value(*t);
    if (value == graph_.inputs[holder.input].value) continue;
    graph_.outputs.push_back(value);
    graph_.mutated_inputs.push_back(graph_.inputs[holder.input].value);
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
  // A tensor only the trace held needs no write-back: nothing can read it afterwards.
  std::size_t returned = graph_.num_returned(), kept = 0;
  for (std::size_t k = 0; k < graph_.mutated_inputs.size(); ++k) {
    if (graph_.input_of(graph_.mutated_inputs[k])->kind == InputKind::constant) continue;
    graph_.mutated_inputs[kept] = graph_.mutated_inputs[k];
    graph_.outputs[returned + kept++] = graph_.outputs[returned + k];
  }
  graph_.mutated_inputs.resize(kept);
  graph_.outputs.resize(returned + kept);
}

// ---- functionalization ----

void Tracer::on_write(const Tensor& dst, const Tensor& src) {
  value_of(dst);  // a real tensor (a module buffer) becomes an input first
  drop_unheld_views();
  write(dst.impl_ptr(), value_of(src));
}

// Forgets stale records and views nothing holds but their own record (a temporary such as
// cache.slice(..) in cache.slice(..).copy_(k)), then the views only those held: a write replays
// the views that can still be read, not every view ever taken (a loop of writes would replay
// its square).
void Tracer::drop_unheld_views() {
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (auto it = view_of_.begin(); it != view_of_.end();) {
      // A record is stale once its view was taken again (the tensor holds another value now).
      bool stale = current_value(*it->second.view) != it->first;
      if (!stale && it->second.view.use_count() > 1) {
        ++it;
        continue;
      }
      it = view_of_.erase(it);
      dropped = true;
    }
  }
}

int Tracer::current_value(const TensorImpl& t) const {
  return t.trace_value >= 0 ? static_cast<int>(t.trace_value) : lifted_.at(&t);
}

void Tracer::check_writable(std::shared_ptr<TensorImpl> target) const {
  for (auto it = view_of_.find(current_value(*target)); it != view_of_.end();
       it = view_of_.find(current_value(*target))) {
    auto base = it->second.base.lock();
    if (!base || it->second.view != target) break;
    target = base;
  }
  KILN_CHECK_AS(AutogradError, !(grad_enabled() && grad_holders_.count(target.get())),
                "in-place write: a tensor of shape {} that requires grad is written in place "
                "inside the compiled function '{}'; do the update under NoGradGuard (a leaf "
                "that requires grad cannot be written in place at all)",
                shape_str(target->shape), graph_.name);
}

// `target` holds `value` from now on; a view passes the write on to the tensor it views.
void Tracer::write(const std::shared_ptr<TensorImpl>& target, int value) {
  check_writable(target);
  int now = current_value(*target);
  if (auto it = view_of_.find(now); it != view_of_.end() && it->second.view == target) {
    Node view = graph_.nodes[it->second.node];  // a copy: scattering adds nodes
    auto base = it->second.base.lock();
    KILN_CHECK(base, "tracer: the tensor a view was taken from is gone");
    return write(base, scattered(value, view));
  }
  rebind(target, value);
}

// The tensor holds `value` now; views taken from it that are still held are taken again.
void Tracer::rebind(const std::shared_ptr<TensorImpl>& target, int value) {
  if (target->trace_value >= 0)
    target->trace_value = value;
  else
    lifted_.at(target.get()) = value;
  std::vector<std::pair<int, std::shared_ptr<TensorImpl>>> views;  // replay adds views
  for (const auto& [v, of] : view_of_)
    if (of.base.lock() == target && current_value(*of.view) == v) views.push_back({v, of.view});
  std::sort(views.begin(), views.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [v, view] : views) {
    Node node = graph_.nodes[view_of_.at(v).node];
    Tensor base = held(value);
    TensorMeta meta = graph_.values[v].meta;
    int again = static_cast<int>(
        intercept(node.op, {&base, 1}, node.attrs, {&meta, 1})[0].impl().trace_value);
    ViewOf& of = view_of_[again];
    of.base = target;
    of.base_placeholder = target->trace_value >= 0 ? target : nullptr;
    of.view = view;
    rebind(view, again);
  }
}

// `base` with `value` written where `view` of it lies.
int Tracer::scattered(int value, const Node& view) {
  int base = view.inputs.at(0);
  Tensor b = held(base), v = held(value);
  const std::vector<SymExpr> base_sizes = graph_.values[base].sizes;  // a copy: ops add values
  auto exprs_of = [](const std::vector<SymExpr>& sizes) {
    bool symbolic =
        std::any_of(sizes.begin(), sizes.end(), [](const SymExpr& e) { return !e.is_constant(); });
    return symbolic ? sizes : std::vector<SymExpr>{};
  };
  OpAttrs attrs;
  switch (view.op) {
    case OpId::detach:
      return value;
    case OpId::reshape:
      attrs.shape = graph_.values[base].meta.shape;
      attrs.shape_exprs = exprs_of(base_sizes);
      return static_cast<int>(dispatch1(OpId::reshape, {&v, 1}, attrs).impl().trace_value);
    case OpId::permute: {
      attrs.dims.resize(view.attrs.dims.size());
      for (std::size_t k = 0; k < view.attrs.dims.size(); ++k)
        attrs.dims[static_cast<std::size_t>(normalize_dim(
            view.attrs.dims[k], static_cast<std::int64_t>(view.attrs.dims.size()), "permute"))] =
            static_cast<std::int64_t>(k);
      return static_cast<int>(dispatch1(OpId::permute, {&v, 1}, attrs).impl().trace_value);
    }
    case OpId::expand:
      throw Error(fmt::format(
          "in-place write: the written-to tensor of shape {} is an expanded view, where more than "
          "one element refers to a single memory location; clone() it before writing",
          shape_str(graph_.values[value].meta.shape)));
    case OpId::slice: {
      KILN_CHECK_AS(NotTraceableError, view.attrs.step == 1,
                    "in-place write: a write into a slice with step {} is not traceable inside a "
                    "compiled function yet",
                    view.attrs.step);
      // The region padded out to the base, and a mask of the region padded alike.
      auto rank = static_cast<std::int64_t>(base_sizes.size());
      auto d = normalize_dim(view.attrs.dim, rank, "slice");
      OpAttrs pad;
      pad.dims.assign(static_cast<std::size_t>(2 * (rank - d)), 0);
      auto pair = static_cast<std::size_t>(2 * (rank - 1 - d));
      pad.dims[pair] = view.attrs.start;
      pad.dims[pair + 1] = graph_.values[base].meta.shape[d] - view.attrs.end;
      Tensor padded = dispatch1(OpId::pad, {&v, 1}, pad);
      // True over the region on its device at any size, NaN or not: v == v || v != v.
      std::vector<Tensor> same{v, v};
      std::vector<Tensor> either{dispatch1(OpId::eq, same, {}), dispatch1(OpId::ne, same, {})};
      Tensor inside = dispatch1(OpId::logical_or, either, {});
      Tensor mask = dispatch1(OpId::pad, {&inside, 1}, pad);
      std::vector<Tensor> operands{mask, padded, b};
      return static_cast<int>(dispatch1(OpId::where, operands, {}).impl().trace_value);
    }
    default:
      throw Error(fmt::format("in-place write: {} is not a view op", view.op));
  }
}

}  // namespace kiln::graph
