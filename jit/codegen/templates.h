// The CUDA C++ templates under templates/, embedded into the library at build time (so an
// installed kiln needs no template directory), and rendering through mustache.
#pragma once

#include <kainjow/mustache.hpp>
#include <string>
#include <string_view>

namespace kiln::jit::codegen {

// The text of templates/<name> ("pointwise.cu.mustache"); kiln::Error if there is none.
std::string_view template_text(std::string_view name);
// templates/<name> rendered with `data`; kiln::Error naming the template if it does not parse.
std::string render_template(std::string_view name, const kainjow::mustache::data& data);
// The device functions the expressions of these ops call (templates/elementwise_helpers):
// floating remainder, floating floor_divide, the integer ops that report errors
// (reports_errors in cuda_expr.h), and the random ops' Philox (reads_index).
std::string elementwise_helpers(bool python_mod, bool floor_div, bool int_checks = false,
                                bool random = false);

}  // namespace kiln::jit::codegen
