// Gradient accumulation into .grad on CUDA tensors (the virtual GPU here): a second backward adds
// every leaf's gradient into its .grad in place, one foreach_add_ launch per dtype group, checked
// against host-computed values; a .grad the user holds keeps its values; create_graph stays
// differentiable; mixed dtypes (explicit gradients, autocast) against the CPU path; warm steps
// make no synchronizations; and foreach_add_ itself (dtype pairs, aliasing, views, bad input).
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "autograd/engine.h"
#include "autograd/foreach.h"
#include "autograd/ops.h"
#include "jit/codegen/multi_tensor.h"
#include "runtime/autocast.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/grad_mode.h"
#include "support/launch_counts.h"
#include "support/reference.h"

using namespace kiln;
using test::launches;

namespace {

const Device kCuda = Device::cuda();

std::vector<double> random_values(std::size_t n, std::mt19937& rng) {
  return test::normal_values(n, rng);
}

// A CUDA leaf of `dtype` holding `values` (rounded to the dtype).
Tensor cuda_leaf(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return test::typed(dtype, values, shape).to(kCuda).detach().requires_grad_();
}

// sum(w * w * a): its gradient is 2 * w * a.
Tensor square_loss(const Tensor& w, const Tensor& a) {
  return (w * w * a).sum();
}

void* grad_address(const Tensor& leaf) {
  return leaf.grad().raw_data();
}

struct Leaves {
  std::vector<Tensor> w;
  std::vector<std::vector<double>> w_values;
};

Leaves make_leaves(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                   std::mt19937& rng) {
  Leaves out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    auto n = static_cast<std::size_t>(numel(shapes[i]));
    auto v = test::round_to(dtypes[i], random_values(n, rng));
    out.w.push_back(cuda_leaf(v, shapes[i], dtypes[i]));
    out.w_values.push_back(v);
  }
  return out;
}

// One backward of the sum of every leaf's square_loss with coefficients `a` (one list per leaf);
// returns the generated launches it made.
std::int64_t backward_once(const Leaves& leaves, const std::vector<Tensor>& a) {
  Tensor total;
  for (std::size_t i = 0; i < leaves.w.size(); ++i) {
    Tensor l = square_loss(leaves.w[i], a[i]);
    total = total.defined() ? total + l.to(DType::f32) : l.to(DType::f32);
  }
  std::int64_t before = launches();
  total.backward();
  return launches() - before;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(engine_accumulation)

// Two backwards into leaves of two dtypes: the second adds every gradient into the .grad it
// already has (same memory), one launch per dtype, and .grad is g1 + g2 computed on the host.
BOOST_AUTO_TEST_CASE(a_second_backward_adds_in_place_one_launch_per_dtype) {
  std::mt19937 rng(7);
  const std::vector<Shape> shapes = {{3, 5}, {5000}, {7}, {2, 9}, {4100}};
  const std::vector<DType> dtypes = {DType::f32, DType::f32, DType::bf16, DType::f32, DType::bf16};
  Leaves leaves = make_leaves(shapes, dtypes, rng);
  std::vector<std::vector<std::vector<double>>> a_values(2);
  std::vector<std::vector<Tensor>> a(2);
  for (int step = 0; step < 2; ++step)
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto v = test::round_to(dtypes[i], random_values(leaves.w_values[i].size(), rng));
      a_values[step].push_back(v);
      a[step].push_back(test::typed(dtypes[i], v, shapes[i]).to(kCuda));
    }

  std::int64_t first = backward_once(leaves, a[0]);
  std::vector<void*> addresses;
  for (const auto& w : leaves.w) addresses.push_back(grad_address(w));
  std::int64_t second = backward_once(leaves, a[1]);
  // The same kernels compute both backwards; the second adds one launch per dtype (f32, bf16).
  BOOST_TEST(second - first == 2);

  for (std::size_t i = 0; i < shapes.size(); ++i) {
    BOOST_TEST_CONTEXT("leaf " << i << " " << dtype_name(dtypes[i])) {
      BOOST_TEST(grad_address(leaves.w[i]) == addresses[i]);  // updated in place
      std::vector<double> want;
      for (std::size_t k = 0; k < leaves.w_values[i].size(); ++k) {
        // Each backward's gradient rounded to the leaf's dtype, their sum rounded once more.
        double g1 = test::round_to(dtypes[i], 2 * leaves.w_values[i][k] * a_values[0][i][k]);
        double g2 = test::round_to(dtypes[i], 2 * leaves.w_values[i][k] * a_values[1][i][k]);
        want.push_back(test::round_to(dtypes[i], g1 + g2));
      }
      test::check_close(leaves.w[i].grad().to(Device::cpu()), shapes[i], want,
                        3 * test::rtol_for(dtypes[i]), test::atol_for(dtypes[i]));
    }
  }
}

