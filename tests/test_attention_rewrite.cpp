// The attention rewrite (graph/attention_rewrite.h): attention written with matmul, a scale, a
// mask and softmax becomes one `attention` node in the compiled graph, with results and
// gradients equal to eager's (the primitives) within rounding; near misses stay primitives and
// say why on KILN_LOG=fusion; the GPT demo's compiled step picks it up unchanged.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "autograd/engine.h"
#include "demos/gpt_model.h"
#include "graph/attention_rewrite.h"
#include "jit/aot/aot_program.h"
#include "jit/compile.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/reference.h"
#include "support/scope_exit.h"
#include "support/scoped_env.h"
#include "support/skip_if.h"
#include "support/virtual_device.h"

using namespace kiln;
using test::host_random;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor make(const Shape& shape, DType dtype, std::uint64_t seed) {
  return test::typed(dtype, host_random(static_cast<std::size_t>(numel(shape)), -1, 1, seed),
                     shape);
}

int count(const graph::Graph& g, OpId op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

using Fn3 = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;

struct Compiled {
  Tensor out;
  int attention = 0, softmax = 0;
  std::string log;
};

// Compiles `fn` (fresh each time), calls it once with KILN_LOG=fusion, and counts the optimized
// graph's attention and softmax nodes.
Compiled compile_and_run(const Fn3& fn, const Tensor& q, const Tensor& k, const Tensor& v) {
  jit::CompileOptions options;
  options.name = "attn";
  options.dynamic = jit::DynamicMode::never;
  auto f = jit::compile(
      [&](const Tensor& a, const Tensor& b, const Tensor& c) { return fn(a, b, c); }, options);
  Compiled r;
  {
    test::ScopedEnv env("KILN_LOG", "fusion");
    reload_log_settings();
    r.log = test::capture_output(2, [&] { r.out = f(q, k, v); });
  }
  reload_log_settings();
  r.attention = count(f.core().graph(0), OpId::attention);
  r.softmax = count(f.core().graph(0), OpId::softmax);
  return r;
}

struct Pattern {
  std::string label;
  std::string steps;  // as the log names them
  Fn3 fn;
};

std::vector<Pattern> patterns() {
  Tensor drop = test::bools({false, false, true, false, false, true,  false, false, false, false,
                             false, false, true, false, false, false, false, false, true,  false},
                            {4, 5});
  Tensor keep = logical_not(drop);
  Tensor additive = make({4, 5}, DType::f64, 9);
  double s = 1 / std::sqrt(3.0);
  return {
      {"masked_fill(q @ kᵀ * s, mask, -inf), as the GPT demo writes it",
       "matmul.mul.where.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor scores = masked_fill(matmul(q, k.transpose(-2, -1)) * s, drop, -kInf);
         return matmul(softmax(scores, -1), v);
       }},
      {"q @ kᵀ / sqrt(d), no mask", "matmul.div.softmax.matmul",
       [](const Tensor& q, const Tensor& k, const Tensor& v) {
         return matmul(softmax(matmul(q, k.transpose(-2, -1)) / std::sqrt(3.0), -1), v);
       }},
      {"q pre-scaled", "matmul.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         return matmul(softmax(matmul(q * s, k.transpose(-2, -1)), -1), v);
       }},
      {"additive mask after the scale", "matmul.mul.add.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         return matmul(softmax(matmul(q, k.transpose(-2, -1)) * 0.25 + additive, -1), v);
       }},
      {"where(keep, scores, -inf) before the scale", "matmul.where.mul.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor scores = where(keep, matmul(q, k.transpose(-2, -1)), -kInf);
         return matmul(softmax(scores * 0.5, -1), v);
       }},
      {"where(keep, scores * s, finfo(f64).min), as Hugging Face models write it",
       "matmul.mul.where.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor scores = matmul(q, k.transpose(-2, -1)) * s;
         return matmul(softmax(where(keep, scores, std::numeric_limits<double>::lowest()), -1), v);
       }},
      {"k given transposed: a view of it is inserted", "matmul.mul.softmax.matmul",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor kt = k.transpose(-2, -1).contiguous();
         return matmul(softmax(matmul(q, kt) * s, -1), v);
       }},
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_rewrite)

