// Whether each step of a plan could be captured into a CUDA graph as it runs today: a replay
// repeats the captured launches at fixed addresses, so a step that allocates outside the plan's
// arena, talks to the host, reserves a device-check flag per launch or goes through dispatch
// cannot be replayed as captured. The plan phase after buffer assignment.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/buffer_assignment.h"
#include "jit/plan_step.h"

namespace kiln::jit::plan_build {

// Sets each step's capture_blocker: the first reason it could not be captured, or empty.
void mark_capture_blockers(const graph::Graph& g, std::vector<PlanStep>& steps,
                           const BufferAssignment& buffers);

// Whether a plan keeps its device copy of input `in` between calls (KernelPlan::device_copy): a
// tensor the trace made on the host, which nothing else can write, that no call returns or
// writes in place. A captured host tensor is uploaded on every call: its data can change through
// data() with no write kiln sees.
bool keeps_upload(const graph::Graph& g, const graph::Input& in);

}  // namespace kiln::jit::plan_build
