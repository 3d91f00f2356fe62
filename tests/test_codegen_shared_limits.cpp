// Shared memory past 48 KiB: each architecture's opt-in maximum, the virtual GPU refusing a
// launch over the default limit without cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) as the
// driver does (naming the kernel), and KernelHandle opting in once before such a launch.
#include <boost/test/unit_test.hpp>
#include <functional>
#include <tuple>
#include <vector>

#include "jit/codegen/kernel_cache.h"
#include "runtime/cuda/backends.h"
#include "runtime/cuda/shared_memory_limits.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"
#include "support/device_compare.h"

using namespace kiln;

namespace {

constexpr unsigned KiB = 1024;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kPtx = R"(.version 9.0
.target sm_90
.address_size 64
.visible .entry k_wide() {
  ret;
}
)";

}  // namespace

BOOST_AUTO_TEST_SUITE(shared_limits)

BOOST_AUTO_TEST_CASE(the_opt_in_maximum_follows_the_architecture) {
  BOOST_TEST(cuda::shared_memory_optin_limit(7, 0) == 96u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(7, 5) == 64u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(8, 0) == 163u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(8, 6) == 99u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(8, 7) == 163u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(8, 9) == 99u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(9, 0) == 227u * KiB);
  BOOST_TEST(cuda::shared_memory_optin_limit(12, 0) == 99u * KiB);
}

BOOST_AUTO_TEST_CASE(past_48_kib_a_launch_needs_the_functions_opt_in) {
  auto gpu = cuda::make_virtual_backend();
  auto m = gpu->load_module(kPtx);
  auto f = gpu->get_function(m, "k_wide");
  gpu->launch(f, {1}, {32}, 48 * KiB, nullptr, nullptr);  // the default limit
  std::string msg = error_of([&] { gpu->launch(f, {1}, {32}, 64 * KiB, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "kernel 'k_wide'"), msg);
  BOOST_TEST(contains(msg, "65536 bytes of dynamic shared memory"), msg);
  BOOST_TEST(contains(msg, "without opting in"), msg);
  gpu->set_max_dynamic_shared(f, 64 * KiB);
  gpu->launch(f, {1}, {32}, 64 * KiB, nullptr, nullptr);
  // What it opted in to is its limit.
  msg = error_of([&] { gpu->launch(f, {1}, {32}, 80 * KiB, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "as opted in"), msg);
  gpu->unload_module(m);
}

BOOST_AUTO_TEST_CASE(the_opt_in_is_capped_per_architecture) {
  auto gpu = cuda::make_virtual_backend();
  auto m = gpu->load_module(kPtx);
  auto f = gpu->get_function(m, "k_wide");
  gpu->set_max_dynamic_shared(f, 200 * KiB);  // sm_90: up to 227 KiB
  gpu->launch(f, {1}, {32}, 200 * KiB, nullptr, nullptr);
  for (auto [major, minor, fits, over] :
       {std::tuple{8, 6, 99u, 100u}, std::tuple{8, 0, 163u, 164u}, std::tuple{8, 9, 99u, 120u}}) {
    BOOST_TEST_CONTEXT("sm_" << major << minor) {
      cuda::vgpu::set_compute_capability(*gpu, major, minor);
      std::string msg = error_of([&, over = over] { gpu->set_max_dynamic_shared(f, over * KiB); });
      BOOST_TEST(contains(msg, "kernel 'k_wide'"), msg);
      BOOST_TEST(contains(msg, fmt::format("sm_{}{}", major, minor)), msg);
      gpu->set_max_dynamic_shared(f, fits * KiB);
      gpu->launch(f, {1}, {32}, fits * KiB, nullptr, nullptr);
    }
  }
  gpu->unload_module(m);
}

BOOST_AUTO_TEST_CASE(a_kernel_handle_opts_in_before_a_wide_launch) {
  // 64 KiB + 32 floats of dynamic shared memory: each thread writes past the first 64 KiB and
  // reads its neighbour's word.
  const std::string source = R"(
extern "C" __global__ void k_wide_shared(float* out) {
  extern __shared__ float buf[];
  int t = threadIdx.x;
  buf[16384 + t] = 2.0f * t;
  __syncthreads();
  out[t] = buf[16384 + (t + 1) % 32];
}
)";
  jit::codegen::KernelHandle kernel("k_wide_shared", source);
  Tensor out = zeros({32}, DType::f32, Device::cuda());
  auto p = reinterpret_cast<cuda::DevicePtr>(out.raw_data());
  void* params[] = {&p};
  kernel.launch({1, 1, 1}, {32, 1, 1}, 64 * KiB + 128, params, 0, 128);
  kernel.launch({1, 1, 1}, {32, 1, 1}, 64 * KiB + 128, params, 0, 128);  // opted in already
  std::vector<float> want(32);
  for (int t = 0; t < 32; ++t) want[t] = 2.0f * ((t + 1) % 32);
  std::vector<float> got = out.to(Device::cpu()).to_vector<float>();
  BOOST_TEST(got == want, boost::test_tools::per_element());
  // The bare launch, without the handle's opt-in, is refused on a fresh function.
  std::string other = source;
  other.replace(other.find("2.0f"), 4, "3.0f");  // other code: another function
  jit::codegen::KernelHandle fresh("k_wide_shared", other);
  BOOST_TEST(contains(error_of([&] {
                        cuda::backend().launch(fresh.function(), {1}, {32}, 64 * KiB + 128, nullptr,
                                               params);
                      }),
                      "without opting in"));
}

BOOST_AUTO_TEST_SUITE_END()
