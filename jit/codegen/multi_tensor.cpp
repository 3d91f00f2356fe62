// Rendering, tables and launches of the multi-tensor kernels (see multi_tensor.h).
#include "jit/codegen/multi_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_variants.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/pinned_staging.h"
#include "runtime/error.h"
#include "runtime/multi_tensor.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

constexpr unsigned kBlock = 256;
// Blocks of the norm's first launch, each leaving one partial: at most one per thread of the
// second launch's blocks, which combine them all.
constexpr long long kMaxPartials = kBlock;

std::atomic<std::int64_t> uploads{0};

// A device table and the words it holds: uploaded again only when they change, so a step whose
// tensors stayed where they were copies nothing to the device.
struct DeviceTable {
  std::vector<std::int64_t> words;
  Tensor memory;  // i64 words on the device

  cuda::DevicePtr upload(std::vector<std::int64_t> next) {
    if (!memory.defined() || next != words) {
      auto size = static_cast<std::int64_t>(next.size());
      if (!memory.defined() || memory.numel() < size)
        memory = empty({std::max<std::int64_t>(size, 1)}, DType::i64, Device::cuda());
      cuda::pinned_staging().upload(device_address(memory), next.data(),
                                    next.size() * sizeof(next[0]));
      words = std::move(next);
      uploads.fetch_add(1, std::memory_order_relaxed);
    }
    return device_address(memory);
  }
};

// What one caller (an optimizer, the clipping of one parameter list) keeps between calls.
class CallerTables : public MultiTensorCache {
 public:
  std::map<std::string, DeviceTable> by_kernel;
  Tensor partials;  // the norm's per-block partials
};

CallerTables& tables_of(std::unique_ptr<MultiTensorCache>& cache) {
  auto* tables = dynamic_cast<CallerTables*>(cache.get());
  if (!tables) {
    cache = std::make_unique<CallerTables>();
    tables = static_cast<CallerTables*>(cache.get());
  }
  return *tables;
}

long long chunks_of(std::int64_t n) {
  return (n + kMultiTensorChunk - 1) / kMultiTensorChunk;
}

// Indices of tensors by the dtypes of their entries in every list (optimizer states share their
// parameter's dtype; an accumulation's incoming gradient may not), in order of first appearance.
std::vector<std::vector<std::size_t>> dtype_groups(std::span<const std::span<const Tensor>> lists) {
  std::vector<std::vector<DType>> keys;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    std::vector<DType> key;
    for (const auto& list : lists) key.push_back(list[i].dtype());
    auto at = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (at == static_cast<long>(keys.size())) {
      keys.push_back(std::move(key));
      groups.emplace_back();
    }
    groups[static_cast<std::size_t>(at)].push_back(i);
  }
  return groups;
}

// The kernel's scalar arguments in its compute type, at addresses that outlive the launch call.
struct Scalars {
  bool f64 = false;
  std::vector<float> f;
  std::vector<double> d;
  void add(double v) {
    if (f64)
      d.push_back(v);
    else
      f.push_back(static_cast<float>(v));
  }
  void* at(std::size_t i) { return f64 ? static_cast<void*>(&d[i]) : static_cast<void*>(&f[i]); }
  std::size_t size() const { return f64 ? d.size() : f.size(); }
};

unsigned grid_for(long long chunks) {
  return grid_stride_blocks(chunks * static_cast<long long>(kBlock), kBlock);
}

// ---- optimizer steps ----

struct UpdateKind {
  const char* optimizer = "";        // "adamw", "sgd", "accumulate"
  std::vector<const char*> buffers;  // the table's pointers per row, in order
  bool momentum = false, nesterov = false, weight_decay = false;
  bool skip = false;                 // a device flag may cancel the step (StepFlag)
  std::vector<const char*> scalars;  // the kernel's arguments after the table
};

