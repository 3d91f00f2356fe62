// Module bookkeeping and the built-in layers.
#include "autograd/nn.h"

#include <cmath>

#include "autograd/grad_mode.h"

namespace kiln::nn {

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  auto out = params_;
  for (const auto& [prefix, child] : children_)
    for (auto& [name, t] : child->named_parameters()) out.emplace_back(prefix + "." + name, t);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::register_module(const std::string& name, Module& child) {
  children_.emplace_back(name, &child);
}

namespace {
Tensor uniform(const Shape& shape, double bound, DType dtype, Generator* gen) {
  NoGradGuard no_grad;
  return ((rand(shape, DType::f64, gen) * 2.0 - 1.0) * bound).to(dtype);
}
}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias, DType dtype,
               Generator* gen) {
  KILN_CHECK(in_features > 0 && out_features > 0,
             "Linear: feature counts must be positive, got in={} out={}", in_features,
             out_features);
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, bound, dtype, gen));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, bound, dtype, gen));
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, DType dtype)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape_, dtype));
    bias = register_parameter("bias", zeros(normalized_shape_, dtype));
  }
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype,
                     Generator* gen) {
  KILN_CHECK(num_embeddings > 0 && embedding_dim > 0,
             "Embedding: sizes must be positive, got {} x {}", num_embeddings, embedding_dim);
  weight = register_parameter("weight", randn({num_embeddings, embedding_dim}, dtype, gen));
}

}  // namespace kiln::nn
