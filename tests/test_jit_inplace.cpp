// In-place writes inside compiled functions (functionalization): the trace records pure values
// and the inputs written, and each call writes their final values back. Every case is compared
// with the same function run eagerly on copies of its inputs, on the CPU and on CUDA.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "jit/compile.h"
#include "runtime/trace_hooks.h"
#include "support/compiled_gradients.h"
#include "support/device_compare.h"
#include "support/reference.h"

using namespace kiln;

namespace {

bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         a.to(Device::cpu()).to_vector<double>() == b.to(Device::cpu()).to_vector<double>();
}

Tensor on(const Tensor& t, Device d) {
  return t.to(d).clone();
}

const Device kDevices[] = {Device::cpu(), Device::cuda()};

// Running statistics as BatchNorm keeps them: buffers updated in place with no gradient.
class RunningMean : public nn::Module {
 public:
  explicit RunningMean(std::int64_t n) : weight(ones({n})), mean(zeros({n})), steps(zeros({})) {
    register_parameter("weight", weight);
    register_buffer("mean", mean);
    register_buffer("steps", steps);
  }
  Tensor forward(const Tensor& x) {
    Tensor y = x * weight;
    {
      NoGradGuard no_grad;
      mean.mul_(0.9).add_(y.detach().mean({0}) * 0.1);
      steps.add_(scalar_tensor(1.0));
    }
    return y;
  }
  Tensor weight, mean, steps;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(inplace)

BOOST_AUTO_TEST_CASE(writes_to_intermediates_match_eager) {
  auto fn = [](const Tensor& x, const Tensor& y) {
    Tensor h = x * 2.0;
    h.mul_(3.0).add_(y);
    h.sub_(1.0);
    Tensor g = exp(x);
    g.copy_(y * 4.0);  // a whole overwrite
    g.slice(1, 0, 2).fill_(-1.0);
    return h + g;
  };
  Tensor x = randn({3, 5}), y = randn({3, 5});
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    Tensor got = f(on(x, d), on(y, d));
    BOOST_TEST(test::relative_error(got.to(Device::cpu()), fn(x, y)) < 1e-6, d.str());
  }
}

// A view taken before its base is written sees the write, as in eager mode, and a write through
// a chain of views (a permuted slice) lands in the base.
BOOST_AUTO_TEST_CASE(views_see_writes_to_their_base_and_write_through_to_it) {
  auto fn = [](const Tensor& x) {
    Tensor h = x + 0.0;
    Tensor row = h.slice(0, 1, 2);
    Tensor col = h.permute({1, 0}).slice(0, 2, 3);
    h.mul_(10.0);
    col.add_(5.0);  // writes column 2 of h
    h.reshape({-1}).slice(0, 0, 1).fill_(7.0);
    return std::vector<Tensor>{h, row * 1.0, col * 1.0};
  };
  Tensor x = randn({3, 4});
  auto want = fn(x);
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    auto got = f(on(x, d));
    for (std::size_t k = 0; k < want.size(); ++k)
      BOOST_TEST(test::relative_error(got[k].to(Device::cpu()), want[k]) < 1e-6,
                 d.str() << " output " << k);
  }
}

// A static KV cache updated at a position: the argument is written back, and the call returns
// what the function returned.
BOOST_AUTO_TEST_CASE(a_kv_cache_written_at_a_position_is_written_back) {
  auto step = [](const Tensor& cache, const Tensor& k, double pos) {
    auto p = static_cast<std::int64_t>(pos);
    cache.slice(2, p, p + 1).copy_(k);
    return cache.slice(2, 0, p + 1).sum({2});
  };
  Tensor cache0 = zeros({2, 3, 6, 4});
  for (Device d : kDevices) {
    Tensor want_cache = cache0.clone(), got_cache = on(cache0, d);
    auto f = jit::compile(step);
    for (int p = 0; p < 4; ++p) {
      Tensor k = randn({2, 3, 1, 4});
      Tensor want = step(want_cache, k, p);
      Tensor got = f(got_cache, on(k, d), static_cast<double>(p));
      BOOST_TEST(test::relative_error(got.to(Device::cpu()), want) < 1e-6, d.str() << " " << p);
      BOOST_TEST(identical(got_cache, want_cache), d.str() << " step " << p);
    }
    BOOST_TEST(f.core().graph(0).str().find("write %") != std::string::npos,
               f.core().graph(0).str());
  }
}

