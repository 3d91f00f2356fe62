// A seeded differential fuzzer for code generation: random programs of elementwise ops,
// broadcasts, views, casts, triangles, reductions and normalizations, compiled on CUDA tensors
// (the virtual GPU) and compared with the same program run eagerly on the CPU. A failure prints
// the seed and the program shrunk to the ops it needs. KILN_FUZZ_ITERS sets the number of
// programs (default 1000, dealt over two shard cases that ctest runs side by side),
// KILN_FUZZ_SEED the first seed.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <random>

#include "autograd/ops.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "support/fuzz_program.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Whether `step` reads its second operand.
bool binary(Step step) {
  return step == Step::add || step == Step::sub || step == Step::mul || step == Step::maximum ||
         step == Step::div_safe || step == Step::where_gt;
}

int ceil_log2(std::int64_t n) {
  int bits = 0;
  while ((std::int64_t{1} << bits) < n) ++bits;
  return bits;
}

// Roundings an op makes on the way to its result: one per primitive, a sum over n values
// log2(n) more (kiln's reductions are trees; so is the reference's error bound).
int roundings(const Program& p, Step step) {
  switch (step) {
    case Step::exp_tanh:
      return 2;
    case Step::sigmoid:
      return 3;
    case Step::abs_sqrt:
      return 2;
    case Step::mul:
      return 2;
    case Step::div_safe:
      return 2;
    case Step::cast_f64:
      return 0;
    case Step::cast_f16:
      return 0;  // counted apart: see PathError
    case Step::row_sum:
      return 3 + ceil_log2(p.cols);
    case Step::softmax_rows:
    case Step::log_softmax_rows:
      return 4 + ceil_log2(p.cols);
    case Step::col_mean:
      return 2 + ceil_log2(p.rows);
    case Step::scale:
      return 2;
    default:
      return 1;
  }
}

// What the ops on the path to one output allow: roundings in f32, and whether an f16 round trip
// is on it (where the device and the CPU may round a value that lies next to a tie of f16 to the
// two neighbours: one f16 ulp apart, rarely).
struct PathError {
  int roundings = 0;
  bool f16 = false;
};

PathError path_error(const Program& p, int value) {
  PathError e;
  std::vector<bool> seen(3 + p.ops.size(), false);
  std::vector<int> todo = {value};
  while (!todo.empty()) {
    int v = todo.back();
    todo.pop_back();
    if (v < 3 || seen[v]) continue;
    seen[v] = true;
    const Op& op = p.ops[v - 3];
    e.roundings += roundings(p, op.step);
    e.f16 = e.f16 || op.step == Step::cast_f16;
    todo.push_back(op.a);
    if (binary(op.step)) todo.push_back(op.b);
  }
  return e;
}

// Ulps of f32 allowed per rounding on the path, relative to 1 + |reference|.
constexpr double kUlpsPerRounding = 4;
constexpr double kEpsF32 = 1.1920928955078125e-7, kEpsF16 = 9.765625e-4;

// Empty when `got` (compiled, output `index` of `p`) agrees with `want` (eager CPU) within what
// the output's path allows, else what differs. Each element is within the f32 bound; where an
// f16 round trip is on the path, up to a quarter of the elements may instead be within the same
// bound in f16 ulps (a tie rounded the other way moves its neighbours too). A dropped round trip
// (the compiled value never rounded to f16) moves nearly every element: it fails.
std::string compare_output(const Program& p, std::size_t index, const Tensor& got,
                           const Tensor& want) {
  if (got.shape() != want.shape()) return fmt::format("output {}: shape differs", index);
  PathError path = path_error(p, p.outputs[index]);
  double bound = kUlpsPerRounding * std::max(1, path.roundings);
  Tensor a = got.to(Device::cpu()).to(DType::f64).contiguous();
  Tensor b = want.to(DType::f64).contiguous();
  const double* pa = static_cast<const double*>(a.raw_data());
  const double* pb = static_cast<const double*>(b.raw_data());
  std::int64_t loose = 0;
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    if (std::isnan(pa[e]) && std::isnan(pb[e])) continue;
    double err = std::abs(pa[e] - pb[e]), scale = 1 + std::abs(pb[e]);
    if (err <= bound * kEpsF32 * scale) continue;
    if (path.f16 && err <= bound * kEpsF16 * scale) {
      ++loose;
      continue;
    }
    return fmt::format("output {} element {}: compiled {} vs eager {} ({} roundings{})", index, e,
                       pa[e], pb[e], path.roundings, path.f16 ? ", an f16 round trip" : "");
  }
  if (loose * 4 > a.numel())
    return fmt::format(
        "output {}: {} of {} elements differ by more than {} f32 ulps (an f16 round trip on the "
        "path rounds rarely the other way, not this often)",
        index, loose, a.numel(), bound);
  return "";
}

struct Outcome {
  bool valid = true;  // the program runs eagerly (a shape mismatch makes it invalid)
  std::string why;    // empty when the compiled program agrees with eager CPU
};