// `dtype` is the first buffer's; `incoming` the second's, which only an accumulation lets differ.
KernelHandle update_kernel(const UpdateKind& kind, DType dtype, DType incoming) {
  std::string name = fmt::format(
      "k_multi_tensor_{}{}{}{}{}_{}{}", kind.optimizer, kind.momentum ? "_momentum" : "",
      kind.nesterov ? "_nesterov" : "", kind.weight_decay ? "_decay" : "", kind.skip ? "_skip" : "",
      dtype_name(dtype), incoming == dtype ? "" : fmt::format("_from_{}", dtype_name(incoming)));
  return kernel_by_name(name, [&] {
    Data d, scalars(Data::type::list);
    for (const char* s : kind.scalars) scalars.push_back(Data("scalar", s));
    d.set("name", name);
    bool accumulate = std::string_view(kind.optimizer) == "accumulate";
    d.set("description", accumulate ? fmt::format("{} gradients added into a list of {} tensors",
                                                  dtype_name(incoming), dtype_name(dtype))
                                    : fmt::format("{} step over a list of {} tensors",
                                                  kind.optimizer, dtype_name(dtype)));
    d.set("fp16", dtype == DType::f16 || incoming == DType::f16);
    d.set("bf16", dtype == DType::bf16 || incoming == DType::bf16);
    d.set("type", storage_type(dtype));
    d.set("incoming_type", storage_type(incoming));
    d.set("load_incoming", convert_expr(incoming, dtype, load_expr(incoming, "x")));
    d.set("acc", register_type(dtype));
    d.set("load_x", load_expr(dtype, "x"));
    d.set("store_x", store_expr(dtype, "x"));
    d.set("depth", std::to_string(kind.buffers.size()));
    d.set("buffers", fmt::format("{}", fmt::join(kind.buffers, ", ")));
    d.set("chunk", std::to_string(kMultiTensorChunk));
    d.set("scalars", scalars);
    d.set(kind.optimizer, true);
    d.set("momentum", kind.momentum);
    d.set("nesterov", kind.nesterov);
    d.set("weight_decay", kind.weight_decay);
    d.set("skip", kind.skip);
    d.set("accumulate", accumulate);
    return render_template("multi_tensor.cu.mustache", d);
  });
}

// The arguments of a step that a device flag may cancel: the flag, the skip count, whether this
// launch counts a skip (the first launch only), then AdamW's step, lr and betas in double.
struct SkipArguments {
  cuda::DevicePtr found_inf = 0, skipped_steps = 0;
  int count_skip = 1;
  long long step = 0;
  double lr = 0, beta1 = 0, beta2 = 0;
};

// One launch per dtype group (dtype_groups); lists[k][i] is the k-th buffer of tensor i. All but
// the second (the gradient, or the accumulation's incoming gradient) are updated in place.
void run_update(const UpdateKind& kind, std::span<const std::span<const Tensor>> lists,
                const std::vector<double>& scalar_values, CallerTables& tables,
                SkipArguments skip = {}) {
  std::span<const Tensor> params = lists[0];
  for (const auto& group : dtype_groups(lists)) {
    DType dtype = params[group.front()].dtype();
    DType incoming = lists[1][group.front()].dtype();
    std::vector<std::int64_t> words;
    std::int64_t read = 0, written = 0;
    long long chunks = 0;
    int rows = 0;
    for (std::size_t i : group) {
      std::int64_t n = params[i].numel();
      if (n == 0) continue;
      for (const auto& list : lists)
        words.push_back(static_cast<std::int64_t>(device_address(list[i])));
      words.push_back(n);
      words.push_back(chunks);
      chunks += chunks_of(n);
      ++rows;
      for (std::size_t k = 0; k < lists.size(); ++k) {
        std::int64_t bytes = tensor_bytes(lists[k][i]);
        read += bytes;
        if (k != 1) written += bytes;  // all but the gradient
      }
    }
    if (rows == 0) continue;
    const KernelHandle& k = update_kernel(kind, dtype, incoming);
    cuda::DevicePtr table = tables.by_kernel[k.name()].upload(std::move(words));
    Scalars scalars;
    scalars.f64 = dtype == DType::f64;
    for (double v : scalar_values) scalars.add(v);
    std::vector<void*> params_of_launch = {&table, &rows, &chunks};
    for (std::size_t s = 0; s < scalars.size(); ++s) params_of_launch.push_back(scalars.at(s));
    if (kind.skip) {
      params_of_launch.insert(params_of_launch.end(),
                              {&skip.found_inf, &skip.skipped_steps, &skip.count_skip});
      if (std::string_view(kind.optimizer) == "adamw")
        params_of_launch.insert(params_of_launch.end(),
                                {&skip.step, &skip.lr, &skip.beta1, &skip.beta2});
      read += 4 + 8;  // the flag, the skip count
    }
    k.launch({grid_for(chunks), 1, 1}, {kBlock, 1, 1}, params_of_launch.data(), read, written);
    skip.count_skip = 0;
  }
}

