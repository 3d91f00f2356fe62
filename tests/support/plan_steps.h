// Counting a compiled plan's steps by type (jit/plan_step.h), as the plan tests assert them.
#pragma once

#include "jit/kernel_plan.h"

namespace kiln::test {

template <class Step>
int count_steps(const jit::KernelPlan& plan) {
  int n = 0;
  for (const auto& s : plan.steps()) n += s.as<Step>() != nullptr;
  return n;
}

}  // namespace kiln::test
