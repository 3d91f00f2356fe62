// Determinism across schedules: every reduction, normalization, scan, scatter and GEMM kiln
// generates gives the same bits whichever order the virtual GPU runs its blocks and threads in
// (in_order, random:1, random:2), at sizes that pick each schedule (a warp or a block per row,
// rows side by side, a row split over a size-dependent number of blocks). The check is shown to
// catch a kernel whose result depends on the order: a float atomicAdd into one sum.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/compile.h"
#include "runtime/cuda/backend.h"
#include "support/scoped_env.h"
#include "support/skip_if.h"

using namespace kiln;

namespace {

const char* const kSchedules[] = {"in_order", "random:1", "random:2"};

std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor h = t.to(Device::cpu()).contiguous();
  std::vector<unsigned char> b(static_cast<std::size_t>(h.numel()) * itemsize(h.dtype()));
  if (!b.empty()) std::memcpy(b.data(), h.raw_data(), b.size());
  return b;
}

// The schedules under which `run` gives other bits than under in_order (empty: deterministic).
std::vector<std::string> schedules_that_differ(const std::function<std::vector<Tensor>()>& run) {
  std::vector<std::vector<std::vector<unsigned char>>> results;
  for (const char* schedule : kSchedules) {
    test::ScopedEnv env("KILN_VGPU_SCHEDULE", schedule);
    std::vector<std::vector<unsigned char>> outputs;
    for (const Tensor& t : run()) outputs.push_back(bytes_of(t));
    results.push_back(std::move(outputs));
  }
  std::vector<std::string> differ;
  for (std::size_t i = 1; i < results.size(); ++i)
    if (results[i] != results[0]) differ.emplace_back(kSchedules[i]);
  return differ;
}

// Values of mixed magnitudes, so that any change in the order of a float sum changes its bits.
Tensor mixed(const Shape& shape, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn(shape, DType::f32, &gen) * exp(randn(shape, DType::f32, &gen) * 3.0);
  return x.to(dtype).to(Device::cuda());
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += (s.empty() ? "" : ", ") + e;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(determinism)

// A real GPU takes no schedule from KILN_VGPU_SCHEDULE: its atomics' order is its own.
BOOST_AUTO_TEST_CASE(the_check_catches_a_sum_whose_order_depends_on_the_schedule,
                     *test::skip_if([] {
                       std::string kind(cuda::backend().kind());
                       return kind == "virtual" ? std::string()
                                                : "schedules are the virtual GPU's, not " + kind;
                     })) {
  // Hand-written on purpose (kiln never generates float atomics): every thread adds its element
  // into one float, in whatever order the blocks and threads run.
  const std::string source = R"(
extern "C" __global__ void k_order_dependent_sum(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);
}
)";
  jit::codegen::KernelHandle kernel("k_order_dependent_sum", source);
  Tensor x = mixed({4096}, DType::f32, 3);
  auto run = [&] {
    Tensor out = zeros({1}).to(Device::cuda());
    auto xp = reinterpret_cast<cuda::DevicePtr>(x.raw_data());
    auto op = reinterpret_cast<cuda::DevicePtr>(out.raw_data());
    int n = 4096;
    void* params[] = {&xp, &op, &n};
    kernel.launch({16, 1, 1}, {256, 1, 1}, params, 0, 0);
    return std::vector<Tensor>{out};
  };
  // The same schedule twice gives the same bits (what a run-it-twice check sees) ...
  BOOST_TEST(bytes_of(run()[0]) == bytes_of(run()[0]));
  // ... another schedule does not.
  auto differ = schedules_that_differ(run);
  BOOST_TEST(differ.size() == 2u, "differ under: " << joined(differ));
}

BOOST_AUTO_TEST_CASE(compiled_reductions_give_the_same_bits_under_every_schedule) {
  struct Case {
    const char* what;
    Shape shape;
    std::function<std::vector<Tensor>(const Tensor&)> fn;
  };
  auto sum_rows = [](const Tensor& a) { return std::vector<Tensor>{sum(a * 0.5, {1})}; };
  auto everything = [](const Tensor& a) {
    return std::vector<Tensor>{sum(a, {0, 1}), amax(a, {0, 1}), mean(a * a, {0, 1})};
  };
  std::vector<Case> cases = {
      {"a warp per row", {64, 200}, sum_rows},
      {"a block per row", {6, 3000}, sum_rows},
      {"rows side by side (a sum over the batch)",
       {300, 40},
       [](const Tensor& a) {
         return std::vector<Tensor>{sum(a, {0}), mean(a, {0})};
       }},
      {"normalizations",
       {12, 700},
       [](const Tensor& a) {
         return std::vector<Tensor>{softmax(a, 1), log_softmax(a, -1), layer_norm(a, {700})};
       }},
      {"rows in registers",
       {16, 96},
       [](const Tensor& a) {
         return std::vector<Tensor>{softmax(a * 2.0, 1), rms_norm(a, {96})};
       }},
  };
  // A full reduction splits over a number of blocks that depends on the size.
  for (std::int64_t n : {1 << 18, 3 << 15, 20000, 777}) {
    cases.push_back({"a split full reduction", {1, n}, everything});
    cases.push_back({"a split full reduction, 2 rows", {2, n / 2}, everything});
  }
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::f16}) {
      BOOST_TEST_CONTEXT(c.what << " " << shape_str(c.shape) << " " << dtype_name(dtype)) {
        Tensor x = mixed(c.shape, dtype, 7);
        auto f = jit::compile(c.fn);
        auto differ = schedules_that_differ([&] { return f(x); });
        BOOST_TEST(differ.empty(), "differ under: " << joined(differ));
      }
    }
}

BOOST_AUTO_TEST_CASE(eager_reductions_scans_scatters_and_gemms_give_the_same_bits) {
  Tensor x = mixed({12, 700}, DType::f32, 11);
  Tensor col = mixed({40000}, DType::f32, 12);
  Tensor y = mixed({24, 16}, DType::f64, 13);
  Tensor w = mixed({16, 20}, DType::f64, 14);
  // Many updates land on each of a few rows: their order must be fixed.
  Generator gen(15);
  Tensor index = randint(0, 4, {12}, DType::i64, &gen).to(Device::cuda());
  Tensor target = zeros({4, 700}).to(Device::cuda());
  auto run = [&] {
    return std::vector<Tensor>{sum(x, {1}),
                               sum(x, {0}),
                               sum(col, {0}),
                               amax(x, {0, 1}),
                               max(x, 1).values,
                               cumsum(x, 1),
                               softmax(x, 1),
                               index_add(target, 0, index, x),
                               scatter_add(target, 0, expand(unsqueeze(index, 1), {12, 700}), x),
                               matmul(y, w)};
  };
  auto differ = schedules_that_differ(run);
  BOOST_TEST(differ.empty(), "differ under: " << joined(differ));
}

BOOST_AUTO_TEST_SUITE_END()
