// Text and JSON for the `kiln` tool (see cache_report.h).
#include "cache/cache_report.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/driver/driver_api.h"
#include "runtime/cuda/nvrtc/nvrtc.h"
#include "runtime/cuda/selection.h"
#include "runtime/error.h"

namespace kiln::cache {
namespace {

std::string count_or_na(long v) {
  return v < 0 ? "-" : std::to_string(v);
}

std::string ops_summary(const EntryMeta& m) {
  auto ops = m.ops();
  std::string s = fmt::format("{}", fmt::join(ops, ","));
  if (s.size() > 28) s = s.substr(0, 25) + "...";
  return s.empty() ? "-" : s;
}

std::string ago(std::int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::int64_t d = std::max<std::int64_t>(0, now - unix_seconds);
  if (d < 60) return fmt::format("{}s ago", d);
  if (d < 3600) return fmt::format("{}m ago", d / 60);
  if (d < 86400) return fmt::format("{}h ago", d / 3600);
  return fmt::format("{}d ago", d / 86400);
}

nlohmann::json entry_json(const EntryInfo& e) {
  nlohmann::json j = e.problem.empty() ? nlohmann::json::parse(to_json(e.meta, -1))
                                       : nlohmann::json{{"key", e.key}};
  j["bytes"] = e.bytes;
  j["problem"] = e.problem;
  return j;
}

}  // namespace

std::string human_bytes(std::int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

const std::vector<std::string>& list_sort_fields() {
  static const std::vector<std::string> fields = {"key",    "kernel",     "size", "registers",
                                                  "spills", "compile-ms", "hits", "last-used"};
  return fields;
}

std::string format_list(std::vector<EntryInfo> entries, std::string_view sort, bool json) {
  const auto& fields = list_sort_fields();
  KILN_CHECK(std::find(fields.begin(), fields.end(), sort) != fields.end(),
             "kiln cache list: unknown sort field '{}' (one of: {})", sort,
             fmt::join(fields, ", "));
  // Names ascend; quantities descend (the biggest, slowest, most used, most recent first).
  auto value = [&](const EntryInfo& e) -> double {
    if (sort == "size") return static_cast<double>(e.bytes);
    if (sort == "registers") return e.meta.registers;
    if (sort == "spills") return static_cast<double>(e.meta.spill_bytes);
    if (sort == "compile-ms") return e.meta.compile_ms;
    if (sort == "hits") return static_cast<double>(e.meta.hits);
    return static_cast<double>(e.meta.last_used);
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const EntryInfo& a, const EntryInfo& b) {
    if (sort == "key") return a.key < b.key;
    if (sort == "kernel")
      return a.meta.kernel != b.meta.kernel ? a.meta.kernel < b.meta.kernel : a.key < b.key;
    double va = value(a), vb = value(b);
    return va != vb ? va > vb : a.key < b.key;
  });
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) out.push_back(entry_json(e));
    return out.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> rows = {{"key", "kernel", "ops", "arch", "size", "regs",
                                                 "spills", "smem", "compile ms", "hits",
                                                 "last used"}};
  for (const auto& e : entries) {
    const EntryMeta& m = e.meta;
    if (!e.problem.empty()) {
      rows.push_back({e.key.substr(0, 12), "(corrupt: " + e.problem + ")", "", "",
                      human_bytes(e.bytes), "", "", "", "", "", ""});
      continue;
    }
    rows.push_back({e.key.substr(0, 12), m.kernel, ops_summary(m), m.arch, human_bytes(e.bytes),
                    count_or_na(m.registers), count_or_na(m.spill_bytes),
                    count_or_na(m.shared_bytes), fmt::format("{:.1f}", m.compile_ms),
                    std::to_string(m.hits), ago(m.last_used)});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      // Numbers right-aligned, text left-aligned.
      bool numeric = c >= 4 && c <= 9;
      line +=
          numeric ? fmt::format("{:>{}}", r[c], width[c]) : fmt::format("{:<{}}", r[c], width[c]);
      if (c + 1 < r.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += fmt::format("{} entr{}\n", entries.size(), entries.size() == 1 ? "y" : "ies");
  return out;
}

std::string format_show(const DiskCache& cache, std::string_view prefix, std::string_view what) {
  std::string key = cache.resolve(prefix);
  if (what == "source") return cache.read_source(key);
  if (what == "ptx") {
    std::string binary = cache.read_binary(key);
    if (binary.rfind("//", 0) != 0 && binary.find(".version") == std::string::npos)
      return fmt::format("entry {} holds a cubin ({}), not PTX\n", key, human_bytes(binary.size()));
    return binary;
  }
  EntryInfo info;
  for (auto& e : cache.list())
    if (e.key == key) info = std::move(e);
  KILN_CHECK(info.problem.empty(),
             "kernel cache entry {} is corrupt: {} (`kiln cache verify --fix` "
             "removes it)",
             key, info.problem);
  if (what == "meta") return to_json(info.meta) + "\n";
  const EntryMeta& m = info.meta;
  std::string out;
  out += fmt::format("key          {}\n", key);
  out += fmt::format("kernel       {}\n", m.kernel);
  if (!m.graph.empty()) out += fmt::format("graph        {}\n", m.graph);
  for (std::size_t i = 0; i < m.nodes.size(); ++i)
    out += fmt::format("{}{}\n", i == 0 ? "fuses        " : "             ", m.nodes[i]);
  out += fmt::format("arch         {} ({})\n", m.arch, m.cubin ? "cubin" : "PTX");
  out += fmt::format("options      {}\n", fmt::join(m.options, " "));
  out += fmt::format("nvrtc        {}\n", m.nvrtc_version);
  out += fmt::format("codegen      version {}\n", m.codegen_version);
  out += fmt::format("compile      {:.1f} ms\n", m.compile_ms);
  out += fmt::format("resources    registers {}, spills {} bytes, shared memory {} bytes\n",
                     count_or_na(m.registers), count_or_na(m.spill_bytes),
                     count_or_na(m.shared_bytes));
  out += fmt::format("size         {} (binary {}, source {})\n", human_bytes(info.bytes),
                     human_bytes(m.binary_bytes), human_bytes(m.source_bytes));
  out += fmt::format("created      {}\n", format_time(m.created));
  out += fmt::format("last used    {} ({} hits)\n", format_time(m.last_used), m.hits);
  out += fmt::format("checksum     {}\n", m.checksum);
  out += "\n" + cache.read_source(key);
  return out;
}

std::string format_stats(const DiskCache& cache) {
  auto entries = cache.list();
  std::int64_t bytes = 0, hits = 0;
  int corrupt = 0;
  double compile_ms = 0;
  std::map<std::string, int> by_arch;
  for (const auto& e : entries) {
    bytes += e.bytes;
    if (!e.problem.empty()) {
      ++corrupt;
      continue;
    }
    hits += e.meta.hits;
    compile_ms += e.meta.compile_ms;
    ++by_arch[e.meta.arch];
  }
  std::string out;
  out += fmt::format("directory     {}\n", cache.dir().string());
  out +=
      fmt::format("entries       {}{}\n", entries.size(),
                  corrupt ? fmt::format(" ({} unreadable: run `kiln cache verify`)", corrupt) : "");
  out += fmt::format("size          {} of {} ({:.1f}%)\n", human_bytes(bytes),
                     human_bytes(cache.max_bytes()),
                     cache.max_bytes() > 0 ? 100.0 * bytes / cache.max_bytes() : 0.0);
  out += fmt::format("disk hits     {}\n", hits);
  out += fmt::format("compile time  {:.1f} s saved per process that hits every entry\n",
                     compile_ms / 1000);
  for (const auto& [arch, n] : by_arch)
    out += fmt::format("arch          {}: {} entries\n", arch, n);
  return out;
}

std::string format_verify(const VerifyReport& r, bool fix) {
  std::string out;
  for (const auto& [key, problem] : r.bad)
    out += fmt::format("bad      {}  {}{}\n", key, problem, fix ? " (removed)" : "");
  for (const auto& t : r.stale_temporaries)
    out += fmt::format("stale    {}  a temporary an interrupted write left{}\n", t,
                       fix ? " (removed)" : "");
  out += fmt::format("{} entries checked, {} bad{}\n", r.checked, r.bad.size(),
                     r.bad.empty() || fix ? "" : " (`kiln cache verify --fix` removes them)");
  return out;
}

std::string doctor_report() {
  std::string out;
  out += fmt::format("toolkit       CUDA {}.{} headers (built against)\n", CUDA_VERSION / 1000,
                     CUDA_VERSION % 1000 / 10);
  try {
    const auto& v = nvrtc::version();
    const auto& archs = nvrtc::supported_archs();
    out += fmt::format("nvrtc         {}; archs sm_{}..sm_{}\n", v.to_string(),
                       archs.empty() ? 0 : archs.front(), archs.empty() ? 0 : archs.back());
  } catch (const Error& e) {
    out += fmt::format("nvrtc         unusable: {}\n", e.what());
  }
  try {
    const auto& api = cuda::driver::driver_api();
    out += fmt::format("driver        CUDA {}.{}\n", api.driver_version / 1000,
                       api.driver_version % 1000 / 10);
    auto be = cuda::make_driver_backend();
    int n = be->device_count();
    for (int i = 0; i < n; ++i) {
      const auto& p = be->properties(i);
      out += fmt::format("gpu {}         {} (compute {}.{}, {} SMs, {})\n", i, p.name,
                         p.compute_major, p.compute_minor, p.sm_count, human_bytes(p.total_memory));
    }
  } catch (const Error& e) {
    out += fmt::format("driver        none: {}\n", e.what());
  }
  const char* choice = std::getenv("KILN_CUDA");
  try {
    auto selection = cuda::select_backend(cuda::parse_backend_choice(choice ? choice : ""));
    out += fmt::format("backend       {} (KILN_CUDA={}){}\n", selection.backend->kind(),
                       choice && *choice ? choice : "auto",
                       selection.notice.empty() ? "" : "; " + selection.notice);
  } catch (const Error& e) {
    out += fmt::format("backend       none: {}\n", e.what());
  }
  try {
    DiskSettings s = settings_from_env();
    out += fmt::format("cache         {}{}\n", s.dir.string(),
                       s.enabled ? "" : " (disabled: KILN_CACHE=0)");
    DiskCache cache(s.dir, s.max_bytes);
    if (auto problem = cache.open()) {
      out += fmt::format(
          "cache health  unusable: the directory {}; kernels are cached in memory only\n",
          *problem);
    } else {
      auto entries = cache.list();
      std::int64_t bytes = 0;
      for (const auto& e : entries) bytes += e.bytes;
      VerifyReport r = cache.verify(false);
      out += fmt::format("cache size    {} in {} entries (cap {})\n", human_bytes(bytes),
                         entries.size(), human_bytes(s.max_bytes));
      out += fmt::format(
          "cache health  {}\n",
          r.bad.empty() ? std::string("ok (every checksum verified)")
                        : fmt::format("{} bad entries (`kiln cache verify --fix` removes them)",
                                      r.bad.size()));
    }
  } catch (const Error& e) {
    out += fmt::format("cache         {}\n", e.what());
  }
  return out;
}

}  // namespace kiln::cache
