// The virtual GPU's checks: every fault a kernel can commit (out-of-bounds, use after free,
// misaligned, shared/local overflow, unreachable barriers, shuffles naming absent lanes, traps)
// and every launch a real GPU refuses is an exception whose message says exactly what happened.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/virtual/fault.h"

namespace {

using kiln::cuda::Backend;
using kiln::cuda::DevicePtr;
using kiln::cuda::Dim3;

// Hand-written PTX, in the shape NVRTC emits, so each test controls the faulting instruction.
std::string ptx_module(const std::string& body) {
  return ".version 9.0\n.target sm_90\n.address_size 64\n" + body;
}

// Runs `fn` and returns the message of the kiln::Error it must throw.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  BOOST_FAIL("expected a kiln::Error");
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  bool ok = s.find(part) != std::string::npos;
  if (!ok) BOOST_TEST_MESSAGE("'" << part << "' not in: " << s);
  return ok;
}

// k(float* p, int i): loads p[i] (4 bytes) and stores it to p[0].
const char* kLoadIndex = R"(
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
  .reg .f32 %f<2>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u32 %r1, [k_param_1];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  st.global.f32 [%rd2], %f1;
  ret;
}
)";

struct Fixture {
  std::unique_ptr<Backend> b = kiln::cuda::make_virtual_backend();
};

void launch1(Backend& b, const std::string& ptx, Dim3 grid, Dim3 block, void** params,
             unsigned shmem = 0, const char* name = "k") {
  auto m = b.load_module(ptx);
  auto f = b.get_function(m, name);
  try {
    b.launch(f, grid, block, shmem, nullptr, params);
  } catch (...) {
    b.unload_module(m);
    throw;
  }
  b.unload_module(m);
}

}  // namespace

// Messages name the first thread to fault, which depends on the schedule: pin the in-order one
// (KILN_VGPU_SCHEDULE=random is exercised by test_device_vgpu_schedule).
struct InOrderSchedule {
  InOrderSchedule() { setenv("KILN_VGPU_SCHEDULE", "in_order", 1); }
};
BOOST_FIXTURE_TEST_SUITE(vgpu_faults, Fixture, *boost::unit_test::fixture<InOrderSchedule>())

BOOST_AUTO_TEST_CASE(out_of_bounds_global_load_names_kernel_thread_and_allocation) {
  DevicePtr p = b->alloc(1024);
  int i = 257;  // 4 bytes past the end
  void* params[] = {&p, &i};
  std::string msg =
      error_of([&] { launch1(*b, ptx_module(kLoadIndex), Dim3{1}, Dim3{1}, params); });
  BOOST_TEST(contains(msg, "out-of-bounds global load of 4 bytes at "));
  BOOST_TEST(contains(msg, "in kernel 'k' block (0,0,0) thread (0,0,0)"));
  BOOST_TEST(
      contains(msg, fmt::format("nearest allocation {:#x}[1024 bytes] ends 4 bytes before", p)));
  BOOST_TEST(contains(msg, "ld.global.f32 %f1, [%rd4]"));
  b->free(p);
}

BOOST_AUTO_TEST_CASE(out_of_bounds_store_in_nvrtc_shaped_kernel_names_block_and_thread) {
  const char* body = R"(
.visible .entry k(.param .u64 k_param_0)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [k_param_0];
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
)";
  DevicePtr p = b->alloc(100 * 4);
  void* params[] = {&p};
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{2}, Dim3{64}, params); });
  BOOST_TEST(contains(msg, "out-of-bounds global store of 4 bytes"));
  BOOST_TEST(contains(msg, "block (1,0,0) thread (36,0,0)"));
  BOOST_TEST(contains(msg, "[400 bytes] ends 0 bytes before"));
  b->free(p);
}

BOOST_AUTO_TEST_CASE(use_after_free_says_freed) {
  DevicePtr p = b->alloc(256);
  b->free(p);
  int i = 3;
  void* params[] = {&p, &i};
  std::string msg =
      error_of([&] { launch1(*b, ptx_module(kLoadIndex), Dim3{1}, Dim3{1}, params); });
  BOOST_TEST(contains(msg, "use-after-free global load of 4 bytes"));
  BOOST_TEST(contains(msg, "was freed"));
}

