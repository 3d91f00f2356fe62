// Rendering and launching the indexing kernels (see indexing.h).
#include "jit/codegen/indexing.h"

#include <fmt/format.h>

#include <optional>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/templates.h"
#include "runtime/device_checks.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

int rank_of(const TensorMeta& out) {
  return std::max<int>(1, static_cast<int>(out.shape.size()));
}

// `value` (a register value of dtype `from`) stored as `to`.
std::string stored(DType from, DType to, const std::string& value) {
  return store_expr(to, convert_expr(from, to, value));
}

}  // namespace

bool has_indexing_kernel(OpId op) {
  OpClass c = op_class(op);
  return c == OpClass::index || c == OpClass::scan || c == OpClass::movement;
}

namespace {

IndexingKernel render(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                      const TensorMeta& out, bool rows) {
  KILN_CHECK(has_indexing_kernel(op), "codegen: {} has no indexing kernel", op);
  std::string name = fmt::format("k_{}{}", op, rows ? "_rows" : "");
  Data d, params(Data::type::list);
  bool fp16 = out.dtype == DType::f16, bf16 = out.dtype == DType::bf16;
  std::vector<std::string> types;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    DType t = inputs[i].dtype();
    fp16 = fp16 || t == DType::f16;
    bf16 = bf16 || t == DType::bf16;
    types.push_back(dtype_name(t).data());
    params.push_back(Data("decl", fmt::format("const {}* __restrict__ in{}", storage_type(t), i)));
  }
  params.push_back(Data("decl", fmt::format("{}* __restrict__ out0", storage_type(out.dtype))));
  DType acc = compute_dtype(out.dtype);
  std::string in0 = fmt::format("in0[offset(0, {})]", op == OpId::cumsum ? "j" : "c[ix.dim]");
  switch (op) {
    case OpId::scatter_add:
    case OpId::index_add:
      d.set("load_self", convert_expr(inputs[0].dtype(), acc, load_expr(inputs[0].dtype(), in0)));
      d.set("load_src", convert_expr(inputs[2].dtype(), acc,
                                     load_expr(inputs[2].dtype(), "in2[offset(2, j)]")));
      break;
    case OpId::cumsum:
      d.set("load_term", convert_expr(inputs[0].dtype(), acc, load_expr(inputs[0].dtype(), in0)));
      d.set("reverse", attrs.reverse);
      break;
    case OpId::pad:
      d.set("fill", stored(DType::f64, out.dtype, literal(DType::f64, attrs.value)));
      break;
    case OpId::cat: {
      Data list(Data::type::list);
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        Data in;
        in.set("k", std::to_string(i));
        DType t = inputs[i].dtype();
        in.set(
            "store_k",
            stored(t, out.dtype,
                   load_expr(t, fmt::format("in{0}[offset({0}, c[ix.dim] - ix.start[{0}])]", i))));
        list.push_back(in);
      }
      d.set("inputs", list);
      break;
    }
    case OpId::gather:
    case OpId::index_select:
    case OpId::index_copy:
      break;  // their loads are the template's own
    // Not index, scan or movement ops: no indexing kernel (has_indexing_kernel).
#define KILN_HANDLED_scan
#define KILN_HANDLED_index
#define KILN_HANDLED_movement
#include "runtime/op_class_cases.inc"
      break;
  }
  d.set("acc", register_type(acc));
  d.set("store", stored(acc, out.dtype, "sum"));
  d.set(rows ? std::string(op_name(op)) + "_rows" : std::string(op_name(op)), true);
  d.set("name", name);
  d.set("description",
        fmt::format("{}({}) -> {}", op, fmt::join(types, ", "), dtype_name(out.dtype)));
  d.set("rank", std::to_string(rank_of(out)));
  d.set("num_inputs", std::to_string(inputs.size()));
  d.set("params", params);
  d.set("fp16", fp16);
  d.set("bf16", bf16);
  return IndexingKernel{op, KernelHandle(name, render_template("indexing.cu.mustache", d)), rows};
}

