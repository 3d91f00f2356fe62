// DistributedDataParallel: buckets filled from the engine's gradient-ready reports and
// launched in index order, so every rank issues the same all-reduces in the same order.
#include "dist/ddp.h"

#include <fmt/ranges.h>

#include "dist/process_group.h"
#include "runtime/error.h"
#include "runtime/grad_mode.h"

namespace kiln::dist {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return b > a ? std::chrono::duration<double>(b - a).count() : 0.0;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, DdpOptions options)
    : module_(module), options_(options) {
  // Always, before the first broadcast: different models on different ranks would broadcast
  // and reduce garbage, or wait on each other until the timeout.
  default_group("DistributedDataParallel").check_same("DistributedDataParallel", layout(module));
  {
    NoGradGuard no_grad;
    std::vector<Work> works;
    for (const auto& [name, t] : module.named_parameters()) works.push_back(broadcast_async(t, 0));
    if (options.broadcast_buffers)
      for (const auto& [name, t] : module.named_buffers()) works.push_back(broadcast_async(t, 0));
    for (auto& w : works) w.wait();
  }
  for (const auto& [name, t] : module.named_parameters())
    if (t.requires_grad()) params_.push_back({name, t});
  KILN_CHECK(!params_.empty(),
             "kiln::dist: DistributedDataParallel: the module has no "
             "parameter that requires grad");
  // Reverse registration order: the backward produces the last layers' gradients first.
  auto cap = static_cast<std::int64_t>(options.bucket_cap_mb * 1024 * 1024);
  std::int64_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    Param& p = params_[k];
    p.numel = p.tensor.numel();
    std::int64_t size = p.numel * static_cast<std::int64_t>(itemsize(p.tensor.dtype()));
    bool fresh = buckets_.empty();
    if (!fresh) {
      const Param& first = params_[buckets_.back().params.front()];
      fresh = first.tensor.dtype() != p.tensor.dtype() ||
              first.tensor.device() != p.tensor.device() || bytes + size > cap;
    }
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    p.bucket = buckets_.size() - 1;
    p.offset =
        b.params.empty() ? 0 : params_[b.params.back()].offset + params_[b.params.back()].numel;
    b.params.push_back(k);
    bytes += size;
    by_leaf_[p.tensor.impl_ptr().get()] = k;
  }
  for (Bucket& b : buckets_) {
    const Param& last = params_[b.params.back()];
    b.flat = zeros({last.offset + last.numel}, last.tensor.dtype(), last.tensor.device());
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  autograd::add_grad_ready_observer(this);
}

DistributedDataParallel::~DistributedDataParallel() {
  autograd::remove_grad_ready_observer(this);
  wait_quietly();
}

// Waits for every bucket in flight; their errors were (or will be) reported by the backward
// that launched them.
void DistributedDataParallel::wait_quietly() {
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (const std::exception&) {
    }
  }
}

// A backward that threw before its end left its buckets half filled: start afresh.
void DistributedDataParallel::on_backward_begin() {
  if (!in_backward_) return;
  wait_quietly();
  in_backward_ = false;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& b : buckets_) {
    names.emplace_back();
    for (std::size_t k : b.params) names.back().push_back(params_[k].name);
  }
  return names;
}

void DistributedDataParallel::start_backward() {
  in_backward_ = true;
  stats_.launched_in_backward = 0;
  next_launch_ = 0;
  backward_start_ = std::chrono::steady_clock::now();
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) b.pending = b.params.size();
}

void DistributedDataParallel::on_grad_ready(const TensorImpl* leaf, const Tensor& grad) {
  auto it = by_leaf_.find(leaf);
  if (no_sync_ || it == by_leaf_.end() || !grad.defined()) return;
  if (!in_backward_) start_backward();
  Param& p = params_[it->second];
  if (p.ready) return;
  fill(p, grad);
  in_backward_hook_ = true;
  launch_ready();
  in_backward_hook_ = false;
}

