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

std::string render_template(std::string_view name, const kainjow::mustache::data& data) {
  kainjow::mustache::mustache tmpl{std::string(template_text(name))};
  KILN_CHECK(tmpl.is_valid(), "codegen: templates/{}: {}", name, tmpl.error_message());
  std::string text = tmpl.render(data);
  // A partial (a template text passed as data) is parsed while rendering: its errors show here.
  KILN_CHECK(tmpl.is_valid(), "codegen: templates/{} (or a partial of it): {}", name,
             tmpl.error_message());
  return text;
}

std::string elementwise_helpers(bool python_mod, bool floor_div, bool int_checks, bool random) {
  kainjow::mustache::data d;
  d.set("int_checks", int_checks);
  d.set("python_mod", python_mod);
  d.set("floor_div", floor_div);
  // A template of their own: an empty section at the end of the helpers' would leave blank
  // lines in every kernel that does not draw, changing its source.
  std::string text = render_template("elementwise_helpers.cu.mustache", d);
  if (random) text += render_template("random_helpers.cu.mustache", {});
  return text;
}

}  // namespace kiln::jit::codegen
