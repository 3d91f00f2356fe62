// Generated row-reduction kernels (jit/codegen/reduction): every reduction and normalization op
// eagerly on CUDA tensors, and fused groups (softmax with prologue and epilogue, LayerNorm,
// RMSNorm, several reductions over the same rows) as one kernel, against the CPU kernels.
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/reduction.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/launch.h"
#include "runtime/cuda/virtual/profiler.h"
#include "support/device_compare.h"
#include "support/op_samples.h"
#include "support/reference.h"
#include "support/profiling_scope.h"

using namespace kiln;
using test::relative_error;
namespace codegen = kiln::jit::codegen;

namespace {

double tolerance(DType t) {
  return t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-5 : t == DType::f16 ? 2e-3 : 1.6e-2;
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Generated {
  graph::Graph graph;
  graph::FusionGroup group;
  codegen::ReductionKernel kernel;
};

// Traces `fn`, requires its partition to be one reduction/normalization kernel, renders it.
Generated generate(const Fn& fn, const std::vector<Tensor>& inputs) {
  Generated out;
  if (inputs.size() == 1) {
    auto f = jit::compile([&](const Tensor& a) { return fn({a}); });
    f(inputs[0]);
    out.graph = f.core().graph(0);
  } else if (inputs.size() == 2) {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return fn({a, b}); });
    f(inputs[0], inputs[1]);
    out.graph = f.core().graph(0);
  } else {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return fn({a, b, c});
    });
    f(inputs[0], inputs[1], inputs[2]);
    out.graph = f.core().graph(0);
  }
  auto p = graph::partition(out.graph);
  BOOST_TEST_REQUIRE(p.launch_count() == 1, p.str(out.graph));
  for (const auto& g : p.groups)
    if (g.launches()) out.group = g;
  out.kernel = codegen::render_reduction(out.graph, out.group);
  return out;
}

// The block-per-row variant in the generic layout, as the assertions below read it.
std::string block_source(const codegen::ReductionKernel& k) {
  return codegen::render_reduction_variant(k, {codegen::ReductionForm::block_per_row});
}

std::vector<Tensor> run(const Generated& gen, const std::vector<Tensor>& inputs) {
  const graph::Graph& g = gen.graph;
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs)
    values[in.value] = (in.kind == graph::InputKind::argument ? inputs.at(in.arg_index) : in.tensor)
                           .to(Device::cuda());
  Shape domain;
  for (const auto& s : gen.group.domain) domain.push_back(s.constant_value());
  auto outs = codegen::run_reduction(g, gen.kernel, domain, values);
  for (std::size_t i = 0; i < gen.kernel.writes.size(); ++i) values[gen.kernel.writes[i]] = outs[i];
  std::vector<Tensor> results;
  for (int v : g.outputs) results.push_back(values.at(v).to(Device::cpu()));
  return results;
}

// The form a call over `rows` contiguous, aligned rows of `cols` f32 columns takes on 132 SMs.
codegen::ReductionForm form_of(const codegen::ReductionKernel& k, long long rows, long long cols,
                               const codegen::ScheduleLimits& limits = {}) {
  std::vector<std::int64_t> domain = {rows, cols};
  std::vector<int> kept = {0}, reduced = {1};
  std::vector<long long> read_strides, out_strides = {cols, 1};
  std::vector<codegen::TensorAccess> reads(k.reads.size(), {256, 4}),
      writes(k.writes.size(), {256, 4});
  for (std::size_t i = 0; i < std::max<std::size_t>(1, k.reads.size()); ++i)
    read_strides.insert(read_strides.end(), {cols, 1});
  codegen::ReductionGeometry call{domain,       kept,        reduced, rows,  cols,
                                  read_strides, out_strides, reads,   writes};
  return codegen::schedule_reduction(k, call, 132, limits).variant.form;
}

void check_fused(const std::string& label, const Fn& fn, const std::vector<Tensor>& inputs,
                 DType dtype, int passes) {
  BOOST_TEST_CONTEXT(label << " " << dtype_name(dtype)) {
    Generated gen = generate(fn, inputs);
    BOOST_TEST(gen.kernel.passes == passes, block_source(gen.kernel));
    auto got = run(gen, inputs);
    auto want = fn(inputs);
    BOOST_TEST_REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST(got[i].dtype() == want[i].dtype());
      BOOST_TEST(relative_error(got[i], want[i]) <= tolerance(dtype), block_source(gen.kernel));
    }
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.numel() * itemsize(x.dtype())) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_reduction)

