// Grouped-query and multi-query attention (q with H heads, k and v with Hkv dividing H; query
// head h reads kv head h / (H / Hkv)) and head dims from 1 to 256: the `attention` op and its
// backward on the host and on the fused kernels (virtual GPU), against attention and its
// gradients written here as plain loops in double with the head mapping spelled out.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "jit/codegen/attention.h"
#include "runtime/dispatch.h"
#include "support/reference.h"

using namespace kiln;
using test::host_random;
namespace codegen = kiln::jit::codegen;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Sizes {
  long b, h, hkv, t, s, d, dv;
};

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// q [B, H, T, d], k [B, Hkv, S, d], v [B, Hkv, S, dv], dout [B, H, T, dv], row-major.
Reference reference(const Sizes& z, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, double scale,
                    bool causal) {
  Reference r;
  r.out.assign(z.b * z.h * z.t * z.dv, 0);
  r.lse.assign(z.b * z.h * z.t, -kInf);
  r.dq.assign(z.b * z.h * z.t * z.d, 0);
  r.dk.assign(z.b * z.hkv * z.s * z.d, 0);
  r.dv.assign(z.b * z.hkv * z.s * z.dv, 0);
  long g = z.h / z.hkv;
  std::vector<double> p(z.s), dp(z.s);
  for (long b = 0; b < z.b; ++b)
    for (long h = 0; h < z.h; ++h) {
      long kvh = h / g;
      const double* qb = &q[(b * z.h + h) * z.t * z.d];
      const double* kb = &k[(b * z.hkv + kvh) * z.s * z.d];
      const double* vb = &v[(b * z.hkv + kvh) * z.s * z.dv];
      const double* dob = &dout[(b * z.h + h) * z.t * z.dv];
      double* dkb = &r.dk[(b * z.hkv + kvh) * z.s * z.d];
      double* dvb = &r.dv[(b * z.hkv + kvh) * z.s * z.dv];
      for (long i = 0; i < z.t; ++i) {
        double m = -kInf;
        for (long j = 0; j < z.s; ++j) {
          double x = 0;
          for (long e = 0; e < z.d; ++e) x += qb[i * z.d + e] * kb[j * z.d + e];
          p[j] = causal && j > i ? -kInf : x * scale;
          m = std::max(m, p[j]);
        }
        double l = 0;
        for (long j = 0; j < z.s; ++j) l += (p[j] = std::exp(p[j] - m));
        r.lse[(b * z.h + h) * z.t + i] = m + std::log(l);
        double delta = 0;
        for (long j = 0; j < z.s; ++j) {
          p[j] /= l;
          dp[j] = 0;
          for (long e = 0; e < z.dv; ++e) dp[j] += dob[i * z.dv + e] * vb[j * z.dv + e];
          delta += p[j] * dp[j];
        }
        for (long j = 0; j < z.s; ++j) {
          double ds = p[j] * (dp[j] - delta) * scale;
          for (long e = 0; e < z.dv; ++e) {
            r.out[((b * z.h + h) * z.t + i) * z.dv + e] += p[j] * vb[j * z.dv + e];
            dvb[j * z.dv + e] += p[j] * dob[i * z.dv + e];
          }
          for (long e = 0; e < z.d; ++e) {
            r.dq[((b * z.h + h) * z.t + i) * z.d + e] += ds * kb[j * z.d + e];
            dkb[j * z.d + e] += ds * qb[i * z.d + e];
          }
        }
      }
    }
  return r;
}

Tensor make(const Shape& shape, DType dtype, std::uint64_t seed) {
  // Rounded to the dtype first, so that the reference sees the values the op sees.
  return test::typed(dtype, host_random(static_cast<std::size_t>(numel(shape)), -1, 1, seed),
                     shape);
}

