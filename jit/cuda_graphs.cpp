// CUDA Graph replay of warm plans (cuda_graphs.h): warm-up, capture, replay, and the hand-over
// of outputs a replay would overwrite.
#include "jit/cuda_graphs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "graph/node_values.h"
#include "jit/accuracy_check.h"
#include "jit/codegen/launch_stats.h"
#include "jit/plan_arena.h"
#include "runtime/backend.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda_backend.h"
#include "runtime/device_checks.h"

namespace kiln::jit {

namespace {

cuda::DevicePtr address(const void* p) {
  return static_cast<cuda::DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
}

std::size_t bytes_of(const Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * itemsize(t.dtype());
}

// Where a graph's memory serves an output: one of its memories, or the memory of an input the
// function reads (a parameter it returns, a buffer it wrote in place), returned as it is.
constexpr int kInputsOwn = -1;
constexpr int kUndefined = -2;

// A tensor with `like`'s geometry over `storage` (no autograd).
Tensor over(const std::shared_ptr<Storage>& storage, const TensorImpl& like) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = like.shape;
  impl->strides = like.strides;
  impl->offset = like.offset;
  impl->dtype = like.dtype;
  return Tensor(std::move(impl));
}

}  // namespace

bool cuda_graphs_from_env() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_GRAPHS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

struct PlanGraphs::Recorded {
  int calls = 0;       // calls at these sizes so far
  std::string failed;  // why the capture failed: these sizes run without a graph
  cuda::GraphExec exec = nullptr;
  int pool = 0;  // the caching allocator's graph pool
  PlanArena::Lease lease;
  std::vector<Tensor> static_args;  // by argument index; undefined where no tensor is read
  // Inputs the function reads in place (graph input index, its data's address at capture).
  std::vector<std::pair<std::size_t, const void*>> fixed;
  // Arguments in the source's graph memory (read_in_place_from): argument index, address.
  struct Borrowed {
    std::size_t arg;
    const void* data;
    std::shared_ptr<Storage> memory;  // kept: the graph reads it at every replay
  };
  std::vector<Borrowed> borrowed;
  // Graph memory that outputs live in: the storage the capture made, and the one the last
  // replay handed out (alive while anything holds an output of that replay).
  struct Memory {
    std::shared_ptr<Storage> owned;
    std::weak_ptr<Storage> handed;
  };
  std::vector<Memory> memory;
  std::vector<Tensor> outputs;  // as captured
  std::vector<int> memory_of;   // per output: an index into `memory`, kInputsOwn or kUndefined
  std::shared_ptr<GraphDeviceChecks> checks;

  ~Recorded() {
    try {
      if (exec) cuda::backend().destroy_graph(exec);
    } catch (const Error&) {  // at exit the backend may be gone; its graphs go with it
    }
    release_memory();
  }

  // Gives back what the graph held: its pool's blocks serve everyone once freed.
  void release_memory() {
    outputs.clear();
    memory.clear();
    static_args.clear();
    borrowed.clear();
    lease = PlanArena::Lease{};
    checks.reset();
    if (pool) cuda_allocator().release_graph_pool(pool);
    pool = 0;
  }

  // Copies this call's arguments into the static buffers the graph reads.
  void copy_args(std::span<const CallArg> args, cuda::Stream stream) {
    for (std::size_t i = 0; i < static_args.size(); ++i) {
      if (!static_args[i].defined()) continue;
      const Tensor& t = *args[i].tensor;
      if (t.raw_data() == static_args[i].raw_data()) continue;
      cuda::backend().copy_device(address(static_args[i].raw_data()), address(t.raw_data()),
                                  bytes_of(t), stream);
      ++codegen::launch_stats().graph_input_copies;
    }
  }

  // Gives each memory an output of the last replay still lives in a home of its own (a copy)
  // before the next replay writes over it.
  std::int64_t hand_over(cuda::Stream stream) {
    std::int64_t moved = 0;
    for (Memory& m : memory) {
      std::shared_ptr<Storage> held = m.handed.lock();
      if (!held) continue;
      std::shared_ptr<Storage> home =
          backend_for(Device::Type::cuda).allocate(held->nbytes(), held->device(), false);
      cuda::backend().copy_device(address(home->data()), address(held->data()), held->nbytes(),
                                  stream);
      held->rehome(home->data(), [keep = home](void*) {});
      m.handed.reset();
      ++moved;
    }
    return moved;
  }