BOOST_AUTO_TEST_CASE(misaligned_access) {
  const char* body = R"(
.visible .entry k(.param .u64 k_param_0)
{
  .reg .f32 %f<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [k_param_0];
  add.s64 %rd2, %rd1, 2;
  ld.global.f32 %f1, [%rd2];
  ret;
}
)";
  DevicePtr p = b->alloc(64);
  void* params[] = {&p};
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{1}, params); });
  BOOST_TEST(contains(msg, "misaligned global load of 4 bytes"));
  BOOST_TEST(contains(msg, "needs 4-byte alignment"));
  b->free(p);
}

BOOST_AUTO_TEST_CASE(shared_out_of_bounds_through_generic_address) {
  const char* body = R"(
.extern .shared .align 16 .b8 sm[];
.visible .entry k()
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<5>;
  mov.u32 %r1, %tid.x;
  mov.u64 %rd1, sm;
  cvta.shared.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.u32 [%rd4], %r1;
  ret;
}
)";
  std::string msg =
      error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{40}, nullptr, 128); });
  BOOST_TEST(contains(msg, "out-of-bounds generic store of 4 bytes"));
  BOOST_TEST(contains(msg, "thread (32,0,0)"));
  BOOST_TEST(contains(msg, "past the 128 bytes of shared memory"));
}

BOOST_AUTO_TEST_CASE(local_out_of_bounds) {
  const char* body = R"(
.visible .entry k(.param .u32 k_param_0)
{
  .local .align 4 .b8 __local_depot0[16];
  .reg .b64 %SPL;
  .reg .b32 %r<3>;
  .reg .b64 %rd<4>;
  mov.u64 %SPL, __local_depot0;
  ld.param.u32 %r1, [k_param_0];
  mul.wide.u32 %rd1, %r1, 4;
  add.s64 %rd2, %SPL, %rd1;
  st.local.u32 [%rd2], %r1;
  ret;
}
)";
  unsigned i = 3;
  void* ok_params[] = {&i};
  launch1(*b, ptx_module(body), Dim3{1}, Dim3{1}, ok_params);
  unsigned bad = 4;
  void* params[] = {&bad};
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{1}, params); });
  BOOST_TEST(contains(msg, "out-of-bounds local store of 4 bytes"));
  BOOST_TEST(contains(msg, "this thread's local memory"));
}

BOOST_AUTO_TEST_CASE(barrier_that_some_threads_never_reach) {
  // if (tid < 16) __syncthreads(); -- the other threads exit.
  const char* body = R"(
.visible .entry k()
{
  .reg .pred %p<2>;
  .reg .b32 %r<2>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 16;
  @%p1 bra $L__BB0_2;
  bar.sync 0;
$L__BB0_2:
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{64}, nullptr); });
  BOOST_TEST(contains(msg, "barrier 0 in kernel 'k' block (0,0,0) can never complete"));
  BOOST_TEST(contains(msg, "16 of 64 threads wait at it"));
  BOOST_TEST(contains(msg, "48 threads exited without reaching it"));
}

BOOST_AUTO_TEST_CASE(deadlock_between_two_barriers_is_reported_not_hung) {
  const char* body = R"(
.visible .entry k()
{
  .reg .pred %p<2>;
  .reg .b32 %r<2>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 32;
  @%p1 bra $L__BB0_2;
  bar.sync 0;
  bra.uni $L__BB0_3;
$L__BB0_2:
  bar.sync 1;
$L__BB0_3:
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{64}, nullptr); });
  BOOST_TEST(contains(msg, "deadlock in kernel 'k' block (0,0,0)"));
  BOOST_TEST(contains(msg, "wait at barrier 0"));
  BOOST_TEST(contains(msg, "wait at barrier 1"));
}

BOOST_AUTO_TEST_CASE(shfl_member_mask_naming_an_exited_lane) {
  const char* body = R"(
.visible .entry k()
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 8;
  @%p1 bra $L__BB0_2;
  shfl.sync.down.b32 %r2|%p2, %r1, 1, 31, -1;
$L__BB0_2:
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{32}, nullptr); });
  BOOST_TEST(contains(msg,
                      "shfl.sync member mask 0xffffffff names lane 8 (thread (8,0,0)), which "
                      "has exited and can never arrive"));
  BOOST_TEST(contains(msg, "thread (0,0,0)"));
}