// Module buffers updated in place inside a compiled training step land in the buffers, and the
// parameters' gradients are those of eager mode.
BOOST_AUTO_TEST_CASE(running_statistics_of_a_compiled_training_step_land_in_the_buffers) {
  for (Device d : kDevices) {
    RunningMean eager(4), compiled(4);
    eager.to(d);
    compiled.to(d);
    jit::CompileOptions options;
    options.modules = {&compiled};
    auto f = jit::compile([&](const Tensor& x) { return compiled.forward(x); }, options);
    for (int step = 0; step < 3; ++step) {
      Tensor x = randn({5, 4}).to(d);
      Tensor want = eager.forward(x);
      Tensor got = f(x);
      (want * want).sum().backward();
      (got * got).sum().backward();
      BOOST_TEST(test::relative_error(got.to(Device::cpu()), want.to(Device::cpu())) < 1e-6);
      BOOST_TEST(test::relative_error(compiled.mean.to(Device::cpu()),
                                      eager.mean.to(Device::cpu())) < 1e-6,
                 d.str() << " step " << step);
      BOOST_TEST(compiled.steps.item() == step + 1.0);
      BOOST_TEST(test::relative_error(compiled.weight.grad().to(Device::cpu()),
                                      eager.weight.grad().to(Device::cpu())) < 1e-6);
    }
    BOOST_TEST(f.core().num_entries() == 1u);
  }
}

// Gradients flow through in-place writes to intermediates, as eagerly.
BOOST_AUTO_TEST_CASE(gradients_flow_through_writes_to_intermediates) {
  auto loss = [](const Tensor& x, const Tensor& w) {
    Tensor h = x * w;
    h.mul_(2.0).add_(x);
    Tensor g = exp(w);
    g.copy_(x * 3.0);
    return (h * h + g).sum();
  };
  test::check_compiled_gradients(loss, loss, {3, 4}, {3, 4});
}

// A write into a view of an intermediate, differentiated (eagerly refused: an in-place op on a
// view that needs grad), against the out-of-place form.
BOOST_AUTO_TEST_CASE(gradients_flow_through_writes_into_views_of_intermediates) {
  auto written = [](const Tensor& x, const Tensor& w) {
    Tensor h = x * w;
    h.slice(1, 0, 1).copy_(x.slice(1, 1, 2) * 3.0);
    return (h * h).sum();
  };
  auto out_of_place = [](const Tensor& x, const Tensor& w) {
    Tensor h = cat({x.slice(1, 1, 2) * 3.0, (x * w).slice(1, 1, 4)}, 1);
    return (h * h).sum();
  };
  test::check_compiled_gradients(written, out_of_place, {3, 4}, {3, 4});
}

BOOST_AUTO_TEST_CASE(writing_to_an_input_that_requires_grad_raises) {
  auto fn = [](const Tensor& w) {
    w.mul_(2.0);
    return w * 1.0;
  };
  auto f = jit::compile(fn);
  Tensor w = randn({3}).requires_grad_();
  KILN_CHECK_THROWS(f(w), AutogradError, "requires grad is written in place");
}

// Two arguments that share memory, one of them written: the trace read them as two tensors, so
// the call is refused, also after an entry was made for separate tensors.
BOOST_AUTO_TEST_CASE(writing_to_an_argument_that_aliases_another_raises) {
  auto fn = [](const Tensor& a, const Tensor& b) {
    a.add_(1.0);
    return b * 2.0;
  };
  auto f = jit::compile(fn);
  Tensor a = zeros({4}), b = zeros({4});
  f(a, b);
  BOOST_TEST(a.to_vector<double>() == std::vector<double>(4, 1.0));
  KILN_CHECK_THROWS(f(a, a), Error, "writes in place to 'arg0' (shape [4]), which shares memory");
  KILN_CHECK_THROWS(f(a, a.slice(0, 0, 2)), Error, "shares memory with 'arg1'");
  BOOST_TEST(a.to_vector<double>() == std::vector<double>(4, 1.0));  // nothing written
}

