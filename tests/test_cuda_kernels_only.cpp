// Every op on CUDA tensors is a generated kernel or a library call: no op, eager or compiled,
// copies through the host (the backend counts copies both ways), and no compiled plan holds a
// fallback step. Integer pow, remainder and floor_divide, the last ops that once ran on the CPU
// kernels, follow Python's rules on the device (checked against values worked out here, not
// against the CPU kernels) and report a zero divisor or a negative exponent through the device
// check flags, at the next sync or, with KILN_SYNC_CHECKS, at the op.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/device_checks.h"
#include "support/op_samples.h"
#include "support/reference.h"
#include "support/scope_exit.h"

using namespace kiln;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Launches, library calls and host <-> device copies made since construction.
struct DeviceWork {
  jit::codegen::LaunchStats& stats = jit::codegen::launch_stats();
  std::int64_t launches0 = stats.launches, to_host0 = stats.copies_to_host,
               to_device0 = stats.copies_to_device;
  std::size_t library0 = library_calls();
  static std::size_t library_calls() { return cuda::blaslt::service(cuda::backend()).calls(); }
  std::int64_t launches() const { return stats.launches - launches0; }
  std::int64_t library() const { return static_cast<std::int64_t>(library_calls() - library0); }
  std::int64_t to_host() const { return stats.copies_to_host - to_host0; }
  std::int64_t to_device() const { return stats.copies_to_device - to_device0; }
};

// Python's floor division and %, from a floor in f64 (exact for the small operands used here):
// an implementation of its own, not the kernels'.
std::int64_t py_floor_div(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(b)));
}
std::int64_t py_mod(std::int64_t a, std::int64_t b) {
  return a - b * py_floor_div(a, b);
}
// a^e by e repeated multiplications in `bits`-bit two's complement (wraps on overflow).
std::int64_t wrapped_pow(std::int64_t a, std::int64_t e, int bits) {
  std::uint64_t r = 1;
  for (std::int64_t i = 0; i < e; ++i) r *= static_cast<std::uint64_t>(a);
  if (bits == 32) return static_cast<std::int32_t>(static_cast<std::uint32_t>(r));
  return static_cast<std::int64_t>(r);
}

Tensor ints(DType dtype, const std::vector<std::int64_t>& v) {
  Tensor t = test::i64s(v, {static_cast<std::int64_t>(v.size())});
  return dtype == DType::i64 ? t : t.to(dtype);
}