BOOST_AUTO_TEST_CASE(every_reduction_and_normalization_op_on_cuda_matches_the_cpu) {
  int runs = 0;
  for (OpId op : all_ops()) {
    OpClass c = op_class(op);
    if (c != OpClass::reduction && c != OpClass::normalization) continue;
    for (DType dtype : test::sample_dtypes(op)) {
      for (const auto& s : test::op_samples(op, dtype)) {
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          auto want = s.run(s.inputs);
          std::vector<Tensor> on_device;
          for (const auto& t : s.inputs) on_device.push_back(t.to(Device::cuda()));
          auto got = s.run(on_device);
          BOOST_TEST_REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            BOOST_TEST(got[i].dtype() == want[i].dtype());
            // Sums of many f32 terms differ by order from Eigen's; integers and indices agree.
            double tol = is_floating(want[i].dtype()) ? tolerance(dtype) : 0.0;
            BOOST_TEST(relative_error(got[i], want[i]) <= tol);
          }
          ++runs;
        }
      }
    }
  }
  BOOST_TEST(runs > 30);
}

BOOST_AUTO_TEST_CASE(ties_and_nans_follow_pytorch) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = test::f32s({1, 3, 3, 0, 2, nan, 5, nan}, {2, 4});
  Tensor d = x.to(Device::cuda());
  // argmax: the first of equal maxima; NaN wins (the first NaN).
  auto idx = argmax(d, 1).to(Device::cpu());
  BOOST_TEST(idx.data<std::int64_t>()[0] == 1);
  BOOST_TEST(idx.data<std::int64_t>()[1] == 1);
  auto m = amax(d, {1}).to(Device::cpu());
  BOOST_TEST(m.data<float>()[0] == 3.0f);
  BOOST_TEST(std::isnan(m.data<float>()[1]));
  auto [values, indices] = min(d, 1);
  BOOST_TEST(values.to(Device::cpu()).data<float>()[0] == 0.0f);
  BOOST_TEST(indices.to(Device::cpu()).data<std::int64_t>()[0] == 3);
  BOOST_TEST(indices.to(Device::cpu()).data<std::int64_t>()[1] == 1);
}

BOOST_AUTO_TEST_CASE(fused_rows_are_one_kernel_and_match_the_cpu) {
  Tensor w = randn({24}), b = randn({24});
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor x = randn({7, 24}).to(t);
    Tensor wt = w.to(t), bt = b.to(t);
    check_fused(
        "softmax with prologue and epilogue",
        [](auto& in) { return std::vector<Tensor>{softmax(in[0] * 0.5, -1) + 1.0}; }, {x}, t, 2);
    check_fused(
        "log_softmax", [](auto& in) { return std::vector<Tensor>{log_softmax(in[0], 1)}; }, {x}, t,
        2);
    check_fused(
        "layer_norm",
        [](auto& in) { return std::vector<Tensor>{layer_norm(in[0], {24}, in[1], in[2])}; },
        {x, wt, bt}, t, 2);
    check_fused(
        "rms_norm",
        [](auto& in) { return std::vector<Tensor>{rms_norm(in[0], {24}, in[1], 1e-6)}; }, {x, wt},
        t, 1);
  }
  Tensor x = randn({5, 300});  // longer rows than a block: threads fold several columns
  check_fused(
      "mean and variance in one pass",
      [](auto& in) {
        return std::vector<Tensor>{sum(in[0], {1}), sum(in[0] * in[0], {1}),
                                   amax(in[0], {1}, true)};
      },
      {x}, DType::f32, 1);
  check_fused(
      "max subtracted back over the row",
      [](auto& in) { return std::vector<Tensor>{in[0] - amax(in[0], {1}, true)}; }, {x}, DType::f32,
      1);
}

BOOST_AUTO_TEST_CASE(rows_over_any_dims_and_strided_inputs) {
  Tensor x = randn({4, 5, 6});
  check_fused(
      "middle dim", [](auto& in) { return std::vector<Tensor>{sum(exp(in[0]), {1})}; }, {x},
      DType::f32, 1);
  check_fused(
      "two dims keepdim",
      [](auto& in) {
        return std::vector<Tensor>{in[0] / sum(in[0], {0, 2}, true)};
      },
      {x}, DType::f32, 1);
  check_fused(
      "transposed input",
      [](auto& in) {
        return std::vector<Tensor>{softmax(in[0].permute({2, 0, 1}), -1)};
      },
      {x}, DType::f32, 2);
  check_fused(
      "every dim", [](auto& in) { return std::vector<Tensor>{sum(in[0] * 2.0)}; }, {x}, DType::f32,
      1);
}