// ---- gradient-norm clipping ----

// The dtype codes of the norm's table rows.
int dtype_code(DType t) {
  switch (t) {
    case DType::f32:
      return 0;
    case DType::f64:
      return 1;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 3;
    default:
      throw Error(fmt::format("clip_grad_norm_: gradients must be floating point, got {}", t));
  }
}

struct NormKind {
  const char* name;  // "l2", "l1", "inf", "p"
  const char* term;
  const char* combine;
  const char* finish;
};

NormKind norm_kind(double p) {
  static const char* sum = "return a + b;";
  if (p == 2) return {"l2", "return x * x;", sum, "sqrt(v)"};
  if (p == 1) return {"l1", "return fabs(x);", sum, "v"};
  if (std::isinf(p)) return {"inf", "return fabs(x);", "return (b > a || b != b) ? b : a;", "v"};
  return {"p", "return pow(fabs(x), p);", sum, "pow(v, 1 / p)"};
}

// A kernel of multi_tensor_grads.cu.mustache over gradients of `dtypes`, computing in `acc`;
// `mode` sets what it does (the clip's two launches, the unscaling).
KernelHandle grads_kernel(const std::string& name, const std::string& description, DType acc,
                          const std::vector<DType>& dtypes,
                          const std::function<void(Data&)>& mode) {
  return kernel_by_name(name, [&] {
    Data d, list(Data::type::list);
    std::string acc_type = storage_type(acc), codes;
    bool fp16 = false, bf16 = false;
    for (DType t : dtypes) {
      std::string element = fmt::format("static_cast<{}*>(row.ptr)[i]", storage_type(t));
      Data entry;
      entry.set("code", std::to_string(dtype_code(t)));
      entry.set("load", fmt::format("({}){}", acc_type,
                                    load_expr(t, fmt::format("static_cast<const {}*>(row.ptr)[i]",
                                                             storage_type(t)))));
      entry.set("store", fmt::format("{} = {}", element,
                                     store_expr(t, t == DType::f16 || t == DType::bf16
                                                       ? "(float)x"
                                                       : fmt::format("({})x", storage_type(t)))));
      list.push_back(entry);
      codes += fmt::format("{}{} {}", codes.empty() ? "" : ", ", dtype_code(t), dtype_name(t));
      fp16 = fp16 || t == DType::f16;
      bf16 = bf16 || t == DType::bf16;
    }
    d.set("name", name);
    d.set("description", fmt::format("{} ({})", description, codes));
    d.set("fp16", fp16);
    d.set("bf16", bf16);
    d.set("acc", acc_type);
    d.set("dtypes", list);
    d.set("dtype_codes", codes);
    d.set("chunk", std::to_string(kMultiTensorChunk));
    mode(d);
    return render_template("multi_tensor_grads.cu.mustache", d);
  });
}

std::string dtypes_suffix(DType acc, const std::vector<DType>& dtypes) {
  std::string suffix(dtype_name(acc));
  for (DType t : dtypes) suffix += fmt::format("_{}", dtype_name(t));
  return suffix;
}

