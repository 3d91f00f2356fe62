// linear() and feed_forward() (declared in autograd/ops.h) on eager CUDA tensors as library
// calls through Backend::linear_forward / linear_backward (cuBLASLt epilogues, reached without
// including jit/), with autograd nodes whose backward GEMMs carry the activation's derivative
// and the bias gradients. Where the backend declines, the callers compose primitives instead.
#pragma once

#include <optional>

#include "autograd/node.h"
#include "runtime/linear_epilogue.h"

namespace kiln::autograd {

// The library path of linear(x, weight, bias, act): nullopt when it does not apply (not CUDA,
// tracing, x of rank < 2, or a rule the library refuses).
std::optional<Tensor> try_fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       Activation act);
// The library path of feed_forward; nullopt as try_fused_linear, decided by the first layer.
std::optional<Tensor> try_fused_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1,
                                             const Tensor& w2, const Tensor& b2, Activation act);

// The backward of y = act(x W^T + b). Inputs x, W, b. Outputs: 0 is y; 1 (gelu_tanh only) the
// pre-activation z, never handed out: it exists so that a differentiable backward
// (create_graph) that reads z routes second-order gradients back through this node.
class LinearNode : public Node {
 public:
  explicit LinearNode(Activation act);
  // Called after set_next_edges: keeps what the needed gradients read. `pre` is z (gelu_tanh).
  void save(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& pre);
  std::string name() const override { return "LinearBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  void release_saved() override;

 private:
  Activation act_;
  SavedTensor x_, weight_, out_, pre_;
};

// The backward of y = act(x W1^T + b1) W2^T + b2. Inputs x, W1, b1, W2, b2. Outputs: 0 is y; 1
// the hidden activation h and 2 (gelu_tanh) its pre-activation z1, internal as LinearNode's z.
class FeedForwardNode : public Node {
 public:
  explicit FeedForwardNode(Activation act);
  // After set_next_edges. `aux` / `aux_ld`: the first call's saved aux (z1 for GELU, the ReLU
  // bitmask), read by the backward's DGELU/DRELU epilogue.
  void save(const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& hidden,
            const Tensor& aux, std::int64_t aux_ld);
  std::string name() const override { return "FeedForwardBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  void release_saved() override;

 private:
  // Whether x, W1 or b1 need a gradient: the backward then goes through the hidden layer.
  bool needs_hidden_grad() const { return needs_grad(0) || needs_grad(1) || needs_grad(2); }

  Activation act_;
  SavedTensor x_, w1_, w2_, hidden_, pre_;
  Tensor relu_mask_;  // cuBLASLt's bitmask: read only by the library call, never differentiated
  std::int64_t aux_ld_ = 0;
};

}  // namespace kiln::autograd
