// The f32 transcendentals generated kernels compute with the MUFU's approximate 2^x and 1/x
// (templates/elementwise_helpers.cu.mustache: sigmoid, silu, tanh, gelu, gelu_tanh), swept over
// a dense grid of inputs (every binade from the smallest subnormal to the largest float, both
// signs, and fine steps across [-12, 12]) on the virtual GPU against libm in double: the error
// bound each helper's comment claims, and libm's infinities and NaNs.
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "runtime/factories.h"

using namespace kiln;

namespace {

// ±0, ±inf, NaN, the subnormal and normal extremes; 32 values of every binade of either sign;
// steps of 2^-12 across [-12, 12] (the branches of tanh and gelu, and where sigmoid saturates).
std::vector<float> grid() {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           FLT_MIN * (1 - FLT_EPSILON),
                           FLT_MIN,
                           -FLT_MIN,
                           FLT_MAX,
                           -FLT_MAX};
  for (int e = -149; e <= 127; ++e)
    for (int m = 0; m < 32; ++m) {
      auto x = static_cast<float>(std::ldexp(1.0 + m / 32.0 + 1.0 / 4096, e));
      xs.push_back(x);
      xs.push_back(-x);
    }
  for (int i = -12 * 4096; i <= 12 * 4096; ++i) xs.push_back(static_cast<float>(i / 4096.0));
  return xs;
}

// The spacing of f32 values at |x| (the smallest normal's below the normals).
double ulp32(double x) {
  int e = x == 0 ? -126 : std::max(std::ilogb(x), -126);
  return std::ldexp(1.0, e - 23);
}

struct Bound {
  double ulps;      // at max(|libm|, floor) ...
  double floor;     // ... (1: results below 1 in ulps of 1, as single_op_floor's gelu)
  double tiny;      // where |libm| is below this,
  double tiny_abs;  // the absolute error instead (the .ftz MUFU ops flush subnormal results)
};

struct Worst {
  double ulps = 0, abs = 0;
  float ulps_at = 0;
  int special_mismatches = 0;
};

// The kernel's results on `xs` against `exact` (libm in double).
Worst sweep(const std::function<Tensor(const Tensor&)>& op,
            const std::function<double(double)>& exact, const std::vector<float>& xs,
            const Bound& bound) {
  Tensor x = from_vector(xs).to(Device::cuda());
  std::vector<float> got = op(x).to(Device::cpu()).to_vector<float>();
  Worst w;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    double want = exact(xs[i]), g = got[i];
    if (!std::isfinite(want) || !std::isfinite(g)) {
      bool same = (std::isnan(want) && std::isnan(g)) || want == g;
      if (!same) {
        if (w.special_mismatches++ < 5)
          BOOST_TEST_MESSAGE("  x = " << xs[i] << ": " << g << ", libm " << want);
      }
      continue;
    }
    double err = std::abs(g - want);
    if (std::abs(want) < bound.tiny) {
      w.abs = std::max(w.abs, err);
      continue;
    }
    double ulps = err / ulp32(std::max(std::abs(want), bound.floor));
    if (ulps > w.ulps) w.ulps = ulps, w.ulps_at = xs[i];
  }
  return w;
}

void check(const char* name, const std::function<Tensor(const Tensor&)>& op,
           const std::function<double(double)>& exact, const Bound& bound) {
  static const std::vector<float> xs = grid();
  Worst w = sweep(op, exact, xs, bound);
  BOOST_TEST_MESSAGE(name << ": " << xs.size() << " inputs, at most " << w.ulps
                          << " ulps (at x = " << w.ulps_at << "), " << w.abs
                          << " absolute where |libm| < " << bound.tiny);
  BOOST_TEST(w.special_mismatches == 0, name << ": infinities or NaNs unlike libm's");
  BOOST_TEST(w.ulps <= bound.ulps, name << ": " << w.ulps << " ulps at x = " << w.ulps_at);
  BOOST_TEST(w.abs <= bound.tiny_abs, name << ": " << w.abs << " absolute");
}

double sigmoid_exact(double x) {
  return 1 / (1 + std::exp(-x));
}
// gelu_tanh's 0.5 x (1 + tanh(u)) without the cancellation at negative x.
double gelu_tanh_exact(double x) {
  double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return x / (1 + std::exp(-2 * u));
}

}  // namespace

BOOST_AUTO_TEST_CASE(sigmoid_is_within_3_5_ulps_of_libm) {
  check("sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_exact,
        {3.5, 0, 0x1p-120, 2e-38});
}

BOOST_AUTO_TEST_CASE(silu_is_within_4_ulps_of_libm) {
  check(
      "silu", [](const Tensor& x) { return silu(x); },
      [](double x) { return x * sigmoid_exact(x); }, {4, 0, 0x1p-110, 2e-36});
}

BOOST_AUTO_TEST_CASE(tanh_is_within_2_ulps_of_libm) {
  check(
      "tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); },
      {2, 0, 0, 0});
}

BOOST_AUTO_TEST_CASE(gelu_tanh_is_within_2_ulps_of_libm_at_max_of_its_value_and_1) {
  check("gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); },
        gelu_tanh_exact, {2, 1, 0, 0});
}

BOOST_AUTO_TEST_CASE(gelu_is_within_2_ulps_of_libm_at_max_of_its_value_and_1) {
  check(
      "gelu", [](const Tensor& x) { return gelu(x); },
      [](double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }, {2, 1, 0, 0});
}
