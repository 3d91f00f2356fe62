// The compiled backward: a compiled function called with gradients needed runs a generated
// forward plan and, from one autograd node, a generated backward plan. References are eager
// autograd on the CPU in f64 (kiln's Eigen path: no generated kernel involved), and the
// habits of PyTorch users: eager code around compiled calls, two compiled calls in one loss,
// unused outputs, retain_graph, in-place changes between forward and backward.
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/checkpoint.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda_backend.h"
#include "runtime/grad_mode.h"
#include "support/autograd_leaves.h"
#include "support/device_compare.h"
#include "support/reference.h"

using namespace kiln;
using test::grad_fn_name;
using test::leaf;
using test::relative_error;

namespace {

std::int64_t launches() {
  return jit::codegen::launch_stats().launches.load();
}

// The same values on the CPU in f64 (the eager reference) and on the CUDA device in f32.
struct Pair {
  Tensor cpu, cuda;
};
Pair leaves(const Shape& shape, double scale = 1.0) {
  Tensor v = randn(shape) * scale;
  return {leaf(v, DType::f64, Device::cpu()), leaf(v, DType::f32, Device::cuda())};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(aot)

BOOST_AUTO_TEST_CASE(a_layer_trains_from_generated_forward_and_backward_plans) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return sum(gelu(matmul(x, w.transpose(0, 1)) + b, GeluApproximation::tanh) * 0.5);
  };
  jit::CompileOptions options;
  options.name = "layer";
  auto f = jit::compile(fn, options);
  Tensor x0 = randn({6, 16}), w0 = randn({8, 16}), b0 = randn({8});
  Tensor x = leaf(x0, DType::f64, Device::cpu()), w = leaf(w0, DType::f64, Device::cpu()),
         b = leaf(b0, DType::f64, Device::cpu());
  Tensor want = fn(x, w, b);
  want.backward();
  Tensor xd = leaf(x0, DType::f32, Device::cuda()), wd = leaf(w0, DType::f32, Device::cuda()),
         bd = leaf(b0, DType::f32, Device::cuda());
  Tensor got = f(xd, wd, bd);
  BOOST_TEST(grad_fn_name(got) == "CompiledFunctionBackward(layer)");
  std::int64_t before = launches();
  got.backward();
  BOOST_TEST(launches() > before);  // generated backward kernels ran
  BOOST_TEST(f.core().stats().kernel_calls == 1);
  BOOST_TEST(relative_error(got, want) <= 1e-5);
  BOOST_TEST(relative_error(xd.grad(), x.grad()) <= 1e-4);
  BOOST_TEST(relative_error(wd.grad(), w.grad()) <= 1e-4);
  BOOST_TEST(relative_error(bd.grad(), b.grad()) <= 1e-4);
  BOOST_TEST_MESSAGE(f.explain());
}

BOOST_AUTO_TEST_CASE(eager_code_around_two_compiled_functions_one_of_them_called_twice) {
  auto block = [](const Tensor& a, const Tensor& w) { return relu(matmul(a, w)) * 2.0 + a; };
  auto head = [](const Tensor& h) { return mean(softmax(h, 1) * h); };
  auto cblock = jit::compile(block);
  auto chead = jit::compile(head);
  Pair x = leaves({4, 8}), w1 = leaves({8, 8}, 0.3), w2 = leaves({8, 8}, 0.3);
  auto loss = [](auto&& blk, auto&& hd, const Pair& x, const Pair& w1, const Pair& w2, bool gpu) {
    const Tensor& xs = gpu ? x.cuda : x.cpu;
    Tensor h = tanh(xs);                                              // eager before
    h = blk(blk(h, gpu ? w1.cuda : w1.cpu), gpu ? w2.cuda : w2.cpu);  // one entry, two calls
    return hd(h) + sum(exp(h * 0.1));                                 // eager after
  };
  Tensor want = loss(block, head, x, w1, w2, false);
  want.backward();
  Tensor got = loss(cblock, chead, x, w1, w2, true);
  got.backward();
  BOOST_TEST(cblock.core().num_entries() == 1u);
  BOOST_TEST(cblock.core().stats().kernel_calls == 2);
  BOOST_TEST(chead.core().stats().kernel_calls == 1);
  BOOST_TEST(relative_error(got, want) <= 1e-5);
  BOOST_TEST(relative_error(x.cuda.grad(), x.cpu.grad()) <= 1e-4);
  BOOST_TEST(relative_error(w1.cuda.grad(), w1.cpu.grad()) <= 1e-4);
  BOOST_TEST(relative_error(w2.cuda.grad(), w2.cpu.grad()) <= 1e-4);
}