BOOST_AUTO_TEST_CASE(shfl_member_mask_naming_a_lane_parked_at_a_barrier) {
  const char* body = R"(
.visible .entry k()
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 16;
  @%p1 bra $L__BB0_2;
  shfl.sync.bfly.b32 %r2|%p2, %r1, 1, 31, -1;
  bra.uni $L__BB0_3;
$L__BB0_2:
  bar.sync 0;
$L__BB0_3:
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{32}, nullptr); });
  BOOST_TEST(
      contains(msg, "deadlock in kernel 'k' block (0,0,0): thread (0,0,0) waits at shfl.sync"));
  BOOST_TEST(contains(msg,
                      "with member mask 0xffffffff, but lane 16 (thread (16,0,0)) waits at "
                      "barrier 0"));
  BOOST_TEST(contains(msg, "can never arrive"));
}

BOOST_AUTO_TEST_CASE(vote_member_mask_naming_a_lane_past_the_block) {
  const char* body = R"(
.visible .entry k()
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 8;
  vote.sync.ballot.b32 %r2, %p1, -1;
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{48}, nullptr); });
  BOOST_TEST(contains(msg,
                      "vote.sync member mask 0xffffffff names lane 16, which does not exist "
                      "(the block has 48 threads)"));
}

BOOST_AUTO_TEST_CASE(unsupported_instruction_names_opcode_and_line) {
  const char* body = R"(
.visible .entry k()
{
  .reg .b32 %r<3>;
  mov.u32 %r1, 1;
  frobnicate.b32 %r2, %r1;
  ret;
}
)";
  std::string msg = error_of([&] { b->load_module(ptx_module(body)); });
  BOOST_TEST(contains(msg, "unsupported PTX instruction 'frobnicate.b32' at line 9"));
  const char* modifier = R"(
.visible .entry k()
{
  .reg .b32 %r<3>;
  add.weird.s32 %r2, %r1, 1;
  ret;
}
)";
  msg = error_of([&] { b->load_module(ptx_module(modifier)); });
  BOOST_TEST(contains(msg, "unsupported PTX instruction 'add.weird.s32' at line 8"));
  BOOST_TEST(contains(msg, "'.weird'"));
}