BOOST_AUTO_TEST_CASE(the_patterns_users_write_become_one_attention_node_with_eager_results) {
  Tensor q = make({2, 2, 4, 3}, DType::f64, 1), k = make({2, 2, 5, 3}, DType::f64, 2);
  Tensor v = make({2, 2, 5, 6}, DType::f64, 3);
  for (const Pattern& p : patterns()) {
    BOOST_TEST_CONTEXT(p.label) {
      Tensor eager = p.fn(q, k, v);
      Compiled c = compile_and_run(p.fn, q, k, v);
      BOOST_TEST(c.attention == 1);
      BOOST_TEST(c.softmax == 0);
      BOOST_TEST(allclose(c.out, eager, 1e-12, 1e-12), c.out << " vs " << eager);
      BOOST_TEST(c.log.find("rewritten (" + p.steps + ")") != std::string::npos, c.log);
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_in_f32_cast_back_to_bf16_is_rewritten) {
  Tensor q = make({2, 4, 8}, DType::bf16, 4), k = make({2, 6, 8}, DType::bf16, 5);
  Tensor v = make({2, 6, 8}, DType::bf16, 6);
  Fn3 fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    Tensor scores = matmul(a, b.transpose(-2, -1)) * 0.35;
    return matmul(softmax(scores.to(DType::f32), -1).to(DType::bf16), c);
  };
  Tensor eager = fn(q, k, v);
  Compiled c = compile_and_run(fn, q, k, v);
  BOOST_TEST(c.attention == 1);
  BOOST_TEST(c.out.dtype() == DType::bf16);
  BOOST_TEST(allclose(c.out.to(DType::f32), eager.to(DType::f32), 2e-2, 2e-2));
  BOOST_TEST(c.log.find("rewritten (matmul.mul.cast.softmax.cast.matmul)") != std::string::npos,
             c.log);
}

BOOST_AUTO_TEST_CASE(near_misses_stay_primitives_and_say_why) {
  Tensor q = make({2, 4, 3}, DType::f64, 7), k = make({2, 4, 3}, DType::f64, 8);
  Tensor v = make({2, 4, 3}, DType::f64, 9);
  Tensor drop = test::bools({false, true, false, false, false, false, true, false, false, false,
                             false, false, true, false, false, false},
                            {4, 4});
  Tensor dropout_mask = make({2, 4, 4}, DType::f64, 10);
  struct Miss {
    std::string label, why;
    Fn3 fn;
  };
  std::vector<Miss> misses = {
      {"softmax over dim -2", "not the last",
       [](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(matmul(a, b.transpose(-2, -1)) * 0.5, -2), c);
       }},
      {"dropout between softmax and the second matmul",
       "mul between the softmax and the second matmul",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(matmul(a, b.transpose(-2, -1)) * 0.5, -1) * dropout_mask, c);
       }},
      {"scores read elsewhere", "read elsewhere",
       [](const Tensor& a, const Tensor& b, const Tensor& c) {
         Tensor scores = matmul(a, b.transpose(-2, -1)) * 0.5;
         return matmul(softmax(scores, -1), c) + sum(scores, {-1}, true);
       }},
      {"a finite fill value above the dtype's lowest", "not -inf or at most f64's lowest",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(masked_fill(matmul(a, b.transpose(-2, -1)), drop, -1e9), -1), c);
       }},
  };
  for (const Miss& m : misses) {
    BOOST_TEST_CONTEXT(m.label) {
      Tensor eager = m.fn(q, k, v);
      Compiled c = compile_and_run(m.fn, q, k, v);
      BOOST_TEST(c.attention == 0);
      BOOST_TEST(c.softmax == 1);
      BOOST_TEST(allclose(c.out, eager, 0, 0));  // the primitives, as eager runs them
      BOOST_TEST(c.log.find("not rewritten") != std::string::npos, c.log);
      BOOST_TEST(c.log.find(m.why) != std::string::npos, c.log);
    }
  }
}

