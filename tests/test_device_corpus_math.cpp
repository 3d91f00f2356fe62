// Device corpus, math family: CUDA math functions in f32 and f64 against libm. One kernel per
// function, generated from a table of (expression, reference, input range, bounds).
#include <algorithm>

#include "test_device_corpus.h"

namespace corpus {
namespace {

struct MathCase {
  const char* name;
  const char* expr;  // CUDA expression in x (and y for binary functions)
  double (*ref)(double, double);
  double lo, hi;            // input range of x
  double ylo = 0, yhi = 0;  // input range of y (binary functions)
  std::int64_t ulp = 2;     // default options: CUDA's documented maximum ulp error (+1 for libm)
  double fast_abs = 0, fast_rel = 0;  // --use_fast_math: |err| <= abs + rel * |want|
  bool binary = false;
};

// Reference in double precision, rounded to the kernel's type: for f32 within 0.5 ulp.
const MathCase kF32[] = {
    {"expf", "expf(x)", [](double x, double) { return std::exp(x); }, -80, 80, 0, 0, 2, 0, 2e-5},
    {"logf", "logf(x)", [](double x, double) { return std::log(x); }, 1e-3, 1e4, 0, 0, 1, 1e-6,
     2e-6},
    {"sinf", "sinf(x)", [](double x, double) { return std::sin(x); }, -3.14, 3.14, 0, 0, 2, 2e-6,
     0},
    {"cosf", "cosf(x)", [](double x, double) { return std::cos(x); }, -3.14, 3.14, 0, 0, 2, 2e-6,
     0},
    {"tanhf", "tanhf(x)", [](double x, double) { return std::tanh(x); }, -6, 6, 0, 0, 2, 1e-6,
     1e-3},
    {"erff", "erff(x)", [](double x, double) { return std::erf(x); }, -3, 3, 0, 0, 2, 1e-6, 1e-5},
    {"powf", "powf(x, y)", [](double x, double y) { return std::pow(x, y); }, 0.1, 10, -3, 3, 4,
     1e-6, 2e-5, true},
    {"sqrtf", "sqrtf(x)", [](double x, double) { return std::sqrt(x); }, 0, 1e6, 0, 0, 0, 0, 1e-6},
    {"rsqrtf", "rsqrtf(x)", [](double x, double) { return 1 / std::sqrt(x); }, 1e-3, 1e6, 0, 0, 2,
     0, 1e-6},
    {"divf", "x / y", [](double x, double y) { return x / y; }, -1e3, 1e3, 0.5, 100, 0, 0, 1e-6,
     true},
    {"exp2f_log2f", "exp2f(x) + log2f(fabsf(x) + 1.0f)",
     [](double x, double) { return std::exp2(x) + std::log2(std::fabs(x) + 1); }, -20, 20, 0, 0, 3,
     1e-6, 4e-6},
    {"atan2f", "atan2f(x, y)", [](double x, double y) { return std::atan2(x, y); }, -5, 5, -5, 5, 4,
     1e-6, 1e-5, true},
    {"expm1f_log1pf", "expm1f(x) * log1pf(fabsf(x))",
     [](double x, double) { return std::expm1(x) * std::log1p(std::fabs(x)); }, -5, 5, 0, 0, 3,
     1e-6, 1e-5},
    {"rounding_f32", "floorf(x) + 2.0f * ceilf(x) + 4.0f * roundf(x) + 8.0f * truncf(x) + rintf(x)",
     [](double x, double) {
       return std::floor(x) + 2 * std::ceil(x) + 4 * std::round(x) + 8 * std::trunc(x) +
              std::nearbyint(x);
     },
     -1e3, 1e3, 0, 0, 0, 0, 0},
    {"fminmax_f32", "fmaxf(x, y) - fminf(x, y) + fabsf(x) + copysignf(1.0f, y)",
     [](double x, double y) {
       return std::fmax(x, y) - std::fmin(x, y) + std::fabs(x) + std::copysign(1.0, y);
     },
     -10, 10, -10, 10, 2, 1e-6, 1e-6, true},
};

const MathCase kF64[] = {
    {"exp_f64", "exp(x)", [](double x, double) { return std::exp(x); }, -700, 700, 0, 0, 2},
    {"log_f64", "log(x)", [](double x, double) { return std::log(x); }, 1e-300, 1e300, 0, 0, 2},
    {"sin_cos_f64", "sin(x) * cos(x)", [](double x, double) { return std::sin(x) * std::cos(x); },
     -100, 100, 0, 0, 8},
    {"tanh_erf_f64", "tanh(x) + erf(x)",
     [](double x, double) { return std::tanh(x) + std::erf(x); }, -1, 1, 0, 0, 5},
    {"pow_f64", "pow(x, y)", [](double x, double y) { return std::pow(x, y); }, 0.01, 100, -20, 20,
     3, 0, 0, true},
    {"sqrt_div_f64", "sqrt(x) / (x + 1.0)", [](double x, double) { return std::sqrt(x) / (x + 1); },
     0, 1e10, 0, 0, 1},
};

// f64 "ulp" bounds compare with the libm double result, which is itself within ~1 ulp.
template <class F>
KernelCase make_case(const MathCase& mc) {
  const char* type = sizeof(F) == 4 ? "float" : "double";
  std::string name = std::string("math_") + mc.name;
  std::string src = fmt::format(R"(
extern "C" __global__ void {0}(const {1}* xs, const {1}* ys, {1}* out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  {1} x = xs[i], y = ys[i];
  (void)y;
  out[i] = {2};
}})",
                                name, type, mc.expr);
  return KernelCase{
      name, src, [mc](Runner& r) {
        const int n = 2048;
        std::hash<std::string> h;
        auto x = uniform<F>(n, mc.lo, mc.hi, static_cast<unsigned>(h(mc.name)));
        auto y = uniform<F>(n, mc.ylo, mc.yhi, static_cast<unsigned>(h(mc.name) + 1));
        auto dx = r.input(x), dy = r.input(y);
        auto out = r.output<F>(n);
        r.launch({(n + 255) / 256}, {256}, dx, dy, out, n);
        std::vector<F> want(n);
        for (int i = 0; i < n; ++i)
          want[i] = static_cast<F>(mc.ref(static_cast<double>(x[i]), static_cast<double>(y[i])));
        auto got = r.read(out);
        // --use_fast_math changes only f32 code (approximate div/sqrt/transcendentals, FTZ).
        if (r.fast_math() && sizeof(F) == 4 && (mc.fast_abs > 0 || mc.fast_rel > 0))
          r.expect_close(got, want, mc.fast_abs, mc.fast_rel, mc.expr, &x);
        else
          r.expect_ulp(got, want, mc.ulp, mc.expr, &x);
      }};
}