// Tensor::grad() shares the .grad tensor: one the user holds is not updated in place (kiln's
// accumulation has always made a new .grad then), nor is a tensor given with set_grad; a leaf
// nobody else holds the .grad of still is.
BOOST_AUTO_TEST_CASE(a_grad_the_user_holds_keeps_its_values) {
  const std::vector<double> w_values = {1, -2, 3}, a1 = {0.5, 1, 2}, a2 = {-1, 4, 0.25};
  Tensor held_leaf = cuda_leaf(w_values, {3}, DType::f32);
  Tensor free_leaf = cuda_leaf(w_values, {3}, DType::f32);
  Tensor set_leaf = cuda_leaf(w_values, {3}, DType::f32);
  auto coefficient = [](const std::vector<double>& v) {
    return test::f64s(v).to(DType::f32).to(kCuda);
  };
  auto backward = [&](const std::vector<double>& a) {
    Tensor c = coefficient(a);
    (square_loss(held_leaf, c) + square_loss(free_leaf, c) + square_loss(set_leaf, c)).backward();
  };
  Tensor given = test::f64s({10, 20, 30}).to(DType::f32).to(kCuda);
  set_leaf.set_grad(given);
  backward(a1);
  Tensor held = held_leaf.grad();
  void* free_address = grad_address(free_leaf);
  backward(a2);

  std::vector<double> g1, sum, given_sum;
  for (std::size_t k = 0; k < 3; ++k) {
    g1.push_back(2 * w_values[k] * a1[k]);
    sum.push_back(2 * w_values[k] * (a1[k] + a2[k]));
    given_sum.push_back(10.0 * static_cast<double>(k + 1) + sum.back());
  }
  test::check_values(held.to(Device::cpu()), {3}, g1);
  BOOST_TEST(!test::shares_storage(held, held_leaf.grad()));
  test::check_values(held_leaf.grad().to(Device::cpu()), {3}, sum);
  test::check_values(given.to(Device::cpu()), {3}, {10, 20, 30});
  test::check_values(set_leaf.grad().to(Device::cpu()), {3}, given_sum);
  BOOST_TEST(grad_address(free_leaf) == free_address);
  test::check_values(free_leaf.grad().to(Device::cpu()), {3}, sum);
}

