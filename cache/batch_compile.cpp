// One NVRTC program for several kernels (see batch_compile.h).
#include "cache/batch_compile.h"

#include <set>
#include <sstream>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "runtime/log.h"

namespace kiln::cache {

std::string combined_source(const std::vector<const KernelRequest*>& requests) {
  std::vector<std::string> includes, bodies;
  std::set<std::string> seen;
  for (const KernelRequest* r : requests) {
    std::istringstream in(r->source);
    std::string line, body, undefs;
    while (std::getline(in, line)) {
      if (line.starts_with("#include")) {
        if (seen.insert(line).second) includes.push_back(line);
        continue;
      }
      // A kernel's macros end with it (namespaces do not scope them).
      if (line.starts_with("#define ")) {
        std::istringstream words(line.substr(8));
        std::string macro;
        words >> macro;
        undefs += "#undef " + macro.substr(0, macro.find('(')) + '\n';
      }
      body += line;
      body += '\n';
    }
    bodies.push_back(body + undefs);
  }
  std::string out;
  for (const auto& line : includes) out += line + '\n';
  for (std::size_t i = 0; i < bodies.size(); ++i)
    out += fmt::format("namespace kiln_kernel_{} {{\n{}}}  // namespace kiln_kernel_{}\n", i,
                       bodies[i], i);
  return out;
}

std::vector<KernelImage> compile_together(const std::vector<const KernelRequest*>& requests) {
  KILN_CHECK(!requests.empty(), "compile_together: no kernels");
  const KernelRequest& first = *requests.front();
  std::set<std::string> names;
  for (const KernelRequest* r : requests) {
    KILN_CHECK(r->target == first.target && r->codegen_version == first.codegen_version,
               "compile_together: kernel '{}' has another target or codegen version than '{}'",
               r->name, first.name);
    KILN_CHECK(names.insert(r->name).second, "compile_together: two kernels named '{}'", r->name);
  }
  auto module = nvrtc::compile_program(
      combined_source(requests), fmt::format("{}_and_{}_more.cu", first.name, requests.size() - 1),
      first.target, first.options);
  std::string image(module.image());
  DiskCache* disk = process_disk_cache();
  std::vector<KernelImage> out;
  for (const KernelRequest* r : requests) {
    KernelImage k{key_of(*r), image, module};
    if (disk) {
      try {
        disk->store(entry_metadata(*r, k.key, module), r->source, image);
        ++disk_stats().stores;
      } catch (const Error& e) {
        disable_process_disk_cache(e.what());
        disk = nullptr;
      }
    }
    if (log_enabled(LogTopic::cache))
      log_line(
          fmt::format("kiln: cache miss {} {} (compiled with {} other kernel(s) in one "
                      "program in {:.1f} ms{})",
                      k.key, r->name, requests.size() - 1, module.compile_ms,
                      disk ? ", stored" : ", memory only"));
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace kiln::cache
