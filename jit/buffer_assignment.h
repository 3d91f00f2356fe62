// Buffer assignment, the plan phase after the steps are decided: every value a generated kernel
// writes that does not leave the call gets a buffer in the plan's arena, reused by liveness, and
// a pointwise kernel writes over an input that dies there. The layout (each buffer's offset) is a
// function of the call's sizes alone, so a warm call at the same sizes finds every value at the
// same address (plan_arena.h keeps the memory).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/plan_step.h"

namespace kiln::jit {

// A run of plan positions [first, last] one buffer must hold its bytes over.
struct BufferInterval {
  int first = 0, last = 0;
};

// One region of the arena: the values that share it (a value and the ones written in place over
// it), and the positions it is live over.
struct Buffer {
  std::vector<int> values;  // in the order they are written
  BufferInterval live;
  std::vector<SymExpr> sizes;  // of the first value (those written in place are the same)
  std::size_t itemsize = 0;

  std::int64_t bytes(std::span<const std::int64_t> symbol_values) const;
};

// Where each buffer sits at one call's sizes.
struct ArenaLayout {
  std::vector<std::int64_t> offsets;  // per buffer, in bytes
  std::int64_t bytes = 0;             // the arena's size
  // The most bytes the buffers hold at one position: no layout can be smaller.
  std::int64_t live_bound = 0;
};

class BufferAssignment {
 public:
  BufferAssignment() = default;
  BufferAssignment(const graph::Graph& g, const std::vector<PlanStep>& steps);

  // Per value of the graph: its buffer, or -1 (a graph input, a value that leaves the call, or
  // one no generated kernel writes: those are allocated as before).
  int buffer_of(int value) const {
    return value < static_cast<int>(buffer_of_.size()) ? buffer_of_[value] : -1;
  }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // Per value: the graph input (its value) whose memory the kernel writing it writes it into,
  // or -1. The final value of an input the function writes in place, computed element by
  // element by a pointwise kernel after the input's last read, needs no copy back then; nor
  // does one index_copy computes over the input, whose kernel writes only the source's slices.
  int written_into(int value) const {
    return value < static_cast<int>(written_into_.size()) ? written_into_[value] : -1;
  }
  // Values written in place over an input of their kernel.
  int in_place_count() const { return in_place_; }
  bool empty() const { return buffers_.empty(); }

  // Greedy by size: the largest buffer first, each at the lowest offset that overlaps no placed
  // buffer live at the same time (the heap simulator of XLA and TFLite's arena planner).
  ArenaLayout layout(std::span<const std::int64_t> symbol_values) const;

  // "arena 12.3 kB for 9 values in 9 buffers (liveness bound 12.3 kB, 2 written in place)" for
  // a layout, and per step the buffers of what it writes there.
  std::string summary(const ArenaLayout& layout) const;
  std::string step_note(std::size_t position, const ArenaLayout& layout) const;

 private:
  std::vector<int> buffer_of_;
  std::vector<int> written_into_;
  std::vector<Buffer> buffers_;
  std::vector<std::vector<int>> writes_of_step_;  // per position: values it writes to buffers
  int in_place_ = 0;
  struct RowsWritten {
    int step, value, input;
  };
  std::vector<RowsWritten> rows_written_;

  friend struct BufferAssigner;
};

// The values a step writes with a generated kernel, in the order its runner returns them.
std::vector<int> kernel_writes(const PlanStep& step);

}  // namespace kiln::jit
