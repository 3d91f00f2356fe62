// The KILN_REPORT writer (see report_writer.h).
#include "jit/report/report_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "jit/report/function_page.h"
#include "jit/report/html.h"
#include "jit/report/report_index.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/log.h"

namespace kiln::jit::report {

namespace {

struct Recorded {
  const void* function;
  std::string dir;
  FunctionFacts facts;
};

// Never destroyed: the exit handler reads it after other statics may be gone.
struct Registry {
  std::mutex mutex;
  std::vector<Recorded> functions;
  std::map<const void*, std::size_t> current;  // function -> its newest record
  std::set<std::string> pages;                 // file names taken, per dir + name
  std::set<std::string> warned;
  bool exit_hook = false;
  double recording_ms = 0;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::string page_name(Registry& r, const std::string& dir, const std::string& name) {
  std::string base;
  for (char c : name) base += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '-';
  if (base.empty()) base = "function";
  std::string file = base + ".html";
  for (int n = 2; !r.pages.insert(dir + "/" + file).second; ++n)
    file = fmt::format("{}-{}.html", base, n);
  return file;
}

Profiles gather_profiles() {
  Profiles out;
  std::map<std::string, cuda::vgpu::KernelProfile> sums;
  std::map<std::string, double> modeled;  // summed per record: each launch pays its latency
  for (const auto& p : cuda::vgpu::profiles()) {
    auto [it, fresh] = sums.emplace(p.kernel, p);
    if (!fresh) it->second.add(p);
    modeled[p.kernel] += p.modeled_h100_us();
  }
  for (const auto& [name, p] : sums) {
    double n = static_cast<double>(std::max<std::uint64_t>(p.launches, 1));
    out[name] = {p.launches, static_cast<double>(p.dram_bytes()) / n, p.issue_slots() / n,
                 modeled[name] / n, cuda::vgpu::bound_name(p.bound())};
  }
  return out;
}

// The process's kernels by modeled time, for the index.
std::string profile_notes(const Profiles& profiles) {
  if (profiles.empty()) return {};
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, p] : profiles) order.push_back({p.modeled_us * p.launches, name});
  std::sort(order.rbegin(), order.rend());
  std::string out =
      "<section id=\"profile\"><h2>Kernels of this process by modeled H100 time "
      "(KILN_PROFILE=1)</h2><table><tr><th>kernel</th><th class=\"num\">launches</th><th "
      "class=\"num\">modeled total</th><th class=\"num\">DRAM bytes per launch</th><th>bound</th>"
      "</tr>\n";
  for (std::size_t i = 0; i < order.size() && i < 25; ++i) {
    const ProfileFacts& p = profiles.at(order[i].second);
    out += fmt::format(
        "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{:.1f} us</td>"
        "<td class=\"num\">{:.0f}</td><td>{}</td></tr>\n",
        escape(order[i].second), p.launches, order[i].first, p.dram_bytes, escape(p.bound));
  }
  return out + "</table></section>\n";
}

void warn_once(Registry& r, const std::string& what) {
  if (r.warned.insert(what).second) log_line(fmt::format("kiln: KILN_REPORT: {}", what));
}

void write_page(const Recorded& rec, const Profiles& profiles) {
  write_atomically(std::filesystem::path(rec.dir) / rec.facts.page,
                   function_page(rec.facts, profiles));
}

void at_exit() {
  finish_report();
}

}  // namespace

std::string report_dir() {
  const char* dir = std::getenv("KILN_REPORT");
  return dir && *dir ? std::string(dir) : std::string();
}

void record_entry(const void* function, const std::string& name, const EntryParts& parts) {
  std::string dir = report_dir();
  if (dir.empty()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto started = std::chrono::steady_clock::now();
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    KILN_CHECK(std::filesystem::is_directory(dir), "cannot create the directory {}{}", dir,
               ec ? ": " + ec.message() : "");
    auto it = r.current.find(function);
    // A new function, or a new one at the address of one that is gone (its first entry).
    if (it == r.current.end() || parts.index == 0 || r.functions[it->second].dir != dir) {
      r.functions.push_back({function, dir, {name, page_name(r, dir, name), {}}});
      r.current[function] = r.functions.size() - 1;
      it = r.current.find(function);
    }
    Recorded& rec = r.functions[it->second];
    rec.facts.entries.push_back(collect_entry(parts));
    write_page(rec, {});
    if (!r.exit_hook) {
      // The profiler's records are made before the hook, so they outlive it.
      cuda::vgpu::profiles();
      std::atexit(at_exit);
      r.exit_hook = true;
    }
  } catch (const std::exception& err) {
    warn_once(r, fmt::format("no report for '{}': {}", name, err.what()));
  }
  r.recording_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

double recording_ms() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.recording_ms;
}

void finish_report() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  try {
    Profiles profiles = gather_profiles();
    // A directory removed since (a test's) takes its pages with it.
    std::erase_if(r.functions,
                  [](const Recorded& rec) { return !std::filesystem::is_directory(rec.dir); });
    r.current.clear();
    for (std::size_t i = 0; i < r.functions.size(); ++i) r.current[r.functions[i].function] = i;
    std::set<std::string> dirs;
    for (const auto& rec : r.functions) {
      if (!profiles.empty()) write_page(rec, profiles);
      dirs.insert(rec.dir);
    }
    for (const auto& dir : dirs) {
      rebuild_index(dir, profile_notes(profiles));
      log_line(fmt::format("kiln: compile report: {}/index.html", dir));
    }
  } catch (const std::exception& err) {
    warn_once(r, fmt::format("the report could not be finished: {}", err.what()));
  }
}

}  // namespace kiln::jit::report
