// Rendering and launching the generated GEMM (see matmul.h).
#include "jit/codegen/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_variants.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/codegen/templates.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

constexpr long long kFmaTile = 16;  // templates/matmul.cu: TILE x TILE threads, one output each
constexpr long long kGridLimitYZ = 65535;

bool is_16bit_float(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

// Whether the operand dtypes and the output take each kind of tensor-core kernel.
bool takes_tensor_cores(DType a, DType b, DType out) {
  return a == b && is_16bit_float(a) && (is_16bit_float(out) || out == DType::f32);
}
bool takes_tf32(DType a, DType b, DType out) {
  return a == DType::f32 && b == DType::f32 && out == DType::f32;
}

std::string kernel_name(DType a, DType b, DType out, const MatmulVariant& v) {
  if (!v.mma())
    return fmt::format("k_matmul_{}_{}_{}", dtype_name(a), dtype_name(b), dtype_name(out));
  return fmt::format("k_matmul_{}_{}_{}_a{}_b{}{}_t{}x{}s{}", v.tf32 ? "tf32" : "mma",
                     dtype_name(a), dtype_name(out), v.a_k_contiguous ? "mk" : "km",
                     v.b_k_contiguous ? "nk" : "kn", v.vector_loads ? "_vec" : "", v.tile.bm(),
                     v.tile.bn(), v.tile.stages);
}

std::string render_fma(DType a, DType b, DType out, int batch_rank, const std::string& name) {
  DType acc = out == DType::f64 ? DType::f64 : is_integral(out) ? DType::i64 : DType::f32;
  kainjow::mustache::data d;
  d.set("name", name);
  d.set("description", fmt::format("{} @ {} -> {}", dtype_name(a), dtype_name(b), dtype_name(out)));
  d.set("fp16", a == DType::f16 || b == DType::f16 || out == DType::f16);
  d.set("bf16", a == DType::bf16 || b == DType::bf16 || out == DType::bf16);
  d.set("batch_rank", std::to_string(std::max(1, batch_rank)));
  d.set("acc", register_type(acc));
  d.set("a_type", storage_type(a));
  d.set("b_type", storage_type(b));
  d.set("out_type", storage_type(out));
  d.set("a_load", load_expr(a, "a[a_base + row * ix.a_row_stride + ak * ix.a_col_stride]"));
  d.set("b_load", load_expr(b, "b[b_base + bk * ix.b_row_stride + col * ix.b_col_stride]"));
  d.set("store", store_expr(out, convert_expr(acc, out, "sum")));
  return render_template("matmul.cu.mustache", d);
}

std::string render_mma(DType a, DType out, int batch_rank, const MatmulVariant& v,
                       const std::string& name) {
  kainjow::mustache::data d;
  d.set("name", name);
  d.set("description", fmt::format("{} @ {} -> {}", dtype_name(a), dtype_name(a), dtype_name(out)));
  d.set("fp16", a == DType::f16 || out == DType::f16);
  d.set("bf16", a == DType::bf16 || out == DType::bf16);
  d.set("batch_rank", std::to_string(std::max(1, batch_rank)));
  d.set("elem", storage_type(a));
  d.set("out_type", storage_type(out));
  d.set("store", store_expr(out, "acc[i][j][e]"));
  d.set("tensor_cores", v.tensor_cores);
  d.set("tf32", v.tf32);
  d.set("mma_type", a == DType::f16 ? "f16" : "bf16");
  d.set("mma_f16", a == DType::f16);
  d.set("pad_k", v.tf32 ? "4" : "8");  // 16 bytes, and conflict-free fragment reads
  d.set("a_k_contiguous", v.a_k_contiguous);
  d.set("b_k_contiguous", v.b_k_contiguous);
  d.set("vector_loads", v.vector_loads);
  d.set("warps_m", std::to_string(v.tile.warps_m));
  d.set("warps_n", std::to_string(v.tile.warps_n));
  d.set("mi", std::to_string(v.tile.mi));
  d.set("nj", std::to_string(v.tile.nj));
  d.set("stages", std::to_string(v.tile.stages));
  d.set("mma_helpers", std::string(template_text("mma_helpers.cu.mustache")));
  return render_template("matmul_mma.cu.mustache", d);
}

// Index of a tensor-core variant: its tile's slot, then the eight layouts.
constexpr int kLayouts = 8;
int mma_slot(const MatmulVariant& v) {
  return matmul_tile_slot(v.tile) * kLayouts + (v.a_k_contiguous ? 4 : 0) +
         (v.b_k_contiguous ? 2 : 0) + (v.vector_loads ? 1 : 0);
}

MatmulStaging staging_of(const MatmulVariant& v) {
  return MatmulStaging{v.tf32 ? 4 : 2, v.a_k_contiguous, v.b_k_contiguous};
}

// The problem as the kernels read it (their `_index` struct): batch sizes, each operand's batch
// strides (0 where it broadcasts, right-aligned), then the row and column strides of a and b, and
// m, n, k.
struct GemmIndex {
  std::vector<long long> batch_size, a_batch, b_batch;
  long long a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, m = 0, n = 0, k = 0;
  long long batches = 1;

  std::vector<long long> packed() const {
    std::vector<long long> p = batch_size;
    p.insert(p.end(), a_batch.begin(), a_batch.end());
    p.insert(p.end(), b_batch.begin(), b_batch.end());
    p.insert(p.end(), {a_rs, a_cs, b_rs, b_cs, m, n, k});
    return p;
  }
};

GemmIndex problem_of(const Tensor& a, const Tensor& b) {
  GemmIndex p;
  int rank = static_cast<int>(std::max(a.dim(), b.dim()));
  int batch_rank = std::max(1, rank - 2);
  for (int d = 0; d < batch_rank; ++d) {
    long long size = 1;
    for (const Tensor* t : {&a, &b}) {
      int td = static_cast<int>(t->dim()) - 2 - (batch_rank - d);
      if (rank > 2 && td >= 0 && t->shape()[td] != 1) size = t->shape()[td];
    }
    p.batch_size.push_back(size);
    p.batches *= size;
  }
  for (const Tensor* t : {&a, &b}) {
    auto& strides = t == &a ? p.a_batch : p.b_batch;
    int trank = static_cast<int>(t->dim());
    for (int d = 0; d < batch_rank; ++d) {
      int td = trank - 2 - (batch_rank - d);
      bool reaches = rank > 2 && td >= 0 && t->shape()[td] != 1;
      strides.push_back(reaches ? t->strides()[td] : 0);
    }
  }
  auto last = [](const Tensor& t, int back) -> long long { return t.strides()[t.dim() - back]; };
  p.a_rs = last(a, 2), p.a_cs = last(a, 1), p.b_rs = last(b, 2), p.b_cs = last(b, 1);
  p.m = a.shape()[a.dim() - 2], p.k = a.shape().back(), p.n = b.shape().back();
  return p;
}

// A stride the kernel steps along contiguously: 1, or that of a dim with one element at most.
bool unit(long long stride, long long size) {
  return size <= 1 || stride == 1;
}

// Whether every 16-byte chunk of both operands' tiles is a 16-byte aligned, contiguous copy.
bool vector_loads_fit(const Tensor& a, const Tensor& b, const GemmIndex& p,
                      const MatmulVariant& v) {
  long long chunk = 16 / static_cast<long long>(itemsize(a.dtype()));
  auto whole = [&](long long stride, long long size) { return size <= 1 || stride % chunk == 0; };
  bool a_fits = v.a_k_contiguous ? unit(p.a_cs, p.k) && whole(p.a_rs, p.m)
                                 : unit(p.a_rs, p.m) && whole(p.a_cs, p.k);
  bool b_fits = v.b_k_contiguous ? unit(p.b_rs, p.k) && whole(p.b_cs, p.n)
                                 : unit(p.b_cs, p.n) && whole(p.b_rs, p.k);
  for (long long s : p.a_batch) a_fits = a_fits && s % chunk == 0;
  for (long long s : p.b_batch) b_fits = b_fits && s % chunk == 0;
  auto aligned = [](const Tensor& t) {
    return reinterpret_cast<std::uintptr_t>(t.raw_data()) % 16 == 0;
  };
  return a_fits && b_fits && aligned(a) && aligned(b);
}

MatmulVariant variant_for(const Tensor& a, const Tensor& b, DType out, const GemmIndex& p) {
  MatmulVariant v;
  v.tensor_cores = takes_tensor_cores(a.dtype(), b.dtype(), out);
  v.tf32 = takes_tf32(a.dtype(), b.dtype(), out) && allow_tf32();
  if (!v.mma()) return v;
  // Stage each operand the way its smaller stride runs, so that neighbouring threads load
  // neighbouring elements.
  v.a_k_contiguous =
      unit(p.a_cs, p.k) || (!unit(p.a_rs, p.m) && std::llabs(p.a_cs) <= std::llabs(p.a_rs));
  v.b_k_contiguous =
      !unit(p.b_cs, p.n) && (unit(p.b_rs, p.k) || std::llabs(p.b_rs) < std::llabs(p.b_cs));
  v.vector_loads = vector_loads_fit(a, b, p, v);
  v.tile = choose_matmul_tile(p.m, p.n, p.batches, staging_of(v),
                              MatmulDevice::of(cuda::backend().properties()));
  return v;
}

// A variant as KILN_LOG=kernels names it, and why a call takes it.
std::string describe(const MatmulVariant& v) {
  if (!v.mma()) return fmt::format("FMA tiles of {} x {}", kFmaTile, kFmaTile);
  return fmt::format(
      "{} tiles of {} ({} threads, {} bytes of shared memory), a staged {}, b "
      "staged {}, {}",
      v.tf32 ? "TF32 tensor-core (mma.m16n8k8)" : "tensor-core (mma.m16n8k16)", tile_text(v.tile),
      v.tile.threads(), matmul_shared_bytes(v.tile, staging_of(v)),
      v.a_k_contiguous ? "[m][k]" : "[k][m]", v.b_k_contiguous ? "[n][k]" : "[k][n]",
      v.vector_loads ? "16-byte cp.async loads" : "scalar loads");
}

std::string why(const MatmulVariant& v, const Tensor& a, const Tensor& b) {
  if (!v.mma())
    return takes_tf32(a.dtype(), b.dtype(), DType::f32)
               ? "f32 without KILN_MATMUL_TF32=1"
               : fmt::format("no tensor-core type for {} @ {}", dtype_name(a.dtype()),
                             dtype_name(b.dtype()));
  const auto& props = cuda::backend().properties();
  return fmt::format(
      "{}; the tile for sm_{}{} with {} SMs ({} bytes of shared memory per block "
      "at most)",
      v.vector_loads ? "operand rows contiguous and 16-byte aligned"
                     : "an operand's rows are strided or not 16-byte aligned",
      props.compute_major, props.compute_minor, props.sm_count, props.shared_mem_per_block_optin);
}

std::string shapes_of(const Tensor& a, const Tensor& b) {
  return fmt::format("{} {} @ {} {}", shape_str(a.shape()), dtype_name(a.dtype()),
                     shape_str(b.shape()), dtype_name(b.dtype()));
}

}  // namespace

