// What PyTorch users do with compiled functions and expect to work: detach() and NoGradGuard
// inside them, a grad-mode change between calls, a training loop that keeps last step's loss
// alive, parameters reassigned or checkpoints loaded after compile, captured values that change
// (KILN_JIT_VERIFY), reshape(-1) and the transformer's reshape idiom at many batch sizes, and
// ops with several outputs. References are eager kiln or hand-computed values.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/nn.h"
#include "autograd/optim.h"
#include "jit/compile.h"

using namespace kiln;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && values(a) == values(b);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Tensor leaf(std::vector<double> v) {
  Tensor t = from_vector(v);
  t.requires_grad_();
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stop_gradient)

BOOST_AUTO_TEST_CASE(detach_inside_a_compiled_function_stops_the_gradient) {
  // d/dx sum(x * c) with c = x held constant is c: [1, 2, 3], not 2x.
  auto f = jit::compile([](const Tensor& x) { return (x * x.detach()).sum(); });
  Tensor x = leaf({1, 2, 3});
  f(x).backward();
  BOOST_TEST(values(x.grad()) == (std::vector<double>{1, 2, 3}));
  x.set_grad(Tensor());
  f(x).backward();  // the cached entry too
  BOOST_TEST(values(x.grad()) == (std::vector<double>{1, 2, 3}));
  BOOST_TEST(f.core().stats().compiles == 1);
  BOOST_TEST(contains(f.core().graph(0).str(), "detach(%0)"));
}

