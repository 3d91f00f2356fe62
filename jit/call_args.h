// A compiled function's call arguments are graph's CallArg (graph/call_args.h), named in jit
// where its call API uses them.
#pragma once

#include "graph/call_args.h"

namespace kiln::jit {

using graph::CallArg;

}  // namespace kiln::jit
