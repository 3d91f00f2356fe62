// KILN_REPORT: the HTML report of a small compiled function (with a recompile at another batch
// size) and of a compiled training step of the GPT demo. Each page's sections carry what the
// compiler holds (entries and their recompile reasons, the plan's steps and kernels, the cut
// edges, the saved values KILN_LOG=aot prints); `kiln report DIR` rebuilds the same index; and
// headless Chromium opens the page with no console error, its script run and its SVG drawn.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "autograd/ops.h"
#include "cache/kernel_key.h"
#include "demos/gpt_model.h"
#include "jit/compile.h"
#include "jit/report/html.h"
#include "jit/report/report_index.h"
#include "jit/report/report_writer.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda_backend.h"
#include "support/profiling_scope.h"
#include "support/skip_if.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The part of `page` from the element with id `id` to the end of its section.
std::string section(const std::string& page, const std::string& id) {
  std::size_t start = page.find("id=\"" + id + "\"");
  if (start == std::string::npos) return {};
  std::size_t end = page.find("</section>", start);
  return page.substr(start, end - start);
}

bool have_dot() {
  return std::system("command -v dot > /dev/null 2>&1") == 0;
}

// Runs `command` in a shell; its stdout.
std::string run(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int s = ::pclose(pipe);
  if (status) *status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return out;
}

// A report directory of its own, KILN_REPORT pointing at it while the case runs.
struct ReportDir {
  fs::path dir;
  explicit ReportDir(const std::string& name) {
    dir = fs::temp_directory_path() / fmt::format("kiln-test-report-{}-{}", name, ::getpid());
    fs::remove_all(dir);
    ::setenv("KILN_REPORT", dir.c_str(), 1);
  }
  ~ReportDir() {
    ::unsetenv("KILN_REPORT");
    fs::remove_all(dir);
  }
};

// A matmul + bias + tanh GELU (one cuBLASLt call with its epilogue), a plain matmul, a softmax.
Tensor head(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& w2) {
  return softmax(matmul(gelu(matmul(x, w) + b, GeluApproximation::tanh), w2), -1);
}

// The distinct kernels a plan launches (sources of the same code are one), one source each.
std::set<std::string> kernel_sources(const jit::KernelPlan& plan) {
  std::map<std::string, std::string> by_code;
  for (const auto& s : plan.steps())
    if (const auto* k = s.as<jit::KernelStep>()) {
      const std::string& source = k->kernel.expected_kernel().source();
      by_code.emplace(cache::kernel_code(source), source);
    }
  std::set<std::string> out;
  for (const auto& [code, source] : by_code) out.insert(source);
  return out;
}

fs::path page_of(const fs::path& dir, const std::string& function) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() == "index.html" || e.path().extension() != ".html") continue;
    if (contains(jit::report::summary_of(read(e.path())), "\"function\":\"" + function + "\""))
      return e.path();
  }
  return {};
}

// Writes the report of the small function called at two batch sizes; returns its page.
std::string small_function_report(const fs::path& dir, jit::CompiledFunction<decltype(&head)>& f) {
  Tensor w = randn({16, 12}).to(Device::cuda()), b = randn({12}).to(Device::cuda());
  Tensor w2 = randn({12, 8}).to(Device::cuda());
  f(randn({4, 16}).to(Device::cuda()), w, b, w2);
  f(randn({6, 16}).to(Device::cuda()), w, b, w2);
  jit::report::finish_report();
  return read(page_of(dir, "report_head"));
}

jit::CompileOptions head_options() {
  jit::CompileOptions o;
  o.name = "report_head";
  o.arg_names = {"x", "w", "b", "w2"};
  return o;
}

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system(fmt::format("command -v {} > /dev/null 2>&1", name).c_str()) == 0) return name;
  return {};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(report)