struct MatmulKernel::Kernels {
  DType a, b, out;
  int batch_rank;
  KernelHandle fma;
  std::atomic<bool> fma_launched{false};
  KernelVariants mma;  // by mma_slot, rendered when a launch first takes one
};

MatmulKernel::MatmulKernel(DType a, DType b, DType out, int batch_rank)
    : kernels_(std::make_shared<Kernels>()) {
  kernels_->a = a, kernels_->b = b, kernels_->out = out, kernels_->batch_rank = batch_rank;
  std::string name = kernel_name(a, b, out, {});
  kernels_->fma = KernelHandle(name, render_fma(a, b, out, batch_rank, name));
  kernels_->mma = KernelVariants(name, kLayouts * kMatmulTileSlots);
}

DType MatmulKernel::a_dtype() const {
  return kernels_->a;
}
DType MatmulKernel::b_dtype() const {
  return kernels_->b;
}
DType MatmulKernel::out_dtype() const {
  return kernels_->out;
}

bool MatmulKernel::first_launch(const MatmulVariant& v) const {
  if (!v.mma()) return !kernels_->fma_launched.exchange(true);
  return kernels_->mma.first_launch(mma_slot(v));
}

const KernelHandle& MatmulKernel::kernel(const MatmulVariant& v) const {
  Kernels& k = *kernels_;
  if (!v.mma()) return k.fma;
  KILN_CHECK(!(v.tensor_cores && v.tf32) && (v.tensor_cores ? takes_tensor_cores(k.a, k.b, k.out)
                                                            : takes_tf32(k.a, k.b, k.out)),
             "matmul: no {} kernel for {} @ {} -> {}", v.tf32 ? "TF32" : "tensor-core",
             dtype_name(k.a), dtype_name(k.b), dtype_name(k.out));
  KILN_CHECK(matmul_tile_slot(v.tile) >= 0,
             "matmul: no tensor-core kernel with tile {} ({} x {} warps of {} x {} mma tiles)",
             tile_text(v.tile), v.tile.warps_m, v.tile.warps_n, v.tile.mi, v.tile.nj);
  return k.mma.get(mma_slot(v), [&] {
    std::string name = kernel_name(k.a, k.b, k.out, v);
    return KernelHandle(name, render_mma(k.a, k.out, k.batch_rank, v, name));
  });
}

