// Whether each step of a plan can be captured into a CUDA graph (jit/cuda_graphs.h): a replay
// repeats the captured launches at fixed addresses with the arguments they had, so a step that
// reads the host on every call (an upload) or goes through dispatch (which may) is left out.
// The plan phase after buffer assignment.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/buffer_assignment.h"
#include "jit/plan_step.h"

namespace kiln::jit::plan_build {

// Sets each step's capture_blocker: the first reason it could not be captured, or empty.
void mark_capture_blockers(const graph::Graph& g, std::vector<PlanStep>& steps);

// Whether a plan keeps its device copy of input `in` between calls (KernelPlan::device_copy): a
// tensor the trace made on the host, which nothing else can write, that no call returns or
// writes in place. A captured host tensor is uploaded on every call: its data can change through
// data() with no write kiln sees.
bool keeps_upload(const graph::Graph& g, const graph::Input& in);

}  // namespace kiln::jit::plan_build
