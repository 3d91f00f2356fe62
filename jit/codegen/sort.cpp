// Rendering and launching the sort kernels (see sort.h).
#include "jit/codegen/sort.h"

#include <fmt/format.h>

#include <bit>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/templates.h"
#include "runtime/grad_mode.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

// Entries a block sorts in shared memory: 2048 keys and indices are 24 KiB.
constexpr long long kMaxChunk = 2048;
constexpr unsigned kThreads = 256;

KernelHandle render_part(OpId op, const OpAttrs& attrs, DType dtype, const char* part) {
  std::string base =
      fmt::format("k_{}_{}{}", op, dtype_name(dtype), attrs.descending ? "_desc" : "");
  Data d;
  d.set("name", base);  // the template appends the part: k_sort_f32_chunks
  d.set("description", fmt::format("{}({}{}), {}", op, dtype_name(dtype),
                                   attrs.descending ? ", descending" : "", part));
  d.set(part, true);
  d.set("max_chunk", std::to_string(kMaxChunk));
  d.set("storage", storage_type(dtype));
  d.set("register", register_type(dtype));
  d.set("load", load_expr(dtype, "in[i]"));
  d.set("fp16", dtype == DType::f16);
  d.set("bf16", dtype == DType::bf16);
  d.set("descending", attrs.descending);
  switch (dtype) {
    case DType::f16:
    case DType::bf16:
    case DType::f32:
      d.set("float_key", true);
      break;
    case DType::f64:
      d.set("double_key", true);
      break;
    case DType::i8:
    case DType::i32:
    case DType::i64:
      d.set("signed_key", true);
      break;
    case DType::bool_:
      d.set("unsigned_key", true);
      break;
  }
  return KernelHandle(fmt::format("{}_{}", base, part), render_template("sort.cu.mustache", d));
}

// Where the sorted runs of one stage live: keys and indices, `cap` per run.
struct Runs {
  Tensor keys, indices;
};

Runs allocate_runs(long long entries) {
  return {empty({entries}, DType::i64, Device::cuda()),
          empty({entries}, DType::i32, Device::cuda())};
}

}  // namespace

SortKernel render_sort(OpId op, const OpAttrs& attrs, DType dtype) {
  KILN_CHECK(op_class(op) == OpClass::sort, "codegen: {} is not a sort op", op);
  return SortKernel{op, render_part(op, attrs, dtype, "chunks"),
                    render_part(op, attrs, dtype, "merge")};
}

std::vector<Tensor> run_sort(const SortKernel& kernel, const OpAttrs& attrs, const Tensor& x,
                             std::span<const TensorMeta> outputs) {
  NoGradGuard no_grad;
  // Rows along the dim, contiguous: the dim swapped last (and swapped back after).
  std::int64_t rank = std::max<std::int64_t>(x.dim(), 1);
  std::int64_t dim = normalize_dim(attrs.dim, rank, op_name(kernel.op));
  bool swapped = x.dim() > 1 && dim != x.dim() - 1;
  Shape row_shape = outputs[0].shape;
  if (swapped) std::swap(row_shape[dim], row_shape.back());
  Tensor row_values = empty(row_shape, outputs[0].dtype, Device::cuda());
  Tensor row_indices = empty(row_shape, DType::i64, Device::cuda());
  auto result = [&]() -> std::vector<Tensor> {
    if (!swapped) return {row_values, row_indices};
    return {row_values.transpose(dim, -1).contiguous(),
            row_indices.transpose(dim, -1).contiguous()};
  };
  if (row_values.numel() == 0) return result();
  Tensor rows = (swapped ? x.transpose(dim, -1) : x).contiguous();
  long long n = x.dim() == 0 ? 1 : x.shape()[dim];
  long long keep = kernel.op == OpId::topk ? attrs.k : n;
  long long num_rows = rows.numel() / n;
  KILN_CHECK(n <= 0x7fffffffLL, "{}: dim {} of shape {} has more than 2^31 - 1 entries", kernel.op,
             dim, shape_str(x.shape()));
  std::int64_t result_bytes = tensor_bytes(row_values) + tensor_bytes(row_indices);

  long long chunk =
      std::min<long long>(kMaxChunk, std::bit_ceil(static_cast<unsigned long long>(n)));
  long long runs = (n + chunk - 1) / chunk, run = chunk, cap = std::min(keep, chunk);
  Runs current = runs > 1 ? allocate_runs(num_rows * runs * cap) : Runs{};
  cuda::DevicePtr in = device_address(rows), out_values = device_address(row_values),
                  out_indices = device_address(row_indices);
  cuda::DevicePtr keys = runs > 1 ? device_address(current.keys) : 0;
  cuda::DevicePtr idx = runs > 1 ? device_address(current.indices) : 0;
  int final = runs == 1;
  long long blocks = num_rows * runs;
  KILN_CHECK(blocks <= 0x7fffffffLL, "{}: {} rows of shape {} are too many for one launch",
             kernel.op, num_rows, shape_str(x.shape()));
  unsigned threads = static_cast<unsigned>(std::clamp<long long>(chunk / 2, 32, kThreads));
  void* chunk_params[] = {&in,   &keys,  &idx, &out_values, &out_indices, &n,
                          &runs, &chunk, &cap, &keep,       &final};
  kernel.chunks.launch({static_cast<unsigned>(blocks), 1, 1}, {threads, 1, 1}, chunk_params,
                       tensor_bytes(rows), final ? result_bytes : num_rows * runs * cap * 12);
  while (runs > 1) {
    long long runs_out = (runs + 1) / 2, cap_out = std::min(keep, 2 * run);
    final = runs_out == 1;
    Runs next = final ? Runs{} : allocate_runs(num_rows * runs_out * cap_out);
    cuda::DevicePtr next_keys = final ? 0 : device_address(next.keys);
    cuda::DevicePtr next_idx = final ? 0 : device_address(next.indices);
    long long total = num_rows * runs * cap;
    void* merge_params[] = {&keys,       &idx,         &next_keys, &next_idx, &in,
                            &out_values, &out_indices, &n,         &runs,     &run,
                            &cap,        &cap_out,     &keep,      &final,    &total};
    std::int64_t written = final ? result_bytes : num_rows * runs_out * cap_out * 12;
    kernel.merge.launch({grid_stride_blocks(total, kThreads), 1, 1}, {kThreads, 1, 1}, merge_params,
                        total * 12 + (final ? tensor_bytes(row_values) : 0), written);
    current = std::move(next);
    keys = next_keys;
    idx = next_idx;
    runs = runs_out;
    run *= 2;
    cap = cap_out;
  }
  return result();
}

}  // namespace kiln::jit::codegen