BOOST_AUTO_TEST_CASE(writes_that_cannot_be_replayed_raise) {
  auto expanded = jit::compile([](const Tensor& x) {
    Tensor h = (x * 1.0).expand({3, 4});
    h.fill_(0.0);
    return h;
  });
  KILN_CHECK_THROWS(expanded(randn({1, 4})), Error, "expanded view");
  auto strided = jit::compile([](const Tensor& x) {
    Tensor h = x * 1.0;
    h.slice(0, 0, 4, 2).fill_(0.0);
    return h;
  });
  KILN_CHECK_THROWS(strided(randn({4})), NotTraceableError, "slice with step 2");
}

// Each in-place method against its out-of-place op on the CPU: eagerly on the CPU and on CUDA,
// and compiled, where it writes an intermediate, an argument, and a view of either.
BOOST_AUTO_TEST_CASE(every_inplace_method_matches_its_out_of_place_op) {
  using Write = std::function<void(const Tensor&, const Tensor&, const Tensor&)>;
  using Want = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
  struct Case {
    const char* name;
    Write write;
    Want want;
  };
  const std::vector<Case> cases = {
      {"add_", [](auto& t, auto& y, auto&) { t.add_(y, 2); },
       [](auto& x, auto& y, auto&) { return x + y * 2.0; }},
      {"add_ scalar", [](auto& t, auto&, auto&) { t.add_(1.5); },
       [](auto& x, auto&, auto&) { return x + 1.5; }},
      {"sub_", [](auto& t, auto& y, auto&) { t.sub_(y); },
       [](auto& x, auto& y, auto&) { return x - y; }},
      {"sub_ scalar", [](auto& t, auto&, auto&) { t.sub_(0.25); },
       [](auto& x, auto&, auto&) { return x - 0.25; }},
      {"mul_", [](auto& t, auto& y, auto&) { t.mul_(y); },
       [](auto& x, auto& y, auto&) { return x * y; }},
      {"div_", [](auto& t, auto& y, auto&) { t.div_(y); },
       [](auto& x, auto& y, auto&) { return x / y; }},
      {"div_ scalar", [](auto& t, auto&, auto&) { t.div_(4.0); },
       [](auto& x, auto&, auto&) { return x / 4.0; }},
      {"clamp_", [](auto& t, auto&, auto&) { t.clamp_(-0.5, 0.5); },
       [](auto& x, auto&, auto&) { return clamp(x, -0.5, 0.5); }},
      {"clamp_ min", [](auto& t, auto&, auto&) { t.clamp_(0.0); },
       [](auto& x, auto&, auto&) { return clamp(x, 0.0); }},
      {"masked_fill_", [](auto& t, auto&, auto& m) { t.masked_fill_(m, 9.0); },
       [](auto& x, auto&, auto& m) { return masked_fill(x, m, 9.0); }},
      {"fill_", [](auto& t, auto&, auto&) { t.fill_(3.0); },
       [](auto& x, auto&, auto&) { return x * 0.0 + 3.0; }},
      {"zero_", [](auto& t, auto&, auto&) { t.zero_(); },
       [](auto& x, auto&, auto&) { return x * 0.0; }},
      {"copy_", [](auto& t, auto& y, auto&) { t.copy_(y); },
       [](auto&, auto& y, auto&) { return y * 1.0; }},
      {"copy_ broadcast", [](auto& t, auto& y, auto&) { t.copy_(y.slice(0, 0, 1)); },
       [](auto&, auto& y, auto&) {
         return y.slice(0, 0, 1).expand({3, 4}) * 1.0;
       }},
      {"index_copy_",
       [](auto& t, auto& y, auto&) {
         t.index_copy_(1, tensor({3.0f, 0.0f}).to(DType::i64).to(t.device()), y.slice(1, 0, 2));
       },
       [](auto& x, auto& y, auto&) {
         return cat({y.slice(1, 1, 2), x.slice(1, 1, 3), y.slice(1, 0, 1)}, 1);
       }},
      {"index_put_",
       [](auto& t, auto& y, auto&) {
         t.index_put_({Tensor(), tensor({3.0f, 0.0f}).to(DType::i64).to(t.device())},
                      y.slice(1, 0, 2));
       },
       [](auto& x, auto& y, auto&) {
         return cat({y.slice(1, 1, 2), x.slice(1, 1, 3), y.slice(1, 0, 1)}, 1);
       }},
      {"index_put_ accumulate",
       [](auto& t, auto& y, auto&) {
         t.index_put_({tensor({2.0f, 2.0f}).to(DType::i64).to(t.device())}, y.slice(0, 0, 2), true);
       },
       [](auto& x, auto& y, auto&) {
         return cat({x.slice(0, 0, 2), x.slice(0, 2, 3) + y.slice(0, 0, 1) + y.slice(0, 1, 2)}, 0);
       }},
      {"view mul_", [](auto& t, auto&, auto&) { t.slice(1, 1, 3).mul_(2.0); },
       [](auto& x, auto&, auto&) {
         return cat({x.slice(1, 0, 1), x.slice(1, 1, 3) * 2.0, x.slice(1, 3, 4)}, 1);
       }},
      {"view copy_",
       [](auto& t, auto& y, auto&) {
         t.permute({1, 0}).slice(0, 0, 1).copy_(y.slice(1, 2, 3).permute({1, 0}));
       },
       [](auto& x, auto& y, auto&) {
         return cat({y.slice(1, 2, 3), x.slice(1, 1, 4)}, 1);
       }},
  };
  Tensor x = randn({3, 4}), y = randn({3, 4}) + 3.0, m = gt(randn({3, 4}), 0.0);
  for (const Case& c : cases) {
    Tensor want = c.want(x, y, m);
    for (Device d : kDevices) {
      Tensor t = on(x, d), yd = on(y, d), md = on(m, d);
      c.write(t, yd, md);
      BOOST_TEST(test::relative_error(t.to(Device::cpu()), want) < 1e-6,
                 c.name << " eager on " << d.str());
      auto intermediate = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& k) {
        Tensor h = a * 1.0;
        c.write(h, b, k);
        return h;
      });
      Tensor got = intermediate(on(x, d), yd, md);
      BOOST_TEST(test::relative_error(got.to(Device::cpu()), want) < 1e-6,
                 c.name << " compiled on " << d.str());
      auto argument = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& k) {
        c.write(a, b, k);
        return a.sum();
      });
      Tensor written = on(x, d);
      Tensor sum = argument(written, yd, md);
      BOOST_TEST(test::relative_error(written.to(Device::cpu()), want) < 1e-6,
                 c.name << " written back on " << d.str());
      BOOST_TEST(std::abs(sum.item() - want.sum().item()) < 1e-4, c.name << " on " << d.str());
    }
  }
  Tensor index = tensor({3.0f, 0.0f}).to(DType::i64);
  KILN_CHECK_THROWS(x.clone().index_copy_(1, index, y), ShapeError,
                    "index_copy: source of shape [3, 4] does not fit index of 2 entries along dim "
                    "1 of self of shape [3, 4] (want [3, 2])");
  KILN_CHECK_THROWS(x.clone().index_copy_(1, index.to(DType::f32), y.slice(1, 0, 2)), DTypeError,
                    "index_copy: index must be a 1-D integer tensor, got f32");
}

// In-place writes check shapes as kiln's own reads: a dynamic dim they write stays symbolic,
// so one entry serves every size (as the out-of-place ops do).
BOOST_AUTO_TEST_CASE(writes_keep_dynamic_dims_dynamic) {
  auto fn = [](const Tensor& x, const Tensor& y) {
    Tensor h = x * 2.0;
    h.mul_(3.0).add_(y).clamp_(-4.0, 4.0);
    h.slice(1, 0, 2).fill_(0.5);
    return h;
  };
  for (Device d : kDevices) {
    auto f = jit::compile(fn);
    for (std::int64_t rows : {4, 6, 10, 14}) {
      Tensor x = randn({rows, 5}), y = randn({rows, 5});
      Tensor got = f(on(x, d), on(y, d));
      BOOST_TEST(test::relative_error(got.to(Device::cpu()), fn(x, y)) < 1e-6,
                 d.str() << " rows " << rows);
    }
    BOOST_TEST(f.core().num_entries() <= 2u, d.str());
  }
}

BOOST_AUTO_TEST_SUITE_END()
