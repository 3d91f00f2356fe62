// Rendering and looking up the FlashAttention kernels' variants (see attention_kernels.h).
#include "jit/codegen/attention_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>

#include "jit/codegen/attention.h"
#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_variants.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace attention_kernels {

using namespace attention_tiles;

// Whole KiB (what GPUs report): a warm launch's key (variant_key) holds the budget in KiB, so
// tiles are chosen from exactly what the key says.
std::int64_t device_shared_budget() {
  const cuda::DeviceProperties& p = cuda::backend().properties(0);
  auto bytes =
      static_cast<std::int64_t>(std::max(p.shared_mem_per_block, p.shared_mem_per_block_optin));
  return bytes / 1024 * 1024;
}

namespace {

using Data = kainjow::mustache::data;

std::string kernel_name(Kernel kind, const Variant& v, const Tiling& t) {
  std::string tiles = t.tag();
  return fmt::format("k_attention_{}_{}_d{}_v{}_{}_{}{}_r{}",
                     kind == Kernel::forward ? "fwd" : "bwd", dtype_name(v.dtype), v.head_qk,
                     v.head_v,
                     v.mask ? fmt::format("mask_{}", dtype_name(*v.mask)) : std::string("nomask"),
                     v.vector_loads ? "vec_" : "", tiles, v.batch_rank) +
         (v.tf32 ? "_tf32" : "") + (v.grouped ? "_grouped" : "") + (v.dropout ? "_dropout" : "");
}

std::string render(Kernel kind, const Variant& v, const Tiling& t, const std::string& name) {
  int dk = padded(v.head_qk), dv = padded(v.head_v);
  Data d;
  bool f16 = v.dtype == DType::f16 || v.mask == DType::f16;
  bool bf16 = v.dtype == DType::bf16 || v.mask == DType::bf16;
  d.set("name", name);
  d.set("description",
        fmt::format("{}, head dims {} and {}, {}", dtype_name(v.dtype), v.head_qk, v.head_v,
                    v.mask ? fmt::format("{} mask", dtype_name(*v.mask)) : std::string("no mask")));
  d.set("fp16", f16);
  d.set("bf16", bf16);
  d.set("dk", std::to_string(dk));
  d.set("dv", std::to_string(dv));
  d.set("head_qk", std::to_string(v.head_qk));
  d.set("head_v", std::to_string(v.head_v));
  d.set("warps", std::to_string(t.warps));
  d.set("bn", std::to_string(t.first.bn));
  d.set("stages", std::to_string(t.first.stages));
  d.set("bn_q", std::to_string(t.first.bn));
  d.set("stages_q", std::to_string(t.first.stages));
  d.set("bn_kv", std::to_string(t.second.bn));
  d.set("stages_kv", std::to_string(t.second.stages));
  d.set("batch_rank", std::to_string(v.batch_rank));
  d.set("elem", storage_type(v.dtype));
  bool tensor_cores = v.dtype == DType::f16 || v.dtype == DType::bf16;
  d.set("tensor_cores", tensor_cores);
  d.set("tf32", !tensor_cores && v.tf32);
  d.set("grouped", v.grouped);
  d.set("fma", !tensor_cores && !v.tf32);
  d.set("mma_type", v.dtype == DType::f16 ? "f16" : "bf16");
  d.set("mma_f16", v.dtype == DType::f16);
  d.set("vector_loads", v.vector_loads);
  d.set("mma_helpers", std::string(template_text("mma_helpers.cu.mustache")));  // a partial
  d.set("has_mask", v.mask.has_value());
  d.set("dropout", v.dropout);
  // Philox and the expression helpers around it (the random ops' own device functions).
  if (v.dropout) d.set("random_helpers", elementwise_helpers(false, false, false, true));
  if (v.mask) {
    d.set("mask_type", storage_type(*v.mask));
    d.set("bool_mask", *v.mask == DType::bool_);
    d.set("mask_load", fmt::format("(float)({})", load_expr(*v.mask, "m")));
  }
  std::string body = kind == Kernel::forward ? render_template("attention_forward.cu.mustache", d)
                                             : render_template("attention_backward.cu.mustache", d);
  return render_template("attention_common.cu.mustache", d) + "\n" + body;
}

// KILN_LOG=kernels: an attention kernel's schedule, its tiles, when it is first rendered.
void log_tiling(const std::string& name, const Tiling& t) {
  if (!log_enabled(LogTopic::kernels)) return;
  log_line(fmt::format("kiln: kernel {}: schedule {}", name, t.str()));
}

// Each kernel is rendered once per process (its name says its dtype, head dims and tiles) and
// resolved at its first launch.
Launchable named_kernel_for(Kernel kind, const Variant& v) {
  int elem = static_cast<int>(itemsize(v.dtype));
  Tiling t = tiling_for(kind, elem, padded(v.head_qk), padded(v.head_v), v.budget);
  std::string name = kernel_name(kind, v, t);
  return {&kernel_by_name(name,
                          [&] {
                            log_tiling(name, t);
                            return render(kind, v, t, name);
                          }),
          t};
}

// Every field of a kernel's variant in one word: what a warm launch looks its kernel up by.
std::uint64_t variant_key(Kernel kind, const Variant& v) {
  std::uint64_t key = kind == Kernel::backward;
  auto put = [&](std::uint64_t value, int bits) { key = key << bits | value; };
  put(static_cast<std::uint64_t>(v.dtype), 5);
  put(static_cast<std::uint64_t>(v.head_qk), 12);
  put(static_cast<std::uint64_t>(v.head_v), 12);
  put(v.mask ? 1 + static_cast<std::uint64_t>(*v.mask) : 0, 6);
  put(v.vector_loads, 1);
  put(static_cast<std::uint64_t>(v.batch_rank), 8);
  put(v.tf32, 1);
  put(v.grouped, 1);
  put(static_cast<std::uint64_t>(std::min<std::int64_t>(v.budget / 1024, 1023)), 10);
  put(v.dropout, 1);
  return key;
}

}  // namespace

