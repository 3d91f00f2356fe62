// Running a plan while hearing of each output as soon as the step that makes it has run: a
// compiled backward reports each gradient as its plan makes it (autograd/grad_ready.h), so a
// data-parallel reduction of it overlaps the rest of the plan.
#pragma once

#include <functional>

#include "jit/kernel_plan.h"

namespace kiln::jit {

using OutputReady = std::function<void(std::size_t output, const Tensor& value)>;

// KernelPlan::run, calling `on_output(k, value)` right after the step that produces output k
// (before any step for an output that is an input; never for one no step produces).
// `given_up` (when not empty) is the caller's tensors behind `args`, handed to the plan: it
// drops them once read, so each is freed after its last reader, not when the plan returns.
std::vector<Tensor> run_reporting_outputs(const KernelPlan& plan, const graph::Graph& graph,
                                          std::span<const CallArg> args,
                                          std::span<const std::int64_t> symbol_values,
                                          const OutputReady& on_output,
                                          std::span<Tensor> given_up = {});

}  // namespace kiln::jit
