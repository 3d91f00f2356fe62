// CUDA Graph replay of compiled plans (jit/cuda_graphs.h): a warm call is one graph launch with
// no kernel launch counted, its results follow the arguments of each call, an output held
// across replays keeps its values, a moved parameter records again, new sizes record up to the
// limit, and what a replay cannot repeat (random draws) runs without a graph, said in explain().
// Results against the CPU reference on host copies.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "demos/zoo/catalog.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "jit/cuda_graphs.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda/launch_blocking.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/device_checks.h"
#include "runtime/grad_mode.h"
#include "runtime/random.h"
#include "support/device_compare.h"

using namespace kiln;
using test::relative_error;

namespace {

jit::CompileOptions with_graphs(const char* name) {
  jit::CompileOptions o;
  o.name = name;
  o.cuda_graphs = true;
  return o;
}

Tensor host(const Tensor& t) {
  return t.to(Device::cpu());
}

struct Counts {
  std::int64_t launches, graph_launches, captures, input_copies, handed_over;
  static Counts now() {
    auto& s = jit::codegen::launch_stats();
    return {s.launches.load(), s.graph_launches.load(), s.graph_captures.load(),
            s.graph_input_copies.load(), s.graph_outputs_handed_over.load()};
  }
  Counts since(const Counts& before) const {
    return {launches - before.launches, graph_launches - before.graph_launches,
            captures - before.captures, input_copies - before.input_copies,
            handed_over - before.handed_over};
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(jit_cuda_graphs)

// The first call warms up, the second captures and replays, the rest replay: one graph launch
// and one argument copy each, no kernel launch counted, and the values of each call's argument.
BOOST_AUTO_TEST_CASE(a_warm_call_is_one_graph_launch_following_its_arguments) {
  Tensor w = randn({16, 16});
  Tensor w_dev = w.to(Device::cuda());
  auto f = jit::compile(
      [&](const Tensor& x) { return relu(matmul(exp(x) * 0.5, w_dev) + 1.0).sum({1}); },
      with_graphs("graphed"));
  std::vector<Counts> per_call;
  for (int call = 0; call < 5; ++call) {
    Tensor x = randn({8, 16});
    Counts before = Counts::now();
    Tensor got = f(x.to(Device::cuda()));
    per_call.push_back(Counts::now().since(before));
    BOOST_TEST(relative_error(got, relu(matmul(exp(x) * 0.5, w) + 1.0).sum({1})) <= 1e-5);
  }
  BOOST_TEST(per_call[0].graph_launches == 0);  // traced and warmed up
  BOOST_TEST(per_call[0].launches > 0);
  BOOST_TEST(per_call[1].captures == 1);
  BOOST_TEST(per_call[1].graph_launches == 1);
  for (int call = 2; call < 5; ++call) {
    BOOST_TEST(per_call[call].launches == 0);
    BOOST_TEST(per_call[call].graph_launches == 1);
    BOOST_TEST(per_call[call].captures == 0);
    BOOST_TEST(per_call[call].input_copies == 1);
  }
  BOOST_TEST(f.core().num_entries() == 1u);
  BOOST_REQUIRE(f.core().graphs(0));
  BOOST_TEST(f.core().graphs(0)->recorded() == 1);
  BOOST_TEST(f.explain().find("CUDA graphs: 1 captured") != std::string::npos, f.explain());
}

// With the virtual GPU's execution off (what a benchmark of the host's cost sets), a replay is
// counted and returns: neither its kernels nor its cuBLASLt call run, so its output still holds
// the last replay that ran. With execution on again the next replay computes its argument's.
BOOST_AUTO_TEST_CASE(with_execution_off_a_replay_is_counted_and_runs_nothing) {
  if (!cuda::backend().properties(0).is_virtual) return;  // a GPU always runs what it queues
  Tensor w = randn({16, 16});
  Tensor w_dev = w.to(Device::cuda());
  auto f = jit::compile([&](const Tensor& x) { return relu(matmul(x, w_dev) + 1.0); },
                        with_graphs("execution_off"));
  auto want = [&](const Tensor& x) { return relu(matmul(x, w) + 1.0); };
  Tensor a = randn({8, 16}), b = randn({8, 16});
  for (int call = 0; call < 3; ++call) f(a.to(Device::cuda()));  // warm-up, capture, replay
  const std::vector<float> ran = host(f(a.to(Device::cuda()))).to_vector<float>();
  const bool executed = cuda::vgpu::set_kernel_execution(false);
  Counts before = Counts::now();
  Tensor skipped = f(b.to(Device::cuda()));
  Counts off = Counts::now().since(before);
  cuda::vgpu::set_kernel_execution(executed);
  BOOST_TEST(off.graph_launches == 1);
  BOOST_TEST(off.launches == 0);
  BOOST_TEST(host(skipped).to_vector<float>() == ran, boost::test_tools::per_element());
  BOOST_TEST(relative_error(f(b.to(Device::cuda())), want(b)) <= 1e-5);
  BOOST_TEST(relative_error(host(skipped), want(a)) <= 1e-5);  // handed over, still a's
}

// An output the caller still holds when the next replay comes is handed over first: its bytes
// move to memory of its own, so the replay that rewrites the graph's memory leaves it as it was.
// One nobody kept costs nothing.
BOOST_AUTO_TEST_CASE(an_output_held_across_replays_keeps_its_values) {
  auto f = jit::compile([](const Tensor& x) { return sin(x) * 3.0; }, with_graphs("held"));
  Tensor x0 = randn({64});
  f(x0.to(Device::cuda()));
  f(x0.to(Device::cuda()));  // captured
  Tensor x1 = randn({64}), x2 = randn({64});
  Tensor y1 = f(x1.to(Device::cuda()));
  Tensor view = y1.slice(0, 8, 16);  // a view shares the hand-over
  Counts before = Counts::now();
  Tensor y2 = f(x2.to(Device::cuda()));
  BOOST_TEST(Counts::now().since(before).handed_over == 1);
  BOOST_TEST(relative_error(y1, sin(x1) * 3.0) <= 1e-6);
  BOOST_TEST(relative_error(view, (sin(x1) * 3.0).slice(0, 8, 16)) <= 1e-6);
  BOOST_TEST(relative_error(y2, sin(x2) * 3.0) <= 1e-6);
  y1 = Tensor();
  view = Tensor();
  y2 = Tensor();
  before = Counts::now();
  Tensor y3 = f(x1.to(Device::cuda()));
  BOOST_TEST(Counts::now().since(before).handed_over == 0);
  BOOST_TEST(relative_error(y3, sin(x1) * 3.0) <= 1e-6);
  // The decode loop's shape: the output fed back as the next call's argument.
  Tensor t = x2.to(Device::cuda());
  Tensor want = x2;
  for (int i = 0; i < 4; ++i) {
    t = f(t);
    want = sin(want) * 3.0;
  }
  BOOST_TEST(relative_error(t, want) <= 1e-5);
}

// A parameter the function declared is read in place: a replay checks its address, and a
// reassigned one makes the entry record again instead of reading the old memory.
BOOST_AUTO_TEST_CASE(a_reassigned_parameter_records_the_graph_again) {
  NoGradGuard inference;  // a call that needs gradients runs the training plans
  nn::Linear lin(16, 8);
  lin.to(Device::cuda());
  auto options = with_graphs("linear");
  options.modules = {&lin};
  auto f = jit::compile([&](const Tensor& x) { return tanh(lin(x)); }, options);
  Tensor x = randn({4, 16});
  auto reference = [&] {
    return tanh(matmul(x, host(lin.weight).transpose(0, 1)) + host(lin.bias));
  };
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(relative_error(f(x.to(Device::cuda())), reference()) <= 1e-5);
  lin.weight = randn({8, 16}).to(Device::cuda()).requires_grad_();
  Counts before = Counts::now();
  Tensor got = f(x.to(Device::cuda()));
  BOOST_TEST(Counts::now().since(before).captures == 1);
  BOOST_TEST(relative_error(got, reference()) <= 1e-5);
  BOOST_TEST(relative_error(f(x.to(Device::cuda())), reference()) <= 1e-5);
  BOOST_TEST(f.explain().find("moved since its graph was captured") != std::string::npos,
             f.explain());
}

// Each set of sizes records a graph of its own, up to cuda_graph_limit; past it the entry runs
// its plan, and explain() says why.
BOOST_AUTO_TEST_CASE(new_sizes_record_again_up_to_the_limit) {
  auto options = with_graphs("sizes");
  options.cuda_graph_limit = 2;
  options.dynamic = jit::DynamicMode::always;
  auto f = jit::compile([](const Tensor& x) { return (x * x + 1.0).sum({1}); }, options);
  for (std::int64_t rows : {3, 5, 7})
    for (int call = 0; call < 3; ++call) {
      Tensor x = randn({rows, 32});
      BOOST_TEST(relative_error(f(x.to(Device::cuda())), (x * x + 1.0).sum({1})) <= 1e-5);
    }
  BOOST_TEST(f.core().num_entries() == 1u, f.explain());
  BOOST_TEST(f.core().graphs(0)->recorded() == 2);
  BOOST_TEST(f.explain().find("sets of sizes have graphs already") != std::string::npos,
             f.explain());
}

// A static KV cache the function captured and writes at one position per call: its address is
// fixed, so replays write the row straight into it; the position is a device tensor copied into
// the graph's static buffer, so every call writes where it is told.
BOOST_AUTO_TEST_CASE(a_kv_cache_is_written_in_place_by_replays) {
  constexpr std::int64_t kB = 2, kH = 2, kS = 8, kD = 4;
  Tensor cache = zeros({kB, kH, kS, kD}, DType::f32, Device::cuda());
  auto step = jit::compile(
      [&cache](const Tensor& k, const Tensor& pos) {
        cache.index_copy_(2, pos, k);
        return (cache * 2.0).sum({2});
      },
      with_graphs("decode"));
  Tensor want = zeros({kB, kH, kS, kD}, DType::f64);
  Counts before = Counts::now();
  for (std::int64_t p = 0; p < 6; ++p) {
    Tensor k = randn({kB, kH, 1, kD});
    Tensor pos = from_vector(std::vector<std::int64_t>{p}).to(Device::cuda());
    Tensor got = step(k.to(Device::cuda()), pos);
    for (std::int64_t b = 0; b < kB; ++b)
      for (std::int64_t h = 0; h < kH; ++h)
        for (std::int64_t d = 0; d < kD; ++d)
          want.data<double>()[((b * kH + h) * kS + p) * kD + d] =
              k.data<float>()[(b * kH + h) * kD + d];
    BOOST_TEST(relative_error(cache, want) == 0);
    BOOST_TEST(relative_error(got, (want * 2.0).sum({2})) < 1e-6);
  }
  BOOST_TEST(Counts::now().since(before).graph_launches == 5, step.explain());
}

// An index a replayed kernel finds out of range is raised at the next sync, as eager's are: the
// graph's checked kernels set flags of its own, each replay making them pending.
BOOST_AUTO_TEST_CASE(an_index_error_inside_a_replay_is_raised_at_the_next_sync) {
  Tensor table = randn({10, 4});
  Tensor table_dev = table.to(Device::cuda());
  auto f = jit::compile([&](const Tensor& ids) { return embedding(table_dev, ids) * 2.0; },
                        with_graphs("lookup"));
  auto ids_of = [](std::vector<std::int64_t> v) { return from_vector(v).to(Device::cuda()); };
  for (int i = 0; i < 3; ++i) {
    Tensor got = f(ids_of({1, 3, 9}));
    BOOST_TEST(relative_error(
                   got, embedding(table, from_vector(std::vector<std::int64_t>{1, 3, 9})) * 2.0) <=
               1e-6);
  }
  BOOST_TEST(jit::codegen::launch_stats().graph_launches.load() > 0);
  Tensor bad = f(ids_of({1, 12, 2}));
  BOOST_CHECK_THROW(host(bad), Error);
  // The flags were read and cleared: the next replay is clean.
  BOOST_TEST(relative_error(
                 f(ids_of({0, 2, 4})),
                 embedding(table, from_vector(std::vector<std::int64_t>{0, 2, 4})) * 2.0) <= 1e-6);
  // KILN_SYNC_CHECKS raises it at the call that replayed the kernel.
  set_sync_device_checks(true);
  const std::int64_t replays = jit::codegen::launch_stats().graph_launches.load();
  BOOST_CHECK_THROW(f(ids_of({11, 0, 0})), Error);
  set_sync_device_checks(false);
  BOOST_TEST(jit::codegen::launch_stats().graph_launches.load() == replays + 1);
}

// A replay would repeat the Philox offset its capture passed: an entry that draws random
// numbers runs its plan, and explain() says why.
BOOST_AUTO_TEST_CASE(random_draws_run_without_a_graph) {
  manual_seed(7);
  auto f = jit::compile([](const Tensor& x) { return x + rand_like(x); }, with_graphs("noise"));
  Tensor x = zeros({256}, DType::f32, Device::cuda());
  Counts before = Counts::now();
  Tensor a = host(f(x)), b = host(f(x)), c = host(f(x));
  BOOST_TEST(Counts::now().since(before).graph_launches == 0);
  BOOST_TEST(relative_error(b, c) > 0.01);  // fresh numbers on every call
  BOOST_TEST(f.explain().find("draws random numbers") != std::string::npos, f.explain());
}

// A host tensor the function captured is uploaded on every call, which a replay would skip: the
// plan runs without a graph, naming the step.
BOOST_AUTO_TEST_CASE(a_step_that_uploads_per_call_keeps_the_plan_out_of_graphs) {
  Tensor c = randn({32});
  auto f = jit::compile([&c](const Tensor& x) { return x * c.to(Device::cuda()); },
                        with_graphs("upload"));
  Tensor x = randn({32});
  Counts before = Counts::now();
  for (int i = 0; i < 3; ++i) {
    c.data<float>()[3] += 1.0f;  // read on every call
    BOOST_TEST(relative_error(f(x.to(Device::cuda())), x * c) <= 1e-6);
  }
  BOOST_TEST(Counts::now().since(before).graph_launches == 0);
  BOOST_TEST(f.explain().find("ran without a graph: step 0 uploads") != std::string::npos,
             f.explain());
}

// An output that views an argument views the graph's static copy of it: a replay hands it over
// like any other output before the next call's argument is copied in.
BOOST_AUTO_TEST_CASE(an_output_viewing_an_argument_is_handed_over_too) {
  auto f = jit::compile(
      [](const Tensor& x) {
        return std::make_pair(x.reshape({4, 4}), (x * 2.0).sum({0}));
      },
      with_graphs("views"));
  std::vector<Tensor> inputs, firsts;
  for (int call = 0; call < 4; ++call) {
    inputs.push_back(randn({16}));
    auto [view, sum] = f(inputs.back().to(Device::cuda()));
    firsts.push_back(view);
    BOOST_TEST(relative_error(sum, (inputs.back() * 2.0).sum({0})) <= 1e-6);
  }
  for (int call = 0; call < 4; ++call)
    BOOST_TEST(relative_error(firsts[call], inputs[call].reshape({4, 4})) == 0.0);
}

// A replay would write an argument's static copy, not the argument: a function writing an
// argument in place runs without a graph, and the argument is written.
BOOST_AUTO_TEST_CASE(writing_an_argument_in_place_runs_without_a_graph) {
  auto f = jit::compile(
      [](const Tensor& x) {
        x.mul_(2.0);
        return x.sum({0});
      },
      with_graphs("writes"));
  Tensor host_x = randn({8});
  Tensor x = host_x.to(Device::cuda());
  Counts before = Counts::now();
  for (int call = 0; call < 3; ++call) {
    f(x);
    host_x = host_x * 2.0;
  }
  BOOST_TEST(Counts::now().since(before).graph_launches == 0);
  BOOST_TEST(relative_error(x, host_x) == 0.0);
  BOOST_TEST(f.explain().find("writes argument 'arg0' in place") != std::string::npos, f.explain());
}

// Two threads calling one graphed function: each call replays with its own argument and gets
// its own result (a replay owns the static buffers while it runs).
BOOST_AUTO_TEST_CASE(threads_calling_one_graphed_function_get_their_own_results) {
  auto f = jit::compile([](const Tensor& x) { return tanh(x) + 1.0; }, with_graphs("threads"));
  Tensor warm = randn({32}).to(Device::cuda());
  f(warm);
  f(warm);
  std::vector<double> errors(2, 1.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      double worst = 0;
      for (int i = 0; i < 10; ++i) {
        Tensor x = full({32}, 0.1 * (t * 10 + i));
        worst = std::max(worst, relative_error(f(x.to(Device::cuda())), tanh(x) + 1.0));
      }
      errors[t] = worst;
    });
  for (auto& th : threads) th.join();
  BOOST_TEST(errors[0] <= 1e-6);
  BOOST_TEST(errors[1] <= 1e-6);
}

// KILN_LAUNCH_BLOCKING waits after every launch, which a capture forbids: the capture fails,
// the call runs its plan, later calls too, and explain() names the call that failed it.
BOOST_AUTO_TEST_CASE(a_failed_capture_runs_the_plan_and_says_why) {
  const bool was = cuda::set_launch_blocking(true);
  auto f = jit::compile([](const Tensor& x) { return cos(x) * 2.0; }, with_graphs("blocking"));
  Counts before = Counts::now();
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({16});
    BOOST_TEST(relative_error(f(x.to(Device::cuda())), cos(x) * 2.0) <= 1e-6);
  }
  cuda::set_launch_blocking(was);
  BOOST_TEST(Counts::now().since(before).graph_launches == 0);
  const std::string e = f.explain();
  BOOST_TEST(e.find("the capture failed") != std::string::npos, e);
  BOOST_TEST(e.find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") != std::string::npos, e);
  BOOST_TEST(e.find("step 0 (") != std::string::npos, e);  // the step whose launch failed it
  BOOST_TEST(!cuda::backend().is_capturing(cuda::current_stream()));
}

// Every zoo model's eval loss, compiled with graphs, equals eager CUDA's on each batch, and a
// warm call is one graph launch: parameters read in place, the batch copied in.
BOOST_AUTO_TEST_CASE(zoo_models_in_eval_replay_one_graph_per_call) {
  NoGradGuard inference;
  for (const zoo::CatalogEntry& entry : zoo::catalog(1)) {
    zoo::TrainOptions options;
    options.compiled = true;
    options.cuda_graphs = true;
    options.name = entry.name + "_eval";
    auto graphed = entry.start(1, DType::f32, Device::cuda(), options);
    options.compiled = false;
    auto eager = entry.start(1, DType::f32, Device::cuda(), options);
    graphed->module().eval();
    eager->module().eval();
    Generator data(3);
    for (int call = 0; call < 4; ++call) {
      const zoo::Batch batch = entry.make_batch(data).to(Device::cuda(), DType::f32);
      Tensor want = eager->forward(batch);
      Counts before = Counts::now();
      Tensor got = graphed->forward(batch);
      Counts used = Counts::now().since(before);
      BOOST_TEST(relative_error(got, host(want)) <= 1e-5, entry.name << " call " << call);
      if (call >= 2) {
        BOOST_TEST(used.graph_launches == 1, entry.name << ": " << graphed->compiled()->explain());
        BOOST_TEST(used.launches == 0, entry.name);
      }
    }
  }
}

// Compiled training with graphs: from the second step on, each micro-batch's forward and
// backward are one graph launch each, the backward reading what the forward's graph saved in
// place; losses and parameters equal those of the same plans run without graphs. The models
// that train with dropout draw random numbers and run without graphs (explain() says why).
BOOST_AUTO_TEST_CASE(zoo_training_replays_the_forward_and_the_backward) {
  for (const zoo::CatalogEntry& entry : zoo::catalog(1)) {
    auto train = [&](bool graphs, std::vector<std::int64_t>* graph_launches) {
      zoo::TrainOptions options;
      options.compiled = true;
      options.cuda_graphs = graphs;
      options.name = entry.name + (graphs ? "_graphs" : "_plain");
      auto run = entry.start(1, DType::f32, Device::cuda(), options);
      Generator data(2);
      std::vector<double> losses;
      for (int step = 0; step < 4; ++step) {
        Counts before = Counts::now();
        losses.push_back(run->step(entry.step_batches(data, Device::cuda())));
        if (graph_launches) graph_launches->push_back(Counts::now().since(before).graph_launches);
      }
      std::vector<Tensor> params;
      for (const Tensor& p : run->module().parameters()) params.push_back(host(p.detach()));
      if (graphs) BOOST_TEST_MESSAGE(entry.name << ": " << run->compiled()->explain());
      return std::make_pair(losses, params);
    };
    std::vector<std::int64_t> graph_launches;
    auto [plain_losses, plain_params] = train(false, nullptr);
    auto [losses, params] = train(true, &graph_launches);
    for (std::size_t s = 0; s < losses.size(); ++s)
      BOOST_TEST(std::abs(losses[s] - plain_losses[s]) <= 1e-6 * std::abs(plain_losses[s]),
                 entry.name << " step " << s);
    for (std::size_t i = 0; i < params.size(); ++i)
      BOOST_TEST(relative_error(params[i], plain_params[i]) <= 1e-6, entry.name);
    const bool draws = entry.name == "gpt2" || entry.name == "bert";
    for (std::size_t s = 2; s < graph_launches.size(); ++s)
      BOOST_TEST(graph_launches[s] == (draws ? 0 : 2 * entry.micro_batches),
                 entry.name << " step " << s);
  }
}

BOOST_AUTO_TEST_SUITE_END()