// A warm launch's kernel without a name, a string or a lock: the variants already resolved, by
// key, in a table of atomic slots (open addressing; entries live as long as the process). A
// variant that finds no slot, or none free, takes the named path.
Launchable kernel_for(Kernel kind, const Variant& v) {
  struct Entry {
    std::uint64_t key;
    Launchable launchable;
  };
  constexpr std::size_t kSlots = 256;
  static std::array<std::atomic<const Entry*>, kSlots> table{};
  const std::uint64_t key = variant_key(kind, v);
  const std::size_t home = (key * 0x9E3779B97F4A7C15ull) >> 56;  // the top 8 bits: 256 slots
  for (std::size_t i = 0; i < kSlots; ++i) {
    const Entry* e = table[(home + i) % kSlots].load(std::memory_order_acquire);
    if (!e) break;
    if (e->key == key) return e->launchable;
  }
  Launchable found = named_kernel_for(kind, v);
  const Entry* entry = new Entry{key, found};
  for (std::size_t i = 0; i < kSlots; ++i) {
    const Entry* expected = nullptr;
    auto& slot = table[(home + i) % kSlots];
    if (slot.compare_exchange_strong(expected, entry, std::memory_order_acq_rel)) return found;
    if (expected->key == key) break;  // another thread published the same variant
  }
  delete entry;
  return found;
}

}  // namespace attention_kernels

std::vector<KernelHandle> render_attention_kernels(DType dtype, int head_qk, int head_v,
                                                   std::optional<DType> mask, bool vector_loads,
                                                   int batch_rank, bool tf32,
                                                   std::optional<std::int64_t> shared_budget) {
  attention_kernels::Variant v{
      dtype,
      head_qk,
      head_v,
      mask,
      vector_loads,
      batch_rank,
      tf32 && dtype == DType::f32,
      false,
      shared_budget ? *shared_budget : attention_kernels::device_shared_budget()};
  std::vector<KernelHandle> out;
  for (auto kind : {attention_tiles::Kernel::forward, attention_tiles::Kernel::backward})
    out.push_back(*attention_kernels::kernel_for(kind, v).handle);
  return out;
}

}  // namespace kiln::jit::codegen