// The bucket slot takes what .grad will hold after this backward: the incoming gradient plus
// what earlier backwards (under no_sync) accumulated.
void DistributedDataParallel::fill(Param& p, const Tensor& grad) {
  NoGradGuard no_grad;
  Bucket& b = buckets_[p.bucket];
  Tensor slot = b.flat.slice(0, p.offset, p.offset + p.numel);
  Tensor before = p.tensor.grad();
  if (grad.defined() && before.defined())
    slot.copy_(add(before, grad.to(p.tensor.dtype())).reshape({p.numel}));
  else if (grad.defined())
    slot.copy_(grad.reshape({p.numel}));
  else if (before.defined())
    slot.copy_(before.reshape({p.numel}));
  else
    slot.zero_();
  p.ready = true;
  --b.pending;
}

void DistributedDataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0)
    launch(buckets_[next_launch_++]);
}

std::string DistributedDataParallel::layout(const nn::Module& module) {
  std::vector<std::string> entries;
  for (const auto& [name, t] : module.named_parameters())
    entries.push_back(fmt::format("{} {} {}", name, dtype_name(t.dtype()), shape_str(t.shape())));
  return fmt::format("parameters {}", fmt::join(entries, ", "));
}

void DistributedDataParallel::launch(Bucket& b) {
  ProcessGroup& group = default_group("DistributedDataParallel");
  if (in_backward_hook_) ++stats_.launched_in_backward;
  NoGradGuard no_grad;
  if (options_.comm_hook == CommHook::bf16_compress) {
    b.wire = mul(b.flat, Scalar(1.0 / group.config().world_size)).to(DType::bf16);
    b.work = all_reduce_async(b.wire, ReduceOp::sum);
  } else {
    b.wire = Tensor();
    b.work = all_reduce_async(b.flat, ReduceOp::avg);
  }
}

void DistributedDataParallel::on_backward_end() {
  if (!in_backward_) return;
  auto end = std::chrono::steady_clock::now();
  std::vector<std::string> unused;
  for (Param& p : params_)
    if (!p.ready) unused.push_back(p.name);
  if (!unused.empty() && !options_.find_unused_parameters) {
    in_backward_ = false;
    wait_quietly();  // the missing gradient is the error to report
    throw Error(fmt::format(
        "kiln::dist: DistributedDataParallel: parameter{} {} got no gradient in this backward; "
        "with find_unused_parameters off every parameter must take part in the loss (set "
        "DdpOptions::find_unused_parameters for a model that skips some)",
        unused.size() > 1 ? "s" : "", fmt::join(unused, ", ")));
  }
  for (Param& p : params_)
    if (!p.ready) fill(p, Tensor());
  launch_ready();
  stats_.backward_seconds = seconds_between(backward_start_, end);
  finish_backward();
  stats_.wait_seconds = seconds_between(end, std::chrono::steady_clock::now());
  in_backward_ = false;
}

void DistributedDataParallel::finish_backward() {
  auto end = std::chrono::steady_clock::now();
  stats_.comm_seconds = stats_.hidden_seconds = 0;
  stats_.bytes_reduced = 0;
  for (Bucket& b : buckets_) {
    b.work.wait();
    stats_.comm_seconds += b.work.seconds();
    stats_.hidden_seconds += seconds_between(b.work.started(), std::min(b.work.ended(), end));
    const Tensor& sent = b.wire.defined() ? b.wire : b.flat;
    stats_.bytes_reduced += sent.numel() * static_cast<std::int64_t>(itemsize(sent.dtype()));
  }
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    if (b.wire.defined()) b.flat.copy_(b.wire);
    for (std::size_t k : b.params) {
      Param& p = params_[k];
      Tensor avg = b.flat.slice(0, p.offset, p.offset + p.numel).view(p.tensor.sym_shape());
      Tensor g = p.tensor.grad();
      if (g.defined() && g.is_contiguous() && g.dtype() == avg.dtype())
        g.copy_(avg);
      else
        p.tensor.set_grad(avg.clone());
    }
  }
}

}  // namespace kiln::dist
