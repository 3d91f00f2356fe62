// Eager ops on CUDA tensors (the virtual GPU here): each runs as a one-node graph through the
// generated-kernel path; results are compared with the same op on the CPU.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "jit/codegen/launch_stats.h"
#include "runtime/device_checks.h"
#include "support/device_compare.h"
#include "support/op_samples.h"
#include "support/reference.h"
#include "support/scope_exit.h"

using namespace kiln;
using test::relative_error;

namespace {

std::vector<Tensor> on(Device device, const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const auto& t : ts) out.push_back(t.to(device));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_eager)

BOOST_AUTO_TEST_CASE(every_elementwise_op_on_cuda_matches_the_cpu) {
  int runs = 0;
  for (OpId op : all_ops()) {
    if (op_class(op) != OpClass::elementwise || op == OpId::tril || op == OpId::triu) continue;
    for (DType dtype : test::sample_dtypes(op)) {
      for (const auto& s : test::op_samples(op, dtype)) {
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          auto want = s.run(s.inputs);
          auto got = s.run(on(Device::cuda(), s.inputs));
          BOOST_TEST_REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            BOOST_TEST(got[i].device().str() == "cuda:0");
            BOOST_TEST(got[i].dtype() == want[i].dtype());
            BOOST_TEST(got[i].shape() == want[i].shape());
            // Integers and bools exactly; floating outputs within ulps of their dtype
            // (test::single_op_ulps says why each bound).
            std::string mismatch = test::single_op_mismatch(op, got[i], want[i]);
            BOOST_TEST(mismatch.empty(), mismatch);
          }
          ++runs;
        }
      }
    }
  }
  BOOST_TEST(runs > 150);
}

BOOST_AUTO_TEST_CASE(indexing_scan_and_movement_ops_on_cuda_match_the_cpu) {
  int runs = 0;
  for (OpId op :
       {OpId::gather, OpId::index_select, OpId::scatter_add, OpId::index_add, OpId::cumsum,
        OpId::sort, OpId::topk, OpId::cat, OpId::pad, OpId::tril, OpId::triu}) {
    for (DType dtype : test::sample_dtypes(op))
      for (const auto& s : test::op_samples(op, dtype)) {
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          auto want = s.run(s.inputs);
          auto got = s.run(on(Device::cuda(), s.inputs));
          BOOST_TEST_REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            BOOST_TEST(got[i].dtype() == want[i].dtype());
            BOOST_TEST(got[i].shape() == want[i].shape());
            double tol = is_floating(dtype) && dtype != DType::f64 && dtype != DType::f32 ? 1e-2
                         : dtype == DType::f32                                            ? 1e-6
                                                                                          : 1e-13;
            BOOST_TEST(relative_error(got[i], want[i]) <= tol);
          }
          ++runs;
        }
      }
  }
  BOOST_TEST(runs > 20);
  // An index out of range is an IndexError naming the op and the index, as on the CPU. The
  // kernel flags it in device memory and the host reads the flag at its next sync (a copy to
  // the host), so the launch itself never waits; raised once.
  Tensor x = randn({3, 4}).to(Device::cuda());
  Tensor bad = test::i64s({0, 4, 1}, {3, 1}).to(Device::cuda());
  Tensor gathered = gather(x, 1, bad);
  BOOST_TEST(pending_device_checks() == 1u);
  BOOST_CHECK_EXCEPTION(gathered.to(Device::cpu()), IndexError, [](const Error& e) {
    std::string m = e.what();
    return m.find("gather: index 4 is out of range for dim 1 of size 4") != std::string::npos &&
           m.find("KILN_SYNC_CHECKS") != std::string::npos;
  });
  BOOST_TEST(pending_device_checks() == 0u);
  BOOST_CHECK_NO_THROW(x.to(Device::cpu()));
  // KILN_SYNC_CHECKS=1 (here set from code) raises it at the op.
  {
    set_sync_device_checks(true);
    test::ScopeExit checks_at_sync([] { set_sync_device_checks(false); });
    BOOST_CHECK_THROW(index_select(x, 0, test::i64s({-1}).to(Device::cuda())), IndexError);
  }
  BOOST_TEST(pending_device_checks() == 0u);
  // An inference loop that never copies to the host reads the flags once the 1024 slots are used.
  Tensor good = test::i64s({0, 3, 1}, {3, 1}).to(Device::cuda());
  std::size_t most = 0;
  for (int i = 0; i < 1100; ++i) {
    gather(x, 1, good);
    most = std::max(most, pending_device_checks());
  }
  BOOST_TEST(most == 1024u);
  run_device_checks();
}