KernelHandle norm_kernel(const NormKind& norm, DType acc, const std::vector<DType>& dtypes,
                         bool scale) {
  std::string prefix = fmt::format("k_clip_grad_norm_{}_{}", norm.name, dtypes_suffix(acc, dtypes));
  return grads_kernel(prefix + (scale ? "_scale" : "_reduce"),
                      fmt::format("the {} norm of a list of gradients, {}", norm.name,
                                  scale ? "then their scaling" : "partials per block"),
                      acc, dtypes, [&](Data& d) {
                        d.set("name_prefix", prefix);
                        d.set("clip", true);
                        d.set("norm", norm.name);
                        d.set("term", norm.term);
                        d.set("combine", norm.combine);
                        d.set("finish", norm.finish);
                        d.set(scale ? "scale" : "reduce", true);
                      });
}

// The rows of a gradient table (data, dtype code, elements, first chunk), the accumulation dtype
// (f64 when a gradient is f64) and the sorted set of dtypes (one kernel per set, whatever the
// order); `owner` names the caller in errors.
struct GradTable {
  std::vector<std::int64_t> words;
  long long chunks = 0;
  int rows = 0;
  std::int64_t bytes = 0;
  DType acc = DType::f32;
  std::vector<DType> dtypes;
};

GradTable grad_table(std::span<const Tensor> grads) {
  GradTable t;
  for (const auto& g : grads) {
    dtype_code(g.dtype());  // rejects what is not floating point
    if (std::find(t.dtypes.begin(), t.dtypes.end(), g.dtype()) == t.dtypes.end())
      t.dtypes.push_back(g.dtype());
    if (g.dtype() == DType::f64) t.acc = DType::f64;
  }
  std::sort(t.dtypes.begin(), t.dtypes.end());
  for (const auto& g : grads) {
    std::int64_t n = g.numel();
    if (n == 0) continue;
    t.words.insert(t.words.end(), {static_cast<std::int64_t>(device_address(g)),
                                   dtype_code(g.dtype()), n, t.chunks});
    t.chunks += chunks_of(n);
    ++t.rows;
    t.bytes += tensor_bytes(g);
  }
  return t;
}

Tensor clip(std::span<const Tensor> grads, const ClipGradNorm& clip, CallerTables& tables) {
  GradTable t = grad_table(grads);
  if (t.rows == 0) return zeros({}, t.acc, Device::cuda());  // a norm of nothing: nothing to scale
  NormKind norm = norm_kind(clip.norm_type);
  const KernelHandle& reduce = norm_kernel(norm, t.acc, t.dtypes, false);
  const KernelHandle& scale = norm_kernel(norm, t.acc, t.dtypes, true);
  cuda::DevicePtr table = tables.by_kernel[reduce.name()].upload(std::move(t.words));
  if (!tables.partials.defined() || tables.partials.dtype() != t.acc)
    tables.partials = empty({kMaxPartials}, t.acc, Device::cuda());
  Tensor total = empty({}, t.acc, Device::cuda());
  cuda::DevicePtr partials = device_address(tables.partials), total_ptr = device_address(total);
  int num_partials = static_cast<int>(std::min(t.chunks, kMaxPartials));
  Scalars scalars;
  scalars.f64 = t.acc == DType::f64;
  scalars.add(clip.norm_type);
  scalars.add(clip.max_norm);
  std::int64_t acc_bytes = static_cast<std::int64_t>(itemsize(t.acc));
  void* reduce_params[] = {&table, &t.rows, &t.chunks, scalars.at(0), &partials};
  reduce.launch({static_cast<unsigned>(num_partials), 1, 1}, {kBlock, 1, 1}, reduce_params, t.bytes,
                num_partials * acc_bytes);
  void* scale_params[] = {&table,        &t.rows,   &t.chunks,     scalars.at(0),
                          scalars.at(1), &partials, &num_partials, &total_ptr};
  scale.launch({grid_for(t.chunks), 1, 1}, {kBlock, 1, 1}, scale_params,
               t.bytes + num_partials * acc_bytes, t.bytes + acc_bytes);
  return total;
}

