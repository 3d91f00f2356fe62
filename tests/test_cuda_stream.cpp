// kiln's stream (runtime/cuda/current_stream.h): launches, library calls, copies and allocations
// go to the current stream, kiln's own unless a StreamGuard names another, so a training step
// queues nothing on the legacy stream (which CUDA graph capture cannot use). Results against
// the CPU in f64.
#include <boost/test/unit_test.hpp>

#include <cstdlib>

#include "autograd/ops.h"
#include "jit/compile.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/error.h"
#include "runtime/random.h"
#include "support/device_compare.h"

using namespace kiln;
using test::relative_error;

namespace {

struct UseVirtualGpu {
  UseVirtualGpu() { setenv("KILN_CUDA", "virtual", 0); }
};

std::uint64_t legacy_calls() {
  return cuda::vgpu::legacy_stream_calls(cuda::backend());
}

// A matmul (cuBLASLt), a fused pointwise epilogue and a reduction, with a backward.
Tensor loss_of(const Tensor& x, const Tensor& w) {
  return (tanh(matmul(x, w)) * 0.5 + x).sum();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_stream, *boost::unit_test::fixture<UseVirtualGpu>())

BOOST_AUTO_TEST_CASE(kilns_stream_is_current_unless_a_guard_names_another) {
  cuda::Stream own = cuda::kiln_stream();
  BOOST_TEST(own != nullptr);
  BOOST_TEST(cuda::current_stream() == own);
  cuda::Stream other = cuda::backend().create_stream();
  {
    cuda::StreamGuard outer(other);
    BOOST_TEST(cuda::current_stream() == other);
    {
      cuda::StreamGuard inner(nullptr);
      BOOST_TEST(cuda::current_stream() == nullptr);
    }
    BOOST_TEST(cuda::current_stream() == other);
  }
  BOOST_TEST(cuda::current_stream() == own);
  cuda::backend().destroy_stream(other);
}

BOOST_AUTO_TEST_CASE(a_compiled_training_step_queues_nothing_on_the_legacy_stream) {
  manual_seed(7);
  Tensor x_host = randn({8, 8}), w_host = randn({8, 8});
  auto step = jit::compile([](const Tensor& x, const Tensor& w) { return loss_of(x, w); });
  Tensor w = w_host.to(Device::cuda()).requires_grad_();
  Tensor x = x_host.to(Device::cuda());
  step(x, w).backward();  // traces and compiles; the warm step below is the one counted
  w.set_grad(Tensor());

  const std::uint64_t before = legacy_calls();
  Tensor up = x_host.to(Device::cuda());
  Tensor loss = step(up, w);
  loss.backward();
  Tensor loss_host = loss.to(Device::cpu()), grad_host = w.grad().to(Device::cpu());
  BOOST_TEST(legacy_calls() == before);

  Tensor wr = w_host.to(DType::f64).requires_grad_();
  Tensor want = loss_of(x_host.to(DType::f64), wr);
  want.backward();
  BOOST_TEST(relative_error(loss_host, want) < 1e-4);
  BOOST_TEST(relative_error(grad_host, wr.grad()) < 1e-4);
}

BOOST_AUTO_TEST_CASE(work_goes_to_the_stream_a_guard_names) {
  Tensor x = arange(0, 16, 1, DType::f32).to(Device::cuda());
  // The legacy stream, named: the counter sees the launch and the read back.
  {
    const std::uint64_t before = legacy_calls();
    cuda::StreamGuard legacy(nullptr);
    Tensor y = (x * 2.0 + 1.0).to(Device::cpu());
    BOOST_TEST(legacy_calls() > before);
    BOOST_TEST(relative_error(y, arange(0, 16, 1, DType::f64) * 2.0 + 1.0) == 0);
  }
  // A stream of the user's, then destroyed: the launch queued on it is refused by name.
  cuda::Stream mine = cuda::backend().create_stream();
  {
    cuda::StreamGuard guard(mine);
    Tensor y = (x * 3.0).to(Device::cpu());
    BOOST_TEST(relative_error(y, arange(0, 16, 1, DType::f64) * 3.0) == 0);
  }
  cuda::backend().destroy_stream(mine);
  cuda::StreamGuard guard(mine);
  BOOST_CHECK_EXCEPTION((void)(x * 4.0), Error, [](const Error& e) {
    return std::string(e.what()).find("on an invalid stream") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
