// PTX instruction semantics on the virtual GPU, one hand-written instruction at a time, against
// values worked out by hand from the PTX ISA (prmt modes, bfe sign extension, bfi, lop3, shf,
// bfind, carry chains, cvt saturation and rounding, min/max of signed zeros, ...).
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/backends.h"

namespace {

using kiln::cuda::DevicePtr;
using kiln::cuda::Dim3;

// Runs kernel `k(u32* out)` with `threads` threads and returns out[0..n).
std::vector<std::uint32_t> run_ptx(const std::string& body, std::size_t n, unsigned threads = 1) {
  auto b = kiln::cuda::make_virtual_backend();
  std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n" + body;
  DevicePtr out = b->alloc(n * 4);
  b->memset8(out, 0xee, n * 4);
  auto m = b->load_module(ptx);
  void* params[] = {&out};
  b->launch(b->get_function(m, "k"), Dim3{1}, Dim3{threads}, 0, nullptr, params);
  std::vector<std::uint32_t> r(n);
  b->copy_to_host(r.data(), out, n * 4);
  b->unload_module(m);
  b->free(out);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vgpu_ptx_semantics)

BOOST_AUTO_TEST_CASE(byte_and_bit_field_instructions) {
  auto r = run_ptx(R"(
.visible .entry k(.param .u64 k_param_0)
{
  .reg .b32 %r<40>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [k_param_0];
  mov.b32 %r1, 0x83020100;
  mov.b32 %r2, 0x87060504;
  prmt.b32 %r3, %r1, %r2, 0x1F0B;
  st.global.u32 [%rd1], %r3;
  prmt.b32.f4e %r3, %r1, %r2, 1;
  st.global.u32 [%rd1+4], %r3;
  prmt.b32.b4e %r3, %r1, %r2, 1;
  st.global.u32 [%rd1+8], %r3;
  prmt.b32.rc8 %r3, %r1, %r2, 2;
  st.global.u32 [%rd1+12], %r3;
  prmt.b32.ecl %r3, %r1, %r2, 1;
  st.global.u32 [%rd1+16], %r3;
  prmt.b32.ecr %r3, %r1, %r2, 2;
  st.global.u32 [%rd1+20], %r3;
  prmt.b32.rc16 %r3, %r1, %r2, 1;
  st.global.u32 [%rd1+24], %r3;
  bfe.u32 %r3, 0xF0F0F0F0, 4, 8;
  st.global.u32 [%rd1+28], %r3;
  bfe.s32 %r3, 0xF0F0F0F0, 4, 4;
  st.global.u32 [%rd1+32], %r3;
  bfe.s32 %r3, 0xF0, 0, 0;
  st.global.u32 [%rd1+36], %r3;
  bfe.s32 %r3, 0x80000000, 28, 8;
  st.global.u32 [%rd1+40], %r3;
  bfi.b32 %r3, 0xABCD, 0xFFFF0000, 8, 8;
  st.global.u32 [%rd1+44], %r3;
  lop3.b32 %r3, 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA, 0x96;
  st.global.u32 [%rd1+48], %r3;
  lop3.b32 %r3, 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA, 0xE8;
  st.global.u32 [%rd1+52], %r3;
  shf.l.wrap.b32 %r3, 0x12345678, 0x9ABCDEF0, 36;
  st.global.u32 [%rd1+56], %r3;
  shf.r.clamp.b32 %r3, 0x12345678, 0x9ABCDEF0, 40;
  st.global.u32 [%rd1+60], %r3;
  bfind.u32 %r3, 0x00010000;
  st.global.u32 [%rd1+64], %r3;
  bfind.shiftamt.u32 %r3, 0x00010000;
  st.global.u32 [%rd1+68], %r3;
  bfind.s32 %r3, 0xFFFF0000;
  st.global.u32 [%rd1+72], %r3;
  bfind.u32 %r3, 0;
  st.global.u32 [%rd1+76], %r3;
  ret;
}
)",
                   20);
  std::vector<std::uint32_t> want = {0x01FF00FF, 0x04830201, 0x06870001, 0x02020202, 0x83020101,
                                     0x02020100, 0x83028302, 0x0F,       0xFFFFFFFF, 0,
                                     0xFFFFFFF8, 0xFFFFCD00, 0x96969696, 0xE8E8E8E8, 0xABCDEF01,
                                     0x9ABCDEF0, 16,         15,         15,         0xFFFFFFFF};
  for (std::size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(r[i] == want[i], "result " << i << ": " << std::hex << r[i] << " != " << want[i]);
}

BOOST_AUTO_TEST_CASE(arithmetic_edge_cases_carries_and_conversions) {
  auto r = run_ptx(R"(
.visible .entry k(.param .u64 k_param_0)
{
  .reg .pred %p<4>;
  .reg .f32 %f<8>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [k_param_0];
  mov.f32 %f1, 0f7FC00000;
  testp.notanumber.f32 %p1, %f1;
  selp.u32 %r1, 1, 0, %p1;
  st.global.u32 [%rd1], %r1;
  cvt.sat.f32.f32 %f2, 0f3FC00000;
  st.global.f32 [%rd1+4], %f2;
  cvt.rni.f32.f32 %f2, 0f40200000;
  st.global.f32 [%rd1+8], %f2;
  cvt.rmi.f32.f32 %f2, 0fBF000000;
  st.global.f32 [%rd1+12], %f2;
  set.lt.u32.f32 %r1, 0f3F800000, 0f40000000;
  st.global.u32 [%rd1+16], %r1;
  slct.u32.s32 %r1, 7, 9, -1;
  st.global.u32 [%rd1+20], %r1;
  add.cc.u32 %r1, 0xFFFFFFFF, 1;
  addc.u32 %r2, 5, 6;
  st.global.u32 [%rd1+24], %r1;
  st.global.u32 [%rd1+28], %r2;
  sub.cc.u32 %r1, 0, 1;
  subc.u32 %r2, 10, 3;
  st.global.u32 [%rd1+32], %r1;
  st.global.u32 [%rd1+36], %r2;
  min.f32 %f3, 0f80000000, 0f00000000;
  st.global.f32 [%rd1+40], %f3;
  max.f32 %f3, %f1, 0f40400000;
  st.global.f32 [%rd1+44], %f3;
  copysign.f32 %f3, 0fBF800000, 0f40000000;
  st.global.f32 [%rd1+48], %f3;
  rem.s32 %r1, -7, 3;
  st.global.u32 [%rd1+52], %r1;
  div.s32 %r1, -7, 2;
  st.global.u32 [%rd1+56], %r1;
  mov.u32 %r3, 0;
  div.u32 %r1, 5, %r3;
  st.global.u32 [%rd1+60], %r1;
  shr.s32 %r1, -16, 40;
  st.global.u32 [%rd1+64], %r1;
  shl.b32 %r1, 1, 33;
  st.global.u32 [%rd1+68], %r1;
  cvt.rzi.s32.f32 %r1, 0f4F32D05E;
  st.global.u32 [%rd1+72], %r1;
  cvt.rni.u8.f32 %r1, 0f43960000;
  st.global.u32 [%rd1+76], %r1;
  cvt.s8.s32 %r1, 0x1FF;
  st.global.u32 [%rd1+80], %r1;
  setp.lt.and.s32 %p2|%p3, 1, 2, !%p1;
  selp.u32 %r1, 1, 0, %p2;
  selp.u32 %r2, 2, 0, %p3;
  add.u32 %r1, %r1, %r2;
  st.global.u32 [%rd1+84], %r1;
  ret;
}
)",
                   22);
  std::vector<std::uint32_t> want = {1,          0x3F800000, 0x40000000, 0xBF800000, 0xFFFFFFFF,
                                     9,          0,          12,         0xFFFFFFFF, 6,
                                     0x80000000, 0x40400000, 0xC0000000, 0xFFFFFFFF, 0xFFFFFFFD,
                                     0xFFFFFFFF, 0xFFFFFFFF, 0,          0x7FFFFFFF, 255,
                                     0xFFFFFFFF, 0};
  for (std::size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(r[i] == want[i], "result " << i << ": " << std::hex << r[i] << " != " << want[i]);
}

BOOST_AUTO_TEST_CASE(vectors_local_memory_and_calls_in_a_loop) {
  auto r = run_ptx(R"(
.func (.param .b32 f_retval0) f(.param .b32 f_param_0, .param .b32 f_param_1)
{
  .reg .b32 %r<4>;
  ld.param.u32 %r1, [f_param_0];
  ld.param.u32 %r2, [f_param_1];
  mad.lo.s32 %r3, %r1, 3, %r2;
  st.param.b32 [f_retval0+0], %r3;
  ret;
}
.visible .entry k(.param .u64 k_param_0)
{
  .local .align 16 .b8 __local_depot0[16];
  .reg .b64 %SPL;
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<2>;
  mov.u64 %SPL, __local_depot0;
  ld.param.u64 %rd1, [k_param_0];
  st.local.v4.u32 [%SPL], {1, 2, 3, 4};
  ld.local.v2.u32 {%r1, %r2}, [%SPL+8];
  st.global.v2.u32 [%rd1], {%r1, %r2};
  mov.b64 %rd1, %rd1;
  mov.u32 %r5, 0;
  mov.u32 %r6, 0;
$L_loop:
  {
  .param .b32 param0;
  st.param.b32 [param0+0], %r5;
  .param .b32 param1;
  st.param.b32 [param1+0], %r6;
  .param .b32 retval0;
  call.uni (retval0), f, (param0, param1);
  ld.param.b32 %r6, [retval0+0];
  }
  and.b32 %r6, %r6, 0xFFFF;
  add.s32 %r5, %r5, 1;
  setp.lt.s32 %p1, %r5, 5000;
  @%p1 bra $L_loop;
  st.global.u32 [%rd1+8], %r6;
  mov.b64 %rd0, {%r1, %r2};
  mov.b64 {%r7, %r8}, %rd0;
  mad.lo.u32 %r9, %r8, 10, %r7;
  st.global.u32 [%rd1+0], %r9;
  ret;
}
)",
                   3);
  BOOST_TEST(r[0] == 43u);  // {3, 4} packed into a b64 and unpacked again
  BOOST_TEST(r[1] == 4u);
  std::uint32_t acc = 0;
  for (std::uint32_t i = 0; i < 5000; ++i) acc = (i * 3 + acc) & 0xFFFF;
  BOOST_TEST(r[2] == acc);
}

