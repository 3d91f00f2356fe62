// CUDA storage and host/device copies through the backend.
#include "runtime/cuda_backend.h"

#include "runtime/cpu/kernels.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/pinned_staging.h"
#include "runtime/device_checks.h"

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

// The elements `t` (on a CUDA device) views, brought to the host with the same layout.
Tensor download(const Tensor& t) {
  auto [low, high] = element_span(t);
  std::size_t item = itemsize(t.dtype());
  auto span = std::make_shared<TensorImpl>();
  span->storage = Storage::allocate_cpu(static_cast<std::size_t>(high - low) * item);
  span->dtype = t.dtype();
  span->shape = {high - low};
  span->strides = {1};
  Tensor staging(span);
  if (high > low) {
    cuda::count_device_to_host_copy();
    cuda::backend().copy_to_host(staging.raw_data(), device_address(t) + low * item,
                                 static_cast<std::size_t>(high - low) * item,
                                 cuda::current_stream());
  }
  return make_view(staging, t.impl().shape, t.strides(), -low);
}

}  // namespace

std::shared_ptr<Storage> CudaBackend::allocate(std::size_t nbytes, Device device, bool zero_fill) {
  check_device(device);
  cuda::CachingAllocator& allocator = cuda_allocator();
  const cuda::Stream stream = cuda::current_stream();
  cuda::DevicePtr ptr = allocator.allocate(std::max<std::size_t>(nbytes, 1), stream);
  if (zero_fill) allocator.backend().memset8(ptr, 0, nbytes, stream);
  auto* data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  return std::make_shared<Storage>(data, nbytes, device, [&allocator](void* p) {
    allocator.deallocate(static_cast<cuda::DevicePtr>(reinterpret_cast<std::uintptr_t>(p)));
  });
}

void CudaBackend::copy_into(const Tensor& dst, const Tensor& src) {
  std::size_t nbytes = static_cast<std::size_t>(dst.numel()) * itemsize(dst.dtype());
  if (nbytes == 0) return;
  if (dst.device().is_cpu()) {  // device -> host: download, then convert on the host
    run_device_checks();        // a sync anyway: the errors launches left behind surface here
    cpu::copy_into(dst, download(src));
    return;
  }
  bool dst_plain = dst.is_contiguous();
  if (src.device().is_cpu() && dst_plain) {  // host -> device: convert on the host, upload
    Tensor host = cpu::materialize(src, src.impl().shape, dst.dtype());
    cuda::pinned_staging().upload(device_address(dst), host.raw_data(), nbytes,
                                  cuda::current_stream());
    return;
  }
  KILN_CHECK(
      src.device().is_cuda() && dst_plain && src.is_contiguous() && src.dtype() == dst.dtype(),
      "copy: writing a {} tensor of shape {} ({}) into a {} {} tensor ({}) needs a copy "
      "kernel, which comes with the code generator; only contiguous copies of one dtype "
      "work on CUDA devices in this build",
      src.device().str(), shape_str(src.impl().shape),
      src.is_contiguous() ? "contiguous" : "strided", dst.device().str(), dst.dtype(),
      dst_plain ? "contiguous" : "strided");
  cuda::backend().copy_device(device_address(dst), device_address(src), nbytes,
                              cuda::current_stream());
}

std::vector<Tensor> CudaBackend::run(OpId op, std::span<const Tensor> inputs, const OpAttrs&,
                                     std::span<const TensorMeta>) {
  std::vector<std::string> shapes;
  for (const auto& t : inputs) shapes.push_back(shape_str(t.impl().shape));
  throw Error(fmt::format(
      "{}: no kernels for {} tensors in this build (shapes {}); CUDA kernels come from the code "
      "generator, which is not here yet: copy to the host with to(Device::cpu())",
      op, inputs.empty() ? "cuda" : inputs[0].device().str(), fmt::join(shapes, ", ")));
}

namespace {
const bool registered = [] {
  static CudaBackend backend;
  register_backend(Device::Type::cuda, &backend);
  return true;
}();
}  // namespace

}  // namespace kiln
