// Random numbers drawn on the (virtual) CUDA device: rand, randn and randint run their op of the
// table (random_uniform, random_normal, random_int) as a generated kernel that computes each
// element's Philox words from its index. Each draw is compared with the element mapping written
// out from runtime/random.h on the host Philox (support/random_reference.h) and with the CPU's
// draw of the same seed; dropout and bernoulli on CUDA tensors; the generator's offsets; errors;
// and the ops fused with their neighbours in compiled functions, where a random value may only
// join a kernel that iterates its own elements in order.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "runtime/dispatch.h"
#include "support/device_compare.h"
#include "support/random_reference.h"
#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const Device kCuda = Device::cuda();

std::vector<double> values_of(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<double>();
}

Tensor number(std::int64_t v) {
  return from_vector(std::vector<std::int64_t>{v}, Shape{});
}

// The random op `op` of `shape` drawn at (seed, offset) (0-dim i64 tensors) on `device`, as
// random.h dispatches it (random_int on [-50, 50)); the tracer records it as a node.
Tensor draw(OpId op, const Tensor& seed, const Tensor& offset, const Shape& shape, DType dtype,
            Device device) {
  OpAttrs attrs;
  attrs.shape = shape;
  attrs.dtype = dtype;
  attrs.device = device;
  attrs.low = -50;
  attrs.high = 50;
  const Tensor in[] = {seed, offset};
  return dispatch1(op, in, attrs);
}

// Generated kernels of the plan of `f`'s first entry.
template <typename F>
int kernels_of(const F& f) {
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(plan->fallback_steps() == 0, f.explain());
  return plan->kernel_count();
}