std::vector<std::int64_t> values_of(const Tensor& t) {
  Tensor h = t.to(Device::cpu()).to(DType::i64);
  auto* p = h.data<std::int64_t>();
  return {p, p + h.numel()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_kernels_only)

BOOST_AUTO_TEST_CASE(integer_pow_remainder_and_floor_divide_follow_python_on_the_device) {
  for (DType dtype : {DType::i32, DType::i64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      const std::int64_t lowest = dtype == DType::i32 ? std::numeric_limits<std::int32_t>::min()
                                                      : std::numeric_limits<std::int64_t>::min();
      // Every sign pairing, exact and inexact quotients, |a| < |b|, divisor -1 and 1, and the
      // one quotient that overflows (lowest // -1 wraps to lowest, lowest % -1 is 0).
      std::vector<std::int64_t> a = {7, -7, 7, -7, 6, -6, 3, -3, 0, 0, 5, -5, lowest, lowest, 13};
      std::vector<std::int64_t> b = {2, 2, -2, -2, 3, -3, 5, 5, 4, -4, -1, 1, -1, 7, -4};
      Tensor ad = ints(dtype, a).to(Device::cuda()), bd = ints(dtype, b).to(Device::cuda());
      DeviceWork work;
      Tensor q = floor_divide(ad, bd), r = remainder(ad, bd);
      BOOST_TEST(work.launches() == 2);  // one generated kernel each
      BOOST_TEST(work.to_host() == 0);
      BOOST_TEST(work.to_device() == 0);
      std::vector<std::int64_t> want_q, want_r;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] == lowest && b[i] == -1) {
          want_q.push_back(lowest);
          want_r.push_back(0);
        } else {
          want_q.push_back(py_floor_div(a[i], b[i]));
          want_r.push_back(py_mod(a[i], b[i]));
        }
      }
      // lowest // 7 is not exact in f64 for i64; by hand: -2^63 = 7 * -1317624576693539402 + 6.
      if (dtype == DType::i64) {
        want_q[13] = -1317624576693539402;
        want_r[13] = 6;
      }
      BOOST_TEST(values_of(q) == want_q, boost::test_tools::per_element());
      BOOST_TEST(values_of(r) == want_r, boost::test_tools::per_element());

      // Powers with negative bases, exponent 0 and 1, and ones that wrap around.
      std::vector<std::int64_t> base = {-3, -2, 0, 0, 5, 3, -7, 2, 3, -1};
      std::vector<std::int64_t> e = {3, 4, 0, 5, 1, 40, 23, 31, 21, 1001};
      Tensor p = pow(ints(dtype, base).to(Device::cuda()), ints(dtype, e).to(Device::cuda()));
      std::vector<std::int64_t> want_p;
      int bits = dtype == DType::i32 ? 32 : 64;
      for (std::size_t i = 0; i < base.size(); ++i)
        want_p.push_back(wrapped_pow(base[i], e[i], bits));
      BOOST_TEST(values_of(p) == want_p, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(an_integer_zero_divisor_is_raised_at_the_next_sync_or_at_the_op) {
  Tensor a = test::i64s({7, -3, 4}, {3}).to(Device::cuda());
  Tensor b = test::i64s({2, 0, 1}, {3}).to(Device::cuda());
  Tensor minus_one = test::i64s({1, -1, 2}, {3}).to(Device::cuda());
  run_device_checks();
  // Launches never wait for their results: the op returns, the next copy to the host raises.
  Tensor q = floor_divide(a, b);
  BOOST_TEST(pending_device_checks() == 1u);
  KILN_CHECK_THROWS(q.to(Device::cpu()), Error, "floor_divide: integer division by zero (-3 // 0)",
                    "KILN_SYNC_CHECKS");
  BOOST_TEST(pending_device_checks() == 0u);
  Tensor r = remainder(a, b);
  KILN_CHECK_THROWS(r.to(Device::cpu()), Error, "remainder: integer division by zero (-3 % 0)");
  Tensor p = pow(a, minus_one);
  KILN_CHECK_THROWS(p.to(Device::cpu()), Error, "pow", "negative integer power -1");
  // Raised once: the next sync is clean.
  BOOST_CHECK_NO_THROW(a.to(Device::cpu()));
  // i32 too, and at the op under KILN_SYNC_CHECKS=1 (set from code).
  {
    set_sync_device_checks(true);
    test::ScopeExit checks_at_sync([] { set_sync_device_checks(false); });
    KILN_CHECK_THROWS(floor_divide(a.to(DType::i32), b.to(DType::i32)), Error,
                      "floor_divide: integer division by zero (-3 // 0)");
  }
  BOOST_TEST(pending_device_checks() == 0u);
  // A divisor with no zero leaves the flag clear.
  BOOST_CHECK_NO_THROW(floor_divide(a, minus_one).to(Device::cpu()));

  // Compiled: the division fuses into its neighbours' kernel, which reports the same error.
  auto f =
      jit::compile([](const Tensor& x, const Tensor& y) { return floor_divide(x * 3, y) + 1; });
  Tensor got = f(a, minus_one);
  BOOST_TEST(values_of(got) == (std::vector<std::int64_t>{22, 10, 7}),
             boost::test_tools::per_element());
  Tensor bad = f(a, b);
  KILN_CHECK_THROWS(bad.to(Device::cpu()), Error,
                    "floor_divide: integer division by zero (-9 // 0)");
  BOOST_TEST(f.core().plan(0)->kernel_count() == 1, f.explain());
}

BOOST_AUTO_TEST_CASE(integer_pow_fuses_with_its_neighbours_and_counts_as_a_kernel_call) {
  // (a * 2 + 1) ** b * 3 - a: one pointwise kernel, no fallback step.
  auto fn = [](const Tensor& a, const Tensor& b) { return pow(a * 2 + 1, b) * 3 - a; };
  Tensor a = test::i64s({-2, -1, 0, 1, 2, 3}, {2, 3}), b = test::i64s({3, 2, 5, 0, 1, 2}, {2, 3});
  auto f = jit::compile(fn);
  Tensor ad = a.to(Device::cuda()), bd = b.to(Device::cuda());
  f(ad, bd);  // traced and compiled (which reads the trace's constants on the host)
  DeviceWork work;
  Tensor got = f(ad, bd);
  BOOST_TEST(work.launches() == 1);
  BOOST_TEST(work.to_host() == 0);
  BOOST_TEST(work.to_device() == 0);
  // By hand: (-3)^3 * 3 + 2, (-1)^2 * 3 + 1, 1 * 3, 1 * 3 - 1, 5 * 3 - 2, 49 * 3 - 3.
  BOOST_TEST(values_of(got) == (std::vector<std::int64_t>{-79, 4, 3, 2, 13, 144}),
             boost::test_tools::per_element());
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(plan->kernel_count() == 1, f.explain());
  BOOST_TEST(plan->fallback_steps() == 0, f.explain());
  BOOST_TEST(f.core().stats().kernel_calls == 2);
}

BOOST_AUTO_TEST_CASE(every_op_on_cuda_launches_kernels_and_copies_nothing_through_the_host) {
  int eager_runs = 0, compiled_runs = 0;
  for (OpId op : all_ops()) {
    if (op == OpId::to_device) continue;  // a copy is what it is for
    for (DType dtype : test::sample_dtypes(op)) {
      for (const auto& s : test::op_samples(op, dtype)) {
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          std::vector<Tensor> on;
          for (const auto& t : s.inputs) on.push_back(t.to(Device::cuda()));
          // A view launches nothing, nor does an op that returns its input (a cast to its own
          // dtype); every other op launches a kernel or calls the library.
          auto returns_an_input = [&](const std::vector<Tensor>& outs) {
            for (const auto& o : outs)
              for (const auto& i : on)
                if (o.raw_data() == i.raw_data()) return true;
            return false;
          };
          bool view = op_class(op) == OpClass::view;
          {
            DeviceWork work;
            auto got = s.run(on);
            view = view || returns_an_input(got);
            BOOST_TEST(work.to_host() == 0);
            BOOST_TEST(work.to_device() == 0);
            if (!view) BOOST_TEST(work.launches() + work.library() > 0);
            for (const auto& g : got) BOOST_TEST(g.device().is_cuda());
            ++eager_runs;
          }
          auto check_compiled = [&](auto& f, auto&& call) {
            call();  // traced, planned, compiled
            DeviceWork work;
            auto got = call();  // warm
            BOOST_TEST(work.to_host() == 0);
            BOOST_TEST(work.to_device() == 0);
            if (!view) BOOST_TEST(work.launches() + work.library() > 0);
            const jit::KernelPlan* plan = f.core().plan(0);
            BOOST_TEST_REQUIRE(plan != nullptr);
            BOOST_TEST(plan->fallback_steps() == 0, f.explain());
            // An f64 attention has no kernel: it runs primitive ops, which explain() names
            // and the kernel-call count leaves out.
            bool fell_back = f.explain().find(
                                 "fell back to primitive ops at run time: attention: "
                                 "no f64 kernel") != std::string::npos;
            BOOST_TEST(f.core().stats().kernel_calls == (fell_back ? 0 : 2), f.explain());
            ++compiled_runs;
          };
          if (on.size() == 1) {
            auto f = jit::compile([&](const Tensor& a) { return s.run({a}); });
            check_compiled(f, [&] { return f(on[0]); });
          } else if (on.size() == 2) {
            auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return s.run({a, b}); });
            check_compiled(f, [&] { return f(on[0], on[1]); });
          } else if (on.size() == 3) {
            auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
              return s.run({a, b, c});
            });
            check_compiled(f, [&] { return f(on[0], on[1], on[2]); });
          } else if (on.size() == 5) {
            auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c,
                                      const Tensor& d, const Tensor& e) {
              return s.run({a, b, c, d, e});
            });
            check_compiled(f, [&] { return f(on[0], on[1], on[2], on[3], on[4]); });
          } else {
            BOOST_FAIL("samples take 1, 2, 3 or 5 inputs");
          }
        }
      }
    }
  }
  BOOST_TEST(eager_runs > 200);
  BOOST_TEST(compiled_runs > 200);
}

BOOST_AUTO_TEST_SUITE_END()