// Explicit gradients of other dtypes than their leaves': the conversion is part of the one
// launch per (grad, incoming) dtype pair, rounded as the engine's cast rounds.
BOOST_AUTO_TEST_CASE(incoming_gradients_of_other_dtypes_convert_in_the_launch) {
  std::mt19937 rng(11);
  const Shape shape = {6, 7};
  const std::size_t n = 42;
  auto v = [&] { return random_values(n, rng); };
  Tensor f32_a = cuda_leaf(v(), shape, DType::f32), f32_b = cuda_leaf(v(), shape, DType::f32);
  Tensor f16 = cuda_leaf(v(), shape, DType::f16);
  const std::vector<Tensor> leaves = {f32_a, f32_b, f16};
  const std::vector<DType> incoming = {DType::bf16, DType::bf16, DType::f32};
  std::vector<std::vector<double>> g1, g2;
  std::vector<Tensor> seeds1, seeds2;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    g1.push_back(test::round_to(incoming[i], v()));
    g2.push_back(test::round_to(incoming[i], v()));
    seeds1.push_back(test::typed(incoming[i], g1[i], shape).to(kCuda));
    seeds2.push_back(test::typed(incoming[i], g2[i], shape).to(kCuda));
  }
  autograd::run_backward(leaves, seeds1, false, false);
  std::int64_t before = launches();
  autograd::run_backward(leaves, seeds2, false, false);
  BOOST_TEST(launches() - before == 2);  // f32 from bf16, f16 from f32
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    DType d = leaves[i].dtype();
    std::vector<double> want;
    for (std::size_t k = 0; k < n; ++k)
      want.push_back(test::round_to(d, test::round_to(d, g1[i][k]) + test::round_to(d, g2[i][k])));
    test::check_values(leaves[i].grad().to(Device::cpu()), shape, d, want);
  }
}

// Under create_graph the accumulation stays out of place and differentiable: d/dw of
// sum(.grad) after two backwards of sum(w^3) is 12 w.
BOOST_AUTO_TEST_CASE(create_graph_keeps_the_accumulation_differentiable) {
  const std::vector<double> w_values = {0.5, -1.5, 2};
  Tensor w = cuda_leaf(w_values, {3}, DType::f32);
  (w * w * w).sum().backward(Tensor(), false, true);
  Tensor first = w.grad();
  (w * w * w).sum().backward(Tensor(), false, true);
  BOOST_TEST(w.grad().requires_grad());
  BOOST_TEST(!test::shares_storage(first, w.grad()));
  std::vector<double> grad, second;
  for (double x : w_values) {
    grad.push_back(6 * x * x);
    second.push_back(12 * x);
  }
  test::check_values(w.grad().to(Device::cpu()), {3}, grad);
  auto g = autograd::grad({w.grad().sum()}, {w});
  test::check_close(g[0].to(Device::cpu()), {3}, second, 1e-6, 1e-6);
  // The .grad's graph holds w: resetting it breaks the cycle, as PyTorch's docs advise.
  w.set_grad(Tensor());
}

// f32 leaves, forward under autocast(bf16) (a bf16 matmul), two backwards each: CUDA's in-place
// accumulation against the CPU path (Eigen, an out-of-place add per leaf).
BOOST_AUTO_TEST_CASE(autocast_gradients_accumulate_as_on_the_cpu) {
  std::mt19937 rng(3);
  auto w_values = random_values(8 * 4, rng), b_values = random_values(4, rng);
  std::vector<std::vector<double>> x_values = {random_values(5 * 8, rng),
                                               random_values(5 * 8, rng)};
  std::vector<std::vector<double>> grads;
  for (Device device : {Device::cpu(), kCuda}) {
    Tensor w = test::f64s(w_values, {8, 4}).to(DType::f32).to(device).detach().requires_grad_();
    Tensor b = test::f64s(b_values, {4}).to(DType::f32).to(device).detach().requires_grad_();
    for (const auto& xv : x_values) {
      Tensor x = test::f64s(xv, {5, 8}).to(DType::f32).to(device);
      Tensor loss;
      {
        auto scope = autocast(DType::bf16);
        Tensor y = matmul(x, w) + b;
        loss = (y * y).sum();
      }
      loss.backward();
    }
    BOOST_TEST(w.grad().dtype() == DType::f32);
    grads.push_back(w.grad().to(Device::cpu()).to_vector<double>());
    grads.push_back(b.grad().to(Device::cpu()).to_vector<double>());
  }
  test::check_close(test::f64s(grads[2]), {32}, grads[0], 1e-2, 1e-2);
  test::check_close(test::f64s(grads[3]), {4}, grads[1], 1e-2, 1e-2);
}

