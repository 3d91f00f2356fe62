// Text parsing for the NVRTC wrapper: ptxas -v reports, PTX entry names, and error excerpts.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <string>

#include "runtime/cuda/nvrtc/nvrtc.h"

namespace kiln::nvrtc {
namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (eol == std::string_view::npos) break;
    text.remove_prefix(eol + 1);
  }
  return lines;
}

// The integer just before `suffix` in `line` ("... 1024 bytes smem" -> 1024), or -1.
long number_before(std::string_view line, std::string_view suffix) {
  auto pos = line.find(suffix);
  if (pos == std::string_view::npos) return -1;
  auto end = pos;
  while (end > 0 && line[end - 1] == ' ') --end;
  auto begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  long value = -1;
  if (begin == end ||
      std::from_chars(line.data() + begin, line.data() + end, value).ec != std::errc{})
    return -1;
  return value;
}

// The text between the first pair of quotes in `line` (ptxas quotes function names).
std::string quoted(std::string_view line) {
  auto a = line.find('\'');
  if (a == std::string_view::npos) return {};
  auto b = line.find('\'', a + 1);
  if (b == std::string_view::npos) return {};
  return std::string(line.substr(a + 1, b - a - 1));
}

}  // namespace

std::vector<KernelResources> parse_ptxas_info(std::string_view log) {
  std::vector<KernelResources> out;
  auto find_or_add = [&](const std::string& name) -> KernelResources& {
    for (auto& k : out)
      if (k.name == name) return k;
    out.push_back(KernelResources{.name = name});
    return out.back();
  };
  // "Used N registers" belongs to the last "Compiling entry function"; the "stack frame" line to
  // the last "Function properties for".
  std::string entry, props;
  for (auto line : split_lines(log)) {
    if (line.find("Compiling entry function") != std::string_view::npos) {
      entry = quoted(line);
      if (!entry.empty()) find_or_add(entry).is_entry = true;
    } else if (auto p = line.find("Function properties for "); p != std::string_view::npos) {
      props = std::string(line.substr(p + 24));
      while (!props.empty() && (props.back() == ' ' || props.back() == ':')) props.pop_back();
      if (!props.empty()) find_or_add(props);
    } else if (line.find("stack frame") != std::string_view::npos && !props.empty()) {
      auto& k = find_or_add(props);
      k.stack_frame_bytes = number_before(line, "bytes stack frame");
      k.spill_store_bytes = number_before(line, "bytes spill stores");
      k.spill_load_bytes = number_before(line, "bytes spill loads");
    } else if (line.find("Used ") != std::string_view::npos && !entry.empty()) {
      auto& k = find_or_add(entry);
      k.registers = static_cast<int>(number_before(line, "registers"));
      k.barriers = static_cast<int>(number_before(line, "barriers"));
      auto smem = number_before(line, "bytes smem");
      k.shared_bytes = smem < 0 ? 0 : smem;
      auto cmem = number_before(line, "bytes cmem[0]");
      k.constant_bytes = cmem < 0 ? 0 : cmem;
      if (k.barriers < 0) k.barriers = 0;
    }
  }
  return out;
}

std::vector<std::string> ptx_entries(std::string_view ptx) {
  std::vector<std::string> names;
  for (auto line : split_lines(ptx)) {
    auto p = line.find(".entry ");
    if (p == std::string_view::npos) continue;
    auto rest = line.substr(p + 7);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    auto end = rest.find_first_of("( \t");
    names.emplace_back(rest.substr(0, end));
  }
  return names;
}

std::string source_excerpt(std::string_view source, std::string_view name, std::string_view log,
                           int context) {
  // NVRTC reports errors as "<name>(<line>): error: ..." (also "catastrophic error").
  std::set<int> error_lines;
  std::string prefix = std::string(name) + "(";
  for (auto line : split_lines(log)) {
    if (!line.starts_with(prefix) || line.find("error") == std::string_view::npos) continue;
    int n = 0;
    auto digits = line.substr(prefix.size());
    if (std::from_chars(digits.data(), digits.data() + digits.size(), n).ec == std::errc{} && n > 0)
      error_lines.insert(n);
  }
  auto lines = split_lines(source);
  std::set<int> shown;
  for (int e : error_lines)
    for (int n = std::max(1, e - context); n <= std::min<int>(lines.size(), e + context); ++n)
      shown.insert(n);
  std::string out;
  int last = 0;
  for (int n : shown) {
    if (last != 0 && n != last + 1) out += "     ...\n";
    out += fmt::format("{}{:>4} | {}\n", error_lines.count(n) ? '>' : ' ', n, lines[n - 1]);
    last = n;
  }
  return out;
}

}  // namespace kiln::nvrtc
