// The `kiln` command-line tool: inspect and maintain the kernel cache (list, show, stats,
// verify, prune, clear), check the environment (doctor), rebuild a KILN_REPORT index (report)
// and start the ranks of a data-parallel program (launch: tools/launch.h).
// Argument parsing only, on CLI11; cache/cache_report.h and cache/disk_cache.h do the work.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "cache/cache_report.h"
#include "cache/disk_cache.h"
#include "jit/report/report_index.h"
#include "runtime/cuda/backends.h"
#include "runtime/cuda/driver/driver_api.h"
#include "runtime/error.h"
#include "tools/launch.h"

using namespace kiln;

namespace {

// The cache from the environment for a command that reads it: opened (and created) when
// possible, else read as it is, with the problem on stderr.
cache::DiskCache open_cache(bool need_write) {
  cache::DiskSettings s = cache::settings_from_env();
  cache::DiskCache c(s.dir, s.max_bytes);
  if (auto problem = c.open()) {
    KILN_CHECK(!need_write, "the kernel cache directory '{}' {}", s.dir.string(), *problem);
    std::fprintf(stderr, "kiln: warning: the kernel cache directory '%s' %s\n", s.dir.c_str(),
                 problem->c_str());
  }
  return c;
}

// One line: the GPU the driver backend opens, or why it opens none (scripts/gpu-check asks).
bool print_gpu() {
  try {
    auto driver = cuda::make_driver_backend();
    const auto& p = driver->properties(0);
    std::printf("%s (sm_%d%d, %d SMs), CUDA driver %d.%d\n", p.name.c_str(), p.compute_major,
                p.compute_minor, p.sm_count, cuda::driver::driver_api().driver_version / 1000,
                cuda::driver::driver_api().driver_version % 1000 / 10);
    return true;
  } catch (const std::exception& e) {
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');
    std::printf("no GPU: %s\n", why.c_str());
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kiln: inspect the generated-kernel cache and check the CUDA environment.\n"
      "The cache directory is KILN_CACHE_DIR (default $XDG_CACHE_HOME/kiln or "
      "~/.cache/kiln)."};
  app.name("kiln");
  app.require_subcommand(1);

  CLI::App* cache_cmd = app.add_subcommand("cache", "inspect and maintain the kernel cache");
  cache_cmd->require_subcommand(1);

  std::string sort = "key";
  bool json = false;
  CLI::App* list = cache_cmd->add_subcommand("list", "a table of every cached kernel");
  list->add_option("--sort", sort,
                   "order: key, kernel, size, registers, spills, compile-ms, hits, last-used")
      ->check(CLI::IsMember(cache::list_sort_fields()));
  list->add_flag("--json", json, "print JSON instead of a table");

  std::string key;
  bool show_source = false, show_ptx = false, show_meta = false;
  CLI::App* show = cache_cmd->add_subcommand("show", "one entry: its metadata and source");
  show->add_option("KEY", key, "the entry's key, or a prefix that names one entry")->required();
  auto* src_flag = show->add_flag("--source", show_source, "print only the CUDA C++ source");
  auto* ptx_flag = show->add_flag("--ptx", show_ptx, "print only the PTX");
  auto* meta_flag = show->add_flag("--meta", show_meta, "print only the metadata (JSON)");
  src_flag->excludes(ptx_flag)->excludes(meta_flag);
  ptx_flag->excludes(meta_flag);

  CLI::App* stats = cache_cmd->add_subcommand("stats", "entries, size, hits, archs");

  bool fix = false;
  CLI::App* verify = cache_cmd->add_subcommand("verify", "check every entry's checksums");
  verify->add_flag("--fix", fix, "remove bad entries and stale temporaries");

  long long max_mb = -1;
  CLI::App* prune =
      cache_cmd->add_subcommand("prune", "evict least-recently-used entries until the cache fits");
  prune->add_option("--max-mb", max_mb, "the size to fit in, in MiB")
      ->required()
      ->check(CLI::NonNegativeNumber);

  CLI::App* clear = cache_cmd->add_subcommand("clear", "remove every entry");

  CLI::App* doctor = app.add_subcommand(
      "doctor", "toolkit, NVRTC, driver and GPUs, backend, cache directory and health");
  bool gpu_only = false;
  doctor->add_flag("--gpu", gpu_only,
                   "only whether the driver opens a GPU: its name, or why not (exit 1), in a line");

  CLI::App* report_cmd = app.add_subcommand(
      "report", "rebuild the index.html of a KILN_REPORT directory from the pages in it");
  std::string report_dir;
  report_cmd->add_option("DIR", report_dir, "the report directory")->required();

  CLI::App* launch_cmd = app.add_subcommand(
      "launch", "start N ranks of a program with torchrun's environment: launch -n N -- PROGRAM");
  tools::LaunchOptions launch_options;
  launch_cmd->add_option("-n,--nproc", launch_options.processes, "processes (ranks)")->required();
  launch_cmd->add_option("--master-port", launch_options.master_port,
                         "rank 0's store port (MASTER_PORT; 0: a free one)");
  launch_cmd->add_option("--master-addr", launch_options.master_addr, "MASTER_ADDR");
  launch_cmd->add_option("command", launch_options.command, "the program and its arguments")
      ->required();

  // CLI11 reports a misspelt subcommand as a missing one; name it instead.
  auto check_command = [&](int i, const std::vector<std::string>& known, const char* where) {
    if (argc <= i || argv[i][0] == '-') return true;
    if (std::find(known.begin(), known.end(), argv[i]) != known.end()) return true;
    std::fprintf(stderr, "kiln: unknown %s '%s' (one of: %s); see --help\n", where, argv[i],
                 fmt::format("{}", fmt::join(known, ", ")).c_str());
    return false;
  };
  if (!check_command(1, {"cache", "doctor", "report", "launch"}, "command")) return 2;
  if (argc > 1 && std::string(argv[1]) == "cache" &&
      !check_command(2, {"list", "show", "stats", "verify", "prune", "clear"}, "cache command"))
    return 2;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (launch_cmd->parsed()) {
      return tools::launch(launch_options);
    } else if (doctor->parsed() && gpu_only) {
      return print_gpu() ? 0 : 1;
    } else if (report_cmd->parsed()) {
      int n = jit::report::rebuild_index(report_dir);
      std::printf("%s/index.html: %d compiled functions\n", report_dir.c_str(), n);
    } else if (doctor->parsed()) {
      std::fputs(cache::doctor_report().c_str(), stdout);
    } else if (list->parsed()) {
      std::fputs(cache::format_list(open_cache(false).list(), sort, json).c_str(), stdout);
    } else if (show->parsed()) {
      const char* what = show_source ? "source" : show_ptx ? "ptx" : show_meta ? "meta" : "summary";
      std::fputs(cache::format_show(open_cache(false), key, what).c_str(), stdout);
    } else if (stats->parsed()) {
      std::fputs(cache::format_stats(open_cache(false)).c_str(), stdout);
    } else if (verify->parsed()) {
      auto report = open_cache(fix).verify(fix);
      std::fputs(cache::format_verify(report, fix).c_str(), stdout);
      return report.bad.empty() || fix ? 0 : 1;
    } else if (prune->parsed()) {
      auto r = open_cache(true).prune(max_mb << 20);
      std::printf("removed %d entries: %s -> %s\n", r.removed,
                  cache::human_bytes(r.bytes_before).c_str(),
                  cache::human_bytes(r.bytes_after).c_str());
    } else if (clear->parsed()) {
      cache::DiskCache c = open_cache(true);
      int n = c.clear();
      std::printf("removed %d entries from %s\n", n, c.dir().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
  return 0;
}
