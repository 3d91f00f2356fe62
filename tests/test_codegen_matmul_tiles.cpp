// The generated tensor-core GEMM's block tiles per architecture (jit/codegen/matmul_tiles.h): the
// rule's choices on sm_80, sm_90 and a device of 48 KiB per block, hand-derived from the CUDA
// Programming Guide's limits; every tile shape and stage count computing ragged products (M, N, K
// not multiples of the tile) within rounding of a double reference on the virtual GPU set to 8.0
// and 9.0; the opt-in past 48 KiB of dynamic shared memory; and a 48 KiB device launching what it
// gets.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen/lt_matmul.h"
#include "jit/codegen/matmul.h"
#include "jit/codegen/matmul_tiles.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/random.h"
#include "support/scope_exit.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;
using codegen::MatmulDevice;
using codegen::MatmulStaging;
using codegen::MatmulTile;

namespace {

constexpr std::size_t KiB = 1024;
// The Programming Guide's per-block opt-in maxima (technical specifications table) and the SM
// counts of an A100 (108) and an H100 SXM (132).
const MatmulDevice kSm80{8, 0, 108, 163 * KiB};
const MatmulDevice kSm90{9, 0, 132, 227 * KiB};
const MatmulDevice k48KiB{9, 0, 132, 48 * KiB};
const MatmulStaging kBf16{2, true, false};  // row-major a and b: a [m][k], b [k][n]

// The virtual GPU set to `major.minor` (its opt-in maximum follows) with `sms` SMs, put back to
// sm_90 and 132 SMs when the scope ends.
struct Arch {
  Arch(int major, int minor, int sms) {
    vgpu::set_compute_capability(cuda::backend(), major, minor);
    vgpu::set_sm_count(cuda::backend(), sms);
  }
  ~Arch() {
    vgpu::set_compute_capability(cuda::backend(), 9, 0);
    vgpu::set_sm_count(cuda::backend(), 132);
  }
};

Tensor operand(long rows, long cols, DType dtype, bool transposed) {
  if (transposed) return randn({cols, rows}).to(dtype).to(Device::cuda()).t();
  return randn({rows, cols}).to(dtype).to(Device::cuda());
}

// ||a @ b - reference|| / ||reference||, the reference summed in double on the host.
double error_of_product(const Tensor& got, const Tensor& a, const Tensor& b) {
  long m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  auto av = a.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  auto bv = b.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  auto gv = got.to(Device::cpu()).to(DType::f64).to_vector<double>();
  double diff = 0, norm = 0;
  for (long i = 0; i < m; ++i)
    for (long j = 0; j < n; ++j) {
      double want = 0;
      for (long c = 0; c < k; ++c) want += av[i * k + c] * bv[c * n + j];
      diff += (gv[i * n + j] - want) * (gv[i * n + j] - want);
      norm += want * want;
    }
  return std::sqrt(diff / norm);
}

// a @ b on `variant` with its tile replaced by `tile`.
Tensor on_tile(const Tensor& a, const Tensor& b, DType out, const MatmulTile& tile) {
  auto kernel = codegen::render_matmul(a.dtype(), b.dtype(), out, 0);
  codegen::MatmulVariant v = codegen::matmul_variant(a, b, out);
  v.tile = tile;
  return codegen::run_matmul(kernel, a, b, TensorMeta{Shape{a.shape()[0], b.shape()[1]}, out}, v);
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(matmul_tiles)

BOOST_AUTO_TEST_CASE(shared_bytes_of_each_staging) {
  // bf16, a [m][k] rows of 32 + 8, b [k][n] rows of n + 8: 64 x 64 is 64 * 40 + 32 * 72 elements.
  MatmulTile small = codegen::matmul_tile_shape(0, 2);
  BOOST_TEST(codegen::matmul_stage_bytes(small, kBf16) == (64u * 40 + 32 * 72) * 2);
  // TF32, a [k][m], b [n][k] (rows of 32 + 4 floats): 128 x 256 is 32 * 136 + 256 * 36.
  MatmulTile big = codegen::matmul_tile_shape(2, 4);
  BOOST_TEST(codegen::matmul_stage_bytes(big, MatmulStaging{4, false, true}) ==
             (32u * 136 + 256 * 36) * 4);
  BOOST_TEST(codegen::matmul_shared_bytes(big, kBf16) == 4u * (128 * 40 + 32 * 264) * 2);
}

BOOST_AUTO_TEST_CASE(large_products_take_larger_tiles_and_more_stages_on_sm_90) {
  // GPT-2 small's MLP up-projection, [4 x 1024, 768] @ [768, 3072]: 32 x 12 blocks of 128 x 256
  // fill 132 SMs. sm_90: (228 KiB a SM) / 2 - 1 KiB reserved = 113 KiB a block, 27136 bytes a
  // stage -> 4 stages; sm_80: 164 / 2 - 1 = 81 KiB -> 3 stages.
  MatmulTile on90 = codegen::choose_matmul_tile(4096, 3072, 1, kBf16, kSm90);
  MatmulTile on80 = codegen::choose_matmul_tile(4096, 3072, 1, kBf16, kSm80);
  BOOST_TEST(codegen::tile_text(on90) == "128x256x32 s4");
  BOOST_TEST(codegen::tile_text(on80) == "128x256x32 s3");
  BOOST_TEST(codegen::matmul_shared_bytes(on90, kBf16) > 48 * KiB);  // needs the opt-in
  // TF32 stages are twice as large: 128 x 256 fits 2 stages only, so 128 x 128 with 3 on sm_90
  // (35840 bytes a stage) and 64 x 64 with 4 on sm_80 (128 x 128 fits 2 there).
  MatmulStaging tf32{4, true, false};
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(4096, 3072, 1, tf32, kSm90)) ==
             "128x128x32 s3");
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(4096, 3072, 1, tf32, kSm80)) ==
             "64x64x32 s4");
}