// Special inputs under default options: IEEE results for 0, +-inf and NaN.
KernelCase special_values() {
  return {"special_values_f32", R"(
extern "C" __global__ void special_values_f32(const float* xs, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = xs[i];
  out[4 * i + 0] = expf(x);
  out[4 * i + 1] = logf(x);
  out[4 * i + 2] = sqrtf(x);
  out[4 * i + 3] = tanhf(x);
})",
          [](Runner& r) {
            std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                                    1.0f, -1.0f, 100.0f,   -50.0f,    1e-30f};
            const int n = static_cast<int>(x.size());
            auto dx = r.input(x);
            auto out = r.output<float>(4 * n);
            r.launch({1}, {32}, dx, out, n);
            std::vector<float> want(4 * n);
            for (int i = 0; i < n; ++i) {
              want[4 * i + 0] = static_cast<float>(std::exp(double{x[i]}));
              want[4 * i + 1] = static_cast<float>(std::log(double{x[i]}));
              want[4 * i + 2] = std::sqrt(x[i]);
              want[4 * i + 3] = static_cast<float>(std::tanh(double{x[i]}));
            }
            auto got = r.read(out);
            if (r.fast_math()) {
              // FTZ makes log(1e-30) differ in ulps yet stay finite; compare loosely.
              r.expect_close(got, want, 1e-5, 1e-5, "special values (fast math)");
            } else {
              r.expect_ulp(got, want, 2, "special values");
            }
          }};
}

// f32 trig beyond |x| = 105615 takes CUDA's slow (Payne-Hanek) range reduction path.
KernelCase huge_trig() {
  return {"math_sincosf_huge", R"(
extern "C" __global__ void math_sincosf_huge(const float* xs, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s, c;
  sincosf(xs[i], &s, &c);
  out[2 * i] = s;
  out[2 * i + 1] = c;
})",
          [](Runner& r) {
            const int n = 1024;
            auto x = uniform<float>(n, -1e7, 1e7, 77);
            auto dx = r.input(x);
            auto out = r.output<float>(2 * n);
            r.launch({n / 128}, {128}, dx, out, n);
            std::vector<float> want(2 * n);
            for (int i = 0; i < n; ++i) {
              want[2 * i] = static_cast<float>(std::sin(double{x[i]}));
              want[2 * i + 1] = static_cast<float>(std::cos(double{x[i]}));
            }
            auto got = r.read(out);
            if (r.fast_math()) {
              // __sinf/__cosf have no accuracy bound this far from [-pi, pi], but both take the
              // same reduced argument: each pair is a point of the unit circle.
              int off = 0;
              for (int i = 0; i < n; ++i) {
                double s = got[2 * i], c = got[2 * i + 1];
                if (!(std::fabs(s * s + c * c - 1) <= 1e-5)) ++off;
              }
              BOOST_TEST(off == 0, off << " of " << n << " sin/cos pairs are off the unit circle");
            } else {
              r.expect_ulp(got, want, 2, "sincosf");
            }
          }};
}

std::vector<KernelCase> cases() {
  std::vector<KernelCase> v;
  for (const auto& mc : kF32) v.push_back(make_case<float>(mc));
  for (const auto& mc : kF64) v.push_back(make_case<double>(mc));
  v.push_back(special_values());
  v.push_back(huge_trig());
  return v;
}

Register reg("corpus_math", cases);

}  // namespace
}  // namespace corpus
