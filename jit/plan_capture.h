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

// Whether `v` or a view of it is an output of `g` or written in place: a device copy of it could
// then be written after the call, so a plan makes it anew per call (KernelPlan::device_copy).
bool written_or_returned(const graph::Graph& g, int v);

}  // namespace kiln::jit::plan_build
