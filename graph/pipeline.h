// Every graph pass in one table, in the order passes run, and the named pipelines drawn from it:
// the one place that says which passes a graph gets. After each pass the pipeline removes what
// it left dead. KILN_LOG=passes prints each pass with the graph's node count before and after;
// KILN_DUMP_DIR (under a PassDumpScope) receives the graph after each pass.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

enum class Pipeline : unsigned {
  trace = 1,     // every traced graph, before it runs
  joint = 2,     // the forward and backward of a compiled backward, as one graph
  forward = 4,   // the forward cut from a joint graph
  backward = 8,  // the backward cut from a joint graph
};

struct PassSpec {
  std::string_view name;
  void (*run)(Graph&);
  // Results bit for bit those of the graph before. An inexact pass may round differently.
  bool exact;
  // Repeated, with the fixed-point passes next to it in a pipeline, until a round leaves the
  // node count as it was (at most kFixedPointRounds rounds).
  bool fixed_point;
  const char* gate;    // an environment variable that turns the pass off when "0", or null
  unsigned pipelines;  // the Pipeline bits of those that run it
};

inline constexpr int kFixedPointRounds = 4;

// The table, in run order.
std::span<const PassSpec> pass_table();
std::string_view pipeline_name(Pipeline p);
// The passes pipeline `p` runs, in order (a fixed-point group's passes once each).
std::vector<const PassSpec*> pipeline_passes(Pipeline p);
// Whether `pass` runs now: its gate, if any, is not "0".
bool pass_enabled(const PassSpec& pass);

// Runs pipeline `p` on `g`, removing dead code after every pass.
void run_pipeline(Graph& g, Pipeline p);

// While one lives on a thread, the pipelines that thread runs write the graph as traced and
// after each pass to KILN_DUMP_DIR (when set), as `<prefix>.<pipeline>.<NN>-<pass>.txt` with NN
// counting passes from 01 (00-input: the graph given). Scopes nest; the innermost names files.
class PassDumpScope {
 public:
  explicit PassDumpScope(std::string prefix);
  ~PassDumpScope();
  PassDumpScope(const PassDumpScope&) = delete;
  PassDumpScope& operator=(const PassDumpScope&) = delete;

 private:
  std::string prefix_;
  const std::string* outer_;
};

}  // namespace kiln::graph
