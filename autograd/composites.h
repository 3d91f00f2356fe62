// The composite ops (autograd/ops.h) and the primitives each decomposes into: composites never
// appear in graphs, tracing records their primitives. A test traces every composite and checks
// what it records against this table.
#pragma once

#include <string_view>
#include <vector>

#include "runtime/op.h"

namespace kiln {

struct CompositeInfo {
  std::string_view name;
  std::vector<OpId> primitives;  // every primitive its decomposition may record
};

const std::vector<CompositeInfo>& all_composites();

}  // namespace kiln
