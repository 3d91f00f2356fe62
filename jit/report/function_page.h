// One compiled function's report page: its entries (guards, recompile reasons, dynamic dims),
// per plan the graph picture, the training partition, the steps in order and each kernel's
// source, resources and profile; and the JSON summary the index is built from.
#pragma once

#include <string>

#include "jit/report/report_facts.h"

namespace kiln::jit::report {

std::string function_page(const FunctionFacts& f, const Profiles& profiles);
// {"function", "page", "entries", "recompiles", "reasons", "launches_per_call", "kernels",
//  "compile_ms", "modeled_us"}
std::string function_summary(const FunctionFacts& f, const Profiles& profiles);

}  // namespace kiln::jit::report
