// Compiled functions on CUDA tensors: the graph runs as generated kernels (one per fusion
// group), matches the CPU, serves every size of a dynamic dim with the same kernels, and takes
// the node-by-node path (with autograd) when gradients are needed.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "cache/disk_cache.h"
#include "jit/accuracy_check.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/cuda_backend.h"
#include "runtime/device_checks.h"
#include "runtime/dispatch.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/device_compare.h"
#include "support/op_samples.h"
#include "support/reference.h"

using namespace kiln;
using test::relative_error;

namespace {

Tensor block(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor h = layer_norm(x, {16}, w, b, 1e-5);
  Tensor a = gelu(h) * 0.5 + h;
  return softmax(a, -1) + log_softmax(a * 2.0, -1).exp() * 0.25;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// An op chain no other test compiles: compiled, its numbers are literals of its one kernel's
// code, so that kernel is compiled (and logged) here. (Eager ops take numbers as arguments, so
// their kernels are the op sweep's.)
Tensor unlogged_chain(const Tensor& x) {
  return expm1(x * 0.375) - log1p(x * x) * 3.5;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(jit_cuda)

BOOST_AUTO_TEST_CASE(a_compiled_block_runs_as_generated_kernels_and_matches_the_cpu) {
  Tensor x = randn({6, 16}), w = randn({16}), b = randn({16});
  auto f = jit::compile(block);
  Tensor got = f(x.to(Device::cuda()), w.to(Device::cuda()), b.to(Device::cuda()));
  BOOST_TEST(got.device().str() == "cuda:0");
  BOOST_TEST(relative_error(got, block(x, w, b)) <= 1e-5);
  std::string e = f.explain();
  BOOST_TEST(contains(e, "generated kernels for 1 calls"), e);
  BOOST_TEST(contains(e, "kernel k_"), e);
  BOOST_TEST(f.core().fusion(0).launch_count() <= 3, e);
}

BOOST_AUTO_TEST_CASE(every_op_compiled_on_cuda_matches_eager_cpu) {
  int runs = 0;
  for (OpId op : all_ops()) {
    for (DType dtype : test::sample_dtypes(op)) {
      for (const auto& s : test::op_samples(op, dtype)) {
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          std::vector<Tensor> on;
          for (const auto& t : s.inputs) on.push_back(t.to(Device::cuda()));
          std::vector<Tensor> got;
          std::int64_t kernel_calls = 0;
          std::string explained;
          if (on.size() == 1) {
            auto f = jit::compile([&](const Tensor& a) { return s.run({a}); });
            got = f(on[0]);
            kernel_calls = f.core().stats().kernel_calls;
            explained = f.explain();
          } else if (on.size() == 2) {
            auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return s.run({a, b}); });
            got = f(on[0], on[1]);
            kernel_calls = f.core().stats().kernel_calls;
            explained = f.explain();
          } else if (on.size() == 3) {
            auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
              return s.run({a, b, c});
            });
            got = f(on[0], on[1], on[2]);
            kernel_calls = f.core().stats().kernel_calls;
            explained = f.explain();
          } else {
            continue;
          }
          // A graph that copies to the host runs node by node; every other one as kernels,
          // but for an attention the kernels refuse (f64), which explain() names and the
          // kernel-call count leaves out.
          bool fell_back =
              explained.find("fell back to primitive ops at run time") != std::string::npos;
          BOOST_TEST(kernel_calls == (op == OpId::to_device || fell_back ? 0 : 1));
          bool attention_f64 =
              dtype == DType::f64 && (op == OpId::attention || op == OpId::attention_backward);
          BOOST_TEST((!fell_back || attention_f64));
          auto want = s.run(s.inputs);
          BOOST_TEST_REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            BOOST_TEST(got[i].dtype() == want[i].dtype());
            // Integers and bools exactly; floating outputs within ulps of their dtype
            // (test::single_op_ulps says why each bound).
            std::string mismatch = test::single_op_mismatch(op, got[i], want[i]);
            BOOST_TEST(mismatch.empty(), mismatch);
          }
          ++runs;
        }
      }
    }
  }
  BOOST_TEST(runs > 200);
}

BOOST_AUTO_TEST_CASE(one_set_of_kernels_serves_every_batch_size) {
  Tensor w = randn({16}), b = randn({16});
  Tensor wd = w.to(Device::cuda()), bd = b.to(Device::cuda());
  auto f = jit::compile(block);
  for (std::int64_t batch : {2, 3, 5, 8, 13}) {
    Tensor x = randn({batch, 16});
    Tensor got = f(x.to(Device::cuda()), wd, bd);
    BOOST_TEST(relative_error(got, block(x, w, b)) <= 1e-5, "batch " << batch);
  }
  BOOST_TEST(f.core().num_entries() == 2u);  // the first size, then one symbolic entry
  BOOST_TEST(contains(f.core().graph(1).str(), "s0"));
  BOOST_TEST(f.core().stats().kernel_calls == 5);
}

