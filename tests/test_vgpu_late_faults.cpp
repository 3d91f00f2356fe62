// Kernel faults as CUDA reports them, on the virtual GPU: in late mode a launch that writes out of
// bounds returns, and the next call that waits for the device throws the driver's error naming no
// kernel, sticky from then on; with KILN_LAUNCH_BLOCKING=1 the launch itself waits and throws
// naming the kernel, grid and block, and each launch counts as a synchronization
// (host_sync.h). The default (immediate) mode names the kernel at the launch and leaves nothing
// behind.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/launch_blocking.h"
#include "runtime/cuda/virtual/fault.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "support/scope_exit.h"

using namespace kiln;
using cuda::Backend;
using cuda::DevicePtr;
using cuda::Dim3;
namespace vgpu = kiln::cuda::vgpu;

namespace {

// k_oob(unsigned* p): thread i of the grid stores i to p[i] (NVRTC's shape).
const char* kStoreIndex = R"(.version 9.0
.target sm_90
.address_size 64
.visible .entry k_oob(.param .u64 k_oob_param_0)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [k_oob_param_0];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd3, %rd2, %rd3;
  st.global.u32 [%rd3], %r4;
  ret;
}
.visible .entry k_trap()
{
  trap;
  ret;
}
)";

// A fresh virtual GPU with the module loaded and 100 words allocated: 128 threads overrun them.
struct Gpu {
  std::unique_ptr<Backend> b = cuda::make_virtual_backend();
  cuda::Module module = b->load_module(kStoreIndex);
  cuda::Function store = b->get_function(module, "k_oob");
  DevicePtr words = b->alloc(100 * 4);
  void* params[1] = {&words};

