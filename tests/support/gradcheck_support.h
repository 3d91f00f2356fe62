// Helpers shared by the gradcheck suites: f64 leaves and a check that reports the mismatch.
#pragma once

#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"

namespace kiln::test {

using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// An f64 leaf that requires grad, uniform on [lo, hi) (distinct values almost surely).
inline Tensor uniform(const Shape& shape, double lo, double hi, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = kiln::rand(shape, DType::f64, &gen) * (hi - lo) + lo;
  x.requires_grad_();
  return x;
}

// An f64 leaf that requires grad, holding `values`.
inline Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor x = kiln::from_vector(values, shape);
  x.requires_grad_();
  return x;
}

inline void check(const std::string& what, const Fn& fn, const Inputs& inputs) {
  auto result = kiln::autograd::gradcheck(fn, inputs);
  BOOST_TEST(result.ok, what << ": " << result.report);
}

}  // namespace kiln::test
