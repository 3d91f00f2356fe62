// What KILN_REPORT costs for a deep model: the GPT demo's model (demos/gpt_model.h) at 12 layers
// (KILN_BENCH_LAYERS overrides), two compiled training steps and a no-grad evaluation (a
// recompile) with the virtual GPU's profiler on, reported to a temporary directory. Prints the
// time the report took to write, the size of each page (target: under 10 MB), and, when
// Chromium is installed, how long the page takes to open in headless Chromium: the page's own
// script records when it ran (target: under 2 s), beside the browser's whole wall time.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "demos/gpt_model.h"
#include "jit/report/report_writer.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"

using namespace kiln;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string run(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    std::size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

}  // namespace

int main() {
  const char* layers_env = std::getenv("KILN_BENCH_LAYERS");
  gpt::GptConfig model;
  model.layers = layers_env ? std::atoll(layers_env) : 12;
  gpt::TrainConfig train;
  train.steps = 4;
  train.warmup_steps = 1;
  train.batch = 8;
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln-bench-report-{}", ::getpid());
  fs::remove_all(dir);
  ::setenv("KILN_REPORT", dir.c_str(), 1);
  cuda::vgpu::set_profiling(true);

  auto start = Clock::now();
  gpt::Trainer trainer(model, train, Device::cuda(), true);
  trainer.step();
  trainer.step();
  Generator held_out(7);
  trainer.evaluate(gpt::make_batch(model, 8, model.seq_len, held_out, Device::cuda()));
  double run_ms = ms_since(start);
  start = Clock::now();
  jit::report::finish_report();
  double finish_ms = ms_since(start);

  std::printf("GPT demo model, %lld layers: 2 training steps + 1 evaluation in %.0f ms\n",
              static_cast<long long>(model.layers), run_ms);
  std::printf("of which recording the entries for the report (facts, Graphviz, pages): %.0f ms\n",
              jit::report::recording_ms());
  std::printf("report finished at exit (pages with the profile + index) in %.0f ms\n", finish_ms);
  std::printf("%-28s %12s %16s %16s\n", "page", "bytes", "opened (script)", "chromium wall");
  bool have_chromium = std::system("command -v chromium > /dev/null 2>&1") == 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".html") continue;
    std::string script_ms = "-", wall_ms = "-";
    if (have_chromium) {
      auto t0 = Clock::now();
      std::string dom = run(fmt::format(
          "timeout 120 chromium --headless=new --no-sandbox --disable-gpu --dump-dom 'file://{}' "
          "2>/dev/null",
          e.path().string()));
      wall_ms = fmt::format("{:.0f} ms", ms_since(t0));
      std::smatch m;
      if (std::regex_search(dom, m, std::regex("data-ready-ms=\"(\\d+)\"")))
        script_ms = m[1].str() + " ms";
    }
    std::printf("%-28s %12lld %16s %16s\n", e.path().filename().c_str(),
                static_cast<long long>(fs::file_size(e.path())), script_ms.c_str(),
                wall_ms.c_str());
  }
  ::unsetenv("KILN_REPORT");
  if (!std::getenv("KILN_BENCH_KEEP"))
    fs::remove_all(dir);
  else
    std::printf("kept %s\n", dir.c_str());
  return 0;
}
