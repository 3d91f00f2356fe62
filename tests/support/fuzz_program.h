// The differential fuzzers' random programs: elementwise ops, broadcasts, views, casts,
// triangles, reductions and normalizations over x [rows, cols], y [cols] and z [rows, 1], drawn
// from a seed, run by plain calls to kiln ops (so eagerly, traced or compiled alike); on request
// also data movement that keeps each value's shape (cat, pad, slices, an expand + reshape).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace kiln::test {

enum class Step {
  exp_tanh,
  sigmoid,
  relu,
  sin,
  abs_sqrt,
  neg,
  add,
  sub,
  mul,
  maximum,
  div_safe,
  cast_f64,
  cast_f16,
  row_sum,
  row_max_sub,
  softmax_rows,
  log_softmax_rows,
  col_mean,
  where_gt,
  transpose2,
  scale,
  triangle,
  // Data movement (drawn only where random_program is asked for it).
  roll_cols,
  rotate_half,
  shift_pad,
  shift_rows,
  stride_split,
  repeat_rows,
  count
};
inline constexpr int kStepsWithoutMovement = static_cast<int>(Step::roll_cols);

inline const char* step_name(Step s) {
  static const char* names[] = {"exp(tanh(a))",
                                "sigmoid(a)",
                                "relu(a)",
                                "sin(a)",
                                "sqrt(abs(a) + 1)",
                                "-a",
                                "a + b",
                                "a - b",
                                "a * b",
                                "maximum(a, b)",
                                "a / (abs(b) + 1)",
                                "cast f64 and back",
                                "cast f16 and back",
                                "a / (1 + |sum(a, rows)|)",
                                "a - amax(a, rows)",
                                "softmax(a, rows)",
                                "log_softmax(a, rows)",
                                "a - mean(a, cols)",
                                "where(a > b, a, b)",
                                "a.t().t() * 0.5",
                                "a * k + 1",
                                "triu(a, 4k - 5) if 4k - 5 is even, else tril",
                                "cat(a[..., s:], a[..., :s]) with s = 4k mod cols",
                                "cat(-a[..., h:], a[..., :h]) with h = cols / 2 (rotary)",
                                "pad(a, [-1, 1], k): crop the first column, pad the last",
                                "cat(a[1:], a[:1]) along rows",
                                "cat(a[..., 0::2], a[..., 1::2])",
                                "reshape(expand(a[:rows/2] unsqueezed), a's shape): rows twice"};
  return names[static_cast<int>(s)];
}

struct Op {
  Step step;
  int a, b;  // operands: indices into the values so far
  double k;
};

struct Program {
  std::vector<Op> ops;
  std::int64_t rows, cols;
  std::vector<int> outputs;
};

// With `moves_data`, data-movement steps are drawn too; without, a seed gives the program it
// gave before they existed.
inline Program random_program(std::uint64_t seed, bool moves_data = false) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const std::int64_t sizes[] = {1, 2, 3, 7, 16, 33, 64};
  Program p;
  p.rows = sizes[pick(7)];
  p.cols = sizes[pick(7)];
  int n_ops = 1 + pick(7);
  int values = 3;  // x [r, c], y [c] (broadcast over rows), z [r, 1] (broadcast over cols)
  for (int i = 0; i < n_ops; ++i) {
    int steps = moves_data ? static_cast<int>(Step::count) : kStepsWithoutMovement;
    Op op{static_cast<Step>(pick(steps)), pick(values), pick(values), 0.25 * (1 + pick(8))};
    // Row ops need a full [r, c] operand: value 0 is one, and so is every op's result.
    if (op.step >= Step::row_sum && op.step <= Step::col_mean && (op.a == 1 || op.a == 2)) op.a = 0;
    if ((op.step == Step::transpose2 || op.step == Step::triangle || op.step == Step::shift_rows ||
         op.step == Step::repeat_rows) &&
        (op.a == 1 || op.a == 2))
      op.a = 0;
    p.ops.push_back(op);
    ++values;
  }
  p.outputs.push_back(values - 1);
  if (values > 4 && pick(2)) p.outputs.push_back(3 + pick(values - 4));
  return p;
}

// A program's inputs, drawn in this order from `gen`: x [rows, cols], y [cols] (broadcast over
// rows), z [rows, 1] (broadcast over cols).
struct ProgramInputs {
  Tensor x, y, z;
};
inline ProgramInputs random_inputs(const Program& p, Generator& gen) {
  ProgramInputs in;
  in.x = randn({p.rows, p.cols}, DType::f32, &gen);
  in.y = randn({p.cols}, DType::f32, &gen);
  in.z = randn({p.rows, 1}, DType::f32, &gen);
  return in;
}

