// SGD and AdamW, their state dicts, gradient clipping, and the StateReader state dicts use.
#include "autograd/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "autograd/ops.h"
#include "runtime/grad_mode.h"

namespace kiln::optim {

namespace {

void check_lr(const std::string& owner, double lr) {
  KILN_CHECK(std::isfinite(lr) && lr >= 0,
             "{}: learning rate must be finite and non-negative, got {}", owner, lr);
}

void check_sgd(double lr, double momentum, bool nesterov) {
  check_lr("SGD", lr);
  KILN_CHECK(momentum >= 0, "SGD: momentum must be non-negative, got {}", momentum);
  KILN_CHECK(!nesterov || momentum > 0, "SGD: nesterov needs a positive momentum");
}

void check_adamw(double lr, double beta1, double beta2, double eps) {
  check_lr("AdamW", lr);
  KILN_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
             "AdamW: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  KILN_CHECK(eps >= 0, "AdamW: eps must be non-negative, got {}", eps);
}

Tensor f64_scalar(double v) {
  return scalar_tensor(v, DType::f64);
}
Tensor i64_scalar(std::int64_t v) {
  return scalar_tensor(v, DType::i64);
}

std::string state_key(std::size_t i, const char* buffer) {
  return fmt::format("state.{}.{}", i, buffer);
}

// Checks "num_params" against the optimizer's parameters.
void read_param_count(StateReader& reader, const std::string& owner, std::size_t count) {
  std::int64_t n = reader.integer("num_params");
  KILN_CHECK(n == static_cast<std::int64_t>(count),
             "{}.load_state_dict: 'num_params' is {} but this optimizer has {} parameters", owner,
             n, count);
}

// A copy of the buffer under `key` as parameter `i` holds data (dtype, device); undefined when
// the state has none. Error when its shape is not the parameter's.
Tensor read_buffer(StateReader& reader, const std::string& owner, const std::string& key,
                   const Tensor& param, std::size_t i) {
  const Tensor* t = reader.find(key);
  if (!t) return Tensor();
  KILN_CHECK_AS(ShapeError, t->shape() == param.shape(),
                "{}.load_state_dict: '{}' has shape {} but parameter {} has shape {}", owner, key,
                shape_str(t->shape()), i, shape_str(param.shape()));
  // Cast on the host side first (device casts need generated kernels); never alias `state`.
  Tensor out = t->detach().to(param.dtype()).to(param.device());
  return out.impl().storage == t->impl().storage ? out.clone() : out;
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, double lr)
    : name_(std::move(name)), params_(std::move(params)), lr_(lr) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    KILN_CHECK_AS(AutogradError, params_[i].defined() && params_[i].requires_grad(),
                  "{}: parameter {} (shape {}) does not require grad", name_, i,
                  params_[i].defined() ? shape_str(params_[i].shape()) : "undefined");
    KILN_CHECK(params_[i].device() == params_[0].device(),
               "{}: parameters on two devices: parameter 0 is on {} and parameter {} (shape "
               "{}) on {}",
               name_, params_[0].device().str(), i, shape_str(params_[i].shape()),
               params_[i].device().str());
  }
}

bool Optimizer::fused() const {
  return fused_backend() != nullptr;
}

MultiTensorBackend* Optimizer::fused_backend() const {
  if (!fused_ || params_.empty()) return nullptr;
  return multi_tensor_backend(params_[0].device().type);
}

