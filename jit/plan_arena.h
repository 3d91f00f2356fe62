// The device memory a plan's buffers (buffer_assignment.h) live in. Blocks come from one pool
// the whole process shares and are lent to a call for its length, so that a forward and its
// backward, which one thread never runs at once, share one block; a plan asks for the block it
// had last, so at the same sizes its values keep their addresses from call to call (what a CUDA
// graph replay needs).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "jit/buffer_assignment.h"
#include "runtime/storage.h"

namespace kiln::jit {

// The largest arena any plan was lent since the last reset, and the bytes its buffers hold at
// once at most (no layout of them is smaller): what bench_zoo prints beside peak memory.
struct ArenaStats {
  std::int64_t largest_bytes = 0;
  std::int64_t largest_live_bound = 0;
};
ArenaStats arena_stats();
void reset_arena_stats();

// KILN_PLAN_ARENA=0: plans allocate every value their kernels write, as eager ops do (read
// once per process; for comparing memory and finding a buffer-assignment bug).
bool plan_arena_enabled();

class PlanArena {
 public:
  explicit PlanArena(std::shared_ptr<const BufferAssignment> buffers);
  ~PlanArena();

  struct Binding;  // a block and the buffers' storages in it, for one call's sizes

  // One call's buffers: the storage of each buffer, by buffer index (buffer_assignment.h).
  class Lease {
   public:
    Lease();
    Lease(PlanArena* arena, std::unique_ptr<Binding> binding);
    Lease(Lease&&) noexcept;
    Lease& operator=(Lease&&) noexcept;
    ~Lease();

    // Null where the plan has no buffers.
    const std::shared_ptr<Storage>& storage(int buffer) const;

   private:
    PlanArena* arena_ = nullptr;
    std::unique_ptr<Binding> binding_;
  };

  // The buffers at this call's sizes: the same block and offsets as the last call at the same
  // sizes, when no other call holds them now.
  Lease lend(std::span<const std::int64_t> symbol_values);

  // The block's address at the last call (0 before the first): the same while the sizes are.
  std::uintptr_t last_address() const;

 private:
  void give_back(std::unique_ptr<Binding> binding);
  // The buffers' storages over `block` (the binding's views and slots).
  void bind_views(Binding& b, const Storage& block,
                  std::span<const std::int64_t> symbol_values) const;

  static constexpr std::size_t kIdleKept = 4;  // bindings kept for sizes seen before
  std::shared_ptr<const BufferAssignment> buffers_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Binding>> idle_;  // bindings no call holds, most recent last
  std::uintptr_t last_address_ = 0;
};

}  // namespace kiln::jit
