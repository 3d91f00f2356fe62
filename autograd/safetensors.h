// The safetensors format, the one the ecosystem exchanges weights in: a little-endian u64
// header length, a JSON header (name -> dtype, shape, data_offsets; optional "__metadata__"),
// then the tensors' bytes, row-major. kiln reads and writes BOOL, I32, I64, F16, BF16, F32 and
// F64; files from other tools are validated as the format demands (offsets in bounds, no holes or
// overlaps, sizes that match), with errors that name the file and the tensor.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the header's order
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (on any device, any layout) to `path` through a temporary file, so that a
// reader never sees half a file.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace kiln