BOOST_AUTO_TEST_CASE(cross_entropy_is_two_kernels_and_matches_the_cpu) {
  // The target's log-probability is picked inside the log_softmax kernel (a row select); the
  // mean over the batch is the second kernel. Ignored targets (-100) count in neither sum.
  auto ce = [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t); };
  auto f = jit::compile(ce);
  auto& stats = jit::codegen::launch_stats();
  Tensor t = from_vector(std::vector<std::int64_t>{3, -100, 0, 299, 7, 150, -100, 1, 2});
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Tensor x = (randn({9, 300}) * 3.0).to(dtype);
      Tensor want = ce(x, t);
      f(x.to(Device::cuda()), t.to(Device::cuda()));
      std::int64_t launches = stats.launches;
      Tensor got = f(x.to(Device::cuda()), t.to(Device::cuda()));
      BOOST_TEST(stats.launches - launches == 2);
      double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : 1e-2;
      BOOST_TEST(relative_error(got, want) <= tol);
    }
  }
  // A target outside the classes is an IndexError, as eagerly on the CPU.
  Tensor x = randn({3, 5});
  Tensor bad = from_vector(std::vector<std::int64_t>{1, 5, 0});
  BOOST_CHECK_THROW(ce(x, bad), IndexError);
  // A warm call reads no flag (no host sync): the check waits for the copy of the loss.
  run_device_checks();
  Tensor loss = f(x.to(Device::cuda()), bad.to(Device::cuda()));
  BOOST_TEST(pending_device_checks() == 1u);
  try {
    loss.to(Device::cpu());
    BOOST_FAIL("no error for target 5 of 5 classes");
  } catch (const IndexError& e) {
    BOOST_TEST(contains(e.what(), "index 5 is out of range for dim 1 of size 5"), e.what());
  }
}

// A column of an input read once per row by a reduction kernel: select traces as slice then a
// unit reshape, both applied to memory on the host, and the kernel reads the reshape with its
// strides (once it read the [rows, 1] slice as if it were the rows, every row its first element).
BOOST_AUTO_TEST_CASE(a_strided_column_read_per_row_matches_the_cpu) {
  Generator gen(3);
  Tensor x = randn({8, 5}, DType::f32, &gen);
  Tensor table = randint(0, 5, {8, 9}, DType::i64, &gen);
  auto picked = [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t.select(1, 2)); };
  auto scaled = [](const Tensor& x, const Tensor& t) {
    return cast(t.select(1, 4), DType::f32) * sum(x, {1});
  };
  for (int k = 0; k < 2; ++k) {
    auto fn = [&](const Tensor& a, const Tensor& b) {
      return k == 0 ? picked(a, b) : scaled(a, b);
    };
    auto f = jit::compile(fn);
    Tensor got = f(x.to(Device::cuda()), table.to(Device::cuda()));
    BOOST_TEST(relative_error(got, fn(x, table)) <= 1e-6, (k == 0 ? "cross_entropy" : "product"));
  }
}

