// KILN_LOG=recompiles,guards,graph,fusion,kernels,cache,aot,passes (comma list, or "all"):
// what jit::compile and the kernel cache report on stderr.
#pragma once

#include <string_view>

namespace kiln {

enum class LogTopic {
  recompiles = 1,
  guards = 2,
  graph = 4,
  fusion = 8,
  kernels = 16,
  cache = 32,
  aot = 64,      // the compiled backward: forward/backward graphs, what is saved and why
  passes = 128,  // each graph pass with the node count before and after (graph/pipeline.h)
};

bool log_enabled(LogTopic topic);
void log_line(std::string_view text);
// log_line the first time this process logs `text`: a reason that repeats every call prints once.
void log_line_once(std::string_view text);
// Re-reads KILN_LOG (tests change it at run time).
void reload_log_settings();

}  // namespace kiln
