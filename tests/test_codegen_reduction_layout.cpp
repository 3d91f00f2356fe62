// The row reductions' contiguous layouts (row base + column in 32-bit arithmetic, and 16-byte
// vectors where rows are aligned) against the generic one that addresses every column through
// the reduced dims' strides: each launch is run with the fast layouts allowed and with the
// generic one forced, on the same data, and both are compared with the CPU reference. The data
// covers what decides the layout: odd row lengths, rows that are not a multiple of the vector
// width, bases that break alignment, non-contiguous rows, and rows past the 32-bit limit
// (simulated by lowering the limit).
#include <boost/test/unit_test.hpp>

#include <functional>
#include <optional>

#include "autograd/ops.h"
#include "jit/codegen/reduction.h"
#include "support/device_compare.h"

using namespace kiln;
using test::relative_error;
namespace codegen = kiln::jit::codegen;
using Layout = codegen::ReductionLayout;

namespace {

// Against an f64 reference: a sum of thousands of f32 values is off by more than 1e-5.
double tolerance(DType t) {
  return t == DType::f32 ? 1e-4 : 1.6e-2;
}

using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;

// Runs `fn` eagerly on CUDA with the layouts up to `most`; returns the result and the layout the
// reduction launch took.
std::pair<Tensor, Layout> on_cuda(const Fn& fn, const Tensor& x, const Tensor& w, Layout most) {
  Layout was = codegen::set_reduction_layout_limit(most);
  Tensor y = fn(x, w).to(Device::cpu());
  codegen::set_reduction_layout_limit(was);
  return {y, codegen::last_reduction_layout()};
}

// The fast path (expected to take `want`) and the forced generic path on the same CUDA data,
// each against the CPU reference.
void check(const std::string& label, const Fn& fn, const Tensor& x, const Tensor& w,
           std::optional<Layout> want) {
  BOOST_TEST_CONTEXT(label << " " << dtype_name(x.dtype()) << " " << x.size(0) << " x "
                           << x.size(1)) {
    Tensor want_y =
        fn(x.to(Device::cpu()).to(DType::f32), w.to(Device::cpu()).to(DType::f32)).to(x.dtype());
    auto [fast, layout] = on_cuda(fn, x, w, Layout::vector);
    if (want) BOOST_TEST((layout == *want), "layout " << static_cast<int>(layout));
    auto [generic, generic_layout] = on_cuda(fn, x, w, Layout::generic);
    BOOST_TEST((generic_layout == Layout::generic));
    BOOST_TEST(relative_error(fast.to(DType::f64), want_y) <= tolerance(x.dtype()));
    BOOST_TEST(relative_error(generic.to(DType::f64), want_y) <= tolerance(x.dtype()));
    BOOST_TEST(relative_error(fast, generic) <= tolerance(x.dtype()));
  }
}

// Eager layer_norm and rms_norm read a strided or misaligned input through a contiguous copy:
// their kernels see aligned rows whatever the input.
bool copies_its_input(const std::string& name) {
  return name == "layer_norm" || name == "rms_norm";
}

const std::vector<std::pair<const char*, Fn>>& blocks() {
  static const std::vector<std::pair<const char*, Fn>> all = {
      {"layer_norm", [](const Tensor& x,
                        const Tensor& w) { return layer_norm(x, {x.size(1)}, w, Tensor(), 1e-5); }},
      {"softmax", [](const Tensor& x, const Tensor& w) { return softmax(x, 1) * w; }},
      {"log_softmax", [](const Tensor& x, const Tensor&) { return log_softmax(x, 1); }},
      {"rms_norm",
       [](const Tensor& x, const Tensor& w) { return rms_norm(x, {x.size(1)}, w, 1e-6); }},
      {"row sum", [](const Tensor& x, const Tensor&) { return sum(x, {1}); }},
      {"full sum", [](const Tensor& x, const Tensor&) { return sum(x); }},
  };
  return all;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_reduction_layout)

BOOST_AUTO_TEST_CASE(aligned_rows_take_vectors_and_match_the_generic_path) {
  for (DType t : {DType::f32, DType::bf16})
    for (std::int64_t cols : {64, 512, 1024}) {
      Tensor x = randn({6, cols}).to(t).to(Device::cuda());
      Tensor w = randn({cols}).to(t).to(Device::cuda());
      for (const auto& [name, fn] : blocks()) check(name, fn, x, w, Layout::vector);
    }
}

BOOST_AUTO_TEST_CASE(odd_and_ragged_rows_take_the_flat_path) {
  // 37 columns: odd; 1030: not a multiple of any vector width (4 f32 or 8 bf16 columns).
  for (DType t : {DType::f32, DType::bf16})
    for (std::int64_t cols : {37, 1030}) {
      Tensor x = randn({5, cols}).to(t).to(Device::cuda());
      Tensor w = randn({cols}).to(t).to(Device::cuda());
      for (const auto& [name, fn] : blocks()) check(name, fn, x, w, Layout::flat);
    }
}

BOOST_AUTO_TEST_CASE(a_base_that_breaks_alignment_takes_the_flat_path) {
  // Rows of 512 starting one element into their storage, and rows read from a wider tensor
  // (a row stride of 513): contiguous along the row, never aligned for 16 bytes.
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor flat = randn({4 * 512 + 1}).to(t).to(Device::cuda());
    Tensor shifted = flat.slice(0, 1, 4 * 512 + 1).view({4, 512});
    Tensor wide = randn({4, 513}).to(t).to(Device::cuda()).slice(1, 1, 513);
    Tensor w = randn({512}).to(t).to(Device::cuda());
    for (const auto& [name, fn] : blocks()) {
      std::optional<Layout> any;
      check(name, fn, shifted, w, copies_its_input(name) ? any : Layout::flat);
      // A full sum over the wide rows steps over the gap between them: generic.
      check(name, fn, wide, w,
            copies_its_input(name)            ? any
            : std::string(name) == "full sum" ? Layout::generic
                                              : Layout::flat);
    }
  }
}

