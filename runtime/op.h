// The primitive ops: their ids and facts (derived from the one table, runtime/ops.def), their
// attributes, and their shape/dtype inference. Composites (layer_norm, cross_entropy, ...) are
// written with these in autograd/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/sym_int.h"

namespace kiln {

enum class OpId : std::uint8_t {
#define KILN_OP(name, ...) name,
#include "runtime/ops.def"
#undef KILN_OP
};

// What an op does to data, as the fuser sees it.
enum class OpClass : std::uint8_t {
  elementwise,    // out[i] depends on inputs at i (broadcast) and on i itself
  reduction,      // folds dims away
  scan,           // prefix operations along a dim
  normalization,  // a reduction over a dim broadcast back over it (softmax)
  view,           // no data movement: a new shape/strides over the same storage
  index,          // data-dependent addressing
  matmul,
  movement,          // copies with index arithmetic (cat, pad)
  transfer,          // between devices
  attention,         // softmax(q kᵀ·scale + mask) v and its backward: a kernel of its own
  sort,              // orders the values along a dim (sort, topk): values and their i64 indices
  cached_attention,  // attention of new queries over the live rows of a KV cache: inference only
};

// How an elementwise op types its output.
enum class DTypeRule : std::uint8_t {
  same,              // the input's dtype
  to_floating,       // the input's dtype if floating, else f32
  to_bool,           // bool
  promote,           // the promoted dtype of the inputs (runtime/dtype.h)
  promote_floating,  // promote, then f32 if not floating (true division)
  custom,            // the op's own rule
};

// What autocast (runtime/autocast.h) casts an op's f32/f16/bf16 inputs to, where the op API
// is called: PyTorch's CUDA autocast lists. A column of the table so that a new op must choose.
enum class AutocastPolicy : std::uint8_t {
  keep,             // run in the inputs' dtypes (PyTorch's unlisted ops)
  lower_precision,  // the autocast dtype, f16 or bf16 (accumulating in f32)
  f32,              // f32 (range- or precision-sensitive: exp, softmax, sums)
  promote,          // the widest floating input's dtype
};

// Whether an op's output carries gradient to its inputs.
enum class Grad : std::uint8_t {
  none,        // never requires grad (comparisons, argmax, detach)
  zero,        // differentiable with a zero gradient everywhere (sign, floor, ...)
  derivative,  // a derivative rule (autograd/derivatives.cpp)
  // Inference only (cached_attention): no rule, and an input that requires grad under grad mode
  // is an Error when the op is recorded, rather than a gradient silently dropped.
  refused,
};

// The OpAttrs fields an op reads, as a bit set.
using AttrSet = std::uint32_t;
namespace attr {
inline constexpr AttrSet none = 0;
inline constexpr AttrSet dims = 1 << 0;       // reductions: dims; permute: order; pad: pairs
inline constexpr AttrSet shape = 1 << 1;      // reshape, expand: target shape
inline constexpr AttrSet keepdim = 1 << 2;    // reductions
inline constexpr AttrSet dim = 1 << 3;        // one dim
inline constexpr AttrSet range = 1 << 4;      // slice: start, end, step
inline constexpr AttrSet value = 1 << 5;      // pad: fill value
inline constexpr AttrSet dtype = 1 << 6;      // cast: target dtype
inline constexpr AttrSet device = 1 << 7;     // to_device: target device
inline constexpr AttrSet diagonal = 1 << 8;   // tril, triu
inline constexpr AttrSet beta = 1 << 9;       // softplus
inline constexpr AttrSet threshold = 1 << 10; // softplus
inline constexpr AttrSet reverse = 1 << 11;   // cumsum
inline constexpr AttrSet scale = 1 << 12;     // attention: the scores' factor
inline constexpr AttrSet causal = 1 << 13;    // attention: top-left aligned causal mask
inline constexpr AttrSet bounds = 1 << 14;    // random_int: low, high
inline constexpr AttrSet dropout = 1 << 15;   // attention: the probabilities' dropout rate
inline constexpr AttrSet count = 1 << 16;     // topk: how many values
inline constexpr AttrSet descending = 1 << 17;  // sort, topk: largest first
}  // namespace attr

// Which inputs (bits 0-7) and outputs (bits 8-11) a derivative reads the values of.
using SavedSet = std::uint16_t;
namespace saved {
inline constexpr SavedSet none = 0;
inline constexpr SavedSet in0 = 1 << 0, in1 = 1 << 1, in2 = 1 << 2, in3 = 1 << 3;
inline constexpr SavedSet in4 = 1 << 4, in5 = 1 << 5;
inline constexpr SavedSet out0 = 1 << 8, out1 = 1 << 9;
inline constexpr bool input(SavedSet s, std::size_t i) {
  return i < 8 && (s >> i & 1);
}
inline constexpr bool output(SavedSet s, std::size_t i) {
  return i < 4 && (s >> (8 + i) & 1);
}
}  // namespace saved

// One row of the op table.
struct OpDef {
  std::string_view name;
  OpClass op_class;
  int arity;  // -1: any number
  int num_outputs;
  AttrSet attrs;
  DTypeRule dtype_rule;
  AutocastPolicy autocast;
  Grad grad;
  SavedSet saved;
};

// The macro keeps one initializer per row, as ops.def does.
// clang-format off
inline constexpr OpDef kOpTable[] = {
#define KILN_OP(name, op_class, arity, outputs, attrs, dtype_rule, autocast, grad, saved) \
  {#name, OpClass::op_class, arity, outputs, attrs, DTypeRule::dtype_rule,                \
   AutocastPolicy::autocast, Grad::grad, saved},
#include "runtime/ops.def"
#undef KILN_OP
};
// clang-format on
inline constexpr std::size_t kNumOps = std::size(kOpTable);

inline const OpDef& op_def(OpId op) { return kOpTable[static_cast<std::size_t>(op)]; }
inline std::string_view op_name(OpId op) { return op_def(op).name; }
inline OpClass op_class(OpId op) { return op_def(op).op_class; }
inline int num_outputs(OpId op) { return op_def(op).num_outputs; }
// Every op, in table order (for sweeps over the table).
std::span<const OpId> all_ops();
// random_uniform, random_normal, random_int: their output's shape, dtype and device are
// attributes, and its values a function of their seed and offset inputs (runtime/random.h).
inline bool is_random(OpId op) {
  return op == OpId::random_uniform || op == OpId::random_normal || op == OpId::random_int;
}

// Attributes of an op call; each op reads the fields its table row names (attr::*).
struct OpAttrs {
  std::vector<std::int64_t> dims;
  Shape shape;
  // While tracing: the size expression of each entry of `shape` (empty when all are static).
  std::vector<SymExpr> shape_exprs;
  bool keepdim = false;
  std::int64_t dim = 0;
  std::int64_t start = 0, end = 0, step = 1;  // already clamped
  double value = 0.0;
  DType dtype = DType::f32;
  Device device;
  std::int64_t diagonal = 0;
  double beta = 1.0, threshold = 20.0;
  bool reverse = false;
  double scale = 1.0;  // attention: already resolved (the API's default is 1/sqrt(d))
  bool causal = false;
  // attention: the probabilities' dropout rate; when above 0 the op's last two inputs are the
  // draw's seed and offset (runtime/attention_heads.h: attention_inputs).
  double dropout = 0.0;
  std::int64_t low = 0, high = 0;  // random_int: the half-open range [low, high)
  std::int64_t k = 0;              // topk: how many values it keeps
  bool descending = false;         // sort, topk: largest first (NaN counts as the largest)
};

// Equality and hashing over the fields `op` reads (graph CSE, trace comparison); a double
// compares by its bits, so NaN equals NaN and -0.0 differs from 0.0. Symbolic shapes compare
// by expression.
bool attrs_equal(OpId op, const OpAttrs& a, const OpAttrs& b);
std::size_t attrs_hash(OpId op, const OpAttrs& a);
// "dims=[1], keepdim=true": the fields `op` reads, in a fixed order (empty when none).
std::string attrs_str(OpId op, const OpAttrs& a);

struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
};

// Validates the inputs of `op` and returns the shape and dtype of each output. Errors name the
// op and the offending shapes, dtypes or values. Shared by every backend and by tracing.
std::vector<TensorMeta> infer_meta(OpId op, std::span<const TensorMeta> inputs,
                                   const OpAttrs& attrs);

}  // namespace kiln

template <>
struct fmt::formatter<kiln::OpId> : fmt::formatter<std::string_view> {
  auto format(kiln::OpId op, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::op_name(op), ctx);
  }
};
