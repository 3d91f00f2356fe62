// Lending plans the blocks their buffers live in (see plan_arena.h).
#include "jit/plan_arena.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "runtime/log.h"
#include "runtime/tensor.h"

namespace kiln::jit {
namespace {

// The device blocks no call holds, shared by every plan. A few are kept: more only come from
// calls at sizes that grew, whose old blocks the plans' next calls no longer fit in.
class BlockPool {
 public:
  static BlockPool& instance() {
    static auto* pool = new BlockPool;  // outlives the plans that give blocks back at exit
    return *pool;
  }

  // `preferred` when it is free and large enough, else the smallest free block that is, else a
  // new one; free blocks too small for the request are then returned to the allocator, so that
  // a forward and its larger backward end up sharing the larger block.
  std::shared_ptr<Storage> take(std::int64_t bytes, const Storage* preferred) {
    const auto need = static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1));
    std::vector<std::shared_ptr<Storage>> dropped;  // freed outside the lock
    {
      std::lock_guard lock(mutex_);
      auto fits = [&](const auto& b) { return b->nbytes() >= need; };
      auto it = std::find_if(free_.begin(), free_.end(),
                             [&](const auto& b) { return b.get() == preferred && fits(b); });
      if (it == free_.end())
        for (auto j = free_.begin(); j != free_.end(); ++j)
          if (fits(*j) && (it == free_.end() || (*j)->nbytes() < (*it)->nbytes())) it = j;
      if (it != free_.end()) {
        auto block = std::move(*it);
        free_.erase(it);
        return block;
      }
      dropped = std::move(free_);
      free_.clear();
    }
    dropped.clear();
    const auto words = static_cast<std::int64_t>((need + 7) / 8);
    return empty({words}, DType::i64, Device::cuda()).impl().storage;
  }

  void put(std::shared_ptr<Storage> block) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(block));
    if (free_.size() > kKept)
      free_.erase(std::min_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
        return a->nbytes() < b->nbytes();
      }));
  }

 private:
  static constexpr std::size_t kKept = 4;
  std::mutex mutex_;
  std::vector<std::shared_ptr<Storage>> free_;
};

std::mutex stats_mutex;
ArenaStats stats;

void note_lent(const ArenaLayout& layout) {
  std::lock_guard lock(stats_mutex);
  if (layout.bytes <= stats.largest_bytes) return;
  stats.largest_bytes = layout.bytes;
  stats.largest_live_bound = layout.live_bound;
}

}  // namespace

bool plan_arena_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_PLAN_ARENA");
    return !v || std::string_view(v) != "0";
  }();
  return enabled;
}

ArenaStats arena_stats() {
  std::lock_guard lock(stats_mutex);
  return stats;
}

void reset_arena_stats() {
  std::lock_guard lock(stats_mutex);
  stats = ArenaStats{};
}

// The buffers' storages over one block address, made once and kept while warm calls get the
// same block. The slots a call hands out alias this object's count: a view that outlives the
// call keeps it, and through `block` the memory, alive.
struct SlotViews {
  void* base = nullptr;
  std::shared_ptr<Storage> block;  // set while a call runs
  std::vector<std::unique_ptr<Storage>> storages;
};

struct PlanArena::Binding {
  std::vector<std::int64_t> key;  // the symbol values the layout is for
  ArenaLayout layout;
  // The block the last call had, to ask for again (never dereferenced: the pool may have freed
  // it, and a new block at its address serves as well).
  const Storage* block_id = nullptr;
  std::shared_ptr<SlotViews> views;             // holds the block while a call runs
  std::vector<std::shared_ptr<Storage>> slots;  // per buffer: its bytes (aliasing `views`)

  // Whether a tensor over a buffer is still alive (each slot holds one count of `views`).
  bool escaped() const { return views && views.use_count() > 1 + static_cast<long>(slots.size()); }
};

PlanArena::Lease::Lease(PlanArena* arena, std::unique_ptr<Binding> binding)
    : arena_(arena), binding_(std::move(binding)) {}

PlanArena::Lease::Lease(Lease&& other) noexcept
    : arena_(std::exchange(other.arena_, nullptr)), binding_(std::move(other.binding_)) {}

PlanArena::Lease& PlanArena::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (arena_ && binding_) arena_->give_back(std::move(binding_));
    arena_ = std::exchange(other.arena_, nullptr);
    binding_ = std::move(other.binding_);
  }
  return *this;
}

PlanArena::Lease::~Lease() {
  if (arena_ && binding_) arena_->give_back(std::move(binding_));
}

PlanArena::PlanArena(std::shared_ptr<const BufferAssignment> buffers)
    : buffers_(std::move(buffers)) {}

PlanArena::~PlanArena() = default;

PlanArena::Lease::Lease() = default;

const std::shared_ptr<Storage>& PlanArena::Lease::storage(int buffer) const {
  static const std::shared_ptr<Storage> none;
  return binding_ ? binding_->slots[static_cast<std::size_t>(buffer)] : none;
}

PlanArena::Lease PlanArena::lend(std::span<const std::int64_t> symbol_values) {
  if (buffers_->empty()) return {};
  auto same_sizes = [&](const Binding& b) {
    return std::equal(b.key.begin(), b.key.end(), symbol_values.begin(), symbol_values.end());
  };
  std::unique_ptr<Binding> b;
  {
    std::lock_guard lock(mutex_);
    auto it =
        std::find_if(idle_.rbegin(), idle_.rend(), [&](const auto& x) { return same_sizes(*x); });
    if (it != idle_.rend()) {
      b = std::move(*it);
      idle_.erase(std::next(it).base());
    }
  }
  if (!b) {
    b = std::make_unique<Binding>();
    b->key.assign(symbol_values.begin(), symbol_values.end());
    b->layout = buffers_->layout(symbol_values);
  }
  note_lent(b->layout);
  std::shared_ptr<Storage> block = BlockPool::instance().take(b->layout.bytes, b->block_id);
  b->block_id = block.get();
  if (!b->views || b->views->base != block->data()) bind_views(*b, *block, symbol_values);
  b->views->block = std::move(block);
  {
    std::lock_guard lock(mutex_);
    last_address_ = reinterpret_cast<std::uintptr_t>(b->views->base);
  }
  return Lease(this, std::move(b));
}

void PlanArena::bind_views(Binding& b, const Storage& block,
                           std::span<const std::int64_t> symbol_values) const {
  b.views = std::make_shared<SlotViews>();
  b.views->base = block.data();
  auto* base = static_cast<unsigned char*>(block.data());
  const auto& buffers = buffers_->buffers();
  b.slots.clear();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    b.views->storages.push_back(std::make_unique<Storage>(
        base + b.layout.offsets[i], static_cast<std::size_t>(buffers[i].bytes(symbol_values)),
        block.device(), nullptr));
    b.slots.emplace_back(b.views, b.views->storages.back().get());
  }
}

void PlanArena::give_back(std::unique_ptr<Binding> b) {
  // A tensor over a buffer still alive after the call would see the next call's values: its
  // block is left to it and never lent again.
  if (b->escaped()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log_line("kiln: a plan's buffer outlived its call; its arena block is retired");
    b->slots.clear();
    b->views.reset();  // the tensors over it hold the views, and the block, now
  } else {
    BlockPool::instance().put(std::move(b->views->block));
  }
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(b));
  if (idle_.size() > kIdleKept) idle_.erase(idle_.begin());
}

std::uintptr_t PlanArena::last_address() const {
  std::lock_guard lock(mutex_);
  return last_address_;
}

}  // namespace kiln::jit