BOOST_AUTO_TEST_CASE(compiled_gradients_equal_eager_ones) {
  const Pattern p = patterns()[0];
  Tensor q = make({2, 4, 3}, DType::f64, 11).requires_grad_();
  Tensor k = make({2, 5, 3}, DType::f64, 12).requires_grad_();
  Tensor v = make({2, 5, 2}, DType::f64, 13).requires_grad_();
  Tensor seed = make({2, 4, 2}, DType::f64, 14);
  auto want = autograd::grad({p.fn(q, k, v)}, {q, k, v}, {seed});
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::never;
  auto f = jit::compile(
      [&](const Tensor& a, const Tensor& b, const Tensor& c) { return p.fn(a, b, c); }, options);
  Tensor out = f(q, k, v);
  BOOST_TEST(count(f.core().graph(0), OpId::attention) == 1);
  auto got = autograd::grad({out}, {q, k, v}, {seed});
  for (std::size_t i = 0; i < 3; ++i)
    BOOST_TEST(allclose(got[i], want[i], 1e-10, 1e-12),
               "input " << i << ": " << got[i] << " vs " << want[i]);
}

BOOST_AUTO_TEST_CASE(the_switch_turns_the_rewrite_off) {
  const Pattern p = patterns()[1];
  Tensor q = make({2, 4, 3}, DType::f64, 15), k = make({2, 5, 3}, DType::f64, 16);
  Tensor v = make({2, 5, 2}, DType::f64, 17);
  test::ScopedEnv off("KILN_ATTENTION_REWRITE", "0");
  Compiled c = compile_and_run(p.fn, q, k, v);
  BOOST_TEST(c.attention == 0);
  BOOST_TEST(allclose(c.out, p.fn(q, k, v), 0, 0));
}

BOOST_AUTO_TEST_CASE(the_compiled_gpt_gets_the_rewrite_with_no_change_to_the_model) {
  gpt::GptConfig model;  // vocab 16, seq 8, d_model 32, 2 heads
  model.layers = 2;
  gpt::TrainConfig train;
  train.steps = 2;
  train.batch = 4;
  train.warmup_steps = 1;
  gpt::Trainer eager(model, train, Device::cuda(), false);
  gpt::Trainer compiled(model, train, Device::cuda(), true);
  std::string log;
  double a = eager.forward_backward().item();
  {
    test::ScopedEnv env("KILN_LOG", "fusion");
    reload_log_settings();
    log = test::capture_output(2, [&] {
      double b = compiled.forward_backward().item();
      BOOST_TEST(std::fabs(a - b) <= 1e-5 * std::fabs(a), "eager " << a << ", compiled " << b);
    });
  }
  reload_log_settings();
  BOOST_TEST(log.find("rewritten (matmul.mul.where.softmax.matmul, the mask proven causal)") !=
                 std::string::npos,
             log);
  const auto& core = *compiled.compiled();
  BOOST_TEST(count(core.graph(0), OpId::attention) == model.layers);
  BOOST_TEST(count(core.graph(0), OpId::softmax) == 0);
  // The future mask, made in the trace, is the causal flag: no mask read, no logical_not.
  BOOST_TEST(count(core.graph(0), OpId::logical_not) == 0);
  // The compiled backward differentiates the op: one backward op per layer, no softmax.
  const jit::AotProgram* aot = core.aot(0);
  BOOST_TEST_REQUIRE(aot != nullptr);
  BOOST_TEST(count(aot->partition().backward, OpId::attention_backward) == model.layers);
  BOOST_TEST(count(aot->partition().forward, OpId::attention) == model.layers);
  // Every parameter's gradient agrees with eager's (the key bias's is zero up to rounding:
  // softmax ignores a constant added to a row of scores).
  auto pe = eager.model().parameters(), pc = compiled.model().parameters();
  BOOST_TEST_REQUIRE(pe.size() == pc.size());
  for (std::size_t i = 0; i < pe.size(); ++i)
    BOOST_TEST(allclose(pe[i].grad().to(Device::cpu()), pc[i].grad().to(Device::cpu()), 1e-4, 1e-6),
               "parameter " << i << ": eager " << pe[i].grad().to(Device::cpu()) << " compiled "
                            << pc[i].grad().to(Device::cpu()));
  // Then a whole step: the losses stay equal.
  eager.optimizer_step();
  compiled.optimizer_step();
  double a2 = eager.step(), b2 = compiled.step();
  BOOST_TEST(std::fabs(a2 - b2) <= 1e-5 * std::fabs(a2), "eager " << a2 << ", compiled " << b2);
  // The attention kernels write o in the layout that merges the heads, and dq, dk, dv into the
  // slices of the qkv projection's gradient: no kernel copies o or joins the gradients.
  namespace vgpu = cuda::vgpu;
  eager.model().zero_grad();
  compiled.model().zero_grad();
  eager.forward_backward();
  vgpu::clear_profiles();
  {
    vgpu::set_profiling(true);
    test::ScopeExit profiling_off([] { vgpu::set_profiling(false); });
    compiled.forward_backward();
  }
  int attention_launches = 0;
  for (const auto& p : vgpu::profiles()) {
    BOOST_TEST(p.kernel.rfind("k_cat", 0) != 0, p.kernel);
    BOOST_TEST(p.kernel.rfind("k_copy", 0) != 0, p.kernel);
    attention_launches += p.kernel.rfind("k_attention", 0) == 0;
  }
  BOOST_TEST(attention_launches == 2 * model.layers);
  for (std::size_t i = 0; i < pe.size(); ++i)
    BOOST_TEST(allclose(pe[i].grad().to(Device::cpu()), pc[i].grad().to(Device::cpu()), 1e-4, 1e-6),
               "parameter " << i << " after the profiled step");
}