BOOST_AUTO_TEST_CASE(unused_outputs_and_inputs_no_gradient_reaches_behave_as_eagerly) {
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& v) {
    return std::make_tuple(sum(x * w), x * v, sum(x * x));
  };
  auto f = jit::compile(fn);
  Pair x = leaves({3, 5}), w = leaves({3, 5}), v = leaves({3, 5});
  auto [a, b, c] = fn(x.cpu, w.cpu, v.cpu);
  (a + c * 0.5).backward();  // b is not used: v gets no gradient
  auto [ga, gb, gc] = f(x.cuda, w.cuda, v.cuda);
  (ga + gc * 0.5).backward();
  BOOST_TEST(relative_error(x.cuda.grad(), x.cpu.grad()) <= 1e-5);
  BOOST_TEST(relative_error(w.cuda.grad(), w.cpu.grad()) <= 1e-5);
  BOOST_TEST(!v.cpu.grad().defined());
  BOOST_TEST(!v.cuda.grad().defined());
  // Only the unused output now: x gets v as its gradient, w none.
  x.cuda.set_grad(Tensor());
  auto outs = f(x.cuda, w.cuda, v.cuda);
  sum(std::get<1>(outs)).backward();
  BOOST_TEST(relative_error(x.cuda.grad(), v.cpu.detach()) <= 1e-6);
  BOOST_TEST(relative_error(v.cuda.grad(), x.cpu.detach()) <= 1e-6);
  BOOST_TEST(relative_error(w.cuda.grad(), w.cpu.grad()) <= 1e-5);  // unchanged
}

BOOST_AUTO_TEST_CASE(only_the_inputs_that_require_grad_get_one) {
  auto f = jit::compile([](const Tensor& x, const Tensor& w) { return sum(sin(x) * w); });
  Tensor x = leaf(randn({7}), DType::f32, Device::cuda());
  Tensor w = randn({7}).to(Device::cuda());
  f(x, w).backward();
  BOOST_TEST(relative_error(x.grad(), cos(x.detach()) * w) <= 1e-5);
  BOOST_TEST(!w.grad().defined());
  BOOST_TEST(f.core().aot(0) != nullptr);
}

BOOST_AUTO_TEST_CASE(outputs_that_carry_no_gradient_run_the_forward_plan_alone) {
  auto f = jit::compile([](const Tensor& x) { return argmax(x, 0); });
  Tensor x = leaf(test::f32s({1, 5, 3}), DType::f32, Device::cuda());
  Tensor i = f(x);
  BOOST_TEST(!i.requires_grad());
  BOOST_TEST(i.to(Device::cpu()).item() == 1.0);
  BOOST_TEST(f.core().aot(0) == nullptr);
  BOOST_TEST(f.core().plan(0) != nullptr);
}

BOOST_AUTO_TEST_CASE(retain_graph_allows_a_second_backward_and_without_it_a_second_raises) {
  auto f = jit::compile([](const Tensor& x) { return sum(exp(x) * x); });
  Tensor x = leaf(randn({5}), DType::f32, Device::cuda());
  Tensor y = f(x);
  y.backward({}, /*retain_graph=*/true);
  Tensor once = x.grad().clone();
  y.backward();
  BOOST_TEST(relative_error(x.grad(), once * 2.0) <= 1e-6);
  Tensor e = exp(x.detach());
  BOOST_TEST(relative_error(once, e + e * x.detach()) <= 1e-5);
  KILN_CHECK_THROWS(y.backward(), AutogradError, "second time", "CompiledFunctionBackward(fn)");
}

BOOST_AUTO_TEST_CASE(double_backward_through_a_compiled_function_is_an_error_naming_it) {
  jit::CompileOptions options;
  options.name = "cube";
  auto f = jit::compile([](const Tensor& x) { return sum(x * x * x); }, options);
  Tensor x = leaf(randn({4}), DType::f32, Device::cuda());
  Tensor y = f(x);
  KILN_CHECK_THROWS(autograd::grad({y}, {x}, {}, false, /*create_graph=*/true), AutogradError,
                    "'cube'", "create_graph");
}

