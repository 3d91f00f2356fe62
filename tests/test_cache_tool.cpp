// The kernel cache shared by processes (a helper, kiln_cache_worker, run several at once) and the
// kiln tool that inspects it. Every test uses its own KILN_CACHE_DIR under /tmp.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cache_env.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

using namespace kiln;
using kiln::test::CacheEnv;
using kiln::test::contains;
using kiln::test::entry_names;
using kiln::test::write_file;
namespace fs = std::filesystem;

namespace {

using Run = kiln::test::CommandResult;

Run run(const std::string& command) {
  return kiln::test::run_command(command);
}

// The `name=number` pairs a worker prints. Parsed by hand: std::regex trips GCC 12's
// -Wmaybe-uninitialized in the sanitized build.
std::map<std::string, long> counters(const std::string& output) {
  std::map<std::string, long> out;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t eq = output.find('='); eq != std::string::npos; eq = output.find('=', eq + 1)) {
    std::size_t name = eq, digits = eq + 1;
    while (name > 0 && word(output[name - 1])) --name;
    while (digits < output.size() && std::isdigit(static_cast<unsigned char>(output[digits])))
      ++digits;
    if (name < eq && digits > eq + 1)
      out[output.substr(name, eq - name)] = std::stol(output.substr(eq + 1, digits - eq - 1));
  }
  return out;
}

// `program` and then `args`, appended rather than summed: GCC 12 at -O1 misreads a sum that
// starts from a literal's temporary string as an overflow (-Warray-bounds).
std::string command_line(const char* program, const std::string& args) {
  std::string line = program;
  line += ' ';
  return line += args;
}
std::string worker(const std::string& args) {
  return command_line(KILN_CACHE_WORKER, args);
}
std::string tool(const std::string& args) {
  return command_line(KILN_TOOL, args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(processes)

BOOST_AUTO_TEST_CASE(a_second_process_compiles_nothing) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  Run cold = run(worker("kernels 0 3 2"));
  BOOST_TEST_REQUIRE(cold.status == 0, cold.output);
  auto c = counters(cold.output);
  BOOST_TEST(c["compiles"] == 3, cold.output);
  BOOST_TEST(c["stores"] == 3, cold.output);
  BOOST_TEST(c["memory_hits"] >= 3, cold.output);
  Run warm = run(worker("kernels 0 3 2"));
  BOOST_TEST_REQUIRE(warm.status == 0, warm.output);
  auto w = counters(warm.output);
  BOOST_TEST(w["compiles"] == 0, warm.output);
  BOOST_TEST(w["disk_hits"] == 3, warm.output);
  BOOST_TEST(w["memory_hits"] >= 3, warm.output);
}

BOOST_AUTO_TEST_CASE(processes_racing_compile_every_kernel_once) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  auto race = [&](auto args_of) {
    std::vector<FILE*> pipes;
    for (int p = 0; p < 8; ++p) pipes.push_back(popen((worker(args_of(p)) + " 2>&1").c_str(), "r"));
    long compiles = 0;
    for (FILE* pipe : pipes) {
      std::string out;
      char buf[4096];
      while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
      int status = pclose(pipe);
      BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0), out);
      compiles += counters(out)["compiles"];
    }
    return compiles;
  };
  // 8 processes, one key.
  BOOST_TEST(race([](int) { return std::string("kernels 100 1"); }) == 1);
  // 8 processes, overlapping sets on one directory: kernels 200..209, each compiled once.
  BOOST_TEST(race([](int p) { return "kernels " + std::to_string(200 + p) + " 3"; }) == 10);
  BOOST_TEST(entry_names(dir.path()).size() == 11u);
  auto report = cache::DiskCache(dir.path()).verify(false);
  BOOST_TEST(report.checked == 11);
  BOOST_TEST(report.bad.empty());
  BOOST_TEST(report.stale_temporaries.empty());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kiln_tool)

