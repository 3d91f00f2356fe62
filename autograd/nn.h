// Modules a model needs: parameters and buffers held by slot, state dicts, PyTorch-style
// initialization.
//
// A module registers its members (`Tensor weight;`) as slots: parameters(), state_dict() and a
// compiled function that declares the module (jit::CompileOptions::modules) read what the
// members hold now, so `fc.weight = loaded;` takes effect everywhere. Because the registry
// points at the members, a module is neither copyable nor movable: build it where it lives, or
// hold it by std::unique_ptr.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace kiln::nn {

// Tensors by name, in registration order ("fc1.weight", "fc1.bias", ...).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Parameters of this module and its submodules as the slots hold them now (undefined slots
  // are skipped; a tensor in several slots, as tied weights are, is listed once).
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Every parameter and buffer slot by dotted name: what a compiled function reads per call.
  std::vector<std::pair<std::string, const Tensor*>> named_slots() const;
  // This module ("") and every submodule by dotted name, depth first (a compiled function
  // guards each one's training mode).
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  std::vector<std::pair<std::string, Module*>> named_modules();

  // Parameters and buffers, detached, sharing storage with the module (tied tensors under
  // each of their names).
  StateDict state_dict() const;
  // Copies each entry into the tensor its slot holds (in place, as PyTorch does: optimizers and
  // compiled functions holding that tensor see the new values), converting device and dtype
  // within a kind (floating, integer, bool). A shape or dtype-kind mismatch is always an error;
  // with `strict`, so are missing and unexpected keys (an empty slot is not missing). Every
  // entry is checked first: the error names all offending keys and nothing is modified.
  void load_state_dict(const StateDict& state, bool strict = true);
  // state_dict() to / from a safetensors file.
  void save(const std::string& path) const;
  void load(const std::string& path, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Drops every parameter's .grad.
  void zero_grad();
  // Moves every parameter and buffer to `device` (new leaves in the same slots; tied tensors
  // stay tied). Build optimizers after moving, as in PyTorch: they hold the tensors.
  void to(Device device);
  // Converts every floating parameter and buffer to the floating `dtype` (integer and bool
  // buffers are left alone, as in PyTorch's Module.to(dtype)); the same new-leaf rules as above.
  void to(DType dtype);

 protected:
  // Makes the tensor in `slot` a leaf that requires grad, and registers the slot as `name`.
  void register_parameter(const std::string& name, Tensor& slot);
  // Registers state that is not trained (running statistics, masks, a KV cache): moved by to(),
  // read and written in place by compiled functions as parameters are, and saved and loaded
  // unless `persistent` is false (PyTorch's non-persistent buffers: a rotary table, a cache).
  void register_buffer(const std::string& name, Tensor& slot, bool persistent = true);
  void register_module(const std::string& name, Module& child);
  // Makes parameter slot `name` of this module a buffer (persistent), its tensor no longer
  // requiring grad: what a weight quantized to int8 becomes, as it is not trained.
  void make_buffer(const std::string& name);

 private:
  struct Slot {
    std::string name;
    Tensor* tensor;
    bool parameter;
    bool persistent = true;  // in state_dict() and load_state_dict()
  };
  template <typename Visit>
  void visit_slots(const std::string& prefix, Visit&& visit) const;

  std::vector<Slot> slots_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// y = act(x W^T + b), W [out, in]; W and b ~ U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch. On CUDA
// one cuBLASLt call with the activation in its epilogue (see linear() in autograd/ops.h).
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         DType dtype = DType::f32, Generator* gen = nullptr);
  Linear(std::int64_t in_features, std::int64_t out_features, Activation activation,
         bool bias = true, DType dtype = DType::f32, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Activation activation() const { return activation_; }

  // Weight-only int8, as gpt-fast quantizes: the weight becomes an int8 buffer with one
  // symmetric scale per output channel (max |w| / 127, in the weight's dtype, the buffer
  // `weight_scale`), and forward() is linear_int8 (autograd/ops.h): a compiled decode step's
  // skinny GEMM reads the int8 weight and dequantizes in registers (jit/codegen/skinny_gemm.h).
  void quantize_int8();
  bool quantized() const { return weight_scale.defined(); }

  Tensor weight;
  Tensor bias;          // undefined without bias
  Tensor weight_scale;  // [out]; undefined unless quantized

 private:
  Activation activation_ = Activation::none;
};

// The transformer's feed-forward block fc2(act(fc1(x))): Linear(in -> hidden, act) then
// Linear(hidden -> out), state dict keys fc1.weight, fc1.bias, fc2.weight, fc2.bias. Eagerly on
// CUDA it is feed_forward(): 2 library calls forward, 4 backward, no generated kernels.
class FeedForward : public Module {
 public:
  FeedForward(std::int64_t in_features, std::int64_t hidden_features, std::int64_t out_features,
              Activation activation = Activation::gelu_tanh, bool bias = true,
              DType dtype = DType::f32, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const {
    if (fc1.quantized() || fc2.quantized()) return fc2(fc1(x));
    return feed_forward(x, fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc1.activation());
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Linear fc1;  // carries the activation
  Linear fc2;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true,
                     DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const {
    return layer_norm(x, normalized_shape_, weight, bias, eps_);
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Tensor weight;  // ones; undefined without affine
  Tensor bias;    // zeros; undefined without affine

 private:
  Shape normalized_shape_;
  double eps_;
};

// A lookup table [num_embeddings, embedding_dim] initialized N(0, 1).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype = DType::f32,
            Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) const { return embedding(weight, indices); }
  Tensor operator()(const Tensor& indices) const { return forward(indices); }

  Tensor weight;
};

// Quantizes every Linear of `module` and its submodules to weight-only int8
// (Linear::quantize_int8). A Linear sharing its weight with another module (a tied LM head)
// gets its own int8 copy; the other keeps the original. To load a quantized checkpoint, quantize
// the model first: the int8 weights and scales are then the slots the file fills.
void quantize_int8(Module& module);

}  // namespace kiln::nn
