// kiln::Tensor: a shared handle to a strided view of a Storage, with the autograd state a
// differentiable op needs. Math and view methods are defined with the ops (autograd/ops.h), so
// that every way of calling an op goes through the same dispatch point.
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/scalar.h"
#include "runtime/shape.h"
#include "runtime/storage.h"
#include "runtime/sym_int.h"

namespace kiln {

namespace autograd {
class Node;
}

// The state behind a Tensor handle; several handles (and views) may share one storage.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // Autograd: a leaf has no grad_fn; a non-leaf is output `output_nr` of `grad_fn`.
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;
  std::uint32_t output_nr = 0;
  std::shared_ptr<TensorImpl> grad;
  std::weak_ptr<autograd::Node> grad_accumulator;  // the leaf's AccumulateGrad, if any
  bool is_view = false;  // shares storage with the tensor a view op made it from

  // >= 0 for a placeholder recorded by a tracer (graph/tracer.h): it has metadata, no data.
  std::int64_t trace_value = -1;
  // Bit d set: jit::mark_dynamic asked for dim d to be traced as a symbolic size.
  std::uint64_t dynamic_dims = 0;
};

// Tells an active tracer that user code read the whole shape of a traced tensor
// (runtime/trace_hooks.h).
void report_shape_read(const TensorImpl& impl);
// The size expression of dim `dim` of a traced tensor (a constant outside tracing).
SymExpr traced_size_expr(const TensorImpl& impl, std::int64_t dim);

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: no storage, `defined()` is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  // The sizes as plain integers. While tracing this is a read of every dim, which specializes
  // dynamic dims; size() and sym_shape() keep them symbolic (runtime/sym_int.h).
  const Shape& shape() const {
    note_shape_read();
    return impl().shape;
  }
  // One size, symbolic while tracing: `x.reshape({x.size(0) * 2, -1})` keeps dim 0 dynamic.
  SymInt size(std::int64_t dim) const;
  SymShape sym_shape() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(impl().shape.size()); }
  std::int64_t numel() const {
    note_shape_read();
    return kiln::numel(impl().shape);
  }
  const Strides& strides() const { return impl().strides; }
  std::int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- host data access (CPU tensors) ----
  // Address of element 0 of this view.
  void* raw_data() const;
  // Typed pointer to element 0; DTypeError if T is not this tensor's storage type.
  template <typename T>
  T* data() const;
  // The single value of a one-element tensor, converted to double / T.
  double item() const;
  template <typename T>
  T item() const {
    double v = item();  // checks that there is exactly one element
    // Integers are read without a detour through double, which would round i64 beyond 2^53.
    if constexpr (std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>)
      return to_vector<T>()[0];
    else
      return static_cast<T>(v);
  }
  // All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  // Marks a leaf as needing .grad; AutogradError on a non-leaf or a non-floating dtype.
  Tensor& requires_grad_(bool required = true);
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Backpropagates from this tensor; `gradient` may be omitted only for one-element tensors.
  void backward(const Tensor& gradient = {}, bool retain_graph = false,
                bool create_graph = false) const;
  // Same data, no history, requires_grad false.
  Tensor detach() const;

  // ---- views (no copy) ----
  Tensor reshape(const SymShape& shape) const;  // a view when strides allow, else a copy
  Tensor view(const SymShape& shape) const;     // ShapeError when a view is impossible
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor t() const;  // transpose of a rank <= 2 tensor
  Tensor expand(const SymShape& shape) const;
  Tensor broadcast_to(const SymShape& shape) const { return expand(shape); }
  Tensor expand_as(const Tensor& other) const { return expand(other.sym_shape()); }
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  // Splits dim `dim` into `sizes` (one of them may be -1).
  Tensor unflatten(std::int64_t dim, const SymShape& sizes) const;

  // ---- copies and conversion ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- reductions (an empty dim list means every dim) ----
  Tensor sum(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor prod(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor max(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor min(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;

  // ---- a few common elementwise ops as methods ----
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor pow(Scalar exponent) const;

  // ---- in-place (bump the storage version; rejected on leaves that require grad) ----
  // A Tensor is a handle, so these are const members as in LibTorch: they write the data the
  // handle refers to. Inside a compiled function they are functionalized (graph/tracer.h).
  const Tensor& add_(const Tensor& other, Scalar alpha = 1) const;
  const Tensor& add_(Scalar value) const;
  const Tensor& sub_(const Tensor& other, Scalar alpha = 1) const;
  const Tensor& sub_(Scalar value) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(Scalar value) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(Scalar value) const;
  // As torch.clamp_: either bound may be absent, not both.
  const Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = {}) const;
  const Tensor& masked_fill_(const Tensor& mask, Scalar value) const;
  // As torch.Tensor.index_copy_ (see index_copy in autograd/ops.h).
  const Tensor& index_copy_(std::int64_t dim, const Tensor& index, const Tensor& source) const;
  // As torch.Tensor.index_put_ (see index_put in autograd/ops.h).
  const Tensor& index_put_(const std::vector<Tensor>& indices, const Tensor& values,
                           bool accumulate = false) const;
  const Tensor& fill_(Scalar value) const;
  const Tensor& zero_() const { return fill_(0); }
  const Tensor& copy_(const Tensor& src) const;

  std::string str() const;  // PyTorch-like printing

 private:
  void note_shape_read() const {
    if (impl().trace_value >= 0) report_shape_read(*impl_);
  }

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Allocates a contiguous tensor on `device` (through the device's backend). As torch.empty,
// its contents are unspecified on CUDA (a kernel writes them next); host memory is zeroed.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// A zero-filled contiguous tensor on `device`.
Tensor zeros(const Shape& shape, DType dtype, Device device);
// A contiguous tensor over `storage` (a buffer a compiled plan assigned, jit/buffer_assignment.h),
// which must hold it; empty() when `storage` is null.
Tensor empty_in(const std::shared_ptr<Storage>& storage, Shape shape, DType dtype, Device device);
// A view of `base`'s storage with the given geometry (no autograd); for op implementations.
Tensor make_view(const Tensor& base, Shape shape, Strides strides, std::int64_t offset);

}  // namespace kiln