BOOST_AUTO_TEST_CASE(launch_errors_a_real_gpu_gives) {
  const char* body = R"(
.visible .entry k()
.maxntid 128, 1, 1
{
  ret;
}
.visible .entry big()
{
  .shared .align 4 .b8 s[40000];
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  mov.u64 %rd1, s;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.shared.u32 [%rd1], 0;  // a word per thread: no race
  ret;
}
)";
  auto m = b->load_module(ptx_module(body));
  auto k = b->get_function(m, "k");
  auto big = b->get_function(m, "big");
  std::string msg = error_of([&] { b->launch(big, Dim3{1}, Dim3{2048}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "block dimensions exceed the device limit"));
  msg = error_of([&] { b->launch(big, Dim3{1}, Dim3{32, 32, 2}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "2048 threads per block, more than the device's 1024"));
  msg = error_of([&] { b->launch(big, Dim3{1, 70000}, Dim3{32}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "grid dimensions exceed the device limit"));
  msg = error_of([&] { b->launch(big, Dim3{0}, Dim3{32}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "at least 1"));
  msg = error_of([&] { b->launch(k, Dim3{1}, Dim3{256}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "more than the kernel's .maxntid 128,1,1"));
  msg = error_of([&] { b->launch(big, Dim3{1}, Dim3{32}, 200 * 1024, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "(40000 static + 204800 dynamic), more than the 232448 a block may"));
  msg = error_of([&] { b->launch(big, Dim3{1}, Dim3{32}, 100 * 1024, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "kernel 'big'"));
  BOOST_TEST(contains(msg, "without opting in"));
  b->set_max_dynamic_shared(big, 100 * 1024);
  b->launch(big, Dim3{1}, Dim3{32}, 100 * 1024, nullptr, nullptr);  // fits with opt-in
  b->unload_module(m);
  msg = error_of([&] { b->launch(k, Dim3{1}, Dim3{32}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "invalid function handle"));
  DevicePtr p = b->alloc(16);
  b->memset8(p, 0, 16);  // the kernel reads it: initcheck
  int i = 0;
  void* params[] = {&p, &i};
  auto m2 = b->load_module(ptx_module(kLoadIndex));
  msg =
      error_of([&] { b->launch(b->get_function(m2, "k"), Dim3{1}, Dim3{1}, 0, nullptr, nullptr); });
  BOOST_TEST(contains(msg, "it takes 2 parameters but params is null"));
  b->launch(b->get_function(m2, "k"), Dim3{1}, Dim3{1}, 0, nullptr, params);
  msg = error_of([&] { b->get_function(m2, "nope"); });
  BOOST_TEST(contains(msg, "no kernel named 'nope' (kernels: k)"));
  b->unload_module(m2);
  b->free(p);
}

BOOST_AUTO_TEST_CASE(trap_and_device_assert) {
  const char* body = R"(
.visible .entry k()
{
  trap;
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{1}, nullptr); });
  BOOST_TEST(contains(msg, "trap"));
  BOOST_TEST(contains(msg, "thread (0,0,0)"));
}

BOOST_AUTO_TEST_CASE(device_assert_reports_message_file_and_line) {
  // What NVRTC emits for assert(x > 0) in k.cu line 12.
  const char* body = R"(
.extern .func __assertfail
(
  .param .b64 __assertfail_param_0,
  .param .b64 __assertfail_param_1,
  .param .b32 __assertfail_param_2,
  .param .b64 __assertfail_param_3,
  .param .b64 __assertfail_param_4
)
;
.global .align 1 .b8 $str[6] = {120, 32, 62, 32, 48, 0};
.global .align 1 .b8 $str$1[5] = {107, 46, 99, 117, 0};
.global .align 1 .b8 __unnamed_1[2] = {107, 0};
.visible .entry k()
{
  .reg .b64 %rd<7>;
  mov.u64 %rd1, $str;
  cvta.global.u64 %rd2, %rd1;
  mov.u64 %rd3, $str$1;
  cvta.global.u64 %rd4, %rd3;
  mov.u64 %rd5, __unnamed_1;
  cvta.global.u64 %rd6, %rd5;
  { // callseq 0, 0
  .param .b64 param0;
  st.param.b64 [param0+0], %rd2;
  .param .b64 param1;
  st.param.b64 [param1+0], %rd4;
  .param .b32 param2;
  st.param.b32 [param2+0], 12;
  .param .b64 param3;
  st.param.b64 [param3+0], %rd6;
  .param .b64 param4;
  st.param.b64 [param4+0], 1;
  call.uni
  __assertfail,
  (
  param0,
  param1,
  param2,
  param3,
  param4
  );
  } // callseq 0
  ret;
}
)";
  std::string msg = error_of([&] { launch1(*b, ptx_module(body), Dim3{1}, Dim3{1}, nullptr); });
  BOOST_TEST(contains(msg, "device assertion 'x > 0' failed at k.cu:12 in k"));
  BOOST_TEST(contains(msg, "block (0,0,0) thread (0,0,0)"));
}

BOOST_AUTO_TEST_CASE(host_api_misuse) {
  DevicePtr p = b->alloc(64);
  std::vector<char> host(128);
  std::string msg = error_of([&] { b->copy_to_device(p, host.data(), 128); });
  BOOST_TEST(contains(msg, "copy_to_device destination of 128 bytes"));
  BOOST_TEST(contains(msg, "runs 64 bytes past the end"));
  b->free(p);
  msg = error_of([&] { b->free(p); });
  BOOST_TEST(contains(msg, "double free"));
  msg = error_of([&] { b->copy_to_host(host.data(), p, 4); });
  BOOST_TEST(contains(msg, "was freed"));
  auto s = b->create_stream();
  b->destroy_stream(s);
  msg = error_of([&] { b->synchronize_stream(s); });
  BOOST_TEST(contains(msg, "invalid stream"));
  auto e0 = b->create_event(), e1 = b->create_event();
  msg = error_of([&] { b->elapsed_ms(e0, e1); });
  BOOST_TEST(contains(msg, "never recorded"));
  b->record_event(e0, nullptr);
  b->record_event(e1, nullptr);
  b->synchronize_event(e1);
  BOOST_TEST(b->elapsed_ms(e0, e1) >= 0.0f);
  b->destroy_event(e0);
  msg = error_of([&] { b->record_event(e0, nullptr); });
  BOOST_TEST(contains(msg, "invalid event"));
  b->destroy_event(e1);
  msg = error_of([&] {
    b->load_module(
        "\x7f"
        "ELF binary");
  });
  BOOST_TEST(contains(msg, "needs PTX text"));
  BOOST_TEST(b->kind() == "virtual");
  BOOST_TEST(b->properties().name.find("virtual") != std::string::npos);
  BOOST_TEST(b->properties().compute_major == 9);
  BOOST_TEST(b->properties().sm_count == 132);
}

BOOST_AUTO_TEST_SUITE_END()
