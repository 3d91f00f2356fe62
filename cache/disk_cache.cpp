// The disk store of compiled kernels (see disk_cache.h): paths, directory checks, atomic
// writes, per-key locks, checksummed reads, LRU eviction, and what `kiln cache` inspects.
#include "cache/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "cache/kernel_key.h"
#include "runtime/error.h"

namespace kiln::cache {
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kStaleTemporarySeconds = 3600;

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct FileRead {
  bool exists = false;
  std::string data;
};

// A whole file through one open and a few reads; missing files are not an error (racing
// eviction, or an entry being healed), other failures are.
FileRead read_file(const fs::path& path) {
  FileRead out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    KILN_CHECK(errno == ENOENT || errno == ENOTDIR, "kernel cache: cannot open '{}': {}",
               path.string(), std::strerror(errno));
    return out;
  }
  out.exists = true;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0)
    out.data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(
          fmt::format("kernel cache: cannot read '{}': {}", path.string(), std::strerror(err)));
    }
    if (n == 0) break;
    out.data.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_file(const fs::path& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  KILN_CHECK(fd >= 0, "kernel cache: cannot create '{}': {}", path.string(), std::strerror(errno));
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(
          fmt::format("kernel cache: cannot write '{}': {}", path.string(), std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  // No fsync: an entry a crash leaves short fails its checksum and is recompiled, which costs
  // less than an fsync on every store.
  KILN_CHECK(::close(fd) == 0, "kernel cache: cannot write '{}': {}", path.string(),
             std::strerror(errno));
}

bool is_temporary(const std::string& name) {
  return !name.empty() && name[0] == '.';
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return fmt::format("{}.{}", ::getpid(), counter++);
}

// Removes a directory tree by first renaming it to a temporary name, so that readers see the
// entry either whole or absent.
bool remove_entry_dir(const fs::path& entry, const std::string& key) {
  fs::path trash = entry.parent_path() / fmt::format(".trash.{}.{}", key, unique_suffix());
  if (::rename(entry.c_str(), trash.c_str()) != 0) return false;
  std::error_code ec;
  fs::remove_all(trash, ec);
  return true;
}

struct Usage {
  std::string key;
  std::int64_t bytes = 0;
  std::int64_t last_used = 0;  // nanoseconds since the epoch
};

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

// An entry's size and last use from stat alone (no metadata parse): the hits file's mtime, else
// meta.json's.
Usage usage_of(const fs::path& entry, const std::string& key) {
  Usage u{key};
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(entry, ec)) {
    struct stat st {};
    if (::stat(f.path().c_str(), &st) != 0) continue;
    u.bytes += st.st_size;
    std::string name = f.path().filename().string();
    if (name == "hits" || (name == "meta.json" && u.last_used == 0))
      u.last_used = std::max(u.last_used, mtime_ns(st));
  }
  return u;
}

}  // namespace

DiskSettings settings_from_env() {
  DiskSettings s;
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) {
    s.dir = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    s.dir = fs::path(xdg) / "kiln";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    s.dir = fs::path(home) / ".cache" / "kiln";
  }
  if (!s.dir.empty()) s.dir = fs::absolute(s.dir);
  if (const char* on = std::getenv("KILN_CACHE"); on && *on) {
    std::string v = on;
    KILN_CHECK(v == "0" || v == "1", "KILN_CACHE is '{}': expected 0 (no disk cache) or 1", v);
    s.enabled = v == "1";
  }
  if (const char* mb = std::getenv("KILN_CACHE_MAX_MB"); mb && *mb) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(mb, &end, 10);
    KILN_CHECK(*end == '\0' && errno == 0 && v >= 0 && v < (1LL << 40),
               "KILN_CACHE_MAX_MB is '{}': expected a whole number of megabytes", mb);
    s.max_bytes = v << 20;
  }
  return s;
}

