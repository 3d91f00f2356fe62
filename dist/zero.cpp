// ZeroRedundancyOptimizer: flat buffers per dtype and device, padded to world_size shards.
#include "dist/zero.h"

#include "dist/dist.h"
#include "runtime/error.h"
#include "runtime/grad_mode.h"

namespace kiln::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make)
    : params_(std::move(params)) {
  KILN_CHECK(!params_.empty(), "kiln::dist: ZeroRedundancyOptimizer needs parameters");
  int n = world_size(), r = rank();
  NoGradGuard no_grad;
  for (const Tensor& p : params_) broadcast(p, 0);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k];
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      const Tensor& q = params_[g.params.front()];
      return q.dtype() == p.dtype() && q.device() == p.device();
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{});
    std::int64_t offset =
        it->offsets.empty() ? 0 : it->offsets.back() + params_[it->params.back()].numel();
    it->params.push_back(k);
    it->offsets.push_back(offset);
  }
  std::vector<Tensor> shards;
  for (Group& g : groups_) {
    const Tensor& last = params_[g.params.back()];
    std::int64_t total = g.offsets.back() + last.numel();
    g.shard = (total + n - 1) / n;
    g.flat_grads = zeros({g.shard * n}, last.dtype(), last.device());
    g.flat_params = zeros({g.shard * n}, last.dtype(), last.device());
    g.shard_param = zeros({g.shard}, last.dtype(), last.device());
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = params_[g.params[i]];
      g.flat_params.slice(0, g.offsets[i], g.offsets[i] + p.numel()).copy_(p.reshape({p.numel()}));
    }
    g.shard_param.copy_(g.flat_params.slice(0, r * g.shard, (r + 1) * g.shard));
    g.shard_param.requires_grad_(true);
    shards.push_back(g.shard_param);
  }
  inner_ = make(shards);
  KILN_CHECK(inner_ != nullptr, "kiln::dist: ZeroRedundancyOptimizer's factory made no optimizer");
}

void ZeroRedundancyOptimizer::step() {
  int r = rank();
  NoGradGuard no_grad;
  std::vector<Work> works;
  std::vector<Tensor> shard_grads;
  for (Group& g : groups_) {
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = params_[g.params[i]];
      Tensor slot = g.flat_grads.slice(0, g.offsets[i], g.offsets[i] + p.numel());
      Tensor grad = p.grad();
      if (grad.defined())
        slot.copy_(grad.reshape({p.numel()}));
      else
        slot.zero_();
    }
    Tensor shard_grad = zeros({g.shard}, g.flat_grads.dtype(), g.flat_grads.device());
    works.push_back(reduce_scatter_async(shard_grad, g.flat_grads, ReduceOp::avg));
    shard_grads.push_back(shard_grad);
  }
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    works[i].wait();
    groups_[i].shard_param.set_grad(shard_grads[i]);
  }
  inner_->step();
  works.clear();
  for (Group& g : groups_) works.push_back(all_gather_async(g.flat_params, g.shard_param));
  for (std::size_t k = 0; k < groups_.size(); ++k) {
    Group& g = groups_[k];
    works[k].wait();
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = params_[g.params[i]];
      p.copy_(g.flat_params.slice(0, g.offsets[i], g.offsets[i] + p.numel()).view(p.sym_shape()));
    }
  }
  (void)r;
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
  inner_->zero_grad();
}

std::int64_t ZeroRedundancyOptimizer::shard_numel() const {
  std::int64_t n = 0;
  for (const Group& g : groups_) n += g.shard;
  return n;
}

std::int64_t ZeroRedundancyOptimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : inner_->state_dict())
    if (name.rfind("state.", 0) == 0)
      bytes += t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
  return bytes;
}

}  // namespace kiln::dist
