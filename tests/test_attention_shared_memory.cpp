// The FlashAttention kernels' tiles in dynamic shared memory, chosen within each device's
// per-block budget: the tiles a 48 KB budget gives are the static-memory kernels' (computed here
// by hand from the byte formula), larger budgets take more warps and double-buffering, f32 at
// head dim 256 runs on sm_90, sm_80 and sm_86 (against attention and its gradients as loops in
// double), and a device of 48 KB refuses it with the bytes, after which the attention rewrite
// keeps the user's ops.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/attention_tiling.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/random.h"
#include "support/profiling_scope.h"
#include "support/skip_if.h"
#include "support/virtual_device.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace tiles = kiln::jit::codegen::attention_tiles;

namespace {

constexpr std::int64_t KiB = 1024;

// The tiles' tag for these sizes within `budget`, or "none".
std::string tag(tiles::Kernel kind, int elem, int d, std::int64_t budget) {
  auto t = tiles::fitting_tiling(kind, elem, d, d, budget);
  return t ? t->tag() : "none";
}

std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Attention over `batches` rows of q [T, d], k [S, d], v [S, d] (no mask) and its gradients
// given dout, as loops in double.
Reference reference(const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, long batches,
                    long t, long s, long d, double scale) {
  Reference r;
  r.out.assign(batches * t * d, 0);
  r.lse.assign(batches * t, 0);
  r.dq.assign(batches * t * d, 0);
  r.dk.assign(batches * s * d, 0);
  r.dv.assign(batches * s * d, 0);
  std::vector<double> p(s), dp(s);
  for (long b = 0; b < batches; ++b)
    for (long i = 0; i < t; ++i) {
      const double* qi = &q[(b * t + i) * d];
      const double* go = &dout[(b * t + i) * d];
      double mx = -INFINITY, sum = 0, delta = 0;
      for (long j = 0; j < s; ++j) {
        p[j] = 0;
        for (long c = 0; c < d; ++c) p[j] += qi[c] * k[(b * s + j) * d + c];
        p[j] *= scale;
        mx = std::max(mx, p[j]);
      }
      for (long j = 0; j < s; ++j) sum += std::exp(p[j] - mx);
      r.lse[b * t + i] = mx + std::log(sum);
      for (long j = 0; j < s; ++j) {
        p[j] = std::exp(p[j] - mx) / sum;
        dp[j] = 0;
        for (long c = 0; c < d; ++c) {
          r.out[(b * t + i) * d + c] += p[j] * v[(b * s + j) * d + c];
          dp[j] += go[c] * v[(b * s + j) * d + c];
        }
        delta += p[j] * dp[j];
      }
      for (long j = 0; j < s; ++j) {
        double ds = p[j] * (dp[j] - delta);
        for (long c = 0; c < d; ++c) {
          r.dq[(b * t + i) * d + c] += scale * ds * k[(b * s + j) * d + c];
          r.dk[(b * s + j) * d + c] += scale * ds * qi[c];
          r.dv[(b * s + j) * d + c] += p[j] * go[c];
        }
      }
    }
  return r;
}

double worst_error(const Tensor& got, const std::vector<double>& want) {
  std::vector<double> g = values(got);
  BOOST_REQUIRE_EQUAL(g.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    worst = std::max(
        worst, std::isnan(g[i]) ? INFINITY : std::fabs(g[i] - want[i]) / (1 + std::fabs(want[i])));
  return worst;
}

// f32 attention at head dim `d` (2 heads, T 5, S 7) forward and backward on the fused kernels of
// the current device against the loops; returns the names of the kernels that ran.
std::vector<std::string> run_f32(long d) {
  const long heads = 2, t = 5, s = 7;
  Tensor q = randn({heads, t, d}).to(Device::cuda()), k = randn({heads, s, d}).to(Device::cuda()),
         v = randn({heads, s, d}).to(Device::cuda()),
         dout = randn({heads, t, d}).to(Device::cuda());
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  codegen::AttentionCall call{q, k, v, std::nullopt, scale, false};
  BOOST_REQUIRE_EQUAL(codegen::attention_unsupported(call), "");
  test::ProfilingScope profiling;
  auto fwd = codegen::attention_forward(call);
  auto grads = codegen::attention_backward(call, fwd.out, fwd.lse, dout);
  profiling.stop();
  Reference want = reference(values(q), values(k), values(v), values(dout), heads, t, s, d, scale);
  BOOST_TEST(worst_error(fwd.out, want.out) <= 1e-4);
  BOOST_TEST(worst_error(fwd.lse, want.lse) <= 1e-4);
  BOOST_TEST(worst_error(grads.dq, want.dq) <= 1e-4);
  BOOST_TEST(worst_error(grads.dk, want.dk) <= 1e-4);
  BOOST_TEST(worst_error(grads.dv, want.dv) <= 1e-4);
  std::vector<std::string> names;
  for (const auto& p : cuda::vgpu::profiles()) names.push_back(p.kernel);
  return names;
}

bool ran(const std::vector<std::string>& names, const std::string& part) {
  for (const auto& n : names)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_shared_memory)

// A 48 KB budget keeps the tiles of the static-shared-memory kernels; each value below is the
// byte formula (elem x (fixed rows + stages x streamed rows) x (head dim + 8)) worked by hand.
BOOST_AUTO_TEST_CASE(a_48_kb_budget_keeps_the_static_tiles) {
  using K = tiles::Kernel;
  const std::int64_t b = 48 * KiB;
  BOOST_TEST(tag(K::forward, 2, 64, b) == "w4n64s2");        // 2 (64 x 72 + 2 x 64 x 144) = 46080
  BOOST_TEST(tag(K::backward, 2, 64, b) == "w4n64s1n64s1");  // dq 2 x 64 x 144 x 2 = 36864
  BOOST_TEST(tag(K::forward, 2, 128, b) == "w4n32s1");       // 2 (64 x 136 + 32 x 272) = 34816
  BOOST_TEST(tag(K::forward, 4, 128, b) == "w2n16s1");       // 4 (32 x 136 + 16 x 272) = 34816
  BOOST_TEST(tag(K::forward, 4, 256, b) == "none");          // 4 (16 x 264 + 16 x 528) = 50688
}

// Larger budgets: the same rule takes more warps and double-buffering where they fit. f32 at
// head dim 256: forward 4 (64 x 264 + stages x 32 x 528) is 135168 single-, 202752
// double-buffered; the backward's dq blocks 4 (16 w x 528 + stages x bn x 528) and dk/dv blocks
// the same plus 8 x stages x bn.
BOOST_AUTO_TEST_CASE(larger_budgets_take_more_warps_and_double_buffering) {
  using K = tiles::Kernel;
  std::int64_t sm86 = 99 * KiB, sm80 = 163 * KiB, sm90 = 227 * KiB;
  BOOST_TEST(tag(K::forward, 4, 256, sm90) == "w4n32s2");
  BOOST_TEST(tag(K::forward, 4, 256, sm80) == "w4n32s1");
  BOOST_TEST(tag(K::forward, 4, 256, sm86) == "w4n16s1");        // 101376: exactly 99 KiB
  BOOST_TEST(tag(K::backward, 4, 256, sm90) == "w4n32s1n16s2");  // 202752 and 203008
  BOOST_TEST(tag(K::backward, 4, 256, sm80) == "w2n32s1n16s2");  // 135168 and 135424
  BOOST_TEST(tag(K::backward, 4, 256, sm86) == "w1n32s1n16s1");  // 101376 and 67712
  BOOST_TEST(tiles::fitting_tiling(K::backward, 4, 256, 256, sm90)->shared == 203008);
  BOOST_TEST(tag(K::forward, 2, 128, sm86) == "w4n32s2");       // 52224
  BOOST_TEST(tag(K::forward, 4, 128, sm80) == "w4n32s2");       // 104448
  BOOST_TEST(tag(K::backward, 2, 64, sm90) == "w4n64s2n64s2");  // 55296 and 56320
}

BOOST_AUTO_TEST_CASE(f32_head_dim_256_runs_where_the_budget_fits,
                     *test::skip_if(test::needs_virtual_gpu)) {
  for (auto [major, minor, fwd, bwd] :
       {std::tuple{9, 0, "w4n32s2", "w4n32s1n16s2"}, std::tuple{8, 0, "w4n32s1", "w2n32s1n16s2"},
        std::tuple{8, 6, "w4n16s1", "w1n32s1n16s1"}}) {
    BOOST_TEST_CONTEXT("sm_" << major << minor) {
      test::VirtualDeviceScope device(major, minor);
      std::vector<std::string> names = run_f32(256);
      BOOST_TEST(ran(names, std::string("k_attention_fwd_f32_d256_v256_nomask_vec_") + fwd));
      BOOST_TEST(ran(names, std::string("k_attention_bwd_f32_d256_v256_nomask_vec_") + bwd));
    }
  }
}

// A device whose blocks may have 48 KB: the call is refused with the head dim, the dtype and the
// bytes, and a compiled matmul-softmax-matmul keeps its ops (and their values).
BOOST_AUTO_TEST_CASE(a_48_kb_device_refuses_f32_head_dim_256_and_keeps_the_ops,
                     *test::skip_if(test::needs_virtual_gpu)) {
  test::VirtualDeviceScope device(9, 0, 48 * KiB);
  Tensor q = randn({1, 2, 8, 256}), k = randn({1, 2, 8, 256}), v = randn({1, 2, 8, 256});
  codegen::AttentionCall call{q.to(Device::cuda()),
                              k.to(Device::cuda()),
                              v.to(Device::cuda()),
                              std::nullopt,
                              0.0625,
                              false};
  std::string why = codegen::attention_unsupported(call);
  for (const char* part : {"no forward tiling fits head dims 256 and 256 at f32",
                           "needs 50688 bytes of shared memory per block",
                           "the device allows 49152", "q [1, 2, 8, 256] f32"})
    BOOST_TEST(why.find(part) != std::string::npos, why);
  BOOST_CHECK_THROW(codegen::attention_forward(call), Error);
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return matmul(softmax(matmul(a, b.transpose(-2, -1)) * 0.0625, -1), c);
  };
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::never;
  auto f = jit::compile(fn, options);
  Tensor out = f(call.q, call.k, call.v);
  int attention = 0;
  for (const auto& n : f.core().graph(0).nodes) attention += n.op == OpId::attention;
  BOOST_TEST(attention == 0);
  Tensor want = fn(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64));
  BOOST_TEST(allclose(out.to(Device::cpu()).to(DType::f64), want, 1e-4, 1e-5));
}

// explain() shows the tiles a compiled attention step takes on the device it was compiled for.
BOOST_AUTO_TEST_CASE(explain_shows_the_tiles_of_each_device,
                     *test::skip_if(test::needs_virtual_gpu)) {
  Tensor q = randn({1, 1, 4, 256}).to(Device::cuda());
  for (auto [major, minor, tiles, budget] : {std::tuple{9, 0, "tiles w4n32s2", "of the 232448"},
                                             std::tuple{8, 0, "tiles w4n32s1", "of the 166912"}}) {
    BOOST_TEST_CONTEXT("sm_" << major << minor) {
      test::VirtualDeviceScope device(major, minor);
      jit::CompileOptions options;
      options.dynamic = jit::DynamicMode::never;
      auto f = jit::compile([](const Tensor& a) { return scaled_dot_product_attention(a, a, a); },
                            options);
      Tensor out = f(q);
      BOOST_TEST(f.core().stats().kernel_calls == 1);
      std::string explained = f.explain();
      BOOST_TEST(explained.find(tiles) != std::string::npos, explained);
      BOOST_TEST(explained.find(budget) != std::string::npos, explained);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
