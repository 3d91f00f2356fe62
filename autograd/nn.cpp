// Module bookkeeping, state dicts, and the built-in layers.
#include "autograd/nn.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

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

// A tensor held by several slots (tied weights) is listed once, under its first name, as
// PyTorch does: an optimizer given it twice would apply each step twice.
std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (s.parameter && s.tensor->defined() && seen.insert(&s.tensor->impl()).second)
      out.emplace_back(name, *s.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (!s.parameter && s.tensor->defined() && seen.insert(&s.tensor->impl()).second)
      out.emplace_back(name, *s.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, const Tensor*>> Module::named_slots() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  visit_slots("",
              [&](const std::string& name, const Slot& s) { out.emplace_back(name, s.tensor); });
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (const auto& [name, child] : children_)
    for (const auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const auto& [name, child] : children_)
    for (const auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (s.tensor->defined() && s.persistent) out.emplace_back(name, s.tensor->detach());
  });
  return out;
}

namespace {
// Loading converts between dtypes of one kind (an f16 checkpoint into an f32 model), never across
// kinds: a float into an integer buffer or a mask into a weight is a wrong key, not a cast.
const char* dtype_kind(DType t) {
  return is_floating(t) ? "floating" : t == DType::bool_ ? "bool" : "integer";
}
}  // namespace

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, const Slot*>> slots;
  visit_slots("", [&](const std::string& name, const Slot& s) {
    if (s.persistent) slots.emplace_back(name, &s);
  });
  auto find = [&](const std::string& name) -> const Slot* {
    auto it =
        std::find_if(slots.begin(), slots.end(), [&](const auto& s) { return s.first == name; });
    return it == slots.end() ? nullptr : it->second;
  };
  // Check every entry before writing anything, so a failed load leaves the module unchanged, and
  // name every offending key at once.
  std::set<std::string> given;
  std::vector<std::string> missing, unexpected, size_mismatches, dtype_mismatches;
  for (const auto& [name, t] : state) {
    KILN_CHECK(given.insert(name).second, "load_state_dict: key '{}' appears twice", name);
    const Slot* slot = find(name);
    if (!slot) {
      unexpected.push_back(name);
      continue;
    }
    KILN_CHECK(t.defined(), "load_state_dict: the tensor for '{}' is undefined", name);
    const Tensor& have = *slot->tensor;
    if (!have.defined()) continue;
    if (have.impl().shape != t.impl().shape)
      size_mismatches.push_back(
          fmt::format("'{}' (the state holds shape {}, the module's tensor has shape {})", name,
                      shape_str(t.impl().shape), shape_str(have.impl().shape)));
    else if (std::string_view(dtype_kind(have.dtype())) != dtype_kind(t.dtype()))
      dtype_mismatches.push_back(fmt::format("'{}' (the state holds {}, the module's tensor is {})",
                                             name, t.dtype(), have.dtype()));
  }
  // An empty slot is not missing: state_dict() does not save it either.
  for (const auto& [name, slot] : slots)
    if (slot->tensor->defined() && !given.count(name)) missing.push_back(name);
  std::vector<std::string> problems;
  if (!size_mismatches.empty())
    problems.push_back(fmt::format("size mismatch for {}", fmt::join(size_mismatches, ", ")));
  if (!dtype_mismatches.empty())
    problems.push_back(fmt::format("dtype mismatch for {}", fmt::join(dtype_mismatches, ", ")));
  if (strict && !missing.empty())
    problems.push_back(fmt::format("missing keys [{}]", fmt::join(missing, ", ")));
  if (strict && !unexpected.empty())
    problems.push_back(fmt::format("unexpected keys [{}]", fmt::join(unexpected, ", ")));
  if (!problems.empty()) {
    std::string message = fmt::format(
        "load_state_dict: the state does not match the module, nothing was loaded: {}{}",
        fmt::join(problems, "; "),
        strict && (!missing.empty() || !unexpected.empty())
            ? " (pass strict=false to load the keys that match)"
            : "");
    if (!size_mismatches.empty()) throw ShapeError(message);
    if (!dtype_mismatches.empty()) throw DTypeError(message);
    throw Error(message);
  }
  NoGradGuard no_grad;
  // A source that shares storage with the module (a state built from its own tensors, say with
  // two layers swapped) is read before any copy overwrites it.
  std::set<const void*> storages;
  for (const auto& [name, slot] : slots)
    if (slot->tensor->defined()) storages.insert(slot->tensor->impl().storage.get());
  std::vector<Tensor> sources;
  for (const auto& [name, t] : state)
    sources.push_back(find(name) && storages.count(t.impl().storage.get()) ? t.detach().clone()
                                                                           : t);
  for (std::size_t i = 0; i < state.size(); ++i) {
    const Slot* s = find(state[i].first);
    if (!s) continue;
    Tensor& slot = *s->tensor;
    const Tensor& t = sources[i];
    if (slot.defined()) {
      slot.copy_(t);
    } else {  // an empty slot takes a copy of its own
      slot = t.detach().clone();
      if (s->parameter) slot.requires_grad_(is_floating(slot.dtype()));
    }
  }
}