std::int64_t copies_to_host() {
  return jit::codegen::launch_stats().copies_to_host.load();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(random_device)

BOOST_AUTO_TEST_CASE(rand_on_cuda_is_the_cpu_draw_bit_for_bit) {
  const std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (auto [dtype, bits] :
       {std::pair{DType::f32, 24}, {DType::f16, 11}, {DType::bf16, 8}, {DType::f64, 24}}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Generator on_cuda(seed), on_cpu(seed);
      on_cuda.advance((std::uint64_t{1} << 32) - 3);  // the counter's high word changes inside
      on_cpu.advance((std::uint64_t{1} << 32) - 3);
      Tensor got = rand({37, 29}, dtype, &on_cuda, kCuda);
      Tensor want = rand({37, 29}, dtype, &on_cpu);
      BOOST_TEST(got.device().str() == "cuda:0");
      BOOST_TEST(got.dtype() == dtype);
      BOOST_TEST(shape_str(got.shape()) == "[37, 29]");
      BOOST_TEST(on_cuda.offset() == on_cpu.offset());
      auto g = values_of(got), w = want.to_vector<double>();
      int wrong = 0;
      for (std::uint64_t i = 0; i < g.size(); ++i) {
        double ref = uniform_reference(seed, (std::uint64_t{1} << 32) - 3, i, bits);
        if ((g[i] != w[i] || g[i] != ref) && wrong++ < 5)
          BOOST_ERROR("element " << i << ": cuda " << g[i] << ", cpu " << w[i] << ", reference "
                                 << ref);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_launch_path_gives_each_element_its_own_index) {
  // Vectors then a scalar tail, scalars only, and launches cut into pieces of 50 elements.
  jit::codegen::ScheduleLimits scalar, pieces;
  scalar.pointwise_vectors = false;
  pieces.pointwise_index_limit = 50;
  const std::vector<const jit::codegen::ScheduleLimits*> paths = {nullptr, &scalar, &pieces};
  for (const auto* limits : paths) {
    std::optional<jit::codegen::ScopedScheduleLimits> scope;
    if (limits) scope.emplace(*limits);
    BOOST_TEST_CONTEXT((limits == &scalar ? "scalar" : limits ? "pieces" : "default")) {
      Generator gen(17);
      auto u = values_of(rand({5, 43}, DType::f32, &gen, kCuda));
      auto n = values_of(randn({211}, DType::f64, &gen, kCuda));
      auto k = randint(-9, 9, {3, 71}, DType::i32, &gen, kCuda).to(Device::cpu());
      auto kv = k.to_vector<std::int64_t>();
      int wrong = 0;
      for (std::uint64_t i = 0; i < u.size(); ++i)
        if (u[i] != uniform_reference(17, 0, i, 24) && wrong++ < 5)
          BOOST_ERROR("uniform element " << i << ": " << u[i]);
      for (std::uint64_t i = 0; i < n.size(); ++i) {
        double ref = normal_reference(17, 54, i);
        if (!(std::abs(n[i] - ref) <= 1e-13 * (1 + std::abs(ref))) && wrong++ < 5)
          BOOST_ERROR("normal element " << i << ": " << n[i] << ", reference " << ref);
      }
      for (std::uint64_t i = 0; i < kv.size(); ++i)
        if (kv[i] != int_reference(17, 107, i, -9, 9) && wrong++ < 5)
          BOOST_ERROR("int element " << i << ": " << kv[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(randn_on_cuda_is_within_1e_5_of_the_cpu) {
  const std::uint64_t seed = 2024;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Generator on_cuda(seed), on_cpu(seed);
      Tensor got = randn({4099}, dtype, &on_cuda, kCuda);  // odd: the last pair's sine unused
      Tensor want = randn({4099}, dtype, &on_cpu);
      BOOST_TEST(got.dtype() == dtype);
      BOOST_TEST(on_cuda.offset() == 1025u);
      BOOST_TEST(on_cpu.offset() == 1025u);
      if (dtype == DType::f32 || dtype == DType::f64)
        BOOST_TEST(relative_error(got, want) <= 1e-5);
      else  // the CPU rounds a double, the device an f32 a few f32 ulps from it
        BOOST_TEST(ulps_apart(got, want, dtype) <= 1);
      // And the reference: |error| <= 1e-5 (1 + |x|) in f32, the dtype's rounding otherwise.
      auto g = values_of(got);
      double tol = dtype == DType::f32 || dtype == DType::f64 ? 1e-5 : rtol_for(dtype);
      int wrong = 0;
      for (std::uint64_t i = 0; i < g.size(); ++i) {
        double ref = normal_reference(seed, 0, i);
        if (!(std::abs(g[i] - ref) <= tol * (1 + std::abs(ref))) && wrong++ < 5)
          BOOST_ERROR("element " << i << ": cuda " << g[i] << ", reference " << ref);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(randint_on_cuda_is_the_cpu_draw_and_stays_in_its_range) {
  const std::uint64_t seed = 77;
  struct Case {
    std::int64_t low, high;
    DType dtype;
  };
  const std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
  for (Case c : {Case{-3, 4, DType::i64}, Case{0, 1000, DType::i32}, Case{-20, 20, DType::f32},
                 Case{-(std::int64_t{1} << 50), (std::int64_t{1} << 52) + 1, DType::i64},
                 Case{lowest, std::numeric_limits<std::int64_t>::max(), DType::i64}}) {
    BOOST_TEST_CONTEXT(c.low << ".." << c.high << " " << dtype_name(c.dtype)) {
      Generator on_cuda(seed), on_cpu(seed);
      Tensor got = randint(c.low, c.high, {3, 333}, c.dtype, &on_cuda, kCuda);
      Tensor want = randint(c.low, c.high, {3, 333}, c.dtype, &on_cpu);
      BOOST_TEST(got.dtype() == c.dtype);
      BOOST_TEST(on_cuda.offset() == 500u);  // 1998 words
      BOOST_TEST(on_cpu.offset() == 500u);
      auto g = got.to(Device::cpu()).to_vector<std::int64_t>();
      auto w = want.to_vector<std::int64_t>();
      BOOST_TEST(g == w, boost::test_tools::per_element());
      int wrong = 0;
      for (std::uint64_t i = 0; i < g.size(); ++i) {
        std::int64_t ref = int_reference(seed, 0, i, c.low, c.high);
        bool ok = g[i] >= c.low && g[i] < c.high && (c.dtype != DType::i64 || g[i] == ref);
        if (!ok && wrong++ < 5)
          BOOST_ERROR("element " << i << ": " << g[i] << ", reference " << ref);
      }
    }
  }
  // Every value of a small range appears.
  Generator gen(5);
  auto v =
      randint(0, 7, {2000}, DType::i64, &gen, kCuda).to(Device::cpu()).to_vector<std::int64_t>();
  std::set<std::int64_t> seen(v.begin(), v.end());
  BOOST_TEST(seen.size() == 7u);
}

BOOST_AUTO_TEST_CASE(draws_advance_the_generator_by_their_counters_on_both_devices) {
  for (OpId op : {OpId::random_uniform, OpId::random_normal, OpId::random_int}) {
    for (std::int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 1001}) {
      BOOST_TEST_CONTEXT(op_name(op) << " of " << n) {
        for (Device device : {Device::cpu(), kCuda}) {
          Generator gen(3);
          gen.advance(10);
          if (op == OpId::random_uniform) rand({n}, DType::f32, &gen, device);
          if (op == OpId::random_normal) randn({n}, DType::f32, &gen, device);
          if (op == OpId::random_int) randint(0, 9, {n}, DType::i64, &gen, device);
          BOOST_TEST(gen.offset() == 10 + counters_reference(op, static_cast<std::uint64_t>(n)),
                     device.str());
        }
      }
    }
  }
  // The default generator too, and consecutive draws continue the stream.
  manual_seed(31);
  Tensor a = rand({6}, DType::f32, nullptr, kCuda);
  Tensor b = rand({6}, DType::f32, nullptr, kCuda);
  BOOST_TEST(default_generator().offset() == 4u);
  auto av = values_of(a), bv = values_of(b);
  for (std::uint64_t i = 0; i < 6; ++i) {
    BOOST_TEST(av[i] == uniform_reference(31, 0, i, 24));
    BOOST_TEST(bv[i] == uniform_reference(31, 2, i, 24));
  }
}

BOOST_AUTO_TEST_CASE(dropout_on_cuda_keeps_about_1_minus_p_and_scales_by_exactly_1_over_1_minus_p) {
  const std::int64_t n = 128 * 128;
  for (double p : {0.1, 0.5}) {
    BOOST_TEST_CONTEXT("p " << p) {
      Tensor x = ones({128, 128}).to(kCuda);
      Generator gen(123), cpu_gen(123);
      std::int64_t copies = copies_to_host();
      Tensor y = dropout(x, p, true, &gen);
      BOOST_TEST(copies_to_host() == copies);  // drawn, compared and scaled on the device
      BOOST_TEST(y.device().str() == "cuda:0");
      BOOST_TEST(gen.offset() == static_cast<std::uint64_t>(n / 4));
      auto v = values_of(y);
      const double scale = static_cast<float>(1.0 / (1.0 - p));
      std::int64_t kept = 0;
      int wrong = 0;
      for (std::uint64_t i = 0; i < v.size(); ++i) {
        // Kept where the element's f32 uniform is at least p, as p is rounded to f32.
        bool keep = uniform_reference(123, 0, i, 24) >= static_cast<float>(p);
        kept += keep;
        if (v[i] != (keep ? scale : 0.0) && wrong++ < 5)
          BOOST_ERROR("element " << i << ": " << v[i] << ", expected " << (keep ? scale : 0.0));
      }
      double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
      BOOST_TEST(std::abs(static_cast<double>(kept) / n - (1 - p)) <= 4 * sigma);
      // The CPU's dropout of the same seed keeps the same elements.
      Tensor on_cpu = dropout(ones({128, 128}), p, true, &cpu_gen);
      BOOST_TEST(relative_error(y, on_cpu) == 0.0);
    }
  }
  // Half precision draws f32 uniforms too, and keeps its dtype.
  Generator gen(9);
  Tensor h = dropout(ones({64}, DType::bf16).to(kCuda), 0.5, true, &gen);
  BOOST_TEST(h.dtype() == DType::bf16);
  auto hv = values_of(h);
  for (std::uint64_t i = 0; i < hv.size(); ++i)
    BOOST_TEST(hv[i] == (uniform_reference(9, 0, i, 24) >= 0.5 ? 2.0 : 0.0));
  // Gradients flow through the kept elements only.
  Tensor w = ones({8}).to(kCuda);
  w.requires_grad_();
  Generator g2(2);
  Tensor out = dropout(w, 0.5, true, &g2);
  out.sum().backward();
  BOOST_TEST(values_of(w.grad()) == values_of(out), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(like_factories_and_bernoulli_draw_on_their_arguments_device) {
  Tensor x = zeros({5, 6}, DType::f16).to(kCuda);
  Generator gen(8);
  Tensor r = rand_like(x, &gen);
  BOOST_TEST(r.device().str() == "cuda:0");
  BOOST_TEST(r.dtype() == DType::f16);
  BOOST_TEST(shape_str(r.shape()) == "[5, 6]");
  auto rv = values_of(r);
  for (std::uint64_t i = 0; i < rv.size(); ++i) BOOST_TEST(rv[i] == uniform_reference(8, 0, i, 11));
  Tensor g = randn_like(x, &gen);
  BOOST_TEST(g.device().str() == "cuda:0");
  BOOST_TEST(gen.offset() == 16u);
  Tensor k = randint_like(zeros({5}, DType::i32).to(kCuda), 3, 9, &gen);
  BOOST_TEST(k.device().str() == "cuda:0");
  BOOST_TEST(k.dtype() == DType::i32);
  auto kv = k.to(Device::cpu()).to_vector<std::int64_t>();
  for (std::uint64_t i = 0; i < kv.size(); ++i) BOOST_TEST(kv[i] == int_reference(8, 16, i, 3, 9));

  std::vector<double> probabilities;
  for (int i = 0; i < 300; ++i) probabilities.push_back((i % 11) / 10.0 > 1 ? 1 : (i % 11) / 10.0);
  Tensor p = f32s(std::vector<float>(probabilities.begin(), probabilities.end()), {300});
  auto pv = p.to_vector<double>();
  Generator b(4);
  Tensor bits = bernoulli(p.to(kCuda), &b);
  BOOST_TEST(bits.device().str() == "cuda:0");
  BOOST_TEST(bits.dtype() == DType::f32);
  auto bv = values_of(bits);
  for (std::uint64_t i = 0; i < bv.size(); ++i)
    BOOST_TEST(bv[i] == (uniform_reference(4, 0, i, 24) < pv[i] ? 1.0 : 0.0), "element " << i);
  Generator c(6);
  Tensor coin = bernoulli(zeros({100}, DType::f64).to(kCuda), 0.25, &c);
  BOOST_TEST(coin.dtype() == DType::f64);
  auto cv = values_of(coin);
  for (std::uint64_t i = 0; i < cv.size(); ++i)
    BOOST_TEST(cv[i] == (uniform_reference(6, 0, i, 24) < 0.25 ? 1.0 : 0.0));
}

BOOST_AUTO_TEST_CASE(bad_arguments_on_cuda_raise_errors_naming_the_op_and_the_value) {
  KILN_CHECK_THROWS(rand({2}, DType::i64, nullptr, kCuda), DTypeError, "rand", "i64");
  KILN_CHECK_THROWS(randn({2}, DType::bool_, nullptr, kCuda), DTypeError, "randn", "bool");
  KILN_CHECK_THROWS(randint(4, 4, {2}, DType::i64, nullptr, kCuda), Error, "randint", "4");
  KILN_CHECK_THROWS(randint(0, 2, {2}, DType::bool_, nullptr, kCuda), DTypeError, "randint",
                    "bool");
  Tensor x = zeros({4}).to(kCuda);
  KILN_CHECK_THROWS(dropout(x, 1.5), Error, "dropout", "1.5");
  KILN_CHECK_THROWS(dropout(x, -0.1), Error, "dropout", "-0.1");
  KILN_CHECK_THROWS(bernoulli(x, 2.5), Error, "bernoulli", "2.5");
  KILN_CHECK_THROWS(bernoulli(f32s({0.5f, 1.75f}).to(kCuda)), Error, "bernoulli", "1.75");
  KILN_CHECK_THROWS(rand_like(zeros({2}, DType::i32).to(kCuda)), DTypeError, "rand_like", "i32");
  // A seed on another device than the draw's.
  const Tensor seeds[] = {number(1).to(kCuda), number(0)};
  OpAttrs attrs;
  attrs.shape = {3};
  KILN_CHECK_THROWS(dispatch1(OpId::random_uniform, seeds, attrs), Error, "random_uniform",
                    "different devices");
}

BOOST_AUTO_TEST_CASE(seed_and_offset_may_be_device_tensors) {
  Tensor seed = number(-123), offset = number(9);
  for (OpId op : {OpId::random_uniform, OpId::random_normal, OpId::random_int}) {
    BOOST_TEST_CONTEXT(op_name(op)) {
      DType dtype = op == OpId::random_int ? DType::i64 : DType::f64;
      Tensor got = draw(op, seed.to(kCuda), offset.to(kCuda), {3, 11}, dtype, kCuda);
      Tensor by_value = draw(op, seed, offset, {3, 11}, dtype, kCuda);
      Tensor want = draw(op, seed, offset, {3, 11}, dtype, Device::cpu());
      BOOST_TEST(got.device().str() == "cuda:0");
      BOOST_TEST(relative_error(got, by_value) == 0.0);
      BOOST_TEST(relative_error(got, want) <= (op == OpId::random_normal ? 1e-12 : 0.0));
    }
  }
}

BOOST_AUTO_TEST_CASE(random_ops_fuse_into_the_kernels_of_their_neighbours) {
  Tensor x = from_vector(host_random(8 * 37, -2, 2, 1), {8, 37});
  // Seed and offsets are arguments (numbers), as a traced draw would take them.
  auto fn = [](const Tensor& seed, const Tensor& offset, const Tensor& other, const Tensor& v) {
    Shape s = v.shape();
    Tensor u = draw(OpId::random_uniform, seed, offset, s, DType::f32, v.device());
    Tensor z = draw(OpId::random_normal, seed, other, s, DType::f32, v.device());
    Tensor k = draw(OpId::random_int, seed, offset, s, DType::i64, v.device());
    return std::vector<Tensor>{v * u + z, sum(u * v, {1}), softmax(z + v, -1), v * k};
  };
  auto f = jit::compile(fn);
  for (std::int64_t offset : {5, 6000}) {  // numbers by value: a new offset, no new kernel
    BOOST_TEST_CONTEXT("offset " << offset) {
      auto got = f(number(11), number(offset), number(offset + 1000), x.to(kCuda));
      auto want = fn(number(11), number(offset), number(offset + 1000), x);
      BOOST_TEST_REQUIRE(got.size() == 4u);
      for (std::size_t i = 0; i < 4; ++i)
        BOOST_TEST(relative_error(got[i], want[i]) <= 1e-5, "output " << i << "\n" << f.explain());
    }
  }
  BOOST_TEST(f.core().num_entries() == 1u, f.explain());
  // One kernel over the rows: the random values are full values of rows over the trailing dim,
  // computed where the row sum, the softmax and the pointwise outputs read them.
  BOOST_TEST(kernels_of(f) == 1, f.explain());
}

BOOST_AUTO_TEST_CASE(a_random_value_read_through_broadcast_or_a_leading_reduction_keeps_its_index) {
  // [6] broadcast over [4, 6] and [5, 7] summed over its leading dim: the kernel's element
  // index is not the random value's, so the value is its own kernel.
  Tensor x = from_vector(host_random(24, -2, 2, 2), {4, 6});
  Tensor y = from_vector(host_random(35, -2, 2, 3), {5, 7});
  Tensor t = from_vector(host_random(24, -2, 2, 4), {6, 4});
  auto fn = [](const Tensor& seed, const Tensor& a, const Tensor& b, const Tensor& c) {
    Tensor row = draw(OpId::random_uniform, seed, seed, {6}, DType::f32, a.device());
    Tensor full = draw(OpId::random_normal, seed, seed, {5, 7}, DType::f32, b.device());
    Tensor grid = draw(OpId::random_uniform, seed, seed, {4, 6}, DType::f64, c.device());
    // A permute of a computed value: an index-aware kernel computes it at its own coordinates.
    return std::vector<Tensor>{a + row, sum(full * b, {0}), grid.t() * c};
  };
  auto f = jit::compile(fn);
  auto got = f(number(3), x.to(kCuda), y.to(kCuda), t.to(kCuda));
  auto want = fn(number(3), x, y, t);
  BOOST_TEST_REQUIRE(got.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i)
    BOOST_TEST(relative_error(got[i], want[i]) <= 1e-5, "output " << i << "\n" << f.explain());
  std::string e = f.explain();
  BOOST_TEST(e.find("is broadcast over") != std::string::npos, e);
  BOOST_TEST(e.find("reads its element's linear index") != std::string::npos, e);
}

BOOST_AUTO_TEST_SUITE_END()
