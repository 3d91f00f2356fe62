// Gradchecks of the indexing and joining ops (gather, index_select, embedding, scatter_add,
// index_add, cat, stack, pad), of matmul and linear in every operand layout, and of the
// composites (softmax, log_softmax, layer_norm, rms_norm, cross_entropy, mse_loss, dropout).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "support/gradcheck_support.h"

namespace {

using kiln::DType;
using kiln::Generator;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::test;

Tensor indices(const std::vector<std::int64_t>& values, const Shape& shape) {
  return kiln::from_vector(values, shape);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck_indexing)

BOOST_AUTO_TEST_CASE(gather) {
  Tensor x = uniform({3, 4}, -1.0, 1.0, 1);
  // Repeated indices: their gradients add up in x.
  Tensor idx1 = indices({0, 3, 3, 1, 2, 2}, {3, 2});
  check("gather dim 1", [idx1](const Inputs& in) { return kiln::gather(in[0], 1, idx1); }, {x});
  Tensor idx0 = indices({2, 0, 0, 1, 2, 2, 1, 0}, {2, 4});
  check("gather dim 0", [idx0](const Inputs& in) { return kiln::gather(in[0], 0, idx0); }, {x});
  check("gather dim -1", [idx1](const Inputs& in) { return kiln::gather(in[0], -1, idx1); }, {x});
}

BOOST_AUTO_TEST_CASE(index_select) {
  Tensor x = uniform({4, 3}, -1.0, 1.0, 10);
  Tensor idx = indices({3, 0, 3, 1, 3}, {5});
  check("index_select dim 0", [idx](const Inputs& in) { return kiln::index_select(in[0], 0, idx); },
        {x});
  Tensor idx2 = indices({2, 2, 0}, {3});
  check("index_select dim -1",
        [idx2](const Inputs& in) { return kiln::index_select(in[0], -1, idx2); }, {x});
}

BOOST_AUTO_TEST_CASE(embedding) {
  Tensor weight = uniform({5, 3}, -1.0, 1.0, 20);
  Tensor ids = indices({4, 0, 4, 2, 2, 4}, {2, 3});
  check("embedding [2,3] ids", [ids](const Inputs& in) { return kiln::embedding(in[0], ids); },
        {weight});
  Tensor ids32 = indices({1, 3, 1}, {3}).to(DType::i32);
  check("embedding i32 ids", [ids32](const Inputs& in) { return kiln::embedding(in[0], ids32); },
        {weight});
}

BOOST_AUTO_TEST_CASE(scatter_add) {
  // self [3, 5]; index [2, 3] along dim 1; src [3, 4] larger than the index in both dims:
  // src positions outside the index's extent get no gradient.
  Tensor self = uniform({3, 5}, -1.0, 1.0, 30);
  Tensor src = uniform({3, 4}, -1.0, 1.0, 31);
  Tensor idx = indices({4, 0, 4, 1, 1, 3}, {2, 3});
  check("scatter_add wrt self and src",
        [idx](const Inputs& in) { return kiln::scatter_add(in[0], 1, idx, in[1]); }, {self, src});
  Tensor idx0 = indices({2, 0, 1, 0, 2}, {1, 5});
  Tensor src0 = uniform({2, 5}, -1.0, 1.0, 32);
  check("scatter_add dim 0",
        [idx0](const Inputs& in) { return kiln::scatter_add(in[0], 0, idx0, in[1]); },
        {self, src0});
  // Only src requires grad.
  Tensor fixed = kiln::zeros({3, 5}, DType::f64);
  check("scatter_add wrt src only",
        [idx, fixed](const Inputs& in) { return kiln::scatter_add(fixed, 1, idx, in[0]); }, {src});
}

BOOST_AUTO_TEST_CASE(index_add) {
  Tensor self = uniform({4, 3}, -1.0, 1.0, 40);
  Tensor source = uniform({3, 3}, -1.0, 1.0, 41);
  Tensor idx = indices({1, 3, 1}, {3});
  check("index_add dim 0",
        [idx](const Inputs& in) { return kiln::index_add(in[0], 0, idx, in[1]); }, {self, source});
  Tensor source1 = uniform({4, 2}, -1.0, 1.0, 42);
  Tensor idx1 = indices({2, 2}, {2});
  check("index_add dim -1",
        [idx1](const Inputs& in) { return kiln::index_add(in[0], -1, idx1, in[1]); },
        {self, source1});
}

BOOST_AUTO_TEST_CASE(cat_stack) {
  Tensor a = uniform({2, 1}, -1.0, 1.0, 50);
  Tensor b = uniform({2, 3}, -1.0, 1.0, 51);
  Tensor c = uniform({2, 2}, -1.0, 1.0, 52);
  check("cat dim 1",
        [](const Inputs& in) {
          return kiln::cat({in[0], in[1], in[2]}, 1);
        },
        {a, b, c});
  check("cat dim -1 reordered",
        [](const Inputs& in) {
          return kiln::cat({in[2], in[0], in[1]}, -1);
        },
        {a, b, c});
  // Dim 0, with a transposed (non-contiguous) input: [1, 2], [3, 2] and [2, 2].
  check("cat dim 0",
        [](const Inputs& in) {
          return kiln::cat({in[0].t(), in[1].t(), in[2]}, 0);
        },
        {a, b, c});
  // An input used twice, and one that does not require grad.
  Tensor k = kiln::ones({2, 3}, DType::f64);
  check("cat repeated and constant",
        [k](const Inputs& in) {
          return kiln::cat({in[0], k, in[0]}, 1);
        },
        {b});
  Tensor d = uniform({2, 3}, -1.0, 1.0, 53);
  Tensor e = uniform({2, 3}, -1.0, 1.0, 54);
  for (std::int64_t dim : {0, 1, 2, -1})
    check("stack dim " + std::to_string(dim),
          [dim](const Inputs& in) {
            return kiln::stack({in[0], in[1], in[2]}, dim);
          },
          {b, d, e});
}

BOOST_AUTO_TEST_CASE(pad) {
  Tensor x = uniform({2, 3}, -1.0, 1.0, 60);
  check("pad last dim", [](const Inputs& in) { return kiln::pad(in[0], {1, 2}); }, {x});
  check("pad both dims value",
        [](const Inputs& in) {
          return kiln::pad(in[0], {0, 1, 2, 1}, 1.5);
        },
        {x});
  check("pad 3-D",
        [](const Inputs& in) {
          return kiln::pad(in[0], {1, 0});
        },
        {uniform({2, 2, 2}, -1.0, 1.0, 61)});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradcheck_linear_algebra)

BOOST_AUTO_TEST_CASE(matmul_layouts) {
  auto mm = [](const Inputs& in) { return kiln::matmul(in[0], in[1]); };
  struct Case {
    const char* name;
    Shape a, b;
  };
  const Case cases[] = {
      {"2-D", {2, 3}, {3, 4}},
      {"batched", {2, 2, 3}, {2, 3, 2}},
      {"broadcast batch", {2, 1, 2, 3}, {3, 3, 2}},
      {"batched @ 2-D", {2, 2, 3}, {3, 2}},
      {"2-D @ batched", {2, 3}, {2, 3, 2}},
      {"1-D @ 1-D", {4}, {4}},
      {"1-D @ 2-D", {3}, {3, 2}},
      {"2-D @ 1-D", {2, 3}, {3}},
      {"1-D @ batched", {3}, {2, 3, 2}},
      {"batched @ 1-D", {2, 2, 3}, {3}},
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    Tensor a = uniform(c.a, -1.0, 1.0, seed++);
    Tensor b = uniform(c.b, -1.0, 1.0, seed++);
    check(std::string("matmul ") + c.name, mm, {a, b});
  }
  // Transposed (non-contiguous) operands.
  check("matmul transposed operands",
        [](const Inputs& in) { return kiln::matmul(in[0].t(), in[1].t()); },
        {uniform({3, 2}, -1.0, 1.0, 150), uniform({4, 3}, -1.0, 1.0, 151)});
  // The same tensor on both sides.
  check("matmul x @ x^T", [](const Inputs& in) { return kiln::matmul(in[0], in[0].t()); },
        {uniform({2, 3}, -1.0, 1.0, 152)});
}

BOOST_AUTO_TEST_CASE(linear_with_and_without_bias) {
  Tensor x = uniform({2, 3}, -1.0, 1.0, 200);
  Tensor w = uniform({4, 3}, -1.0, 1.0, 201);
  Tensor b = uniform({4}, -1.0, 1.0, 202);
  check("linear with bias", [](const Inputs& in) { return kiln::linear(in[0], in[1], in[2]); },
        {x, w, b});
  check("linear without bias", [](const Inputs& in) { return kiln::linear(in[0], in[1]); }, {x, w});
  check("linear batched input", [](const Inputs& in) { return kiln::linear(in[0], in[1], in[2]); },
        {uniform({2, 2, 3}, -1.0, 1.0, 203), w, b});
  check("linear 1-D input", [](const Inputs& in) { return kiln::linear(in[0], in[1], in[2]); },
        {uniform({3}, -1.0, 1.0, 204), w, b});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradcheck_composites)

BOOST_AUTO_TEST_CASE(softmax_log_softmax) {
  for (std::int64_t dim : {0, 1, -1}) {
    Tensor x = uniform({3, 4}, -2.0, 2.0, 300 + static_cast<std::uint64_t>(dim + 1));
    check("softmax dim " + std::to_string(dim),
          [dim](const Inputs& in) { return kiln::softmax(in[0], dim); }, {x});
    check("log_softmax dim " + std::to_string(dim),
          [dim](const Inputs& in) { return kiln::log_softmax(in[0], dim); }, {x});
  }
  check("softmax 3-D middle dim", [](const Inputs& in) { return kiln::softmax(in[0], 1); },
        {uniform({2, 3, 2}, -2.0, 2.0, 310)});
  check("log_softmax of a non-leaf",
        [](const Inputs& in) { return kiln::log_softmax(in[0] * in[0] + 1.0, -1); },
        {uniform({2, 3}, -2.0, 2.0, 311)});
  // The closed-form backward composes with a downstream op that weights outputs unevenly.
  Tensor w = kiln::from_vector(std::vector<double>{1, -2, 3, 0.5}, {4});
  check("weighted softmax",
        [w](const Inputs& in) { return (kiln::softmax(in[0], 1) * w).sum({1}); },
        {uniform({3, 4}, -2.0, 2.0, 312)});
}

BOOST_AUTO_TEST_CASE(layer_norm) {
  Tensor x = uniform({2, 3, 4}, -2.0, 2.0, 400);
  Tensor w = uniform({4}, 0.5, 1.5, 401);
  Tensor b = uniform({4}, -0.5, 0.5, 402);
  check("layer_norm weight and bias",
        [](const Inputs& in) { return kiln::layer_norm(in[0], {4}, in[1], in[2]); }, {x, w, b});
  check("layer_norm plain", [](const Inputs& in) { return kiln::layer_norm(in[0], {4}); },
        {uniform({3, 4}, -2.0, 2.0, 403)});
  Tensor w2 = uniform({3, 4}, 0.5, 1.5, 404);
  Tensor b2 = uniform({3, 4}, -0.5, 0.5, 405);
  check("layer_norm over two dims",
        [](const Inputs& in) {
          return kiln::layer_norm(in[0], {3, 4}, in[1], in[2]);
        },
        {uniform({2, 3, 4}, -2.0, 2.0, 406), w2, b2});
}

BOOST_AUTO_TEST_CASE(rms_norm) {
  Tensor x = uniform({2, 3, 4}, -2.0, 2.0, 500);
  Tensor w = uniform({4}, 0.5, 1.5, 501);
  check("rms_norm weight", [](const Inputs& in) { return kiln::rms_norm(in[0], {4}, in[1]); },
        {x, w});
  check("rms_norm plain", [](const Inputs& in) { return kiln::rms_norm(in[0], {3, 4}); }, {x});
}

BOOST_AUTO_TEST_CASE(cross_entropy) {
  using kiln::Reduction;
  Tensor logits = uniform({4, 3}, -2.0, 2.0, 600);
  Tensor target = indices({2, -100, 0, 1}, {4});
  check("cross_entropy mean with ignore_index",
        [target](const Inputs& in) { return kiln::cross_entropy(in[0], target); }, {logits});
  Tensor target2 = indices({2, 1, 1, 0}, {4});
  check("cross_entropy sum",
        [target2](const Inputs& in) {
          return kiln::cross_entropy(in[0], target2, -100, Reduction::sum);
        },
        {logits});
  check("cross_entropy none custom ignore_index",
        [target2](const Inputs& in) {
          return kiln::cross_entropy(in[0], target2, 1, Reduction::none);
        },
        {logits});
  check("cross_entropy unbatched",
        [](const Inputs& in) { return kiln::cross_entropy(in[0], indices({2}, {})); },
        {uniform({5}, -2.0, 2.0, 601)});
}

BOOST_AUTO_TEST_CASE(mse_loss) {
  using kiln::Reduction;
  Tensor input = uniform({2, 3}, -1.0, 1.0, 700);
  Tensor target = uniform({2, 3}, -1.0, 1.0, 701);
  check("mse_loss mean", [](const Inputs& in) { return kiln::mse_loss(in[0], in[1]); },
        {input, target});
  check("mse_loss sum",
        [](const Inputs& in) { return kiln::mse_loss(in[0], in[1], Reduction::sum); },
        {input, target});
  check("mse_loss none",
        [](const Inputs& in) { return kiln::mse_loss(in[0], in[1], Reduction::none); },
        {input, target});
}

BOOST_AUTO_TEST_CASE(dropout_fixed_generator) {
  // A fresh generator with the same seed on every call gives the same mask, so the op is a
  // fixed linear map that central differences reproduce.
  auto fn = [](const Inputs& in) {
    Generator gen(1234);
    return kiln::dropout(in[0], 0.3, /*training=*/true, &gen);
  };
  Tensor x = uniform({4, 5}, -1.0, 1.0, 800);
  check("dropout p=0.3", fn, {x});
  check("dropout eval",
        [](const Inputs& in) { return kiln::dropout(in[0], 0.3, /*training=*/false) * 2.0; }, {x});
  check("dropout p=1", [](const Inputs& in) { return kiln::dropout(in[0], 1.0); }, {x});
  // The mask really drops something and scales the rest by 1 / (1 - p).
  Tensor y = fn({x});
  y.sum().backward();
  auto g = x.grad().to_vector<double>();
  int dropped = 0, kept = 0;
  for (double v : g) {
    if (v == 0.0)
      ++dropped;
    else if (std::abs(v - 1.0 / 0.7) < 1e-12)
      ++kept;
  }
  BOOST_TEST(dropped > 0);
  BOOST_TEST(kept > 0);
  BOOST_TEST(dropped + kept == 20);
}

BOOST_AUTO_TEST_SUITE_END()
