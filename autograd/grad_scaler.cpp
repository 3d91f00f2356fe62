// GradScaler: loss scaling with the inf check and the scale update on the device (see the header).
#include "autograd/grad_scaler.h"

#include <cmath>

#include "autograd/ops.h"
#include "runtime/grad_mode.h"
#include "runtime/multi_tensor.h"

namespace kiln::amp {
namespace {

void check_options(const GradScaler::Options& o) {
  KILN_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0,
             "GradScaler: the scale must be finite and positive, got {}", o.init_scale);
  KILN_CHECK(o.growth_factor > 1, "GradScaler: growth_factor must be > 1, got {}", o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1,
             "GradScaler: backoff_factor must be in (0, 1), got {}", o.backoff_factor);
  KILN_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got {}",
             o.growth_interval);
}

// Flags and slots: the iteration's flags grow in blocks, so that a few optimizers never
// reallocate them.
constexpr std::int64_t kFlagBlock = 8;

}  // namespace

GradScaler::GradScaler() : GradScaler(Options{}) {}

GradScaler::GradScaler(Options options) : options_(options) {
  check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  KILN_CHECK_AS(DTypeError, is_floating(loss.dtype()),
                "GradScaler.scale: the loss must be floating point, got {} {}",
                dtype_name(loss.dtype()), shape_str(loss.shape()));
  if (!scale_.defined()) {
    NoGradGuard no_grad;
    scale_ = full({}, options_.init_scale, DType::f32).to(loss.device());
    growth_tracker_ = full({}, initial_growth_tracker_, DType::i64).to(loss.device());
  }
  KILN_CHECK(loss.device() == scale_.device(),
             "GradScaler.scale: the loss is on {} but the scale lives on {} (where the first "
             "scaled loss was)",
             loss.device().str(), scale_.device().str());
  return loss * scale_;
}

GradScaler::PerOptimizer& GradScaler::entry_of(const optim::Optimizer& optimizer) {
  auto it = optimizers_.find(&optimizer);
  if (it == optimizers_.end()) {
    PerOptimizer entry;
    entry.slot = static_cast<std::int64_t>(optimizers_.size()) + 1;
    it = optimizers_.emplace(&optimizer, entry).first;
  }
  return it->second;
}