BOOST_AUTO_TEST_CASE(named_barriers_with_counts_arrive_and_clock_spin) {
  // Warps 0-1 produce into shared memory and bar.arrive; warps 2-3 bar.sync on the same barrier
  // with a count of 128 and consume. Then every consumer spins on %clock64 for a while.
  auto r = run_ptx(R"(
.visible .entry k(.param .u64 k_param_0)
{
  .shared .align 4 .b8 s[256];
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r1, %tid.x;
  mov.u64 %rd2, s;
  setp.ge.u32 %p1, %r1, 64;
  @%p1 bra $L_consume;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  shl.b32 %r2, %r1, 1;
  st.shared.u32 [%rd4], %r2;
  bar.arrive 1, 128;
  ret;
$L_consume:
  bar.sync 1, 128;
  sub.s32 %r3, %r1, 64;
  mul.wide.u32 %rd3, %r3, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.shared.u32 %r4, [%rd4];
  add.s32 %r4, %r4, 1;
  mov.u64 %rd5, %clock64;
$L_spin:
  mov.u64 %rd6, %clock64;
  sub.s64 %rd7, %rd6, %rd5;
  setp.lt.u64 %p2, %rd7, 5000;
  @%p2 bra $L_spin;
  add.s64 %rd3, %rd1, %rd3;
  st.global.u32 [%rd3], %r4;
  ret;
}
)",
                   64, 128);
  for (std::uint32_t i = 0; i < 64; ++i) BOOST_TEST(r[i] == 2 * i + 1, "thread " << i);
}

BOOST_AUTO_TEST_SUITE_END()