// ---- loss scaling ----

void unscale(std::span<const Tensor> grads, const Tensor& scale, const Tensor& found_inf,
             const Tensor& found_any, CallerTables& tables) {
  GradTable t = grad_table(grads);
  if (t.rows == 0) return;
  const KernelHandle& k =
      grads_kernel(fmt::format("k_unscale_{}", dtypes_suffix(t.acc, t.dtypes)),
                   "a list of gradients divided by the loss scale, with their inf check", t.acc,
                   t.dtypes, [](Data& d) { d.set("unscale", true); });
  cuda::DevicePtr table = tables.by_kernel[k.name()].upload(std::move(t.words));
  cuda::DevicePtr scale_ptr = device_address(scale), inf_ptr = device_address(found_inf),
                  any_ptr = device_address(found_any);
  void* params[] = {&table, &t.rows, &t.chunks, &scale_ptr, &inf_ptr, &any_ptr};
  k.launch({grid_for(t.chunks), 1, 1}, {kBlock, 1, 1}, params, t.bytes + 4, t.bytes);
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& flags,
                  const ScaleUpdate& u) {
  const std::string name = "k_grad_scale_update";
  const KernelHandle& k = kernel_by_name(name, [&] {
    Data d;
    d.set("name", name);
    return render_template("grad_scale_update.cu.mustache", d);
  });
  cuda::DevicePtr scale_ptr = device_address(scale), tracker_ptr = device_address(growth_tracker),
                  flags_ptr = device_address(flags);
  int num_flags = static_cast<int>(flags.numel());
  double growth = u.growth_factor, backoff = u.backoff_factor;
  long long interval = u.growth_interval;
  void* params[] = {&scale_ptr, &tracker_ptr, &flags_ptr, &num_flags, &growth, &backoff, &interval};
  std::int64_t flag_bytes = 4 * static_cast<std::int64_t>(num_flags);
  k.launch({1, 1, 1}, {1, 1, 1}, params, 4 + 8 + 4, 4 + 8 + flag_bytes);
}

// ---- the implementation registered for CUDA tensors ----

class CudaMultiTensor : public MultiTensorBackend {
 public:
  void adamw(std::span<const Tensor> params, std::span<const Tensor> grads,
             std::span<const Tensor> exp_avg, std::span<const Tensor> exp_avg_sq,
             const AdamWStep& s, std::unique_ptr<MultiTensorCache>& cache) override {
    check_lists("AdamW", params, {grads, exp_avg, exp_avg_sq});
    UpdateKind kind;
    kind.optimizer = "adamw";
    kind.buffers = {"param", "grad", "exp_avg", "exp_avg_sq"};
    kind.scalars = {"decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps"};
    std::vector<double> values = {
        1.0 - s.lr * s.weight_decay, s.beta1, 1.0 - s.beta1, s.beta2, 1.0 - s.beta2, s.eps};
    SkipArguments skip;
    if (s.flag) {  // the kernel computes the bias corrections from the steps not skipped
      kind.skip = true;
      skip = skip_arguments("AdamW", *s.flag, true);
      skip.step = s.step;
      skip.lr = s.lr;
      skip.beta1 = s.beta1;
      skip.beta2 = s.beta2;
    } else {
      auto t = static_cast<double>(s.step);
      kind.scalars.insert(kind.scalars.end(), {"bias2_sqrt", "step_size"});
      values.push_back(std::sqrt(1.0 - std::pow(s.beta2, t)));
      values.push_back(-s.lr / (1.0 - std::pow(s.beta1, t)));
    }
    const std::span<const Tensor> lists[] = {params, grads, exp_avg, exp_avg_sq};
    run_update(kind, lists, values, tables_of(cache), skip);
  }

