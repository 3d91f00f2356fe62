// The table-driven harness of the device corpus: a KernelCase is CUDA source plus a body that
// makes inputs, launches, and checks the result against a plain C++ reference. Every case is
// compiled by NVRTC twice (default options, --use_fast_math) and run on each available backend
// (always the virtual GPU; the driver too when a GPU is present).
#pragma once

#include <array>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/nvrtc/nvrtc.h"
#include "runtime/cuda/selection.h"

namespace corpus {

using kiln::cuda::Dim3;
class Runner;

struct KernelCase {
  std::string name;    // the suite's test name and, unless the body says otherwise, the kernel
  std::string source;  // CUDA C++; kernels are extern "C"
  std::function<void(Runner&)> body;
  std::vector<std::string> flags = {};  // extra NVRTC options for both modes
};

template <class T>
struct Buf {
  kiln::cuda::DevicePtr ptr = 0;
  std::size_t n = 0;
};

// ---- host references for the narrow float types (round to nearest even) ----
inline float half_to_float(std::uint16_t h) {
  std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
inline std::uint16_t float_to_half(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {          // subnormal: multiples of 2^-24
    return sign | static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  auto mant = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 1024..2048
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  return sign | static_cast<std::uint16_t>(((e + 14) << 10) | (mant & 0x3ff));
}
inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<std::uint16_t>(x >> 16);
}

// Distance in units in the last place; 0 for two NaNs, huge for NaN vs number.
template <class F>
std::int64_t ulp_diff(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : INT64_MAX;
  using I = std::conditional_t<sizeof(F) == 4, std::int32_t, std::int64_t>;
  auto ordered = [](F v) {
    I i = std::bit_cast<I>(v);
    return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i
                 : static_cast<std::int64_t>(i);
  };
  std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Deterministic inputs: the same seed gives the same values on every run.
template <class T>
std::vector<T> uniform(std::size_t n, double lo, double hi, unsigned seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<long long> d(static_cast<long long>(lo),
                                               static_cast<long long>(hi));
    for (auto& x : v) x = static_cast<T>(d(rng));
  } else {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = static_cast<T>(d(rng));
  }
  return v;
}

// Everything a case body needs: the compiled kernels of its source on one backend, device
// buffers freed at the end, launches, and comparisons that report the first mismatches.
class Runner {
 public:
  Runner(kiln::cuda::Backend& be, const KernelCase& kc, bool fast_math)
      : be_(be), case_(kc), fast_math_(fast_math) {
    kiln::nvrtc::ProgramOptions opts;
    opts.flags = kc.flags;
    if (fast_math) opts.flags.push_back("--use_fast_math");
    auto target = kiln::nvrtc::Target::for_device(be.properties(0));
    module_ = kiln::nvrtc::compile_program(kc.source, kc.name + ".cu", target, opts);
    handle_ = be.load_module(module_.image());
  }
  ~Runner() {
    for (auto p : owned_) be_.free(p);
    be_.unload_module(handle_);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  bool fast_math() const { return fast_math_; }
  kiln::cuda::Backend& backend() { return be_; }
  const kiln::nvrtc::CompiledModule& module() const { return module_; }

  template <class T>
  Buf<T> input(const std::vector<T>& host) {
    Buf<T> b{alloc(host.size() * sizeof(T)), host.size()};
    if (!host.empty()) be_.copy_to_device(b.ptr, host.data(), host.size() * sizeof(T));
    return b;
  }
  template <class T>
  Buf<T> output(std::size_t n, T fill = T{}) {
    return input(std::vector<T>(n, fill));
  }
  template <class T>
  std::vector<T> read(Buf<T> b) {
    std::vector<T> host(b.n);
    be_.synchronize();
    if (b.n) be_.copy_to_host(host.data(), b.ptr, b.n * sizeof(T));
    return host;
  }

  // launch(grid, block, args...) runs the case's kernel; launch_named picks another kernel.
  template <class... A>
  void launch(Dim3 grid, Dim3 block, A... args) {
    launch_named(case_.name, grid, block, 0, args...);
  }
  template <class... A>
  void launch_shared(Dim3 grid, Dim3 block, unsigned dynamic_shared, A... args) {
    launch_named(case_.name, grid, block, dynamic_shared, args...);
  }
  template <class... A>
  void launch_named(const std::string& kernel, Dim3 grid, Dim3 block, unsigned dynamic_shared,
                    A... args) {
    std::deque<Slot> storage;  // stable addresses for the parameter pointers
    std::vector<void*> params;
    (push(storage, params, args), ...);
    auto fn = be_.get_function(handle_, kernel);
    // Past 48 KiB a kernel opts in first, as on the driver (cuFuncSetAttribute).
    if (dynamic_shared > 48 * 1024) be_.set_max_dynamic_shared(fn, dynamic_shared);
    be_.launch(fn, grid, block, dynamic_shared, nullptr, params.data());
    be_.synchronize();
  }

  // Exact equality, element by element.
  template <class T>
  void expect_eq(const std::vector<T>& got, const std::vector<T>& want, const char* what = "") {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!(got[i] == want[i]) && bad++ == 0) first = i;
    BOOST_TEST(bad == 0u, what << ": " << bad << " of " << got.size()
                               << " elements differ; first at [" << first << "]: got "
                               << +got[first] << ", want " << +want[first]);
  }
  // |got - want| <= max_ulp ulps (floats and doubles).
  template <class F>
  void expect_ulp(const std::vector<F>& got, const std::vector<F>& want, std::int64_t max_ulp,
                  const char* what = "", const std::vector<F>* inputs = nullptr) {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    std::size_t bad = 0, worst_i = 0;
    std::int64_t worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      auto d = ulp_diff(got[i], want[i]);
      if (d > max_ulp) ++bad;
      if (d > worst) worst = d, worst_i = i;
    }
    BOOST_TEST(bad == 0u, std::setprecision(10)
                              << what << ": " << bad << " of " << got.size() << " elements beyond "
                              << max_ulp << " ulp; worst " << worst << " ulp at [" << worst_i << "]"
                              << input_note(inputs, worst_i) << ": got " << got[worst_i]
                              << ", want " << want[worst_i]);
  }
  // |got - want| <= abs_tol + rel_tol * |want|; infinities and NaNs must match exactly.
  template <class F>
  void expect_close(const std::vector<F>& got, const std::vector<F>& want, double abs_tol,
                    double rel_tol, const char* what = "", const std::vector<F>* inputs = nullptr) {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      double g = got[i], w = want[i];
      bool ok = std::isfinite(w) ? std::fabs(g - w) <= abs_tol + rel_tol * std::fabs(w)
                                 : (std::isnan(w) ? std::isnan(g) : g == w);
      if (!ok && bad++ == 0) first = i;
    }
    BOOST_TEST(bad == 0u, std::setprecision(10)
                              << what << ": " << bad << " of " << got.size()
                              << " elements outside abs " << abs_tol << " + rel " << rel_tol
                              << "; first at [" << first << "]" << input_note(inputs, first)
                              << ": got " << got[first] << ", want " << want[first]);
  }

