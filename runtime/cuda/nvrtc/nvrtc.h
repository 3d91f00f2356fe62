// The NVRTC wrapper: CUDA C++ source -> PTX (virtual GPU) or cubin (real GPU), with the build log
// and per-kernel resources (registers, spills, shared memory, stack) parsed from ptxas -v.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cuda/backend.h"
#include "runtime/error.h"

namespace kiln::nvrtc {

// What NVRTC produces code for. Built from the device so the choice is explicit and testable.
struct Target {
  int major = 9;
  int minor = 0;
  bool cubin = false;  // true: sm_XY SASS (real GPU); false: compute_XY PTX only
  bool arch_specific =
      false;  // the `a` suffix (sm_90a, sm_100a, ...): a cubin for exactly one arch

  // A real GPU gets a cubin for its exact arch (with `a` from compute capability 9.0 on); the
  // virtual GPU gets PTX. An arch newer than NVRTC knows is clamped to the newest one it supports
  // and compiled to PTX, which the driver JITs forward.
  static Target for_device(const cuda::DeviceProperties& props);
  static Target ptx(int major, int minor) { return Target{major, minor, false, false}; }
  static Target sass(int major, int minor, bool arch_specific = false) {
    return Target{major, minor, true, arch_specific};
  }

  std::string arch() const;         // "compute_90", "sm_90", "sm_90a"
  std::string arch_option() const;  // "-arch=" + arch()
  bool operator==(const Target&) const = default;
};

// Resources ptxas reports for one kernel (or non-inlined device function). -1 when not reported
// (a PTX-only target never runs ptxas).
struct KernelResources {
  std::string name;  // the symbol as in the PTX (mangled unless extern "C")
  bool is_entry = false;
  int registers = -1;
  int barriers = -1;
  long stack_frame_bytes = -1;
  long spill_store_bytes = -1;
  long spill_load_bytes = -1;
  long shared_bytes = -1;    // static shared memory
  long constant_bytes = -1;  // cmem[0]: kernel parameters and constants
};

struct CompiledModule {
  std::string name;
  Target target;
  std::vector<std::string> options;  // exactly what was passed to nvrtcCompileProgram
  std::string ptx;
  std::string cubin;                     // empty for a PTX target
  std::string log;                       // NVRTC's log: warnings and, for a cubin, ptxas' report
  std::vector<KernelResources> kernels;  // every .entry, plus functions ptxas reported
  // name expression (e.g. "kern<float>") -> lowered (mangled) name, for templated kernels
  std::vector<std::pair<std::string, std::string>> lowered_names;
  double compile_ms = 0;

  // What Backend::load_module takes: the cubin when there is one, else the PTX.
  std::string_view image() const { return cubin.empty() ? std::string_view(ptx) : cubin; }
  const KernelResources* kernel(std::string_view name) const;
  std::optional<std::string> lowered_name(std::string_view expression) const;
};

struct ProgramOptions {
  std::vector<std::string> flags;             // extra NVRTC options, e.g. "--use_fast_math"
  std::vector<std::string> name_expressions;  // templated kernels to instantiate and look up
  bool toolkit_include = true;                // add -I<CUDA toolkit>/include (cuda_fp16.h...)
  bool ptxas_verbose = true;                  // --ptxas-options=-v for cubin targets
  bool line_info = false;                     // -lineinfo
};

// A compile that NVRTC rejected: the log, and the source lines around each error.
class CompileError : public Error {
 public:
  CompileError(std::string message, std::string log, std::string excerpt)
      : Error(std::move(message)), log_(std::move(log)), excerpt_(std::move(excerpt)) {}
  const std::string& log() const { return log_; }
  const std::string& source_excerpt() const { return excerpt_; }

 private:
  std::string log_;
  std::string excerpt_;
};

// Exactly the options compile_program passes to NVRTC for `target` and `options` (kernel cache
// keys are computed from them).
std::vector<std::string> program_options(const Target& target, const ProgramOptions& options = {});

// Compiles `source` (its file name in messages is `name`). Thread-safe: each call owns its own
// nvrtcProgram, and NVRTC compiles distinct programs concurrently.
CompiledModule compile_program(std::string_view source, std::string_view name, const Target& target,
                               const ProgramOptions& options = {});

struct Version {
  int major = 0;
  int minor = 0;
  std::string build;              // from NVRTC's PTX header, e.g. "13.0.88 CL-36424714"
  std::string to_string() const;  // "NVRTC 13.0 (build 13.0.88 CL-36424714)"
};
const Version& version();
// Identifies the NVRTC library in use without compiling anything (version() compiles an empty
// kernel once): "13.0:<resolved library path>:<size>:<mtime>". Part of every kernel cache key.
const std::string& version_id();
// Compute capabilities (e.g. 75, 80, 90) this NVRTC can target, ascending.
const std::vector<int>& supported_archs();

// Parses ptxas -v output ("Compiling entry function", "Function properties for", "Used N
// registers", "N bytes smem", ...) into per-function resources; exposed for tests.
std::vector<KernelResources> parse_ptxas_info(std::string_view log);
// Names of every `.entry` in a PTX module.
std::vector<std::string> ptx_entries(std::string_view ptx);
// The source lines around each "name(LINE): error" in `log`, numbered, errors marked with '>'.
std::string source_excerpt(std::string_view source, std::string_view name, std::string_view log,
                           int context = 3);

}  // namespace kiln::nvrtc