  void sgd(std::span<const Tensor> params, std::span<const Tensor> grads,
           std::span<const Tensor> momentum_buffers, const SGDStep& s,
           std::unique_ptr<MultiTensorCache>& cache) override {
    bool momentum = s.momentum != 0;
    KILN_CHECK(momentum == !momentum_buffers.empty(),
               "SGD: {} momentum buffers for momentum {} (the fused step needs one per parameter "
               "exactly when momentum is not 0)",
               momentum_buffers.size(), s.momentum);
    UpdateKind kind;
    kind.optimizer = "sgd";
    kind.buffers = {"param", "grad"};
    kind.momentum = momentum;
    kind.nesterov = s.nesterov;
    kind.weight_decay = s.weight_decay != 0;
    std::vector<double> values;
    if (kind.weight_decay) {
      kind.scalars.push_back("weight_decay");
      values.push_back(s.weight_decay);
    }
    if (momentum) {
      kind.buffers.push_back("momentum_buffer");
      kind.scalars.push_back("momentum");
      values.push_back(s.momentum);
    }
    kind.scalars.push_back("neg_lr");
    values.push_back(-s.lr);
    SkipArguments skip;
    if (s.flag) {
      kind.skip = true;
      skip = skip_arguments("SGD", *s.flag, false);
    }
    if (momentum) {
      check_lists("SGD", params, {grads, momentum_buffers});
      const std::span<const Tensor> lists[] = {params, grads, momentum_buffers};
      run_update(kind, lists, values, tables_of(cache), skip);
    } else {
      check_lists("SGD", params, {grads});
      const std::span<const Tensor> lists[] = {params, grads};
      run_update(kind, lists, values, tables_of(cache), skip);
    }
  }

  Tensor clip_grad_norm(std::span<const Tensor> grads, const ClipGradNorm& c,
                        std::unique_ptr<MultiTensorCache>& cache) override {
    for (std::size_t i = 0; i < grads.size(); ++i)
      KILN_CHECK(grads[i].device().is_cuda() && (grads[i].numel() == 0 || grads[i].is_contiguous()),
                 "clip_grad_norm_: gradient {} must be a contiguous CUDA tensor, got {} on {}", i,
                 shape_str(grads[i].shape()), grads[i].device().str());
    return clip(grads, c, tables_of(cache));
  }

  void unscale(std::span<const Tensor> grads, const Tensor& scale, const Tensor& found_inf,
               const Tensor& found_any, std::unique_ptr<MultiTensorCache>& cache) override {
    for (std::size_t i = 0; i < grads.size(); ++i)
      KILN_CHECK(grads[i].device().is_cuda() && (grads[i].numel() == 0 || grads[i].is_contiguous()),
                 "GradScaler.unscale_: gradient {} must be a contiguous CUDA tensor, got {} on {}",
                 i, shape_str(grads[i].shape()), grads[i].device().str());
    check_flag("GradScaler.unscale_", "the scale", scale, DType::f32);
    check_flag("GradScaler.unscale_", "the inf flag", found_inf, DType::f32);
    check_flag("GradScaler.unscale_", "the iteration's inf flag", found_any, DType::f32);
    codegen::unscale(grads, scale, found_inf, found_any, tables_of(cache));
  }

  void accumulate(std::span<const Tensor> grads, std::span<const Tensor> incoming,
                  std::unique_ptr<MultiTensorCache>& cache) override {
    KILN_CHECK(incoming.size() == grads.size(), "foreach_add_: {} gradients to add into {} tensors",
               incoming.size(), grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Tensor &g = grads[i], &in = incoming[i];
      bool empty = g.numel() == 0;
      KILN_CHECK(g.device().is_cuda() && in.device() == g.device() && g.shape() == in.shape() &&
                     (empty || (g.is_contiguous() && in.is_contiguous())) &&
                     is_floating(g.dtype()) && is_floating(in.dtype()),
                 "foreach_add_: the fused accumulation takes contiguous floating-point CUDA "
                 "tensors of one shape; tensor {} is {} {} on {}, its addend {} {} on {}",
                 i, dtype_name(g.dtype()), shape_str(g.shape()), g.device().str(),
                 dtype_name(in.dtype()), shape_str(in.shape()), in.device().str());
    }
    UpdateKind kind;
    kind.optimizer = "accumulate";
    kind.buffers = {"grad", "incoming"};
    const std::span<const Tensor> lists[] = {grads, incoming};
    run_update(kind, lists, {}, tables_of(cache));
  }

