// Random numbers inside compiled functions: a traced draw (rand, randn, randint, the *_like forms,
// bernoulli, dropout) becomes a random node whose seed and offset each call reads from the
// generator, advancing it as the eager draw would. Each case is compared with the same function
// run eagerly from the same generator state (bit for bit), or with hand-computed statistics.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/random.h"

using namespace kiln;

namespace {

const Device kDevices[] = {Device::cpu(), Device::cuda()};

std::vector<double> values_of(const Tensor& t) {
  return t.to(Device::cpu()).to_vector<double>();
}

std::vector<Tensor> as_list(Tensor t) {
  return {std::move(t)};
}
std::vector<Tensor> as_list(std::vector<Tensor> ts) {
  return ts;
}

// Runs `calls` of `f` from seed 11 of the default generator: the values of each output of every
// call, then the generator's offset after them.
template <typename F>
std::vector<std::vector<double>> run_from_seed(F&& f, const Tensor& x, int calls) {
  manual_seed(11);
  std::vector<std::vector<double>> out;
  for (int i = 0; i < calls; ++i)
    for (const Tensor& t : as_list(f(x))) out.push_back(values_of(t));
  out.push_back({static_cast<double>(default_generator().offset())});
  return out;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Dropout that follows a submodule's mode, as a model's dropout layers do.
class ModeDropout : public nn::Module {
 public:
  ModeDropout() { register_module("drop", drop); }
  Tensor forward(const Tensor& x) const { return dropout(x, 0.5, drop.is_training()); }
  nn::Module drop;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(jit_random)

// A trace records the declared modules' modes and its guards check them: eval() after a
// training call traces again (no dropout), and train() finds the first entry.
BOOST_AUTO_TEST_CASE(a_declared_module_mode_is_guarded) {
  ModeDropout m;
  jit::CompileOptions options;
  options.modules = {&m};
  auto f = jit::compile([&m](const Tensor& x) { return m.forward(x); }, options);
  Tensor x = rand({256}) + 1.0;
  auto zeros_in = [](const Tensor& t) {
    int n = 0;
    for (double v : values_of(t)) n += v == 0;
    return n;
  };
  BOOST_TEST(zeros_in(f(x)) > 0);
  m.eval();
  BOOST_TEST(values_of(f(x)) == values_of(x), "eval: no dropout");
  BOOST_TEST(f.core().num_entries() == 2u);
  m.train();
  BOOST_TEST(zeros_in(f(x)) > 0);
  m.drop.eval();  // a submodule alone: a mode no entry was traced in
  BOOST_TEST(values_of(f(x)) == values_of(x));
  BOOST_TEST(f.core().num_entries() == 3u);
}

// The numbers drawn are the eager draws' bit for bit; arithmetic fused around them may round
// differently (a multiply and an add contract to one FMA in a kernel), so the sum is compared
// within f32 rounding.
BOOST_AUTO_TEST_CASE(compiled_draws_match_eager_bit_for_bit) {
  auto fn = [](const Tensor& x) {
    Tensor dropped = dropout(x * 2.0, 0.3), u = rand_like(x), n = randn_like(x);
    Tensor i = cast(randint_like(x, -3, 4), x.dtype());
    return std::vector<Tensor>{dropped, u, n, i, dropped + u + n * 0.5 + i};
  };
  Tensor x = randn({6, 10});
  for (Device d : kDevices) {
    Tensor xd = x.to(d);
    auto f = jit::compile(fn);
    auto compiled = run_from_seed(f, xd, 3);
    auto eager = run_from_seed(fn, xd, 3);
    BOOST_REQUIRE(compiled.size() == eager.size());
    for (std::size_t k = 0; k < compiled.size(); ++k) {
      bool sum = k % 5 == 4 && k + 1 < compiled.size();
      if (sum)
        BOOST_TEST(max_difference(compiled[k], eager[k]) < 1e-5, d.str() << " output " << k);
      else
        BOOST_TEST(compiled[k] == eager[k], d.str() << " output " << k);
    }
    BOOST_TEST(f.core().num_entries() == 1u);
    BOOST_TEST(compiled[0] != compiled[5], "each call draws new numbers");
  }
}

BOOST_AUTO_TEST_CASE(a_generator_passed_in_advances_and_the_default_does_not) {
  Generator gen(5);
  auto fn = [&gen](const Tensor& x) { return x + rand({3, 4}, DType::f32, &gen, x.device()); };
  for (Device d : kDevices) {
    Tensor x = zeros({3, 4}).to(d);
    auto f = jit::compile(fn);
    gen.manual_seed(5);
    std::uint64_t default_offset = default_generator().offset();
    Tensor a = f(x), b = f(x);
    BOOST_TEST(default_generator().offset() == default_offset);
    BOOST_TEST(gen.offset() == 2 * random_counters(OpId::random_uniform, 12));
    gen.manual_seed(5);
    BOOST_TEST(values_of(a) == values_of(fn(x)), d.str());
    BOOST_TEST(values_of(b) == values_of(fn(x)), d.str());
  }
}

// Two draws of one shape are two random nodes: common-subexpression elimination never merges
// them, and a draw of constant shape is never folded into a constant.
BOOST_AUTO_TEST_CASE(draws_are_never_merged_or_folded) {
  auto fn = [](const Tensor& x) {
    return std::vector<Tensor>{rand_like(x) - rand_like(x),
                               x + rand({4}, DType::f32, nullptr, x.device())};
  };
  for (Device d : kDevices) {
    Tensor x = zeros({4}).to(d);
    auto f = jit::compile(fn);
    manual_seed(3);
    auto first = f(x);
    auto second = f(x);
    manual_seed(3);
    auto eager_first = fn(x);
    auto eager_second = fn(x);
    BOOST_TEST(values_of(first[0]) == values_of(eager_first[0]), d.str());
    BOOST_TEST(values_of(second[1]) == values_of(eager_second[1]), d.str());
    double spread = 0;
    for (double v : values_of(first[0])) spread += std::abs(v);
    BOOST_TEST(spread > 0, "the two draws differ");
    BOOST_TEST(values_of(first[1]) != values_of(second[1]));
  }
}

// At a dynamic size, a draw's counters follow the call's size: the generator advances as the
// eager draw does, and the function keeps one symbolic entry.
BOOST_AUTO_TEST_CASE(draws_at_dynamic_sizes_advance_by_the_call_size) {
  auto fn = [](const Tensor& x) {
    Tensor dropped = dropout(x, 0.25);
    return std::vector<Tensor>{dropped, dropped * 3.0 - rand_like(x)};
  };
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    for (std::int64_t rows : {8, 12, 16, 20, 36}) {
      Tensor x = randn({rows, 6}).to(d);
      manual_seed(static_cast<std::uint64_t>(rows));
      auto got = f(x);
      std::uint64_t offset = default_generator().offset();
      manual_seed(static_cast<std::uint64_t>(rows));
      auto eager = fn(x);
      BOOST_TEST(values_of(got[0]) == values_of(eager[0]), d.str() << " rows " << rows);
      BOOST_TEST(max_difference(values_of(got[1]), values_of(eager[1])) < 1e-5);
      BOOST_TEST(offset == default_generator().offset());
    }
    BOOST_TEST(f.core().num_entries() <= 2u, d.str());
  }
}

BOOST_AUTO_TEST_CASE(compiled_dropout_keeps_one_minus_p_and_scales) {
  const std::int64_t n = 40000;
  Tensor x = rand({n}) + 0.5;  // no zeros: a dropped element is exactly 0
  for (double p : {0.1, 0.5}) {
    auto f = jit::compile([p](const Tensor& x) { return dropout(x, p); });
    manual_seed(2);
    auto got = values_of(f(x.to(Device::cuda())));
    auto xs = values_of(x);
    std::int64_t kept = 0;
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (got[i] == 0) continue;
      ++kept;
      worst = std::max(worst, std::abs(got[i] - xs[i] / (1 - p)) / (xs[i] / (1 - p)));
    }
    double sigma = std::sqrt(n * p * (1 - p));
    BOOST_TEST(std::abs(kept - n * (1 - p)) < 4 * sigma, "p " << p << " kept " << kept);
    BOOST_TEST(worst < 1e-6, "p " << p);
  }
}

// The compiled backward regenerates the forward's mask from the saved seed and offset: the
// gradient is zero exactly where the output was dropped, and nothing of the mask's size is saved.
BOOST_AUTO_TEST_CASE(the_backward_regenerates_the_forward_mask) {
  const double p = 0.5;
  auto fn = [p](const Tensor& x, const Tensor& w) { return dropout(x * w, p) * w; };
  for (Device d : kDevices) {
    Tensor x = (rand({64, 32}) + 0.5).to(d).requires_grad_();
    Tensor w = (rand({64, 32}) + 0.5).to(d);
    auto f = jit::compile(fn);
    manual_seed(9);
    Tensor y = f(x, w);
    Tensor other = f(x, w);  // a later forward: the first backward still uses its own mask
    sum(y).backward();
    auto ys = values_of(y), gs = values_of(x.grad()), ws = values_of(w);
    bool agrees = true;
    for (std::size_t i = 0; i < ys.size(); ++i) {
      double expected = ys[i] == 0 ? 0.0 : ws[i] * ws[i] / (1 - p);
      agrees = agrees && std::abs(gs[i] - expected) <= 1e-6 * std::abs(expected);
    }
    BOOST_TEST(agrees, d.str());
    if (d.type == Device::Type::cuda) {
      const jit::AotProgram* aot = f.core().aot(0);
      BOOST_REQUIRE(aot);
      BOOST_TEST(aot->partition().saved_activation_bytes() == 0, aot->partition().str());
    }
  }
}

// Dropout between ops fuses with them: a compiled training step launches as many kernels and
// saves as many bytes for the backward with dropout as without.
BOOST_AUTO_TEST_CASE(dropout_adds_no_launch_and_no_saved_byte) {
  auto step = [](double p) {
    return [p](const Tensor& x, const Tensor& w) {
      Tensor h = dropout(gelu(matmul(x, w)), p);
      return sum(dropout(h * h, p) + x);
    };
  };
  Tensor x = randn({16, 32}).to(Device::cuda());
  auto launches_and_bytes = [&](double p) {
    Tensor w = randn({32, 32}).to(Device::cuda()).requires_grad_();
    auto f = jit::compile(step(p));
    f(x, w).backward();  // warm up
    auto& stats = jit::codegen::launch_stats();
    std::int64_t before = stats.launches;
    f(x, w).backward();
    return std::pair{stats.launches - before,
                     f.core().aot(0)->partition().saved_activation_bytes()};
  };
  auto with = launches_and_bytes(0.1), without = launches_and_bytes(0.0);
  BOOST_TEST(with.first == without.first);
  BOOST_TEST(with.second == without.second);
}

BOOST_AUTO_TEST_CASE(bernoulli_traces) {
  auto fn = [](const Tensor& probs) { return bernoulli(probs) + bernoulli(probs, 0.5); };
  Tensor probs = rand({5, 7});
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    auto compiled = run_from_seed(f, probs.to(d), 2);
    auto eager = run_from_seed(fn, probs.to(d), 2);
    BOOST_TEST(compiled == eager, d.str());
  }
}

BOOST_AUTO_TEST_SUITE_END()
