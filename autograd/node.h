// The autograd graph: a Node per recorded op, taking one incoming gradient per forward output,
// with Edges to the nodes that produced its inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::autograd {

class Node;

// Where the gradient of one input goes: incoming gradient `input_nr` of `fn` (the index of the
// forward output that input was); invalid when the input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  std::uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::size_t num_outputs = 1);
  virtual ~Node() = default;

  virtual std::string name() const = 0;
  // Forward outputs, so incoming gradients.
  std::size_t num_outputs() const { return num_outputs_; }
  // Maps the gradients of the outputs (undefined where none flowed) to one gradient per next
  // edge (undefined where none).
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) {
    return backward(grad_outputs);
  }
  // Frees saved tensors (no retain_graph): a later apply() that needs them raises.
  void release() { release_saved(); }
  // apply() as the last use of what the node saved (no retain_graph), then release(): a node
  // may free each saved tensor once its backward has read it, AOTAutograd's boxed convention.
  std::vector<Tensor> apply_releasing(std::vector<Tensor>&& grad_outputs) {
    return backward_releasing(std::move(grad_outputs));
  }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  // Creation order; the engine runs later nodes first.
  std::uint64_t sequence_nr() const { return sequence_nr_; }

 protected:
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  virtual void release_saved() {}
  virtual std::vector<Tensor> backward_releasing(std::vector<Tensor>&& grad_outputs) {
    std::vector<Tensor> grads = backward(grad_outputs);
    release_saved();
    return grads;
  }
  bool needs_grad(std::size_t input) const {
    return input < next_edges_.size() && next_edges_[input].valid();
  }

 private:
  std::vector<Edge> next_edges_;
  std::uint64_t sequence_nr_;
  std::size_t num_outputs_;
};

// A new tensor over `t`'s data (a view exactly when `t` is one) with no history: where history
// can be attached without touching `t`.
Tensor without_history(const Tensor& t);

// Makes `t` output `output_nr` of `node`, requiring grad: the one way a tensor gets history, so
// grad_fn, output_nr and requires_grad never disagree.
void set_history(Tensor& t, std::shared_ptr<Node> node, std::uint32_t output_nr);
// Drops `t`'s history: it no longer depends on anything and no longer requires grad.
void clear_history(Tensor& t);

// A tensor kept for backward, with the storage version it had: unpacking after an in-place
// change of that storage is an AutogradError, as silent wrong gradients would be worse.
// - An input whose values the rule does not read is kept as metadata only, so later in-place
//   writes cannot fail a backward they cannot affect, and an in-place op's history cannot form
//   a reference cycle through the tensor it overwrote.
// - An output is kept without its history (it would own its own node: a cycle never freed);
//   unpacked for a differentiable backward (create_graph), it gets its node back as grad_fn so
//   second derivatives flow through it.
class SavedTensor {
 public:
  SavedTensor() = default;
  static SavedTensor input(const Tensor& t, bool values_needed);
  static SavedTensor output(const Tensor& t, std::uint32_t output_nr, bool values_needed);
  // `owner` is the node that saved it; raises once released.
  Tensor unpack(Node& owner) const;
  void release();

 private:
  Tensor tensor_;
  std::uint64_t version_ = 0;
  bool check_version_ = false;
  bool is_output_ = false;
  std::uint32_t output_nr_ = 0;
  bool released_ = false;
};

// The backward of a primitive op: the derivative rule of its OpId (derivatives.cpp).
class OpNode : public Node {
 public:
  OpNode(OpId op, OpAttrs attrs, std::span<const Tensor> inputs);
  // Keeps what the rule reads of the outputs; called once the outputs have their history.
  void save_outputs(std::span<const Tensor> outputs);
  std::string name() const override;

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  void release_saved() override;

 private:
  OpId op_;
  OpAttrs attrs_;
  std::vector<SavedTensor> inputs_, outputs_;
};

// Adds the incoming gradient to a leaf's .grad. It saves nothing, so it serves every graph
// that reaches the leaf, however many backwards have run.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  // The leaf's .grad when `grad_output` may be added into it in place, which the engine then
  // does for all such leaves of a backward at once (foreach_add_); undefined where backward()
  // must run instead: under create_graph, with no .grad yet, or where the update could be seen.
  Tensor in_place_target(const Tensor& grad_output) const;
  const TensorImpl* leaf() const { return leaf_.get(); }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge a gradient for `t` flows into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// What a derivative rule sees of one op call.
struct DerivativeArgs {
  OpId op;
  const OpAttrs& attrs;
  const std::vector<Tensor>& inputs;   // values where the table saves them, else metadata only
  const std::vector<Tensor>& outputs;  // the saved outputs (undefined where not saved)
  const std::vector<Tensor>& grads;    // one per output, undefined where none flowed
  // Where a rule that computes every input's gradient at once (attention) keeps them between
  // its calls for one backward; null when the caller asks for one gradient only.
  std::vector<Tensor>* all_inputs = nullptr;
};

// The gradient of input `input` of a primitive, before reduction to the input's shape and
// dtype (OpNode does that once for every rule).
Tensor derivative(const DerivativeArgs& args, std::size_t input);

}  // namespace kiln::autograd