KeyLock::KeyLock(const fs::path& file) {
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

DiskCache::DiskCache(fs::path dir, std::int64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

fs::path DiskCache::entry_dir(std::string_view key) const {
  return dir_ / "kernels" / std::string(key);
}

std::optional<std::string> DiskCache::open() {
  if (dir_.empty()) return "no directory: set KILN_CACHE_DIR, XDG_CACHE_HOME or HOME";
  std::error_code ec;
  bool existed = fs::exists(dir_, ec);
  if (!existed) {
    fs::create_directories(dir_, ec);
    if (ec) return fmt::format("cannot be created: {}", ec.message());
    ::chmod(dir_.c_str(), 0700);
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0)
    return fmt::format("cannot be read: {}", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  // Another user's directory, or one others may write, could hand this process binaries it
  // would load and run.
  if (st.st_uid != ::geteuid())
    return fmt::format("is owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format(
        "is writable by its group or others (mode {:04o}); it must be 0700 or "
        "0755-like",
        st.st_mode & 07777);
  for (const char* sub : {"kernels", "locks"}) {
    fs::path p = dir_ / sub;
    if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("is not writable: cannot create {}: {}", p.string(), std::strerror(errno));
  }
  // Permission bits do not stop root, and a read-only mount stops everyone: only a write tells.
  fs::path probe = dir_ / "kernels" / fmt::format(".probe.{}", unique_suffix());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("is not writable: {}", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return std::nullopt;
}

DiskCache::Loaded DiskCache::load(std::string_view key, bool count_hit) const {
  Loaded out;
  fs::path entry = entry_dir(key);
  auto corrupt = [&](std::string why) {
    out.status = Status::corrupt;
    out.problem = std::move(why);
    return out;
  };
  auto gone = [&] {
    std::error_code ec;
    return !fs::exists(entry, ec);
  };
  FileRead meta = read_file(entry / "meta.json");
  if (!meta.exists) {
    if (gone()) return out;  // a miss
    return corrupt("meta.json is missing");
  }
  if (meta.data.empty()) return corrupt("meta.json is empty");
  try {
    out.meta = meta_from_json(meta.data);
  } catch (const Error& e) {
    return corrupt(fmt::format("meta.json: {}", e.what()));
  }
  if (out.meta.key != key) return corrupt(fmt::format("meta.json names key {}", out.meta.key));
  FileRead binary = read_file(entry / out.meta.binary_file());
  if (!binary.exists) {
    if (gone()) return Loaded{};  // evicted while we read it: a miss
    return corrupt(out.meta.binary_file() + " is missing");
  }
  if (static_cast<std::int64_t>(binary.data.size()) != out.meta.binary_bytes)
    return corrupt(fmt::format("{} has {} bytes, its metadata says {}", out.meta.binary_file(),
                               binary.data.size(), out.meta.binary_bytes));
  if (checksum(binary.data) != out.meta.checksum)
    return corrupt(out.meta.binary_file() + " fails its checksum");
  out.binary = std::move(binary.data);
  out.status = Status::hit;
  if (count_hit) {
    // One appended byte: the hit count and the last use, without rewriting metadata.
    int fd = ::open((entry / "hits").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, "+", 1);
      ::close(fd);
    }
  }
  return out;
}

void DiskCache::store(EntryMeta meta, std::string_view source, std::string_view binary) {
  KILN_CHECK(is_key(meta.key), "kernel cache: '{}' is not a kernel key", meta.key);
  meta.binary_bytes = static_cast<std::int64_t>(binary.size());
  meta.source_bytes = static_cast<std::int64_t>(source.size());
  meta.checksum = checksum(binary);
  meta.source_checksum = checksum(source);
  if (meta.created == 0) meta.created = now_seconds();
  meta.last_used = meta.created;
  meta.hits = 0;
  fs::path kernels = dir_ / "kernels";
  fs::path tmp = kernels / fmt::format(".tmp.{}.{}", meta.key, unique_suffix());
  KILN_CHECK(::mkdir(tmp.c_str(), 0700) == 0, "kernel cache: cannot create '{}': {}", tmp.string(),
             std::strerror(errno));
  fs::path entry = entry_dir(meta.key);
  try {
    write_file(tmp / "kernel.cu", source);
    write_file(tmp / meta.binary_file(), binary);
    write_file(tmp / "meta.json", to_json(meta) + "\n");
    if (::rename(tmp.c_str(), entry.c_str()) != 0) {
      KILN_CHECK(errno == ENOTEMPTY || errno == EEXIST,
                 "kernel cache: cannot rename '{}' to '{}': {}", tmp.string(), entry.string(),
                 std::strerror(errno));
      // An entry is there (a corrupt one being healed): move it aside, then put ours in place.
      remove_entry_dir(entry, meta.key);
      if (::rename(tmp.c_str(), entry.c_str()) != 0) {
        // Another process got there in between with its own complete entry.
        std::error_code ec;
        fs::remove_all(tmp, ec);
      }
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  if (max_bytes_ >= 0) prune(max_bytes_, meta.key);
}

KeyLock DiskCache::lock(std::string_view key) const {
  return KeyLock(dir_ / "locks" / (std::string(key) + ".lock"));
}

std::vector<EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (is_temporary(name) || !d.is_directory(ec)) continue;
    EntryInfo info;
    info.key = name;
    Usage u = usage_of(d.path(), name);
    info.bytes = u.bytes;
    try {
      FileRead meta = read_file(d.path() / "meta.json");
      if (!meta.exists) throw Error("meta.json is missing");
      info.meta = meta_from_json(meta.data);
    } catch (const Error& e) {
      info.problem = e.what();
      info.meta.key = name;
    }
    struct stat st {};
    if (::stat((d.path() / "hits").c_str(), &st) == 0) {
      info.meta.hits = st.st_size;
      info.meta.last_used = st.st_mtim.tv_sec;
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

std::string DiskCache::resolve(std::string_view prefix) const {
  KILN_CHECK(!prefix.empty(), "kernel cache: an empty key prefix names every entry");
  std::vector<std::string> matches;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (!is_temporary(name) && name.compare(0, prefix.size(), prefix) == 0) matches.push_back(name);
  }
  KILN_CHECK(!matches.empty(), "kernel cache: no entry's key starts with '{}' in {}", prefix,
             dir_.string());
  std::sort(matches.begin(), matches.end());
  KILN_CHECK(
      matches.size() == 1, "kernel cache: key prefix '{}' is ambiguous: {} entries match ({}{})",
      prefix, matches.size(),
      fmt::join(matches.begin(), matches.begin() + std::min<std::size_t>(matches.size(), 4), ", "),
      matches.size() > 4 ? ", ..." : "");
  return matches[0];
}

std::string DiskCache::read_source(std::string_view key) const {
  FileRead f = read_file(entry_dir(key) / "kernel.cu");
  KILN_CHECK(f.exists, "kernel cache: entry {} has no kernel.cu", key);
  return f.data;
}

std::string DiskCache::read_binary(std::string_view key) const {
  for (const char* name : {"kernel.ptx", "kernel.cubin"}) {
    FileRead f = read_file(entry_dir(key) / name);
    if (f.exists) return f.data;
  }
  throw Error(fmt::format("kernel cache: entry {} has no kernel.ptx or kernel.cubin", key));
}

VerifyReport DiskCache::verify(bool fix) const {
  VerifyReport report;
  std::error_code ec;
  std::int64_t now = now_seconds();
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (is_temporary(name)) {
      struct stat st {};
      if (::stat(d.path().c_str(), &st) == 0 && now - st.st_mtim.tv_sec > kStaleTemporarySeconds) {
        report.stale_temporaries.push_back(name);
        if (fix) {
          fs::remove_all(d.path(), ec);
          ++report.removed;
        }
      }
      continue;
    }
    ++report.checked;
    std::string problem;
    if (!is_key(name)) {
      problem = "not a kernel key";
    } else {
      Loaded l = load(name, /*count_hit=*/false);
      if (l.status == Status::corrupt) {
        problem = l.problem;
      } else if (l.status == Status::hit) {
        FileRead src = read_file(d.path() / "kernel.cu");
        if (!src.exists)
          problem = "kernel.cu is missing";
        else if (checksum(src.data) != l.meta.source_checksum)
          problem = "kernel.cu fails its checksum";
      }
    }
    if (problem.empty()) continue;
    report.bad.emplace_back(name, problem);
    if (fix && remove_entry_dir(d.path(), name)) ++report.removed;
  }
  std::sort(report.bad.begin(), report.bad.end());
  return report;
}

PruneReport DiskCache::prune(std::int64_t max_bytes, std::string_view keep) const {
  PruneReport report;
  std::vector<Usage> entries;
  std::error_code ec;
  std::int64_t now = now_seconds();
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (is_temporary(name)) {
      struct stat st {};
      if (::stat(d.path().c_str(), &st) == 0 && now - st.st_mtim.tv_sec > kStaleTemporarySeconds)
        fs::remove_all(d.path(), ec);
      continue;
    }
    entries.push_back(usage_of(d.path(), name));
    report.bytes_before += entries.back().bytes;
  }
  report.bytes_after = report.bytes_before;
  if (report.bytes_before <= max_bytes) return report;
  // Oldest last use first; ties by key, so the order is the same in every process.
  std::sort(entries.begin(), entries.end(), [](const Usage& a, const Usage& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  for (const auto& e : entries) {
    if (report.bytes_after <= max_bytes) break;
    if (e.key == keep) continue;
    if (remove_entry_dir(entry_dir(e.key), e.key)) {
      ++report.removed;
      report.bytes_after -= e.bytes;
    }
  }
  return report;
}

int DiskCache::clear() const {
  int removed = 0;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (is_temporary(name)) {
      fs::remove_all(d.path(), ec);
      continue;
    }
    removed += remove_entry_dir(d.path(), name);
  }
  // Lock files are empty; removing one another process holds costs at most a duplicate compile.
  for (const auto& f : fs::directory_iterator(dir_ / "locks", ec)) fs::remove(f.path(), ec);
  return removed;
}

std::int64_t DiskCache::total_bytes() const {
  std::int64_t total = 0;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir_ / "kernels", ec)) {
    std::string name = d.path().filename().string();
    if (!is_temporary(name)) total += usage_of(d.path(), name).bytes;
  }
  return total;
}

bool DiskCache::remove(std::string_view key) const {
  return remove_entry_dir(entry_dir(key), std::string(key));
}

namespace {

struct ProcessCache {
  std::mutex mutex;
  std::atomic<bool> initialized{false};
  std::atomic<DiskCache*> current{nullptr};
  // Never destroyed while the process runs: another thread may still hold a pointer.
  std::vector<std::unique_ptr<DiskCache>> opened;
};

ProcessCache& process_cache() {
  static ProcessCache* p = new ProcessCache;
  return *p;
}

void warn(const std::string& text) {
  std::fprintf(stderr, "kiln: warning: %s\n", text.c_str());
}

}  // namespace

DiskCache* process_disk_cache() {
  ProcessCache& p = process_cache();
  if (p.initialized) return p.current.load();
  std::lock_guard lock(p.mutex);
  if (p.initialized) return p.current.load();
  DiskSettings s = settings_from_env();
  if (s.enabled) {
    auto cache = std::make_unique<DiskCache>(s.dir, s.max_bytes);
    if (auto problem = cache->open()) {
      warn(fmt::format("kernel cache directory '{}' {}; kernels are cached in memory only",
                       s.dir.string(), *problem));
    } else {
      p.current = cache.get();
      p.opened.push_back(std::move(cache));
    }
  }
  p.initialized = true;
  return p.current.load();
}

void disable_process_disk_cache(const std::string& why) {
  ProcessCache& p = process_cache();
  std::lock_guard lock(p.mutex);
  if (!p.current.load()) return;
  p.current = nullptr;
  warn(fmt::format("{}; kernels are cached in memory only from now on", why));
}

void reset_process_disk_cache() {
  ProcessCache& p = process_cache();
  std::lock_guard lock(p.mutex);
  p.current = nullptr;
  p.initialized = false;
}

}  // namespace kiln::cache