BOOST_AUTO_TEST_CASE(rows_stay_on_chip_and_longer_rows_reread_their_tail) {
  // LayerNorm's three passes read x from memory once while the row fits in registers.
  Generated gen =
      generate([](auto& in) { return std::vector<Tensor>{layer_norm(in[0], {300}, in[1], in[2])}; },
               {randn({4, 300}), randn({300}), randn({300})});
  BOOST_TEST(gen.kernel.items == 2, block_source(gen.kernel));  // 300 columns over 256 threads
  BOOST_TEST(block_source(gen.kernel).find("_cache[it]") != std::string::npos,
             block_source(gen.kernel));
  // One eager softmax kernel per schedule (a warp per row for 40 columns, a block for 5000)
  // serves every row length: the first call sizes what stays on chip, and rows longer than
  // that re-read the rest in each pass.
  std::int64_t compiles = -1;
  int call = 0;
  for (std::int64_t cols : {40, 5000, 7, 1000, 300, 200}) {
    BOOST_TEST_CONTEXT("cols " << cols) {
      Tensor x = randn({3, cols}) * 4.0;
      BOOST_TEST(relative_error(softmax(x.to(Device::cuda()), 1), softmax(x, 1)) <= 1e-5);
      BOOST_TEST(relative_error(log_softmax(x.to(Device::cuda()), 1), log_softmax(x, 1)) <= 1e-5);
      if (++call > 2) BOOST_TEST(codegen::launch_stats().compiles == compiles);
      compiles = codegen::launch_stats().compiles;
    }
  }
}