BOOST_AUTO_TEST_CASE(small_products_keep_small_tiles_to_fill_the_sms) {
  // 1024 x 1024: 32 blocks of 128 x 256 and 64 of 128 x 128, fewer than 108 or 132 SMs; 256 of
  // 64 x 64.
  for (const MatmulDevice& d : {kSm80, kSm90})
    BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(1024, 1024, 1, kBf16, d)) ==
               "64x64x32 s4");
  // 2048 x 1024: 128 blocks of 128 x 128 fill sm_80's 108 SMs but not sm_90's 132.
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(2048, 1024, 1, kBf16, kSm80)) ==
             "128x128x32 s4");
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(2048, 1024, 1, kBf16, kSm90)) ==
             "64x64x32 s4");
  // A batch counts: 12 heads of 256 x 512 are 12 x 2 x 2 = 48 blocks of 128 x 256, 96 of
  // 128 x 128, 384 of 64 x 64.
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(256, 512, 12, kBf16, kSm80)) ==
             "64x64x32 s4");
  BOOST_TEST(codegen::tile_text(codegen::choose_matmul_tile(256, 512, 48, kBf16, kSm90)) ==
             "128x256x32 s4");
}

BOOST_AUTO_TEST_CASE(a_48_kib_device_gets_tiles_it_can_launch) {
  // Every shape, staging and size: within 48 KiB, so no opt-in is needed.
  for (int elem : {2, 4})
    for (bool ak : {false, true})
      for (bool bk : {false, true})
        for (long long mn : {1ll, 100ll, 1000ll, 8192ll, 65536ll}) {
          MatmulStaging st{elem, ak, bk};
          MatmulTile t = codegen::choose_matmul_tile(mn, mn, 4, st, k48KiB);
          BOOST_TEST(codegen::matmul_shared_bytes(t, st) <= 48 * KiB, codegen::tile_text(t)
                                                                          << " elem " << elem);
          BOOST_TEST(t.stages >= 2);
        }
  // And the launch: a large product on a virtual GPU that allows no more than 48 KiB a block.
  vgpu::set_shared_memory_optin(cuda::backend(), 48 * KiB);
  test::ScopeExit restore([] { vgpu::set_compute_capability(cuda::backend(), 9, 0); });
  manual_seed(11);
  Tensor a = operand(300, 96, DType::bf16, false), b = operand(96, 270, DType::bf16, false);
  codegen::MatmulVariant v = codegen::matmul_variant(a, b, DType::bf16);
  BOOST_TEST(codegen::tile_text(v.tile) == "64x64x32 s2");
  auto kernel = codegen::render_matmul(DType::bf16, DType::bf16, DType::bf16, 0);
  Tensor got = codegen::run_matmul(kernel, a, b, TensorMeta{Shape{300, 270}, DType::bf16});
  BOOST_TEST(error_of_product(got, a, b) <= 8e-3);
  // A tile past the device's limit is an error naming the tile and the bytes, not a launch.
  std::string msg =
      error_text([&] { on_tile(a, b, DType::bf16, codegen::matmul_tile_shape(2, 4)); });
  BOOST_TEST(msg.find("tile 128x256x32 s4 needs 108544 bytes") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(the_variant_follows_the_device) {
  // No launch: the variant a 4096 x 768 @ 768 x 3072 call would take, and its kernel's name.
  manual_seed(12);
  Tensor a = operand(4096, 768, DType::bf16, false), b = operand(768, 3072, DType::bf16, false);
  auto kernel = codegen::render_matmul(DType::bf16, DType::bf16, DType::bf16, 0);
  std::string on90 = kernel.kernel(codegen::matmul_variant(a, b, DType::bf16)).name();
  std::string on80;
  {
    Arch sm80(8, 0, 108);
    on80 = kernel.kernel(codegen::matmul_variant(a, b, DType::bf16)).name();
  }
  BOOST_TEST(on90.find("_t128x256s4") != std::string::npos, on90);
  BOOST_TEST(on80.find("_t128x256s3") != std::string::npos, on80);
}

// Each tile shape with each stage count, on sm_80 and sm_90, against the double product: sizes
// that cut every tile (M, N not multiples of 64, 128 or 256; K not of 32), every layout of the
// operands, cp.async and element loads.
BOOST_AUTO_TEST_CASE(every_tile_computes_ragged_products_on_8_0_and_9_0) {
  manual_seed(13);
  for (auto [major, sms] : {std::pair{8, 108}, std::pair{9, 132}}) {
    Arch arch(major, 0, sms);
    for (int shape = 0; shape < codegen::kMatmulShapeCount; ++shape)
      for (int stages = codegen::kMatmulMinStages; stages <= codegen::kMatmulMaxStages; ++stages) {
        MatmulTile tile = codegen::matmul_tile_shape(shape, stages);
        // Transposes on alternate configurations: every layout meets every shape. With an even
        // stage count K and N are multiples of 8 (rows 16-byte aligned: cp.async), else not.
        bool at = stages % 2 == 1, bt = shape % 2 == 1, aligned = stages % 2 == 0;
        long m = tile.bm() + 7, n = tile.bn() + (aligned ? 24 : 9),
             k = 32 * stages + (aligned ? 8 : 13);
        Tensor a = operand(m, k, DType::bf16, at), b = operand(k, n, DType::bf16, bt);
        std::string label =
            fmt::format("sm_{}0 {} {}x{}x{} a{} b{}", major, codegen::tile_text(tile), m, n, k,
                        at ? "^T" : "", bt ? "^T" : "");
        BOOST_TEST(codegen::matmul_variant(a, b, DType::bf16).vector_loads == aligned, label);
        double e = error_of_product(on_tile(a, b, DType::bf16, tile), a, b);
        BOOST_TEST(e <= 8e-3, label << ": relative-to-norm error " << e);
      }
    // f16 -> f32 and TF32 on the largest tile that fits.
    Tensor a = operand(131, 77, DType::f16, false), b = operand(77, 259, DType::f16, false);
    double e = error_of_product(on_tile(a, b, DType::f32, codegen::matmul_tile_shape(2, 3)), a, b);
    BOOST_TEST(e <= 1e-5, "f16 -> f32 on 128x256 s3: " << e);
    codegen::set_allow_tf32(true);
    test::ScopeExit tf32_off([] { codegen::set_allow_tf32(false); });
    Tensor x = operand(133, 70, DType::f32, false), y = operand(70, 140, DType::f32, true);
    e = error_of_product(on_tile(x, y, DType::f32, codegen::matmul_tile_shape(1, 3)), x, y);
    BOOST_TEST(e <= 2e-3, "TF32 on 128x128 s3: " << e);
  }
}

BOOST_AUTO_TEST_CASE(a_tile_past_48_kib_opts_in_and_runs) {
  // sm_90's large tile takes 108.5 KiB of dynamic shared memory: the launch is refused unless
  // the function opted in (cuFuncSetAttribute), which run_matmul's launch does.
  manual_seed(14);
  MatmulTile big = codegen::matmul_tile_shape(2, 4);
  BOOST_REQUIRE(codegen::matmul_shared_bytes(big, kBf16) > 48 * KiB);
  Tensor a = operand(200, 100, DType::bf16, false), b = operand(100, 300, DType::bf16, false);
  double e = error_of_product(on_tile(a, b, DType::bf16, big), a, b);
  BOOST_TEST(e <= 8e-3);
}

BOOST_AUTO_TEST_SUITE_END()
