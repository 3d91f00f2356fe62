// Device routing for primitive ops, and the device-independent view ops.
#include "runtime/dispatch.h"

#include <array>

#include "runtime/cpu/kernels.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

std::array<BackendFn, 2>& backends() {
  static std::array<BackendFn, 2> table{};
  return table;
}

Tensor run_view(OpId op, const Tensor& x, const OpAttrs& attrs, const TensorMeta& out) {
  const Strides& st = x.strides();
  switch (op) {
    case OpId::reshape: {
      ViewStrides vs = view_strides(x.shape(), st, out.shape);
      if (vs.ok) return make_view(x, out.shape, vs.strides, x.offset());
      // Not expressible as a view: copy, then view the contiguous copy.
      Tensor c = dispatch1(OpId::copy, {&x, 1}, {});
      return make_view(c, out.shape, contiguous_strides(out.shape), c.offset());
    }
    case OpId::permute: {
      Strides s;
      for (auto d : attrs.dims) s.push_back(st[normalize_dim(d, x.dim(), "permute")]);
      return make_view(x, out.shape, s, x.offset());
    }
    case OpId::expand: {
      Strides s(out.shape.size(), 0);
      std::size_t lead = out.shape.size() - x.shape().size();
      for (std::size_t i = lead; i < out.shape.size(); ++i)
        s[i] = x.shape()[i - lead] == out.shape[i] ? st[i - lead] : 0;
      return make_view(x, out.shape, s, x.offset());
    }
    case OpId::slice: {
      auto d = normalize_dim(attrs.dim, x.dim(), "slice");
      Strides s = st;
      s[d] *= attrs.step;
      return make_view(x, out.shape, s, x.offset() + attrs.start * st[d]);
    }
    default: break;
  }
  throw Error(fmt::format("{}: not a view op", op));
}

std::vector<std::string> metas_shapes(const std::vector<TensorMeta>& metas) {
  std::vector<std::string> out;
  for (const auto& m : metas) out.push_back(shape_str(m.shape));
  return out;
}

}  // namespace

void register_backend(Device::Type type, BackendFn fn) {
  backends()[static_cast<std::size_t>(type)] = fn;
}

void copy_data(const Tensor& dst, const Tensor& src) {
  KILN_OP_SCOPE;
  check_not_tracing("in-place write");
  Shape shape = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  KILN_CHECK_AS(ShapeError, shape == dst.shape(), "copy_: source shape {} does not broadcast to {}",
                shape_str(src.shape()), shape_str(dst.shape()));
  KILN_CHECK(dst.device().is_cpu() && src.device().is_cpu(),
             "copy_: copies between {} and {} are not available in this build", src.device().str(),
             dst.device().str());
  Tensor s = src;
  if (src.shape() != shape) {
    OpAttrs attrs;
    attrs.shape = shape;
    s = dispatch1(OpId::expand, {&src, 1}, attrs);
  }
  cpu::copy_into(dst, s);
}

std::vector<TensorMeta> metas_of(std::span<const Tensor> inputs) {
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (const auto& t : inputs) metas.push_back({t.impl().shape, t.dtype()});
  return metas;
}

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  KILN_OP_SCOPE;
  for (const auto& t : inputs)
    KILN_CHECK(t.defined(), "{}: an input tensor is undefined", op);
  auto metas = metas_of(inputs);
  auto outputs = infer_meta(op, metas, attrs);
  Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  for (const auto& t : inputs)
    KILN_CHECK(t.device() == device, "{}: inputs are on different devices ({} and {})", op,
               device.str(), t.device().str());
  if (OpInterceptor* tracer = active_interceptor()) return tracer->intercept(op, inputs, attrs, outputs);
  if (op_class(op) == OpClass::view) return {run_view(op, inputs[0], attrs, outputs[0])};
  BackendFn fn = backends()[static_cast<std::size_t>(device.type)];
  KILN_CHECK(fn != nullptr,
             "{}: no kernels for {} tensors in this build (shapes {}); CUDA kernels come from the "
             "code generator, which is not here yet: copy to the host with to(Device::cpu())",
             op, device.str(), fmt::join(metas_shapes(metas), ", "));
  return fn(op, inputs, attrs, outputs);
}

}  // namespace kiln