BOOST_AUTO_TEST_CASE(the_tool_lists_shows_verifies_prunes_and_clears_a_populated_cache) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  BOOST_TEST_REQUIRE(run(worker("graph")).status == 0);
  BOOST_TEST_REQUIRE(run(worker("kernels 0 2")).status == 0);
  std::size_t n = entry_names(dir.path()).size();
  BOOST_TEST(n >= 3u);

  Run list = run(tool("cache list"));
  BOOST_TEST(list.status == 0, list.output);
  for (const char* column : {"key", "kernel", "ops", "arch", "size", "regs", "spills", "smem",
                             "compile ms", "hits", "last used"})
    BOOST_TEST(contains(list.output, column), list.output);
  BOOST_TEST(contains(list.output, "k_worker_0"), list.output);
  BOOST_TEST(contains(list.output, "compute_"), list.output);
  BOOST_TEST(contains(list.output, "mul"), list.output);  // the graph's fused nodes
  BOOST_TEST(contains(list.output, std::to_string(n) + " entries"), list.output);

  Run json = run(tool("cache list --json --sort compile-ms"));
  BOOST_TEST_REQUIRE(json.status == 0, json.output);
  auto j = nlohmann::json::parse(json.output);
  BOOST_TEST(j.size() == n);
  BOOST_TEST(j[0]["compile_ms"].get<double>() >= j[1]["compile_ms"].get<double>());
  std::string key = j[0]["key"];

  Run bad_sort = run(tool("cache list --sort nonsense"));
  BOOST_TEST(bad_sort.status != 0);
  BOOST_TEST(contains(bad_sort.output, "nonsense"), bad_sort.output);

  Run show = run(tool("cache show " + key.substr(0, 8)));
  BOOST_TEST(show.status == 0, show.output);
  BOOST_TEST(contains(show.output, "key          " + key), show.output);
  BOOST_TEST(contains(show.output, "__global__"), show.output);
  Run src = run(tool("cache show " + key.substr(0, 8) + " --source"));
  BOOST_TEST(src.output == cache::DiskCache(dir.path()).read_source(key));
  Run ptx = run(tool("cache show " + key + " --ptx"));
  BOOST_TEST(contains(ptx.output, ".entry"), ptx.output);
  Run meta = run(tool("cache show " + key + " --meta"));
  BOOST_TEST(nlohmann::json::parse(meta.output)["key"] == key);
  Run missing = run(tool("cache show ffffffffff"));
  BOOST_TEST(missing.status == 1);
  BOOST_TEST(contains(missing.output, "no entry's key starts with 'ffffffffff'"), missing.output);
  BOOST_TEST(run(tool("cache show")).status != 0);
  BOOST_TEST(run(tool("cache show " + key + " --source --ptx")).status != 0);

  Run stats = run(tool("cache stats"));
  BOOST_TEST(contains(stats.output, "entries       " + std::to_string(n)), stats.output);

  BOOST_TEST(run(tool("cache verify")).status == 0);
  write_file(dir.path() / "kernels" / key / "kernel.cu", "tampered");
  Run verify = run(tool("cache verify"));
  BOOST_TEST(verify.status == 1);
  BOOST_TEST(contains(verify.output, key + "  kernel.cu fails its checksum"), verify.output);
  Run fix = run(tool("cache verify --fix"));
  BOOST_TEST(fix.status == 0, fix.output);
  BOOST_TEST(entry_names(dir.path()).size() == n - 1);

  Run prune = run(tool("cache prune --max-mb 0"));
  BOOST_TEST(prune.status == 0, prune.output);
  BOOST_TEST(contains(prune.output, "removed " + std::to_string(n - 1) + " entries"), prune.output);
  BOOST_TEST(run(tool("cache prune")).status != 0);
  BOOST_TEST(run(tool("cache prune --max-mb -3")).status != 0);

  BOOST_TEST_REQUIRE(run(worker("kernels 0 2")).status == 0);
  Run clear = run(tool("cache clear"));
  BOOST_TEST(contains(clear.output, "removed 2 entries"), clear.output);
  BOOST_TEST(entry_names(dir.path()).empty());
}

BOOST_AUTO_TEST_CASE(every_subcommand_has_help_and_bad_arguments_fail_clearly) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  for (const char* cmd : {"", "cache", "cache list", "cache show", "cache stats", "cache verify",
                          "cache prune", "cache clear", "doctor"}) {
    BOOST_TEST_CONTEXT(cmd) {
      Run help = run(tool(std::string(cmd) + " --help"));
      BOOST_TEST(help.status == 0, help.output);
      BOOST_TEST(contains(help.output, "Usage"), help.output);
    }
  }
  Run none = run(tool(""));
  BOOST_TEST(none.status != 0);
  Run bogus = run(tool("bogus"));
  BOOST_TEST(bogus.status != 0);
  BOOST_TEST(contains(bogus.output, "unknown command 'bogus'"), bogus.output);
  Run bogus_cache = run(tool("cache lsit"));
  BOOST_TEST(bogus_cache.status != 0);
  BOOST_TEST(contains(bogus_cache.output, "unknown cache command 'lsit'"), bogus_cache.output);
  Run bad_option = run(tool("cache list --colour"));
  BOOST_TEST(bad_option.status != 0);
  BOOST_TEST(contains(bad_option.output, "--colour"), bad_option.output);
  Run doctor = run(tool("doctor"));
  BOOST_TEST(doctor.status == 0, doctor.output);
  for (const char* field :
       {"toolkit", "nvrtc", "NVRTC", "driver", "backend", "cache size", "cache health  ok"})
    BOOST_TEST(contains(doctor.output, field), doctor.output);
}

BOOST_AUTO_TEST_SUITE_END()
