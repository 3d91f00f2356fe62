// Device routing for primitive ops, and the device-independent view and transfer ops.
#include "runtime/dispatch.h"

#include <array>

#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

std::array<Backend*, 2>& backends() {
  static std::array<Backend*, 2> table{};
  return table;
}
std::array<int, 2>& priorities() {
  static std::array<int, 2> table{};
  return table;
}

// The backend that moves data between `a` and `b`: the non-CPU one, if any.
Backend& mover(Device a, Device b) {
  return backend_for(a.is_cpu() ? b.type : a.type);
}

}  // namespace

void register_backend(Device::Type type, Backend* backend, int priority) {
  auto& slot = backends()[static_cast<std::size_t>(type)];
  auto& slot_priority = priorities()[static_cast<std::size_t>(type)];
  if (slot != nullptr && slot_priority > priority) return;
  slot = backend;
  slot_priority = priority;
}

Backend& backend_for(Device::Type type) {
  Backend* b = backends()[static_cast<std::size_t>(type)];
  KILN_CHECK(b != nullptr, "no backend is registered for {} tensors in this build",
             Device{type, 0}.str());
  return *b;
}

namespace {

// Whether the element ranges two tensors span in one storage intersect.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.impl().storage != b.impl().storage || a.numel() == 0 || b.numel() == 0) return false;
  auto span = [](const Tensor& t) {
    std::int64_t lo = t.offset(), hi = t.offset();
    for (std::size_t d = 0; d < t.shape().size(); ++d) {
      std::int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
      (reach < 0 ? lo : hi) += reach;
    }
    return std::pair{lo * static_cast<std::int64_t>(itemsize(t.dtype())),
                     (hi + 1) * static_cast<std::int64_t>(itemsize(t.dtype()))};
  };
  auto [a_lo, a_hi] = span(a);
  auto [b_lo, b_hi] = span(b);
  return a_lo < b_hi && b_lo < a_hi;
}

}  // namespace

void copy_data(const Tensor& dst, const Tensor& src) {
  KILN_OP_SCOPE;
  Shape shape = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  KILN_CHECK_AS(ShapeError, shape == dst.shape(), "copy_: source shape {} does not broadcast to {}",
                shape_str(src.shape()), shape_str(dst.shape()));
  OpInterceptor* tracer = active_interceptor();
  Tensor s = src;
  if (tracer && src.dtype() != dst.dtype()) {
    OpAttrs attrs;
    attrs.dtype = dst.dtype();
    s = dispatch1(OpId::cast, {&s, 1}, attrs);
  }
  if (tracer && s.device() != dst.device()) {  // a number (fill_) written into a device tensor
    OpAttrs attrs;
    attrs.device = dst.device();
    s = dispatch1(OpId::to_device, {&s, 1}, attrs);
  }
  if (src.shape() != shape) {
    OpAttrs attrs;
    attrs.shape = shape;
    attrs.shape_exprs = dst.sym_shape().exprs();  // while tracing, dst's symbolic sizes
    s = dispatch1(OpId::expand, {&s, 1}, attrs);
  }
  if (tracer) return tracer->on_write(dst, s);  // functionalized: no data moves while tracing
  // A source that shares memory with the destination (a.copy_(a.t())) is read in full before
  // anything is written, through a copy on the host (rare, so simple beats fast).
  if (overlaps(dst, s) && !(dst.offset() == s.offset() && dst.strides() == s.strides()))
    s = transfer(s, Device::cpu());
  mover(dst.device(), s.device()).copy_into(dst, s);
}

Tensor transfer(const Tensor& t, Device device) {
  KILN_OP_SCOPE;
  Tensor out = empty(t.shape(), t.dtype(), device);
  if (t.numel() > 0) mover(t.device(), device).copy_into(out, t);
  return out;
}

std::vector<TensorMeta> metas_of(std::span<const Tensor> inputs) {
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (const auto& t : inputs) metas.push_back({t.impl().shape, t.dtype()});
  return metas;
}

Tensor run_view(OpId op, const Tensor& x, const OpAttrs& attrs, const Shape& shape) {
  const Strides& st = x.strides();
  switch (op) {
    case OpId::reshape: {
      ViewStrides vs = view_strides(x.impl().shape, st, shape);
      if (vs.ok) return make_view(x, shape, vs.strides, x.offset());
      // Not expressible as a view: copy, then view the contiguous copy.
      Tensor c = dispatch1(OpId::copy, {&x, 1}, {});
      return make_view(c, shape, contiguous_strides(shape), c.offset());
    }
    case OpId::permute: {
      Strides s;
      for (auto d : attrs.dims) s.push_back(st[normalize_dim(d, x.dim(), "permute")]);
      return make_view(x, shape, s, x.offset());
    }
    case OpId::expand: {
      Strides s(shape.size(), 0);
      std::size_t lead = shape.size() - x.impl().shape.size();
      for (std::size_t i = lead; i < shape.size(); ++i)
        s[i] = x.impl().shape[i - lead] == shape[i] ? st[i - lead] : 0;
      return make_view(x, shape, s, x.offset());
    }
    case OpId::slice: {
      auto d = normalize_dim(attrs.dim, x.dim(), "slice");
      Strides s = st;
      s[d] *= attrs.step;
      return make_view(x, shape, s, x.offset() + attrs.start * st[d]);
    }
    case OpId::detach: {
      Tensor d = make_view(x, shape, st, x.offset());
      d.impl().is_view = x.impl().is_view;  // the same tensor's data, not a new view of it
      return d;
    }
    // Not views
#define KILN_HANDLED_view
#include "runtime/op_class_cases.inc"
    break;
  }
  throw Error(fmt::format("{}: not a view op", op));
}

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  KILN_OP_SCOPE;
  for (const auto& t : inputs) KILN_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  auto metas = metas_of(inputs);
  auto outputs = infer_meta(op, metas, attrs);
  // A 0-dim CPU tensor next to tensors of another device is a number (as in PyTorch), for
  // elementwise and attention ops; the op runs on the other tensors' device. A random op runs on
  // the device its attributes name.
  auto is_number = [](const Tensor& t) { return t.device().is_cpu() && t.dim() == 0; };
  Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  for (const auto& t : inputs)
    if (!is_number(t)) {
      device = t.device();
      break;
    }
  if (is_random(op)) device = attrs.device;
  // Attention's numbers are its dropout's seed and offset.
  bool numbers_allowed = op_class(op) == OpClass::elementwise || op_class(op) == OpClass::attention;
  for (const auto& t : inputs)
    KILN_CHECK(t.device() == device || (numbers_allowed && is_number(t)),
               "{}: inputs are on different devices ({} and {})", op, device.str(),
               t.device().str());
  if (OpInterceptor* tracer = active_interceptor())
    return tracer->intercept(op, inputs, attrs, outputs);
  switch (op_class(op)) {
    case OpClass::view:
      return {run_view(op, inputs[0], attrs, outputs[0].shape)};
    case OpClass::transfer:
      return {transfer(inputs[0], attrs.device)};
    default:
      return backend_for(device.type).run(op, inputs, attrs, outputs);
  }
}

Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  KILN_CHECK(num_outputs(op) == 1, "{}: has {} outputs; use dispatch", op, num_outputs(op));
  return dispatch(op, inputs, attrs)[0];
}

}  // namespace kiln
