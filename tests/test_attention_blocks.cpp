// The attention rewrite on whole blocks (demos/attention_blocks.h): a Llama-style block (RoPE,
// grouped-query attention by expand + reshape, causal) and a GPT-style one, at head dims 8 to
// 128. A compiled forward + backward with KILN_ATTENTION_REWRITE=1 makes no more launches
// (generated kernels and library calls) than with =0, and both give the same loss and gradients.
// The same for a compiled training step of every zoo model with attention (demos/zoo/catalog.h:
// GPT-2, Llama, ViT, GPT-NeoX, BERT; the MLP-Mixer has none) at those head dims, one case per
// model. GPT-2 and BERT train with dropout, on the attention probabilities too: both runs of a
// case draw the same masks (each model's own generator, seeded alike).
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "demos/attention_blocks.h"
#include "demos/zoo/catalog.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "support/reference.h"
#include "support/scoped_env.h"

using namespace kiln;

namespace {

int count(const graph::Graph& g, OpId op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

std::int64_t launches_so_far() {
  return jit::codegen::launch_stats().launches.load() + jit::codegen::lt_stats().calls.load();
}

struct Step {
  std::int64_t launches = 0;  // of a warm forward + backward
  int attention_nodes = 0, logical_nots = 0;
  Tensor loss;
  std::vector<Tensor> grads;
};

// Compiles the block's loss (sum of squares of its output) under the switch, and measures its
// second (warm) forward + backward.
Step compiled_step(bool llama, const demos::AttentionBlock& b, const Tensor& x, bool rewrite) {
  test::ScopedEnv gate("KILN_ATTENTION_REWRITE", rewrite ? "1" : "0");
  jit::CompileOptions options;
  options.dynamic = jit::DynamicMode::never;
  auto loss_of = [&b, llama](const Tensor& xs, const std::vector<Tensor>& w) {
    Tensor y = llama ? demos::llama_attention(b, xs, w) : demos::gpt_attention(b, xs, w);
    return sum(y * y);
  };
  std::vector<Tensor> w;
  for (const Tensor& t : b.weights) w.push_back(t.detach().requires_grad_());
  Step s;
  auto run = [&](auto& f) {
    Tensor loss = llama ? f(x, w[0], w[1], w[2], w[3]) : f(x, w[0], w[1], w[1], w[1]);
    auto grads = autograd::grad({loss}, w);
    return std::pair(loss, grads);
  };
  auto f = jit::compile(
      [&](const Tensor& xs, const Tensor& a, const Tensor& c, const Tensor& d, const Tensor& e) {
        return llama ? loss_of(xs, {a, c, d, e}) : loss_of(xs, {a, c});
      },
      options);
  run(f);  // cold: traces and compiles
  std::int64_t before = launches_so_far();
  auto [loss, grads] = run(f);
  s.launches = launches_so_far() - before;
  s.attention_nodes = count(f.core().graph(0), OpId::attention);
  s.logical_nots = count(f.core().graph(0), OpId::logical_not);
  s.loss = loss.to(Device::cpu());
  for (const Tensor& g : grads) s.grads.push_back(g.to(Device::cpu()));
  return s;
}

struct ZooStep {
  std::int64_t launches = 0;  // of a warm forward + backward over the step's micro-batches
  int attention_nodes = 0;
  double loss = 0;
  std::vector<Tensor> grads;  // on the host
};

// A zoo model's compiled training step traced under the switch (f32, one layer): the loss and
// gradients of its second (warm) forward + backward on the same micro-batches.
ZooStep zoo_step(const zoo::CatalogEntry& entry, bool rewrite) {
  test::ScopedEnv gate("KILN_ATTENTION_REWRITE", rewrite ? "1" : "0");
  zoo::TrainOptions options;
  options.compiled = true;
  options.name = entry.name;
  auto run = entry.start(1, DType::f32, Device::cuda(), options);
  Generator data(2);
  const std::vector<zoo::Batch> micro_batches = entry.step_batches(data, Device::cuda());
  run->forward_backward(micro_batches);  // cold: traces and compiles
  const std::int64_t before = launches_so_far();
  std::vector<Tensor> losses = run->forward_backward(micro_batches);
  ZooStep s;
  s.launches = launches_so_far() - before;
  BOOST_TEST_REQUIRE(run->compiled()->num_entries() == 1u);
  s.attention_nodes = count(run->compiled()->graph(0), OpId::attention);
  for (const Tensor& l : losses) s.loss += l.item();
  for (const Tensor& p : run->module().parameters()) s.grads.push_back(p.grad().to(Device::cpu()));
  return s;
}

// Every head dim of the blocks' test for the model `make_entry(head_dim)` builds.
template <typename MakeEntry>
void check_zoo_model(MakeEntry make_entry) {
  for (std::int64_t d : {8, 16, 64, 80, 128}) {
    const zoo::CatalogEntry entry = make_entry(d);
    BOOST_TEST_CONTEXT(entry.name << ", head dim " << d) {
      ZooStep on = zoo_step(entry, true), off = zoo_step(entry, false);
      BOOST_TEST_MESSAGE(entry.name << " d " << d << ": launches on " << on.launches << ", off "
                                    << off.launches);
      BOOST_TEST(on.attention_nodes == 1);  // one layer, its attention rewritten
      BOOST_TEST(off.attention_nodes == 0);
      BOOST_TEST(on.launches <= off.launches,
                 on.launches << " launches on, " << off.launches << " off");
      BOOST_TEST(std::fabs(on.loss - off.loss) <= 1e-5 * std::fabs(off.loss),
                 on.loss << " vs " << off.loss);
      BOOST_TEST_REQUIRE(on.grads.size() == off.grads.size());
      for (std::size_t i = 0; i < on.grads.size(); ++i)
        BOOST_TEST(allclose(on.grads[i], off.grads[i], 1e-3, 1e-5), "parameter " << i);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_blocks)

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_a_compiled_step) {
  for (bool llama : {true, false})
    for (std::int64_t d : {8, 16, 64, 80, 128}) {
      BOOST_TEST_CONTEXT((llama ? "llama" : "gpt") << " block, head dim " << d) {
        demos::AttentionBlockConfig c;
        c.head_dim = d;
        if (!llama) c.heads = 2;
        demos::AttentionBlock b =
            llama ? demos::llama_block(c, Device::cuda()) : demos::gpt_block(c, Device::cuda());
        Generator gen(7);
        Tensor x = randn({c.batch, c.time, c.d_model()}, DType::f32, &gen).to(Device::cuda());
        Step on = compiled_step(llama, b, x, true), off = compiled_step(llama, b, x, false);
        BOOST_TEST_MESSAGE((llama ? "llama" : "gpt") << " d " << d << ": launches on "
                                                     << on.launches << ", off " << off.launches);
        BOOST_TEST(on.attention_nodes == 1);
        BOOST_TEST(off.attention_nodes == 0);
        // llama: masked_fill(logical_not(tril)) feeds the op tril itself; gpt: the triu buffer
        // (captured here) is negated once.
        BOOST_TEST(on.logical_nots == (llama ? 0 : 1));
        BOOST_TEST(on.launches <= off.launches,
                   on.launches << " launches on, " << off.launches << " off");
        BOOST_TEST(allclose(on.loss, off.loss, 1e-4, 1e-4), on.loss << " vs " << off.loss);
        for (std::size_t i = 0; i < on.grads.size(); ++i)
          BOOST_TEST(allclose(on.grads[i], off.grads[i], 1e-3, 1e-4), "weight " << i);
      }
    }
}

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_gpt2_training) {
  check_zoo_model([](std::int64_t d) { return zoo::gpt2_entry(1, d); });
}

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_llama_training) {
  check_zoo_model([](std::int64_t d) { return zoo::llama_entry(d, 1); });
}

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_vit_training) {
  check_zoo_model([](std::int64_t d) { return zoo::vit_entry(1, d); });
}

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_neox_training) {
  check_zoo_model([](std::int64_t d) { return zoo::neox_entry(d, 1); });
}

BOOST_AUTO_TEST_CASE(the_rewrite_never_adds_launches_to_bert_training) {
  check_zoo_model([](std::int64_t d) { return zoo::bert_entry(1, d); });
}

BOOST_AUTO_TEST_SUITE_END()