BOOST_AUTO_TEST_CASE(intermediates_are_released_after_their_last_reader) {
  // Four kernels in a chain (softmax over alternating dims does not fuse); each makes a 16 KiB
  // intermediate that only the next reads, so two are alive at once, never four.
  auto chain = [](const Tensor& x) {
    Tensor h1 = softmax(x, 1), h2 = softmax(h1 * 2.0, 0), h3 = softmax(h2 * 3.0, 1);
    return softmax(h3, 0);
  };
  Tensor x = randn({64, 64});
  Tensor xd = x.to(Device::cuda());
  auto f = jit::compile(chain);
  f(xd);
  const auto* plan = f.core().plan(0);
  BOOST_TEST_REQUIRE(plan != nullptr);
  BOOST_TEST(plan->kernel_count() == 4);
  BOOST_TEST(plan->total_bytes() == 4 * 16384);
  BOOST_TEST(plan->peak_bytes() == 2 * 16384);
  BOOST_TEST(contains(f.explain(), "32768 bytes at peak"), f.explain());
  // The device allocator agrees: the warm call's peak is two intermediates, not four.
  auto& allocator = cuda_allocator();
  std::size_t before = allocator.stats().allocated;
  allocator.reset_peak();
  Tensor got = f(xd);
  std::size_t peak = allocator.stats().peak_allocated - before;
  BOOST_TEST(peak <= 2 * 16384 + 4096, "peak " << peak);
  BOOST_TEST(relative_error(got, chain(x)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_warm_call_compiles_nothing_and_launches_only_its_kernels) {
  auto& stats = jit::codegen::launch_stats();
  Tensor x = randn({6, 16}).to(Device::cuda()), w = randn({16}).to(Device::cuda()),
         b = randn({16}).to(Device::cuda());
  auto f = jit::compile(block);
  f(x, w, b);
  std::int64_t compiles = stats.compiles, launches = stats.launches;
  f(x, w, b);
  BOOST_TEST(stats.compiles - compiles == 0);
  BOOST_TEST(stats.launches - launches == f.core().fusion(0).launch_count());
  // The same block eagerly: one launch per op.
  launches = stats.launches;
  block(x, w, b);
  BOOST_TEST(stats.launches - launches >= 15);

  // A training step's loss: nothing is compiled, no device memory comes from the backend (the
  // caching allocator serves it), and no flag is read back (the host never waits).
  auto loss = jit::compile([](const Tensor& logits, const Tensor& t) {
    return cross_entropy(layer_norm(logits, {logits.size(1)}), t);
  });
  Tensor target = test::i64s({1, 0, 15, 3, 7, 2}).to(Device::cuda());
  loss(x, target);
  run_device_checks();
  auto& allocator = cuda_allocator();
  std::size_t backend_allocs = allocator.stats().num_backend_allocs;
  compiles = stats.compiles;
  for (int step = 0; step < 3; ++step) loss(x, target);
  BOOST_TEST(stats.compiles - compiles == 0);
  BOOST_TEST(allocator.stats().num_backend_allocs - backend_allocs == 0u);
  BOOST_TEST(pending_device_checks() == 3u);
  run_device_checks();
}

BOOST_AUTO_TEST_CASE(symbolic_reshapes_read_by_kernels_take_each_calls_sizes) {
  auto fn = [](const Tensor& x) {
    Tensor rows = x.reshape({-1, 4});  // [2*s0, 4]: a view the kernel reads through
    return std::vector<Tensor>{sum(rows * 2.0, {1}), softmax(rows, 1) + 1.0};
  };
  auto f = jit::compile(fn);
  for (std::int64_t batch : {2, 3, 5, 9}) {
    Tensor x = randn({batch, 8});
    auto got = f(x.to(Device::cuda()));
    auto want = fn(x);
    BOOST_TEST(relative_error(got[0], want[0]) <= 1e-5, "batch " << batch);
    BOOST_TEST(relative_error(got[1], want[1]) <= 1e-5, "batch " << batch);
  }
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().stats().kernel_calls == 4);
}

BOOST_AUTO_TEST_CASE(numbers_in_the_trace_and_mixed_dtypes) {
  auto f = jit::compile([](const Tensor& x, const Tensor& i) {
    return std::vector<Tensor>{(x * 3 + i) / 2.0, sum(x > 0.0, {1}), argmax(x, 1)};
  });
  Tensor x = randn({4, 7}), i = test::i64s({1, 2, 3, 4, 5, 6, 7});
  auto got = f(x.to(Device::cuda()), i.to(Device::cuda()));
  Tensor want0 = (x * 3 + i) / 2.0;
  BOOST_TEST(relative_error(got[0], want0) <= 1e-6);
  BOOST_TEST(dtype_name(got[1].dtype()) == "i64");
  Tensor s = got[1].to(Device::cpu()), ref = sum(x > 0.0, {1});
  Tensor am = got[2].to(Device::cpu()), ref_am = argmax(x, 1);
  for (int r = 0; r < 4; ++r) {
    BOOST_TEST(s.data<std::int64_t>()[r] == ref.data<std::int64_t>()[r]);
    BOOST_TEST(am.data<std::int64_t>()[r] == ref_am.data<std::int64_t>()[r]);
  }
}

BOOST_AUTO_TEST_CASE(a_cast_to_half_inside_a_kernel_still_rounds) {
  // Found by the fuzzer: f16 values live in float registers, and the round trip was dropped.
  auto f = jit::compile([](const Tensor& x) {
    return std::vector<Tensor>{x.to(DType::f16).to(DType::f32) * 1.0,
                               sqrt(x.to(DType::bf16).to(DType::f32) + 5.0)};
  });
  Tensor x = randn({5, 9});
  auto got = f(x.to(Device::cuda()));
  Tensor want0 = x.to(DType::f16).to(DType::f32),
         want1 = sqrt(x.to(DType::bf16).to(DType::f32) + 5.0);
  BOOST_TEST(relative_error(got[0], want0) == 0.0);
  BOOST_TEST(relative_error(got[1], want1) <= 1e-7);
}

BOOST_AUTO_TEST_CASE(inputs_that_need_gradients_run_compiled_forward_and_backward_plans) {
  Tensor x0 = randn({3, 16}), w0 = randn({16}), b0 = randn({16});
  Tensor x = x0.to(Device::cuda()).detach().requires_grad_();
  Tensor w = w0.to(Device::cuda()).detach().requires_grad_();
  Tensor b = b0.to(Device::cuda()).detach().requires_grad_();
  auto f = jit::compile([](const Tensor& x, const Tensor& w, const Tensor& b) {
    return sum(layer_norm(x, {16}, w, b, 1e-5) * 2.0);
  });
  Tensor y = f(x, w, b);
  y.backward();
  BOOST_TEST(f.core().stats().kernel_calls == 1);
  BOOST_TEST(f.core().aot(0) != nullptr);
  BOOST_TEST(x.grad().device().str() == "cuda:0");  // the seed of backward() is on y's device
  // The same gradients on the CPU.
  Tensor xc = x0.detach().requires_grad_(), wc = w0.detach().requires_grad_(),
         bc = b0.detach().requires_grad_();
  sum(layer_norm(xc, {16}, wc, bc, 1e-5) * 2.0).backward();
  BOOST_TEST(relative_error(x.grad(), xc.grad()) <= 1e-4);
  BOOST_TEST(relative_error(w.grad(), wc.grad()) <= 1e-4);
  BOOST_TEST(relative_error(b.grad(), bc.grad()) <= 1e-4);
  // Under no_grad the same function is another entry, a forward plan alone.
  NoGradGuard no_grad;
  f(x, w, b);
  BOOST_TEST(f.core().stats().kernel_calls == 2);
  BOOST_TEST(f.core().num_entries() == 2u);
  BOOST_TEST(f.core().aot(1) == nullptr);
  BOOST_TEST(f.core().plan(1) != nullptr);
}

BOOST_AUTO_TEST_CASE(kiln_check_accuracy_passes_correct_kernels_and_names_a_wrong_one) {
  setenv("KILN_CHECK", "accuracy", 1);
  BOOST_TEST(jit::checking_accuracy());
  Tensor x = randn({6, 16}), w = randn({16}), b = randn({16});
  auto f = jit::compile(block);
  BOOST_CHECK_NO_THROW(f(x.to(Device::cuda()), w.to(Device::cuda()), b.to(Device::cuda())));
  unsetenv("KILN_CHECK");
  BOOST_TEST(!jit::checking_accuracy());
  // The checker against a "device" result with one element off.
  const graph::Graph& g = f.core().graph(0);
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs)
    values[in.value] = in.kind == graph::InputKind::argument
                           ? std::vector<Tensor>{x, w, b}[in.arg_index].to(Device::cuda())
                           : in.tensor;
  int n = 0;  // the first node: exp of an argument or the first reduction, whichever
  const graph::Node& first = g.nodes[n];
  std::vector<Tensor> operands;
  for (int v : first.inputs) operands.push_back(values[v].to(Device::cpu()));
  auto results = dispatch(first.op, operands, first.attrs);
  Tensor wrong = results[0].contiguous().to(DType::f64);
  static_cast<double*>(wrong.raw_data())[0] += 1.0;
  values[first.outputs[0]] = wrong.to(results[0].dtype()).to(Device::cuda());
  BOOST_CHECK_EXCEPTION(
      jit::check_step_accuracy(g, {n}, values, {}, "kernel k_test (group 0)", "// the source"),
      Error, [&](const Error& e) {
        std::string m = e.what();
        return contains(m, "kernel k_test (group 0) diverges") &&
               contains(m, fmt::format("%{} element 0", first.outputs[0])) &&
               contains(m, "// the source");
      });
}

BOOST_AUTO_TEST_CASE(kiln_log_kernels_reports_each_compile) {
  // Without the disk cache: a kernel an earlier run stored there would not be compiled again.
  setenv("KILN_CACHE", "0", 1);
  cache::reset_process_disk_cache();
  setenv("KILN_LOG", "kernels", 1);
  reload_log_settings();
  std::string err = kiln::test::capture_output(2, [] {
    Tensor x = randn({3, 5}).to(Device::cuda());
    (void)jit::compile(unlogged_chain)(x);
  });
  unsetenv("KILN_LOG");
  reload_log_settings();
  unsetenv("KILN_CACHE");
  cache::reset_process_disk_cache();
  BOOST_TEST(contains(err, "kiln: kernel k_"), err);
  BOOST_TEST(contains(err, "bytes of source, compiled in"), err);
}

BOOST_AUTO_TEST_SUITE_END()
