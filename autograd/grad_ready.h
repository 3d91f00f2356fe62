// Observers of a backward's leaf gradients, the hook DistributedDataParallel needs: a leaf's
// gradient is reported as soon as every node that feeds it has run, while the engine still runs
// earlier nodes, so a reduction of it can overlap the rest of the backward.
#pragma once

#include "runtime/tensor.h"

namespace kiln::autograd {

class GradReadyObserver {
 public:
  virtual ~GradReadyObserver() = default;
  // A backward starts (one the engine watches: see below).
  virtual void on_backward_begin() {}
  // `leaf`'s gradient from this backward is final: `grad`, not yet added into the leaf's .grad
  // (the engine adds it after the graph has run). Undefined when no gradient reached the leaf
  // although the graph reached it.
  virtual void on_grad_ready(const TensorImpl* leaf, const Tensor& grad) = 0;
  // The backward has run and every leaf's .grad holds its sum.
  virtual void on_backward_end() = 0;
};

// Observers are called from backward() (not autograd::grad(), not under a trace), in the order
// they were added, on the thread that runs the backward.
void add_grad_ready_observer(GradReadyObserver* observer);
void remove_grad_ready_observer(GradReadyObserver* observer);

// For a node whose backward makes its input gradients one after another (a compiled function's
// plan): says, while it runs, that the gradient it returns for next edge `edge` is `grad` and
// final, so observers hear of a leaf that only this node feeds before the node returns. The
// leaf is reported once either way; outside a watched backward this does nothing.
void report_gradient_early(std::size_t edge, const Tensor& grad);
// Whether a backward running on this thread has observers: a node need not find its gradients'
// order (report_gradient_early) when none listens.
bool gradients_observed();

}  // namespace kiln::autograd
