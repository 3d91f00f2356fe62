// Weight-only int8 (nn::quantize_int8, Linear::quantize_int8): one symmetric scale per output
// channel, hand-computed; the quantized forward equals the dequantized weight's product in f64
// and stays within the rounding's bound of the float layer; the int8 weights and scales save and
// load through safetensors, and a quantized file does not load into a float model.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "autograd/nn.h"
#include "autograd/safetensors.h"
#include "support/reference.h"
#include "support/temp_dir.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Two Linears and a FeedForward, the second Linear sharing the first's weight (a tied head).
class Tied : public nn::Module {
 public:
  Tied() : a(6, 6), b(6, 6, false), mlp(6, 12, 6) {
    b.weight = a.weight;
    register_module("a", a);
    register_module("b", b);
    register_module("mlp", mlp);
  }
  Tensor forward(const Tensor& x) const { return b(mlp(a(x))); }
  nn::Linear a, b;
  nn::FeedForward mlp;
};

// x (q s)^T + bias in f64 by loops: the dequantized weight's product.
std::vector<double> dequantized_forward(const Tensor& x, const nn::Linear& fc) {
  auto xs = x.to_vector<double>(), q = fc.weight.to(DType::f64).to_vector<double>();
  auto s = fc.weight_scale.to_vector<double>();
  auto b = fc.bias.defined() ? fc.bias.to_vector<double>() : std::vector<double>(s.size(), 0.0);
  const std::int64_t rows = x.shape()[0], in = x.shape()[1], out = fc.weight.shape()[0];
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (std::int64_t i = 0; i < in; ++i) acc += xs[r * in + i] * q[o * in + i] * s[o];
      y[r * out + o] = acc + b[o];
    }
  return y;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quantize_int8)

BOOST_AUTO_TEST_CASE(each_output_channel_gets_max_abs_over_127) {
  nn::Linear fc(3, 2);
  fc.weight = from_vector<float>({0.5f, -1.27f, 0.004f, 0, 0, 0}, {2, 3});
  fc.quantize_int8();
  BOOST_TEST(fc.quantized());
  BOOST_TEST(fc.weight.dtype() == DType::i8);
  BOOST_TEST(fc.weight_scale.dtype() == DType::f32);
  // Row 0: scale 1.27 / 127 = 0.01, q = round(w / 0.01); row 1 (all zero): scale 1.
  check_values(fc.weight_scale, {2}, {1.27f / 127.0f, 1.0});
  check_values(fc.weight, {2, 3}, {50, -127, 0, 0, 0, 0});
  BOOST_TEST(!fc.weight.requires_grad());
  // The int8 weight and its scale are buffers; the bias stays the one parameter.
  BOOST_TEST(fc.parameters().size() == 1u);
  auto buffers = fc.named_buffers();
  BOOST_TEST_REQUIRE(buffers.size() == 2u);
  BOOST_TEST(buffers[0].first == "weight");
  BOOST_TEST(buffers[1].first == "weight_scale");
  KILN_CHECK_THROWS(fc.quantize_int8(), Error, "int8 already");
}

BOOST_AUTO_TEST_CASE(the_forward_is_the_dequantized_product_near_the_float_layer) {
  Generator gen(2);
  nn::Linear fc(40, 24, true, DType::f32, &gen);
  Tensor x = randn({5, 40}, DType::f32, &gen);
  Tensor before = fc(x);
  Tensor w = fc.weight.detach();
  fc.quantize_int8();
  Tensor got = fc(x);
  check_close(got, {5, 24}, dequantized_forward(x, fc), 1e-5, 1e-5);
  // Each weight moves by at most half its row's step: |y - y_float| <= sum |x| * scale / 2.
  auto xs = x.to_vector<double>(), y = got.to_vector<double>(), y0 = before.to_vector<double>();
  auto s = fc.weight_scale.to_vector<double>();
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t o = 0; o < 24; ++o) {
      double l1 = 0;
      for (std::int64_t i = 0; i < 40; ++i) l1 += std::abs(xs[r * 40 + i]);
      BOOST_TEST(std::abs(y[r * 24 + o] - y0[r * 24 + o]) <= l1 * s[o] / 2 + 1e-5);
    }
}

BOOST_AUTO_TEST_CASE(a_module_quantizes_every_linear_and_a_tied_one_gets_its_copy) {
  Tied model;
  Tensor embedding = model.a.weight;
  nn::quantize_int8(model);
  BOOST_TEST(model.a.quantized());
  BOOST_TEST(model.b.quantized());
  BOOST_TEST(model.mlp.fc1.quantized());
  BOOST_TEST(model.mlp.fc2.quantized());
  BOOST_TEST(embedding.dtype() == DType::f32);  // the shared tensor itself is left as it was
  // The FeedForward runs its quantized layers (fc1 carries the activation).
  Tensor x = randn({3, 6});
  Tensor h = model.mlp.fc1(x);
  check_close(model.mlp(x), {3, 6}, dequantized_forward(h, model.mlp.fc2), 1e-5, 1e-5);
}

BOOST_AUTO_TEST_CASE(quantized_weights_save_and_load_through_safetensors) {
  TempDir dir;
  const std::string path = dir / "int8.safetensors";
  Generator g1(1), g2(2);
  nn::Linear saved(16, 8, true, DType::bf16, &g1), loaded(16, 8, true, DType::bf16, &g2);
  saved.quantize_int8();
  saved.save(path);
  auto file = load_safetensors(path).tensors;
  BOOST_TEST_REQUIRE(file.size() == 3u);
  for (const auto& [name, t] : file)
    BOOST_TEST(dtype_name(t.dtype()) == (name == "weight" ? "i8" : "bf16"), name);
  loaded.quantize_int8();
  loaded.load(path);
  BOOST_TEST(loaded.weight.to_vector<double>() == saved.weight.to_vector<double>(),
             boost::test_tools::per_element());
  BOOST_TEST(loaded.weight_scale.to_vector<double>() == saved.weight_scale.to_vector<double>(),
             boost::test_tools::per_element());
  Tensor x = randn({2, 16}).to(DType::bf16);
  BOOST_TEST(loaded(x).to_vector<double>() == saved(x).to_vector<double>(),
             boost::test_tools::per_element());
  // A float model refuses the file: the weight's kind differs and the scale has no slot.
  nn::Linear float_model(16, 8, true, DType::bf16);
  KILN_CHECK_THROWS(float_model.load(path), Error, "weight", "weight_scale");
}

BOOST_AUTO_TEST_CASE(linear_int8_names_a_wrong_weight_or_scale) {
  Tensor x = randn({2, 4}), q = zeros({3, 4}, DType::i8), s = ones({3});
  check_close(linear_int8(x, q, s), {2, 3}, std::vector<double>(6, 0.0), 0, 0);
  KILN_CHECK_THROWS(linear_int8(x, q.to(DType::f32), s), DTypeError, "linear_int8", "i8", "f32");
  KILN_CHECK_THROWS(linear_int8(x, q, ones({4})), ShapeError, "linear_int8", "[4]", "[3, 4]");
  KILN_CHECK_THROWS(linear_int8(randn({2, 5}), q, s), ShapeError, "linear_int8", "[2, 5]");
}

BOOST_AUTO_TEST_SUITE_END()
