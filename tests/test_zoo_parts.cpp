// The pieces of the model zoo (demos/zoo/) against hand-written references on the CPU: patchify's
// layout, rotate_half, RMSNorm's formula, the rotary tables, grouped-query repetition (through
// attention with one key / value head equalling attention with that head copied), GPT-NeoX's
// attention (fused projection layout, partial rotary) against loops, the masked-LM task's layout,
// BERT's key-padding mask (padding is invisible), dropout's train / eval modes, and the errors
// that bad configurations and inputs get.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "demos/zoo/catalog.h"
#include "demos/zoo/llama.h"
#include "demos/zoo/patchify.h"

using namespace kiln;

BOOST_AUTO_TEST_SUITE(model_zoo_parts)

// Element [b, n, (c, y, x)] of the patches is image [b, c, py * P + y, px * P + x] for patch
// n = py * (W / P) + px.
BOOST_AUTO_TEST_CASE(patchify_cuts_row_major_patches_each_flattened_channel_major) {
  const std::int64_t B = 2, C = 3, H = 4, W = 6, P = 2;
  std::vector<double> pixels(B * C * H * W);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<double>(i);
  Tensor images = from_vector(pixels, {B, C, H, W});
  Tensor patches = zoo::patchify(images, P);
  BOOST_TEST_REQUIRE(patches.shape() == (Shape{B, (H / P) * (W / P), C * P * P}));
  std::vector<double> got = patches.contiguous().to_vector<double>();
  const std::int64_t N = (H / P) * (W / P), D = C * P * P;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t y = 0; y < P; ++y)
          for (std::int64_t x = 0; x < P; ++x) {
            const std::int64_t row = n / (W / P) * P + y, col = n % (W / P) * P + x;
            const double want = pixels[((b * C + c) * H + row) * W + col];
            BOOST_TEST(got[(b * N + n) * D + (c * P + y) * P + x] == want);
          }
}

BOOST_AUTO_TEST_CASE(rotate_half_negates_and_swaps_the_halves) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  BOOST_TEST(
      zoo::rotate_half(x).to_vector<double>() == (std::vector<double>{-3, -4, 1, 2, -7, -8, 5, 6}),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rms_norm_scales_by_the_root_mean_square) {
  zoo::RmsNorm norm(4, 1e-5);
  {
    NoGradGuard no_grad;
    norm.weight.copy_(from_vector(std::vector<float>{1, 2, 3, 4}, {4}));
  }
  std::vector<double> x = {1, -2, 3, 0.5};
  Tensor y = norm(from_vector(std::vector<float>(x.begin(), x.end()), {1, 4}));
  const double rms = std::sqrt((1 + 4 + 9 + 0.25) / 4 + 1e-5);
  std::vector<double> got = y.to(DType::f64).to_vector<double>();
  for (int i = 0; i < 4; ++i)
    BOOST_TEST(got[i] == x[i] / rms * (i + 1), boost::test_tools::tolerance(1e-6));
}

// cos / sin at position p, dim i: frequency base^(-2 (i mod d/2) / d); the mask 0 on and below
// the diagonal, -inf above.
BOOST_AUTO_TEST_CASE(llama_buffers_hold_the_rotary_tables_and_the_additive_causal_mask) {
  zoo::LlamaConfig c;
  zoo::Llama model(c, 1);
  std::vector<float> cos = model.rope_cos.to_vector<float>(),
                     sin = model.rope_sin.to_vector<float>();
  std::vector<float> mask = model.causal_mask.to_vector<float>();
  const std::int64_t d = c.head_dim;
  for (std::int64_t p = 0; p < c.seq_len; ++p) {
    for (std::int64_t i = 0; i < d; ++i) {
      const double angle = p * std::pow(c.rope_base, -2.0 * (i % (d / 2)) / d);
      BOOST_TEST(cos[p * d + i] == std::cos(angle), boost::test_tools::tolerance(1e-6));
      BOOST_TEST(sin[p * d + i] == std::sin(angle), boost::test_tools::tolerance(1e-6));
    }
    for (std::int64_t j = 0; j < c.seq_len; ++j)
      BOOST_TEST((j <= p ? mask[p * c.seq_len + j] == 0
                         : std::isinf(mask[p * c.seq_len + j]) && mask[p * c.seq_len + j] < 0));
  }
}

