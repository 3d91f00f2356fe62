// The version of kiln's code generator, part of every kernel cache key: bump it when a change
// to code generation or to how a kernel is launched makes binaries cached by an older kiln
// unusable although their source text is the same (a new launch ABI, a changed template helper
// pulled in by name, a different NVRTC option set outside ProgramOptions).
#pragma once

namespace kiln::jit::codegen {

inline constexpr int kCodegenVersion = 4;

}  // namespace kiln::jit::codegen