// A warm step (zero_grad, two backwards) makes no synchronization and no pageable upload. The
// .grad tensors of a step are new allocations, so their table may be uploaded again (through
// pinned staging, which does not wait), at most once.
BOOST_AUTO_TEST_CASE(a_warm_step_makes_no_synchronization) {
  std::mt19937 rng(5);
  Leaves leaves = make_leaves({{64}, {9, 9}}, {DType::f32, DType::f32}, rng);
  std::vector<Tensor> a;
  for (const auto& w : leaves.w)
    a.push_back(test::f64s(random_values(w.numel(), rng), w.shape()).to(DType::f32).to(kCuda));
  auto step = [&] {
    for (auto& w : leaves.w) w.set_grad(Tensor());
    backward_once(leaves, a);
    backward_once(leaves, a);
  };
  step();
  step();
  auto& stats = cuda::host_sync_stats();
  std::int64_t syncs = stats.synchronizations.load(), pageable = stats.pageable_uploads.load(),
               reads = stats.device_to_host_copies.load(),
               tables = jit::codegen::multi_tensor_table_uploads();
  step();
  BOOST_TEST(stats.synchronizations.load() - syncs == 0);
  BOOST_TEST(stats.pageable_uploads.load() - pageable == 0);
  BOOST_TEST(stats.device_to_host_copies.load() - reads == 0);
  BOOST_TEST(jit::codegen::multi_tensor_table_uploads() - tables <= 1);
  std::vector<double> want, a0 = a[0].to(Device::cpu()).to_vector<double>();
  for (std::size_t i = 0; i < 64; ++i) want.push_back(4 * leaves.w_values[0][i] * a0[i]);
  test::check_close(leaves.w[0].grad().to(Device::cpu()), {64}, want, 1e-6, 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(foreach_add)

// Every dtype pair, a tensor past one chunk, an empty one, a view at an offset and an integer
// self (added by add_) on CUDA and on the CPU, against the host: self + other rounded to self's
// dtype, summed and rounded again. Launches: one per dtype pair of the fused entries.
BOOST_AUTO_TEST_CASE(adds_every_entry_on_cuda_and_cpu) {
  std::mt19937 rng(13);
  struct Entry {
    Shape shape;
    DType self, other;
  };
  const std::vector<Entry> entries = {
      {{5000}, DType::f32, DType::f32}, {{3, 3}, DType::f32, DType::f32},
      {{17}, DType::f32, DType::bf16},  {{4, 2}, DType::f16, DType::f32},
      {{33}, DType::bf16, DType::bf16}, {{0}, DType::bf16, DType::bf16},
      {{6}, DType::f64, DType::f16}};
  std::vector<std::vector<double>> self_values, other_values;
  for (const auto& e : entries) {
    auto n = static_cast<std::size_t>(numel(e.shape));
    self_values.push_back(test::round_to(e.self, random_values(n, rng)));
    other_values.push_back(test::round_to(e.other, random_values(n, rng)));
  }
  auto view_values = test::round_to(DType::f32, random_values(12, rng));
  auto view_other = test::round_to(DType::f32, random_values(9, rng));
  for (Device device : {Device::cpu(), kCuda}) {
    BOOST_TEST_CONTEXT(device.str()) {
      std::vector<Tensor> selves, others;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        selves.push_back(test::typed(entries[i].self, self_values[i], entries[i].shape).to(device));
        others.push_back(
            test::typed(entries[i].other, other_values[i], entries[i].shape).to(device));
      }
      std::int64_t before = launches();
      foreach_add_(selves, others);
      if (device.is_cuda()) BOOST_TEST(launches() - before == 5);  // the five dtype pairs
      // Rows 1.. of a matrix (contiguous at an offset: fused on CUDA) and an integer self (one
      // add_), in a call of their own.
      Tensor matrix = test::f64s(view_values, {4, 3}).to(DType::f32).to(device);
      Tensor rows = matrix.slice(0, 1, 4);
      Tensor ints = test::i64s({5, -7}).to(device);
      foreach_add_(std::vector<Tensor>{rows, ints},
                   std::vector<Tensor>{test::f64s(view_other, {3, 3}).to(DType::f32).to(device),
                                       test::i64s({2, 2}).to(device)});
      for (std::size_t i = 0; i < entries.size(); ++i) {
        DType d = entries[i].self;
        std::vector<double> want;
        for (std::size_t k = 0; k < self_values[i].size(); ++k)
          want.push_back(
              test::round_to(d, self_values[i][k] + test::round_to(d, other_values[i][k])));
        BOOST_TEST_CONTEXT("entry " << i) {
          test::check_close(selves[i].to(Device::cpu()), entries[i].shape, want, test::rtol_for(d),
                            0);
        }
      }
      std::vector<double> want_matrix = view_values;
      for (std::size_t k = 0; k < 9; ++k)
        want_matrix[3 + k] = test::round_to(DType::f32, view_values[3 + k] + view_other[k]);
      test::check_values(matrix.to(Device::cpu()), {4, 3}, want_matrix);
      test::check_values(ints.to(Device::cpu()), {2}, DType::i64, {7, -5});
    }
  }
}

// An addend that is another entry's self is read as it was before the call; a table reused by
// a later call of the same kernel over other tensors (other addresses and sizes) adds those.
BOOST_AUTO_TEST_CASE(addends_are_read_before_any_update_and_tables_follow_the_tensors) {
  Tensor a = test::f64s({1, 2, 3}).to(DType::f32).to(kCuda);
  Tensor b = test::f64s({10, 20, 30}).to(DType::f32).to(kCuda);
  std::uint64_t version = a.impl().storage->version();
  foreach_add_(std::vector<Tensor>{a, b}, std::vector<Tensor>{b, a});
  test::check_values(a.to(Device::cpu()), {3}, {11, 22, 33});
  test::check_values(b.to(Device::cpu()), {3}, {11, 22, 33});
  BOOST_TEST(a.impl().storage->version() > version);

  Tensor c = test::f64s(std::vector<double>(4500, 1.0)).to(DType::f32).to(kCuda);
  Tensor d = test::f64s(std::vector<double>(4500, 2.0)).to(DType::f32).to(kCuda);
  std::int64_t tables = jit::codegen::multi_tensor_table_uploads();
  foreach_add_(std::vector<Tensor>{c}, std::vector<Tensor>{d});
  BOOST_TEST(jit::codegen::multi_tensor_table_uploads() - tables == 1);
  test::check_values(c.to(Device::cpu()), {4500}, std::vector<double>(4500, 3.0));
}

BOOST_AUTO_TEST_CASE(bad_input_names_the_entry) {
  Tensor a = test::f64s({1, 2, 3}).to(kCuda), b = test::f64s({1, 2}).to(kCuda);
  KILN_CHECK_THROWS(foreach_add_(std::vector<Tensor>{a}, std::vector<Tensor>{a, a}), Error,
                    "foreach_add_", "1 tensors but 2");
  KILN_CHECK_THROWS(foreach_add_(std::vector<Tensor>{a}, std::vector<Tensor>{b}), Error,
                    "foreach_add_", "entry 0", "[2]", "[3]");
  KILN_CHECK_THROWS(foreach_add_(std::vector<Tensor>{a}, std::vector<Tensor>{a.to(Device::cpu())}),
                    Error, "foreach_add_", "cpu", "cuda");
  Tensor leaf = test::f64s({1, 2, 3}).to(kCuda).detach().requires_grad_();
  KILN_CHECK_THROWS(foreach_add_(std::vector<Tensor>{leaf}, std::vector<Tensor>{a}), AutogradError,
                    "add_", "leaf");
}

BOOST_AUTO_TEST_SUITE_END()