BOOST_AUTO_TEST_CASE(no_grad_blocks_and_detach_inside_the_function_stop_gradients_as_eagerly) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor s;
    {
      NoGradGuard no_grad;
      s = x * 3.0;
    }
    return sum(x.detach() * w + s * w + x * x * w);
  };
  auto f = jit::compile(fn);
  Pair x = leaves({2, 6}), w = leaves({2, 6});
  fn(x.cpu, w.cpu).backward();
  f(x.cuda, w.cuda).backward();
  BOOST_TEST(relative_error(x.cuda.grad(), x.cpu.grad()) <= 1e-5);
  BOOST_TEST(relative_error(w.cuda.grad(), w.cpu.grad()) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_saved_input_changed_in_place_before_backward_is_an_error) {
  auto f = jit::compile([](const Tensor& x, const Tensor& w) { return sum(matmul(x, w)); });
  Tensor x = leaf(randn({3, 4}), DType::f32, Device::cuda());
  Tensor w = leaf(randn({4, 2}), DType::f32, Device::cuda());
  Tensor y = f(x, w);
  {
    NoGradGuard no_grad;
    x.add_(ones({3, 4}).to(Device::cuda()));
  }
  KILN_CHECK_THROWS(y.backward(), AutogradError, "modified by an in-place operation",
                    "CompiledFunctionBackward");
}

BOOST_AUTO_TEST_CASE(a_reassigned_module_parameter_and_an_updated_capture_are_used) {
  Generator gen(3);
  nn::Linear lin(6, 4, true, DType::f32, &gen);
  lin.to(Device::cuda());
  Tensor scale = full({4}, 2.0).to(Device::cuda());
  jit::CompileOptions options;
  options.modules = {&lin};
  auto f = jit::compile([&](const Tensor& x) { return sum(tanh(lin(x)) * scale); }, options);
  Tensor x = randn({5, 6}).to(Device::cuda());
  auto eager_grads = [&] {
    Tensor w = lin.weight.detach().to(Device::cpu()).to(DType::f64).requires_grad_();
    Tensor b = lin.bias.detach().to(Device::cpu()).to(DType::f64).requires_grad_();
    Tensor xc = x.to(Device::cpu()).to(DType::f64);
    sum(tanh(matmul(xc, w.transpose(0, 1)) + b) * scale.to(Device::cpu()).to(DType::f64))
        .backward();
    return std::make_pair(w.grad(), b.grad());
  };
  f(x).backward();
  auto [w0, b0] = eager_grads();
  BOOST_TEST(relative_error(lin.weight.grad(), w0) <= 1e-4);
  BOOST_TEST(relative_error(lin.bias.grad(), b0) <= 1e-4);
  // A new parameter tensor in the slot, and new values in the captured tensor.
  lin.weight = (randn({4, 6}) * 0.5).to(Device::cuda()).detach().requires_grad_();
  {
    NoGradGuard no_grad;
    scale.mul_(-1.5);
  }
  lin.bias.set_grad(Tensor());
  f(x).backward();
  auto [w1, b1] = eager_grads();
  BOOST_TEST(relative_error(lin.weight.grad(), w1) <= 1e-4);
  BOOST_TEST(relative_error(lin.bias.grad(), b1) <= 1e-4);
  BOOST_TEST(f.core().num_entries() == 1u);
}

BOOST_AUTO_TEST_CASE(a_backward_compiled_for_a_dynamic_dim_serves_every_size) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    return sum(softmax(matmul(x, w), 1) * sigmoid(x.sum({1}, true)));
  };
  auto f = jit::compile(fn);
  Pair w = leaves({5, 3});
  for (std::int64_t rows : {4, 9, 6}) {
    Pair x = leaves({rows, 5});
    jit::mark_dynamic(x.cuda, 0);
    w.cpu.set_grad(Tensor());
    w.cuda.set_grad(Tensor());
    fn(x.cpu, w.cpu).backward();
    f(x.cuda, w.cuda).backward();
    BOOST_TEST(relative_error(x.cuda.grad(), x.cpu.grad()) <= 1e-4);
    BOOST_TEST(relative_error(w.cuda.grad(), w.cpu.grad()) <= 1e-4);
  }
  BOOST_TEST(f.core().num_entries() == 1u, f.explain());
  BOOST_TEST(f.core().graph(0).symbols.size() == 1u);
}