// Grouped-query attention with kv_heads = 1 gives what the same layer gives with every key /
// value head a copy of that one (the projection's rows repeated): repeat_kv is a copy per head.
BOOST_AUTO_TEST_CASE(grouped_query_attention_equals_attention_over_copied_heads) {
  zoo::LlamaConfig grouped;
  grouped.head_dim = 8, grouped.heads = 4, grouped.kv_heads = 1;
  zoo::LlamaConfig full = grouped;
  full.kv_heads = 4;
  Generator gen(3);
  zoo::LlamaAttention a(grouped, &gen), b(full, &gen);
  {
    NoGradGuard no_grad;
    b.wq.weight.copy_(a.wq.weight);
    b.wo.weight.copy_(a.wo.weight);
    b.wk.weight.copy_(cat({a.wk.weight, a.wk.weight, a.wk.weight, a.wk.weight}, 0));
    b.wv.weight.copy_(cat({a.wv.weight, a.wv.weight, a.wv.weight, a.wv.weight}, 0));
  }
  zoo::Llama buffers(grouped, 1);
  const std::int64_t t = 5;
  Tensor x = randn({2, t, grouped.d_model()}, DType::f32, &gen);
  Tensor cos = buffers.rope_cos.slice(0, 0, t), sin = buffers.rope_sin.slice(0, 0, t);
  Tensor mask = buffers.causal_mask.slice(0, 0, t).slice(1, 0, t);
  BOOST_TEST(allclose(a(x, cos, sin, mask), b(x, cos, sin, mask), 1e-5, 1e-6));
}

// GPT-NeoX's attention against loops over its definition: the fused projection holds each head's
// query, key and value side by side ([T, heads, 3 * hd]); the first rotary_dims of q and k turn
// by position * base^(-2i / rotary_dims) in pairs (i, i + rotary_dims / 2), the rest unchanged;
// causal softmax of q . k / sqrt(hd); the heads joined and projected.
BOOST_AUTO_TEST_CASE(neox_attention_rotates_a_quarter_of_each_head_from_the_fused_projection) {
  zoo::NeoxConfig c;
  c.head_dim = 8, c.heads = 2;  // rotary on dims 0..1 of each head
  Generator gen(5);
  zoo::NeoxAttention attention(c, &gen);
  attention.to(DType::f64);
  zoo::Neox buffers(c, 1);
  const std::int64_t t = 5, d = c.d_model(), hd = c.head_dim, rot = c.rotary_dims();
  Tensor x = randn({1, t, d}, DType::f64, &gen);
  Tensor cos = buffers.cos_cached.slice(0, 0, t).to(DType::f64);
  Tensor sin = buffers.sin_cached.slice(0, 0, t).to(DType::f64);
  Tensor causal = buffers.causal.slice(0, 0, t).slice(1, 0, t);
  std::vector<double> got = attention(x, cos, sin, causal).contiguous().to_vector<double>();

  auto linear_of = [](const nn::Linear& l, const std::vector<double>& in, std::int64_t rows) {
    std::vector<double> w = l.weight.to_vector<double>(), b = l.bias.to_vector<double>();
    const std::int64_t n = l.weight.shape()[0], k = l.weight.shape()[1];
    std::vector<double> out(rows * n);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < n; ++o) {
        double acc = b[o];
        for (std::int64_t i = 0; i < k; ++i) acc += in[r * k + i] * w[o * k + i];
        out[r * n + o] = acc;
      }
    return out;
  };
  std::vector<double> qkv = linear_of(attention.query_key_value, x.to_vector<double>(), t);
  // [position][head][dim] of q, k or v (part 0, 1, 2), q and k rotated.
  auto part = [&](std::int64_t p, std::int64_t h, std::int64_t i, int which) {
    auto at = [&](std::int64_t j) { return qkv[(p * c.heads + h) * 3 * hd + which * hd + j]; };
    if (which == 2 || i >= rot) return at(i);
    const std::int64_t half = rot / 2, pair = i < half ? i + half : i - half;
    const double angle = p * std::pow(c.rotary_base, -2.0 * (i % half) / rot);
    return at(i) * std::cos(angle) + (i < half ? -at(pair) : at(pair)) * std::sin(angle);
  };
  std::vector<double> heads(t * d);
  for (std::int64_t h = 0; h < c.heads; ++h)
    for (std::int64_t p = 0; p < t; ++p) {
      std::vector<double> w(p + 1);
      double top = -INFINITY, total = 0;
      for (std::int64_t j = 0; j <= p; ++j) {
        for (std::int64_t i = 0; i < hd; ++i) w[j] += part(p, h, i, 0) * part(j, h, i, 1);
        w[j] /= std::sqrt(static_cast<double>(hd));
        top = std::max(top, w[j]);
      }
      for (double& v : w) total += v = std::exp(v - top);
      for (std::int64_t i = 0; i < hd; ++i)
        for (std::int64_t j = 0; j <= p; ++j)
          heads[p * d + h * hd + i] += w[j] / total * part(j, h, i, 2);
    }
  std::vector<double> want = linear_of(attention.dense, heads, t);
  BOOST_TEST_REQUIRE(got.size() == want.size());
  // The model's cos / sin tables are f32: agreement to their rounding.
  for (std::size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(std::fabs(got[i] - want[i]) <= 1e-6, got[i] << " vs " << want[i] << " at " << i);
}

