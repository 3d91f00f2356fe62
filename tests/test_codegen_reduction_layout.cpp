// The row reductions' contiguous layouts (row base + column in 32-bit arithmetic, and 16-byte
// vectors where rows are aligned) against the generic one that addresses every column through
// the reduced dims' strides: each launch is run with the fast layouts allowed and with the
// generic one forced, on the same data, and both are compared with the CPU reference. The data
// covers what decides the layout: odd row lengths, rows that are not a multiple of the vector
// width, bases that break alignment, non-contiguous rows, and rows past the 32-bit limit
// (simulated by lowering the limit).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "autograd/ops.h"
#include "jit/codegen/reduction.h"
#include "jit/compile.h"
#include "runtime/error.h"
#include "support/device_compare.h"
#include "support/reference.h"
#include "support/scope_exit.h"

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
  test::ScopeExit restore([was = codegen::set_reduction_layout_limit(most)] {
    codegen::set_reduction_layout_limit(was);
  });
  Tensor y = fn(x, w).to(Device::cpu());
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
  // f16 too: its intermediates and outputs are rounded in pairs as bf16's are.
  for (DType t : {DType::f32, DType::bf16, DType::f16})
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
  // The limit lowered to 100 stands for 2^31: longer rows keep 64-bit column arithmetic, and so
  // do more rows or rows further apart (their bases).
  test::ScopeExit restore(
      [was = codegen::set_reduction_index_limit(100)] { codegen::set_reduction_index_limit(was); });
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = randn({3, 256}).to(t).to(Device::cuda());
    Tensor w = randn({256}).to(t).to(Device::cuda());
    for (const auto& [name, fn] : blocks()) check(name, fn, x, w, Layout::generic);
    Tensor s = randn({3, 96}).to(t).to(Device::cuda());
    Tensor v = randn({96}).to(t).to(Device::cuda());
    // The full sum's row is all 288 elements: past the limit too.
    for (const auto& [name, fn] : blocks())
      check(name, fn, s, v, std::string(name) == "full sum" ? Layout::generic : Layout::vector);
    // More rows than the limit: a row base needs 64-bit arithmetic.
    Tensor many = randn({120, 16}).to(t).to(Device::cuda());
    Tensor u = randn({16}).to(t).to(Device::cuda());
    for (const auto& [name, fn] : blocks()) check(name, fn, many, u, Layout::generic);
    // Rows a stride past the limit apart (a column slice of wider rows): the same.
    Tensor wide = randn({3, 120}).to(t).to(Device::cuda()).slice(1, 0, 16);
    for (const auto& [name, fn] : blocks())
      check(name, fn, wide, u,
            copies_its_input(name) || std::string(name) == "full sum" ? std::optional<Layout>()
                                                                      : Layout::generic);
  }
}

BOOST_AUTO_TEST_CASE(a_split_row_starts_its_chunks_at_whole_vectors) {
  // One long row is split over blocks: each chunk's vectors stay inside it.
  Tensor x = randn({1, 4 * 16384 + 12}).to(Device::cuda());
  check(
      "split row sum", [](const Tensor& a, const Tensor&) { return sum(a, {1}); }, x, x,
      Layout::vector);
}

BOOST_AUTO_TEST_CASE(column_sums_read_neighbouring_columns_as_vectors) {
  // The outer schedule's vector form (4 f32 or 8 bf16 columns a lane, one 16-byte access per
  // reduced index) against its scalar form on the same data: one and two reduced dims, an
  // epilogue, a split (few columns over many rows), and the scalar form where the columns are no
  // multiple of the width or the base breaks alignment.
  auto over_rows = [](const Tensor& a, const Tensor&) { return sum(a, {0}); };
  auto mean_rows = [](const Tensor& a, const Tensor&) { return mean(a, {0}) * 2.0; };
  auto max_rows = [](const Tensor& a, const Tensor&) { return amax(a, {0}); };
  auto over_batch = [](const Tensor& a, const Tensor&) { return sum(a, {0, 1}); };
  for (DType t : {DType::f32, DType::bf16}) {
    const std::int64_t width = t == DType::f32 ? 4 : 8;
    Tensor x = randn({300, 64}).to(t).to(Device::cuda());
    check("column sum", over_rows, x, x, Layout::vector);
    check("column mean", mean_rows, x, x, Layout::vector);
    check("column max", max_rows, x, x, Layout::vector);
    Tensor tall = randn({4096, 16}).to(t).to(Device::cuda());  // split over blocks
    check("split column sum", over_rows, tall, tall, Layout::vector);
    Tensor batch = randn({6, 10, 48}).to(t).to(Device::cuda());
    check("sum over batch", over_batch, batch, batch, Layout::vector);
    Tensor ragged = randn({50, 36}).to(t).to(Device::cuda());  // 36: 9 vectors of 4, not of 8
    check("ragged column sum", over_rows, ragged, ragged,
          36 % width == 0 ? Layout::vector : Layout::generic);
    Tensor odd = randn({50, 37}).to(t).to(Device::cuda());
    check("odd column sum", over_rows, odd, odd, Layout::generic);
    Tensor flat = randn({40 * 64 + 1}).to(t).to(Device::cuda());
    Tensor shifted = flat.slice(0, 1, 40 * 64 + 1).view({40, 64});
    check("misaligned column sum", over_rows, shifted, shifted, Layout::generic);
  }
}