namespace {

// The order of dims that makes `t` contiguous (t.permute(order) is then a contiguous view of the
// same memory), or nullopt when none does: a view with gaps between its elements.
std::optional<std::vector<std::int64_t>> dense_order(const Tensor& t) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  if (t.numel() == 0 || t.is_contiguous()) return order;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return t.strides()[a] > t.strides()[b]; });
  if (t.detach().permute(order).is_contiguous()) return order;
  return std::nullopt;
}

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& order) {
  std::vector<std::int64_t> out(order.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    out[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  return out;
}

// `t` in `order`, contiguous when t is laid out as its parameter is (empty tensors as they are).
Tensor in_order(const Tensor& t, const std::vector<std::int64_t>& order) {
  return t.numel() == 0 ? t.detach() : t.detach().permute(order);
}

}  // namespace

Optimizer::FusedLists Optimizer::fused_lists() const {
  FusedLists lists;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    KILN_CHECK(g.device() == p.device(),
               "{}.step: parameter {} (shape {}) is on {} but its gradient is on {}", name_, i,
               shape_str(p.shape()), p.device().str(), g.device().str());
    KILN_CHECK_AS(DTypeError, g.dtype() == p.dtype(),
                  "{}.step: parameter {} (shape {}) is {} but its gradient is {}: the fused step "
                  "updates a parameter, its gradient and its state in one dtype",
                  name_, i, shape_str(p.shape()), dtype_name(p.dtype()), dtype_name(g.dtype()));
    auto order = dense_order(p);
    KILN_CHECK(order.has_value(),
               "{}.step: parameter {} (shape {}, strides {}) is a view with gaps between its "
               "elements, which the fused step cannot update in place; make the parameter a "
               "tensor of its own, or call set_fused(false)",
               name_, i, shape_str(p.shape()), shape_str(p.strides()));
    Tensor grad = in_order(g, *order);
    lists.index.push_back(i);
    lists.params.push_back(in_order(p, *order));
    lists.grads.push_back(grad.numel() == 0 || grad.is_contiguous() ? grad : grad.contiguous());
    lists.order.push_back(std::move(*order));
  }
  return lists;
}

Tensor Optimizer::fused_state(Tensor& state, const FusedLists& lists, std::size_t k) {
  const Tensor& work = lists.params[k];
  const auto& order = lists.order[k];
  if (!state.defined())
    state = zeros(work.shape(), work.dtype(), work.device()).permute(inverse(order));
  Tensor view = in_order(state, order);
  if (view.numel() != 0 && !view.is_contiguous()) {  // loaded in another layout
    state = view.contiguous().permute(inverse(order));
    view = in_order(state, order);
  }
  return view;
}

void Optimizer::finish_fused(const FusedLists& lists, const std::vector<Tensor>& states) {
  for (const auto& p : lists.params) p.impl().storage->bump_version();
  for (const auto& s : states) s.impl().storage->bump_version();
}

Tensor Optimizer::state_entry(const Tensor& t) const {
  return fused_backend() ? t.detach().clone() : t.detach();
}

void Optimizer::step_unless(const Tensor& found_inf) {
  KILN_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.dtype() == DType::f32,
             "{}.step_unless: the inf flag must be a one-element f32 tensor, got {}", name_,
             found_inf.defined()
                 ? fmt::format("{} {}", dtype_name(found_inf.dtype()), shape_str(found_inf.shape()))
                 : "an undefined tensor");
  KILN_CHECK(params_.empty() || found_inf.device() == params_[0].device(),
             "{}.step_unless: the inf flag is on {} but the parameters are on {}", name_,
             found_inf.device().str(), params_[0].device().str());
  NoGradGuard no_grad;
  if (MultiTensorBackend* backend = fused_backend()) return step_fused_unless(*backend, found_inf);
  if (found_inf.item() == 0) step();
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

void Optimizer::set_lr(double lr) {
  check_lr(name_ + ".set_lr", lr);
  lr_ = lr;
}

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay, bool nesterov)
    : Optimizer("SGD", std::move(params), lr),
      momentum_(momentum),
      weight_decay_(weight_decay),
      nesterov_(nesterov),
      momentum_buffers_(params_.size()) {
  check_sgd(lr, momentum, nesterov);
}

void SGD::step() {
  NoGradGuard no_grad;
  if (MultiTensorBackend* backend = fused_backend()) return step_fused(*backend);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (weight_decay_ != 0) g = g + p * weight_decay_;
    if (momentum_ != 0) {
      Tensor& buf = momentum_buffers_[i];
      buf = buf.defined() ? buf * momentum_ + g : g.clone();
      g = nesterov_ ? g + buf * momentum_ : buf;
    }
    p.add_(g, -lr_);
  }
}

void SGD::step_fused(MultiTensorBackend& backend, const StepFlag* flag) {
  FusedLists lists = fused_lists();
  std::vector<Tensor> buffers;
  if (momentum_ != 0)  // zeros at first: the first step's buffer is then g, as torch's
    for (std::size_t k = 0; k < lists.index.size(); ++k)
      buffers.push_back(fused_state(momentum_buffers_[lists.index[k]], lists, k));
  backend.sgd(lists.params, lists.grads, buffers, {lr_, momentum_, weight_decay_, nesterov_, flag},
              fused_cache_);
  finish_fused(lists, buffers);
}