BOOST_AUTO_TEST_CASE(no_grad_blocks_inside_a_compiled_function_are_not_differentiated) {
  auto fn = [](const Tensor& x) {
    Tensor scale;
    {
      NoGradGuard no_grad;
      scale = exp(x) * 2;
    }
    return (x * scale).sum();
  };
  auto f = jit::compile(fn);
  Tensor a = leaf({0.5, -1, 2}), b = leaf({0.5, -1, 2});
  fn(a).backward();
  f(b).backward();
  // d/dx sum(x * 2e^x) with 2e^x constant is 2e^x.
  for (std::size_t i = 0; i < 3; ++i)
    BOOST_TEST(values(b.grad())[i] == 2 * std::exp(values(b)[i]), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(identical(a.grad(), b.grad()));
  BOOST_TEST(contains(f.core().graph(0).str(), "no_grad"));
}

BOOST_AUTO_TEST_CASE(a_call_under_another_grad_mode_recompiles_and_says_why) {
  auto f = jit::compile([](const Tensor& x) { return sigmoid(x) * x; });
  Tensor x = leaf({1, 2});
  BOOST_TEST(f(x).requires_grad());
  {
    NoGradGuard no_grad;
    Tensor y = f(x);
    BOOST_TEST(!y.requires_grad());
  }
  BOOST_TEST(f(x).requires_grad());
  BOOST_TEST(f.core().stats().compiles == 2);
  BOOST_TEST(f.core().recompile_reasons().at(0) == "grad mode mismatch: expected enabled, actual disabled");
}

BOOST_AUTO_TEST_CASE(softmax_keeps_its_closed_form_backward_when_compiled) {
  auto f = jit::compile([](const Tensor& x) { return log_softmax(softmax(x, 1) * 3, 1); });
  Generator gen(3);
  Tensor x = randn({4, 5}, DType::f64, &gen);
  x.requires_grad_();
  Tensor seed = randn({4, 5}, DType::f64, &gen);
  Tensor compiled = autograd::grad({f(x)}, {x}, {seed})[0];
  Tensor eager = autograd::grad({log_softmax(softmax(x, 1) * 3, 1)}, {x}, {seed})[0];
  BOOST_TEST(allclose(compiled, eager, 1e-12, 1e-14));
  std::string g = f.core().graph(0).str();
  BOOST_TEST((contains(g, "softmax(%0, dim=1)") && contains(g, "log_softmax(")));
  BOOST_TEST(!contains(g, "amax"));  // one primitive, not its decomposition
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(training_loops)

BOOST_AUTO_TEST_CASE(a_loss_declared_before_the_loop_survives_every_backward) {
  // The previous step's graph is still alive (held by `loss`) while the next is built: the
  // parameters' accumulators are shared by both and must not be "freed" by the first backward.
  nn::Linear eager_fc(3, 2, true, DType::f64), compiled_fc(3, 2, true, DType::f64);
  compiled_fc.load_state_dict(eager_fc.state_dict());
  Generator gen(1);
  Tensor x = randn({5, 3}, DType::f64, &gen);
  optim::SGD eager_opt(eager_fc.parameters(), 0.1), compiled_opt(compiled_fc.parameters(), 0.1);
  jit::CompileOptions options;
  options.modules = {&compiled_fc};
  auto step = jit::compile([&](const Tensor& in) { return compiled_fc(in).pow(2).mean(); }, options);
  Tensor eager_loss, compiled_loss;
  for (int i = 0; i < 4; ++i) {
    eager_loss = eager_fc(x).pow(2).mean();
    eager_opt.zero_grad();
    eager_loss.backward();
    eager_opt.step();
    compiled_loss = step(x);
    compiled_opt.zero_grad();
    compiled_loss.backward();
    compiled_opt.step();
    BOOST_TEST(identical(eager_loss.detach(), compiled_loss.detach()));
  }
  BOOST_TEST(identical(eager_fc.weight.detach(), compiled_fc.weight.detach()));
  BOOST_TEST(step.core().stats().compiles == 1);
}

BOOST_AUTO_TEST_CASE(a_second_backward_frees_nothing_it_needs_and_names_what_it_lost) {
  Tensor x = leaf({1, 2});
  Tensor y = (x + 1).sum();  // add and sum save no tensors: backward may run again
  y.backward();
  y.backward();
  BOOST_TEST(values(x.grad()) == (std::vector<double>{2, 2}));
  Tensor z = exp(x).sum();
  z.backward();
  BOOST_CHECK_EXCEPTION(z.backward(), AutogradError, [](const AutogradError& e) {
    std::string m = e.what();
    return contains(m, "a second time") && contains(m, "expBackward") && contains(m, "retain_graph");
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(module_state)

BOOST_AUTO_TEST_CASE(a_reassigned_parameter_is_used_without_a_retrace) {
  Generator gen(7);
  nn::Linear fc(4, 3, true, DType::f64, &gen);
  jit::CompileOptions options;
  options.modules = {&fc};
  auto f = jit::compile([&](const Tensor& x) { return relu(fc(x)); }, options);
  Tensor x = randn({2, 4}, DType::f64, &gen);
  f(x);
  fc.weight = randn({3, 4}, DType::f64, &gen);  // a checkpoint loaded by assignment
  fc.weight.requires_grad_();
  BOOST_TEST(identical(f(x), relu(linear(x, fc.weight, fc.bias))));
  BOOST_TEST(f.core().stats().compiles == 1);
  // The optimizer built now updates the tensor the module (and the function) uses.
  BOOST_TEST(fc.parameters().at(0).same(fc.weight));
  // Other metadata is a guard: a wider layer recompiles, naming the parameter.
  fc.weight = randn({5, 4}, DType::f64, &gen).requires_grad_();
  fc.bias = randn({5}, DType::f64, &gen).requires_grad_();
  BOOST_TEST(identical(f(x), relu(linear(x, fc.weight, fc.bias))));
  BOOST_TEST(f.core().recompile_reasons().at(0) ==
             "tensor 'weight' size mismatch at index 0: expected 3, actual 5");
}

BOOST_AUTO_TEST_CASE(a_checkpoint_loaded_in_place_reaches_compiled_functions) {
  Generator gen(8);
  nn::Linear fc(3, 3, true, DType::f64, &gen), trained(3, 3, true, DType::f64, &gen);
  auto f = jit::compile([&](const Tensor& x) { return fc(x); });  // captures, declares nothing
  Tensor x = randn({2, 3}, DType::f64, &gen);
  f(x);
  fc.load_state_dict(trained.state_dict());  // copies into fc's tensors, as PyTorch does
  BOOST_TEST(identical(f(x), trained(x)));
}

BOOST_AUTO_TEST_CASE(verification_names_a_captured_tensor_that_was_replaced) {
  Generator gen(9);
  nn::Linear fc(3, 2, false, DType::f64, &gen);
  jit::CompileOptions options;
  options.verify_every = 1;
  auto f = jit::compile([&](const Tensor& x) { return fc(x); }, options);
  Tensor x = randn({2, 3}, DType::f64, &gen);
  f(x);
  {  // in-place updates are followed: same tensor, nothing stale
    NoGradGuard no_grad;
    fc.weight.mul_(2);
  }
  BOOST_TEST(identical(f(x), fc(x)));
  fc.weight = randn({2, 3}, DType::f64, &gen).requires_grad_();  // not declared: stale
  BOOST_CHECK_EXCEPTION(f(x), jit::StaleCaptureError, [](const Error& e) {
    std::string m = e.what();
    return contains(m, "captured tensor 'captured0' (f64[2, 3]") &&
           contains(m, "different tensor") && contains(m, "CompileOptions::modules");
  });
  BOOST_TEST(f.core().stats().verifications == 3);
}

BOOST_AUTO_TEST_CASE(verification_names_a_captured_number_that_changed) {
  double scale = 2.0;
  jit::CompileOptions options;
  options.verify_every = 2;  // every second call
  auto f = jit::compile([&](const Tensor& x) { return x * scale; }, options);
  Tensor x = from_vector(std::vector<double>{1, 2});
  f(x);
  f(x);  // verified: nothing changed
  scale = 3.0;
  BOOST_TEST(values(f(x)) == (std::vector<double>{2, 4}));  // stale, as documented
  BOOST_CHECK_EXCEPTION(f(x), jit::StaleCaptureError, [](const Error& e) {
    std::string m = e.what();
    return contains(m, "constant 'const0' (f64[], read by mul) was [2]") && contains(m, "[3] now");
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(symbolic_reshape)

BOOST_AUTO_TEST_CASE(reshape_with_minus_one_keeps_the_batch_dim_dynamic) {
  auto fn = [](const Tensor& x) { return x.reshape({-1, 4}).sum({1}); };
  auto f = jit::compile(fn);
  for (std::int64_t b = 2; b < 15; ++b) {
    Tensor x = randn({b, 8});
    BOOST_TEST(identical(f(x), fn(x)));
  }
  BOOST_TEST(f.core().stats().compiles == 2);
  BOOST_TEST(contains(f.core().graph(1).str(), "reshape(%0, shape=[2*s0, 4])"));
}

BOOST_AUTO_TEST_CASE(the_transformer_reshape_idiom_stays_symbolic) {
  auto fn = [](const Tensor& x) {
    auto B = x.size(0), T = x.size(1), C = x.size(2);
    Tensor h = gelu(x.reshape({-1, C}));  // [B*T, C]
    return h.reshape({B, T, C}).sum({1});  // and back
  };
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::always;
  auto f = jit::compile(fn, options);
  for (std::int64_t b : {2, 3, 5})
    for (std::int64_t t : {4, 7}) {
      Tensor x = randn({b, t, 8});
      BOOST_TEST(identical(f(x), fn(x)));
    }
  BOOST_TEST(f.core().stats().compiles == 1);
  std::string g = f.core().graph(0).str();
  // Every dim is dynamic here (DynamicMode::always): C is s2.
  BOOST_TEST(contains(g, "shape=[s0*s1, s2]"));
  BOOST_TEST(contains(g, "shape=[s0, s1, s2]"));
}

BOOST_AUTO_TEST_CASE(unflatten_keeps_sizes_symbolic) {
  auto fn = [](const Tensor& x) { return x.flatten().unflatten(0, {x.size(0), -1}).sum({0}); };
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::always;
  auto f = jit::compile(fn, options);
  for (std::int64_t b : {2, 6, 9}) {
    Tensor x = randn({b, 3});
    BOOST_TEST(identical(f(x), fn(x)));
  }
  BOOST_TEST(f.core().stats().compiles == 1);
}

BOOST_AUTO_TEST_CASE(a_division_that_needs_divisibility_is_guarded) {
  // [s0, 3] -> [-1, 2] is [3*s0/2, 2]: an odd s0 cannot be reshaped, exactly as in eager.
  auto fn = [](const Tensor& x) { return x.reshape({-1, 2}) * 2; };
  auto f = jit::compile(fn);
  for (std::int64_t b : {4, 6, 10}) {
    Tensor x = randn({b, 3});
    jit::mark_dynamic(x, 0);
    BOOST_TEST(identical(f(x), fn(x)));
  }
  BOOST_TEST(f.core().stats().compiles == 1);
  BOOST_TEST(contains(f.core().guards(0).str(), "size 3*s0/2 is a whole number"));
  Tensor odd = randn({5, 3});
  BOOST_CHECK_THROW(fn(odd), ShapeError);
  BOOST_CHECK_THROW(f(odd), ShapeError);
}

BOOST_AUTO_TEST_CASE(a_size_used_in_arithmetic_that_is_not_a_product_specializes) {
  auto fn = [](const Tensor& x) { return x.reshape({x.size(0) + 1, -1}); };  // a sum: read
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::always;
  auto f = jit::compile(fn, options);
  Tensor x = randn({3, 4});
  BOOST_TEST(identical(f(x), fn(x)));
  BOOST_TEST(f.core().graph(0).symbols.empty());  // dim 0 was read, so it is static
  BOOST_TEST(f.lookup(randn({5, 4})) == -1);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(multiple_outputs)

BOOST_AUTO_TEST_CASE(max_with_indices_is_one_node_with_two_outputs) {
  auto fn = [](const Tensor& x) {
    auto [v, i] = max(x, 1);
    auto again = max(x, 1);  // the same call: CSE keeps one node
    return ValuesIndices{v + again.values, i};
  };
  auto f = jit::compile(fn);
  Tensor x = from_vector(std::vector<double>{1, 5, 3, 7, 2, 7}, {2, 3});
  auto [v, i] = f(x);
  BOOST_TEST(values(v) == (std::vector<double>{10, 14}));
  BOOST_TEST(i.to_vector<std::int64_t>() == (std::vector<std::int64_t>{1, 0}));  // ties: first
  int max_nodes = 0;
  for (const auto& n : f.core().graph(0).nodes)
    if (n.op == OpId::max_dim) {
      ++max_nodes;
      BOOST_TEST(n.outputs.size() == 2u);
    }
  BOOST_TEST(max_nodes == 1);
}

BOOST_AUTO_TEST_CASE(a_node_kept_alive_only_by_its_second_output_is_not_removed) {
  auto f = jit::compile([](const Tensor& x) { return max(x, 0).indices; });
  Tensor x = from_vector(std::vector<double>{1, 9, 4, 2}, {2, 2});
  BOOST_TEST(f(x).to_vector<std::int64_t>() == (std::vector<std::int64_t>{1, 0}));
}

BOOST_AUTO_TEST_CASE(gradients_flow_to_the_right_output_slot_of_a_node) {
  // A node with two floating outputs, written here: y0 = 2x, y1 = 3x. The engine must add
  // the gradient of y1 into slot 1 and pass both to the node.
  struct TwoOutputs : autograd::Node {
    TwoOutputs() : Node(2) {}
    std::string name() const override { return "TwoOutputs"; }
    std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
      seen = g;
      Tensor total = zeros({2}, DType::f64);
      if (g[0].defined()) total = total + g[0] * 2;
      if (g[1].defined()) total = total + g[1] * 3;
      return {total};
    }
    std::vector<Tensor> seen;
  };
  Tensor x = leaf({1, 1});
  auto node = std::make_shared<TwoOutputs>();
  node->set_next_edges({autograd::gradient_edge(x)});
  auto output = [&](std::uint32_t k) {
    Tensor y = zeros({2}, DType::f64);
    autograd::set_history(y, node, k);
    return y;
  };
  Tensor y0 = output(0), y1 = output(1);
  autograd::run_backward({y1, y0, y1}, {ones({2}, DType::f64) * 10, ones({2}, DType::f64),
                                        ones({2}, DType::f64) * 100},
                         false, false);
  BOOST_TEST(values(node->seen.at(0)) == (std::vector<double>{1, 1}));
  BOOST_TEST(values(node->seen.at(1)) == (std::vector<double>{110, 110}));
  BOOST_TEST(values(x.grad()) == (std::vector<double>{332, 332}));  // 2*1 + 3*110
}

BOOST_AUTO_TEST_SUITE_END()