Outcome run_and_compare(const Program& p, std::uint64_t seed) {
  Generator gen(seed);
  auto [x, y, z] = random_inputs(p, gen);
  std::vector<Tensor> want;
  try {
    want = run_program(p, x, y, z);
  } catch (const Error&) {
    return {false, ""};  // not a valid program (a shape mismatch): nothing to compare
  }
  auto f = jit::compile(
      [p](const Tensor& a, const Tensor& b, const Tensor& c) { return run_program(p, a, b, c); });
  std::vector<Tensor> got;
  try {
    got = f(x.to(Device::cuda()), y.to(Device::cuda()), z.to(Device::cuda()));
  } catch (const std::exception& e) {
    return {true, std::string("compiled run failed: ") + e.what()};
  }
  // Every step a kernel or a library call: no node run by a fallback.
  const jit::KernelPlan* plan = f.core().plan(0);
  if (plan == nullptr || f.core().stats().kernel_calls != 1)
    return {true, "the compiled call did not run as kernels"};
  if (plan->fallback_steps() != 0)
    return {true, fmt::format("{} fallback steps:\n{}", plan->fallback_steps(), f.explain())};
  for (std::size_t i = 0; i < want.size(); ++i)
    if (auto why = compare_output(p, i, got[i], want[i]); !why.empty()) return {true, why};
  return {};
}

std::string mismatch(const Program& p, std::uint64_t seed) {
  return run_and_compare(p, seed).why;
}

// Drops ops while the program still fails (operands that pointed at a dropped or later value
// are clamped to the last one before their op), so the report shows what matters.
Program shrink(Program p, std::uint64_t seed) {
  bool progress = true;
  while (progress && p.ops.size() > 1) {
    progress = false;
    for (std::size_t i = 0; i + 1 < p.ops.size(); ++i) {
      Program q = p;
      q.ops.clear();  // every op but the i-th
      for (std::size_t j = 0; j < p.ops.size(); ++j)
        if (j != i) q.ops.push_back(p.ops[j]);
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

// The shard cases below: ctest runs each as an entry, side by side.
constexpr std::uint64_t kShards = 2;

// Of KILN_FUZZ_ITERS programs from KILN_FUZZ_SEED, every kShards-th from first + shard.
void run_shard(std::uint64_t shard) {
  std::uint64_t iters = env_number("KILN_FUZZ_ITERS", 1000);
  std::uint64_t first = env_number("KILN_FUZZ_SEED", 1);
  int failures = 0;
  std::uint64_t valid = 0, run = 0, requested = 0;
  for (std::uint64_t seed = first + shard; seed < first + iters; seed += kShards) ++requested;
  for (std::uint64_t seed = first + shard; seed < first + iters && failures < 3; seed += kShards) {
    Program p = random_program(seed, true);
    ++run;
    Outcome o = run_and_compare(p, seed);
    valid += o.valid;
    if (o.why.empty()) continue;
    ++failures;
    Program small = shrink(p, seed);
    BOOST_ERROR(
        fmt::format("fuzz seed {} (KILN_FUZZ_SEED={} KILN_FUZZ_ITERS=1): {}\n{}\nshrunk: "
                    "{}\n{}",
                    seed, seed, o.why, describe(p), mismatch(small, seed), describe(small)));
  }
  BOOST_TEST_MESSAGE(
      fmt::format("fuzz: {} programs valid of {} run ({} requested)", valid, run, requested));
  BOOST_TEST(failures == 0);
  // Invalid programs compare nothing: most must be valid, or the fuzzer tests little.
  if (failures == 0) BOOST_TEST(valid * 10 >= requested * 9, valid << " valid of " << requested);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fuzz_codegen)

BOOST_AUTO_TEST_CASE(random_programs_shard_0) {
  run_shard(0);
}

BOOST_AUTO_TEST_CASE(random_programs_shard_1) {
  run_shard(1);
}

BOOST_AUTO_TEST_CASE(the_comparison_catches_a_dropped_f16_round_trip) {
  // sigmoid(cast f16 and back(x)): what a kernel that forgot to round to f16 would return is the
  // same program without the round trip. The f32 bound and the rare f16 ties keep it from
  // passing, though every element is within 2e-4 * (1 + |b|) (sigmoid's slope shrinks the
  // error).
  Program p;
  p.rows = 16;
  p.cols = 64;
  p.ops = {{Step::cast_f16, 0, 0, 1}, {Step::sigmoid, 3, 3, 1}};
  p.outputs = {4};
  Program dropped = p;
  dropped.ops[0].step = Step::cast_f64;  // f32 -> f64 -> f32: no rounding at all
  Generator gen(5);
  auto [x, y, z] = random_inputs(p, gen);
  auto want = run_program(p, x, y, z);
  auto wrong = run_program(dropped, x, y, z);
  for (std::size_t i = 0; i < want.size(); ++i) {
    BOOST_TEST_CONTEXT("output " << i) {
      // The right values pass; the unrounded ones do not ...
      BOOST_TEST(compare_output(p, i, want[i], want[i]).empty());
      std::string why = compare_output(p, i, wrong[i], want[i]);
      BOOST_TEST(!why.empty());
      // ... which a flat 2e-4 * (1 + |b|) would have let through.
      Tensor a = wrong[i].to(DType::f64), b = want[i].to(DType::f64);
      BOOST_TEST(amax(abs(a - b) - (abs(b) + 1.0) * 2e-4).item() <= 0.0);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
