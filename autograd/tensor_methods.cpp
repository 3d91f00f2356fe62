// Tensor's autograd state and its method forms of the ops, all routed through autograd/ops.h.
#include <cstdio>
#include <mutex>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/backend.h"
#include "runtime/dispatch.h"
#include "runtime/grad_mode.h"
#include "runtime/trace_hooks.h"

namespace kiln {

// ---- autograd state ----

Tensor& Tensor::requires_grad_(bool required) {
  KILN_CHECK_AS(AutogradError, is_leaf(),
                "requires_grad_: only leaf tensors can change requires_grad; this one (shape {}) "
                "was made by {}",
                shape_str(shape()), grad_fn()->name());
  KILN_CHECK_AS(AutogradError, !required || is_floating(dtype()),
                "requires_grad_: only floating-point tensors can require gradients, got {}",
                dtype());
  impl().requires_grad = required;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    KILN_CHECK_AS(ShapeError, g.shape() == shape(), "set_grad: gradient shape {} != tensor {}",
                  shape_str(g.shape()), shape_str(shape()));
  impl().grad = g.defined() ? g.impl_ptr() : nullptr;
}
bool Tensor::is_leaf() const { return impl().grad_fn == nullptr; }

namespace {
// What PyTorch's backward says once per process: a leaf's .grad built under create_graph holds
// a graph that holds the leaf, a cycle of shared_ptrs that outlives them both.
void warn_create_graph_cycle() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr,
                 "kiln: warning: backward() with create_graph=true makes a reference cycle "
                 "between a leaf and its gradient, which leaks both; autograd::grad does not. "
                 "Otherwise reset each leaf's gradient (set_grad(Tensor())) after use to break "
                 "the cycle.\n");
  });
}
}  // namespace

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor g = gradient;
  if (!g.defined()) {
    KILN_CHECK_AS(AutogradError, numel() == 1,
                  "backward: a gradient can be implied only for one-element outputs; this one "
                  "has shape {}, so pass a gradient of that shape",
                  shape_str(shape()));
    g = ones_like(*this);
  }
  KILN_CHECK_AS(ShapeError, g.shape() == shape(),
                "backward: gradient shape {} does not match output shape {}", shape_str(g.shape()),
                shape_str(shape()));
  if (create_graph) warn_create_graph_cycle();
  autograd::run_backward({*this}, {g}, retain_graph, create_graph);
}

// An op, so that a traced function's detach() becomes a stop-gradient in its graph.
Tensor Tensor::detach() const { return autograd::record(OpId::detach, {*this}); }

// ---- views ----

Tensor Tensor::reshape(const SymShape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::view(const SymShape& s) const {
  KILN_OP_SCOPE;
  Shape target = infer_reshape(impl().shape, s.traced_values(), "view");
  KILN_CHECK_AS(ShapeError, view_strides(impl().shape, strides(), target).ok,
                "view: shape {} with strides {} cannot be viewed as {} without a copy; use "
                "reshape",
                shape_str(impl().shape), shape_str(strides()), shape_str(target));
  return kiln::reshape(*this, s);
}
Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  return kiln::permute(*this, dims);
}
Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  return kiln::transpose(*this, d0, d1);
}
Tensor Tensor::t() const {
  KILN_CHECK_AS(ShapeError, dim() <= 2, "t: expects a tensor of rank <= 2, got shape {}",
                shape_str(shape()));
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1);
}
Tensor Tensor::expand(const SymShape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end,
                     std::int64_t step) const {
  return kiln::slice(*this, d, start, end, step);
}
Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  return kiln::select(*this, d, index);
}
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(std::int64_t d) const { return kiln::squeeze(*this, d); }
Tensor Tensor::unsqueeze(std::int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::flatten(std::int64_t s, std::int64_t e) const { return kiln::flatten(*this, s, e); }
Tensor Tensor::unflatten(std::int64_t d, const SymShape& sizes) const {
  return kiln::unflatten(*this, d, sizes);
}

// ---- copies and conversion ----

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : autograd::record(OpId::copy, {*this});
}
Tensor Tensor::clone() const { return autograd::record(OpId::copy, {*this}); }
Tensor Tensor::to(DType t) const { return cast(*this, t); }
Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  OpAttrs attrs;
  attrs.device = d;
  return autograd::record(OpId::to_device, {*this}, attrs);
}

// ---- reductions and common elementwise ops ----