  // The outputs of a replay: views of fresh storages over the graph's memory.
  std::vector<Tensor> hand_out() {
    std::vector<std::shared_ptr<Storage>> handed(memory.size());
    for (std::size_t j = 0; j < memory.size(); ++j) {
      const auto& owned = memory[j].owned;
      handed[j] = std::make_shared<Storage>(owned->data(), owned->nbytes(), owned->device(),
                                            [keep = owned](void*) {});
      memory[j].handed = handed[j];
    }
    std::vector<Tensor> out;
    out.reserve(outputs.size());
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      const int j = memory_of[k];
      if (j == kUndefined)
        out.emplace_back();
      else if (j == kInputsOwn)
        out.push_back(over(outputs[k].impl().storage, outputs[k].impl()));
      else
        out.push_back(over(handed[static_cast<std::size_t>(j)], outputs[k].impl()));
    }
    return out;
  }

  // Sorts the captured outputs into graph memory and inputs' own memory.
  void classify_outputs(const graph::Graph& g, std::span<const CallArg> args) {
    std::vector<const void*> inputs_memory;
    for (const auto& [i, data] : fixed)
      inputs_memory.push_back(graph::input_value(g.inputs[i], args).impl().storage->data());
    for (const Tensor& t : outputs) {
      if (!t.defined()) {
        memory_of.push_back(kUndefined);
        continue;
      }
      const auto& storage = t.impl().storage;
      if (std::find(inputs_memory.begin(), inputs_memory.end(), storage->data()) !=
          inputs_memory.end()) {
        memory_of.push_back(kInputsOwn);
        continue;
      }
      auto it = std::find_if(memory.begin(), memory.end(),
                             [&](const Memory& m) { return m.owned->data() == storage->data(); });
      if (it == memory.end()) {
        memory.push_back({storage, {}});
        it = memory.end() - 1;
      }
      memory_of.push_back(static_cast<int>(it - memory.begin()));
    }
  }
};

PlanGraphs::PlanGraphs(int limit, std::string refusal)
    : limit_(limit), refusal_(std::move(refusal)) {}

PlanGraphs::~PlanGraphs() = default;

void PlanGraphs::note(std::string why) {
  if (std::find(notes_.begin(), notes_.end(), why) == notes_.end())
    notes_.push_back(std::move(why));
}

std::string PlanGraphs::refusal_of(const KernelPlan& plan, const graph::Graph& g,
                                   std::span<const CallArg> args) const {
  for (std::size_t i = 0; i < plan.steps().size(); ++i)
    if (!plan.steps()[i].capture_blocker.empty())
      return fmt::format("step {} {}", i, plan.steps()[i].capture_blocker);
  if (checking_accuracy()) return "KILN_CHECK=accuracy recomputes every step on the host";
  if (cuda::current_stream() == nullptr)
    return "the current stream is the legacy stream, which cannot capture";
  for (const auto& in : g.inputs) {
    if (in.kind != graph::InputKind::argument) continue;
    const Tensor& t = *args[static_cast<std::size_t>(in.arg_index)].tensor;
    if (source_ && source_->memory_at(t.impl().storage->data())) continue;  // read in place
    if (!t.device().is_cuda())
      return fmt::format("argument '{}' is on the host (a kernel takes its value as an argument)",
                         in.name);
    if (!t.is_contiguous())
      return fmt::format("argument '{}' is not contiguous (the graph's copy of it is)", in.name);
  }
  return "";
}

void PlanGraphs::capture(Recorded& r, const KernelPlan& plan, const graph::Graph& g,
                         std::span<const CallArg> args, std::span<const std::int64_t> symbols) {
  cuda::Backend& be = cuda::backend();
  cuda::CachingAllocator& allocator = cuda_allocator();
  const cuda::Stream stream = cuda::current_stream();
  auto& stats = codegen::launch_stats();
  if (plan_arena_enabled()) r.lease = plan.arena().lend(symbols);
  std::vector<CallArg> call(args.begin(), args.end());
  r.static_args.resize(args.size());
  for (const auto& in : g.inputs) {
    if (in.kind != graph::InputKind::argument) continue;
    const auto i = static_cast<std::size_t>(in.arg_index);
    const Tensor& t = *args[i].tensor;
    if (auto memory = source_ ? source_->memory_at(t.impl().storage->data()) : nullptr) {
      r.borrowed.push_back({i, t.raw_data(), std::move(memory)});
      continue;
    }
    if (!r.static_args[i].defined()) r.static_args[i] = empty(t.shape(), t.dtype(), t.device());
    call[i].tensor = &r.static_args[i];
  }
  r.copy_args(args, stream);
  r.checks = std::make_shared<GraphDeviceChecks>();
  r.pool = allocator.create_graph_pool();
  // Kernels recorded are launched by the graph's replays, which count as graph launches.
  const std::int64_t launches = stats.launches.load();
  try {
    be.begin_capture(stream, cuda::CaptureMode::global);
    try {
      allocator.begin_graph_pool(stream, r.pool);
      DeviceCheckCapture checks(r.checks);
      r.outputs = plan.run_in(r.lease, g, call, symbols);
    } catch (...) {
      allocator.end_graph_pool(stream);
      try {
        be.end_capture(stream);
      } catch (const Error&) {  // invalidated: the error that did it is the one to report
      }
      throw;
    }
    allocator.end_graph_pool(stream);
    r.exec = be.end_capture(stream);
  } catch (const Error& e) {
    stats.launches -= stats.launches.load() - launches;
    r.failed = e.what();
    r.release_memory();  // these sizes run without a graph from now on
    return;
  }
  stats.launches -= stats.launches.load() - launches;
  ++stats.graph_captures;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.inputs[i].kind == graph::InputKind::argument) continue;
    Tensor t = graph::input_value(g.inputs[i], args);
    if (t.defined() && t.device().is_cuda()) r.fixed.emplace_back(i, t.raw_data());
  }
  r.classify_outputs(g, args);
}

