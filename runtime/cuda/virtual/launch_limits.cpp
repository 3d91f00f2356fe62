// The virtual GPU's launch limits (launch_limits.h).
#include "runtime/cuda/virtual/launch_limits.h"

#include <fmt/format.h>

#include "runtime/cuda/virtual/fault.h"
#include "runtime/error.h"

namespace kiln::cuda::vgpu {

void validate_launch(const DeviceProperties& props, const Function& k, bool opted_in,
                     std::uint64_t max_dynamic_shared, Dim3 grid, Dim3 block, unsigned dyn) {
  // Formatted only for an error: every launch passes here.
  auto who = [&] {
    return fmt::format("launch of kernel '{}' with grid ({},{},{}) block ({},{},{})", k.name,
                       grid.x, grid.y, grid.z, block.x, block.y, block.z);
  };
  KILN_CHECK_AS(LaunchError, block.x && block.y && block.z && grid.x && grid.y && grid.z,
                "{}: every grid and block dimension must be at least 1", who());
  KILN_CHECK_AS(LaunchError,
                block.x <= props.max_block_dim.x && block.y <= props.max_block_dim.y &&
                    block.z <= props.max_block_dim.z,
                "{}: block dimensions exceed the device limit ({},{},{})", who(),
                props.max_block_dim.x, props.max_block_dim.y, props.max_block_dim.z);
  std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
  KILN_CHECK_AS(LaunchError, threads <= static_cast<std::uint64_t>(props.max_threads_per_block),
                "{}: {} threads per block, more than the device's {}", who(), threads,
                props.max_threads_per_block);
  KILN_CHECK_AS(LaunchError,
                grid.x <= props.max_grid_dim.x && grid.y <= props.max_grid_dim.y &&
                    grid.z <= props.max_grid_dim.z,
                "{}: grid dimensions exceed the device limit ({},{},{})", who(),
                props.max_grid_dim.x, props.max_grid_dim.y, props.max_grid_dim.z);
  if (k.maxntid[0]) {
    std::uint64_t max = std::uint64_t(k.maxntid[0]) * k.maxntid[1] * k.maxntid[2];
    KILN_CHECK_AS(LaunchError, threads <= max,
                  "{}: {} threads per block, more than the kernel's .maxntid {},{},{} "
                  "(__launch_bounds__) allows",
                  who(), threads, k.maxntid[0], k.maxntid[1], k.maxntid[2]);
  }
  if (k.reqntid[0])
    KILN_CHECK_AS(LaunchError,
                  block.x == k.reqntid[0] && block.y == k.reqntid[1] && block.z == k.reqntid[2],
                  "{}: the kernel requires block ({},{},{}) (.reqntid)", who(), k.reqntid[0],
                  k.reqntid[1], k.reqntid[2]);
  KILN_CHECK_AS(LaunchError, k.static_shared_bytes <= props.shared_mem_per_block,
                "{}: {} bytes of static shared memory, more than the {} a kernel may declare",
                who(), k.static_shared_bytes, props.shared_mem_per_block);
  std::uint64_t total = k.static_shared_bytes + dyn;
  KILN_CHECK_AS(LaunchError, total <= props.shared_mem_per_block_optin,
                "{}: {} bytes of shared memory ({} static + {} dynamic), more than the {} a "
                "block may have",
                who(), total, k.static_shared_bytes, dyn, props.shared_mem_per_block_optin);
  // As cuLaunchKernel: past 48 KiB in all only after the function's opt-in, up to what it
  // opted in to.
  std::uint64_t allowed = opted_in ? max_dynamic_shared
                          : k.static_shared_bytes < props.shared_mem_per_block
                              ? props.shared_mem_per_block - k.static_shared_bytes
                              : 0;
  KILN_CHECK_AS(LaunchError, dyn <= allowed,
                "{}: {} bytes of dynamic shared memory, more than the {} it may take {} "
                "(cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))",
                who(), dyn, allowed,
                opted_in ? "as opted in" : "without opting in to more than 48 KiB in all");
}

}  // namespace kiln::cuda::vgpu