Tensor Tensor::sum(const std::vector<std::int64_t>& d, bool k) const { return kiln::sum(*this, d, k); }
Tensor Tensor::mean(const std::vector<std::int64_t>& d, bool k) const {
  return kiln::mean(*this, d, k);
}
Tensor Tensor::prod(const std::vector<std::int64_t>& d, bool k) const {
  return kiln::prod(*this, d, k);
}
Tensor Tensor::max(const std::vector<std::int64_t>& d, bool k) const { return amax(*this, d, k); }
Tensor Tensor::min(const std::vector<std::int64_t>& d, bool k) const { return amin(*this, d, k); }
Tensor Tensor::argmax(std::int64_t d, bool k) const { return kiln::argmax(*this, d, k); }
Tensor Tensor::argmin(std::int64_t d, bool k) const { return kiln::argmin(*this, d, k); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::pow(Scalar e) const { return kiln::pow(*this, e); }

// ---- in-place ----

namespace {

// While tracing, a write moves no data (it is functionalized), so no version changes: the call
// that writes the value back bumps it.
void bump_version(const Tensor& self) {
  if (!active_interceptor()) self.impl().storage->bump_version();
}

void check_inplace(const Tensor& self, const char* op) {
  KILN_OP_SCOPE;  // sizes read here are kiln's, not the user's: they specialize nothing
  KILN_CHECK_AS(AutogradError, !(grad_enabled() && self.requires_grad() && self.is_leaf()),
                "{}: a leaf tensor of shape {} that requires grad is used in an in-place "
                "operation; do the update under NoGradGuard",
                op, shape_str(self.shape()));
}

// Writes `result` into `self` and, when the result has history, moves that history onto self.
// `result` was computed from a clone of self, so nodes saved before keep their values.
const Tensor& assign(const Tensor& self, const Tensor& result, const char* op) {
  KILN_OP_SCOPE;
  KILN_CHECK_AS(ShapeError, result.shape() == self.shape(),
                "{}: the result's shape {} cannot be written into self of shape {}", op,
                shape_str(result.shape()), shape_str(self.shape()));
  bool history = grad_enabled() && result.requires_grad();
  KILN_CHECK_AS(AutogradError, !history || !self.impl().is_view,
                "{}: in-place operation on a view (shape {}) that needs grad is not supported; "
                "use the out-of-place op",
                op, shape_str(self.shape()));
  copy_data(self, result.dtype() == self.dtype() ? result : result.detach().to(self.dtype()));
  bump_version(self);
  if (history) {
    Tensor r = result.dtype() == self.dtype() ? result : result.to(self.dtype());
    Tensor handle = self;  // shares self's impl: its history is self's
    autograd::set_history(handle, r.impl().grad_fn, r.impl().output_nr);
  }
  return self;
}

// Self as an operand of the value written into it. While tracing, values are SSA (the write is
// functionalized), so self is read as it is, and its gradient flows through.
Tensor operand(const Tensor& self, const Tensor& other) {
  if (active_interceptor()) return self;
  bool history = grad_enabled() && (self.requires_grad() || other.requires_grad());
  return history ? self.clone() : self.detach();
}

// other * alpha (other itself when alpha is 1), as add_ and sub_ take it.
Tensor scaled(const Tensor& other, Scalar alpha) {
  bool unit = alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
  return unit ? other : mul(other, alpha);
}

Tensor number(const Tensor& self, Scalar value) {
  return scalar_tensor(value, self.dtype());
}

}  // namespace

const Tensor& Tensor::add_(const Tensor& other, Scalar alpha) const {
  check_inplace(*this, "add_");
  Tensor o = scaled(other, alpha);
  return assign(*this, add(operand(*this, o), o), "add_");
}
const Tensor& Tensor::add_(Scalar value) const {
  return add_(number(*this, value));
}

const Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) const {
  check_inplace(*this, "sub_");
  Tensor o = scaled(other, alpha);
  return assign(*this, sub(operand(*this, o), o), "sub_");
}
const Tensor& Tensor::sub_(Scalar value) const {
  return sub_(number(*this, value));
}

const Tensor& Tensor::mul_(const Tensor& other) const {
  check_inplace(*this, "mul_");
  return assign(*this, mul(operand(*this, other), other), "mul_");
}
const Tensor& Tensor::mul_(Scalar value) const {
  return mul_(number(*this, value));
}

const Tensor& Tensor::div_(const Tensor& other) const {
  check_inplace(*this, "div_");
  KILN_CHECK_AS(DTypeError, is_floating(dtype()),
                "div_: true division of {} gives floating values, which cannot be written into "
                "self of dtype {}",
                other.dtype(), dtype());
  return assign(*this, div(operand(*this, other), other), "div_");
}
const Tensor& Tensor::div_(Scalar value) const {
  return div_(number(*this, value));
}

const Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const {
  check_inplace(*this, "clamp_");
  return assign(*this, clamp(operand(*this, *this), min, max), "clamp_");
}

const Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) const {
  check_inplace(*this, "masked_fill_");
  return assign(*this, masked_fill(operand(*this, *this), mask, value), "masked_fill_");
}

const Tensor& Tensor::index_copy_(std::int64_t dim, const Tensor& index,
                                  const Tensor& source) const {
  check_inplace(*this, "index_copy_");
  // With no history to record, the backend writes the slices alone where it can (a decode
  // step's cache row), instead of the whole result.
  if (!active_interceptor() && !(grad_enabled() && (requires_grad() || source.requires_grad()))) {
    const std::int64_t d = check_index_copy(*this, dim, index, source);
    if (backend_for(device().type).index_copy_into(*this, d, index, source)) {
      bump_version(*this);
      return *this;
    }
  }
  return assign(*this, index_copy(operand(*this, source), dim, index, source), "index_copy_");
}

const Tensor& Tensor::index_put_(const std::vector<Tensor>& indices, const Tensor& values,
                                 bool accumulate) const {
  check_inplace(*this, "index_put_");
  return assign(*this, index_put(operand(*this, values), indices, values, accumulate),
                "index_put_");
}

const Tensor& Tensor::fill_(Scalar value) const {
  check_inplace(*this, "fill_");
  copy_data(*this, scalar_tensor(value, value.is_floating() ? DType::f64 : DType::i64));
  bump_version(*this);
  if (grad_enabled() && !is_leaf()) {
    // The new values no longer depend on anything.
    Tensor handle = *this;
    autograd::clear_history(handle);
  }
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_inplace(*this, "copy_");
  Tensor s = src.dtype() == dtype() ? src : src.to(dtype());
  if (active_interceptor()) {  // functionalized: the gradient flows from src
    copy_data(*this, s);
    return *this;
  }
  if (grad_enabled() && src.requires_grad())
    return assign(*this, add(zeros_like(*this), s), "copy_");
  copy_data(*this, s.detach());
  bump_version(*this);
  return *this;
}

}  // namespace kiln
