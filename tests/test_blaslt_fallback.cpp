// When cuBLASLt's heuristic finds no algorithm for a call its documented rules allow, the call
// runs on the generated GEMM + epilogue kernels with the reason on KILN_LOG=fusion, never an
// error in a compiled step. The virtual cuBLASLt answers "no algorithm" where the real one has
// no kernel: a fused epilogue with an operand not 16-byte aligned, and unsupported type mixes.
// References are kiln's CPU (Eigen) kernels.
#include <boost/test/unit_test.hpp>

#include "autograd/ops.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/compile.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda_backend.h"
#include "runtime/log.h"
#include "support/capture_output.h"
#include "support/device_compare.h"

using namespace kiln;
using jit::codegen::lt_stats;
using test::relative_error;
namespace lt = kiln::cuda::blaslt;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// [rows, cols] f32 on the device, one element (4 bytes) past a 16-byte aligned start.
Tensor misaligned(const Tensor& host) {
  Tensor flat = randn({host.numel() + 1}).to(Device::cuda());
  Tensor view = slice(flat, 0, 1, host.numel() + 1, 1).reshape(host.shape());
  view.copy_(host.to(Device::cuda()));
  return view;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(blaslt_fallback)

BOOST_AUTO_TEST_CASE(a_misaligned_operand_with_an_epilogue_finds_no_algorithm) {
  Tensor x = randn({6, 16}), w = randn({16, 8}), b = randn({8});
  jit::codegen::LtForward p;
  p.a = misaligned(x);
  p.b = w.to(Device::cuda());
  p.bias = b.to(Device::cuda());
  p.act = Activation::gelu_tanh;
  BOOST_REQUIRE(reinterpret_cast<std::uintptr_t>(p.a.raw_data()) % 16 == 4);
  // kiln's own rules take it (elements are aligned): it is the library that has no kernel.
  BOOST_TEST(jit::codegen::lt_rule_failure(p) == "");
  std::string why;
  auto fallbacks = lt_stats().fallbacks.load();
  BOOST_TEST(!jit::codegen::try_lt_forward(p, &why).has_value());
  BOOST_TEST(lt_stats().fallbacks.load() == fallbacks + 1);
  BOOST_TEST(contains(why, "cuBLASLt found no algorithm"), why);
  BOOST_TEST(contains(why, "GELU_BIAS with B"), why);  // a is cuBLASLt's B (swapped operands)
  // The plain product of the same operands has a kernel.
  p.bias = Tensor();
  p.act = Activation::none;
  auto plain = jit::codegen::try_lt_forward(p, &why);
  BOOST_REQUIRE(plain.has_value());
  BOOST_TEST(relative_error(plain->out, matmul(x, w)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_compiled_step_falls_back_to_the_generated_kernels_and_says_why) {
  Tensor x = randn({6, 16}), w = randn({8, 16}), b = randn({8});
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return gelu(linear(x, w, b), GeluApproximation::tanh);
  };
  auto f = jit::compile(fn);
  Tensor dw = w.to(Device::cuda()), db = b.to(Device::cuda());
  Tensor aligned_out = f(x.to(Device::cuda()), dw, db);  // compiles; the library call runs
  BOOST_TEST(relative_error(aligned_out, fn(x, w, b)) <= 1e-5);

  setenv("KILN_LOG", "fusion", 1);
  reload_log_settings();
  Tensor got;
  auto fallbacks = lt_stats().fallbacks.load();
  std::string err = test::capture_output(2, [&] { got = f(misaligned(x), dw, db); });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(lt_stats().fallbacks.load() > fallbacks);
  BOOST_TEST(contains(err, "generated GEMM + epilogue kernel: cuBLASLt found no algorithm"), err);
  BOOST_TEST(contains(err, "16-byte aligned"), err);
  BOOST_TEST(relative_error(got, fn(x, w, b)) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(an_unsupported_type_mix_is_no_algorithm_not_a_failed_call) {
  // TF32 compute on 16-bit inputs: cuBLASLt has no such kernel (CUBLAS_STATUS_NOT_SUPPORTED).
  auto& gpu = cuda::backend();
  lt::MatmulSpec s;
  s.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  s.a = s.b = s.c = s.d = {CUDA_R_16BF, 8, 8, 8, CUBLASLT_ORDER_COL, 1, 0};
  lt::Descriptors desc(s);
  cuda::DevicePtr buf = gpu.alloc(4 * 8 * 8 * 2);
  gpu.memset8(buf, 0, 4 * 8 * 8 * 2);
  float one = 1, zero = 0;
  auto call = lt::make_call(desc, &one, &zero, buf, buf + 128, buf + 256, buf + 384);
  auto& service = lt::service(gpu);
  auto calls = service.calls();
  BOOST_CHECK_THROW(service.matmul(call), lt::NoAlgorithmError);
  BOOST_TEST(service.calls() == calls);
  gpu.free(buf);
}

BOOST_AUTO_TEST_SUITE_END()
