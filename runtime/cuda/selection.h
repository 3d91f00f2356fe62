// Choosing a CUDA backend: parsing KILN_CUDA=driver|virtual|auto, the auto fallback to the
// virtual GPU, and process-wide instances of each kind (for tests that need a specific one).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/cuda/backend.h"

namespace kiln::cuda {

enum class BackendChoice { driver, virtual_, auto_ };

// "driver", "virtual", "auto" (or empty: auto). Anything else is a kiln::Error naming the value
// and the choices.
BackendChoice parse_backend_choice(std::string_view value);

struct Selection {
  std::unique_ptr<Backend> backend;
  std::string notice;  // the one line auto prints when it falls back to the virtual GPU; or empty
};
// A new backend for `choice`. kAuto takes the driver when libcuda.so.1 loads and reports a GPU,
// else the virtual GPU with `notice` set. kDriver without a driver throws.
Selection select_backend(BackendChoice choice);

// The process-wide backend of one kind: "driver", "virtual", or "auto" (= backend()). Created on
// first use and kept for the life of the process; thread-safe. backend() returns the same object
// as backend(kind) for the kind it chose.
Backend& backend(std::string_view kind);

}  // namespace kiln::cuda
