// Buffer assignment (jit/buffer_assignment.h): the values a plan's generated kernels write and
// no caller sees live in one arena, reused by liveness, a pointwise kernel writes over an input
// it reads last, and warm calls at the same sizes find their values where the call before left
// them. Results against the CPU in f64; layouts against sizes worked out by hand.
#include <boost/test/unit_test.hpp>

#include <cstdint>

#include "autograd/ops.h"
#include "graph/graph.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/kernel_plan.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda_backend.h"
#include "support/device_compare.h"

using namespace kiln;
using test::relative_error;

namespace {

constexpr std::int64_t kN = 16;
constexpr std::int64_t kMatrixBytes = kN * kN * 4;  // f32, a multiple of the 256 B alignment

// sin, a matmul, tanh, a matmul, exp: two generated intermediates of one size, each dead before
// the next is written, and matmuls between them so that no kernel fuses them.
Tensor chain(const Tensor& x, const Tensor& w) {
  Tensor a = sin(x);
  Tensor b = tanh(matmul(a, w));
  return exp(matmul(b, w)) * 2.0;
}

// `a` is read by the matmul, then last by the kernel that computes c (same sizes, element by
// element): c can be written over it.
Tensor reuse(const Tensor& x, const Tensor& w) {
  Tensor a = sin(x);
  Tensor c = a * matmul(a, w) + 1.0;
  return matmul(c, w);
}

template <class F>
const jit::KernelPlan& plan_of(const F& f) {
  const jit::KernelPlan* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  return *plan;
}

bool inside(const Tensor& t, std::uintptr_t begin, std::int64_t bytes) {
  auto p = reinterpret_cast<std::uintptr_t>(t.raw_data());
  return p >= begin && p < begin + static_cast<std::uintptr_t>(bytes);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plan_buffers)

BOOST_AUTO_TEST_CASE(dead_intermediates_share_one_region_of_the_arena) {
  auto f = jit::compile(chain);
  Tensor x = randn({kN, kN}), w = randn({kN, kN}) * 0.2;
  Tensor got = f(x.to(Device::cuda()), w.to(Device::cuda()));
  BOOST_TEST(relative_error(got, chain(x.to(DType::f64), w.to(DType::f64))) <= 1e-5);

  const jit::KernelPlan& plan = plan_of(f);
  const auto& buffers = plan.buffers().buffers();
  BOOST_TEST_REQUIRE(buffers.size() == 2u, plan.str());
  const jit::ArenaLayout layout = plan.traced_layout();
  // a dies at the first matmul, before b is written: both at offset 0.
  BOOST_TEST(layout.offsets[0] == 0);
  BOOST_TEST(layout.offsets[1] == 0);
  BOOST_TEST(layout.bytes == kMatrixBytes);
  BOOST_TEST(layout.live_bound == kMatrixBytes);
  BOOST_TEST(plan.str().find("arena 1.0 kB for 2 values") != std::string::npos, plan.str());
}

BOOST_AUTO_TEST_CASE(a_pointwise_kernel_writes_over_the_input_it_reads_last) {
  auto f = jit::compile(reuse);
  Tensor x = randn({kN, kN}), w = randn({kN, kN}) * 0.2;
  Tensor got = f(x.to(Device::cuda()), w.to(Device::cuda()));
  BOOST_TEST(relative_error(got, reuse(x.to(DType::f64), w.to(DType::f64))) <= 1e-5);

  const jit::KernelPlan& plan = plan_of(f);
  BOOST_TEST(plan.buffers().in_place_count() == 1, plan.str());
  BOOST_TEST_REQUIRE(plan.buffers().buffers().size() == 1u, plan.str());
  BOOST_TEST(plan.buffers().buffers()[0].values.size() == 2u);
  BOOST_TEST(plan.traced_layout().bytes == kMatrixBytes);
  BOOST_TEST(plan.str().find("in place of") != std::string::npos, plan.str());
  // A warm call computes the same from new inputs.
  Tensor x2 = randn({kN, kN});
  Tensor again = f(x2.to(Device::cuda()), w.to(Device::cuda()));
  BOOST_TEST(relative_error(again, reuse(x2.to(DType::f64), w.to(DType::f64))) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(warm_calls_find_their_values_at_the_same_addresses) {
  auto f = jit::compile(chain);
  Tensor w = (randn({kN, kN}) * 0.2).to(Device::cuda());
  auto& alloc = cuda_allocator();
  std::uintptr_t first = 0;
  std::size_t allocs_per_call = 0;
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({kN, kN});
    const std::size_t before = alloc.stats().num_allocs;
    Tensor got = f(x.to(Device::cuda()), w);
    const std::size_t allocs = alloc.stats().num_allocs - before;
    BOOST_TEST(relative_error(got, chain(x.to(DType::f64), w.to(Device::cpu()).to(DType::f64))) <=
               1e-5);
    const std::uintptr_t address = plan_of(f).last_arena_address();
    BOOST_TEST(address != 0u);
    if (call == 1) first = address, allocs_per_call = allocs;
    if (call > 1) {
      BOOST_TEST(address == first);
      BOOST_TEST(allocs == allocs_per_call);
    }
  }
}

BOOST_AUTO_TEST_CASE(what_a_call_returns_is_never_in_the_arena) {
  // The kernel's value leaves the call through a view: it is the caller's, not the plan's.
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor a = sin(x);
    return std::vector<Tensor>{matmul(a, w), a.reshape({kN * kN})};
  };
  auto f = jit::compile(fn);
  Tensor x1 = randn({kN, kN}), x2 = randn({kN, kN}), w = randn({kN, kN});
  auto first = f(x1.to(Device::cuda()), w.to(Device::cuda()));
  auto second = f(x2.to(Device::cuda()), w.to(Device::cuda()));
  const jit::KernelPlan& plan = plan_of(f);
  BOOST_TEST(plan.buffers().empty(), plan.str());
  // The first call's results are untouched by the second.
  auto want = fn(x1.to(DType::f64), w.to(DType::f64));
  BOOST_TEST(relative_error(first[0], want[0]) <= 1e-5);
  BOOST_TEST(relative_error(first[1], want[1]) <= 1e-6);
  BOOST_TEST(relative_error(second[1], sin(x2.to(DType::f64)).reshape({kN * kN})) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(outputs_of_a_plan_with_an_arena_lie_outside_it) {
  auto f = jit::compile(chain);
  Tensor x = randn({kN, kN}), w = randn({kN, kN}) * 0.2;
  Tensor got = f(x.to(Device::cuda()), w.to(Device::cuda()));
  const jit::KernelPlan& plan = plan_of(f);
  BOOST_TEST(!inside(got, plan.last_arena_address(), plan.traced_layout().bytes));
  Tensor kept = got.to(Device::cpu());
  f(randn({kN, kN}).to(Device::cuda()), w.to(Device::cuda()));
  BOOST_TEST(relative_error(got, kept) == 0.0);
}

BOOST_AUTO_TEST_CASE(each_size_of_a_dynamic_dim_gets_its_layout) {
  auto f = jit::compile(chain);
  Tensor w = randn({kN, kN}) * 0.2;
  const std::int64_t sizes[] = {8, 8, 12, 24, 12, 8, 8};
  std::vector<std::uintptr_t> address;
  for (std::int64_t rows : sizes) {
    Tensor x = randn({rows, kN});
    Tensor xd = x.to(Device::cuda());
    jit::mark_dynamic(xd, 0);
    Tensor got = f(xd, w.to(Device::cuda()));
    BOOST_TEST(relative_error(got, chain(x.to(DType::f64), w.to(DType::f64))) <= 1e-5,
               "rows " << rows);
    const jit::KernelPlan& plan = *f.core().plan(static_cast<int>(f.core().num_entries()) - 1);
    address.push_back(plan.last_arena_address());
    // The layout at this call's sizes: two buffers of rows x 16 f32 at offset 0.
    BOOST_TEST(plan.buffers().buffers().size() == 2u);
  }
  BOOST_TEST(f.core().num_entries() == 1u);
  // Two calls in a row at one size: the same block.
  BOOST_TEST(address[0] == address[1]);
  BOOST_TEST(address[5] == address[6]);
}

BOOST_AUTO_TEST_CASE(explain_names_each_steps_buffer_and_the_arena) {
  auto f = jit::compile(chain);
  f(randn({kN, kN}).to(Device::cuda()), randn({kN, kN}).to(Device::cuda()));
  std::string text = f.core().explain();
  BOOST_TEST(text.find("arena: %") != std::string::npos, text);
  BOOST_TEST(text.find("liveness bound") != std::string::npos, text);
}

// running = 0.9 running + 0.1 x, element by element: the kernel computing it writes it into
// running's memory, and nothing is copied back.
BOOST_AUTO_TEST_CASE(a_written_input_is_written_by_the_kernel_that_computes_it) {
  auto update = [](const Tensor& running, const Tensor& x) {
    running.mul_(0.9).add_(x * 0.1);
    return x * 2.0;
  };
  auto f = jit::compile(update);
  Tensor want = randn({64}), got = want.to(Device::cuda());
  const void* memory = got.raw_data();
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({64});
    Tensor y = f(got, x.to(Device::cuda()));
    update(want, x);
    BOOST_TEST(relative_error(got, want) <= 1e-6, "call " << call);
    BOOST_TEST(relative_error(y, x * 2.0) <= 1e-6);
  }
  BOOST_TEST(got.raw_data() == memory);
  const graph::Graph& g = f.core().graph(0);
  BOOST_TEST_REQUIRE(g.mutated_inputs.size() == 1u);
  const jit::KernelPlan& plan = plan_of(f);
  BOOST_TEST(plan.buffers().written_into(g.outputs.back()) == g.mutated_inputs[0], plan.str());
  // A non-contiguous argument takes the copy back.
  Tensor wide = randn({64, 2}), strided = wide.to(Device::cuda()).slice(1, 0, 1).reshape({64});
  Tensor x = randn({64});
  f(strided, x.to(Device::cuda()));
  Tensor expect = wide.slice(1, 0, 1).reshape({64}) * 0.9 + x * 0.1;
  BOOST_TEST(relative_error(strided, expect) <= 1e-6);
}

// A matmul reads the input's old value, whatever order the plan runs it and the write in: the
// write goes into the input's memory only after its last read.
BOOST_AUTO_TEST_CASE(the_old_value_of_a_written_input_is_read_before_it_is_overwritten) {
  auto fn = [](const Tensor& running, const Tensor& x, const Tensor& w) {
    Tensor old = matmul(running.reshape({1, kN}), w);
    running.add_(x);
    return old;
  };
  auto f = jit::compile(fn);
  Tensor r = randn({kN}), x = randn({kN}), w = randn({kN, kN});
  Tensor got_r = r.to(Device::cuda());
  Tensor got = f(got_r, x.to(Device::cuda()), w.to(Device::cuda()));
  Tensor want_r = r.to(DType::f64);
  Tensor want = fn(want_r, x.to(DType::f64), w.to(DType::f64));
  BOOST_TEST(relative_error(got, want) <= 1e-5);
  BOOST_TEST(relative_error(got_r, want_r) <= 1e-6);
}

// `fn(x [2, 3, 4, 8], w [24, 5])` computes heads, permutes them to [2, 4, 3, 8] and reshapes
// them for a matmul: compiled, the kernel making them walks its domain in the permute's order,
// so the reshape is a view and a warm call launches the plan's kernels and no copy.
template <class Fn>
void check_written_for_its_permute(Fn fn) {
  auto f = jit::compile(fn);
  Tensor x = randn({2, 3, 4, 8}), w = randn({24, 5});
  Tensor xd = x.to(Device::cuda()), wd = w.to(Device::cuda());
  f(xd, wd);
  auto& stats = jit::codegen::launch_stats();
  const std::int64_t before = stats.launches.load();
  Tensor got = f(xd, wd);
  const std::int64_t launched = stats.launches.load() - before;
  BOOST_TEST(relative_error(got, fn(x.to(DType::f64), w.to(DType::f64))) <= 1e-5);
  const jit::KernelPlan& plan = plan_of(f);
  BOOST_TEST(plan.str().find("walks its domain in the order [0, 2, 1, 3]") != std::string::npos,
             plan.str());
  BOOST_TEST(launched == plan.kernel_count(), plan.str());
}

BOOST_AUTO_TEST_CASE(a_kernel_writes_in_the_layout_its_permute_reads) {
  check_written_for_its_permute([](const Tensor& x, const Tensor& w) {
    Tensor heads = (sin(x) * 2.0).permute({0, 2, 1, 3});
    return matmul(heads.reshape({2, 4, 24}), w);
  });
}

// An index-aware kernel (rotate_half's cat) is rendered to store each element at its place in
// the permute's layout.
BOOST_AUTO_TEST_CASE(an_index_aware_kernel_writes_in_the_layout_its_permute_reads) {
  check_written_for_its_permute([](const Tensor& x, const Tensor& w) {
    Tensor rotated = cat({neg(x.slice(3, 4, 8)), x.slice(3, 0, 4)}, 3) * 3.0 + x;
    return matmul(rotated.permute({0, 2, 1, 3}).reshape({2, 4, 24}), w);
  });
}

// A compiled backward owns its saved tensors: without retain_graph its plan drops each after its
// last reader (AOTAutograd's boxed convention), so the backward's peak is below the one that must
// keep them all; the gradients are the same either way, and match f64 on the CPU.
BOOST_AUTO_TEST_CASE(a_compiled_backward_frees_each_saved_tensor_after_its_last_reader) {
  auto fn = [](const Tensor& x, const Tensor& w1, const Tensor& w2) {
    Tensor h1 = relu(matmul(x, w1));
    return sum(relu(matmul(h1, w2)));
  };
  auto f = jit::compile(fn);
  Tensor x = randn({512, 8}), w1 = randn({8, 256}) * 0.3, w2 = randn({256, 256}) * 0.1;
  Tensor xd = x.to(Device::cuda());
  Tensor w1d = w1.to(Device::cuda()).requires_grad_(), w2d = w2.to(Device::cuda()).requires_grad_();
  auto& alloc = cuda_allocator();
  // The backward's peak above what the forward left, and the gradients.
  auto backward_peak = [&](bool retain_graph) {
    w1d.set_grad(Tensor());
    w2d.set_grad(Tensor());
    Tensor loss = f(xd, w1d, w2d);
    alloc.reset_peak();
    const std::size_t start = alloc.stats().allocated;
    loss.backward({}, retain_graph);
    return static_cast<std::int64_t>(alloc.stats().peak_allocated - start);
  };
  backward_peak(false);  // traced, the allocator's cache settled
  const std::int64_t kept = backward_peak(true);
  Tensor g1_kept = w1d.grad().to(Device::cpu()), g2_kept = w2d.grad().to(Device::cpu());
  const std::int64_t freed = backward_peak(false);
  BOOST_TEST(freed < kept, "peak " << freed << " bytes freeing, " << kept << " keeping");
  BOOST_TEST(relative_error(w1d.grad(), g1_kept) == 0.0);
  BOOST_TEST(relative_error(w2d.grad(), g2_kept) == 0.0);
  Tensor x64 = x.to(DType::f64), w1r = w1.to(DType::f64).requires_grad_(),
         w2r = w2.to(DType::f64).requires_grad_();
  fn(x64, w1r, w2r).backward();
  BOOST_TEST(relative_error(w1d.grad(), w1r.grad()) <= 1e-4);
  BOOST_TEST(relative_error(w2d.grad(), w2r.grad()) <= 1e-4);
}

// A static KV cache written at one position per call (gpt-fast's decode step): the plan writes
// the index_copy's rows into the cache itself and nothing else of it, against slices set by hand.
BOOST_AUTO_TEST_CASE(a_cache_written_by_index_copy_moves_only_the_written_rows) {
  constexpr std::int64_t kB = 2, kH = 2, kS = 16, kD = 8;
  Tensor cache = zeros({kB, kH, kS, kD}, DType::f32, Device::cuda());
  auto step = jit::compile([&cache](const Tensor& k, const Tensor& pos) {
    cache.index_copy_(2, pos, k);
    return (cache * 2.0).sum({2});  // reads the cache as written
  });
  Tensor want = zeros({kB, kH, kS, kD}, DType::f64);
  auto& stats = jit::codegen::launch_stats();
  std::int64_t written = 0;
  for (std::int64_t p = 0; p < 5; ++p) {
    Tensor k = randn({kB, kH, 1, kD});
    Tensor pos = from_vector(std::vector<std::int64_t>{p}).to(Device::cuda());
    const std::int64_t before = stats.bytes_written.load();
    Tensor got = step(k.to(Device::cuda()), pos);
    written = stats.bytes_written.load() - before;
    for (std::int64_t b = 0; b < kB; ++b)
      for (std::int64_t h = 0; h < kH; ++h)
        for (std::int64_t d = 0; d < kD; ++d)
          want.data<double>()[((b * kH + h) * kS + p) * kD + d] =
              k.data<float>()[(b * kH + h) * kD + d];
    BOOST_TEST(relative_error(cache, want) == 0);
    BOOST_TEST(relative_error(got, (want * 2.0).sum({2})) < 1e-6);
  }
  BOOST_TEST(step.core().num_entries() == 1u);  // the position is data, not a guard
  BOOST_TEST(step.explain().find("by the source's slices alone") != std::string::npos,
             step.explain());
  // The row (128 bytes) and the sums (128 bytes): never the cache's 2048.
  const std::int64_t row_bytes = kB * kH * kD * 4;
  BOOST_TEST(written == 2 * row_bytes);
}

// A value of the cache from before its write, which the fuser computes in the kernel after it:
// the old rows are read after the write, so index_copy stays out of place, and right.
BOOST_AUTO_TEST_CASE(a_read_of_the_cache_before_its_write_keeps_the_old_rows) {
  Tensor cache = randn({4, 8});
  Tensor device_cache = cache.to(Device::cuda());
  auto step = jit::compile([&device_cache](const Tensor& row, const Tensor& pos) {
    Tensor old = device_cache.slice(0, 0, 2) * 3.0;
    device_cache.index_copy_(0, pos, row);
    return old + device_cache.slice(0, 2, 4);
  });
  Tensor want = cache.to(DType::f64);
  for (std::int64_t p : {1, 3}) {
    Tensor row = randn({1, 8});
    Tensor pos = from_vector(std::vector<std::int64_t>{p}).to(Device::cuda());
    Tensor old = want.slice(0, 0, 2).clone();
    for (std::int64_t j = 0; j < 8; ++j) want.data<double>()[p * 8 + j] = row.data<float>()[j];
    Tensor got = step(row.to(Device::cuda()), pos);
    BOOST_TEST(relative_error(got, old * 3.0 + want.slice(0, 2, 4)) < 1e-6);
    BOOST_TEST(relative_error(device_cache, want) == 0);
  }
  BOOST_TEST(step.explain().find("by the source's slices alone") == std::string::npos,
             step.explain());
}

// A source that views the cache would be read while the rows are written: out of place.
BOOST_AUTO_TEST_CASE(a_source_viewing_the_cache_keeps_index_copy_out_of_place) {
  Tensor cache = arange(0, 12, 1, DType::f32).reshape({4, 3}).to(Device::cuda());
  auto step = jit::compile([&cache](const Tensor& pos) {
    cache.index_copy_(0, pos, cache.slice(0, 0, 2));
    return cache.sum({1});
  });
  Tensor got = step(from_vector(std::vector<std::int64_t>{1, 2}).to(Device::cuda()));
  Tensor want = from_vector(std::vector<double>{0, 1, 2, 0, 1, 2, 3, 4, 5, 9, 10, 11}, {4, 3});
  BOOST_TEST(relative_error(cache, want) == 0);
  BOOST_TEST(relative_error(got, want.sum({1})) == 0);
  BOOST_TEST(step.explain().find("by the source's slices alone") == std::string::npos,
             step.explain());
}

BOOST_AUTO_TEST_SUITE_END()