// Grouped-query attention as users write the repetition of k and v over the query heads
// (q [1, 4, T, D] against k, v [1, 2, T, D]): each becomes one attention node fed the
// un-repeated k and v, so that no repeated copy is made; results and gradients equal eager's.
BOOST_AUTO_TEST_CASE(grouped_query_repetitions_are_undone_and_fed_to_one_attention_node) {
  const std::int64_t B = 1, H = 4, Hkv = 2, G = 2, T = 16, D = 16;
  const double s = 0.25;
  auto repeated_by_expand = [=](const Tensor& x) {
    return x.unsqueeze(2).expand({B, Hkv, G, T, D}).reshape({B, H, T, D});
  };
  auto repeated_by_index = [=](const Tensor& x) {
    Tensor index = test::i64s({0, 0, 1, 1}, {4});  // repeat_interleave's order
    if (x.device().is_cuda()) index = index.to(Device::cuda());
    return index_select(x, 1, index);
  };
  struct Form {
    std::string label;
    Fn3 fn;
    OpId gone;  // the repetition's op, absent from the compiled graph
    bool unrepeats = true;
  };
  std::vector<Form> forms = {
      {"expand + reshape",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor kr = repeated_by_expand(k), vr = repeated_by_expand(v);
         return matmul(softmax(matmul(q, kr.transpose(-2, -1)) * s, -1), vr);
       },
       OpId::expand},
      {"index_select (repeat_interleave)",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor kr = repeated_by_index(k), vr = repeated_by_index(v);
         return matmul(softmax(matmul(q, kr.transpose(-2, -1)) * s, -1), vr);
       },
       OpId::index_select},
      {"broadcasting q [B, Hkv, g, T, D] against k [B, Hkv, 1, T, D]",
       [=](const Tensor& q, const Tensor& k, const Tensor& v) {
         Tensor qg = q.reshape({B, Hkv, G, T, D});
         Tensor scores = matmul(qg, k.unsqueeze(2).transpose(-2, -1)) * s;
         return matmul(softmax(scores, -1), v.unsqueeze(2)).reshape({B, H, T, D});
       },
       OpId::expand, false},
  };
  Tensor q = make({B, H, T, D}, DType::f32, 71).to(Device::cuda());
  Tensor k = make({B, Hkv, T, D}, DType::f32, 72).to(Device::cuda());
  Tensor v = make({B, Hkv, T, D}, DType::f32, 73).to(Device::cuda());
  Tensor seed = make({B, H, T, D}, DType::f32, 74).to(Device::cuda());
  for (const Form& form : forms) {
    BOOST_TEST_CONTEXT(form.label) {
      Tensor eager = form.fn(q, k, v);
      Compiled c = compile_and_run(form.fn, q, k, v);
      BOOST_TEST(c.attention == 1, c.log);
      BOOST_TEST(c.softmax == 0);
      // The broadcast form needs nothing undone: the op broadcasts k and v itself.
      BOOST_TEST((c.log.find("un-repeated") != std::string::npos) == form.unrepeats, c.log);
      BOOST_TEST(allclose(c.out.to(Device::cpu()), eager.to(Device::cpu()), 1e-4, 1e-5));
      // Gradients through the compiled function against eager's.
      Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(),
             vg = v.detach().requires_grad_();
      auto want = autograd::grad({form.fn(qg, kg, vg)}, {qg, kg, vg}, {seed});
      jit::CompileOptions options;
      options.dynamic = jit::DynamicMode::never;
      auto f = jit::compile(
          [&](const Tensor& a, const Tensor& b, const Tensor& d) { return form.fn(a, b, d); },
          options);
      auto got = autograd::grad({f(qg, kg, vg)}, {qg, kg, vg}, {seed});
      BOOST_TEST(count(f.core().graph(0), form.gone) == 0);
      for (std::size_t i = 0; i < 3; ++i)
        BOOST_TEST(allclose(got[i].to(Device::cpu()), want[i].to(Device::cpu()), 1e-4, 1e-5),
                   "input " << i);
    }
  }
}

