// Dropout of the attention probabilities: scaled_dot_product_attention(..., dropout_p) and the
// rewrite of matmul(dropout(softmax(..)), v) into one attention op whose kernels drop the
// probabilities in registers and regenerate the same mask in the backward. The reference is the
// composite written with primitive ops, softmax then dropout, drawn from the same generator state:
// the op takes exactly the numbers dropout would, so results and gradients agree to rounding.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/random.h"
#include "support/device_compare.h"
#include "support/reference.h"

using namespace kiln;

namespace {

const Device kDevices[] = {Device::cpu(), Device::cuda()};

Tensor on(const Tensor& t, Device d) {
  return t.to(d).detach().requires_grad_();
}

double max_relative(const Tensor& a, const Tensor& b) {
  return test::relative_error(a.to(Device::cpu()), b.to(Device::cpu()));
}

// Attention as a user writes it with dropout of the probabilities (GPT-2's attn_dropout).
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p,
                 double scale) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * scale;
  if (mask.defined()) s = masked_fill(s, logical_not(mask), -INFINITY);
  return matmul(dropout(softmax(s, -1), p), v);
}

struct Result {
  Tensor out, dq, dk, dv;
  std::uint64_t offset_after = 0;
};

// One forward and backward of `f` from seed 21, the loss weighted by `w`.
template <typename F>
Result run(F&& f, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
  manual_seed(21);
  Result r;
  r.out = f(q, k, v);
  r.offset_after = default_generator().offset();
  sum(r.out * w).backward();
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  return r;
}

void expect_close(const Result& got, const Result& want, double tol, const std::string& label) {
  BOOST_TEST(max_relative(got.out, want.out) < tol, label << " out");
  BOOST_TEST(max_relative(got.dq, want.dq) < tol, label << " dq");
  BOOST_TEST(max_relative(got.dk, want.dk) < tol, label << " dk");
  BOOST_TEST(max_relative(got.dv, want.dv) < tol, label << " dv");
  BOOST_TEST(got.offset_after == want.offset_after, label << " generator offset");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_dropout)

// On the host (the CPU kernels) and CUDA (the fused kernels), for two rates, with a mask.
BOOST_AUTO_TEST_CASE(sdpa_with_dropout_equals_softmax_then_dropout) {
  Tensor q = randn({2, 2, 8, 16}), k = randn({2, 2, 12, 16}), v = randn({2, 2, 12, 8});
  Tensor w = randn({2, 2, 8, 8});
  Tensor mask = gt(rand({8, 12}), 0.2);
  const double scale = 0.25;
  for (Device d : kDevices)
    for (double p : {0.1, 0.5}) {
      std::string label = d.str() + " p " + std::to_string(p);
      auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return scaled_dot_product_attention(a, b, c, mask.to(d), false, scale, p);
      };
      auto reference = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return composite(a, b, c, mask.to(d), p, scale);
      };
      Result got = run(fused, on(q, d), on(k, d), on(v, d), w.to(d));
      Result want = run(reference, on(q, d), on(k, d), on(v, d), w.to(d));
      expect_close(got, want, 1e-5, label);
      // Something was dropped, and not everything.
      auto plain = scaled_dot_product_attention(q, k, v, mask, false, scale);
      BOOST_TEST(max_relative(got.out, plain) > 1e-3, label);
    }
}

// Causal and grouped-query calls drop by the output's [B, H, T, S] positions.
BOOST_AUTO_TEST_CASE(causal_and_grouped_query_calls_drop_as_the_composite) {
  Tensor q = randn({2, 4, 8, 16}), k = randn({2, 2, 8, 16}), v = randn({2, 2, 8, 16});
  Tensor w = randn({2, 4, 8, 16});
  Tensor heads = from_vector(std::vector<std::int64_t>{0, 0, 1, 1}, Shape{4});
  Tensor causal_mask = tril(full({8, 8}, true, DType::bool_));
  for (Device d : kDevices) {
    auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return scaled_dot_product_attention(a, b, c, {}, true, std::nullopt, 0.3);
    };
    auto reference = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      Tensor hd = heads.to(d);
      return composite(a, index_select(b, 1, hd), index_select(c, 1, hd), causal_mask.to(d), 0.3,
                       0.25);
    };
    Result got = run(fused, on(q, d), on(k, d), on(v, d), w.to(d));
    Result want = run(reference, on(q, d), on(k, d), on(v, d), w.to(d));
    expect_close(got, want, 1e-5, d.str());
  }
}

// On CUDA the forward and the backward are one fused kernel each: no mask tensor is drawn.
BOOST_AUTO_TEST_CASE(the_fused_kernels_draw_in_registers) {
  Device d = Device::cuda();
  Tensor q = on(randn({1, 2, 16, 16}), d), k = on(randn({1, 2, 16, 16}), d);
  Tensor v = on(randn({1, 2, 16, 16}), d);
  auto& stats = jit::codegen::launch_stats();
  std::int64_t before = stats.launches;
  Tensor out = scaled_dot_product_attention(q, k, v, {}, false, std::nullopt, 0.2);
  BOOST_TEST(stats.launches - before == 1);
  before = stats.launches;
  sum(out).backward();
  // The backward kernel, and the fill of the ones the sum's gradient is.
  BOOST_TEST(stats.launches - before <= 2);
}

// Compiled, the composite is rewritten into the op: the same numbers, one attention kernel, and
// the backward keeps no probabilities or mask.
BOOST_AUTO_TEST_CASE(compiled_softmax_then_dropout_becomes_one_attention_op) {
  auto fn = [](double p) {
    return [p](const Tensor& a, const Tensor& b, const Tensor& c) {
      return composite(a, b, c, {}, p, 0.25);
    };
  };
  Tensor q = randn({2, 2, 8, 16}), k = randn({2, 2, 8, 16}), v = randn({2, 2, 8, 16});
  Tensor w = randn({2, 2, 8, 16});
  for (Device d : kDevices) {
    auto f = jit::compile(fn(0.25));
    Result got = run(f, on(q, d), on(k, d), on(v, d), w.to(d));
    Result want = run(fn(0.25), on(q, d), on(k, d), on(v, d), w.to(d));
    expect_close(got, want, 1e-5, d.str());
    int attention = 0, random = 0;
    for (const auto& n : f.core().graph(0).nodes) {
      attention += n.op == OpId::attention;
      random += is_random(n.op);
    }
    BOOST_TEST(attention == 1, d.str() << "\n" << f.core().graph(0).str());
    BOOST_TEST(random == 0, d.str());
    if (d.is_cuda()) {
      auto plain = jit::compile(fn(0.0));
      run(plain, on(q, d), on(k, d), on(v, d), w.to(d));
      BOOST_TEST(f.core().aot(0)->partition().saved_activation_bytes() ==
                 plain.core().aot(0)->partition().saved_activation_bytes());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rate_outside_0_1_is_an_error) {
  Tensor q = randn({4, 8}), k = randn({4, 7});
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, q, q, {}, false, std::nullopt, 1.5), Error,
                    "dropout_p must be in [0, 1], got 1.5");
  std::uint64_t offset = default_generator().offset();
  KILN_CHECK_THROWS(scaled_dot_product_attention(q, k, q, {}, false, std::nullopt, 0.5), ShapeError,
                    "head dims of q and k differ");
  BOOST_TEST(default_generator().offset() == offset, "a refused call draws nothing");
}

BOOST_AUTO_TEST_SUITE_END()
