// The CUDA driver API as a table of function pointers resolved from libcuda.so.1 with dlsym, so
// kiln never links libcuda and starts on machines without a driver. cuda.h supplies only types.
#pragma once

#include <cuda.h>

#include <string>

namespace kiln::cuda::driver {

// (member, exported symbol, declaration in cuda.h). Versioned symbols are named explicitly (the
// _v2 ABI that cuda.h's macros select), so the table does not depend on cuda.h's #defines.
#define KILN_DRIVER_FUNCTIONS(X)                                                       \
  X(init, "cuInit", cuInit)                                                            \
  X(driver_get_version, "cuDriverGetVersion", cuDriverGetVersion)                      \
  X(get_error_name, "cuGetErrorName", cuGetErrorName)                                  \
  X(get_error_string, "cuGetErrorString", cuGetErrorString)                            \
  X(device_get_count, "cuDeviceGetCount", cuDeviceGetCount)                            \
  X(device_get, "cuDeviceGet", cuDeviceGet)                                            \
  X(device_get_name, "cuDeviceGetName", cuDeviceGetName)                               \
  X(device_get_attribute, "cuDeviceGetAttribute", cuDeviceGetAttribute)                \
  X(device_total_mem, "cuDeviceTotalMem_v2", cuDeviceTotalMem_v2)                      \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)          \
  X(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease_v2) \
  X(ctx_set_current, "cuCtxSetCurrent", cuCtxSetCurrent)                               \
  X(ctx_synchronize, "cuCtxSynchronize", cuCtxSynchronize)                             \
  X(mem_alloc, "cuMemAlloc_v2", cuMemAlloc_v2)                                         \
  X(mem_free, "cuMemFree_v2", cuMemFree_v2)                                            \
  X(mem_host_alloc, "cuMemHostAlloc", cuMemHostAlloc)                                  \
  X(mem_free_host, "cuMemFreeHost", cuMemFreeHost)                                     \
  X(memcpy_htod, "cuMemcpyHtoD_v2", cuMemcpyHtoD_v2)                                   \
  X(memcpy_dtoh, "cuMemcpyDtoH_v2", cuMemcpyDtoH_v2)                                   \
  X(memcpy_dtod, "cuMemcpyDtoD_v2", cuMemcpyDtoD_v2)                                   \
  X(memcpy_htod_async, "cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync_v2)                   \
  X(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync_v2)                   \
  X(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2", cuMemcpyDtoDAsync_v2)                   \
  X(memset_d8_async, "cuMemsetD8Async", cuMemsetD8Async)                               \
  X(module_load_data_ex, "cuModuleLoadDataEx", cuModuleLoadDataEx)                     \
  X(module_unload, "cuModuleUnload", cuModuleUnload)                                   \
  X(module_get_function, "cuModuleGetFunction", cuModuleGetFunction)                   \
  X(func_get_attribute, "cuFuncGetAttribute", cuFuncGetAttribute)                      \
  X(func_set_attribute, "cuFuncSetAttribute", cuFuncSetAttribute)                      \
  X(launch_kernel, "cuLaunchKernel", cuLaunchKernel)                                   \
  X(stream_create, "cuStreamCreate", cuStreamCreate)                                   \
  X(stream_destroy, "cuStreamDestroy_v2", cuStreamDestroy_v2)                          \
  X(stream_synchronize, "cuStreamSynchronize", cuStreamSynchronize)                    \
  X(stream_wait_event, "cuStreamWaitEvent", cuStreamWaitEvent)                         \
  X(event_create, "cuEventCreate", cuEventCreate)                                      \
  X(event_destroy, "cuEventDestroy_v2", cuEventDestroy_v2)                             \
  X(event_record, "cuEventRecord", cuEventRecord)                                      \
  X(event_synchronize, "cuEventSynchronize", cuEventSynchronize)                       \
  X(event_query, "cuEventQuery", cuEventQuery)                                         \
  X(event_elapsed_time, "cuEventElapsedTime", cuEventElapsedTime)                      \
  X(stream_begin_capture, "cuStreamBeginCapture_v2", cuStreamBeginCapture_v2)          \
  X(stream_end_capture, "cuStreamEndCapture", cuStreamEndCapture)                      \
  X(stream_is_capturing, "cuStreamIsCapturing", cuStreamIsCapturing)                   \
  X(thread_exchange_capture_mode, "cuThreadExchangeStreamCaptureMode",                 \
    cuThreadExchangeStreamCaptureMode)                                                 \
  X(graph_instantiate, "cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags)     \
  X(graph_launch, "cuGraphLaunch", cuGraphLaunch)                                      \
  X(graph_exec_destroy, "cuGraphExecDestroy", cuGraphExecDestroy)                      \
  X(graph_destroy, "cuGraphDestroy", cuGraphDestroy)

struct DriverApi {
#define KILN_DRIVER_MEMBER(member, symbol, decl) decltype(&::decl) member = nullptr;
  KILN_DRIVER_FUNCTIONS(KILN_DRIVER_MEMBER)
#undef KILN_DRIVER_MEMBER
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
};

// Loads libcuda.so.1 once per process and calls cuInit(0). Throws kiln::Error naming dlerror()
// when there is no driver, or the failing call when the driver is unusable (stub library, no
// device). The failure is remembered: later calls throw the same message without retrying.
const DriverApi& driver_api();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for `result`.
std::string error_text(const DriverApi& api, CUresult result);

}  // namespace kiln::cuda::driver