void GradScaler::reserve_flags() {
  auto needed = static_cast<std::int64_t>(optimizers_.size()) + 1;
  if (flags_.defined() && flags_.numel() >= needed) return;
  std::int64_t size = (needed + kFlagBlock - 1) / kFlagBlock * kFlagBlock;
  Tensor grown = zeros({size}, DType::f32, scale_.device());
  if (flags_.defined()) grown.slice(0, 0, flags_.numel()).copy_(flags_);
  flags_ = grown;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  KILN_CHECK(scale_.defined(),
             "GradScaler.unscale_: scale() was never called, so there is no scale to divide "
             "{}'s gradients by",
             optimizer.name());
  PerOptimizer& entry = entry_of(optimizer);
  KILN_CHECK(entry.stage != Stage::unscaled,
             "GradScaler.unscale_: already called for this {} since the last update()",
             optimizer.name());
  KILN_CHECK(entry.stage != Stage::stepped,
             "GradScaler.unscale_: called after step() for this {}; call update() first",
             optimizer.name());
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  const auto& params = optimizer.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    KILN_CHECK_AS(DTypeError, g.dtype() == DType::f32 || g.dtype() == DType::f64,
                  "GradScaler.unscale_: parameter {} (shape {}) of {} has a {} gradient; loss "
                  "scaling unscales the f32 gradients of f32 master weights (autocast keeps "
                  "parameters f32; bf16 has f32's range and needs no scaling)",
                  i, shape_str(params[i].shape()), optimizer.name(), dtype_name(g.dtype()));
    KILN_CHECK(g.device() == scale_.device(),
               "GradScaler.unscale_: parameter {} (shape {}) of {} has its gradient on {} but "
               "the scale is on {}",
               i, shape_str(params[i].shape()), optimizer.name(), g.device().str(),
               scale_.device().str());
    if (g.numel() != 0 && !g.is_contiguous()) {  // unscaled in place: give it its own layout
      g = g.contiguous();
      params[i].set_grad(g);
    }
    grads.push_back(g);
  }
  reserve_flags();
  Tensor found_inf = flags_.select(0, entry.slot), found_any = flags_.select(0, 0);
  if (MultiTensorBackend* backend = multi_tensor_backend(scale_.device().type)) {
    backend->unscale(grads, scale_, found_inf, found_any, unscale_cache_);
    for (const auto& g : grads) g.impl().storage->bump_version();
  } else {
    // The reference: g - g is 0 where g is finite and NaN where it is not.
    auto inv_scale = static_cast<float>(1.0 / scale_.item());
    bool found = false;
    for (auto& g : grads) {
      found = found || std::isnan((g - g).to(DType::f64).sum().item());
      g.mul_(inv_scale);
    }
    if (found) {
      found_inf.fill_(1);
      found_any.fill_(1);
    }
  }
  entry.stage = Stage::unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) return optimizer.step();
  PerOptimizer& entry = entry_of(optimizer);
  KILN_CHECK(entry.stage != Stage::stepped,
             "GradScaler.step: already called for this {} since the last update()",
             optimizer.name());
  if (entry.stage == Stage::ready) unscale_(optimizer);
  optimizer.step_unless(flags_.select(0, entry.slot));
  entry.stage = Stage::stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool recorded = false;
  for (const auto& [optimizer, entry] : optimizers_)
    recorded = recorded || entry.stage != Stage::ready;
  KILN_CHECK(recorded,
             "GradScaler.update: no inf check was recorded since the last update(); call step() "
             "or unscale_() first");
  ScaleUpdate update{options_.growth_factor, options_.backoff_factor, options_.growth_interval};
  if (MultiTensorBackend* backend = multi_tensor_backend(scale_.device().type)) {
    backend->update_scale(scale_, growth_tracker_, flags_, update);
  } else {
    // The reference: torch's _amp_update_scale_ on the host.
    NoGradGuard no_grad;
    auto scale = static_cast<float>(scale_.item());
    auto tracker = growth_tracker_.item<std::int64_t>();
    if (flags_.select(0, 0).item() != 0) {
      scale = static_cast<float>(scale * update.backoff_factor);
      tracker = 0;
    } else if (++tracker == update.growth_interval) {
      auto grown = static_cast<float>(scale * update.growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    }
    scale_.fill_(scale);
    growth_tracker_.fill_(tracker);
    flags_.zero_();
  }
  finish_iteration();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  KILN_CHECK(std::isfinite(new_scale) && new_scale > 0,
             "GradScaler.update: the new scale must be finite and positive, got {}", new_scale);
  NoGradGuard no_grad;
  if (scale_.defined())
    scale_.copy_(full({}, new_scale, DType::f32));
  else
    options_.init_scale = new_scale;
  if (flags_.defined()) flags_.zero_();
  finish_iteration();
}

void GradScaler::finish_iteration() {
  for (auto& [optimizer, entry] : optimizers_) entry.stage = Stage::ready;
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item() : options_.init_scale;
}

nn::StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  auto tracker =
      growth_tracker_.defined() ? growth_tracker_.item<std::int64_t>() : initial_growth_tracker_;
  return {{"scale", scalar_tensor(get_scale(), DType::f64)},
          {"growth_factor", scalar_tensor(options_.growth_factor, DType::f64)},
          {"backoff_factor", scalar_tensor(options_.backoff_factor, DType::f64)},
          {"growth_interval", scalar_tensor(options_.growth_interval, DType::i64)},
          {"growth_tracker", scalar_tensor(tracker, DType::i64)}};
}

void GradScaler::load_state_dict(const nn::StateDict& state) {
  KILN_CHECK(options_.enabled, "GradScaler.load_state_dict: this scaler is disabled");
  optim::StateReader reader("GradScaler.load_state_dict", state);
  Options next = options_;
  next.init_scale = reader.scalar("scale");
  next.growth_factor = reader.scalar("growth_factor");
  next.backoff_factor = reader.scalar("backoff_factor");
  next.growth_interval = reader.integer("growth_interval");
  std::int64_t tracker = reader.integer("growth_tracker");
  reader.finish();
  check_options(next);
  KILN_CHECK(tracker >= 0, "GradScaler.load_state_dict: 'growth_tracker' must be >= 0, got {}",
             tracker);
  options_ = next;
  NoGradGuard no_grad;
  if (scale_.defined()) {
    scale_.copy_(full({}, next.init_scale, DType::f32));
    growth_tracker_.copy_(full({}, tracker, DType::i64));
  } else {
    initial_growth_tracker_ = tracker;
  }
}

}  // namespace kiln::amp
