// Pointwise kernels' vector path (16-byte loads and stores when every tensor is aligned for
// them, the scalar loop for the rest) and their 32-bit index arithmetic: compiled functions on
// CUDA tensors against the same functions on CPU tensors, with the virtual GPU's profiler saying
// which path a launch took: on the vector path a warp's request moves `width` elements per
// lane, so a kernel reading two f32 tensors issues 2 * numel / (4 * 32) load requests where
// the scalar path issues 2 * numel / 32.
#include <boost/test/unit_test.hpp>

#include <set>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/schedule_limits.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/launch.h"
#include "runtime/cuda/virtual/profiler.h"
#include "support/device_compare.h"
#include "support/scope_exit.h"

using namespace kiln;
using test::relative_error;
namespace vgpu = kiln::cuda::vgpu;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// What the generated kernels of one call did: summed over the launches of kernels kiln
// generated for the function (their names start with "k_").
struct Run {
  Tensor out;
  vgpu::KernelProfile profile;
  int kernels = 0;  // distinct generated kernels launched
};

Run run_cuda(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> on_gpu;
  for (const auto& t : inputs) on_gpu.push_back(t.device().is_cpu() ? t.to(Device::cuda()) : t);
  Run r;
  auto call = [&] {
    switch (on_gpu.size()) {
      case 1:
        return jit::compile([&](const Tensor& a) { return fn({a}); })(on_gpu[0]);
      case 2:
        return jit::compile([&](const Tensor& a, const Tensor& b) {
          return fn({a, b});
        })(on_gpu[0], on_gpu[1]);
      default:
        return jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
          return fn({a, b, c});
        })(on_gpu[0], on_gpu[1], on_gpu[2]);
    }
  };
  {
    vgpu::set_profiling(true);
    test::ScopeExit profiling_off([] { vgpu::set_profiling(false); });
    vgpu::clear_profiles();
    r.out = call().to(Device::cpu());
  }
  std::set<std::string> names;
  r.profile = {};
  r.profile.launches = 0;
  for (const auto& p : vgpu::profiles()) {
    if (p.kernel.rfind("k_", 0) != 0) continue;
    names.insert(p.kernel);
    r.profile.add(p);
  }
  r.kernels = static_cast<int>(names.size());
  return r;
}

// `fn` on CUDA tensors matches `fn` on the CPU; returns the CUDA run.
Run check(const Fn& fn, const std::vector<Tensor>& inputs, DType dtype) {
  Run r = run_cuda(fn, inputs);
  std::vector<Tensor> on_cpu;
  for (const auto& t : inputs) on_cpu.push_back(t.to(Device::cpu()));
  Tensor want = fn(on_cpu);
  BOOST_TEST((r.out.dtype() == want.dtype()));
  BOOST_TEST(relative_error(r.out, want) <= test::pointwise_tolerance(dtype));
  BOOST_TEST(r.kernels == 1);
  return r;
}

Tensor silu_gate(const std::vector<Tensor>& in) {
  return in[0] * silu(in[1]);
}

// Load requests of a kernel reading `reads` tensors of `numel` elements, `per_lane` elements
// per lane in each request: full warps, plus a last partial one.
std::uint64_t requests(std::int64_t numel, int reads, int per_lane) {
  std::int64_t lanes = numel / per_lane, warps = (lanes + 31) / 32;
  return static_cast<std::uint64_t>(reads * warps);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_pointwise_vector)

