// Looks templates up in the table cmake/embed_templates.cmake generates.
#include "jit/codegen/templates.h"

#include <utility>

#include "runtime/error.h"

namespace kiln::jit::codegen {

extern const std::pair<std::string_view, std::string_view> kEmbeddedTemplates[];
extern const int kNumEmbeddedTemplates;

std::string_view template_text(std::string_view name) {
  for (int i = 0; i < kNumEmbeddedTemplates; ++i)
    if (kEmbeddedTemplates[i].first == name) return kEmbeddedTemplates[i].second;
  throw Error(
      fmt::format("codegen: no template '{}' (templates/ is embedded at build time)", name));
}

}  // namespace kiln::jit::codegen
