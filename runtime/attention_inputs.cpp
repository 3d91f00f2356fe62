// The attention ops' input layout and dropout constants (see attention_inputs.h).
#include "runtime/attention_inputs.h"

#include "runtime/error.h"

namespace kiln {

AttentionInputs attention_inputs(OpId op, std::size_t count, const OpAttrs& attrs) {
  AttentionInputs in;
  in.fixed = op == OpId::attention ? 3 : 6;
  std::size_t numbers = attrs.dropout > 0 ? 2 : 0;
  KILN_CHECK(count == in.fixed + numbers || count == in.fixed + numbers + 1,
             "{}: expected {} inputs or {} with a mask{}, got {}", op, in.fixed + numbers,
             in.fixed + numbers + 1, numbers ? " (the last two the dropout's seed and offset)" : "",
             count);
  if (count > in.fixed + numbers) in.mask = in.fixed;
  if (numbers) in.seed = count - 2;
  return in;
}

AttentionDropout attention_dropout(double p, DType dtype) {
  // dropout(x, p) compares uniforms of x's dtype with p and scales by 1 / (1 - p), both numbers
  // taking that dtype (f32 here for f32, f16 and bf16 probabilities).
  if (dtype == DType::f64) return {p, 1.0 / (1.0 - p)};
  return {static_cast<float>(p), static_cast<float>(1.0 / (1.0 - p))};
}

}  // namespace kiln