BOOST_AUTO_TEST_CASE(a_nan_anywhere_in_a_row_gives_nan_as_pytorch) {
  // max and min fold with max.NaN / min.NaN: a NaN at the first, a middle or the last column
  // makes its row's max, min, softmax and log_softmax NaN (PyTorch's amax), on every layout; a
  // -infinity is no NaN. Columns: 37 (flat), 1024 (vector), 3000 (a block per row).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::f32, DType::bf16})
    for (std::int64_t cols : {37, 1024, 3000}) {
      Tensor cpu = randn({6, cols});
      std::vector<float> v(static_cast<std::size_t>(6 * cols));
      std::copy_n(cpu.data<float>(), v.size(), v.begin());
      auto at = [&](std::int64_t r, std::int64_t c) -> float& {
        return v[static_cast<std::size_t>(r * cols + c)];
      };
      at(1, 0) = nan;
      at(3, cols - 1) = nan;
      at(4, cols / 2) = nan;
      at(5, 3) = -std::numeric_limits<float>::infinity();
      Tensor x = test::f32s(v, {6, cols}).to(t).to(Device::cuda());
      const std::vector<std::pair<const char*, Fn>> fns = {
          {"amax", [](const Tensor& a, const Tensor&) { return amax(a, {1}); }},
          {"amin", [](const Tensor& a, const Tensor&) { return amin(a, {1}); }},
          {"softmax", [](const Tensor& a, const Tensor&) { return softmax(a, 1); }},
          {"log_softmax", [](const Tensor& a, const Tensor&) { return log_softmax(a, 1); }},
      };
      for (const auto& [name, fn] : fns)
        for (Layout most : {Layout::vector, Layout::generic}) {
          BOOST_TEST_CONTEXT(name << " " << dtype_name(t) << " " << cols << " columns, layout "
                                  << static_cast<int>(most)) {
            Tensor y = on_cuda(fn, x, x, most).first.to(DType::f64).contiguous();
            const double* p = static_cast<const double*>(y.raw_data());
            const std::int64_t per_row = y.numel() / 6;
            for (std::int64_t r = 0; r < 6; ++r) {
              bool has_nan = r == 1 || r == 3 || r == 4;
              for (std::int64_t c = 0; c < per_row; ++c)
                BOOST_TEST(std::isnan(p[r * per_row + c]) == has_nan, "row " << r << " col " << c);
            }
            Tensor want = fn(x.to(Device::cpu()).to(DType::f64), x).to(DType::f64);
            BOOST_TEST(relative_error(y, want) <= tolerance(t));
          }
        }
    }
}