  void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& flags,
                    const ScaleUpdate& update) override {
    check_flag("GradScaler.update", "the scale", scale, DType::f32);
    check_flag("GradScaler.update", "the growth tracker", growth_tracker, DType::i64);
    KILN_CHECK(flags.device().is_cuda() && flags.dtype() == DType::f32 && flags.dim() == 1 &&
                   flags.numel() >= 1 && flags.is_contiguous(),
               "GradScaler.update: the inf flags must be a contiguous 1-D f32 CUDA tensor, got {} "
               "{} on {}",
               dtype_name(flags.dtype()), shape_str(flags.shape()), flags.device().str());
    codegen::update_scale(scale, growth_tracker, flags, update);
  }

 private:
  static void check_flag(const char* owner, const char* what, const Tensor& t, DType dtype) {
    KILN_CHECK(t.defined() && t.device().is_cuda() && t.dtype() == dtype && t.numel() == 1,
               "{}: {} must be a one-element {} CUDA tensor, got {}", owner, what,
               dtype_name(dtype),
               t.defined() ? fmt::format("{} {} on {}", dtype_name(t.dtype()), shape_str(t.shape()),
                                         t.device().str())
                           : "an undefined tensor");
  }

  static SkipArguments skip_arguments(const char* optimizer, const StepFlag& flag,
                                      bool counts_skips) {
    check_flag(optimizer, "the step's inf flag", flag.found_inf, DType::f32);
    SkipArguments skip;
    skip.found_inf = device_address(flag.found_inf);
    skip.count_skip = counts_skips ? 1 : 0;
    if (counts_skips) {
      check_flag(optimizer, "the count of skipped steps", flag.skipped_steps, DType::i64);
      skip.skipped_steps = device_address(flag.skipped_steps);
    }
    return skip;
  }

  // What the caller promised (runtime/multi_tensor.h), checked: a broken promise would make the
  // kernel read or write the wrong memory.
  static void check_lists(const char* optimizer, std::span<const Tensor> params,
                          std::initializer_list<std::span<const Tensor>> others) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      bool empty = p.numel() == 0;  // nothing of it is read or written
      KILN_CHECK(p.device().is_cuda() && (empty || p.is_contiguous()),
                 "{}: the fused step takes contiguous CUDA tensors; parameter {} (shape {}) is "
                 "not one",
                 optimizer, i, shape_str(p.shape()));
      for (const auto& list : others) {
        KILN_CHECK(list.size() == params.size(), "{}: {} tensors for {} parameters", optimizer,
                   list.size(), params.size());
        const Tensor& t = list[i];
        KILN_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype() && t.device() == p.device() &&
                       (empty || t.is_contiguous()),
                   "{}: parameter {} is {} {} on {} but its state or gradient is {} {} on {}{}",
                   optimizer, i, dtype_name(p.dtype()), shape_str(p.shape()), p.device().str(),
                   dtype_name(t.dtype()), shape_str(t.shape()), t.device().str(),
                   t.is_contiguous() ? "" : " (not contiguous)");
      }
    }
  }
};

const bool registered = [] {
  register_multi_tensor_backend(Device::Type::cuda, new CudaMultiTensor);  // lives until exit
  return true;
}();

}  // namespace

std::int64_t multi_tensor_table_uploads() {
  return uploads.load(std::memory_order_relaxed);
}

}  // namespace kiln::jit::codegen