void SGD::step_fused_unless(MultiTensorBackend& backend, const Tensor& found_inf) {
  StepFlag flag{found_inf.detach(), Tensor()};
  step_fused(backend, &flag);
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict state = {{"lr", f64_scalar(lr_)},
                         {"momentum", f64_scalar(momentum_)},
                         {"weight_decay", f64_scalar(weight_decay_)},
                         {"nesterov", f64_scalar(nesterov_ ? 1.0 : 0.0)},
                         {"num_params", i64_scalar(static_cast<std::int64_t>(params_.size()))}};
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined())
      state.emplace_back(state_key(i, "momentum_buffer"), state_entry(momentum_buffers_[i]));
  return state;
}

void SGD::load_state_dict(const nn::StateDict& state) {
  StateReader reader("SGD.load_state_dict", state);
  double lr = reader.scalar("lr"), momentum = reader.scalar("momentum");
  double weight_decay = reader.scalar("weight_decay");
  bool nesterov = reader.scalar("nesterov") != 0;
  check_sgd(lr, momentum, nesterov);
  read_param_count(reader, "SGD", params_.size());
  std::vector<Tensor> buffers(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    buffers[i] = read_buffer(reader, "SGD", state_key(i, "momentum_buffer"), params_[i], i);
  reader.finish();
  // Everything checked: nothing below throws.
  lr_ = lr;
  momentum_ = momentum;
  weight_decay_ = weight_decay;
  nesterov_ = nesterov;
  momentum_buffers_ = std::move(buffers);
}

// ---- AdamW ----

AdamW::AdamW(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps,
             double weight_decay)
    : Optimizer("AdamW", std::move(params), lr),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps),
      weight_decay_(weight_decay),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  check_adamw(lr, beta1, beta2, eps);
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_;
  if (MultiTensorBackend* backend = fused_backend()) {
    if (!skipped_steps_.defined()) return step_fused(*backend);
    // Steps were cancelled on the device: the kernel counts them in (with a flag that is 0).
    StepFlag flag{zeros({}, DType::f32, params_[0].device()), skipped_steps_};
    return step_fused(*backend, &flag);
  }
  auto t = static_cast<double>(steps());
  double bias1 = 1.0 - std::pow(beta1_, t);
  double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2_, t));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    p.mul_(1.0 - lr_ * weight_decay_);
    exp_avg_[i] = exp_avg_[i] * beta1_ + g * (1.0 - beta1_);
    exp_avg_sq_[i] = exp_avg_sq_[i] * beta2_ + g * g * (1.0 - beta2_);
    // torch's order: sqrt(v) / sqrt(1 - beta2^t) + eps, step lr / (1 - beta1^t).
    Tensor denom = sqrt(exp_avg_sq_[i]) / bias2_sqrt + eps_;
    p.add_(exp_avg_[i] / denom, -lr_ / bias1);
  }
}

void AdamW::step_fused(MultiTensorBackend& backend, const StepFlag* flag) {
  FusedLists lists = fused_lists();
  std::vector<Tensor> avg, avg_sq;
  for (std::size_t k = 0; k < lists.index.size(); ++k) {
    avg.push_back(fused_state(exp_avg_[lists.index[k]], lists, k));
    avg_sq.push_back(fused_state(exp_avg_sq_[lists.index[k]], lists, k));
  }
  backend.adamw(lists.params, lists.grads, avg, avg_sq,
                {lr_, beta1_, beta2_, eps_, weight_decay_, step_, flag}, fused_cache_);
  avg.insert(avg.end(), avg_sq.begin(), avg_sq.end());
  finish_fused(lists, avg);
}

void AdamW::step_fused_unless(MultiTensorBackend& backend, const Tensor& found_inf) {
  if (!skipped_steps_.defined()) skipped_steps_ = zeros({}, DType::i64, found_inf.device());
  ++step_;
  StepFlag flag{found_inf.detach(), skipped_steps_};
  step_fused(backend, &flag);
}

std::int64_t AdamW::steps() const {
  if (!skipped_steps_.defined()) return step_;
  return step_ - static_cast<std::int64_t>(skipped_steps_.item());
}

