// Dropout as a module, as torch.nn.Dropout: dropout(x, p) in training mode, the identity in eval
// mode. A registered child, it follows its parent's Module::train / eval; it draws its masks
// from the generator it is given, so that a model owning that generator replays its masks.
#pragma once

#include <cstdint>

#include "autograd/nn.h"
#include "autograd/ops.h"

namespace kiln::demos {

// The seed of a model's dropout generator, from the seed its weights are drawn from: a stream
// apart from theirs (the same seed, offsets from 0, would reuse their numbers).
inline std::uint64_t dropout_seed(std::uint64_t init_seed) {
  return init_seed ^ 0x9E3779B97F4A7C15ull;
}

class Dropout : public nn::Module {
 public:
  // `gen` null: the default generator. p 0 draws nothing.
  explicit Dropout(double p, Generator* gen = nullptr) : p_(p), gen_(gen) {
    KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got {}", p);
  }
  Tensor forward(const Tensor& x) const { return dropout(x, p_, is_training(), gen_); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

}  // namespace kiln::demos
