// Modules a model needs: parameters with autograd, PyTorch-style initialization.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace kiln::nn {

class Module {
 public:
  virtual ~Module() = default;
  // Parameters of this module and its submodules, in registration order.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

 protected:
  // Makes `t` a leaf that requires grad and records it under `name`.
  Tensor register_parameter(const std::string& name, Tensor t);
  void register_module(const std::string& name, Module& child);

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// y = x W^T + b, W [out, in]; W and b ~ U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         DType dtype = DType::f32, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Tensor weight;
  Tensor bias;  // undefined without bias
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

}  // namespace kiln::nn