std::vector<Tensor> PlanGraphs::replay(Recorded& r, std::span<const CallArg> args, bool copy_args) {
  const cuda::Stream stream = cuda::current_stream();
  auto& stats = codegen::launch_stats();
  const std::int64_t moved = r.hand_over(stream);
  handed_over_ += moved;
  stats.graph_outputs_handed_over += moved;
  if (copy_args) r.copy_args(args, stream);
  cuda::backend().launch_graph(r.exec, stream);
  ++stats.graph_launches;
  ++replays_;
  replayed(r.checks);
  return r.hand_out();
}

std::shared_ptr<Storage> PlanGraphs::memory_at(const void* data) const {
  std::lock_guard lock(mutex_);
  for (const auto& [sizes, r] : by_sizes_)
    for (const auto& m : r->memory)
      if (m.owned->data() == data) return m.owned;
  return nullptr;
}

std::vector<Tensor> PlanGraphs::run(const KernelPlan& plan, const graph::Graph& g,
                                    std::span<const CallArg> args,
                                    std::span<const std::int64_t> symbols,
                                    const OutputReady& on_output, std::span<Tensor> given_up) {
  std::unique_lock lock(mutex_);
  auto plain = [&](std::string why) {
    if (!why.empty()) note(std::move(why));
    lock.unlock();
    return run_reporting_outputs(plan, g, args, symbols, on_output, given_up);
  };
  auto replayed = [&](std::vector<Tensor> out) {
    for (Tensor& t : given_up) t = Tensor();
    if (on_output)
      for (std::size_t k = 0; k < out.size(); ++k) on_output(k, out[k]);
    return out;
  };
  if (!refusal_.empty()) return plain(refusal_);
  if (std::string why = refusal_of(plan, g, args); !why.empty()) return plain(std::move(why));
  std::vector<std::int64_t> key(symbols.begin(), symbols.end());
  auto it = by_sizes_.find(key);
  if (it == by_sizes_.end()) {
    if (static_cast<int>(by_sizes_.size()) >= limit_)
      return plain(fmt::format("sizes [{}]: {} sets of sizes have graphs already (the limit)",
                               fmt::join(key, ", "), limit_));
    it = by_sizes_.emplace(key, std::make_unique<Recorded>()).first;
  }
  // An input read in place that moved since the capture (a reassigned parameter): record again.
  if (Recorded& r = *it->second; r.exec) {
    for (const auto& [i, data] : r.fixed)
      if (graph::input_ref(g.inputs[i], args).raw_data() != data) {
        ++rerecords_;
        note(fmt::format("'{}' moved since its graph was captured: recorded again",
                         g.inputs[i].name));
        it->second = std::make_unique<Recorded>();
        it->second->calls = 1;
        break;
      }
  }
  Recorded& r = *it->second;
  if (!r.failed.empty()) return plain("");
  for (const auto& b : r.borrowed)
    if (args[b.arg].tensor->raw_data() != b.data)
      return plain(
          fmt::format("argument {} was not where the forward's graph wrote it (held "
                      "across a replay, or made by a call without a graph)",
                      b.arg));
  if (++r.calls == 1) return plain("");  // warm-up: the plan finds its kernels
  if (!r.exec) {
    capture(r, plan, g, args, symbols);
    if (!r.failed.empty())
      return plain(
          fmt::format("sizes [{}]: the capture failed: {}", fmt::join(key, ", "), r.failed));
    return replayed(replay(r, args, false));  // the capture copied this call's arguments
  }
  return replayed(replay(r, args, true));
}

int PlanGraphs::recorded() const {
  std::lock_guard lock(mutex_);
  int n = 0;
  for (const auto& [sizes, r] : by_sizes_) n += r->exec != nullptr;
  return n;
}

std::string PlanGraphs::str() const {
  std::lock_guard lock(mutex_);
  int captured = 0;
  for (const auto& [sizes, r] : by_sizes_) captured += r->exec != nullptr;
  std::string out = fmt::format(
      "CUDA graphs: {} captured (at most {} sets of sizes), {} replays, {} outputs handed over, "
      "{} recorded again\n",
      captured, limit_, replays_, handed_over_, rerecords_);
  for (const auto& why : notes_) out += "  ran without a graph: " + why + "\n";
  return out;
}

}  // namespace kiln::jit
