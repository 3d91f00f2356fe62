// A seeded differential fuzzer for code generation: random programs of elementwise ops,
// broadcasts, views, casts, triangles, reductions and normalizations, compiled on CUDA tensors
// (the virtual GPU) and compared with the same program run eagerly on the CPU. A failure prints
// the seed and the program shrunk to the ops it needs. KILN_FUZZ_ITERS sets the number of
// programs (default 1000), KILN_FUZZ_SEED the first seed.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <random>

#include "autograd/ops.h"
#include "jit/compile.h"

using namespace kiln;

namespace {

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
  count
};

const char* step_name(Step s) {
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
                                "triu(a, 4k - 5) if 4k - 5 is even, else tril"};
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

Program random_program(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const std::int64_t sizes[] = {1, 2, 3, 7, 16, 33, 64};
  Program p;
  p.rows = sizes[pick(7)];
  p.cols = sizes[pick(7)];
  int n_ops = 1 + pick(7);
  int values = 3;  // x [r, c], y [c] (broadcast over rows), z [r, 1] (broadcast over cols)
  for (int i = 0; i < n_ops; ++i) {
    Op op{static_cast<Step>(pick(static_cast<int>(Step::count))), pick(values), pick(values),
          0.25 * (1 + pick(8))};
    // Row ops need a full [r, c] operand: value 0 is one, and so is every op's result.
    if (op.step >= Step::row_sum && op.step <= Step::col_mean && (op.a == 1 || op.a == 2)) op.a = 0;
    if ((op.step == Step::transpose2 || op.step == Step::triangle) && (op.a == 1 || op.a == 2))
      op.a = 0;
    p.ops.push_back(op);
    ++values;
  }
  p.outputs.push_back(values - 1);
  if (values > 4 && pick(2)) p.outputs.push_back(3 + pick(values - 4));
  return p;
}

std::vector<Tensor> run_program(const Program& p, const Tensor& x, const Tensor& y,
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
      case Step::count:
        break;
    }
    v.push_back(r);
  }
  std::vector<Tensor> out;
  for (int i : p.outputs) out.push_back(v[i]);
  return out;
}

std::string describe(const Program& p) {
  std::string s =
      fmt::format("rows {}, cols {}; v0 = x, v1 = y [cols], v2 = z [rows, 1]\n", p.rows, p.cols);
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    s += fmt::format("  v{} = {}  with a = v{}, b = v{}, k = {}\n", i + 3, step_name(p.ops[i].step),
                     p.ops[i].a, p.ops[i].b, p.ops[i].k);
  s += "  returns";
  for (int o : p.outputs) s += fmt::format(" v{}", o);
  return s;
}

// Empty when the compiled program agrees with eager CPU, else what differs.
std::string mismatch(const Program& p, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({p.rows, p.cols}, DType::f32, &gen);
  Tensor y = randn({p.cols}, DType::f32, &gen);
  Tensor z = randn({p.rows, 1}, DType::f32, &gen);
  std::vector<Tensor> want;
  try {
    want = run_program(p, x, y, z);
  } catch (const Error&) {
    return "";  // not a valid program (a shape mismatch): nothing to compare
  }
  auto f = jit::compile(
      [p](const Tensor& a, const Tensor& b, const Tensor& c) { return run_program(p, a, b, c); });
  std::vector<Tensor> got;
  try {
    got = f(x.to(Device::cuda()), y.to(Device::cuda()), z.to(Device::cuda()));
  } catch (const std::exception& e) {
    return std::string("compiled run failed: ") + e.what();
  }
  if (f.core().stats().kernel_calls != 1) return "the compiled call did not run as kernels";
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i].shape() != want[i].shape()) return fmt::format("output {}: shape differs", i);
    Tensor a = got[i].to(Device::cpu()).to(DType::f64).contiguous();
    Tensor b = want[i].to(DType::f64).contiguous();
    const double* pa = static_cast<const double*>(a.raw_data());
    const double* pb = static_cast<const double*>(b.raw_data());
    for (std::int64_t e = 0; e < a.numel(); ++e) {
      if (std::isnan(pa[e]) && std::isnan(pb[e])) continue;
      if (!(std::abs(pa[e] - pb[e]) <= 2e-4 * (1 + std::abs(pb[e]))))
        return fmt::format("output {} element {}: compiled {} vs eager {}", i, e, pa[e], pb[e]);
    }
  }
  return "";
}

// Drops ops while the program still fails (operands that pointed at a dropped or later value
// are clamped to the last one before their op), so the report shows what matters.
Program shrink(Program p, std::uint64_t seed) {
  bool progress = true;
  while (progress && p.ops.size() > 1) {
    progress = false;
    for (std::size_t i = 0; i + 1 < p.ops.size(); ++i) {
      Program q = p;
      q.ops.erase(q.ops.begin() + static_cast<std::ptrdiff_t>(i));
      int values = 3 + static_cast<int>(q.ops.size());
      for (std::size_t j = 0; j < q.ops.size(); ++j) {  // operands come before their op
        int last = 2 + static_cast<int>(j);
        q.ops[j].a = std::min(q.ops[j].a, last);
        q.ops[j].b = std::min(q.ops[j].b, last);
      }
      q.outputs = {values - 1};
      if (!mismatch(q, seed).empty()) {
        p = q;
        progress = true;
        break;
      }
    }
  }
  return p;
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fuzz_codegen)

BOOST_AUTO_TEST_CASE(random_programs_compiled_on_the_device_match_eager_cpu) {
  std::uint64_t iters = env_number("KILN_FUZZ_ITERS", 1000);
  std::uint64_t first = env_number("KILN_FUZZ_SEED", 1);
  int failures = 0;
  for (std::uint64_t seed = first; seed < first + iters && failures < 3; ++seed) {
    Program p = random_program(seed);
    std::string why = mismatch(p, seed);
    if (why.empty()) continue;
    ++failures;
    Program small = shrink(p, seed);
    BOOST_ERROR(
        fmt::format("fuzz seed {} (KILN_FUZZ_SEED={} KILN_FUZZ_ITERS=1): {}\n{}\nshrunk: "
                    "{}\n{}",
                    seed, seed, why, describe(p), mismatch(small, seed), describe(small)));
  }
  BOOST_TEST(failures == 0);
}

BOOST_AUTO_TEST_SUITE_END()