void Module::save(const std::string& path) const {
  save_safetensors(path, state_dict());
}

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

void Module::to(Device device) {
  NoGradGuard no_grad;
  std::map<const TensorImpl*, Tensor> moved;  // keeps tied slots tied
  visit_slots("", [&](const std::string&, const Slot& s) {
    if (!s.tensor->defined() || s.tensor->device() == device) return;
    auto [it, fresh] = moved.try_emplace(&s.tensor->impl());
    if (fresh) {
      it->second = s.tensor->to(device).detach();
      if (s.parameter) it->second.requires_grad_(true);
    }
    *s.tensor = it->second;
  });
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module::to: {} is not a floating dtype", dtype);
  NoGradGuard no_grad;
  std::map<const TensorImpl*, Tensor> converted;  // keeps tied slots tied
  visit_slots("", [&](const std::string&, const Slot& s) {
    if (!s.tensor->defined() || !is_floating(s.tensor->dtype()) || s.tensor->dtype() == dtype)
      return;
    auto [it, fresh] = converted.try_emplace(&s.tensor->impl());
    if (fresh) {
      it->second = s.tensor->to(dtype).detach();
      if (s.parameter) it->second.requires_grad_(true);
    }
    *s.tensor = it->second;
  });
}

void Module::register_parameter(const std::string& name, Tensor& slot) {
  KILN_CHECK(slot.defined(), "register_parameter: '{}' holds no tensor", name);
  slot.requires_grad_(true);
  slots_.push_back({name, &slot, true});
}

void Module::register_buffer(const std::string& name, Tensor& slot, bool persistent) {
  slots_.push_back({name, &slot, false, persistent});
}

void Module::register_module(const std::string& name, Module& child) {
  children_.emplace_back(name, &child);
}

void Module::make_buffer(const std::string& name) {
  for (Slot& s : slots_)
    if (s.name == name && s.parameter) {
      s.parameter = false;
      if (s.tensor->defined()) s.tensor->requires_grad_(false);
      return;
    }
  throw Error(fmt::format("make_buffer: this module has no parameter '{}'", name));
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

Linear::Linear(std::int64_t in_features, std::int64_t out_features, Activation activation,
               bool with_bias, DType dtype, Generator* gen)
    : Linear(in_features, out_features, with_bias, dtype, gen) {
  activation_ = activation;
}

Tensor Linear::forward(const Tensor& x) const {
  if (quantized()) return linear_int8(x, weight, weight_scale, bias, activation_);
  return linear(x, weight, bias, activation_);
}

void Linear::quantize_int8() {
  KILN_CHECK(!quantized(), "Linear::quantize_int8: the weight is int8 already");
  KILN_CHECK_AS(DTypeError, is_floating(weight.dtype()) && weight.dtype() != DType::f64,
                "Linear::quantize_int8: the weight is {}; int8 quantization takes f32, f16 or "
                "bf16 weights",
                dtype_name(weight.dtype()));
  NoGradGuard no_grad;
  // Per output channel: scale = max |w| / 127 (1 for a zero row), q = round(w / scale).
  Tensor w = weight.detach().to(DType::f32);
  Tensor amax_w = amax(abs(w), {1}, true);
  Tensor scale = where(gt(amax_w, 0.0), div(amax_w, 127.0), 1.0);
  Tensor q = clamp(round(div(w, scale)), -127, 127).to(DType::i8);
  weight_scale = scale.reshape({weight.shape()[0]}).to(weight.dtype());
  weight = q;
  make_buffer("weight");
  register_buffer("weight_scale", weight_scale);
}

void quantize_int8(Module& module) {
  for (auto& [name, m] : module.named_modules())
    if (auto* linear = dynamic_cast<Linear*>(m); linear && !linear->quantized())
      linear->quantize_int8();
}

FeedForward::FeedForward(std::int64_t in_features, std::int64_t hidden_features,
                         std::int64_t out_features, Activation activation, bool bias, DType dtype,
                         Generator* gen)
    : fc1(in_features, hidden_features, activation, bias, dtype, gen),
      fc2(hidden_features, out_features, bias, dtype, gen) {
  register_module("fc1", fc1);
  register_module("fc2", fc2);
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
