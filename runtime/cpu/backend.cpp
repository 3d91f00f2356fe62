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
      case OpId::random_uniform:
      case OpId::random_normal:
      case OpId::random_int:
        return {random_draw(op, in, attrs, out[0])};
      case OpId::max_dim:
      case OpId::min_dim:
        return extreme_along(op, in[0], attrs.dim, out);
      case OpId::sort:
      case OpId::topk:
        return sort_along(op, in[0], attrs, out);
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
      case OpId::index_copy:
        return {index_copy(in[0], in[1], in[2], attrs.dim)};
      case OpId::cat:
        return {cat(in, attrs.dim, out[0])};
      case OpId::pad:
        return {pad(in[0], attrs, out[0])};
      case OpId::attention:
        return attention(in, attrs, out);
      case OpId::attention_backward:
        return attention_backward(in, attrs, out);
      case OpId::cached_attention:
        return {cached_attention(in, attrs, out[0])};
      // Elementwise ops and reductions by class below; dispatch runs views and transfers itself
      case OpId::exp:
      case OpId::log:
      case OpId::log1p:
      case OpId::expm1:
      case OpId::sqrt:
      case OpId::rsqrt:
      case OpId::reciprocal:
      case OpId::sin:
      case OpId::cos:
      case OpId::tanh:
      case OpId::sigmoid:
      case OpId::gelu:
      case OpId::gelu_tanh:
      case OpId::silu:
      case OpId::erf:
      case OpId::softplus:
      case OpId::neg:
      case OpId::abs:
      case OpId::relu:
      case OpId::sign:
      case OpId::floor:
      case OpId::ceil:
      case OpId::round:
      case OpId::trunc:
      case OpId::logical_not:
      case OpId::add:
      case OpId::sub:
      case OpId::mul:
      case OpId::div:
      case OpId::pow:
      case OpId::maximum:
      case OpId::minimum:
      case OpId::remainder:
      case OpId::floor_divide:
      case OpId::eq:
      case OpId::ne:
      case OpId::lt:
      case OpId::le:
      case OpId::gt:
      case OpId::ge:
      case OpId::logical_and:
      case OpId::logical_or:
      case OpId::sum:
      case OpId::prod:
      case OpId::amax:
      case OpId::amin:
      case OpId::argmax:
      case OpId::argmin:
      case OpId::reshape:
      case OpId::permute:
      case OpId::expand:
      case OpId::slice:
      case OpId::detach:
      case OpId::to_device:
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
