// Module bookkeeping, state dicts, and the built-in layers.
#include "autograd/nn.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/safetensors.h"
#include "runtime/grad_mode.h"

namespace kiln::nn {

template <typename Visit>
void Module::visit_slots(const std::string& prefix, Visit&& visit) const {
  for (const Slot& s : slots_) visit(prefix + s.name, s);
  for (const auto& [name, child] : children_) child->visit_slots(prefix + name + ".", visit);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (s.parameter && s.tensor->defined()) out.emplace_back(name, *s.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (!s.parameter && s.tensor->defined()) out.emplace_back(name, *s.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, const Tensor*>> Module::named_slots() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  visit_slots("", [&](const std::string& name, const Slot& s) { out.emplace_back(name, s.tensor); });
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (s.tensor->defined()) out.emplace_back(name, s.tensor->detach());
  });
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, const Slot*>> slots;
  visit_slots("", [&](const std::string& name, const Slot& s) { slots.emplace_back(name, &s); });
  std::set<std::string> given, missing, unexpected;
  for (const auto& [name, t] : state) {
    KILN_CHECK(given.insert(name).second, "load_state_dict: key '{}' appears twice", name);
    auto it = std::find_if(slots.begin(), slots.end(), [&](const auto& s) { return s.first == name; });
    if (it == slots.end()) unexpected.insert(name);
  }
  for (const auto& [name, slot] : slots)
    if (!given.count(name)) missing.insert(name);
  if (strict)
    KILN_CHECK(missing.empty() && unexpected.empty(),
               "load_state_dict: the state does not match the module: missing keys [{}], "
               "unexpected keys [{}] (pass strict=false to load the keys that match)",
               fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  // Check every shape before writing anything, so a failed load leaves the module unchanged.
  for (const auto& [name, t] : state) {
    auto it = std::find_if(slots.begin(), slots.end(), [&](const auto& s) { return s.first == name; });
    if (it == slots.end()) continue;
    KILN_CHECK(t.defined(), "load_state_dict: the tensor for '{}' is undefined", name);
    const Tensor& have = *it->second->tensor;
    if (have.defined())
      KILN_CHECK_AS(ShapeError, have.impl().shape == t.impl().shape,
                    "load_state_dict: size mismatch for '{}': the state holds shape {}, the "
                    "module's tensor has shape {}",
                    name, shape_str(t.impl().shape), shape_str(have.impl().shape));
  }
  NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    auto it = std::find_if(slots.begin(), slots.end(), [&](const auto& s) { return s.first == name; });
    if (it == slots.end()) continue;
    Tensor& slot = *it->second->tensor;
    if (slot.defined()) {
      slot.copy_(t);
    } else {  // an empty slot takes a copy of its own
      slot = t.detach().clone();
      if (it->second->parameter) slot.requires_grad_(is_floating(slot.dtype()));
    }
  }
}

void Module::save(const std::string& path) const { save_safetensors(path, state_dict()); }

void Module::load(const std::string& path, bool strict) {
  load_state_dict(load_safetensors(path).tensors, strict);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.set_grad(Tensor());
}

void Module::register_parameter(const std::string& name, Tensor& slot) {
  KILN_CHECK(slot.defined(), "register_parameter: '{}' holds no tensor", name);
  slot.requires_grad_(true);
  slots_.push_back({name, &slot, true});
}

void Module::register_buffer(const std::string& name, Tensor& slot) {
  slots_.push_back({name, &slot, false});
}

void Module::register_module(const std::string& name, Module& child) {
  children_.emplace_back(name, &child);
}

namespace {
Tensor uniform(const Shape& shape, double bound, DType dtype, Generator* gen) {
  NoGradGuard no_grad;
  return ((rand(shape, DType::f64, gen) * 2 - 1) * bound).to(dtype);
}
}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias, DType dtype,
               Generator* gen) {
  KILN_CHECK(in_features > 0 && out_features > 0,
             "Linear: feature counts must be positive, got in={} out={}", in_features,
             out_features);
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = uniform({out_features, in_features}, bound, dtype, gen);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = uniform({out_features}, bound, dtype, gen);
    register_parameter("bias", bias);
  }
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, DType dtype)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight = ones(normalized_shape_, dtype);
    bias = zeros(normalized_shape_, dtype);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype,
                     Generator* gen) {
  KILN_CHECK(num_embeddings > 0 && embedding_dim > 0,
             "Embedding: sizes must be positive, got {} x {}", num_embeddings, embedding_dim);
  weight = randn({num_embeddings, embedding_dim}, dtype, gen);
  register_parameter("weight", weight);
}

}  // namespace kiln::nn
