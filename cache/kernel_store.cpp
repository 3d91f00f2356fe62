// Disk lookups, locking, compiling and storing of kernels (see kernel_store.h).
#include "cache/kernel_store.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "cache/kernel_key.h"
#include "runtime/log.h"

namespace kiln::cache {
namespace {

bool logging() {
  return log_enabled(LogTopic::cache);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Looks `key` up; a corrupt entry is reported once and removed, so the caller recompiles it.
std::optional<KernelImage> try_disk(DiskCache& disk, const KernelRequest& r, const std::string& key,
                                    bool count_miss) {
  auto start = std::chrono::steady_clock::now();
  DiskCache::Loaded loaded;
  try {
    loaded = disk.load(key);
  } catch (const Error& e) {
    disable_process_disk_cache(e.what());
    return std::nullopt;
  }
  if (loaded.status == DiskCache::Status::hit) {
    ++disk_stats().hits;
    if (logging())
      log_line(
          fmt::format("kiln: cache hit {} {} (disk, {:.2f} ms)", key, r.name, ms_since(start)));
    return KernelImage{key, std::move(loaded.binary), std::nullopt};
  }
  if (loaded.status == DiskCache::Status::corrupt) {
    std::fprintf(stderr,
                 "kiln: warning: kernel cache entry %s (%s) is corrupt: %s; recompiling it\n",
                 key.c_str(), disk.entry_dir(key).c_str(), loaded.problem.c_str());
    disk.remove(key);
    ++disk_stats().healed;
  } else if (count_miss) {
    ++disk_stats().misses;
  }
  return std::nullopt;
}

}  // namespace

EntryMeta entry_metadata(const KernelRequest& r, const std::string& key,
                         const nvrtc::CompiledModule& module) {
  EntryMeta m;
  m.key = key;
  m.kernel = std::string(r.name);
  describe_from_source(r.source, m);
  m.arch = module.target.arch();
  m.cubin = module.target.cubin;
  m.options = module.options;
  m.nvrtc_version = nvrtc::version().to_string();
  m.nvrtc_id = nvrtc::version_id();
  m.codegen_version = r.codegen_version;
  m.compile_ms = module.compile_ms;
  if (const nvrtc::KernelResources* k = module.kernel(r.name)) {
    m.registers = k->registers;
    m.spill_bytes = k->spill_store_bytes;
    m.shared_bytes = k->shared_bytes;
  }
  return m;
}

DiskStats& disk_stats() {
  static DiskStats stats;
  return stats;
}

std::string key_of(const KernelRequest& r) {
  auto options = nvrtc::program_options(r.target, r.options);
  std::string arch = r.target.arch();
  return kernel_key(KeyInputs{r.source, options, arch, nvrtc::version_id(), r.codegen_version});
}

std::optional<KernelImage> fetch_from_disk(const KernelRequest& r) {
  DiskCache* disk = process_disk_cache();
  if (!disk) return std::nullopt;
  return try_disk(*disk, r, key_of(r), /*count_miss=*/false);
}

KernelImage fetch_or_compile(const KernelRequest& r) {
  std::string key = key_of(r);
  DiskCache* disk = process_disk_cache();
  std::optional<KeyLock> lock;
  if (disk) {
    if (auto hit = try_disk(*disk, r, key, /*count_miss=*/false)) return std::move(*hit);
    // Wait for whoever compiles this key now, then look again: it has likely stored it.
    lock.emplace(disk->lock(key));
    if (auto hit = try_disk(*disk, r, key, /*count_miss=*/true)) return std::move(*hit);
  }
  KernelImage out{
      key, {}, nvrtc::compile_program(r.source, std::string(r.name) + ".cu", r.target, r.options)};
  out.image = std::string(out.compiled->image());
  bool stored = false;
  if (disk) {
    try {
      disk->store(entry_metadata(r, key, *out.compiled), r.source, out.image);
      ++disk_stats().stores;
      stored = true;
    } catch (const Error& e) {
      disable_process_disk_cache(e.what());
    }
  }
  if (logging())
    log_line(fmt::format("kiln: cache miss {} {} (compiled in {:.1f} ms{})", key, r.name,
                         out.compiled->compile_ms, stored ? ", stored" : ", memory only"));
  return out;
}

}  // namespace kiln::cache