nn::StateDict AdamW::state_dict() const {
  nn::StateDict state = {{"lr", f64_scalar(lr_)},
                         {"beta1", f64_scalar(beta1_)},
                         {"beta2", f64_scalar(beta2_)},
                         {"eps", f64_scalar(eps_)},
                         {"weight_decay", f64_scalar(weight_decay_)},
                         {"step", i64_scalar(steps())},
                         {"num_params", i64_scalar(static_cast<std::int64_t>(params_.size()))}};
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (exp_avg_[i].defined()) {
      state.emplace_back(state_key(i, "exp_avg"), state_entry(exp_avg_[i]));
      state.emplace_back(state_key(i, "exp_avg_sq"), state_entry(exp_avg_sq_[i]));
    }
  return state;
}

void AdamW::load_state_dict(const nn::StateDict& state) {
  StateReader reader("AdamW.load_state_dict", state);
  double lr = reader.scalar("lr"), beta1 = reader.scalar("beta1"), beta2 = reader.scalar("beta2");
  double eps = reader.scalar("eps"), weight_decay = reader.scalar("weight_decay");
  std::int64_t step = reader.integer("step");
  check_adamw(lr, beta1, beta2, eps);
  KILN_CHECK(step >= 0, "AdamW.load_state_dict: 'step' must be non-negative, got {}", step);
  read_param_count(reader, "AdamW", params_.size());
  std::vector<Tensor> avg(params_.size()), avg_sq(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    std::string k1 = state_key(i, "exp_avg"), k2 = state_key(i, "exp_avg_sq");
    avg[i] = read_buffer(reader, "AdamW", k1, params_[i], i);
    avg_sq[i] = read_buffer(reader, "AdamW", k2, params_[i], i);
    KILN_CHECK(avg[i].defined() == avg_sq[i].defined(),
               "AdamW.load_state_dict: parameter {} has '{}' but not '{}'", i,
               avg[i].defined() ? k1 : k2, avg[i].defined() ? k2 : k1);
  }
  reader.finish();
  lr_ = lr;
  beta1_ = beta1;
  beta2_ = beta2;
  eps_ = eps;
  weight_decay_ = weight_decay;
  step_ = step;
  skipped_steps_ = Tensor();
  exp_avg_ = std::move(avg);
  exp_avg_sq_ = std::move(avg_sq);
}

// ---- gradient clipping ----

namespace {

// ||g||_p in f64 (p = infinity: max |g|; NaN entries make it NaN).
double grad_norm(const Tensor& grad, double p) {
  Tensor g = abs(grad.detach().to(DType::f64));
  if (g.numel() == 0) return 0.0;
  if (std::isinf(p)) return amax(g).item();
  if (p == 1) return g.sum().item();
  if (p == 2) return std::sqrt((g * g).sum().item());
  return std::pow(pow(g, p).sum().item(), 1.0 / p);
}

}  // namespace

namespace {

void check_clip(double max_norm, double norm_type) {
  KILN_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be non-negative, got {}", max_norm);
  KILN_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or infinity, got {}",
             norm_type);
}

// The gradients of `params` that exist; Error when they are on two devices.
std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) {
      grads.push_back(p.grad());
      KILN_CHECK(grads.back().device() == grads.front().device(),
                 "clip_grad_norm_: gradients on two devices: {} and {} (shape {})",
                 grads.front().device().str(), grads.back().device().str(),
                 shape_str(grads.back().shape()));
    }
  return grads;
}

// The reference: per-gradient norms in f64 on the host, combined as torch does.
double clip_reference(std::vector<Tensor>& grads, double max_norm, double norm_type) {
  // The norm of the per-parameter norms, as torch (equal to the norm over all elements).
  bool inf_norm = std::isinf(norm_type), nan = false;
  double total = 0.0;
  for (const auto& g : grads) {
    double n = grad_norm(g, norm_type);
    nan = nan || std::isnan(n);
    if (inf_norm)
      total = std::max(total, n);
    else
      total += norm_type == 1 ? n : norm_type == 2 ? n * n : std::pow(n, norm_type);
  }
  if (norm_type == 2)
    total = std::sqrt(total);
  else if (!inf_norm && norm_type != 1)
    total = std::pow(total, 1.0 / norm_type);
  if (nan) total = std::numeric_limits<double>::quiet_NaN();
  // std::min keeps a NaN coefficient, as torch.clamp does.
  double coef = std::min(max_norm / (total + 1e-6), 1.0);
  if (coef != 1.0)
    for (auto& g : grads) g.mul_(coef);
  return total;
}