BOOST_AUTO_TEST_CASE(rows_that_are_not_contiguous_take_the_generic_path) {
  Tensor x = randn({64, 6}).to(Device::cuda()).transpose(0, 1);  // a row steps 6 elements
  Tensor w = randn({64}).to(Device::cuda());
  for (const auto& [name, fn] : blocks())
    check(name, fn, x, w, copies_its_input(name) ? std::optional<Layout>() : Layout::generic);
}

BOOST_AUTO_TEST_CASE(rows_past_the_32_bit_limit_take_the_generic_path) {
  // The limit lowered to 100 columns stands for 2^31: longer rows keep 64-bit column arithmetic.
  std::int64_t was = codegen::set_reduction_index_limit(100);
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = randn({3, 256}).to(t).to(Device::cuda());
    Tensor w = randn({256}).to(t).to(Device::cuda());
    for (const auto& [name, fn] : blocks()) check(name, fn, x, w, Layout::generic);
    Tensor s = randn({3, 96}).to(t).to(Device::cuda());
    Tensor v = randn({96}).to(t).to(Device::cuda());
    // The full sum's row is all 288 elements: past the limit too.
    for (const auto& [name, fn] : blocks())
      check(name, fn, s, v, std::string(name) == "full sum" ? Layout::generic : Layout::vector);
  }
  codegen::set_reduction_index_limit(was);
}

BOOST_AUTO_TEST_CASE(a_split_row_starts_its_chunks_at_whole_vectors) {
  // One long row is split over blocks: each chunk's vectors stay inside it.
  Tensor x = randn({1, 4 * 8192 + 12}).to(Device::cuda());
  check(
      "split row sum", [](const Tensor& a, const Tensor&) { return sum(a, {1}); }, x, x,
      Layout::vector);
}

BOOST_AUTO_TEST_SUITE_END()
