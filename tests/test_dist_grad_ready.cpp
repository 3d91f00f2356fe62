// The engine's gradient-ready reports DistributedDataParallel starts its buckets from
// (autograd/grad_ready.h): each leaf once, with the gradient its .grad then takes, as soon as it
// is final: the last layer's first, eagerly and from a compiled function's backward plan, whose
// gradients are reported as its steps make them, not when the whole plan has run.
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/grad_ready.h"
#include "jit/codegen/launch_stats.h"
#include "support/device_compare.h"
#include "support/dist_model.h"

using namespace kiln;

namespace {

struct Report {
  const TensorImpl* leaf;
  Tensor grad;
  std::int64_t launches;  // generated kernel launches so far
};

class Recorder : public autograd::GradReadyObserver {
 public:
  Recorder() { autograd::add_grad_ready_observer(this); }
  ~Recorder() override { autograd::remove_grad_ready_observer(this); }
  void on_grad_ready(const TensorImpl* leaf, const Tensor& grad) override {
    reports.push_back(
        {leaf, grad.defined() ? grad.clone() : grad, jit::codegen::launch_stats().launches.load()});
  }
  void on_backward_end() override { ++ends; }

  std::vector<Report> reports;
  int ends = 0;
};

std::size_t position(const std::vector<Report>& reports, const Tensor& leaf) {
  for (std::size_t i = 0; i < reports.size(); ++i)
    if (reports[i].leaf == leaf.impl_ptr().get()) return i;
  return reports.size();
}

void check_reports(const test::DistMlp& model, const Recorder& r) {
  BOOST_TEST(r.ends == 1);
  BOOST_TEST_REQUIRE(r.reports.size() == model.parameters().size());
  for (const auto& [name, p] : model.named_parameters()) {
    std::size_t i = position(r.reports, p);
    BOOST_TEST_REQUIRE(i < r.reports.size(), name << " was not reported");
    BOOST_TEST(test::relative_error(r.reports[i].grad, p.grad()) <= 1e-6, name);
  }
  // The backward reaches the last layer first.
  BOOST_TEST(position(r.reports, model.fc3.weight) < position(r.reports, model.fc2.weight));
  BOOST_TEST(position(r.reports, model.fc2.weight) < position(r.reports, model.fc1.weight));
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_eager_backward_reports_each_leaf_once_last_layer_first) {
  test::DistMlp model(7);
  auto [x, y] = test::dist_batch(0, 0, test::kRows, Device::cpu());
  Recorder r;
  mse_loss(model.forward(x), y).backward();
  check_reports(model, r);
}

BOOST_AUTO_TEST_CASE(a_compiled_backward_reports_gradients_as_its_plan_makes_them) {
  test::DistMlp model(7);
  model.to(Device::cuda());
  jit::CompileOptions options;
  options.modules = {&model};
  auto loss = jit::compile(
      [&](const Tensor& x, const Tensor& y) { return mse_loss(model.forward(x), y); }, options);
  auto [x, y] = test::dist_batch(0, 0, test::kRows, Device::cuda());
  loss(x, y).backward();  // compiles both plans
  model.zero_grad();
  Recorder r;
  loss(x, y).backward();
  check_reports(model, r);
  // Kernels ran between the first report and the last: not all at the plan's end.
  BOOST_TEST(r.reports.front().launches < r.reports.back().launches);
}

BOOST_AUTO_TEST_CASE(autograd_grad_reports_nothing) {
  test::DistMlp model(7);
  auto [x, y] = test::dist_batch(0, 0, test::kRows, Device::cpu());
  Recorder r;
  autograd::grad({mse_loss(model.forward(x), y)}, model.parameters());
  BOOST_TEST(r.reports.empty());
  BOOST_TEST(r.ends == 0);
}