BOOST_AUTO_TEST_CASE(matmul_on_cuda_matches_the_cpu) {
  int runs = 0;
  for (DType dtype : test::sample_dtypes(OpId::matmul))
    for (const auto& s : test::op_samples(OpId::matmul, dtype)) {
      BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
        auto want = s.run(s.inputs);
        auto got = s.run(on(Device::cuda(), s.inputs));
        for (std::size_t i = 0; i < got.size(); ++i)
          BOOST_TEST(relative_error(got[i], want[i]) <= (dtype == DType::f64 ? 1e-13 : 1e-5));
        ++runs;
      }
    }
  BOOST_TEST(runs > 0);
  struct Case {
    Shape a, b;
    bool transpose_b;
    DType dtype;
  };
  for (const Case& c :
       {Case{{3, 4}, {4, 5}, false, DType::f32}, Case{{17, 33}, {5, 33}, true, DType::f32},
        Case{{2, 3, 4}, {4, 5}, false, DType::f64},
        Case{{2, 1, 3, 4}, {3, 4, 2}, false, DType::f32}, Case{{20, 8}, {8, 19}, false, DType::f16},
        Case{{4, 6}, {6, 3}, false, DType::bf16}, Case{{3, 0}, {0, 2}, false, DType::f32}}) {
    BOOST_TEST_CONTEXT(shape_str(c.a) << " @ " << shape_str(c.b) << " " << dtype_name(c.dtype)) {
      Tensor a = randn(c.a).to(c.dtype), b = randn(c.b).to(c.dtype);
      Tensor bb = c.transpose_b ? b.t() : b;
      Tensor want = matmul(a, bb);
      Tensor got = matmul(a.to(Device::cuda()), bb.to(Device::cuda()));
      double tol = c.dtype == DType::f64 ? 1e-13 : c.dtype == DType::f32 ? 1e-5 : 2e-2;
      BOOST_TEST(relative_error(got, want) <= tol);
    }
  }
  Tensor i = test::i64s({1, 2, 3, 4}, {2, 2});
  Tensor ii = matmul(i.to(Device::cuda()), i.to(Device::cuda())).to(Device::cpu());
  BOOST_TEST(ii.data<std::int64_t>()[0] == 7);
  BOOST_TEST(ii.data<std::int64_t>()[3] == 22);
}

BOOST_AUTO_TEST_CASE(numbers_and_0_dim_cpu_tensors_act_as_scalars) {
  Tensor x = test::f32s({1.5f, -2.0f, 0.25f}).to(Device::cuda());
  Tensor y = (x * 3 + 1).to(Device::cpu());
  BOOST_TEST(y.data<float>()[0] == 1.5f * 3 + 1);
  BOOST_TEST(y.data<float>()[1] == -2.0f * 3 + 1);
  Tensor scale = test::f32s({4.0f}).reshape({});  // 0-dim, on the CPU
  Tensor z = (x * scale).to(Device::cpu());
  BOOST_TEST(z.data<float>()[2] == 1.0f);
  // The same kernel serves another number: it is an argument, not part of the source.
  Tensor w = (x * test::f32s({-1.0f}).reshape({})).to(Device::cpu());
  BOOST_TEST(w.data<float>()[0] == -1.5f);
  // An integer tensor times an integer stays integral; times a float becomes f32.
  Tensor i = test::i64s({1, 2, 3}).to(Device::cuda());
  BOOST_TEST(dtype_name((i * 3).dtype()) == "i64");
  BOOST_TEST((i * 3).to(Device::cpu()).data<std::int64_t>()[2] == 9);
  BOOST_TEST(dtype_name((i * 0.5).dtype()) == "f32");
}

