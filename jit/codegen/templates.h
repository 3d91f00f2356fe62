// The CUDA C++ templates under templates/, embedded into the library at build time (so an
// installed kiln needs no template directory), and rendering through mustache.
#pragma once

#include <string>
#include <string_view>

namespace kiln::jit::codegen {

// The text of templates/<name> ("pointwise.cu.mustache"); kiln::Error if there is none.
std::string_view template_text(std::string_view name);

}  // namespace kiln::jit::codegen
