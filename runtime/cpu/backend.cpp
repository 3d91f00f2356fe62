// Routes each primitive op to its CPU reference kernel; registered at load time.
#include "runtime/cpu/kernels.h"
#include "runtime/dispatch.h"

namespace kiln::cpu {

namespace {

std::vector<Tensor> run(OpId op, std::span<const Tensor> in, const OpAttrs& attrs,
                        std::span<const TensorMeta> out) {
  if (is_unary(op)) return {unary(op, in[0], out[0])};
  if (is_binary(op)) return {binary(op, in[0], in[1], out[0])};
  if (op_class(op) == OpClass::reduction) return {reduce(op, in[0], attrs, out[0])};
  switch (op) {
    case OpId::cast:
    case OpId::copy: {
      Tensor y = empty(out[0].shape, out[0].dtype);
      copy_into(y, in[0]);
      return {y};
    }
    case OpId::where: return {where(in[0], in[1], in[2], out[0])};
    case OpId::matmul: return {matmul(in[0], in[1], out[0])};
    case OpId::gather: return {gather(in[0], in[1], attrs.dim, out[0])};
    case OpId::index_select: return {index_select(in[0], in[1], attrs.dim, out[0])};
    case OpId::scatter_add: return {scatter_add(in[0], in[1], in[2], attrs.dim)};
    case OpId::index_add: return {index_add(in[0], in[1], in[2], attrs.dim)};
    case OpId::cat: return {cat(in, attrs.dim, out[0])};
    case OpId::pad: return {pad(in[0], attrs, out[0])};
    default: break;
  }
  throw Error(fmt::format("{}: no CPU kernel", op));
}

const bool registered = [] {
  register_backend(Device::Type::cpu, &run);
  return true;
}();

}  // namespace

}  // namespace kiln::cpu
