// What a communication library does for a process group: collectives on raw buffers of one
// dtype, called in the same order on every rank. Gloo's take host memory and block until done
// (they run on the group's thread); NCCL's take device memory and are enqueued on the device.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dist/dist.h"
#include "runtime/dtype.h"

namespace kiln::dist {

class TcpStore;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // true: buffers are device memory and calls return once enqueued (NCCL), so they are made on
  // the caller's thread, in its stream order; false: host memory, blocking calls (Gloo).
  virtual bool takes_device_memory() const = 0;
  virtual void all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, std::size_t count, DType dtype, int root) = 0;
  // `out` holds world_size * count elements, rank r's at r * count.
  virtual void all_gather(const void* in, void* out, std::size_t count, DType dtype) = 0;
  // `in` holds world_size * count elements; `out` takes the reduction of chunk `rank`.
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype,
                              ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Waits for what was enqueued (device backends).
  virtual void synchronize() {}
};

struct GroupConfig {
  int rank = 0, world_size = 1;
  std::string hostname;
  std::chrono::milliseconds timeout{300000};
};

std::unique_ptr<Backend> make_gloo_backend(TcpStore& store, const GroupConfig& config);
std::unique_ptr<Backend> make_nccl_backend(TcpStore& store, const GroupConfig& config);

}  // namespace kiln::dist
