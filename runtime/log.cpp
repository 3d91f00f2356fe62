// KILN_LOG parsing.
#include "runtime/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/error.h"

namespace kiln {

namespace {

constexpr std::pair<std::string_view, LogTopic> kTopics[] = {
    {"recompiles", LogTopic::recompiles},
    {"guards", LogTopic::guards},
    {"graph", LogTopic::graph},
    {"fusion", LogTopic::fusion},
    {"kernels", LogTopic::kernels},
    {"cache", LogTopic::cache},
    {"aot", LogTopic::aot},
    {"passes", LogTopic::passes},
};

int parse(const char* spec) {
  if (!spec) return 0;
  int mask = 0;
  std::string s(spec);
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string topic = s.substr(start, end - start);
    bool known = topic.empty();
    for (const auto& [name, bit] : kTopics) {
      if (topic != name && topic != "all") continue;
      mask |= static_cast<int>(bit);
      known = true;
    }
    if (!known)
      std::fprintf(stderr,
                   "kiln: KILN_LOG topic '%s' is unknown (known: recompiles, guards, graph, "
                   "fusion, kernels, cache, aot, passes, all)\n",
                   topic.c_str());
    start = end + 1;
  }
  return mask;
}

std::atomic<int>& mask() {
  static std::atomic<int> m{parse(std::getenv("KILN_LOG"))};
  return m;
}

}  // namespace

bool log_enabled(LogTopic topic) {
  return (mask().load() & static_cast<int>(topic)) != 0;
}
void log_line(std::string_view text) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
}
void log_line_once(std::string_view text) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> seen;
  std::lock_guard lock(mutex);
  if (seen.emplace(text).second) log_line(text);
}
void reload_log_settings() {
  mask().store(parse(std::getenv("KILN_LOG")));
}

}  // namespace kiln