BOOST_AUTO_TEST_CASE(aligned_contiguous_tensors_take_the_vector_path) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      int width = static_cast<int>(16 / itemsize(dtype));
      std::int64_t numel = 32 * 128;
      Tensor x = randn({32, 128}).to(dtype), y = randn({32, 128}).to(dtype);
      Run r = check(silu_gate, {x, y}, dtype);
      // One 16-byte request per lane and tensor: 16 sectors per warp request, none wasted.
      BOOST_TEST(r.profile.load_requests == requests(numel, 2, width));
      BOOST_TEST(r.profile.store_requests == requests(numel, 1, width));
      // (The profiler coalesces a warp's sectors as its lanes arrive in order: not under a
      // shuffled schedule.)
      if (!vgpu::schedule_from_env().random)
        BOOST_TEST(r.profile.load_sectors == 16 * r.profile.load_requests);
      BOOST_TEST(r.profile.dram_bytes() == 3 * numel * itemsize(dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_numel_no_vector_divides_ends_in_the_scalar_loop) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (std::int64_t numel : {1, 3, 7, 33, 1000003}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " " << numel) {
        if (numel > 100000 && dtype != DType::f32) continue;  // one large case is enough
        Tensor x = randn({numel}).to(dtype), y = randn({numel}).to(dtype);
        Run r = check(silu_gate, {x, y}, dtype);
        int width = static_cast<int>(16 / itemsize(dtype));
        std::int64_t tail = numel % width;
        // Vectors first, then the tail one element at a time (all of it when numel < width).
        BOOST_TEST(r.profile.load_bytes == 2 * numel * itemsize(dtype));
        BOOST_TEST(r.profile.load_requests ==
                   requests(numel - tail, 2, width) + requests(tail, 2, 1));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_view_one_element_in_is_misaligned_and_takes_the_scalar_path) {
  std::int64_t numel = 4096;
  Tensor base = randn({numel + 1}).to(Device::cuda()), y = randn({numel});
  Tensor x = base.slice(0, 1, numel + 1);  // 4 bytes past a 16-byte boundary
  Run r = check(silu_gate, {x, y}, DType::f32);
  BOOST_TEST(r.profile.load_requests == requests(numel, 2, 1));
  // The aligned view of the same buffer takes the vector path.
  Run aligned = check(silu_gate, {base.slice(0, 0, numel), y}, DType::f32);
  BOOST_TEST(aligned.profile.load_requests == requests(numel, 2, 4));
}

BOOST_AUTO_TEST_CASE(broadcasts_constant_along_a_vector_keep_it) {
  auto bias_gelu = [](const std::vector<Tensor>& in) { return gelu(in[0] + in[1]); };
  std::int64_t rows = 16, hidden = 64, numel = rows * hidden;
  Tensor x = randn({rows, hidden});
  // A bias row: contiguous along the vector, the same offset pattern in every row.
  Run row = check(bias_gelu, {x, randn({hidden})}, DType::f32);
  BOOST_TEST(row.profile.load_requests == requests(numel, 2, 4));
  // A column and a 0-dim CUDA tensor: one element per vector, repeated.
  Run column = check(bias_gelu, {x, randn({rows, 1})}, DType::f32);
  BOOST_TEST(column.profile.load_requests == requests(numel, 2, 4));
  BOOST_TEST(column.profile.load_bytes == numel * 4 + numel / 4 * 4);
  Run scalar = check(bias_gelu, {x, randn({})}, DType::f32);
  BOOST_TEST(scalar.profile.load_requests == requests(numel, 2, 4));
  // An inner size no vector divides: vectors would straddle rows, so every element is scalar.
  Tensor odd = randn({rows, 6});
  Run scalar_rows = check(bias_gelu, {odd, randn({6})}, DType::f32);
  BOOST_TEST(scalar_rows.profile.load_requests == requests(rows * 6, 2, 1));
  // A transposed read steps across the vector: the scalar path.
  Tensor xt = randn({hidden, rows}).to(Device::cuda()).t();
  Run transposed = check(bias_gelu, {xt, randn({hidden})}, DType::f32);
  BOOST_TEST(transposed.profile.load_requests == requests(numel, 2, 1));
}

// f16/bf16 on the vector path are computed two elements at a time: one cvt.rn.bf16x2.f32 rounds
// a pair, and an add, sub or mul of two values read or rounded as f16/bf16 is one packed
// instruction. Both must give the CPU's bits (f32 arithmetic, one rounding per op), on values
// whose exponents differ widely (where a sum rounds twice).
BOOST_AUTO_TEST_CASE(f16_and_bf16_pairs_round_as_the_cpu_does) {
  Shape shape{64, 256};
  auto spread = [&] { return randn(shape) * exp(randint(-12, 12, shape, DType::f32)); };
  for (DType dtype : {DType::bf16, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Tensor x = spread().to(dtype), y = spread().to(dtype), b = randn({256}).to(dtype);
      std::vector<std::pair<const char*, Fn>> exact = {
          {"add", [](auto& in) { return in[0] + in[1]; }},
          {"sub", [](auto& in) { return in[0] - in[1]; }},
          {"mul", [](auto& in) { return in[0] * in[1]; }},
          {"add then mul", [](auto& in) { return (in[0] + in[1]) * in[0] - in[1]; }},
      };
      for (const auto& [name, fn] : exact) {
        Run r = check(fn, {x, y}, dtype);
        Tensor want = fn({x, y});
        BOOST_TEST(test::ulps_apart(r.out, want, dtype) == 0.0, name);
        BOOST_TEST(r.profile.load_requests == requests(64 * 256, 2, 8), name);
      }
      // A transcendental before the packed op: its f32 result a few ulps from the CPU's may
      // round to the neighbouring f16/bf16 value.
      Run gate = check(silu_gate, {x, y}, dtype);
      BOOST_TEST(test::ulps_apart(gate.out, silu_gate({x, y}), dtype, 1e-3) <= 2.0);
      auto bias_gelu = [](const std::vector<Tensor>& in) { return gelu(in[0] + in[1]); };
      Run g = check(bias_gelu, {x, b}, dtype);
      BOOST_TEST(test::ulps_apart(g.out, bias_gelu({x, b}), dtype, 1) <= 1.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(every_output_dtype) {
  Shape shape{8, 100};  // 800 elements: whole vectors for every width up to 16
  for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64, DType::i32, DType::i64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      bool integral = dtype == DType::i32 || dtype == DType::i64;
      Tensor x = integral ? randint(-50, 50, shape, dtype) : randn(shape).to(dtype);
      Tensor y = integral ? randint(-50, 50, shape, dtype) : randn(shape).to(dtype);
      Run r = check([](auto& in) { return in[0] * in[1] + in[0]; }, {x, y}, dtype);
      BOOST_TEST(r.profile.load_requests == requests(800, 2, 16 / itemsize(dtype)));
    }
  }
  // Comparisons of f32 write bool: 4 elements per thread (the f32 reads' width), 4-byte stores.
  Tensor a = randn({8, 100}), b = randn({8, 100});
  Run cmp =
      check([](auto& in) { return logical_or(in[0] > in[1], in[0] < 0.0); }, {a, b}, DType::bool_);
  BOOST_TEST(cmp.profile.store_requests == requests(800, 1, 4));
  // Bool alone: 16 per thread, with a tail of 1000 % 16 = 8.
  Tensor p = randn({1000}) > 0.0, q = randn({1000}) > 0.5;
  Run logic =
      check([](auto& in) { return logical_and(in[0], logical_not(in[1])); }, {p, q}, DType::bool_);
  BOOST_TEST(logic.profile.load_requests == requests(992, 2, 16) + requests(8, 2, 1));
}

BOOST_AUTO_TEST_CASE(mixed_dtypes_vectorise_by_the_widest) {
  // f16 read next to f32: 4 elements per thread, the f16 one 8-byte access per lane.
  Tensor h = randn({8, 64}).to(DType::f16), f = randn({8, 64});
  Run r = check([](auto& in) { return in[0].to(DType::f32) * in[1]; }, {h, f}, DType::f16);
  BOOST_TEST(r.profile.load_requests == requests(512, 2, 4));
  BOOST_TEST(r.profile.load_bytes == 512u * 2 + 512u * 4);
  // f64 in, bf16 out: 2 per thread.
  Tensor d = randn({512}).to(DType::f64);
  Run cast = check([](auto& in) { return exp(in[0]).to(DType::bf16); }, {d}, DType::bf16);
  BOOST_TEST(cast.profile.store_requests == requests(512, 1, 2));
}

BOOST_AUTO_TEST_CASE(a_dynamic_dim_compiled_once_serves_vector_and_scalar_sizes) {
  auto f = jit::compile([](const Tensor& x, const Tensor& b) { return gelu(x + b); });
  auto& stats = jit::codegen::launch_stats();
  std::int64_t compiles = -1;
  for (std::int64_t hidden : {32, 6, 13, 64, 3}) {
    BOOST_TEST_CONTEXT("hidden " << hidden) {
      Tensor x = randn({5, hidden}), b = randn({hidden});
      Tensor xd = x.to(Device::cuda()), bd = b.to(Device::cuda());
      jit::mark_dynamic(xd, 1);
      jit::mark_dynamic(bd, 0);
      Tensor got = f(xd, bd);
      BOOST_TEST(relative_error(got, gelu(x + b)) <= test::pointwise_tolerance(DType::f32));
      if (compiles < 0) compiles = stats.compiles;  // after the first call
      BOOST_TEST(stats.compiles == compiles);
    }
  }
  BOOST_TEST(f.core().num_entries() == 1u);
}

// A tensor of 2^31 elements is too big for the virtual GPU (and the test machine): a launch
// past 32-bit indices is cut into pieces, whose selection test_codegen_pointwise_layout checks
// on the host; here a lowered limit makes mid-size tensors take the same split, on the vector
// path and on the scalar one.
BOOST_AUTO_TEST_CASE(launches_past_the_index_limit_run_in_pieces) {
  jit::codegen::ScheduleLimits limits;
  limits.pointwise_index_limit = 1000;
  jit::codegen::ScopedScheduleLimits scope(limits);
  auto& stats = jit::codegen::launch_stats();
  std::int64_t launches = stats.launches;
  Tensor x = randn({10007}), y = randn({10007});
  Run contiguous = check(silu_gate, {x, y}, DType::f32);  // 11 pieces of at most 1000
  BOOST_TEST(stats.launches - launches == 11);
  BOOST_TEST(contiguous.profile.load_requests ==
             10 * (requests(1000, 2, 4)) + requests(4, 2, 4) + requests(3, 2, 1));

  // Rows of 20 from a [100, 40] buffer: runs of 25 rows reach offsets below 1000 (24 * 40 +
  // 19), all of them aligned for vectors.
  auto mixed = [](const std::vector<Tensor>& in) { return gelu(in[0] + in[1]) * in[2]; };
  Tensor a = randn({100, 40}).to(Device::cuda()).slice(1, 0, 20);
  Tensor b = randn({20}), c = randn({100, 20});
  launches = stats.launches;
  Run rows = check(mixed, {a, b, c}, DType::f32);
  BOOST_TEST(stats.launches - launches == 4);
  BOOST_TEST(rows.profile.load_requests == 4 * requests(500, 3, 4));
  // One element in and a row stride of 41: misaligned, runs of 24 rows on the scalar path.
  Tensor m = randn({100, 41}).to(Device::cuda()).slice(1, 1, 21);
  launches = stats.launches;
  Run scalar = check(mixed, {m, b, c}, DType::f32);
  BOOST_TEST(stats.launches - launches == 5);
  BOOST_TEST(scalar.profile.load_requests == 4 * requests(480, 3, 1) + requests(80, 3, 1));
}

// The vector path advances each read's offset by a constant per grid step where the host's
// grid makes that hold (pointwise_layout.h: plan_advance), else computes it per vector. Both
// against the CPU, and against each other: the same elements get the same math, so the same
// bits. Where the plan advances, the launch issues fewer slots (no per-vector division).
BOOST_AUTO_TEST_CASE(advancing_offsets_give_the_per_vector_offsets_results) {
  struct Case {
    const char* name;
    Fn fn;
    std::vector<Tensor> inputs;
    DType dtype;
    bool advances;  // the plan can advance (and vectors are taken)
  };
  auto bias_gelu = [](const std::vector<Tensor>& in) { return gelu(in[0] + in[1]); };
  Tensor wide = randn({64, 40}).to(Device::cuda());
  Tensor misaligned = randn({64, 41}).to(Device::cuda());
  std::vector<Case> cases = {
      {"contiguous f32, a tail", silu_gate, {randn({12347}), randn({12347})}, DType::f32, true},
      {"contiguous bf16 rows of 1000",
       silu_gate,
       {randn({37, 1000}).to(DType::bf16), randn({37, 1000}).to(DType::bf16)},
       DType::bf16,
       true},
      {"bias bf16, rows of 1024",
       bias_gelu,
       {randn({64, 1024}).to(DType::bf16), randn({1024}).to(DType::bf16)},
       DType::bf16,
       true},
      // 1000 columns: the step is a multiple of a row at 125 blocks (79 for 4 vectors a thread).
      {"bias f32, rows of 1000", bias_gelu, {randn({320, 1000}), randn({1000})}, DType::f32, true},
      // ... not from 24 blocks: 125 would leave most threads idle.
      {"bias f32, few rows of 1000",
       bias_gelu,
       {randn({96, 1000}), randn({1000})},
       DType::f32,
       false},
      // Rows of 12: the grid rounded from 8 blocks to 9 (a step of 9216 elements, 768 rows).
      {"bias f32, rows of 12", bias_gelu, {randn({2600, 12}), randn({12})}, DType::f32, true},
      {"column f32", bias_gelu, {randn({512, 64}), randn({512, 1})}, DType::f32, true},
      // Rows 32 apart in a buffer of rows of 40: the read's delta is rows * 40, the output's 32.
      {"strided rows", bias_gelu, {wide.slice(1, 0, 32), randn({32})}, DType::f32, true},
      // One row merges into one dim, where the bias, loaded once per thread elsewhere, moves.
      {"one row", bias_gelu, {randn({1, 4096}), randn({4096})}, DType::f32, false},
      // No vectors: rows of 13, and a read one element off alignment.
      {"odd rows", bias_gelu, {randn({64, 13}), randn({13})}, DType::f32, false},
      {"misaligned", bias_gelu, {misaligned.slice(1, 1, 41), randn({40})}, DType::f32, false},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      Run advanced = check(c.fn, c.inputs, c.dtype);
      Run generic;
      {
        jit::codegen::ScheduleLimits per_vector;
        per_vector.pointwise_advance = false;
        jit::codegen::ScopedScheduleLimits scope(per_vector);
        generic = check(c.fn, c.inputs, c.dtype);
      }
      BOOST_TEST(relative_error(advanced.out, generic.out) == 0.0);
      // The same DRAM traffic; fewer loads where a thread reads the bias once.
      BOOST_TEST(advanced.profile.dram_bytes() == generic.profile.dram_bytes());
      BOOST_TEST(advanced.profile.load_bytes <= generic.profile.load_bytes);
      BOOST_TEST_MESSAGE(c.name << ": " << advanced.profile.issue_slots() << " slots advancing, "
                                << generic.profile.issue_slots() << " per vector");
      if (c.advances)
        BOOST_TEST(advanced.profile.issue_slots() < generic.profile.issue_slots());
      else
        BOOST_TEST(advanced.profile.issue_slots() == generic.profile.issue_slots());
    }
  }
}

// Pieces of a launch past the index limit (here lowered) each plan their own advance: the
// pieces' results against the unsplit launch's, on both vector paths.
BOOST_AUTO_TEST_CASE(pieces_past_the_index_limit_advance_each) {
  auto mixed = [](const std::vector<Tensor>& in) { return gelu(in[0] + in[1]) * in[2]; };
  Tensor a = randn({200, 48}).to(Device::cuda()).slice(1, 0, 40);
  Tensor b = randn({40}), c = randn({200, 40});
  Run whole = check(mixed, {a, b, c}, DType::f32);
  auto& stats = jit::codegen::launch_stats();
  for (bool advance : {true, false}) {
    BOOST_TEST_CONTEXT("advance " << advance) {
      jit::codegen::ScheduleLimits limits;
      limits.pointwise_index_limit = 2000;
      limits.pointwise_advance = advance;
      std::int64_t launches = stats.launches;
      Run split;
      {
        jit::codegen::ScopedScheduleLimits scope(limits);
        split = check(mixed, {a, b, c}, DType::f32);
      }
      // Runs of 41 rows reach offsets below 2000 (40 * 48 + 39): 5 pieces.
      BOOST_TEST(stats.launches - launches == 5);
      BOOST_TEST(relative_error(split.out, whole.out) == 0.0);
    }
  }
}

// The advance plan on the host: when the grid's step is a multiple of the inner dims, each
// read's delta, and the grid rounded up to make it so.
BOOST_AUTO_TEST_CASE(the_advance_plan) {
  using jit::codegen::IterSpace;
  using jit::codegen::plan_advance;
  // One dim: every grid advances; a contiguous read by the step, a 0-dim one by 0.
  IterSpace flat{{1, 100000}, {{0, 1}, {0, 0}}};
  auto p = plan_advance(flat, 12500, 8, 256, 13, 1056);
  BOOST_TEST(p.on);
  BOOST_TEST(p.blocks == 13u);
  BOOST_TEST(p.delta == (std::vector<std::int64_t>{13 * 256 * 8, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(!plan_advance(flat, 0, 8, 256, 13, 1056).on);  // no vectors
  // A bias over rows of 1024 (x, then the bias): a step of 8 blocks * 2048 is 16 rows.
  IterSpace bias{{256, 1024}, {{1024, 1}, {0, 1}}};
  p = plan_advance(bias, 32768, 8, 256, 8, 1056);
  BOOST_TEST(p.on);
  BOOST_TEST(p.blocks == 8u);
  BOOST_TEST(p.delta == (std::vector<std::int64_t>{16 * 1024, 0}),
             boost::test_tools::per_element());
  // Rows of 1000 strided 1024 apart: blocks a multiple of 125 (1000 / gcd(1000, 2048)).
  IterSpace strided{{300, 1000}, {{1024, 1}, {0, 1}}};
  p = plan_advance(strided, 37500, 8, 256, 100, 1056);
  BOOST_TEST(p.on);
  BOOST_TEST(p.blocks == 125u);
  BOOST_TEST(p.delta == (std::vector<std::int64_t>{256 * 1024, 0}),
             boost::test_tools::per_element());
  // ... not past the cap, nor past twice the blocks asked for.
  BOOST_TEST(!plan_advance(strided, 37500, 8, 256, 100, 100).on);
  BOOST_TEST(!plan_advance(strided, 37500, 8, 256, 60, 1056).on);
  // Not when a delta needs 33 bits: a step of 256 rows 2^25 elements apart.
  IterSpace far{{4096, 1}, {{std::int64_t{1} << 22, 0}}};
  BOOST_TEST(!plan_advance(far, 0, 8, 256, 1, 1056).on);
  IterSpace far_rows{{4096, 8}, {{std::int64_t{1} << 25, 1}}};
  BOOST_TEST(!plan_advance(far_rows, 4096, 8, 256, 1, 1056).on);
  IterSpace near_rows{{4096, 8}, {{std::int64_t{1} << 10, 1}}};
  p = plan_advance(near_rows, 4096, 8, 256, 1, 1056);
  BOOST_TEST(p.on);
  BOOST_TEST(p.delta == (std::vector<std::int64_t>{256 << 10}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_source_has_one_entry_point) {
  graph::Graph g;
  auto f = jit::compile([](const Tensor& a, const Tensor& b) { return silu_gate({a, b}); });
  f(randn({4, 8}), randn({4, 8}));
  g = f.core().graph(0);
  auto group = graph::partition(g).groups.at(0);
  auto k = jit::codegen::render_pointwise(g, group);
  BOOST_TEST(k.vector_width == 4);
  std::size_t entries = 0;
  for (auto at = k.source.find("__global__"); at != std::string::npos;
       at = k.source.find("__global__", at + 1))
    ++entries;
  BOOST_TEST(entries == 1u, k.source);
  BOOST_TEST(k.source.find("long long") == std::string::npos, k.source);  // 32-bit indices
}

BOOST_AUTO_TEST_SUITE_END()