  void launch(unsigned threads) {
    b->launch(store, Dim3{2}, Dim3{threads / 2}, 0, nullptr, params);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cuda::KernelFault& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(not a KernelFault) ") + e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_late_faults)

BOOST_AUTO_TEST_CASE(by_default_the_launch_names_the_kernel_and_nothing_sticks) {
  Gpu g;
  std::string msg = error_of([&] { g.launch(128); });
  BOOST_TEST(contains(msg, "in kernel 'k_oob'"), msg);
  BOOST_TEST(contains(msg, "out-of-bounds global store"), msg);
  g.b->synchronize();  // no error left behind
  std::vector<unsigned> host(100);
  g.b->copy_to_host(host.data(), g.words, 400);
  BOOST_TEST(host[99] == 99u);  // the threads before the faulting one stored
}

BOOST_AUTO_TEST_CASE(in_late_mode_the_next_wait_reports_it_without_the_kernel) {
  Gpu g;
  vgpu::set_fault_mode(*g.b, vgpu::FaultMode::late);
  g.launch(128);  // returns, as cuLaunchKernel does
  std::uint64_t ran = vgpu::executed_thread_instructions(*g.b);
  g.launch(64);  // queued behind the fault: never runs
  BOOST_TEST(vgpu::executed_thread_instructions(*g.b) == ran);
  std::string msg = error_of([&] { g.b->synchronize(); });
  BOOST_TEST(contains(msg,
                      "cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal "
                      "memory access was encountered)"),
             msg);
  BOOST_TEST(!contains(msg, "k_oob"), msg);
  BOOST_TEST(contains(msg, "KILN_LAUNCH_BLOCKING=1"), msg);
  // Sticky: every later call fails, waiting or not; frees do not throw.
  std::vector<unsigned> host(100);
  BOOST_TEST(contains(error_of([&] { g.b->copy_to_host(host.data(), g.words, 400); }),
                      "cuMemcpyDtoH_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS"));
  BOOST_TEST(contains(error_of([&] { g.launch(64); }), "cuLaunchKernel failed"));
  BOOST_TEST(contains(error_of([&] { (void)g.b->alloc(16); }), "cuMemAlloc_v2 failed"));
  BOOST_TEST(contains(error_of([&] { g.b->memset8(g.words, 0, 4); }), "cuMemsetD8Async failed"));
  g.b->free(g.words);
  // A new context (setting the mode) works again.
  vgpu::set_fault_mode(*g.b, vgpu::FaultMode::late);
  g.words = g.b->alloc(128 * 4);
  g.launch(128);
  g.b->synchronize();
  g.b->copy_to_host(host.data(), g.words, 400);
  BOOST_TEST(host[99] == 99u);
}

BOOST_AUTO_TEST_CASE(each_call_that_waits_reports_it) {
  std::vector<std::pair<std::string, std::function<void(Gpu&)>>> waits = {
      {"cuStreamSynchronize", [](Gpu& g) { g.b->synchronize_stream(nullptr); }},
      {"cuEventSynchronize",
       [](Gpu& g) {
         cuda::Event e = g.b->create_event();
         g.b->record_event(e, nullptr);  // not a wait: no error yet
         try {
           g.b->synchronize_event(e);
         } catch (...) {
           g.b->destroy_event(e);
           throw;
         }
       }},
      {"cuEventQuery",
       [](Gpu& g) {
         cuda::Event e = g.b->create_event();
         test::ScopeExit destroy([&] { g.b->destroy_event(e); });
         (void)g.b->event_done(e);
       }},
      {"cuMemcpyDtoH_v2",
       [](Gpu& g) {
         unsigned x = 0;
         g.b->copy_to_host(&x, g.words, 4);
       }},
      {"cuMemcpyHtoD_v2", [](Gpu& g) {
         unsigned x = 7;  // pageable: the upload waits
         g.b->copy_to_device(g.words, &x, 4);
       }}};
  for (auto& [call, wait] : waits) {
    Gpu g;
    vgpu::set_fault_mode(*g.b, vgpu::FaultMode::late);
    g.launch(128);
    g.b->copy_device(g.words + 4, g.words, 4);  // not a wait: no error yet
    std::string msg = error_of([&] { wait(g); });
    BOOST_TEST(contains(msg, call + " failed: CUDA_ERROR_ILLEGAL_ADDRESS"), call << ": " << msg);
    BOOST_TEST(!contains(msg, "k_oob"), msg);
  }
}

BOOST_AUTO_TEST_CASE(a_trap_is_an_unspecified_launch_failure) {
  Gpu g;
  vgpu::set_fault_mode(*g.b, vgpu::FaultMode::late);
  g.b->launch(g.b->get_function(g.module, "k_trap"), Dim3{1}, Dim3{32}, 0, nullptr, nullptr);
  BOOST_TEST(contains(error_of([&] { g.b->synchronize(); }),
                      "cuCtxSynchronize failed: CUDA_ERROR_LAUNCH_FAILED (unspecified launch "
                      "failure)"));
}

BOOST_AUTO_TEST_CASE(launch_blocking_raises_at_the_launch_naming_kernel_grid_and_block) {
  bool was = cuda::set_launch_blocking(true);
  test::ScopeExit restore([was] { cuda::set_launch_blocking(was); });
  for (auto mode : {vgpu::FaultMode::late, vgpu::FaultMode::immediate}) {
    Gpu g;
    vgpu::set_fault_mode(*g.b, mode);
    std::string msg = error_of([&] { g.launch(128); });
    BOOST_TEST_CONTEXT(msg) {
      BOOST_TEST(contains(msg,
                          "kernel 'k_oob' grid (2,1,1) block (64,1,1) dynamic shared 0 bytes "
                          "failed (KILN_LAUNCH_BLOCKING=1: cuCtxSynchronize after the launch)"));
      BOOST_TEST(contains(msg, "CUDA_ERROR_ILLEGAL_ADDRESS"));
      BOOST_TEST(contains(msg, "out-of-bounds global store"));  // the interpreter's detail
    }
    // Late mode keeps the context poisoned; immediate mode leaves nothing behind.
    std::string after = error_of([&] { g.b->synchronize(); });
    BOOST_TEST(contains(after, "cuCtxSynchronize failed") == (mode == vgpu::FaultMode::late),
               after);
  }
}

BOOST_AUTO_TEST_CASE(a_blocking_launch_after_an_unreported_fault_reports_it_unnamed) {
  // The fault came from a launch before the switch was on: the wait after the next launch
  // reports it, as cuCtxSynchronize would, without pinning it on the kernel just launched.
  Gpu g;
  vgpu::set_fault_mode(*g.b, vgpu::FaultMode::late);
  g.launch(128);
  bool was = cuda::set_launch_blocking(true);
  test::ScopeExit restore([was] { cuda::set_launch_blocking(was); });
  std::string msg = error_of([&] { g.launch(64); });
  BOOST_TEST(contains(msg, "cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"), msg);
  BOOST_TEST(!contains(msg, "k_oob"), msg);
}

BOOST_AUTO_TEST_CASE(each_blocking_launch_counts_as_a_synchronization) {
  Gpu g;
  DevicePtr enough = g.b->alloc(128 * 4);
  void* params[] = {&enough};
  auto syncs = [] { return cuda::host_sync_stats().synchronizations.load(); };
  auto launches = [&](int n) {
    for (int i = 0; i < n; ++i) g.b->launch(g.store, Dim3{2}, Dim3{64}, 0, nullptr, params);
  };
  auto before = syncs();
  launches(3);
  BOOST_TEST(syncs() - before == 0);
  {
    bool was = cuda::set_launch_blocking(true);
    test::ScopeExit restore([was] { cuda::set_launch_blocking(was); });
    before = syncs();
    launches(5);
    BOOST_TEST(syncs() - before == 5);
  }
  g.b->free(enough);
}

BOOST_AUTO_TEST_CASE(the_switches_values) {
  BOOST_TEST(cuda::launch_blocking_value("1"));
  BOOST_TEST(!cuda::launch_blocking_value("0"));
  BOOST_TEST(!cuda::launch_blocking_value(nullptr));
  std::string msg;
  try {
    cuda::launch_blocking_value("yes");
  } catch (const Error& e) {
    msg = e.what();
  }
  BOOST_TEST(contains(msg, "KILN_LAUNCH_BLOCKING='yes'"), msg);
}

BOOST_AUTO_TEST_SUITE_END()
