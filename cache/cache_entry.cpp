// meta.json of disk cache entries, on nlohmann/json (see cache_entry.h).
#include "cache/cache_entry.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace kiln::cache {

using nlohmann::json;

std::vector<std::string> EntryMeta::ops() const {
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    // "%3 = add(%1, %2)" -> "add"; a description (no "= op(") is kept whole.
    auto eq = n.find("= ");
    auto paren = n.find('(', eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || paren == std::string::npos) {
      out.push_back(n);
      continue;
    }
    out.push_back(n.substr(eq + 2, paren - eq - 2));
  }
  return out;
}

std::string to_json(const EntryMeta& m, int indent) {
  json j = {{"format", m.format},
            {"key", m.key},
            {"kernel", m.kernel},
            {"graph", m.graph},
            {"nodes", m.nodes},
            {"arch", m.arch},
            {"cubin", m.cubin},
            {"options", m.options},
            {"nvrtc_version", m.nvrtc_version},
            {"nvrtc_id", m.nvrtc_id},
            {"codegen_version", m.codegen_version},
            {"compile_ms", m.compile_ms},
            {"registers", m.registers},
            {"spill_bytes", m.spill_bytes},
            {"shared_bytes", m.shared_bytes},
            {"created", m.created},
            {"last_used", m.last_used},
            {"hits", m.hits},
            {"binary_bytes", m.binary_bytes},
            {"source_bytes", m.source_bytes},
            {"checksum", m.checksum},
            {"source_checksum", m.source_checksum}};
  return j.dump(indent);
}

EntryMeta meta_from_json(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object(), "cache metadata is not a JSON object ({} bytes)", text.size());
  EntryMeta m;
  auto get = [&](const char* field, auto& into) {
    auto it = j.find(field);
    KILN_CHECK(it != j.end(), "cache metadata has no '{}'", field);
    try {
      it->get_to(into);
    } catch (const json::exception&) {
      throw Error(
          fmt::format("cache metadata field '{}' has the wrong type ({})", field, it->type_name()));
    }
  };
  get("format", m.format);
  KILN_CHECK(m.format == EntryMeta::kFormat, "cache metadata format {} is not {}", m.format,
             EntryMeta::kFormat);
  get("key", m.key);
  get("kernel", m.kernel);
  get("graph", m.graph);
  get("nodes", m.nodes);
  get("arch", m.arch);
  get("cubin", m.cubin);
  get("options", m.options);
  get("nvrtc_version", m.nvrtc_version);
  get("nvrtc_id", m.nvrtc_id);
  get("codegen_version", m.codegen_version);
  get("compile_ms", m.compile_ms);
  get("registers", m.registers);
  get("spill_bytes", m.spill_bytes);
  get("shared_bytes", m.shared_bytes);
  get("created", m.created);
  get("last_used", m.last_used);
  get("hits", m.hits);
  get("binary_bytes", m.binary_bytes);
  get("source_bytes", m.source_bytes);
  get("checksum", m.checksum);
  get("source_checksum", m.source_checksum);
  return m;
}

void describe_from_source(std::string_view source, EntryMeta& meta) {
  auto line_at = [&](std::size_t pos) {
    auto end = source.find('\n', pos);
    return source.substr(pos, end == std::string_view::npos ? source.size() - pos : end - pos);
  };
  constexpr std::string_view kFused = "// Fused from graph '";
  if (auto p = source.find(kFused); p != std::string_view::npos) {
    std::string_view line = line_at(p);
    auto name = line.substr(kFused.size());
    meta.graph = std::string(name.substr(0, name.rfind('\'')));
    std::size_t pos = p + line.size() + 1;
    while (pos < source.size()) {
      std::string_view node = line_at(pos);
      if (node.substr(0, 5) != "//   ") break;
      meta.nodes.emplace_back(node.substr(5));
      pos += node.size() + 1;
    }
    if (!meta.nodes.empty()) return;
  }
  // "// k_name: what it does"
  std::string prefix = "// " + meta.kernel + ": ";
  if (auto p = source.find(prefix); p != std::string_view::npos && !meta.kernel.empty())
    meta.nodes.emplace_back(line_at(p).substr(prefix.size()));
}

std::string format_time(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace kiln::cache