// Each sequence: CLS, a run of consecutive tokens to its length, padding; `masked` text positions
// hold MASK and their targets are the run's tokens there; the class says whether it is long.
BOOST_AUTO_TEST_CASE(masked_lm_batches_are_padded_runs_with_masked_positions_and_a_class) {
  zoo::MaskedLmTask task;
  Generator gen(5);
  const std::int64_t batch = 64, s = task.seq_len, c = task.content();
  zoo::Batch b = zoo::masked_lm_batch(task, batch, gen);
  BOOST_TEST_REQUIRE(b.inputs.shape() == (Shape{batch, s}));
  BOOST_TEST_REQUIRE(b.targets.shape() == (Shape{batch, 1 + s}));
  std::vector<std::int64_t> tokens = b.inputs.to_vector<std::int64_t>();
  std::vector<std::int64_t> targets = b.targets.to_vector<std::int64_t>();
  std::vector<int> lengths_seen(s + 1, 0);
  for (std::int64_t i = 0; i < batch; ++i) {
    const std::int64_t* row = &tokens[i * s];
    const std::int64_t* target = &targets[i * (1 + s)];
    std::int64_t length = s;
    for (std::int64_t t = 1; t < s; ++t)
      if (row[t] == task.pad_token()) {
        length = t;
        break;
      }
    ++lengths_seen[length];
    BOOST_TEST(row[0] == task.cls_token());
    BOOST_TEST(target[1] == gpt::kNoTarget);  // CLS is never masked
    BOOST_TEST(target[0] == (length > task.long_above() ? 1 : 0));
    // The run's start, from the target or token at position 1.
    const std::int64_t first = row[1] == task.mask_token() ? target[2] : row[1];
    std::int64_t masked = 0;
    for (std::int64_t t = 1; t < s; ++t) {
      const std::int64_t want = (first + t - 1) % c;
      if (t >= length) {
        BOOST_TEST(row[t] == task.pad_token());
        BOOST_TEST(target[1 + t] == gpt::kNoTarget);
      } else if (row[t] == task.mask_token()) {
        ++masked;
        BOOST_TEST(target[1 + t] == want, "sequence " << i << " position " << t);
      } else {
        BOOST_TEST(row[t] == want, "sequence " << i << " position " << t);
        BOOST_TEST(target[1 + t] == gpt::kNoTarget);
      }
    }
    BOOST_TEST(masked == task.masked);
  }
  for (std::int64_t l = task.min_length; l <= s; ++l)
    BOOST_TEST(lengths_seen[l] > 0, "no sequence of length " << l);
}

