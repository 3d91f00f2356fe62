// A training batch of the zoo's synthetic tasks: inputs (tokens or images) and targets, drawn on
// the host so that every device and dtype sees the same data.
#pragma once

#include "runtime/tensor.h"

namespace kiln::zoo {

struct Batch {
  Tensor inputs;   // i64 tokens [batch, time] or f32 images [batch, channels, height, width]
  // i64 class per position [batch, time], per image [batch], or BERT's class and masked tokens
  // [batch, 1 + time] (zoo::masked_lm_batch)
  Tensor targets;

  // On `device`, floating inputs as `float_dtype` (f64 for the CPU reference); targets unchanged.
  Batch to(Device device, DType float_dtype = DType::f32) const {
    Tensor x = is_floating(inputs.dtype()) ? inputs.to(float_dtype) : inputs;
    return {x.to(device), targets.to(device)};
  }
};

}  // namespace kiln::zoo
