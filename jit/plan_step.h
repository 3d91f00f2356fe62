// The typed steps of a KernelPlan: what running one fusion group takes, each kind with the data
// only it needs, all decided when the plan is built (plan_build.h) and never changed after.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "jit/codegen/combo_kernel.h"
#include "jit/codegen/group_kernel.h"
#include "jit/output_placement.h"

namespace kiln::jit {
namespace codegen {
struct EpilogueLowering;  // epilogue_lowering.h: kept out of the public headers (cublasLt.h)
struct SkinnyGemm;        // skinny_gemm.h
}

// A generated kernel (pointwise, row reduction or normalization).
struct KernelStep {
  codegen::GroupKernel kernel;
  std::vector<SymExpr> domain;
  std::optional<Shape> static_domain;  // `domain` when no size in it is symbolic
  // The domain's dims in the order the kernel walks them, so that it writes its outputs laid
  // out for the permute that reads them (place_kernel_outputs); empty: as traced.
  std::vector<std::int64_t> order;
};

// Independent pointwise kernels launched as ONE combo kernel (plan_combine.cpp). Each member
// keeps its step (and its group's nodes), run one by one where the combo refuses a call.
struct ComboStep {
  std::shared_ptr<const codegen::ComboKernel> kernel;
  std::vector<KernelStep> members;
  std::vector<int> groups;              // per member: its fusion group
  std::vector<std::vector<int>> nodes;  // per member: its group's nodes
};

// A matmul and the epilogue group after it as ONE cuBLASLt call. When a per-call rule refuses
// it, the matmul runs eagerly and the absorbed steps run as they would have.
struct LibraryStep {
  std::shared_ptr<const codegen::EpilogueLowering> lowering;
  // The positions in the plan of the steps the call computes (skipped then): the epilogue group,
  // and a BGRADB call's widening cast of its product.
  std::vector<int> absorbs;
};

// A matmul of few rows as ONE generated kernel (codegen/skinny_gemm.h) that also computes the
// pointwise group after it and reads the weight through its cast: those groups' steps are
// AbsorbedSteps. It takes every call of its (static) shapes, so nothing falls back.
struct SkinnyGemmStep {
  std::shared_ptr<const codegen::SkinnyGemm> gemm;
};

// A group another step computes (a skinny GEMM's epilogue or weight cast): it runs nothing.
struct AbsorbedStep {
  int by_group = -1;
};

// An attention or attention-backward node, with its outputs written where their readers want
// them when that saves a copy (jit/output_placement.h).
struct AttentionStep {
  std::optional<OutputPlacement> placement;
};

// Views of a value made elsewhere: a stride change on the host, no launch.
struct HostViewStep {};

// Nodes run one by one as eager CUDA ops (a matmul without an epilogue, indexing, a scan,
// movement, a transfer): each is a library call or a generated kernel of its own.
struct EagerStep {
  // A cat whose result a placed attention backward makes (its output value, or -1): skipped
  // when that value is already there.
  int placed_value = -1;
};

// A node no template renders, run by dispatch.
struct FallbackStep {
  std::string reason;  // the fuser's
};

using StepAction = std::variant<KernelStep, LibraryStep, AttentionStep, HostViewStep, EagerStep,
                                FallbackStep, ComboStep, SkinnyGemmStep, AbsorbedStep>;

struct PlanStep {
  int group = -1;  // the partition's fusion group it runs
  std::vector<int> nodes;
  std::string note;  // what it is, or why code generation does not cover it (KernelPlan::str)
  // Values no later step reads: dropped after this one, so that the caching allocator hands
  // their blocks to later kernels.
  std::vector<int> releases;
  StepAction action;
  // What would keep a CUDA graph from capturing the step as it runs now (plan_capture.h);
  // empty: nothing.
  std::string capture_blocker;

  template <class T>
  const T* as() const {
    return std::get_if<T>(&action);
  }
};

}  // namespace kiln::jit
