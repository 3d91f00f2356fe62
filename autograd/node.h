// The autograd graph: a Node per recorded op, with Edges to the nodes that produced its inputs.
// Every node has one output (all primitives and composite functions are single-output).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::autograd {

class Node;

// Where the gradient of one input goes: input slot `input_nr` of `fn`; invalid when the input
// needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  std::uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;

  virtual std::string name() const = 0;
  // Maps the gradient of the output to one gradient per next edge (undefined where no edge).
  std::vector<Tensor> apply(const Tensor& grad_output);
  // Frees saved tensors; a later apply() is an AutogradError (no retain_graph).
  void release();

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  // Creation order; the engine runs later nodes first.
  std::uint64_t sequence_nr() const { return sequence_nr_; }

 protected:
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  virtual void release_saved() {}
  bool needs_grad(std::size_t input) const {
    return input < next_edges_.size() && next_edges_[input].valid();
  }

 private:
  std::vector<Edge> next_edges_;
  std::uint64_t sequence_nr_;
  bool released_ = false;
};

// A tensor kept for backward, with the storage version it had; unpacking after an in-place
// change of that storage is an AutogradError, as silent wrong gradients would be worse. A rule
// that reads only the tensor's metadata (shape, dtype) saves it with `values_needed` false: then
// only a data-less tensor with that metadata is kept, so later in-place writes cannot fail a
// backward they cannot affect, and an in-place op's history cannot form a reference cycle
// through the tensor it overwrote.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t, bool values_needed = true);
  Tensor unpack(const std::string& node_name) const;
  void reset() { tensor_ = Tensor(); }

 private:
  Tensor tensor_;
  std::uint64_t version_ = 0;
  bool check_version_ = true;
};

// The backward of a primitive op: one derivative rule per OpId (derivatives.cpp).
class OpNode : public Node {
 public:
  OpNode(OpId op, OpAttrs attrs, std::span<const Tensor> inputs);
  std::string name() const override;

 protected:
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  void release_saved() override;

 private:
  OpId op_;
  OpAttrs attrs_;
  std::vector<SavedTensor> inputs_;
  std::vector<TensorMeta> input_meta_;
};

// The backward of a composite with a closed-form derivative: a rule written with kiln ops.
class FunctionNode : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
  FunctionNode(std::string name, Backward rule) : name_(std::move(name)), rule_(std::move(rule)) {}
  std::string name() const override { return name_; }

 protected:
  std::vector<Tensor> backward(const Tensor& grad_output) override { return rule_(grad_output); }
  void release_saved() override { rule_ = nullptr; }

 private:
  std::string name_;
  Backward rule_;
};

// Adds the incoming gradient to a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }

 protected:
  std::vector<Tensor> backward(const Tensor& grad_output) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge a gradient for `t` flows into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// The gradient rule of a primitive: d(output)/d(input `i`) applied to `grad`, before
// reduction to the input's shape and dtype (done by OpNode).
Tensor derivative(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& inputs,
                  std::size_t i, const Tensor& grad);
bool is_differentiable(OpId op);
// Whether the rule of `op` reads the values of input `i` (not only its shape and dtype).
bool reads_input_values(OpId op, std::size_t i);

}  // namespace kiln::autograd
