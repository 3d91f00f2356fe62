// What `kiln cache ...` and `kiln doctor` print (tools/kiln.cpp parses the command line and
// calls these): tables and JSON over a DiskCache, and the environment report.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cache/disk_cache.h"

namespace kiln::cache {

// The orders `kiln cache list --sort` accepts.
const std::vector<std::string>& list_sort_fields();

// A table (key, kernel, ops, arch, size, registers, spills, smem, compile ms, hits, last used)
// or, with json, an array of metadata objects with "bytes" and "problem". kiln::Error names an
// unknown sort field.
std::string format_list(std::vector<EntryInfo> entries, std::string_view sort, bool json);

// One entry: what = "meta" (metadata JSON with live hits and last use), "source", "ptx" (the
// PTX, or a note for a cubin), or "summary" (the default: metadata as text, then the source).
std::string format_show(const DiskCache& cache, std::string_view key, std::string_view what);

// Directory, entry count, total size against the cap, hits, by arch, largest kernels.
std::string format_stats(const DiskCache& cache);

std::string format_verify(const VerifyReport& report, bool fix);

// Toolkit and NVRTC versions, driver and GPUs (or why none), the backend KILN_CUDA chooses,
// the cache directory, its size and health.
std::string doctor_report();

// 1536 -> "1.5 KiB".
std::string human_bytes(std::int64_t bytes);

}  // namespace kiln::cache
