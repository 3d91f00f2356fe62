// DistributedDataParallel, as torch.nn.parallel.DistributedDataParallel: rank 0's parameters
// and buffers broadcast at construction, gradients bucketed in reverse registration order and
// each bucket all-reduced (averaged) on the group's thread as soon as its last gradient is
// ready during the backward, in bucket order on every rank, and written back into .grad when
// the backward ends. The module's forward is called as usual: DDP watches the backward.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/grad_ready.h"
#include "autograd/nn.h"
#include "dist/dist.h"

namespace kiln::dist {

// A bucket's communication: none averages the bucket as it is; bf16_compress (torch's
// bf16_compress_hook) divides by the world size, all-reduces in bf16 and widens back.
enum class CommHook { none, bf16_compress };

struct DdpOptions {
  double bucket_cap_mb = 25;
  // Off: a parameter that got no gradient in a backward is an Error naming it. On: its
  // bucket slot is reduced as zeros (or its accumulated .grad).
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  CommHook comm_hook = CommHook::none;
};

// What the last synchronized backward did.
struct DdpStats {
  std::int64_t buckets = 0;
  std::int64_t launched_in_backward = 0;  // buckets whose all-reduce started before its end
  std::int64_t bytes_reduced = 0;  // gradient bytes all-reduced (what the wire carried)
  double comm_seconds = 0;         // the buckets' all-reduces on the group's thread, summed
  double hidden_seconds = 0;       // of that, while the backward still ran
  double backward_seconds = 0;     // from the first gradient ready to the backward's end
  double wait_seconds = 0;         // the backward's end waiting for the last buckets
  double hidden_fraction() const { return comm_seconds > 0 ? hidden_seconds / comm_seconds : 1; }
};

class DistributedDataParallel : private autograd::GradReadyObserver {
 public:
  explicit DistributedDataParallel(nn::Module& module, DdpOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() const { return module_; }

  // While alive, backwards only accumulate .grad locally (torch's no_sync()); the next
  // backward outside it reduces the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ddp.no_sync_ = true; }
    NoSync(NoSync&& other) noexcept : ddp_(std::exchange(other.ddp_, nullptr)) {}
    ~NoSync() {
      if (ddp_) ddp_->no_sync_ = false;
    }

   private:
    DistributedDataParallel* ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  void set_comm_hook(CommHook hook) { options_.comm_hook = hook; }
  const DdpStats& stats() const { return stats_; }
  // The parameters' names per bucket, in the order buckets are reduced.
  std::vector<std::vector<std::string>> bucket_parameters() const;

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    std::size_t bucket = 0;
    std::int64_t offset = 0, numel = 0;
    bool ready = false;
  };
  struct Bucket {
    std::vector<std::size_t> params;
    Tensor flat;  // the gradients, then their average
    Tensor wire;  // what is all-reduced under a compression hook
    std::size_t pending = 0;
    Work work;
  };

  void on_backward_begin() override;
  void on_grad_ready(const TensorImpl* leaf, const Tensor& grad) override;
  void on_backward_end() override;
  void start_backward();
  void fill(Param& p, const Tensor& grad);
  void launch_ready();
  void launch(Bucket& b);
  void finish_backward();
  void wait_quietly();
  static std::string layout(const nn::Module& module);

  nn::Module& module_;
  DdpOptions options_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const TensorImpl*, std::size_t> by_leaf_;
  bool no_sync_ = false;
  bool in_backward_ = false;
  bool in_backward_hook_ = false;  // launching from a gradient-ready report
  std::size_t next_launch_ = 0;
  std::chrono::steady_clock::time_point backward_start_;
  DdpStats stats_;
};

}  // namespace kiln::dist
