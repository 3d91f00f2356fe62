// Tensor metadata, host data access and printing. Ops live in autograd/ops.cpp.
#include "runtime/tensor.h"

#include "runtime/dispatch.h"
#include "runtime/trace_hooks.h"

#include <cstdlib>
#include <cstring>
#include <ostream>

namespace kiln {

std::shared_ptr<Storage> Storage::allocate_cpu(std::size_t nbytes) {
  // 64-byte alignment keeps Eigen's vectorized paths and f64/i64 accesses aligned.
  std::size_t padded = (std::max<std::size_t>(nbytes, 1) + 63) / 64 * 64;
  void* data = std::aligned_alloc(64, padded);
  KILN_CHECK(data != nullptr, "allocate: out of host memory allocating {} bytes", nbytes);
  std::memset(data, 0, padded);
  return std::make_shared<Storage>(data, nbytes, Device::cpu(), [](void* p) { std::free(p); });
}

TensorImpl& Tensor::impl() const {
  KILN_CHECK(impl_ != nullptr, "tensor: operation on an undefined tensor");
  return *impl_;
}

SymInt Tensor::size(std::int64_t d) const {
  d = normalize_dim(d, dim(), "size");
  std::int64_t value = impl().shape[d];
  if (impl().trace_value < 0) return SymInt(value);
  return SymInt(value, traced_size_expr(*impl_, d));
}

SymShape Tensor::sym_shape() const {
  SymShape out;
  out.reserve(impl().shape.size());
  for (std::int64_t d = 0; d < dim(); ++d) out.push_back(size(d));
  return out;
}

bool Tensor::is_contiguous() const {
  return kiln::is_contiguous(impl().shape, impl().strides);
}

void* Tensor::raw_data() const {
  check_not_traced(*this, "data access");
  KILN_CHECK(impl().storage->data() != nullptr || kiln::numel(impl().shape) == 0,
             "data access: a tensor of shape {} has metadata only (kept by autograd for its "
             "shape); this is a kiln bug",
             shape_str(impl().shape));
  return static_cast<char*>(impl().storage->data()) + offset() * itemsize(dtype());
}

template <typename T>
T* Tensor::data() const {
  KILN_CHECK_AS(DTypeError, dtype_of<T> == dtype(), "data: tensor has dtype {}, requested {}",
                dtype(), dtype_of<T>);
  KILN_CHECK(device().is_cpu(), "data: tensor is on {}; copy it with to(Device::cpu()) first",
             device().str());
  return static_cast<T*>(raw_data());
}
template bool* Tensor::data<bool>() const;
template std::int8_t* Tensor::data<std::int8_t>() const;
template std::int32_t* Tensor::data<std::int32_t>() const;
template std::int64_t* Tensor::data<std::int64_t>() const;
template f16* Tensor::data<f16>() const;
template bf16* Tensor::data<bf16>() const;
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;

namespace {
// Visits every element's offset (in elements, relative to element 0) in row-major order.
template <typename Fn>
void for_each_offset(const Shape& shape, const Strides& strides, Fn&& fn) {
  std::int64_t n = numel(shape);
  if (n == 0) return;
  std::vector<std::int64_t> index(shape.size(), 0);
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    fn(off);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_not_traced(*this, "to_vector");
  if (!device().is_cpu()) return transfer(*this, Device::cpu()).to_vector<T>();
  std::vector<T> out;
  out.reserve(numel());
  visit_dtype(dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* base = static_cast<const S*>(raw_data());
    for_each_offset(shape(), strides(), [&](std::int64_t off) {
      if constexpr (std::is_same_v<S, f16> || std::is_same_v<S, bf16>)
        out.push_back(static_cast<T>(static_cast<float>(base[off])));
      else
        out.push_back(static_cast<T>(base[off]));
    });
  });
  return out;
}
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<std::int8_t> Tensor::to_vector<std::int8_t>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;

double Tensor::item() const {
  check_not_traced(*this, "item");
  KILN_CHECK_AS(ShapeError, numel() == 1,
                "item: only a one-element tensor converts to a scalar; got shape {}",
                shape_str(shape()));
  return to_vector<double>()[0];
}

namespace {
Tensor allocate(const Shape& shape, DType dtype, Device device, bool zero_fill, const char* op) {
  for (auto d : shape)
    KILN_CHECK_AS(ShapeError, d >= 0, "{}: negative size in shape {}", op, shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  std::size_t nbytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
  impl->storage = backend_for(device.type).allocate(nbytes, device, zero_fill);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, false, "empty");
}

Tensor empty_in(const std::shared_ptr<Storage>& storage, Shape shape, DType dtype, Device device) {
  if (!storage) return empty(shape, dtype, device);
  std::size_t nbytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
  KILN_CHECK(storage->nbytes() >= nbytes && storage->device() == device,
             "empty_in: a buffer of {} bytes on {} cannot hold {} {} on {}", storage->nbytes(),
             storage->device().str(), shape_str(shape), dtype_name(dtype), device.str());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, true, "zeros");
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->is_view = true;
  // An alias of a traced placeholder (autograd's history-free copies while a joint graph is
  // traced) stands for the same traced value.
  const TensorImpl& b = base.impl();
  if (b.trace_value >= 0 && impl->shape == b.shape && impl->strides == b.strides &&
      impl->offset == b.offset)
    impl->trace_value = b.trace_value;
  return Tensor(std::move(impl));
}

// ---- printing ----
namespace {

std::string format_value(double v, DType dtype) {
  if (dtype == DType::bool_) return v != 0 ? "true" : "false";
  if (!is_floating(dtype)) return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{:.4f}", v);
}

void print_rec(std::string& out, const std::vector<double>& values, const Shape& shape,
               std::size_t d, std::int64_t base, std::int64_t stride_elems, DType dtype, int indent,
               bool summarize) {
  if (d == shape.size()) {
    out += format_value(values[base], dtype);
    return;
  }
  std::int64_t n = shape[d];
  std::int64_t inner = stride_elems / std::max<std::int64_t>(n, 1);
  out += '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      out += "...";
      i = n - 4;
      out += d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
      continue;
    }
    print_rec(out, values, shape, d + 1, base + i * inner, inner, dtype, indent + 1, summarize);
    if (i + 1 < n) out += d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  check_not_traced(*this, "printing");
  std::vector<double> values = to_vector<double>();
  std::string body;
  constexpr int kPrefix = 7;  // strlen("tensor(")
  print_rec(body, values, shape(), 0, 0, numel(), dtype(), kPrefix, numel() > 1000);
  std::string out = "tensor(" + body;
  if (dim() > 0 && numel() == 0) out += fmt::format(", shape={}", shape_str(shape()));
  out += fmt::format(", dtype={}", dtype());
  if (!device().is_cpu()) out += ", device=" + device().str();
  if (requires_grad()) out += ", requires_grad=true";
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace kiln
