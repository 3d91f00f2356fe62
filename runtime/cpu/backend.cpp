// The CPU backend: host memory, strided copies, and a reference kernel per primitive op;
// registered at load time.
#include "runtime/backend.h"
#include "runtime/cpu/kernels.h"

namespace kiln::cpu {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  // Host memory is always zero-filled: CPU kernels may accumulate into a fresh output.
  std::shared_ptr<Storage> allocate(std::size_t nbytes, Device, bool) override {
    return Storage::allocate_cpu(nbytes);
  }

  void copy_into(const Tensor& dst, const Tensor& src) override { cpu::copy_into(dst, src); }

  std::vector<Tensor> run(OpId op, std::span<const Tensor> in, const OpAttrs& attrs,
                          std::span<const TensorMeta> out) override {
    const OpDef& def = op_def(op);
    switch (op) {
      case OpId::cast:
      case OpId::copy:
        return {materialize_copy(in[0], out[0].dtype)};
      case OpId::where:
        return {where(in[0], in[1], in[2], out[0])};
      case OpId::tril:
      case OpId::triu:
        return {triangle(op, in[0], attrs.diagonal, out[0])};
      case OpId::max_dim:
      case OpId::min_dim:
        return extreme_along(op, in[0], attrs.dim, out);
      case OpId::cumsum:
        return {cumsum(in[0], attrs.dim, attrs.reverse, out[0])};
      case OpId::softmax:
      case OpId::log_softmax:
        return {softmax(op, in[0], attrs.dim, out[0])};
      case OpId::matmul:
        return {matmul(in[0], in[1], out[0])};
      case OpId::gather:
        return {gather(in[0], in[1], attrs.dim, out[0])};
      case OpId::index_select:
        return {index_select(in[0], in[1], attrs.dim, out[0])};
      case OpId::scatter_add:
        return {scatter_add(in[0], in[1], in[2], attrs.dim)};
      case OpId::index_add:
        return {index_add(in[0], in[1], in[2], attrs.dim)};
      case OpId::cat:
        return {cat(in, attrs.dim, out[0])};
      case OpId::pad:
        return {pad(in[0], attrs, out[0])};
      default:
        break;
    }
    if (def.op_class == OpClass::elementwise && def.arity == 1)
      return {unary(op, in[0], attrs, out[0])};
    if (def.op_class == OpClass::elementwise && def.arity == 2)
      return {binary(op, in[0], in[1], out[0])};
    if (def.op_class == OpClass::reduction) return {reduce(op, in[0], attrs, out[0])};
    throw Error(fmt::format("{}: no CPU kernel", op));
  }
};

const bool registered = [] {
  static CpuBackend backend;
  register_backend(Device::Type::cpu, &backend);
  return true;
}();

}  // namespace

}  // namespace kiln::cpu
