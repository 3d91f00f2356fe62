// Rendering, tables and launches of the multi-tensor kernels (see multi_tensor.h).
#include "jit/codegen/multi_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
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

cuda::DevicePtr address(const Tensor& t) {
  return reinterpret_cast<cuda::DevicePtr>(t.raw_data());
}

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
      cuda::backend().copy_to_device(address(memory), next.data(), next.size() * sizeof(next[0]));
      words = std::move(next);
      uploads.fetch_add(1, std::memory_order_relaxed);
    }
    return address(memory);
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

// Each kernel is rendered once per process and resolved (memory, disk cache, NVRTC) at its first
// launch; the handles live as long as the process.
const KernelHandle& kernel_named(const std::string& name,
                                 const std::function<std::string()>& render) {
  static std::mutex mutex;
  static auto* handles = new std::map<std::string, KernelHandle>;
  std::lock_guard lock(mutex);
  auto it = handles->find(name);
  if (it == handles->end()) it = handles->emplace(name, KernelHandle(name, render())).first;
  return it->second;
}

long long chunks_of(std::int64_t n) {
  return (n + kMultiTensorChunk - 1) / kMultiTensorChunk;
}

// Indices of `tensors` by dtype, the groups in order of first appearance.
std::vector<std::vector<std::size_t>> dtype_groups(std::span<const Tensor> tensors) {
  std::vector<DType> dtypes;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto at = std::find(dtypes.begin(), dtypes.end(), tensors[i].dtype()) - dtypes.begin();
    if (at == static_cast<long>(dtypes.size())) {
      dtypes.push_back(tensors[i].dtype());
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
  const char* optimizer = "";        // "adamw", "sgd"
  std::vector<const char*> buffers;  // the table's pointers per row, in order
  bool momentum = false, nesterov = false, weight_decay = false;
  std::vector<const char*> scalars;  // the kernel's arguments after the table
};

KernelHandle update_kernel(const UpdateKind& kind, DType dtype) {
  std::string name = fmt::format("k_multi_tensor_{}{}{}{}_{}", kind.optimizer,
                                 kind.momentum ? "_momentum" : "", kind.nesterov ? "_nesterov" : "",
                                 kind.weight_decay ? "_decay" : "", dtype_name(dtype));
  return kernel_named(name, [&] {
    Data d, scalars(Data::type::list);
    for (const char* s : kind.scalars) scalars.push_back(Data("scalar", s));
    d.set("name", name);
    d.set("description",
          fmt::format("{} step over a list of {} tensors", kind.optimizer, dtype_name(dtype)));
    d.set("fp16", dtype == DType::f16);
    d.set("bf16", dtype == DType::bf16);
    d.set("type", storage_type(dtype));
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
    return render_template("multi_tensor.cu.mustache", d);
  });
}

// One launch per dtype group of lists[0] (the parameters); lists[k][i] is the k-th buffer of
// tensor i. `written` of them are updated in place (the first, and the ones after the gradient).
void run_update(const UpdateKind& kind, std::span<const std::span<const Tensor>> lists,
                const std::vector<double>& scalar_values, CallerTables& tables) {
  std::span<const Tensor> params = lists[0];
  for (const auto& group : dtype_groups(params)) {
    DType dtype = params[group.front()].dtype();
    std::vector<std::int64_t> words;
    std::int64_t read = 0, written = 0;
    long long chunks = 0;
    int rows = 0;
    for (std::size_t i : group) {
      std::int64_t n = params[i].numel();
      if (n == 0) continue;
      for (const auto& list : lists) words.push_back(static_cast<std::int64_t>(address(list[i])));
      words.push_back(n);
      words.push_back(chunks);
      chunks += chunks_of(n);
      ++rows;
      std::int64_t bytes = tensor_bytes(params[i]);
      read += bytes * static_cast<std::int64_t>(lists.size());
      written += bytes * static_cast<std::int64_t>(lists.size() - 1);  // all but the gradient
    }
    if (rows == 0) continue;
    const KernelHandle& k = update_kernel(kind, dtype);
    cuda::DevicePtr table = tables.by_kernel[k.name()].upload(std::move(words));
    Scalars scalars;
    scalars.f64 = dtype == DType::f64;
    for (double v : scalar_values) scalars.add(v);
    std::vector<void*> params_of_launch = {&table, &rows, &chunks};
    for (std::size_t s = 0; s < scalars.size(); ++s) params_of_launch.push_back(scalars.at(s));
    k.launch({grid_for(chunks), 1, 1}, {kBlock, 1, 1}, params_of_launch.data(), read, written);
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

KernelHandle norm_kernel(const NormKind& norm, DType acc, const std::vector<DType>& dtypes,
                         bool scale) {
  std::string prefix = fmt::format("k_clip_grad_norm_{}_{}", norm.name, dtype_name(acc));
  for (DType t : dtypes) prefix += fmt::format("_{}", dtype_name(t));
  std::string name = prefix + (scale ? "_scale" : "_reduce");
  return kernel_named(name, [&] {
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
    d.set("name_prefix", prefix);
    d.set("description", fmt::format("the {} norm of a list of gradients ({}), {}", norm.name,
                                     codes, scale ? "then their scaling" : "partials per block"));
    d.set("norm", norm.name);
    d.set("fp16", fp16);
    d.set("bf16", bf16);
    d.set("acc", acc_type);
    d.set("dtypes", list);
    d.set("dtype_codes", codes);
    d.set("chunk", std::to_string(kMultiTensorChunk));
    d.set("term", norm.term);
    d.set("combine", norm.combine);
    d.set("finish", norm.finish);
    d.set(scale ? "scale" : "reduce", true);
    return render_template("multi_tensor_norm.cu.mustache", d);
  });
}

Tensor clip(std::span<const Tensor> grads, const ClipGradNorm& clip, CallerTables& tables) {
  DType acc = DType::f32;
  std::vector<DType> dtypes;
  for (const auto& g : grads) {
    dtype_code(g.dtype());  // rejects what is not floating point
    if (std::find(dtypes.begin(), dtypes.end(), g.dtype()) == dtypes.end())
      dtypes.push_back(g.dtype());
    if (g.dtype() == DType::f64) acc = DType::f64;
  }
  std::sort(dtypes.begin(), dtypes.end());  // one kernel per set of dtypes, whatever the order
  std::vector<std::int64_t> words;
  long long chunks = 0;
  int rows = 0;
  std::int64_t bytes = 0;
  for (const auto& g : grads) {
    std::int64_t n = g.numel();
    if (n == 0) continue;
    words.insert(words.end(),
                 {static_cast<std::int64_t>(address(g)), dtype_code(g.dtype()), n, chunks});
    chunks += chunks_of(n);
    ++rows;
    bytes += tensor_bytes(g);
  }
  if (rows == 0) return zeros({}, acc, Device::cuda());  // a norm of nothing: nothing to scale
  NormKind norm = norm_kind(clip.norm_type);
  const KernelHandle& reduce = norm_kernel(norm, acc, dtypes, false);
  const KernelHandle& scale = norm_kernel(norm, acc, dtypes, true);
  cuda::DevicePtr table = tables.by_kernel[reduce.name()].upload(std::move(words));
  if (!tables.partials.defined() || tables.partials.dtype() != acc)
    tables.partials = empty({kMaxPartials}, acc, Device::cuda());
  Tensor total = empty({}, acc, Device::cuda());
  cuda::DevicePtr partials = address(tables.partials), total_ptr = address(total);
  int num_partials = static_cast<int>(std::min(chunks, kMaxPartials));
  Scalars scalars;
  scalars.f64 = acc == DType::f64;
  scalars.add(clip.norm_type);
  scalars.add(clip.max_norm);
  std::int64_t acc_bytes = static_cast<std::int64_t>(itemsize(acc));
  void* reduce_params[] = {&table, &rows, &chunks, scalars.at(0), &partials};
  reduce.launch({static_cast<unsigned>(num_partials), 1, 1}, {kBlock, 1, 1}, reduce_params, bytes,
                num_partials * acc_bytes);
  void* scale_params[] = {&table,        &rows,     &chunks,       scalars.at(0),
                          scalars.at(1), &partials, &num_partials, &total_ptr};
  scale.launch({grid_for(chunks), 1, 1}, {kBlock, 1, 1}, scale_params,
               bytes + num_partials * acc_bytes, bytes + acc_bytes);
  return total;
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
    kind.scalars = {"decay",      "beta1", "one_minus_beta1", "beta2", "one_minus_beta2",
                    "bias2_sqrt", "eps",   "step_size"};
    auto t = static_cast<double>(s.step);
    double bias1 = 1.0 - std::pow(s.beta1, t), bias2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, t));
    std::vector<double> values = {1.0 - s.lr * s.weight_decay,
                                  s.beta1,
                                  1.0 - s.beta1,
                                  s.beta2,
                                  1.0 - s.beta2,
                                  bias2_sqrt,
                                  s.eps,
                                  -s.lr / bias1};
    const std::span<const Tensor> lists[] = {params, grads, exp_avg, exp_avg_sq};
    run_update(kind, lists, values, tables_of(cache));
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
    if (momentum) {
      check_lists("SGD", params, {grads, momentum_buffers});
      const std::span<const Tensor> lists[] = {params, grads, momentum_buffers};
      run_update(kind, lists, values, tables_of(cache));
    } else {
      check_lists("SGD", params, {grads});
      const std::span<const Tensor> lists[] = {params, grads};
      run_update(kind, lists, values, tables_of(cache));
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

 private:
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
