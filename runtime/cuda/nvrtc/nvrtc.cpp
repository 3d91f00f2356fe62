// The NVRTC wrapper: program creation, options, compile, PTX/cubin retrieval, version queries.
#include "runtime/cuda/nvrtc/nvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace kiln::nvrtc {
namespace {

void check(nvrtcResult result, const char* call, std::string_view name) {
  KILN_CHECK(result == NVRTC_SUCCESS, "{} failed for '{}': {} ({})", call, name,
             nvrtcGetErrorString(result), static_cast<int>(result));
}

// RAII for nvrtcProgram so every error path destroys it.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

// The CUDA toolkit's include directory, for cuda_fp16.h and friends: $CUDA_HOME/include, else
// next to the libnvrtc in use (lib64/../include), else /usr/local/cuda/include.
const std::string& toolkit_include_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    auto has_headers = [&](const fs::path& p) { return fs::exists(p / "cuda_fp16.h", ec); };
    if (const char* home = std::getenv("CUDA_HOME"); home && *home) {
      if (has_headers(fs::path(home) / "include")) return (fs::path(home) / "include").string();
    }
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) && info.dli_fname) {
      auto lib_dir = fs::path(info.dli_fname).parent_path();
      for (auto candidate : {lib_dir / ".." / "include", lib_dir / ".." / ".." / "include"}) {
        if (has_headers(candidate)) return fs::weakly_canonical(candidate, ec).string();
      }
    }
    return std::string("/usr/local/cuda/include");
  }();
  return dir;
}

std::string get_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

}  // namespace

Target Target::for_device(const cuda::DeviceProperties& props) {
  int cc = props.compute_major * 10 + props.compute_minor;
  const auto& archs = supported_archs();
  KILN_CHECK(!archs.empty() && cc >= archs.front(),
             "device '{}' has compute capability {}.{}, older than the oldest arch NVRTC {} "
             "supports (sm_{})",
             props.name, props.compute_major, props.compute_minor, version().to_string(),
             archs.empty() ? 0 : archs.front());
  int best = archs.front();
  for (int a : archs)
    if (a <= cc) best = a;
  Target t{best / 10, best % 10, false, false};
  if (!props.is_virtual && best == cc) {
    t.cubin = true;
    t.arch_specific = props.compute_major >= 9;  // sm_90a, sm_100a, sm_120a: exact-arch features
  }
  return t;
}

std::string Target::arch() const {
  return fmt::format("{}_{}{}{}", cubin ? "sm" : "compute", major, minor,
                     cubin && arch_specific ? "a" : "");
}

std::string Target::arch_option() const {
  return "-arch=" + arch();
}

const KernelResources* CompiledModule::kernel(std::string_view n) const {
  for (const auto& k : kernels)
    if (k.name == n) return &k;
  return nullptr;
}

std::optional<std::string> CompiledModule::lowered_name(std::string_view expression) const {
  for (const auto& [expr, lowered] : lowered_names)
    if (expr == expression) return lowered;
  return std::nullopt;
}

std::string Version::to_string() const {
  return fmt::format("NVRTC {}.{} (build {})", major, minor, build.empty() ? "?" : build);
}

const Version& version() {
  static const Version version = [] {
    Version v;
    check(nvrtcVersion(&v.major, &v.minor), "nvrtcVersion", "");
    // NVRTC has no build query; its PTX header says "Cuda compilation tools, release 13.0,
    // V13.0.88" and "Compiler Build ID: CL-36424714". Compile an empty kernel once to read them.
    Program program;
    const char* arch = "-arch=compute_75";
    if (nvrtcCreateProgram(&program.handle, "__global__ void k() {}", "version.cu", 0, nullptr,
                           nullptr) == NVRTC_SUCCESS &&
        nvrtcCompileProgram(program.handle, 1, &arch) == NVRTC_SUCCESS) {
      size_t size = 0;
      nvrtcGetPTXSize(program.handle, &size);
      std::string ptx(size, '\0');
      nvrtcGetPTX(program.handle, ptx.data());
      auto field = [&](std::string_view key, std::string_view stop) {
        auto p = ptx.find(key);
        if (p == std::string::npos) return std::string();
        p += key.size();
        return ptx.substr(p, ptx.find_first_of(stop, p) - p);
      };
      v.build = field(", V", "\n");
      auto id = field("Compiler Build ID: ", "\n");
      if (!v.build.empty() && !id.empty()) v.build += " " + id;
    }
    if (v.build.empty()) v.build = fmt::format("{}.{}", v.major, v.minor);
    return v;
  }();
  return version;
}

