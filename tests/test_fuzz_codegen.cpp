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
#include "support/fuzz_program.h"

using namespace kiln;
using namespace kiln::test;

namespace {

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
