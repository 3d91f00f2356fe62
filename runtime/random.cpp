// Philox-4x32-10 and the random factories built on it: each reserves its counters from a
// Generator and runs a random op of the table (runtime/ops.def).
#include "runtime/random.h"

#include "runtime/dispatch.h"
#include "runtime/factories.h"
#include "runtime/trace_hooks.h"

namespace kiln {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  constexpr std::uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

int uniform_bits(DType dtype) {
  return dtype == DType::f16 ? 11 : dtype == DType::bf16 ? 8 : 24;
}

std::uint64_t random_counters(OpId op, std::int64_t numel) {
  auto n = static_cast<std::uint64_t>(numel);
  std::uint64_t words = op == OpId::random_normal ? n + (n & 1)
                        : op == OpId::random_int  ? 2 * n
                                                  : n;
  return (words + 3) / 4;
}

std::array<Tensor, 2> draw_inputs(OpId op, const OpAttrs& attrs, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  if (OpInterceptor* tracer = active_interceptor()) return tracer->random_inputs(op, attrs, g);
  std::uint64_t offset = g.advance(random_counters(op, numel(attrs.shape)));
  return {draw_number(g.seed()), draw_number(offset)};
}

Tensor draw_number(std::uint64_t x) {
  return from_vector(std::vector{static_cast<std::int64_t>(x)}, Shape{});
}

namespace {

void check_float(DType dtype, const char* op) {
  KILN_CHECK_AS(DTypeError, is_floating(dtype), "{}: dtype must be floating, got {}", op, dtype);
}

// The draw's numbers (draw_inputs), then the op: on the host, or as a generated kernel on
// `attrs.device`. A draw the op refuses (a negative size) leaves the generator as it was.
Tensor draw(OpId op, OpAttrs& attrs, Generator* gen) {
  const TensorMeta numbers[] = {{{}, DType::i64}, {{}, DType::i64}};
  infer_meta(op, numbers, attrs);
  auto inputs = draw_inputs(op, attrs, gen);
  return dispatch1(op, inputs, attrs);
}

OpAttrs draw_attrs(const Shape& shape, DType dtype, Device device) {
  OpAttrs attrs;
  attrs.shape = shape;
  attrs.dtype = dtype;
  attrs.device = device;
  return attrs;
}

// The attributes of a draw shaped as `x`: while tracing, its sizes follow x's symbolic ones, so
// a draw at a dynamic size neither specializes the dim nor keeps the traced size.
OpAttrs draw_attrs_like(const Tensor& x, DType dtype) {
  OpAttrs attrs = draw_attrs(x.impl().shape, dtype, x.device());
  attrs.shape_exprs = x.sym_shape().exprs();
  return attrs;
}

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Generator* gen, Device device) {
  check_float(dtype, "rand");
  OpAttrs attrs = draw_attrs(shape, dtype, device);
  return draw(OpId::random_uniform, attrs, gen);
}

Tensor randn(const Shape& shape, DType dtype, Generator* gen, Device device) {
  check_float(dtype, "randn");
  OpAttrs attrs = draw_attrs(shape, dtype, device);
  return draw(OpId::random_normal, attrs, gen);
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype, Generator* gen,
               Device device) {
  KILN_CHECK(low < high, "randint: low ({}) must be less than high ({})", low, high);
  KILN_CHECK_AS(DTypeError, dtype != DType::bool_, "randint: dtype bool is not supported");
  OpAttrs attrs = draw_attrs(shape, dtype, device);
  attrs.low = low;
  attrs.high = high;
  return draw(OpId::random_int, attrs, gen);
}

Tensor rand_like(const Tensor& x, Generator* gen) {
  return rand_like(x, x.dtype(), gen);
}

Tensor rand_like(const Tensor& x, DType dtype, Generator* gen) {
  check_float(dtype, "rand_like");
  OpAttrs attrs = draw_attrs_like(x, dtype);
  return draw(OpId::random_uniform, attrs, gen);
}

Tensor randn_like(const Tensor& x, Generator* gen) {
  check_float(x.dtype(), "randn_like");
  OpAttrs attrs = draw_attrs_like(x, x.dtype());
  return draw(OpId::random_normal, attrs, gen);
}

Tensor randint_like(const Tensor& x, std::int64_t low, std::int64_t high, Generator* gen) {
  KILN_CHECK(low < high, "randint_like: low ({}) must be less than high ({})", low, high);
  KILN_CHECK_AS(DTypeError, x.dtype() != DType::bool_, "randint_like: dtype bool is not supported");
  OpAttrs attrs = draw_attrs_like(x, x.dtype());
  attrs.low = low;
  attrs.high = high;
  return draw(OpId::random_int, attrs, gen);
}

}  // namespace kiln