const std::vector<int>& supported_archs() {
  static const std::vector<int> archs = [] {
    int n = 0;
    check(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs", "");
    std::vector<int> a(n);
    if (n > 0) check(nvrtcGetSupportedArchs(a.data()), "nvrtcGetSupportedArchs", "");
    std::sort(a.begin(), a.end());
    return a;
  }();
  return archs;
}

std::vector<std::string> program_options(const Target& target, const ProgramOptions& options) {
  std::vector<std::string> out;
  out.push_back(target.arch_option());
  if (options.toolkit_include) {
    out.push_back("-I" + toolkit_include_dir());
    // CUDA 13 moved libcu++ (cuda/std/...), which cooperative_groups needs, under include/cccl.
    static const bool has_cccl = std::filesystem::exists(toolkit_include_dir() + "/cccl/cuda/std");
    if (has_cccl) out.push_back("-I" + toolkit_include_dir() + "/cccl");
  }
  if (target.cubin && options.ptxas_verbose) out.push_back("--ptxas-options=-v");
  if (options.line_info) out.push_back("-lineinfo");
  for (const auto& f : options.flags) out.push_back(f);
  return out;
}

const std::string& version_id() {
  static const std::string id = [] {
    int major = 0, minor = 0;
    check(nvrtcVersion(&major, &minor), "nvrtcVersion", "");
    // The library file itself tells patch releases apart without compiling anything (version()
    // compiles a kernel to read the build): its resolved path, size and modification time.
    std::string file = "?";
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) && info.dli_fname) {
      std::error_code ec;
      auto path = std::filesystem::canonical(info.dli_fname, ec);
      if (!ec) {
        auto size = std::filesystem::file_size(path, ec);
        auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
        file = fmt::format("{}:{}:{}", path.string(), ec ? 0 : size, ec ? 0 : mtime);
      }
    }
    return fmt::format("{}.{}:{}", major, minor, file);
  }();
  return id;
}

CompiledModule compile_program(std::string_view source, std::string_view name, const Target& target,
                               const ProgramOptions& options) {
  auto start = std::chrono::steady_clock::now();
  CompiledModule out;
  out.name = std::string(name);
  out.target = target;
  out.options = program_options(target, options);

  Program program;
  std::string src(source), file(name);
  check(nvrtcCreateProgram(&program.handle, src.c_str(), file.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram", name);
  for (const auto& expr : options.name_expressions)
    check(nvrtcAddNameExpression(program.handle, expr.c_str()), "nvrtcAddNameExpression", name);

  std::vector<const char*> argv;
  for (const auto& o : out.options) argv.push_back(o.c_str());
  nvrtcResult result =
      nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
  out.log = get_log(program.handle);
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION) {
    auto excerpt = source_excerpt(source, name, out.log);
    throw CompileError(fmt::format("{} failed to compile '{}' for {} ({}) with options "
                                   "[{}]:\n{}{}{}",
                                   version().to_string(), name, target.arch(),
                                   nvrtcGetErrorString(result), fmt::join(out.options, " "),
                                   out.log, excerpt.empty() ? "" : "source:\n", excerpt),
                       out.log, excerpt);
  }
  check(result, "nvrtcCompileProgram", name);

  size_t size = 0;
  check(nvrtcGetPTXSize(program.handle, &size), "nvrtcGetPTXSize", name);
  out.ptx.resize(size);
  check(nvrtcGetPTX(program.handle, out.ptx.data()), "nvrtcGetPTX", name);
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  if (target.cubin) {
    check(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize", name);
    out.cubin.resize(size);
    check(nvrtcGetCUBIN(program.handle, out.cubin.data()), "nvrtcGetCUBIN", name);
  }
  for (const auto& expr : options.name_expressions) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(program.handle, expr.c_str(), &lowered), "nvrtcGetLoweredName", name);
    out.lowered_names.emplace_back(expr, lowered);
  }

  out.kernels = parse_ptxas_info(out.log);
  for (const auto& entry : ptx_entries(out.ptx)) {
    bool found = false;
    for (auto& k : out.kernels)
      if (k.name == entry) k.is_entry = found = true;
    if (!found) out.kernels.push_back(KernelResources{.name = entry, .is_entry = true});
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace kiln::nvrtc