// A call the fused kernels refuse (f32 at head dim 256 needs more than the 48 KB of shared
// memory a block has on this device) keeps its primitive ops, which fuse as usual, and says why.
BOOST_AUTO_TEST_CASE(a_call_the_kernels_refuse_keeps_its_ops,
                     *test::skip_if(test::needs_virtual_gpu)) {
  test::VirtualDeviceScope small(9, 0, 48 * 1024);
  Tensor q = make({1, 2, 8, 256}, DType::f32, 81).to(Device::cuda());
  Tensor k = make({1, 2, 8, 256}, DType::f32, 82).to(Device::cuda());
  Tensor v = make({1, 2, 8, 256}, DType::f32, 83).to(Device::cuda());
  Fn3 fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return matmul(softmax(matmul(a, b.transpose(-2, -1)) * 0.0625, -1), c);
  };
  Compiled c = compile_and_run(fn, q, k, v);
  BOOST_TEST(c.attention == 0);
  BOOST_TEST(c.softmax == 1);
  BOOST_TEST(c.log.find("the fused kernels refuse the call") != std::string::npos, c.log);
  BOOST_TEST(c.log.find("head dims 256") != std::string::npos, c.log);
  BOOST_TEST(allclose(c.out.to(Device::cpu()), fn(q, k, v).to(Device::cpu()), 1e-5, 1e-6));
}

// A compiled call whose attention step falls back to primitive ops at run time (the op called
// directly, f32 at head dim 256 on a device of 48 KB a block: no tiling fits) is not a kernel
// call, and explain() names the step and why; the same function at head dim 16 is.
BOOST_AUTO_TEST_CASE(a_step_that_falls_back_at_run_time_is_not_a_kernel_call,
                     *test::skip_if(test::needs_virtual_gpu)) {
  test::VirtualDeviceScope small(9, 0, 48 * 1024);
  for (std::int64_t d : {16, 256}) {
    BOOST_TEST_CONTEXT("head dim " << d) {
      Tensor q = make({1, 2, 8, d}, DType::f32, 91).to(Device::cuda());
      Tensor k = make({1, 2, 8, d}, DType::f32, 92).to(Device::cuda());
      Tensor v = make({1, 2, 8, d}, DType::f32, 93).to(Device::cuda());
      jit::CompileOptions options;
      options.dynamic = jit::DynamicMode::never;
      auto f = jit::compile(
          [](const Tensor& a, const Tensor& b, const Tensor& c) {
            return scaled_dot_product_attention(a, b, c, {}, true);
          },
          options);
      Tensor out = f(q, k, v);
      f(q, k, v);
      BOOST_TEST(allclose(out.to(Device::cpu()),
                          scaled_dot_product_attention(q.to(Device::cpu()), k.to(Device::cpu()),
                                                       v.to(Device::cpu()), {}, true),
                          1e-4, 1e-5));
      std::string explained = f.explain();
      if (d == 16) {
        BOOST_TEST(f.core().stats().kernel_calls == 2);
        BOOST_TEST(explained.find("fell back") == std::string::npos, explained);
      } else {
        BOOST_TEST(f.core().stats().kernel_calls == 0);
        BOOST_TEST(explained.find("fell back to primitive ops at run time: attention: no forward "
                                  "tiling fits head dims 256") != std::string::npos,
                   explained);
      }
    }
  }
}

