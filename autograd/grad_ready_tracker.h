// The engine's side of autograd/grad_ready.h: per backward, how many visited nodes each leaf
// accumulator still waits for, and the reports to the observers when that reaches zero, or
// earlier when the node running says one of its gradients is final (report_gradient_early).
#pragma once

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/grad_ready.h"
#include "autograd/node.h"

namespace kiln::autograd {

class ReadyTracker {
 public:
  // Incoming gradients per node, one slot per forward output (the engine's buffers).
  using Buffers = std::unordered_map<Node*, std::vector<Tensor>>;
  // Watches a backward over the nodes `order` when `watch` and an observer is registered;
  // `buffers` are the engine's, read when a leaf is reported. The current tracker of this
  // thread until destroyed.
  ReadyTracker(bool watch, const std::vector<Node*>& order, const Buffers& buffers);
  ~ReadyTracker();
  ReadyTracker(const ReadyTracker&) = delete;
  ReadyTracker& operator=(const ReadyTracker&) = delete;

  bool active() const { return !observers_.empty(); }
  // `n` (nullptr: none) is running its backward.
  void running(Node* n) { running_ = n; }
  // `n` has been visited (run, or skipped for want of a gradient).
  void visited(Node* n);
  void finished();
  // Gradient `edge` of the node running is final.
  void early(std::size_t edge, const Tensor& grad);

 private:
  void report(AccumulateGrad* acc, const Tensor& grad);

  std::vector<GradReadyObserver*> observers_;
  const Buffers& buffers_;
  std::unordered_map<Node*, int> pending_;
  std::unordered_set<Node*> reported_;
  Node* running_ = nullptr;
  ReadyTracker* previous_;
};

}  // namespace kiln::autograd
