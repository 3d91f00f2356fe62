// The gradient-ready observers and the engine's tracker of when each leaf's gradient is final.
#include "autograd/grad_ready_tracker.h"

#include <mutex>

#include "autograd/ops.h"

namespace kiln::autograd {

namespace {

std::mutex observers_mutex;
std::vector<GradReadyObserver*>& observers() {
  static std::vector<GradReadyObserver*> list;
  return list;
}

thread_local ReadyTracker* current_tracker = nullptr;

}  // namespace

void add_grad_ready_observer(GradReadyObserver* observer) {
  std::lock_guard lock(observers_mutex);
  observers().push_back(observer);
}

void remove_grad_ready_observer(GradReadyObserver* observer) {
  std::lock_guard lock(observers_mutex);
  std::erase(observers(), observer);
}

void report_gradient_early(std::size_t edge, const Tensor& grad) {
  if (current_tracker) current_tracker->early(edge, grad);
}

bool gradients_observed() {
  return current_tracker && current_tracker->active();
}

ReadyTracker::ReadyTracker(bool watch, const std::vector<Node*>& order, const Buffers& buffers)
    : buffers_(buffers), previous_(current_tracker) {
  current_tracker = this;
  if (!watch) return;
  {
    std::lock_guard lock(observers_mutex);
    observers_ = observers();
  }
  if (observers_.empty()) return;
  for (auto* o : observers_) o->on_backward_begin();
  for (Node* n : order)
    for (const auto& e : n->next_edges())
      if (e.valid() && dynamic_cast<AccumulateGrad*>(e.fn.get())) ++pending_[e.fn.get()];
}

ReadyTracker::~ReadyTracker() {
  current_tracker = previous_;
}

void ReadyTracker::report(AccumulateGrad* acc, const Tensor& grad) {
  if (!reported_.insert(acc).second) return;
  for (auto* o : observers_) o->on_grad_ready(acc->leaf(), grad);
}

void ReadyTracker::visited(Node* n) {
  if (observers_.empty()) return;
  for (const auto& e : n->next_edges()) {
    auto it = e.valid() ? pending_.find(e.fn.get()) : pending_.end();
    if (it == pending_.end() || --it->second > 0) continue;
    auto b = buffers_.find(e.fn.get());
    report(static_cast<AccumulateGrad*>(e.fn.get()),
           b == buffers_.end() ? Tensor() : b->second.at(0));
  }
}

void ReadyTracker::early(std::size_t edge, const Tensor& grad) {
  if (observers_.empty() || !running_ || edge >= running_->next_edges().size() || !grad.defined())
    return;
  const Edge& e = running_->next_edges()[edge];
  auto it = e.valid() ? pending_.find(e.fn.get()) : pending_.end();
  // Only where the running node is the accumulator's last contributor: the sum is then final.
  if (it == pending_.end() || it->second != 1) return;
  auto b = buffers_.find(e.fn.get());
  Tensor before = b == buffers_.end() ? Tensor() : b->second.at(0);
  report(static_cast<AccumulateGrad*>(e.fn.get()), before.defined() ? add(before, grad) : grad);
}

void ReadyTracker::finished() {
  for (auto* o : observers_) o->on_backward_end();
}

}  // namespace kiln::autograd
