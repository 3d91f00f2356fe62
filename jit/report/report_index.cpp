// The report's index (see report_index.h).
#include "jit/report/report_index.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jit/report/html.h"
#include "runtime/error.h"

namespace kiln::jit::report {

std::string index_page(const std::vector<std::string>& summaries, const std::string& notes) {
  std::vector<nlohmann::json> functions;
  for (const auto& s : summaries) functions.push_back(nlohmann::json::parse(s));
  std::sort(functions.begin(), functions.end(), [](const auto& a, const auto& b) {
    return a["page"].template get<std::string>() < b["page"].template get<std::string>();
  });
  std::string rows;
  double compile_ms = 0, modeled_us = 0;
  std::int64_t recompiles = 0, kernels = 0, entries = 0;
  for (const auto& f : functions) {
    std::string launches, reasons;
    for (const auto& l : f["launches_per_call"])
      launches += (launches.empty() ? "" : ", ") + std::to_string(l.get<int>());
    for (const auto& r : f["reasons"]) reasons += escape(r.get<std::string>()) + "<br>";
    double modeled = f.value("modeled_us", 0.0);
    rows += fmt::format(
        "<tr class=\"function\"><td><a href=\"{}\">{}</a></td><td class=\"num\">{}</td><td "
        "class=\"num launches\">{}</td><td class=\"num\">{:.1f} ms</td><td "
        "class=\"num recompiles\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
        "class=\"reason\">{}</td></tr>\n",
        escape(f["page"].get<std::string>()), escape(f["function"].get<std::string>()),
        f["entries"].get<int>(), launches, f["compile_ms"].get<double>(),
        f["recompiles"].get<int>(), f["kernels"].get<int>(),
        modeled > 0 ? fmt::format("{:.1f} us", modeled) : "", reasons);
    compile_ms += f["compile_ms"].get<double>();
    modeled_us += modeled;
    recompiles += f["recompiles"].get<int>();
    kernels += f["kernels"].get<int>();
    entries += f["entries"].get<int>();
  }
  std::string body = fmt::format(
      "<h1>kiln compile report</h1>\n<section id=\"functions\"><h2>Compiled functions</h2>\n"
      "<table><tr><th>function</th><th class=\"num\">entries</th><th class=\"num\">launches per "
      "call (per entry)</th><th class=\"num\">compile time</th><th "
      "class=\"num\">recompiles</th><th class=\"num\">generated kernels</th><th "
      "class=\"num\">modeled kernel time (one call of each entry)</th><th>recompile "
      "reasons</th></tr>\n{}"
      "<tr class=\"totals\"><th>total ({} functions)</th><th class=\"num\">{}</th><th></th><th "
      "class=\"num\">{:.1f} ms</th><th class=\"num\">{}</th><th class=\"num\">{}</th><th "
      "class=\"num\">{}</th><th></th></tr></table></section>\n{}",
      rows, functions.size(), entries, compile_ms, recompiles, kernels,
      modeled_us > 0 ? fmt::format("{:.1f} us", modeled_us) : "", notes);
  nlohmann::json summary{{"functions", functions.size()},
                         {"entries", entries},
                         {"recompiles", recompiles},
                         {"kernels", kernels},
                         {"compile_ms", compile_ms}};
  return page("kiln compile report", body, summary.dump());
}

int rebuild_index(const std::filesystem::path& dir, const std::string& notes) {
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_directory(dir, ec),
             "kiln report: '{}' is not a directory of report pages", dir.string());
  std::vector<std::filesystem::path> pages;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".html" && e.path().filename() != "index.html" &&
        e.path().filename().string()[0] != '.')
      pages.push_back(e.path());
  std::sort(pages.begin(), pages.end());
  std::vector<std::string> summaries;
  for (const auto& p : pages) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    std::string summary = summary_of(text.str());
    if (summary.empty() || !nlohmann::json::accept(summary)) {
      fmt::print(stderr, "kiln report: {} has no page summary; left out of the index\n",
                 p.string());
      continue;
    }
    summaries.push_back(std::move(summary));
  }
  write_atomically(dir / "index.html", index_page(summaries, notes));
  return static_cast<int>(summaries.size());
}

void write_atomically(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::path tmp =
      path.parent_path() / fmt::format(".{}.{}.tmp", path.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.close();
    KILN_CHECK(out.good(), "KILN_REPORT: cannot write {}: {}", tmp.string(), std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  KILN_CHECK(!ec, "KILN_REPORT: cannot write {}: {}", path.string(), ec.message());
}

}  // namespace kiln::jit::report
