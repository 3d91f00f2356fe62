// Kernel cache keys: what makes two compiled kernels interchangeable. A key is XXH3-128 over the
// kernel's code (its source without comment lines, which name graphs, nodes and traced sizes
// that do not change what NVRTC makes), the NVRTC options (which name the target arch, PTX or
// cubin), the NVRTC library's identity and kiln's codegen version, so a changed toolkit, arch or
// code generator never finds an old binary. Also the checksums that cache entries store for their
// files.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cache {

struct KeyInputs {
  std::string_view source;               // CUDA C++; its comment lines are not part of the key
  std::span<const std::string> options;  // as passed to NVRTC (nvrtc::program_options)
  std::string_view arch;                 // "compute_90", "sm_90a": PTX vs cubin and the arch
  std::string_view nvrtc_version;        // nvrtc::version_id()
  int codegen_version = 0;               // jit::codegen::kCodegenVersion
};

// 32 lowercase hex digits.
std::string kernel_key(const KeyInputs& inputs);

// What identifies a kernel's source: the source without its whole-line `//` comments (and
// without blank lines), so the same code rendered for two graphs, or for a
// static and a dynamic size of one graph, is one kernel.
std::string kernel_code(std::string_view source);

// XXH3-128 of `data`, 32 lowercase hex digits.
std::string checksum(std::string_view data);

// Options with surrounding whitespace trimmed and empty ones dropped; order is kept (it matters
// to NVRTC: include paths are searched in order, a later flag overrides an earlier one).
std::vector<std::string> normalized_options(std::span<const std::string> options);

// True for a string of exactly 32 lowercase hex digits.
bool is_key(std::string_view text);

}  // namespace kiln::cache