// Padded keys are masked out: in eval mode a sequence's hidden states at its own positions are
// the same alone, cut to its length, as in a batch padded to seq_len.
BOOST_AUTO_TEST_CASE(bert_padding_is_invisible_to_the_other_positions) {
  zoo::BertConfig config;
  config.layers = 2;
  zoo::Bert model(config, 3);
  model.to(DType::f64);
  model.eval();
  Generator gen(4);
  zoo::Batch b = zoo::masked_lm_batch(config.task, 6, gen);
  Tensor padded = model.encode(b.inputs);
  std::vector<std::int64_t> tokens = b.inputs.to_vector<std::int64_t>();
  int cut = 0;
  for (std::int64_t i = 0; i < 6; ++i) {
    std::int64_t length = config.task.seq_len;
    while (tokens[i * config.task.seq_len + length - 1] == config.task.pad_token()) --length;
    if (length == config.task.seq_len) continue;
    ++cut;
    Tensor alone = model.encode(b.inputs.slice(0, i, i + 1).slice(1, 0, length));
    Tensor same = padded.slice(0, i, i + 1).slice(1, 0, length);
    BOOST_TEST(allclose(alone, same, 1e-12, 1e-12), "sequence " << i << " of length " << length);
  }
  BOOST_TEST(cut > 0);
}

// demos::Dropout drops in training mode only, following its parent's train() / eval(), and two
// models built from one seed draw the same masks.
BOOST_AUTO_TEST_CASE(dropout_follows_the_mode_and_replays_from_the_seed) {
  gpt::GptConfig config;
  config.dropout = config.attention_dropout = 0.1;
  gpt::Gpt a(config, 1, Device::cpu()), b(config, 1, Device::cpu());
  gpt::GptConfig plain_config;
  gpt::Gpt plain(plain_config, 1, Device::cpu());
  Generator data(2);
  Tensor tokens = randint(0, config.vocab, {4, config.seq_len}, DType::i64, &data);
  NoGradGuard no_grad;
  const std::vector<float> first = a.forward(tokens).to_vector<float>();
  BOOST_TEST(first == b.forward(tokens).to_vector<float>(), "the same masks from the same seed");
  BOOST_TEST(first != plain.forward(tokens).to_vector<float>(), "dropout dropped");
  BOOST_TEST(first != a.forward(tokens).to_vector<float>(), "each forward draws new masks");
  a.eval();
  BOOST_TEST(!a.blocks[0]->attn.attn_dropout.is_training());
  BOOST_TEST(a.forward(tokens).to_vector<float>() == plain.forward(tokens).to_vector<float>());
}

BOOST_AUTO_TEST_CASE(bad_configurations_and_inputs_are_errors_that_say_what_is_wrong) {
  auto message_has = [](const char* word) {
    return [word](const Error& e) { return std::string(e.what()).find(word) != std::string::npos; };
  };
  zoo::LlamaConfig uneven;
  uneven.heads = 3, uneven.kv_heads = 2;
  BOOST_CHECK_EXCEPTION(zoo::Llama(uneven, 1), Error, message_has("kv_heads 2"));
  zoo::LlamaConfig odd;
  odd.head_dim = 7;
  BOOST_CHECK_EXCEPTION(zoo::Llama(odd, 1), Error, message_has("head_dim, not 7"));
  zoo::NeoxConfig narrow;
  narrow.head_dim = 4;  // a quarter is one rotary dim, which cannot be rotated in pairs
  BOOST_CHECK_EXCEPTION(zoo::Neox(narrow, 1), Error, message_has("gives 1 rotary dims"));
  BOOST_CHECK_EXCEPTION(zoo::patchify(zeros({1, 3, 6, 8}), 4), Error, message_has("[1, 3, 6, 8]"));
  BOOST_CHECK_EXCEPTION(zoo::patchify(zeros({3, 8, 8}), 4), Error, message_has("[3, 8, 8]"));
  zoo::CatalogEntry llama = zoo::llama_entry(16);
  auto run = llama.start(1, DType::f32, Device::cpu(), {});
  Generator data(2);
  BOOST_CHECK_EXCEPTION(run->step({llama.make_batch(data)}), Error,
                        message_has("1 micro-batches, configured for 2"));
}

BOOST_AUTO_TEST_SUITE_END()
