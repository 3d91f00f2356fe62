// Options of jit::compile.
#pragma once

#include <string>
#include <vector>

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
};

}  // namespace kiln::jit