// The multi-tensor implementation for these gradients' device, or nullptr.
MultiTensorBackend* clip_backend(const std::vector<Tensor>& grads) {
  return grads.empty() ? nullptr : multi_tensor_backend(grads.front().device().type);
}

// The fused clip over contiguous views of the gradients (a norm and a scaling do not care in
// which order they visit elements); Error on a gradient with gaps, which it cannot scale in place.
Tensor fused_clip(MultiTensorBackend& backend, const std::vector<Tensor>& grads, double max_norm,
                  double norm_type) {
  // One cache for every caller: a training loop clips the same gradients' addresses each step,
  // so the table stays on the device; another list uploads its own.
  static std::mutex mutex;
  static std::unique_ptr<MultiTensorCache> cache;
  std::vector<Tensor> work;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    auto order = dense_order(grads[i]);
    KILN_CHECK(order.has_value(),
               "clip_grad_norm_: gradient {} (shape {}, strides {}) is a view with gaps between "
               "its elements, which cannot be scaled in place",
               i, shape_str(grads[i].shape()), shape_str(grads[i].strides()));
    work.push_back(in_order(grads[i], *order));
  }
  Tensor total;
  {
    std::lock_guard lock(mutex);
    total = backend.clip_grad_norm(work, {max_norm, norm_type}, cache);
  }
  for (const auto& g : work) g.impl().storage->bump_version();
  return total;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  check_clip(max_norm, norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(params);
  if (MultiTensorBackend* backend = clip_backend(grads))
    return fused_clip(*backend, grads, max_norm, norm_type).item();  // the one host read
  return clip_reference(grads, max_norm, norm_type);
}

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm,
                              double norm_type) {
  check_clip(max_norm, norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(params);
  if (MultiTensorBackend* backend = clip_backend(grads))
    return fused_clip(*backend, grads, max_norm, norm_type);
  bool f64 = std::any_of(grads.begin(), grads.end(),
                         [](const Tensor& g) { return g.dtype() == DType::f64; });
  Tensor total =
      scalar_tensor(clip_reference(grads, max_norm, norm_type), f64 ? DType::f64 : DType::f32);
  // On the gradients' device; with none, on the parameters'.
  for (const auto& p : params)
    if (p.defined()) return total.to(grads.empty() ? p.device() : grads.front().device());
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be non-negative, got {}",
             clip_value);
  NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) {
      Tensor g = p.grad();
      g.copy_(clamp(g, -clip_value, clip_value));
    }
}

// ---- StateReader ----

StateReader::StateReader(std::string owner, const nn::StateDict& state)
    : owner_(std::move(owner)), state_(state), read_(state.size(), false) {
  for (std::size_t i = 0; i < state.size(); ++i) {
    KILN_CHECK(state[i].second.defined(), "{}: '{}' holds no tensor", owner_, state[i].first);
    KILN_CHECK(index_.emplace(state[i].first, i).second, "{}: key '{}' appears twice", owner_,
               state[i].first);
  }
}

const Tensor* StateReader::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  read_[it->second] = true;
  return &state_[it->second].second;
}

double StateReader::scalar(const std::string& key) {
  const Tensor* t = find(key);
  KILN_CHECK(t, "{}: missing key '{}'", owner_, key);
  KILN_CHECK(t->numel() == 1, "{}: '{}' must hold one value, got shape {}", owner_, key,
             shape_str(t->shape()));
  return t->to(Device::cpu()).item();
}

std::int64_t StateReader::integer(const std::string& key) {
  const Tensor* t = find(key);
  KILN_CHECK(t, "{}: missing key '{}'", owner_, key);
  KILN_CHECK(t->numel() == 1 && (t->dtype() == DType::i64 || t->dtype() == DType::i32),
             "{}: '{}' must hold one integer, got shape {} dtype {}", owner_, key,
             shape_str(t->shape()), dtype_name(t->dtype()));
  return t->to(Device::cpu()).item<std::int64_t>();
}

void StateReader::finish() const {
  for (std::size_t i = 0; i < state_.size(); ++i)
    KILN_CHECK(read_[i], "{}: unexpected key '{}' (shape {})", owner_, state_[i].first,
               shape_str(state_[i].second.shape()));
}

}  // namespace kiln::optim