 private:
  template <class F>
  static std::string input_note(const std::vector<F>* inputs, std::size_t i) {
    if (!inputs || i >= inputs->size()) return {};
    std::ostringstream os;
    os << std::setprecision(10) << " (input " << (*inputs)[i] << ")";
    return os.str();
  }
  kiln::cuda::DevicePtr alloc(std::size_t bytes) {
    auto p = be_.alloc(bytes ? bytes : 1);
    owned_.push_back(p);
    return p;
  }
  // Kernel parameters by value: device pointers for buffers, any trivially copyable value
  // (scalars, structs) for the rest, each in its own 16-byte-aligned slot.
  using Slot = std::array<std::uint64_t, 32>;
  template <class T>
  static void push(std::deque<Slot>& storage, std::vector<void*>& params, const T& v) {
    storage.emplace_back();
    if constexpr (requires { v.ptr; }) {
      storage.back()[0] = v.ptr;
    } else {
      static_assert(sizeof(T) <= sizeof(Slot) && std::is_trivially_copyable_v<T>);
      std::memcpy(storage.back().data(), &v, sizeof(T));
    }
    params.push_back(storage.back().data());
  }

  kiln::cuda::Backend& be_;
  const KernelCase& case_;
  bool fast_math_;
  kiln::nvrtc::CompiledModule module_;
  kiln::cuda::Module handle_ = nullptr;
  std::vector<kiln::cuda::DevicePtr> owned_;
};

// The backends every case runs on: the virtual GPU, plus the driver when it works here.
inline std::vector<kiln::cuda::Backend*> corpus_backends() {
  static const std::vector<kiln::cuda::Backend*> list = [] {
    std::vector<kiln::cuda::Backend*> v{&kiln::cuda::backend("virtual")};
    try {
      v.push_back(&kiln::cuda::backend("driver"));
    } catch (const kiln::Error&) {
      // No GPU here: the virtual GPU alone.
    }
    return v;
  }();
  return list;
}

inline void run_case(const KernelCase& kc) {
  for (auto* be : corpus_backends()) {
    for (bool fast : {false, true}) {
      BOOST_TEST_CONTEXT(kc.name << " on " << be->kind()
                                 << (fast ? ", --use_fast_math" : ", default options")) {
        try {
          Runner runner(*be, kc, fast);
          kc.body(runner);
        } catch (const std::exception& e) {
          BOOST_ERROR("exception: " << e.what());
        }
      }
    }
  }
}

// Registers one Boost.Test case per KernelCase under suite `suite`, at static-initialization
// time (as BOOST_AUTO_TEST_CASE does), inside the file's suite (tests/support/file_suite.h).
struct Register {
  Register(const char* suite, std::vector<KernelCase> (*make)()) {
    static std::deque<std::vector<KernelCase>> keep;  // cases outlive registration
    auto& cases = keep.emplace_back(make());
    auto* ts = BOOST_TEST_SUITE(suite);
    for (const auto& kc : cases) {
      ts->add(
          boost::unit_test::make_test_case([&kc] { run_case(kc); }, kc.name, __FILE__, __LINE__));
    }
    boost::unit_test::framework::current_auto_test_suite().add(ts);
  }
};

}  // namespace corpus
