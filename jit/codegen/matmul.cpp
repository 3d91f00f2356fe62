// Rendering and launching the generated GEMM (see matmul.h).
#include "jit/codegen/matmul.h"

#include <fmt/format.h>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/templates.h"

namespace kiln::jit::codegen {

MatmulKernel render_matmul(DType a, DType b, DType out, int batch_rank) {
  DType acc = out == DType::f64 ? DType::f64 : is_integral(out) ? DType::i64 : DType::f32;
  std::string name =
      fmt::format("k_matmul_{}_{}_{}", dtype_name(a), dtype_name(b), dtype_name(out));
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
  return MatmulKernel{KernelHandle(name, render_template("matmul.cu.mustache", d))};
}

Tensor run_matmul(const MatmulKernel& kernel, const Tensor& a, const Tensor& b,
                  const TensorMeta& out_meta) {
  // An empty sum (k == 0) is zeros; otherwise the kernel writes every element.
  Tensor out = a.shape().back() == 0 ? zeros(out_meta.shape, out_meta.dtype, Device::cuda())
                                     : empty(out_meta.shape, out_meta.dtype, Device::cuda());
  auto rank = static_cast<int>(out_meta.shape.size());
  int batch_rank = std::max(1, rank - 2);
  // Batch sizes and each operand's batch strides (0 where it broadcasts), right-aligned.
  std::vector<long long> packed;
  long long batches = 1;
  for (int d = 0; d < batch_rank; ++d) {
    long long size = rank > 2 ? out_meta.shape[d] : 1;
    packed.push_back(size);
    batches *= size;
  }
  for (const Tensor* t : {&a, &b}) {
    auto trank = static_cast<int>(t->dim());
    for (int d = 0; d < batch_rank; ++d) {
      int td = trank - 2 - (batch_rank - d);
      bool reaches = rank > 2 && td >= 0 && t->shape()[td] != 1;
      packed.push_back(reaches ? t->strides()[td] : 0);
    }
  }
  auto last = [](const Tensor& t, int back) -> long long { return t.strides()[t.dim() - back]; };
  long long m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
  for (long long s : {last(a, 2), last(a, 1), last(b, 2), last(b, 1), m, n, k}) packed.push_back(s);
  if (out.numel() == 0) return out;
  if (k == 0) return out;
  auto pa = reinterpret_cast<cuda::DevicePtr>(a.raw_data());
  auto pb = reinterpret_cast<cuda::DevicePtr>(b.raw_data());
  auto po = reinterpret_cast<cuda::DevicePtr>(out.raw_data());
  void* params[] = {&pa, &pb, &po, packed.data()};
  constexpr unsigned tile = 16;
  kernel.handle.launch(
      {static_cast<unsigned>((n + tile - 1) / tile), static_cast<unsigned>((m + tile - 1) / tile),
       static_cast<unsigned>(batches)},
      {tile, tile, 1}, params, tensor_bytes(a) + tensor_bytes(b), tensor_bytes(out));
  return out;
}

}  // namespace kiln::jit::codegen
