// ZeroRedundancyOptimizer (ZeRO stage 1): the parameters are laid end to end per dtype and
// device and cut into world_size equal shards; each rank keeps optimizer state for its shard
// only (1/N of it). step() reduce-scatters (averages) the gradients so each rank gets its
// shard's, steps its shard with the wrapped optimizer (AdamW, SGD: elementwise, so a flat shard
// steps as the parameters would; on CUDA one multi-tensor launch per shard), then all-gathers
// the shards back into every rank's parameters. Rank 0's parameters are broadcast first.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/optim.h"

namespace kiln::dist {

class ZeroRedundancyOptimizer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  // `make_optimizer` builds the wrapped optimizer over this rank's shards, e.g.
  // [](auto ps) { return std::make_unique<optim::AdamW>(std::move(ps), 1e-3); }.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make_optimizer);

  // Gradients need not be reduced before (local ones are averaged here); a parameter without a
  // gradient counts as zeros.
  void step();
  void zero_grad();
  optim::Optimizer& shard_optimizer() { return *inner_; }
  // Elements of this rank's shards, and the bytes of optimizer state it holds for them.
  std::int64_t shard_numel() const;
  std::int64_t state_bytes() const;

 private:
  struct Group {
    std::vector<std::size_t> params;
    std::vector<std::int64_t> offsets;
    std::int64_t shard = 0;  // elements per rank
    Tensor flat_grads, flat_params, shard_param;
  };
  std::vector<Tensor> params_;
  std::vector<Group> groups_;
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace kiln::dist
