// Kernel cache keys and checksums on XXH3-128 (see kernel_key.h).
#include "cache/kernel_key.h"

#include <cstdint>
#include <vector>

#include <fmt/format.h>

// Header-only xxHash: nothing to link, and no xxHash symbols exported from libkiln.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::cache {
namespace {

std::string hex(XXH128_hash_t h) {
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// Each field length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
void add_field(XXH3_state_t* state, std::string_view field) {
  std::uint64_t size = field.size();
  XXH3_128bits_update(state, &size, sizeof size);
  XXH3_128bits_update(state, field.data(), field.size());
}

}  // namespace

std::vector<std::string> normalized_options(std::span<const std::string> options) {
  std::vector<std::string> out;
  for (const auto& o : options) {
    auto first = o.find_first_not_of(" \t\n");
    if (first == std::string::npos) continue;
    auto last = o.find_last_not_of(" \t\n");
    out.push_back(o.substr(first, last - first + 1));
  }
  return out;
}

std::string kernel_key(const KeyInputs& in) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  add_field(state, "kiln-kernel-key-2");
  add_field(state, kernel_code(in.source));
  auto options = normalized_options(in.options);
  add_field(state, std::to_string(options.size()));
  for (const auto& o : options) add_field(state, o);
  add_field(state, in.arch);
  add_field(state, in.nvrtc_version);
  add_field(state, std::to_string(in.codegen_version));
  std::string key = hex(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  return key;
}

std::string kernel_code(std::string_view source) {
  std::string code;
  code.reserve(source.size());
  while (!source.empty()) {
    std::size_t end = source.find('\n');
    std::string_view line = source.substr(0, end);
    source.remove_prefix(end == std::string_view::npos ? source.size() : end + 1);
    std::size_t first = line.find_first_not_of(" \t\r");
    // A comment ending in a backslash continues onto the next line, which is then comment too:
    // kept, so the key never takes for code what the compiler does not.
    bool comment = first != std::string_view::npos && line.substr(first).starts_with("//");
    if (first == std::string_view::npos || (comment && !line.ends_with('\\'))) continue;
    code += line;
    code += '\n';
  }
  return code;
}

std::string checksum(std::string_view data) {
  return hex(XXH3_128bits(data.data(), data.size()));
}

bool is_key(std::string_view text) {
  if (text.size() != 32) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace kiln::cache
