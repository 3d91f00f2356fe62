// The pass table and the pipeline driver (see pipeline.h).
#include "graph/pipeline.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>

#include "graph/attention_rewrite.h"
#include "graph/passes.h"
#include "runtime/log.h"

namespace kiln::graph {
namespace {

constexpr unsigned bits(Pipeline p) {
  return static_cast<unsigned>(p);
}
constexpr unsigned kTraced = bits(Pipeline::trace) | bits(Pipeline::joint);
constexpr unsigned kCut = bits(Pipeline::forward) | bits(Pipeline::backward);

void attention(Graph& g) {
  rewrite_attention(g);
}

// The order here is the order passes run in. The cut graphs of a joint graph only need their
// unread pieces removed; every traced graph gets the exact passes to a fixed point.
constexpr PassSpec kPasses[] = {
    {"dead_code", eliminate_dead_code, true, false, nullptr, kCut},
    {"simplify", simplify, true, true, nullptr, kTraced},
    {"pads_to_cat", pads_to_cat, true, true, nullptr, kTraced},
    {"cat_before_reshape", cat_before_reshape, true, true, nullptr, kTraced},
    {"fold_constants", fold_constants, true, true, nullptr, kTraced},
    {"common_subexpressions", eliminate_common_subexpressions, true, true, nullptr, kTraced},
    // Inexact: the fused op rounds differently from the primitives it replaces.
    {"attention", attention, false, false, "KILN_ATTENTION_REWRITE", bits(Pipeline::trace)},
    // Inexact: the library may order the transposed product's sums differently.
    {"transpose_matmul_results", transpose_matmul_results, false, false, nullptr,
     bits(Pipeline::backward)},
};

thread_local const std::string* dump_prefix = nullptr;

// One run of a pipeline: applies passes and reports each (KILN_LOG=passes, KILN_DUMP_DIR).
class PipelineRun {
 public:
  PipelineRun(Graph& g, Pipeline p) : g_(g), pipeline_(pipeline_name(p)) {
    if (dump_prefix)
      if (const char* dir = std::getenv("KILN_DUMP_DIR")) dump_dir_ = dir;
    dump("input");
  }

  void apply(const PassSpec& pass, int round) {
    ++step_;
    if (!pass_enabled(pass)) {
      if (log_enabled(LogTopic::passes))
        log_line(fmt::format("kiln: passes: '{}' {} {:02} {}: off ({}=0)", g_.name, pipeline_,
                             step_, pass.name, pass.gate));
      return;
    }
    std::size_t before = g_.nodes.size();
    pass.run(g_);
    if (pass.run != eliminate_dead_code) eliminate_dead_code(g_);
    if (log_enabled(LogTopic::passes))
      log_line(fmt::format("kiln: passes: '{}' {} {:02} {}{}: {} -> {} nodes", g_.name, pipeline_,
                           step_, pass.name, round > 0 ? fmt::format(" (round {})", round) : "",
                           before, g_.nodes.size()));
    dump(pass.name);
  }

 private:
  void dump(std::string_view pass) const {
    if (dump_dir_.empty()) return;
    std::string path =
        fmt::format("{}/{}.{}.{:02}-{}.txt", dump_dir_, *dump_prefix, pipeline_, step_, pass);
    std::ofstream out(path);
    out << g_.str();
    if (!out) log_line(fmt::format("kiln: cannot write {} (KILN_DUMP_DIR)", path));
  }

  Graph& g_;
  std::string_view pipeline_;
  std::string dump_dir_;
  int step_ = 0;
};

}  // namespace

std::span<const PassSpec> pass_table() {
  return kPasses;
}

std::string_view pipeline_name(Pipeline p) {
  switch (p) {
    case Pipeline::trace:
      return "trace";
    case Pipeline::joint:
      return "joint";
    case Pipeline::forward:
      return "forward";
    case Pipeline::backward:
      return "backward";
  }
  return "?";
}

std::vector<const PassSpec*> pipeline_passes(Pipeline p) {
  std::vector<const PassSpec*> out;
  for (const PassSpec& pass : kPasses)
    if (pass.pipelines & bits(p)) out.push_back(&pass);
  return out;
}

bool pass_enabled(const PassSpec& pass) {
  if (!pass.gate) return true;
  const char* value = std::getenv(pass.gate);
  return !value || std::string_view(value) != "0";
}

void run_pipeline(Graph& g, Pipeline p) {
  PipelineRun run(g, p);
  std::vector<const PassSpec*> passes = pipeline_passes(p);
  for (std::size_t i = 0; i < passes.size();) {
    if (!passes[i]->fixed_point) {
      run.apply(*passes[i++], 0);
      continue;
    }
    std::size_t end = i;
    while (end < passes.size() && passes[end]->fixed_point) ++end;
    for (int round = 1; round <= kFixedPointRounds; ++round) {
      std::size_t before = g.nodes.size();
      for (std::size_t k = i; k < end; ++k) run.apply(*passes[k], round);
      if (g.nodes.size() == before) break;
    }
    i = end;
  }
}

PassDumpScope::PassDumpScope(std::string prefix) : prefix_(std::move(prefix)), outer_(dump_prefix) {
  dump_prefix = &prefix_;
}

PassDumpScope::~PassDumpScope() {
  dump_prefix = outer_;
}

}  // namespace kiln::graph
