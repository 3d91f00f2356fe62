// The kernel cache on disk: one directory per entry under <dir>/kernels/<key>/ holding
// meta.json, kernel.cu and kernel.ptx (or kernel.cubin), and a `hits` file that grows by one
// byte per disk hit (its size is the hit count, its mtime the last use: a hit never rewrites
// metadata). Entries appear by an atomic rename of a finished temporary directory (names that
// start with '.' are temporary and skipped), a per-key flock in <dir>/locks/ lets one process
// compile while the others wait, and least-recently-used entries are evicted past a size cap.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_entry.h"

namespace kiln::cache {

// Where the cache lives and how big it may grow, from the environment: KILN_CACHE_DIR (default
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln), KILN_CACHE (0 disables the disk), KILN_CACHE_MAX_MB
// (default 1024). A malformed value is a kiln::Error naming the variable.
struct DiskSettings {
  std::filesystem::path dir;
  bool enabled = true;
  std::int64_t max_bytes = 1024LL << 20;
};
DiskSettings settings_from_env();

// An exclusive flock on one key's lock file, released on destruction. Holds nothing (and
// costs nothing) when the lock file cannot be opened: locking is an optimization against
// duplicate compiles, never a condition for correctness (writes are atomic renames).
class KeyLock {
 public:
  KeyLock() = default;
  explicit KeyLock(const std::filesystem::path& file);
  KeyLock(KeyLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  KeyLock& operator=(KeyLock&&) = delete;
  ~KeyLock();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// One entry as listed: its metadata with live hits and last use, and its size on disk.
struct EntryInfo {
  std::string key;
  EntryMeta meta;
  std::int64_t bytes = 0;
  std::string problem;  // why it is corrupt; empty when its metadata read (list does not checksum)
};

struct VerifyReport {
  int checked = 0;
  std::vector<std::pair<std::string, std::string>> bad;  // key, what is wrong
  std::vector<std::string> stale_temporaries;            // names of leftover temporary dirs
  int removed = 0;                                       // with fix
};

struct PruneReport {
  int removed = 0;
  std::int64_t bytes_before = 0;
  std::int64_t bytes_after = 0;
};

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path dir, std::int64_t max_bytes = 1024LL << 20);

  // Checks the directory, creating it (mode 0700) if needed: it must be a directory owned by
  // this user, not writable by group or others, and writable. Returns the problem, or nothing
  // when the cache is usable. Read-only commands (list, verify) may use a cache whose check
  // failed for being unwritable.
  std::optional<std::string> open();

  const std::filesystem::path& dir() const { return dir_; }
  std::int64_t max_bytes() const { return max_bytes_; }
  std::filesystem::path entry_dir(std::string_view key) const;

  enum class Status { hit, miss, corrupt };
  struct Loaded {
    Status status = Status::miss;
    EntryMeta meta;
    std::string binary;
    std::string problem;  // for corrupt
  };
  // Reads one entry's metadata and binary and checks the binary against its checksum; on a
  // hit, counts it in the entry's hits file. Never scans the directory.
  Loaded load(std::string_view key, bool count_hit = true) const;

  // Writes an entry atomically, replacing an existing (corrupt) one with the same key, then
  // evicts least-recently-used entries past max_bytes (never the new one). Raises kiln::Error
  // naming the path and errno text when the directory cannot be written.
  void store(EntryMeta meta, std::string_view source, std::string_view binary);

  KeyLock lock(std::string_view key) const;

  // Every entry, sorted by key. Reads each meta.json; corrupt ones are listed with a problem.
  std::vector<EntryInfo> list() const;
  // The key a unique prefix names; kiln::Error when none or several match.
  std::string resolve(std::string_view prefix) const;
  std::string read_source(std::string_view key) const;
  std::string read_binary(std::string_view key) const;

  // Checksums every entry (binary and source); with fix, removes bad entries and temporaries.
  VerifyReport verify(bool fix) const;
  // Evicts least-recently-used entries until the cache holds at most max_bytes (also removes
  // temporaries an interrupted writer left behind, older than an hour).
  PruneReport prune(std::int64_t max_bytes, std::string_view keep = {}) const;
  // Removes every entry; returns how many.
  int clear() const;
  std::int64_t total_bytes() const;
  bool remove(std::string_view key) const;

 private:
  std::filesystem::path dir_;
  std::int64_t max_bytes_;
};

// The process-wide disk cache from settings_from_env(), opened on first use; nullptr when
// KILN_CACHE=0 or when the directory is unusable (then one warning on stderr says why, and
// kernels are cached in memory only). disable_process_disk_cache() is what a failed write calls.
DiskCache* process_disk_cache();
void disable_process_disk_cache(const std::string& why);
// Re-reads the environment at the next process_disk_cache() (tests change it).
void reset_process_disk_cache();

}  // namespace kiln::cache
