// One BLAS-Lt service per backend object (see blaslt.h).
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>

#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/error.h"

namespace kiln::cuda::blaslt {

MatmulCall make_call(const Descriptors& desc, const void* alpha, const void* beta, DevicePtr a,
                     DevicePtr b, DevicePtr c, DevicePtr d) {
  MatmulCall call;
  call.desc = desc.matmul();
  call.a_layout = desc.a();
  call.b_layout = desc.b();
  call.c_layout = desc.c();
  call.d_layout = desc.d();
  call.alpha = alpha;
  call.beta = beta;
  call.a = a;
  call.b = b;
  call.c = c;
  call.d = d;
  return call;
}

std::size_t workspace_bytes_for(const DeviceProperties& props) {
  // NVIDIA's recommendation: Hopper kernels need 32 MiB to reach their best algorithms.
  return props.compute_major >= 9 ? (std::size_t(32) << 20) : (std::size_t(4) << 20);
}

BlasLt& service(Backend& backend) {
  static std::mutex mutex;
  static std::map<Backend*, std::unique_ptr<BlasLt>> services;
  std::lock_guard lock(mutex);
  auto& slot = services[&backend];
  if (!slot) {
    if (backend.kind() == "virtual")
      slot = make_virtual_blaslt(backend);
    else if (backend.kind() == "driver")
      slot = make_driver_blaslt(backend);
    else
      throw Error(
          fmt::format("cuBLASLt: no BLAS-Lt service for CUDA backend '{}'", backend.kind()));
  }
  return *slot;
}

}  // namespace kiln::cuda::blaslt