MatmulKernel render_matmul(DType a, DType b, DType out, int batch_rank) {
  return MatmulKernel(a, b, out, batch_rank);
}

MatmulVariant matmul_variant(const Tensor& a, const Tensor& b, DType out) {
  return variant_for(a, b, out, problem_of(a, b));
}

Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out_meta) {
  return run_matmul(kernel, a, b, out_meta, matmul_variant(a, b, out_meta.dtype));
}

Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out_meta, const MatmulVariant& variant) {
  GemmIndex p = problem_of(a, b);
  KILN_CHECK(a.dtype() == kernel.a_dtype() && b.dtype() == kernel.b_dtype() &&
                 out_meta.dtype == kernel.out_dtype(),
             "matmul: operands {} -> {} given to the kernels of {} @ {} -> {}", shapes_of(a, b),
             dtype_name(out_meta.dtype), dtype_name(kernel.a_dtype()), dtype_name(kernel.b_dtype()),
             dtype_name(kernel.out_dtype()));
  KILN_CHECK(!variant.vector_loads || (variant.mma() && vector_loads_fit(a, b, p, variant)),
             "matmul: operands {} (strides {} / {}) do not take 16-byte vector loads",
             shapes_of(a, b), fmt::join(a.strides(), ","), fmt::join(b.strides(), ","));
  const KernelHandle& handle = kernel.kernel(variant);
  if (log_enabled(LogTopic::kernels) && kernel.first_launch(variant))
    log_line(fmt::format("kiln: kernel {}: schedule {} for {}: {}", handle.name(),
                         describe(variant), shapes_of(a, b), why(variant, a, b)));
  // An empty sum (k == 0) is zeros; otherwise the kernel writes every element.
  Tensor out = p.k == 0 ? zeros(out_meta.shape, out_meta.dtype, Device::cuda())
                        : empty(out_meta.shape, out_meta.dtype, Device::cuda());
  if (out.numel() == 0 || p.k == 0) return out;
  long long tile_m = variant.mma() ? variant.tile.bm() : kFmaTile;
  long long tile_n = variant.mma() ? variant.tile.bn() : kFmaTile;
  long long grid_x = (p.n + tile_n - 1) / tile_n, grid_y = (p.m + tile_m - 1) / tile_m;
  KILN_CHECK(grid_y <= kGridLimitYZ && p.batches <= kGridLimitYZ && grid_x < (1ll << 31),
             "matmul: {} needs a grid of {} x {} x {} blocks of {} x {} outputs; CUDA allows "
             "65535 in y and z",
             shapes_of(a, b), grid_x, grid_y, p.batches, tile_m, tile_n);
  std::size_t shared = variant.mma() ? matmul_shared_bytes(variant.tile, staging_of(variant)) : 0;
  std::size_t optin = cuda::backend().properties().shared_mem_per_block_optin;
  KILN_CHECK(shared <= optin,
             "matmul: {} on tile {} needs {} bytes of shared memory per block; the device "
             "allows {}",
             shapes_of(a, b), tile_text(variant.tile), shared, optin);
  std::vector<long long> packed = p.packed();
  auto pa = reinterpret_cast<cuda::DevicePtr>(a.raw_data());
  auto pb = reinterpret_cast<cuda::DevicePtr>(b.raw_data());
  auto po = reinterpret_cast<cuda::DevicePtr>(out.raw_data());
  void* params[] = {&pa, &pb, &po, packed.data()};
  cuda::Dim3 grid{static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(p.batches)};
  cuda::Dim3 block = variant.mma() ? cuda::Dim3{variant.tile.threads(), 1, 1}
                                   : cuda::Dim3{static_cast<unsigned>(kFmaTile),
                                                static_cast<unsigned>(kFmaTile), 1};
  // Past 48 KiB the handle opts the function in (cuFuncSetAttribute) before its first launch.
  handle.launch(grid, block, static_cast<unsigned>(shared), params,
                tensor_bytes(a) + tensor_bytes(b), tensor_bytes(out));
  return out;
}

}  // namespace kiln::jit::codegen