inline std::vector<Tensor> run_program(const Program& p, const Tensor& x, const Tensor& y,
                                       const Tensor& z) {
  std::vector<Tensor> v = {x, y, z};
  for (const Op& op : p.ops) {
    const Tensor& a = v[op.a];
    const Tensor& b = v[op.b];
    Tensor r;
    switch (op.step) {
      case Step::exp_tanh:
        r = exp(tanh(a));
        break;
      case Step::sigmoid:
        r = sigmoid(a);
        break;
      case Step::relu:
        r = relu(a);
        break;
      case Step::sin:
        r = sin(a);
        break;
      case Step::abs_sqrt:
        r = sqrt(abs(a) + 1.0);
        break;
      case Step::neg:
        r = -a;
        break;
      case Step::add:
        r = a + b;
        break;
      case Step::sub:
        r = a - b;
        break;
      case Step::mul:
        r = tanh(a * b);
        break;
      case Step::maximum:
        r = maximum(a, b);
        break;
      case Step::div_safe:
        r = a / (abs(b) + 1.0);
        break;
      case Step::cast_f64:
        r = a.to(DType::f64).to(DType::f32);
        break;
      case Step::cast_f16:
        r = a.to(DType::f16).to(DType::f32);
        break;
      case Step::row_sum:
        r = a / (abs(sum(a, {1}, true)) + 1.0);
        break;
      case Step::row_max_sub:
        r = a - amax(a, {1}, true);
        break;
      case Step::softmax_rows:
        r = softmax(a, 1);
        break;
      case Step::log_softmax_rows:
        r = log_softmax(a, 1);
        break;
      case Step::col_mean:
        r = a - mean(a, {0}, true);
        break;
      case Step::where_gt:
        r = where(gt(a, b), a, b);
        break;
      case Step::transpose2:
        r = a.t().t() * 0.5;
        break;
      case Step::scale:
        r = a * op.k + 1.0;
        break;
      case Step::triangle: {
        auto diagonal = static_cast<std::int64_t>(op.k * 4) - 5;  // -4 .. 3
        r = diagonal % 2 == 0 ? triu(a, diagonal) : tril(a, diagonal);
        break;
      }
      case Step::roll_cols: {
        std::int64_t n = a.shape().back(), at = static_cast<std::int64_t>(op.k * 4) % n;
        r = at == 0 ? a * 1.0 : cat({slice(a, -1, at, n), slice(a, -1, 0, at)}, -1);
        break;
      }
      case Step::rotate_half: {
        std::int64_t n = a.shape().back(), h = n / 2;
        r = n < 2 ? -a : cat({-slice(a, -1, h, n), slice(a, -1, 0, h)}, -1);
        break;
      }
      case Step::shift_pad:
        r = pad(a, {-1, 1}, op.k);
        break;
      case Step::shift_rows: {
        std::int64_t n = a.shape().front();
        r = n < 2 ? a * 1.0 : cat({slice(a, 0, 1, n), slice(a, 0, 0, 1)}, 0);
        break;
      }
      case Step::stride_split: {
        std::int64_t n = a.shape().back();
        r = n < 2 ? a * 1.0 : cat({slice(a, -1, 0, n, 2), slice(a, -1, 1, n, 2)}, -1);
        break;
      }
      case Step::repeat_rows: {
        std::int64_t n = a.shape().front(), c = a.shape().back();
        r = n % 2 != 0
                ? a * 1.0
                : reshape(expand(unsqueeze(slice(a, 0, 0, n / 2), 1), {n / 2, 2, c}), {n, c});
        break;
      }
      case Step::count:
        break;
    }
    v.push_back(r);
  }
  std::vector<Tensor> out;
  for (int i : p.outputs) out.push_back(v[i]);
  return out;
}

inline std::string describe(const Program& p) {
  std::string s =
      fmt::format("rows {}, cols {}; v0 = x, v1 = y [cols], v2 = z [rows, 1]\n", p.rows, p.cols);
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    s += fmt::format("  v{} = {}  with a = v{}, b = v{}, k = {}\n", i + 3, step_name(p.ops[i].step),
                     p.ops[i].a, p.ops[i].b, p.ops[i].k);
  s += "  returns";
  for (int o : p.outputs) s += fmt::format(" v{}", o);
  return s;
}

// A count or seed from the environment (KILN_FUZZ_*), else `fallback`.
inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace kiln::test