BOOST_AUTO_TEST_CASE(a_row_select_reads_its_one_column) {
  // cross_entropy picks one column of log_softmax per row: the first, the last, one in the
  // middle, and an ignored row, over the flat, vector and block-per-row layouts, each against the
  // forced generic layout and the f64 CPU reference; a target outside the row is an IndexError.
  for (DType t : {DType::f32, DType::bf16})
    for (std::int64_t cols : {37, 1024, 3000}) {
      Tensor x = randn({5, cols}).to(t);
      Tensor target = test::i64s({0, cols - 1, cols / 2, -100, 7}, {5});
      Tensor want = cross_entropy(x.to(DType::f64), target, -100, Reduction::none);
      Tensor want_mean = cross_entropy(x.to(DType::f64), target);
      for (Layout most : {Layout::vector, Layout::generic}) {
        BOOST_TEST_CONTEXT(dtype_name(t)
                           << " " << cols << " columns, layout " << static_cast<int>(most)) {
          test::ScopeExit restore([was = codegen::set_reduction_layout_limit(most)] {
            codegen::set_reduction_layout_limit(was);
          });
          Tensor xd = x.to(Device::cuda()), td = target.to(Device::cuda());
          auto per_row = jit::compile([](const Tensor& a, const Tensor& b) {
            return cross_entropy(a, b, -100, Reduction::none);
          });
          auto loss =
              jit::compile([](const Tensor& a, const Tensor& b) { return cross_entropy(a, b); });
          // bf16 logits give a bf16 loss: one rounding of the f32 result.
          const double tol = t == DType::f32 ? 1e-5 : tolerance(t);
          BOOST_TEST(relative_error(per_row(xd, td), want) <= tol);
          BOOST_TEST(relative_error(loss(xd, td), want_mean) <= tol);
          Tensor bad = test::i64s({0, cols, 1, 2, 3}, {5}).to(Device::cuda());
          BOOST_CHECK_THROW(loss(xd, bad).to(Device::cpu()), IndexError);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(sixteen_bit_ops_on_pairs_give_the_bits_of_f32_math) {
  // In a vector layout, an add, sub or mul of two bf16 (f16) values that are pairs there (a read,
  // or a value rounded to the type) is one packed instruction per two columns. Each op's result
  // must be the CPU's bits: the f32 result rounded once. Max is the only reduction, so no
  // summation order separates the layouts: vector, forced generic and CPU agree exactly.
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor centred = x - amax(x, {1}, true);  // a row's constant: computed in f32, not packed
    Tensor y = centred * w + x;               // packed: a rounded value and two reads
    return std::vector<Tensor>{y - w * w, amax(y, {1})};
  };
  auto compiled = jit::compile(fn);
  for (DType t : {DType::bf16, DType::f16})
    for (std::int64_t cols : {64, 1024}) {
      BOOST_TEST_CONTEXT(dtype_name(t) << " " << cols << " columns") {
        // Wide values: the products and sums need more than the 16-bit formats' precision.
        Tensor x = (randn({6, cols}) * 37.0).to(t), w = (randn({cols}) * 3.0).to(t);
        std::vector<Tensor> want = fn(x, w);
        for (Layout most : {Layout::vector, Layout::generic}) {
          std::vector<Tensor> got;
          {
            test::ScopeExit restore([was = codegen::set_reduction_layout_limit(most)] {
              codegen::set_reduction_layout_limit(was);
            });
            got = compiled(x.to(Device::cuda()), w.to(Device::cuda()));
            BOOST_TEST((codegen::last_reduction_layout() == most));
          }
          for (std::size_t i = 0; i < want.size(); ++i)
            test::check_values(got[i].to(Device::cpu()), want[i].shape(), want[i].dtype(),
                               want[i].to_vector<double>());
        }
      }
    }
  // A rounded value several passes read is kept in the register cache: the cached columns store
  // it from the cache, the columns past the cache from their pairs. Residual + LayerNorm (two
  // full outputs, three passes), 1100 columns: 1024 cached for a row of the traced 1024 and 76
  // more when the same plan meets a longer row.
  auto residual_norm = jit::compile([](const Tensor& x, const Tensor& r) {
    Tensor h = x + r;
    return std::vector<Tensor>{h, layer_norm(h, {h.size(1)}, Tensor(), Tensor(), 1e-5)};
  });
  for (DType t : {DType::bf16, DType::f16})
    for (std::int64_t cols : {1024, 1104}) {
      BOOST_TEST_CONTEXT("residual + layer_norm " << dtype_name(t) << " " << cols << " columns") {
        Tensor x = randn({5, cols}).to(t), r = randn({5, cols}).to(t);
        Tensor h = x + r;
        Tensor want = layer_norm(h.to(DType::f64), {cols}, Tensor(), Tensor(), 1e-5);
        for (Layout most : {Layout::vector, Layout::generic}) {
          std::vector<Tensor> got;
          {
            test::ScopeExit restore([was = codegen::set_reduction_layout_limit(most)] {
              codegen::set_reduction_layout_limit(was);
            });
            got = residual_norm(x.to(Device::cuda()), r.to(Device::cuda()));
            BOOST_TEST((codegen::last_reduction_layout() == most));
          }
          test::check_values(got[0].to(Device::cpu()), h.shape(), t, h.to_vector<double>());
          BOOST_TEST(relative_error(got[1].to(Device::cpu()).to(DType::f64), want) <= tolerance(t));
        }
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()
