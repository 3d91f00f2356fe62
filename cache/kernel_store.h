// Compiled kernels by key: the disk store in front of NVRTC. cache/ knows no more of jit/ than
// "compile this source for this target": jit/codegen/kernel_cache.cpp keeps loaded functions in
// memory and asks here on a memory miss, so the lookup order is memory -> disk -> compile.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cache/cache_entry.h"
#include "runtime/cuda/nvrtc/nvrtc.h"

namespace kiln::cache {

struct KernelRequest {
  std::string name;    // the entry point
  std::string source;  // CUDA C++ (a copy: a miss costs a disk read or a compile anyway)
  nvrtc::Target target;
  nvrtc::ProgramOptions options;
  int codegen_version = 0;
};

struct KernelImage {
  std::string key;
  std::string image;                              // what Backend::load_module takes: PTX or cubin
  std::optional<nvrtc::CompiledModule> compiled;  // set when NVRTC ran for this request
};

// The request's cache key (see kernel_key.h).
std::string key_of(const KernelRequest& request);

// The kernel from disk, or nothing (disk disabled, a miss, or a corrupt entry, which is
// removed with a one-line warning). Never compiles.
std::optional<KernelImage> fetch_from_disk(const KernelRequest& request);

// The kernel from disk, else compiled and stored. Under a per-key lock, so that processes
// sharing the cache compile each kernel once: whoever waited finds the entry written.
// Disk failures degrade to compiling without the disk (one warning); NVRTC errors propagate.
KernelImage fetch_or_compile(const KernelRequest& request);

// What an entry records of a compiled request (its kernel's resources from `module`).
EntryMeta entry_metadata(const KernelRequest& request, const std::string& key,
                         const nvrtc::CompiledModule& module);

// This process's disk traffic, for tests and benchmarks (compiles are counted by
// jit::codegen::launch_stats()).
struct DiskStats {
  std::atomic<std::int64_t> hits{0};
  std::atomic<std::int64_t> misses{0};
  std::atomic<std::int64_t> stores{0};
  std::atomic<std::int64_t> healed{0};  // corrupt entries replaced
};
DiskStats& disk_stats();

}  // namespace kiln::cache