// Runs forward and backward of one call on `device` and checks all five results.
void check_call(const Sizes& z, DType dtype, bool causal, Device device) {
  Shape qs{z.b, z.h, z.t, z.d}, ks{z.b, z.hkv, z.s, z.d}, vs{z.b, z.hkv, z.s, z.dv},
      os{z.b, z.h, z.t, z.dv};
  Tensor q = make(qs, dtype, 11), k = make(ks, dtype, 12), v = make(vs, dtype, 13),
         dout = make(os, dtype, 14);
  double scale = 1.0 / std::sqrt(static_cast<double>(z.d));
  Reference want = reference(z, q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(),
                             dout.to_vector<double>(), scale, causal);
  OpAttrs attrs;
  attrs.scale = scale;
  attrs.causal = causal;
  std::vector<Tensor> in{q.to(device), k.to(device), v.to(device)};
  if (device.is_cuda())  // the fused kernels, not the primitive-op fallback
    BOOST_TEST(codegen::attention_unsupported(codegen::attention_call(OpId::attention, in, attrs))
                   .empty());
  auto fwd = dispatch(OpId::attention, in, attrs);
  // bf16 rounds out (and the probabilities feeding the products) to 8 bits.
  double tol = dtype == DType::bf16 ? 3e-2 : dtype == DType::f32 ? 2e-4 : 1e-10;
  test::check_close(fwd[0].to(Device::cpu()), os, want.out, tol, tol);
  test::check_close(fwd[1].to(Device::cpu()), {z.b, z.h, z.t}, want.lse, tol, tol);
  std::vector<Tensor> bin{in[0], in[1], in[2], fwd[0], fwd[1], dout.to(device)};
  auto grads = dispatch(OpId::attention_backward, bin, attrs);
  // dk and dv sum g query heads' contributions: a looser absolute bound for bf16.
  double gtol = dtype == DType::bf16 ? 6e-2 : dtype == DType::f32 ? 5e-4 : 1e-10;
  test::check_close(grads[0].to(Device::cpu()), qs, want.dq, gtol, gtol);
  test::check_close(grads[1].to(Device::cpu()), ks, want.dk, gtol, gtol);
  test::check_close(grads[2].to(Device::cpu()), vs, want.dv, gtol, gtol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_gqa)

// The host op (the reference the kernels are checked against elsewhere) in f64.
BOOST_AUTO_TEST_CASE(host_op_maps_each_query_head_to_its_kv_head) {
  for (long hkv : {4L, 2L, 1L})
    for (bool causal : {false, true})
      BOOST_TEST_CONTEXT("Hkv " << hkv << (causal ? " causal" : "")) {
        check_call({2, 4, hkv, 5, 7, 3, 2}, DType::f64, causal, Device::cpu());
      }
}

// The fused kernels: MHA, GQA and MQA over head dims that are not whole tiles, up to 256.
BOOST_AUTO_TEST_CASE(fused_kernels_take_every_head_dim_and_group) {
  struct Run {
    long d, hkv;
    DType dtype;
    bool causal;
  };
  const std::vector<Run> runs = {
      {1, 2, DType::f32, false},   {1, 1, DType::bf16, true},   {8, 2, DType::f32, true},
      {8, 4, DType::bf16, false},  {24, 1, DType::f32, false},  {24, 2, DType::bf16, true},
      {80, 2, DType::f32, true},   {80, 1, DType::bf16, false}, {136, 4, DType::f32, false},
      {136, 2, DType::bf16, true}, {256, 2, DType::bf16, true}, {256, 1, DType::bf16, false},
  };
  for (const Run& r : runs)
    BOOST_TEST_CONTEXT("d " << r.d << ", Hkv " << r.hkv << ", " << dtype_name(r.dtype)
                            << (r.causal ? ", causal" : "")) {
      check_call({1, 4, r.hkv, 20, 18, r.d, r.d}, r.dtype, r.causal, Device::cuda());
    }
}

BOOST_AUTO_TEST_CASE(heads_that_do_not_divide_are_refused_with_the_shapes) {
  for (Device device : {Device::cpu(), Device::cuda()}) {
    OpAttrs attrs;
    attrs.scale = 0.5;
    std::vector<Tensor> in{make({1, 6, 3, 8}, DType::f32, 1).to(device),
                           make({1, 4, 5, 8}, DType::f32, 2).to(device),
                           make({1, 4, 5, 8}, DType::f32, 3).to(device)};
    KILN_CHECK_THROWS(dispatch(OpId::attention, in, attrs), ShapeError, "attention", "H % Hkv",
                      "[1, 6, 3, 8]", "[1, 4, 5, 8]");
  }
}

BOOST_AUTO_TEST_SUITE_END()