BOOST_AUTO_TEST_CASE(short_rows_are_a_warp_each) {
  namespace vgpu = kiln::cuda::vgpu;
  // The warp schedule keeps 40 columns in registers over 32 lanes: 2 items each.
  Generated gen =
      generate([](auto& in) { return std::vector<Tensor>{softmax(in[0], 1)}; }, {randn({100, 40})});
  BOOST_TEST(gen.kernel.warp_items == 2);
  BOOST_TEST(gen.kernel.warp_lanes == 32);
  // 16-bit rows traced wider than 512 columns: half a warp a row, 64 columns a lane.
  Generated wide = generate([](auto& in) { return std::vector<Tensor>{softmax(in[0], 1)}; },
                            {randn({4, 1024}).to(DType::bf16)});
  BOOST_TEST(wide.kernel.warp_lanes == 16);
  BOOST_TEST(wide.kernel.warp_items == 64);
  BOOST_TEST(codegen::warp_row_lanes(1024, 4) == 32);  // f32 keeps a warp a row
  BOOST_TEST(codegen::warp_row_lanes(512, 2) == 32);
  using codegen::ReductionForm;
  BOOST_TEST((form_of(gen.kernel, 1000, 40) == ReductionForm::warp_per_row));
  BOOST_TEST((form_of(gen.kernel, 1000, codegen::kWarpRowMaxCols) == ReductionForm::warp_per_row));
  BOOST_TEST(
      (form_of(gen.kernel, 1000, codegen::kWarpRowMaxCols + 1) == ReductionForm::block_per_row));
  codegen::ScheduleLimits no_warps;
  no_warps.warp_rows = false;
  BOOST_TEST((form_of(gen.kernel, 1000, 40, no_warps) == ReductionForm::block_per_row));
  // Against the CPU in f64, on both sides of the switch, with a fused row select
  // (cross-entropy) and arg reductions whose ties keep the first index. bf16 rows past 512
  // columns take half a warp a row; with 37 rows the last warp's second half has no row and
  // leaves while the first still shuffles within its own member mask.
  const std::vector<std::pair<DType, std::int64_t>> rows = {
      {DType::f32, 1},    {DType::f32, 7},    {DType::f32, 33},
      {DType::f32, 256},  {DType::f32, 257},  {DType::f32, 1024},
      {DType::f32, 1025}, {DType::bf16, 600}, {DType::bf16, 1024}};
  for (const auto& [dtype, cols] : rows) {
    BOOST_TEST_CONTEXT(dtype_name(dtype) << ", cols " << cols) {
      const double tol = dtype == DType::f32 ? 1e-5 : 1.6e-2;
      Tensor x = (randn({37, cols}) * 3.0).to(dtype), x64 = x.to(DType::f64);
      Tensor xd = x.to(Device::cuda());
      BOOST_TEST(relative_error(layer_norm(xd, {cols}), layer_norm(x64, {cols})) <= tol);
      BOOST_TEST(relative_error(log_softmax(xd, 1), log_softmax(x64, 1)) <= tol);
      Tensor target = randint(0, cols, {37}, DType::i64);
      auto loss =
          jit::compile([](const Tensor& a, const Tensor& t) { return cross_entropy(a, t); });
      BOOST_TEST(relative_error(loss(xd, target.to(Device::cuda())), cross_entropy(x64, target)) <=
                 tol);
      Tensor ties = floor(x);
      BOOST_TEST(relative_error(argmax(ties.to(Device::cuda()), {1}), argmax(ties, {1})) == 0.0);
    }
  }
  // No shared memory and no barrier: the profile shows 256-thread blocks of 8 rows and zero
  // shared-memory requests, where a block per row exchanges partials through shared memory.
  Tensor x = randn({100, 40});  // the traced size
  test::ProfilingScope profiling;
  Tensor by_warp = run(gen, {x})[0];
  Tensor by_block;
  {
    codegen::ScheduleLimits rows_by_blocks;
    rows_by_blocks.warp_rows = false;
    codegen::ScopedScheduleLimits scope(rows_by_blocks);
    by_block = run(gen, {x})[0];
  }
  profiling.stop();
  const auto& p = vgpu::profiles();
  BOOST_TEST_REQUIRE(p.size() == 2u);
  BOOST_TEST(p[0].block.x == 256u);
  BOOST_TEST(p[0].grid.x == 13u);
  BOOST_TEST(p[0].shared_requests == 0u);
  BOOST_TEST(p[1].block.x == 64u);
  BOOST_TEST(p[1].shared_requests > 0u);
  BOOST_TEST(relative_error(by_warp, softmax(x.to(DType::f64), 1)) <= 1e-5);
  BOOST_TEST(relative_error(by_block, softmax(x.to(DType::f64), 1)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_full_reduction_splits_over_blocks_in_two_deterministic_stages) {
  // 2^18 elements over every dim: one row, split so that each block folds a chunk and the last
  // to finish combines the chunks in order.
  BOOST_TEST(codegen::split_count(1, 1 << 18, 256, 132) == 32);   // 32 columns a thread
  BOOST_TEST(codegen::split_count(1, 1000, 256, 132) == 1);       // too little work to split
  BOOST_TEST(codegen::split_count(500, 1 << 18, 256, 132) == 1);  // rows fill the device
  Tensor x = randn({512, 512});
  Tensor xd = x.to(Device::cuda());
  auto f = jit::compile([](const Tensor& a) {
    return std::vector<Tensor>{sum(a * 0.5, {0, 1}), amax(a, {0, 1}), sum(a, {0, 1}) / 7.0};
  });
  auto got = f(xd);
  // Reference in f64 on the CPU.
  Tensor xd64 = x.to(DType::f64);
  BOOST_TEST(relative_error(got[0], sum(xd64 * 0.5, {0, 1})) <= 1e-5);
  BOOST_TEST(relative_error(got[1], amax(x, {0, 1})) == 0.0);
  BOOST_TEST(relative_error(got[2], sum(xd64, {0, 1}) / 7.0) <= 1e-5);
  auto again = f(xd);
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(bitwise_equal(got[i], again[i]));
  // An integer sum is exact whatever the split.
  Tensor n = randint(-1000, 1000, {300000}, DType::i64);
  BOOST_TEST(sum(n.to(Device::cuda()), {0}).item() == sum(n, {0}).item());
}

BOOST_AUTO_TEST_CASE(reductions_over_outer_dims_read_rows_side_by_side) {
  namespace vgpu = kiln::cuda::vgpu;
  // A sum over the batch keeps the innermost dim: the outer schedule applies; a sum over the
  // innermost dim, or a normalization, keeps the row schedule.
  auto over_batch = [](auto& in) { return std::vector<Tensor>{sum(in[0], {0})}; };
  BOOST_TEST(generate(over_batch, {randn({16, 40})}).kernel.outer);
  BOOST_TEST(
      !generate([](auto& in) { return std::vector<Tensor>{sum(in[0], {1})}; }, {randn({16, 40})})
           .kernel.outer);
  BOOST_TEST(
      !generate([](auto& in) { return std::vector<Tensor>{softmax(in[0], 0)}; }, {randn({16, 40})})
           .kernel.outer);

  // Against the CPU in f64: odd sizes, several reduced dims, keepdim, epilogues, splits (few
  // rows over many columns), rows narrower than a sector (the row schedule), a transposed input.
  struct Case {
    std::string label;
    Shape shape;
    std::function<Tensor(const Tensor&)> fn;
  };
  std::vector<Case> cases = {
      {"sum dim 0", {1000, 64}, [](const Tensor& x) { return sum(x, {0}); }},
      {"odd rows", {37, 33}, [](const Tensor& x) { return sum(x * x, {0}); }},
      {"mean keepdim",
       {5, 7, 40},
       [](const Tensor& x) {
         return mean(x, {0, 1}, true);
       }},
      {"middle kept",
       {6, 9, 20},
       [](const Tensor& x) {
         return amax(x, {0, 2});
       }},
      {"epilogue", {300, 24}, [](const Tensor& x) { return sqrt(sum(exp(x), {0}) + 1.0); }},
      {"split", {6000, 16}, [](const Tensor& x) { return sum(x, {0}); }},
      {"narrow rows", {500, 3}, [](const Tensor& x) { return sum(x, {0}); }},
      {"transposed", {40, 300}, [](const Tensor& x) { return sum(x.transpose(0, 1), {0}); }},
  };
  for (const auto& c : cases) BOOST_TEST_CONTEXT(c.label) {
      Tensor x = randn(c.shape);
      auto f = jit::compile([&](const Tensor& a) { return c.fn(a); });
      Tensor got = f(x.to(Device::cuda()));
      BOOST_TEST(relative_error(got, c.fn(x.to(DType::f64))) <= 1e-5);
      BOOST_TEST(bitwise_equal(got, f(x.to(Device::cuda()))));
      for (DType t : {DType::f16, DType::bf16}) {
        Tensor rounded = x.to(t);
        BOOST_TEST(relative_error(c.fn(rounded.to(Device::cuda())), c.fn(rounded.to(DType::f64))) <=
                   tolerance(t));
      }
    }
  Tensor n = randint(-1000, 1000, {7000, 16}, DType::i64);
  BOOST_TEST(relative_error(sum(n.to(Device::cuda()), {0}), sum(n, {0})) == 0.0);

  // What it buys, measured: a warp's f32 request over 32 x 4 neighbouring rows (4 a lane, one
  // 16-byte access) is 16 sectors; the row schedule's lanes are a row apart, a sector each.
  // 4224 rows fill the 132 SMs: no split.
  Tensor x = randn({64, 4224});
  Generated gen = generate(over_batch, {x});
  test::ProfilingScope profiling;
  Tensor side_by_side = run(gen, {x})[0];
  Tensor row_apart;
  {
    codegen::ScheduleLimits a_row_each;
    a_row_each.outer_rows = false;
    codegen::ScopedScheduleLimits scope(a_row_each);
    row_apart = run(gen, {x})[0];
  }
  profiling.stop();
  const auto& p = vgpu::profiles();
  BOOST_TEST_REQUIRE(p.size() == 2u);
  BOOST_TEST(p[0].block.y == 8u);
  BOOST_TEST(p[1].block.y == 1u);
  // The profiler groups a warp's accesses into requests as an in-order warp issues them.
  if (!vgpu::schedule_from_env().random) {
    BOOST_TEST(p[0].load_sectors == 16 * p[0].load_requests);
    BOOST_TEST(p[1].load_sectors == 32 * p[1].load_requests);
  }
  BOOST_TEST(relative_error(side_by_side, sum(x.to(DType::f64), {0})) <= 1e-5);
  BOOST_TEST(relative_error(row_apart, sum(x.to(DType::f64), {0})) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(results_are_bitwise_reproducible) {
  Tensor x = randn({3, 1000}).to(Device::cuda());
  Tensor first = sum(x, {1}), second = sum(x, {1});
  BOOST_TEST(bitwise_equal(first, second));
  Tensor s1 = softmax(x, 1), s2 = softmax(x, 1);
  BOOST_TEST(bitwise_equal(s1, s2));
}

BOOST_AUTO_TEST_CASE(the_source_names_what_it_fuses) {
  Generated gen =
      generate([](auto& in) { return std::vector<Tensor>{layer_norm(in[0], {8}, in[1], in[2])}; },
               {randn({2, 8}), randn({8}), randn({8})});
  const std::string s = block_source(gen.kernel);
  BOOST_TEST(s.find("// Fused from graph") != std::string::npos);
  BOOST_TEST(s.find("= rsqrt(") != std::string::npos, s);
  BOOST_TEST(s.find("pass 2 of 2") != std::string::npos, s);
  BOOST_TEST(s.find("cuda_fp16.h") == std::string::npos);
  BOOST_TEST(s.find("atomic") == std::string::npos);  // deterministic: no float atomics
}

BOOST_AUTO_TEST_SUITE_END()