BOOST_AUTO_TEST_CASE(one_kernel_serves_shapes_with_the_same_rank) {
  // The same op and dtypes on [4, 6], then [6, 4]: one kernel, each result its own shape.
  // [3, 1] first: its row sum has the input's shape, which must not stick to later calls.
  for (Shape shape : {Shape{3, 1}, Shape{4, 6}, Shape{6, 4}, Shape{2, 12}}) {
    Tensor x = randn(shape);
    Tensor got = exp(x.to(Device::cuda()));
    BOOST_TEST(got.shape() == shape);
    BOOST_TEST(relative_error(got, exp(x)) <= 2e-6);
    Tensor s = sum(x.to(Device::cuda()), {1});
    BOOST_TEST(s.shape() == Shape{shape[0]});
    BOOST_TEST(relative_error(s, sum(x, {1})) <= 1e-5);
    Tensor k = sum(x.to(Device::cuda()), {1}, true);
    BOOST_TEST(k.shape() == (Shape{shape[0], 1}));
    BOOST_TEST(relative_error(k, sum(x, {1}, true)) <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(other_device_mixes_are_errors_naming_both_devices) {
  Tensor a = test::f32s({1, 2}).to(Device::cuda());
  Tensor b = test::f32s({1, 2});
  BOOST_CHECK_EXCEPTION(a + b, Error, [](const Error& e) {
    std::string m = e.what();
    return m.find("add") != std::string::npos && m.find("cuda:0") != std::string::npos &&
           m.find("cpu") != std::string::npos;
  });
  // A 0-dim CPU tensor is a number only for elementwise ops.
  BOOST_CHECK_THROW(matmul(a.reshape({1, 2}), b.reshape({2, 1})), Error);
}

BOOST_AUTO_TEST_CASE(eager_autograd_through_elementwise_ops_on_cuda) {
  Tensor x_cpu = test::f32s({0.5f, -1.0f, 2.0f});
  Tensor x = x_cpu.to(Device::cuda()).detach();
  x.requires_grad_();
  Tensor y = exp(x) * x + sigmoid(x);
  y.backward(ones({3}).to(Device::cuda()));
  BOOST_TEST_REQUIRE(x.grad().defined());
  BOOST_TEST(x.grad().device().str() == "cuda:0");
  Tensor g = x.grad().to(Device::cpu());
  for (int i = 0; i < 3; ++i) {
    double v = x_cpu.data<float>()[i];
    double s = 1 / (1 + std::exp(-v));
    double want = std::exp(v) * (v + 1) + s * (1 - s);  // d/dv of e^v v + sigmoid(v)
    BOOST_TEST(std::abs(g.data<float>()[i] - want) <= 1e-5 * (1 + std::abs(want)));
  }
}

BOOST_AUTO_TEST_CASE(gradients_start_from_zeros_not_from_what_a_reused_block_held) {
  // Device blocks come back from the caching allocator as the last user left them: fill a few
  // of every size with NaN first. Gather's and index_select's gradients scatter into zeros.
  for (std::int64_t n : {64 * 4, 10 * 3, 64, 4 * 64, 4})
    for (int i = 0; i < 3; ++i) Tensor dirty = full({n}, NAN, DType::f32).to(Device::cuda());
  Tensor logits = randn({64, 4}), w1 = randn({64, 2}) * 0.5, x = randn({64, 2});
  Tensor target = randint(0, 4, {64}, DType::i64);
  Tensor table = randn({10, 3}), ids = from_vector(std::vector<std::int64_t>{1, 7, 1, 3});
  auto grads = [&](Device d) {
    Tensor l = logits.to(d).detach().requires_grad_(true);
    Tensor w = w1.to(d).detach().requires_grad_(true);
    Tensor e = table.to(d).detach().requires_grad_(true);
    Tensor loss =
        cross_entropy(l + matmul(gelu(matmul(x.to(d), w.t())), ones({64, 4}).to(d)), target.to(d)) +
        sum(embedding(e, ids.to(d)) * 2.0);
    loss.backward();
    return std::vector<Tensor>{loss, l.grad(), w.grad(), e.grad()};
  };
  auto want = grads(Device::cpu()), got = grads(Device::cuda());
  for (std::size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(test::relative_error(got[i], want[i]) <= 1e-5, "output " << i);
}

// index_copy_ with no gradient to record writes the source's slices into self and nothing else
// (a decode step's cache row), through self's strides, the last entry of a slice winning as on
// the CPU; an index out of range is an IndexError at the next sync.
BOOST_AUTO_TEST_CASE(index_copy_in_place_moves_only_the_source_slices) {
  Tensor self = randn({3, 6, 4});
  Tensor source = randn({3, 2, 4});
  Tensor index = test::i64s({5, 1});
  Tensor device = self.to(Device::cuda());
  auto& stats = jit::codegen::launch_stats();
  const std::int64_t written = stats.bytes_written.load();
  device.index_copy_(1, index.to(Device::cuda()), source.to(Device::cuda()));
  BOOST_TEST(stats.bytes_written.load() - written == source.numel() * 4);
  Tensor want = self.to(DType::f64);
  for (std::int64_t a = 0; a < 3; ++a)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t c = 0; c < 4; ++c)
        want.data<double>()[(a * 6 + (j == 0 ? 5 : 1)) * 4 + c] =
            source.data<float>()[(a * 2 + j) * 4 + c];
  BOOST_TEST(relative_error(device, want) == 0);

  // A transposed view of self, duplicates in the index: the last entry's slice.
  Tensor wide = zeros({4, 5}).to(Device::cuda());
  Tensor rows = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  wide.transpose(0, 1).index_copy_(0, test::i64s({3, 3}).to(Device::cuda()),
                                   rows.transpose(0, 1).to(Device::cuda()));
  Tensor cpu_wide = zeros({4, 5});
  cpu_wide.transpose(0, 1).index_copy_(0, test::i64s({3, 3}), rows.transpose(0, 1));
  BOOST_TEST(relative_error(wide, cpu_wide) == 0);
  BOOST_TEST(cpu_wide.data<float>()[3] == 2.0f);  // column 3 holds the second entry: 2, 4, 6, 8

  // A source in self's memory is read as it was before the write, as the CPU reads it.
  Tensor shifted = arange(0, 12, 1, DType::f32).reshape({4, 3}).to(Device::cuda());
  shifted.index_copy_(0, test::i64s({1, 2}).to(Device::cuda()), shifted.slice(0, 0, 2));
  Tensor want_shifted =
      from_vector(std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 9, 10, 11}, {4, 3});
  BOOST_TEST(relative_error(shifted, want_shifted) == 0);

  device.index_copy_(1, test::i64s({6}).to(Device::cuda()),
                     source.slice(1, 0, 1).to(Device::cuda()));
  BOOST_CHECK_EXCEPTION(device.to(Device::cpu()), IndexError, [](const Error& e) {
    return std::string(e.what()).find("index_copy: index 6 is out of range for dim 1 of size 6") !=
           std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
