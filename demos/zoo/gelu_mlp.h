// The MLP of ViT and MLP-Mixer blocks: fc2(gelu(fc1(x))) with the exact (erf) GELU, written as
// separate Linear layers and activation, as timm's Mlp.
#pragma once

#include <cstdint>

#include "autograd/nn.h"
#include "autograd/ops.h"

namespace kiln::zoo {

// fc2(gelu(fc1(x))), the exact (erf) GELU.
class GeluMlp : public nn::Module {
 public:
  GeluMlp(std::int64_t dim, std::int64_t hidden, std::int64_t out, Generator* gen)
      : fc1(dim, hidden, true, DType::f32, gen), fc2(hidden, out, true, DType::f32, gen) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) const { return fc2(gelu(fc1(x))); }
  nn::Linear fc1, fc2;
};

}  // namespace kiln::zoo
