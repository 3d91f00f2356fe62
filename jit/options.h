// Options of jit::compile.
#pragma once

#include <string>
#include <vector>

namespace kiln::nn {
class Module;
}

namespace kiln::jit {

enum class DynamicMode {
  automatic,  // dims whose size changed at a recompile become symbolic (PyTorch's default)
  always,     // every dim of size >= 2 is symbolic from the first trace
  never,      // every entry is specialized to exact sizes
};

struct CompileOptions {
  std::string name = "fn";
  std::vector<std::string> arg_names;  // defaults: arg0, arg1, ...
  int recompile_limit = 8;             // entries kept; past it, calls run eagerly
  DynamicMode dynamic = DynamicMode::automatic;
  bool error_on_recompile = false;        // any retrace after the first is a kiln::Error
  bool error_on_recompile_limit = false;  // past the limit: a kiln::Error, not eager fallback
  // The state the function reads: these modules' parameter and buffer slots are read on every
  // call (guarded on their metadata), so a reassigned or reloaded parameter is used. Anything
  // else the function captures is a constant of the trace. The modules must outlive it.
  std::vector<const nn::Module*> modules;
  // Every N-th call re-traces the function and raises StaleCaptureError if what it captured
  // changed; 0 takes KILN_JIT_VERIFY from the environment (unset: never).
  int verify_every = 0;
  // CUDA graphs (torch.compile's "reduce-overhead"): a warm entry's plan is captured once per
  // set of sizes and replayed with one graph launch (jit/cuda_graphs.h). KILN_CUDA_GRAPHS=1
  // turns it on for every function. `cuda_graph_limit`: the sets of sizes an entry records.
  bool cuda_graphs = false;
  int cuda_graph_limit = 8;
};

}  // namespace kiln::jit