BOOST_AUTO_TEST_CASE(a_function_page_lists_entries_plan_kernels_and_cut_edges) {
  ReportDir rd("head");
  auto f = jit::compile(&head, head_options());
  std::string page = small_function_report(rd.dir, f);
  BOOST_TEST_REQUIRE(!page.empty());
  const auto& core = f.core();
  BOOST_TEST_REQUIRE(core.num_entries() == 2u);

  // Entries: the recompile's reason, as the compiled function gives it, and its dynamic dim.
  std::string entries = section(page, "entries");
  BOOST_TEST(count(entries, "<tr><td><a href=\"#entry-") == 2);
  std::vector<std::string> reasons = core.recompile_reasons();
  BOOST_TEST_REQUIRE(reasons.size() == 1u);
  BOOST_TEST(contains(entries, jit::report::escape(reasons[0])), reasons[0]);
  BOOST_TEST(contains(entries, "first call"));
  BOOST_TEST(contains(entries, "x dim 0"), entries);

  for (int e = 0; e < 2; ++e) {
    BOOST_TEST_CONTEXT("entry " << e) {
      const jit::KernelPlan* plan = core.plan(e);
      BOOST_TEST_REQUIRE(plan != nullptr);
      std::string id = fmt::format("e{}p", e);
      std::string steps = section(page, id + "-plan");
      BOOST_TEST(count(steps, "<tr class=\"step ") == static_cast<int>(plan->steps().size()));
      // The matmul + bias + tanh GELU is one cuBLASLt call with its epilogue.
      BOOST_TEST(contains(steps, "cuBLASLt"), steps);
      // Every distinct kernel once, with its source escaped (a kernel's `<` and `&`).
      std::string kernels = section(page, id + "-kernels");
      std::set<std::string> sources = kernel_sources(*plan);
      BOOST_TEST(count(kernels, "<details class=\"kernel\"") == static_cast<int>(sources.size()));
      for (const auto& s : sources) {
        BOOST_TEST(contains(kernels, jit::report::escape(s)));
        if (std::size_t lt = s.find('<'); lt != std::string::npos)
          BOOST_TEST(!contains(kernels, s.substr(lt, 40)));
      }
      BOOST_TEST(contains(kernels, "cache key"));
      // Every edge the fuser cut, with its reason.
      std::string graph = section(page, id + "-graph");
      const graph::Partition& fusion = core.fusion(e);
      BOOST_TEST(count(graph, "<tr class=\"cut\">") == static_cast<int>(fusion.unfused.size()));
      for (const auto& cut : fusion.unfused)
        BOOST_TEST(contains(graph, jit::report::escape(cut.reason)), cut.reason);
      BOOST_TEST(count(graph, "class=\"group-detail\"") == static_cast<int>(fusion.groups.size()));
      if (have_dot())
        BOOST_TEST(contains(graph, "<svg"));
      else
        BOOST_TEST(contains(graph, "No picture"));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_training_step_shows_its_partition_and_kiln_report_rebuilds_the_index) {
  ReportDir rd("gpt");
  gpt::GptConfig model;
  model.layers = 1;
  gpt::TrainConfig train;
  train.steps = 4;
  train.warmup_steps = 1;
  train.batch = 4;
  gpt::Trainer trainer(model, train, Device::cuda(), true);
  trainer.step();
  trainer.step();
  Generator held_out(3);
  trainer.evaluate(gpt::make_batch(model, 4, model.seq_len, held_out, Device::cuda()));
  jit::report::finish_report();
  const jit::CompiledFunctionCore& core = *trainer.compiled();
  std::string page = read(page_of(rd.dir, core.options().name));
  BOOST_TEST_REQUIRE(!page.empty());
  BOOST_TEST_REQUIRE(core.num_entries() == 2u);  // the steps, then the no-grad evaluation
  BOOST_TEST(contains(section(page, "entries"), jit::report::escape(core.recompile_reasons()[0])));

  // The saved values, as KILN_LOG=aot prints them: "  %12 f32[4, 8] (128 bytes): why".
  const jit::AotProgram* aot = core.aot(0);
  BOOST_TEST_REQUIRE(aot != nullptr);
  std::string partition = section(page, "entry-0-partition");
  std::istringstream log(aot->partition().str());
  std::regex saved_line(R"(^  (%\d+) (.+) \((\d+) bytes\): (.*)$)");
  int logged = 0;
  for (std::string line; std::getline(log, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, saved_line)) continue;
    ++logged;
    std::string row = fmt::format(
        "<tr class=\"saved\"><td>{}</td><td><code>{}</code></td><td class=\"num\">{}</td>",
        jit::report::escape(m[1].str()), jit::report::escape(m[2].str()), m[3].str());
    BOOST_TEST(contains(partition, row), row);
    BOOST_TEST(contains(partition, jit::report::escape(m[4].str())));
  }
  BOOST_TEST(logged > 0);
  BOOST_TEST(count(partition, "<tr class=\"saved\">") == logged);
  // Forward and backward plans, each with its kernels, and the arena: each step's buffers and
  // the plan's summary, as explain() prints them.
  int arenas = 0;
  for (auto [id, plan] : {std::pair{"e0f", &aot->forward_plan()}, {"e0b", &aot->backward_plan()}}) {
    std::string steps = section(page, std::string(id) + "-plan");
    BOOST_TEST(count(steps, "<tr class=\"step ") == static_cast<int>(plan->steps().size()));
    const jit::ArenaLayout layout = plan->traced_layout();
    if (!plan->buffers().empty()) {
      ++arenas;
      BOOST_TEST(contains(steps, jit::report::escape(plan->buffers().summary(layout))), steps);
    }
    for (std::size_t i = 0; i < plan->steps().size(); ++i)
      if (std::string note = plan->buffers().step_note(i, layout); !note.empty())
        BOOST_TEST(contains(steps, jit::report::escape(note)), note);
    BOOST_TEST(count(section(page, std::string(id) + "-kernels"), "<details class=\"kernel\"") ==
               static_cast<int>(kernel_sources(*plan).size()));
  }
  BOOST_TEST(arenas > 0);
  BOOST_TEST(contains(page, "attention"));

  // The index lists the function; `kiln report` rebuilds it from the pages alone.
  std::string index = read(rd.dir / "index.html");
  BOOST_TEST(contains(index, ">" + core.options().name + "</a>"));
  BOOST_TEST(contains(index, "<td class=\"num recompiles\">1</td>"));
  fs::remove(rd.dir / "index.html");
  int status = -1;
  std::string said = run(fmt::format("'{}' report '{}'", KILN_TOOL, rd.dir.string()), &status);
  BOOST_TEST(status == 0, said);
  BOOST_TEST(contains(said, "1 compiled functions"), said);
  BOOST_TEST(read(rd.dir / "index.html") == index);
  // A directory that is not one is an error naming it.
  std::string missing = (rd.dir / "nowhere").string();
  std::string err = run(fmt::format("'{}' report '{}' 2>&1", KILN_TOOL, missing), &status);
  BOOST_TEST(status == 1);
  BOOST_TEST(contains(err, missing), err);
}

BOOST_AUTO_TEST_CASE(with_the_profiler_on_the_plan_shows_each_kernels_profile) {
  ReportDir rd("profile");
  auto f = jit::compile(&head, head_options());
  Tensor w = randn({16, 12}).to(Device::cuda()), b = randn({12}).to(Device::cuda());
  Tensor w2 = randn({12, 8}).to(Device::cuda()), x = randn({4, 16}).to(Device::cuda());
  std::string page;
  std::map<std::string, int> launches;  // as the profiler recorded them
  {
    test::ProfilingScope profiling;
    f(x, w, b, w2);
    f(x, w, b, w2);
    profiling.stop();
    for (const auto& p : cuda::vgpu::profiles()) launches[p.kernel] += p.launches;
    jit::report::finish_report();
    page = read(page_of(rd.dir, "report_head"));
    cuda::vgpu::clear_profiles();
  }
  std::string plan = section(page, "e0p-plan");
  BOOST_TEST(contains(plan, "modeled H100 time per launch"), plan);
  // The softmax kernel reads the [4, 8] f32 matmul output and writes [4, 8] f32: 256 bytes.
  BOOST_TEST(contains(plan, "<td class=\"num\">256</td>"), plan);
  std::string kernels = section(page, "e0p-kernels");
  int listed = 0;
  for (const auto& [name, n] : launches) {
    if (!contains(kernels, "<code>" + name + "</code>")) continue;
    ++listed;
    BOOST_TEST(contains(kernels, fmt::format("<tr><th>profile</th><td>{} launches;", n)), name);
  }
  // The softmax kernel; the bias + GELU kernel is listed but never launched (cuBLASLt's epilogue
  // computes it), so it has no profile.
  BOOST_TEST(listed == 1);
  BOOST_TEST(kernel_sources(*f.core().plan(0)).size() == 2u);
}

BOOST_AUTO_TEST_CASE(without_graphviz_a_page_shows_the_fusion_as_text) {
  ReportDir rd("nodot");
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  fs::path empty = rd.dir / "empty-path";
  fs::create_directories(empty);
  ::setenv("PATH", empty.c_str(), 1);
  auto f = jit::compile(&head, head_options());
  std::string page;
  try {
    page = small_function_report(rd.dir, f);
  } catch (...) {
    ::setenv("PATH", path.c_str(), 1);
    throw;
  }
  ::setenv("PATH", path.c_str(), 1);
  std::string graph = section(page, "e0p-graph");
  BOOST_TEST(contains(graph, "No picture: Graphviz"), graph.substr(0, 2000));
  // The text is the fuser's own listing, escaped.
  BOOST_TEST(contains(graph, jit::report::escape(f.core().fusion(0).str(f.core().graph(0)))));
  BOOST_TEST(!contains(graph, "<svg"));
}

BOOST_AUTO_TEST_CASE(escaping_keeps_kernel_text_inert) {
  BOOST_TEST(jit::report::escape("a<b && c>\"d'") == "a&lt;b &amp;&amp; c&gt;&quot;d&#39;");
  std::string page = jit::report::page("t", "", R"({"x":"</script><b>"})");
  BOOST_TEST(!contains(page, "</script><b>"));
  BOOST_TEST(jit::report::summary_of(page) == R"({"x":"</script><b>"})");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(report_browser)

BOOST_AUTO_TEST_CASE(the_page_loads_in_headless_chromium, *test::skip_if([] {
                       return chromium().empty()
                                  ? "no chromium on PATH (Debian: apt-get install chromium)"
                                  : "";
                     })) {
  ReportDir rd("browser");
  auto f = jit::compile(&head, head_options());
  small_function_report(rd.dir, f);
  fs::path page = page_of(rd.dir, "report_head");
  fs::path shot = rd.dir / "screenshot.png";
  std::string flags = "--headless=new --no-sandbox --disable-gpu --enable-logging=stderr --v=0";
  for (const fs::path& p : {page, rd.dir / "index.html"}) {
    BOOST_TEST_CONTEXT(p.filename()) {
      fs::path err = rd.dir / "chromium.err";
      int status = -1;
      std::string dom = run(fmt::format("timeout 120 {} {} --dump-dom 'file://{}' 2> '{}'",
                                        chromium(), flags, p.string(), err.string()),
                            &status);
      std::string log = read(err);
      BOOST_TEST(status == 0, log);
      // The script ran to its end, and nothing was logged to the console.
      BOOST_TEST(contains(dom, "data-report-ready=\"1\""), log);
      BOOST_TEST(!contains(log, ":CONSOLE"), log);
      BOOST_TEST(!contains(log, "Uncaught"), log);
      if (p == page) {
        for (const char* id : {"id=\"entries\"", "id=\"entry-1\"", "id=\"e1p-graph\"",
                               "id=\"e1p-plan\"", "id=\"e1p-kernels\"", "id=\"kiln-summary\""})
          BOOST_TEST(contains(dom, id), id);
        if (have_dot()) BOOST_TEST(contains(dom, "<svg"));
      } else {
        BOOST_TEST(contains(dom, "id=\"functions\""));
      }
    }
  }
  // What a reader does: a click on a group box lists its nodes; an opened kernel is highlighted.
  if (have_dot()) {
    std::string html = read(page);
    std::string probe = R"(<script>
      var g = document.querySelector('.picture svg g.node[id]');
      g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
      var k = document.querySelector('details.kernel');
      k.open = true;
      setTimeout(function() {
        document.body.setAttribute('data-probe', g.id + ' ' +
            document.getElementById('detail-' + g.id).classList.contains('open') + ' ' +
            k.querySelectorAll('span.k-kw').length);
      }, 100);
    </script></body>)";
    html.replace(html.rfind("</body>"), 7, probe);
    fs::path probed = rd.dir / "probed.html";
    std::ofstream(probed) << html;
    std::string dom =
        run(fmt::format("timeout 120 {} {} --virtual-time-budget=5000 --dump-dom "
                        "'file://{}' 2>/dev/null",
                        chromium(), flags, probed.string()));
    std::smatch m;
    BOOST_TEST_REQUIRE(
        std::regex_search(dom, m, std::regex(R"re(data-probe="e0pg\d+ (\w+) (\d+)")re")),
        dom.substr(0, 400));
    BOOST_TEST(m[1].str() == "true");
    BOOST_TEST(std::stoi(m[2].str()) > 0);
  }
  int status = -1;
  run(fmt::format("timeout 120 {} {} --screenshot='{}' --window-size=1400,2000 'file://{}' 2>&1",
                  chromium(), flags, shot.string(), page.string()),
      &status);
  BOOST_TEST(status == 0);
  BOOST_TEST(fs::exists(shot));
  BOOST_TEST((fs::exists(shot) && fs::file_size(shot) > 1000));
}

BOOST_AUTO_TEST_SUITE_END()