// A causal mask made in the trace (a constant, or tril/triu of one) is proven causal once, at
// trace time, and becomes the op's causal flag: three operands, no mask read. A captured mask
// (which may be updated in place) or a constant that is not exactly the triangle stays a mask.
BOOST_AUTO_TEST_CASE(a_mask_proven_causal_becomes_the_causal_flag) {
  Tensor q = make({2, 4, 3}, DType::f64, 21), k = make({2, 5, 3}, DType::f64, 22);
  Tensor v = make({2, 5, 2}, DType::f64, 23);
  Tensor captured = triu(ones({4, 5}, DType::bool_), 1);
  std::vector<double> nearly(20, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 5; ++j) nearly[i * 5 + j] = -kInf;
  struct Form {
    std::string label;
    Fn3 fn;
    bool causal;
  };
  auto scores = [](const Tensor& a, const Tensor& b) { return matmul(a, b.transpose(-2, -1)); };
  std::vector<Form> forms = {
      {"masked_fill with triu(ones, 1) made in the trace",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         Tensor drop = triu(ones({4, 5}, DType::bool_), 1);
         return matmul(softmax(masked_fill(scores(a, b) * 0.5, drop, -kInf), -1), c);
       },
       true},
      {"where(tril(ones), scores, -inf) made in the trace",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         Tensor keep = tril(ones({4, 5}, DType::bool_));
         return matmul(softmax(where(keep, scores(a, b), -kInf) * 0.5, -1), c);
       },
       true},
      {"an additive constant, -inf above the diagonal",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         Tensor additive = test::f64s(nearly, {4, 5});
         return matmul(softmax(scores(a, b) * 0.5 + additive, -1), c);
       },
       true},
      {"an additive constant with one entry off the triangle",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         std::vector<double> off = nearly;
         off[1] = 0.0;  // row 0 sees key 1 too
         off[4] = -kInf;
         return matmul(softmax(scores(a, b) * 0.5 + test::f64s(off, {4, 5}), -1), c);
       },
       false},
      {"a captured triu mask (can be updated in place)",
       [=](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(masked_fill(scores(a, b) * 0.5, captured, -kInf), -1), c);
       },
       false},
  };
  for (const Form& form : forms) {
    BOOST_TEST_CONTEXT(form.label) {
      jit::CompileOptions options;
      options.dynamic = jit::DynamicMode::never;
      auto f = jit::compile(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) { return form.fn(a, b, c); },
          options);
      Tensor out = f(q, k, v);
      BOOST_TEST(allclose(out, form.fn(q, k, v), 1e-12, 1e-12));
      const graph::Graph& g = f.core().graph(0);
      int attention = -1;
      for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].op == OpId::attention) attention = static_cast<int>(i);
      BOOST_TEST_REQUIRE(attention >= 0);
      BOOST_TEST(g.nodes[attention].attrs.causal == form.causal);
      BOOST_TEST(g.nodes[attention].inputs.size() == (form.causal ? 3u : 4u));
      if (form.causal) BOOST_TEST(count(g, OpId::logical_not) == 0);
    }
  }
  // The captured mask's in-place update is seen: its call reads the mask.
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::never;
  auto f = jit::compile(
      [&](const Tensor& a, const Tensor& b, const Tensor& c) { return forms[4].fn(a, b, c); },
      options);
  f(q, k, v);
  captured.copy_(triu(ones({4, 5}, DType::bool_), 2));
  BOOST_TEST(allclose(f(q, k, v), forms[4].fn(q, k, v), 1e-12, 1e-12));
}

BOOST_AUTO_TEST_SUITE_END()