BOOST_AUTO_TEST_CASE(pointwise_chains_are_recomputed_and_matmuls_saved) {
  // Eagerly tanh and sigmoid save their outputs and the product both factors; the compiled
  // forward keeps nothing but its input and recomputes the chain inside the backward kernel.
  auto f = jit::compile([](const Tensor& x) { return sum(tanh(x) * sigmoid(x) * x); });
  Tensor x = leaf(randn({8, 8}), DType::f32, Device::cuda());
  f(x).backward();
  const jit::AotPartition& pointwise = f.core().aot(0)->partition();
  BOOST_TEST(pointwise.saved_activation_bytes() == 0);
  BOOST_TEST(pointwise.recomputed_nodes >= 3);
  Tensor xc = x.detach();
  Tensor t = tanh(xc), s = sigmoid(xc);
  Tensor want = (1.0 - t * t) * s * xc + t * s * (1.0 - s) * xc + t * s;
  BOOST_TEST(relative_error(x.grad(), want) <= 1e-5);

  auto g = jit::compile([](const Tensor& a, const Tensor& w) { return sum(relu(matmul(a, w))); });
  Tensor a = leaf(randn({8, 8}), DType::f32, Device::cuda());
  Tensor w = leaf(randn({8, 8}), DType::f32, Device::cuda());
  g(a, w).backward();
  // Eagerly relu keeps its [8, 8] f32 output; the cut keeps at most that (here relu's [8, 8]
  // bool mask), and the backward runs the two matmuls of the gradients, not a third.
  const jit::AotPartition& mm = g.core().aot(0)->partition();
  BOOST_TEST(mm.saved_activation_bytes() > 0);
  BOOST_TEST(mm.saved_activation_bytes() <= 8 * 8 * 4, mm.str());
  int matmuls = 0;
  for (const auto& n : mm.backward.nodes) matmuls += n.op == OpId::matmul;
  BOOST_TEST(matmuls == 2, mm.str());
  Tensor mask = (matmul(a.detach(), w.detach()) > 0.0).to(DType::f32);
  BOOST_TEST(relative_error(a.grad(), matmul(mask, w.detach().transpose(0, 1))) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_compiled_training_step_launches_fewer_kernels_than_eager) {
  auto fn = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2) {
    Tensor h = gelu(matmul(x, w1) + b1, GeluApproximation::tanh);
    Tensor z = layer_norm(h, {16}, {}, {}, 1e-5);
    return mean(z * sigmoid(matmul(z, w2)));
  };
  auto f = jit::compile(fn);
  Pair x = leaves({8, 12}), w1 = leaves({12, 16}, 0.3), b1 = leaves({16}),
       w2 = leaves({16, 16}, 0.3);
  auto step = [&](auto&& fun) {
    std::int64_t before = launches();
    fun(x.cuda, w1.cuda, b1.cuda, w2.cuda).backward();
    return launches() - before;
  };
  std::int64_t eager = step(fn);
  Tensor gw1 = w1.cuda.grad().clone(), gb1 = b1.cuda.grad().clone();
  for (auto* p : {&x, &w1, &b1, &w2}) p->cuda.set_grad(Tensor());
  f(x.cuda, w1.cuda, b1.cuda, w2.cuda);  // compiles
  for (auto* p : {&x, &w1, &b1, &w2}) p->cuda.set_grad(Tensor());
  std::int64_t compiled = step(f);
  BOOST_TEST_MESSAGE("generated kernel launches per step: eager " << eager << ", compiled "
                                                                  << compiled);
  BOOST_TEST(compiled * 2 <= eager);
  BOOST_TEST(relative_error(w1.cuda.grad(), gw1) <= 1e-4);
  BOOST_TEST(relative_error(b1.cuda.grad(), gb1) <= 1e-4);
}

