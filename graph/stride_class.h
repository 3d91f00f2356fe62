// The memory layout classes that graphs record and guards check: row-major contiguous, a
// transposed matrix (contiguous once the last two dims swap), or anything else.
#pragma once

#include <string_view>

#include "runtime/tensor.h"

namespace kiln {

enum class StrideClass { contiguous, transposed, general };

StrideClass stride_class(const TensorImpl& t);
inline StrideClass stride_class(const Tensor& t) { return stride_class(t.impl()); }
std::string_view stride_class_name(StrideClass c);

}  // namespace kiln
