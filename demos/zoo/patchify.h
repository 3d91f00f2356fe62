// Cuts images into non-overlapping square patches by reshape and permute, as ViT and MLP-Mixer
// implementations do before their linear patch embedding (a stride-P convolution's equivalent).
#pragma once

#include "autograd/ops.h"

namespace kiln::zoo {

// images [B, C, H, W] -> patches [B, (H/P) (W/P), C P P], patches in row-major order, each
// flattened channel-major as a [C, P, P] block.
inline Tensor patchify(const Tensor& images, std::int64_t patch) {
  KILN_CHECK(images.dim() == 4,
             "patchify: images of shape {}, not [batch, channels, height, width]",
             shape_str(images.shape()));
  const std::int64_t b = images.shape()[0], c = images.shape()[1], h = images.shape()[2],
                     w = images.shape()[3];
  KILN_CHECK(patch > 0 && h % patch == 0 && w % patch == 0,
             "patchify: images of shape {} do not split into {}x{} patches",
             shape_str(images.shape()), patch, patch);
  return images.reshape({b, c, h / patch, patch, w / patch, patch})
      .permute({0, 2, 4, 1, 3, 5})
      .reshape({b, (h / patch) * (w / patch), c * patch * patch});
}

}  // namespace kiln::zoo