BOOST_AUTO_TEST_CASE(a_layer_norm_backward_is_one_row_kernel_and_one_column_kernel) {
  // layer_norm is written with primitives; its derivative rules give two chained row sums (one
  // read through expand(grad)) and three column sums (the weight's, the bias's and, of the
  // input gradient, the bias gradient of the linear before it). They fuse into one kernel over
  // rows and one over columns; the references are eager f64 on the CPU.
  // A pre-LN transformer's: linear, layer_norm, linear.
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
               const Tensor& beta, const Tensor& v) {
    return sum(matmul(layer_norm(matmul(x, w) + b, {16}, g, beta, 1e-5), v));
  };
  auto f = jit::compile(fn);
  Pair x = leaves({12, 8}), w = leaves({8, 16}, 0.3), b = leaves({16}), g = leaves({16}),
       beta = leaves({16}), v = leaves({16, 4});
  std::array<Pair*, 6> all{&x, &w, &b, &g, &beta, &v};
  f(x.cuda, w.cuda, b.cuda, g.cuda, beta.cuda, v.cuda);  // compiles
  for (auto* p : all) p->cuda.set_grad(Tensor());
  Tensor loss = f(x.cuda, w.cuda, b.cuda, g.cuda, beta.cuda, v.cuda);
  loss.backward();
  // The plan's generated kernels; the gradient matmuls of `sum`'s broadcast seed (zero
  // strides, which cuBLASLt does not take) run the generated GEMM besides.
  const jit::KernelPlan& plan = f.core().aot(0)->backward_plan();
  BOOST_TEST(plan.kernel_count() == 2, plan.str());
  fn(x.cpu, w.cpu, b.cpu, g.cpu, beta.cpu, v.cpu).backward();
  for (auto* p : all) BOOST_TEST(relative_error(p->cuda.grad(), p->cpu.grad()) <= 1e-4);
}

BOOST_AUTO_TEST_CASE(checkpointing_saves_less_and_leaves_gradients_unchanged) {
  // A deep residual MLP whose blocks save two matmul outputs each; checkpointed, the forward
  // keeps only what enters each block and the backward recomputes one block at a time, so the
  // step's peak device memory drops too.
  const int depth = 6;
  std::vector<Pair> ws;
  for (int i = 0; i < 2 * depth; ++i) ws.push_back(leaves({64, 64}, 0.2));
  Tensor x = randn({256, 64}).to(Device::cuda());
  auto net = [&](bool checkpointed) {
    return [&, checkpointed](const Tensor& in) {
      Tensor h = in;
      for (int i = 0; i < depth; ++i) {
        auto block = [&](const Tensor& a) {
          Tensor u = tanh(matmul(a, ws[2 * i].cuda));
          return a + sigmoid(matmul(u, ws[2 * i + 1].cuda)) * u;
        };
        h = checkpointed ? jit::checkpoint(block, h) : block(h);
      }
      return mean(h * h);
    };
  };
  auto plain = jit::compile(net(false));
  auto ckpt = jit::compile(net(true));
  auto step = [&](auto& f) {
    for (auto& w : ws) w.cuda.set_grad(Tensor());
    f(x).backward();  // compiles
    for (auto& w : ws) w.cuda.set_grad(Tensor());
    cuda_allocator().reset_peak();
    std::size_t base = cuda_allocator().stats().allocated;
    f(x).backward();
    std::vector<Tensor> grads;
    for (auto& w : ws) grads.push_back(w.cuda.grad());
    return std::make_pair(cuda_allocator().stats().peak_allocated - base, grads);
  };
  auto [plain_peak, plain_grads] = step(plain);
  auto [ckpt_peak, ckpt_grads] = step(ckpt);
  std::int64_t plain_saved = plain.core().aot(0)->partition().saved_activation_bytes();
  std::int64_t ckpt_saved = ckpt.core().aot(0)->partition().saved_activation_bytes();
  BOOST_TEST_MESSAGE("saved activations: " << plain_saved << " B plain, " << ckpt_saved
                                           << " B checkpointed; step peak: " << plain_peak
                                           << " B plain, " << ckpt_peak << " B checkpointed");
  BOOST_TEST(ckpt_saved > 0);                 // what enters each block
  BOOST_TEST(ckpt_saved <= plain_saved / 2);  // one tensor per block instead of two
  BOOST_TEST(ckpt_peak + (plain_saved - ckpt_saved) / 2 <= plain_peak);
  for (int i = 0; i < 2 * depth; ++i)
    BOOST_TEST(relative_error(ckpt_grads[i], plain_grads[i]) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
