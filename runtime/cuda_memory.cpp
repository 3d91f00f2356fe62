// CUDA storage and host/device copies through the backend.
#include "runtime/cuda_memory.h"

#include "runtime/cpu/kernels.h"
#include "runtime/cuda/backend.h"

namespace kiln {

cuda::CachingAllocator& cuda_allocator() {
  static cuda::CachingAllocator allocator(cuda::backend());
  return allocator;
}

namespace {

void check_device(Device device) {
  int count = cuda::backend().device_count();
  KILN_CHECK(device.is_cuda() && device.index >= 0 && device.index < count,
             "{}: no such CUDA device ({} available on the {} backend)", device.str(), count,
             cuda::backend().kind());
}

}  // namespace

std::shared_ptr<Storage> allocate_cuda_storage(std::size_t nbytes, Device device) {
  check_device(device);
  cuda::CachingAllocator& allocator = cuda_allocator();
  cuda::DevicePtr ptr = allocator.allocate(std::max<std::size_t>(nbytes, 1));
  allocator.backend().memset8(ptr, 0, nbytes);
  auto* data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  return std::make_shared<Storage>(data, nbytes, device, [&allocator](void* p) {
    allocator.deallocate(static_cast<cuda::DevicePtr>(reinterpret_cast<std::uintptr_t>(p)));
  });
}

namespace {

cuda::DevicePtr device_address(const Tensor& t) {
  return static_cast<cuda::DevicePtr>(reinterpret_cast<std::uintptr_t>(t.impl().storage->data())) +
         static_cast<cuda::DevicePtr>(t.offset()) * itemsize(t.dtype());
}

// The smallest span of `t`'s storage that holds every element of the view, in elements from
// the view's offset: [low, high).
std::pair<std::int64_t, std::int64_t> element_span(const Tensor& t) {
  std::int64_t low = 0, high = 1;
  const Shape& shape = t.impl().shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return {0, 0};
    std::int64_t reach = (shape[d] - 1) * t.strides()[d];
    (reach < 0 ? low : high) += reach;
  }
  return {low, high};
}

}  // namespace

Tensor copy_to_device(const Tensor& t, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = t.impl().shape;
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = t.dtype();
  std::size_t nbytes = static_cast<std::size_t>(numel(impl->shape)) * itemsize(t.dtype());
  cuda::Backend& backend = cuda::backend();
  if (device.is_cuda()) {
    impl->storage = allocate_cuda_storage(nbytes, device);
    Tensor out(std::move(impl));
    if (nbytes == 0) return out;
    auto dst = device_address(out);
    if (t.device().is_cpu()) {
      Tensor host = t.is_contiguous() ? t : cpu::materialize(t, t.impl().shape, t.dtype());
      backend.copy_to_device(dst, host.raw_data(), nbytes);
    } else {
      KILN_CHECK(t.is_contiguous(),
                 "to: copying a non-contiguous tensor of shape {} between CUDA devices needs a "
                 "kernel, which this build does not generate yet",
                 shape_str(t.impl().shape));
      backend.copy_device(dst, device_address(t), nbytes);
    }
    return out;
  }
  // Device to host: copy the span the view covers, then gather it on the host.
  KILN_CHECK(device.is_cpu(), "to: unknown device {}", device.str());
  auto [low, high] = element_span(t);
  std::size_t item = itemsize(t.dtype());
  auto span = std::make_shared<TensorImpl>();
  span->storage = Storage::allocate_cpu(static_cast<std::size_t>(high - low) * item);
  span->dtype = t.dtype();
  span->shape = {high - low};
  span->strides = {1};
  Tensor staging(span);
  if (high > low)
    backend.copy_to_host(staging.raw_data(), device_address(t) + low * item,
                         static_cast<std::size_t>(high - low) * item);
  Tensor view = make_view(staging, t.impl().shape, t.strides(), -low);
  return cpu::materialize(view, view.impl().shape, t.dtype());
}

}  // namespace kiln
