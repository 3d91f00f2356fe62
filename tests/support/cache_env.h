// What the disk cache's test suites share: a process-wide cache pointed at a test's own
// directory, and small file helpers.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cache/disk_cache.h"

namespace kiln::test {

// Points the process-wide cache at `dir` (or the environment as given) for one test.
struct CacheEnv {
  explicit CacheEnv(const std::filesystem::path& dir, const char* enabled = nullptr,
                    const char* max_mb = nullptr) {
    setenv("KILN_CACHE_DIR", dir.c_str(), 1);
    if (enabled)
      setenv("KILN_CACHE", enabled, 1);
    else
      unsetenv("KILN_CACHE");
    if (max_mb)
      setenv("KILN_CACHE_MAX_MB", max_mb, 1);
    else
      unsetenv("KILN_CACHE_MAX_MB");
    cache::reset_process_disk_cache();
  }
  ~CacheEnv() {
    unsetenv("KILN_CACHE");
    unsetenv("KILN_CACHE_MAX_MB");
    cache::reset_process_disk_cache();
  }
};

inline void write_file(const std::filesystem::path& p, const std::string& data) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
}

// The file names of the entries under the cache directory `dir`.
inline std::set<std::string> entry_names(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& d : std::filesystem::directory_iterator(dir / "kernels"))
    out.insert(d.path().filename());
  return out;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace kiln::test
