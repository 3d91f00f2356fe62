// What the HTML report shows of one compiled function, gathered when an entry is made (from its
// guards, graph, fusion, plans and training partition) so that pages can be written again at
// exit, with the profile, after the function itself is gone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::jit::report {

// One generated kernel: its code and what the kernel cache recorded when it was compiled.
struct KernelFacts {
  std::string name, source, key;
  std::string arch;        // "compute_90": a PTX target has no register counts
  int registers = -1;      // -1: not reported
  long spill_bytes = -1;   // likewise
  long shared_bytes = -1;  // likewise
  double compile_ms = -1;  // -1: unknown (the disk cache is off)
};

// One step of a plan, in the order it runs.
struct StepFacts {
  std::string kind;  // kernel, cuBLASLt, attention, host view, eager, fallback
  int group = -1;
  std::string note;    // KernelPlan::str()'s line
  std::string buffers;  // where it writes in the plan's arena (BufferAssignment::step_note)
  std::string reason;  // a fallback's reason
  int kernel = -1;     // index into ProgramFacts::kernels, or -1
  // An attention step's kernels are chosen per call: the prefix of their names, by which the
  // profile finds them when one kernel of the process has it.
  std::string kernel_prefix;
  bool absorbed = false;           // computed by a library call's epilogue: not launched
  std::int64_t ideal_bytes = 0;    // its group's inputs and outputs, once each, at traced sizes
  std::vector<std::string> nodes;  // "%3 = add(%1, %2)"
  bool launches() const { return kind != "host view" && !absorbed; }
};

// One fusion group of a graph, for its detail panel.
struct GroupFacts {
  std::string kind, name, domain;
  std::vector<std::string> nodes;  // "%3: f32[4, 8] = add(%1, %2)"
  bool library = false, attention = false;
};

// An edge between two groups that the fuser did not fuse, with its reason.
struct CutFacts {
  int producer = -1, consumer = -1;
  std::string value, consumer_op, reason;
};

struct GraphFacts {
  std::string title;
  std::string id;  // prefixes its elements' ids on the page
  int nodes = 0;
  std::vector<GroupFacts> groups;
  std::vector<CutFacts> cuts;
  std::string groups_svg;   // one box per group, cut edges labelled (empty: no Graphviz)
  std::string nodes_svg;    // every node, clustered by group (empty: too large or no Graphviz)
  std::string text;         // the fusion as text: the fallback without Graphviz
  std::string svg_problem;  // why there is no picture
};

// A plan (an inference entry's, or a training entry's forward or backward).
struct ProgramFacts {
  std::string title;
  GraphFacts graph;
  std::vector<StepFacts> steps;
  std::vector<KernelFacts> kernels;  // distinct by source
  std::int64_t peak_bytes = 0;
  std::string arena;  // the arena at the traced sizes against its liveness bound, or empty
  int launches() const {
    int n = 0;
    for (const auto& s : steps) n += s.launches();
    return n;
  }
  int fallbacks() const {
    int n = 0;
    for (const auto& s : steps) n += s.kind == "fallback";
    return n;
  }
};

struct SavedFacts {
  std::string value, type, why;
  std::int64_t bytes = 0;
  bool is_input = false;
};

// The training partition: what the forward saves for the backward and what the backward
// computes again.
struct PartitionFacts {
  std::vector<SavedFacts> saved;
  std::int64_t activation_bytes = 0;
  int recomputed_count = 0;
  std::vector<std::string> recomputed;  // backward nodes that read no incoming gradient
  std::map<int, std::vector<std::string>> checkpoint_regions;  // region -> forward nodes
};

struct EntryFacts {
  int index = 0;
  std::string reason;  // why it was traced: "first call", or the guard that failed
  std::string guards;
  std::vector<std::string> dynamic_dims;  // "x dim 0 (s0)"
  double compile_ms = 0;
  std::string runs_as;  // "generated kernels", "forward + backward plans", or why neither
  bool training = false;
  PartitionFacts partition;
  std::vector<ProgramFacts> programs;
  int launches_per_call() const {
    int n = 0;
    for (const auto& p : programs) n += p.launches();
    return n;
  }
};

struct FunctionFacts {
  std::string name;
  std::string page;  // its file name in the report directory
  std::vector<EntryFacts> entries;
};

// What the virtual GPU's profiler (KILN_PROFILE=1) measured of one kernel, per launch.
struct ProfileFacts {
  std::uint64_t launches = 0;
  double dram_bytes = 0;
  double issue_slots = 0;
  double modeled_us = 0;
  std::string bound;  // memory, issue, tensor
};
using Profiles = std::map<std::string, ProfileFacts>;  // by kernel name

}  // namespace kiln::jit::report