// One launch over `out_meta`'s elements (the output's, or for a kernel in place the source's)
// writing `out`.
void launch(const IndexingKernel& kernel, const OpAttrs& attrs, std::span<const Tensor> inputs,
            const TensorMeta& out_meta, const Tensor& out) {
  int rank = rank_of(out_meta);
  auto padded = [&](const Shape& shape, const Strides* strides) {
    // Right-aligned to the output's rank (a 0-dim or 1-D index has fewer dims).
    std::vector<long long> v(static_cast<std::size_t>(rank), strides ? 0 : 1);
    auto r = static_cast<int>(shape.size());
    for (int i = 0; i < r && i < rank; ++i) v[rank - r + i] = strides ? (*strides)[i] : shape[i];
    return v;
  };
  auto one_d = [&](const Tensor& t, bool strides) {  // an index vector: its single dim first
    std::vector<long long> v(static_cast<std::size_t>(rank), strides ? 0 : 1);
    if (t.dim() == 1) v[0] = strides ? t.strides()[0] : t.shape()[0];
    return v;
  };
  bool vector_index = kernel.op == OpId::index_select || kernel.op == OpId::index_add ||
                      kernel.op == OpId::index_copy;
  std::vector<long long> packed;
  for (auto s : padded(out_meta.shape, nullptr)) packed.push_back(s);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (auto s : vector_index&& i == 1 ? one_d(inputs[i], true)
                                        : padded(inputs[i].shape(), &inputs[i].strides()))
      packed.push_back(s);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (auto s :
         vector_index&& i == 1 ? one_d(inputs[i], false) : padded(inputs[i].shape(), nullptr))
      packed.push_back(s);
  std::vector<long long> before(static_cast<std::size_t>(rank), 0);
  if (kernel.op == OpId::pad)
    for (std::size_t i = 0; i < attrs.dims.size() / 2; ++i)
      before[rank - 1 - i] = attrs.dims[2 * i];
  packed.insert(packed.end(), before.begin(), before.end());
  long long dim = 0;
  if (kernel.op != OpId::pad && !out_meta.shape.empty())
    dim = normalize_dim(attrs.dim, static_cast<std::int64_t>(out_meta.shape.size()), "index");
  long long start = 0;
  for (const auto& t : inputs) {
    packed.push_back(start);
    if (kernel.op == OpId::cat) start += t.shape()[dim];
  }
  packed.push_back(dim);

  long long n = numel(out_meta.shape);
  if (n == 0) return;
  // Ops that read an index report one out of range through a device flag (device_checks.h);
  // the others never touch theirs.
  bool checks = kernel.op == OpId::gather || kernel.op == OpId::index_select ||
                kernel.op == OpId::scatter_add || kernel.op == OpId::index_add ||
                kernel.op == OpId::index_copy;
  std::optional<DeviceCheck> check;
  if (checks) {
    std::int64_t size =
        kernel.op == OpId::gather || kernel.op == OpId::index_select || kernel.in_place_rows
            ? inputs[0].shape()[dim]
            : out_meta.shape[dim];
    check = reserve_device_check([op = kernel.op, dim, size](std::span<const std::int64_t> e) {
      throw IndexError(fmt::format("{}: index {} is out of range for dim {} of size {}{}", op, e[1],
                                   dim, size, device_check_note()));
    });
  }
  cuda::DevicePtr error_ptr = check ? check->flag() : 0;
  std::vector<cuda::DevicePtr> pointers;
  for (const auto& t : inputs) pointers.push_back(reinterpret_cast<cuda::DevicePtr>(t.raw_data()));
  pointers.push_back(reinterpret_cast<cuda::DevicePtr>(out.raw_data()));
  std::vector<void*> params;
  for (auto& p : pointers) params.push_back(&p);
  params.push_back(packed.data());
  params.push_back(&n);
  params.push_back(&error_ptr);
  // In place, the kernel reads the index and source and writes the source's bytes; self it
  // never reads.
  std::int64_t read = 0, written = tensor_bytes(out);
  for (std::size_t i = kernel.in_place_rows ? 1 : 0; i < inputs.size(); ++i)
    read += tensor_bytes(inputs[i]);
  if (kernel.in_place_rows) written = tensor_bytes(inputs[2]);
  unsigned block = 256;
  kernel.handle.launch({grid_stride_blocks(n, block), 1, 1}, {block, 1, 1}, params.data(), read,
                       written);
  if (check) check->launched();
}

}  // namespace

IndexingKernel render_indexing(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs,
                               const TensorMeta& out) {
  return render(op, attrs, inputs, out, false);
}

IndexingKernel render_index_copy_rows(std::span<const Tensor> inputs) {
  KILN_CHECK(inputs.size() == 3, "codegen: index_copy takes self, index and source, not {} inputs",
             inputs.size());
  return render(OpId::index_copy, {}, inputs, {inputs[0].shape(), inputs[0].dtype()}, true);
}

Tensor run_indexing(const IndexingKernel& kernel, const OpAttrs& attrs,
                    std::span<const Tensor> inputs, const TensorMeta& out_meta) {
  KILN_CHECK(!kernel.in_place_rows, "codegen: {} writes in place (run_index_copy_rows)",
             kernel.handle.name());
  Tensor out = empty(out_meta.shape, out_meta.dtype, Device::cuda());
  launch(kernel, attrs, inputs, out_meta, out);
  return out;
}

void run_index_copy_rows(const IndexingKernel& kernel, const OpAttrs& attrs,
                         std::span<const Tensor> inputs) {
  KILN_CHECK(kernel.in_place_rows && inputs.size() == 3,
             "codegen: {} does not write index_copy's rows in place", kernel.handle.name());
  const Tensor& self = inputs[0];
  launch(kernel, attrs, inputs, {inputs[2].shape(), self.dtype()}, self);
}

}  // namespace kiln::jit::codegen
