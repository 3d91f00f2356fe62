// The CUDA backend object jit/ installs in place of runtime's memory-only one: an eager op on
// CUDA tensors runs as a one-node graph through the same fuser, templates, NVRTC and kernel
// cache as a compiled function, so no CUDA kernel is written by hand per op.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "autograd/attention.h"
#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/cached_attention.h"
#include "jit/codegen/group_kernel.h"
#include "jit/codegen/indexing.h"
#include "jit/codegen/kernel_coverage.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/codegen/matmul.h"
#include "jit/codegen/sort.h"
#include "jit/codegen/strided_copy.h"
#include "jit/eager_ops.h"
#include "runtime/attention_inputs.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/dispatch.h"
#include "runtime/grad_mode.h"
#include "runtime/log.h"

namespace kiln::jit {

// The one-node graph of an op and the kernel that runs it, kept per signature (below).
struct EagerKernel {
  graph::Graph graph;
  std::optional<codegen::GroupKernel> kernel;  // pointwise, reduction or normalization
  std::optional<codegen::MatmulKernel> matmul;
  std::optional<codegen::IndexingKernel> indexing;
  std::optional<codegen::SortKernel> sort;
  std::optional<codegen::CachedAttentionKernel> cached_attention;
  std::string decomposed;  // why cached_attention runs as primitive ops here
};

namespace {
// On KILN_LOG=fusion, once per reason: `op` ran as primitive ops, its scores materialized.
void log_decomposed(OpId op, const std::string& why) {
  if (log_enabled(LogTopic::fusion))
    log_line_once(fmt::format("kiln: {} -> primitive ops (scores materialized): {}", op, why));
}
}  // namespace

std::vector<Tensor> run_eager_kernel(const EagerKernel& plan, std::span<const Tensor> inputs,
                                     const OpAttrs& attrs, std::span<const TensorMeta> outputs) {
  if (plan.indexing && plan.indexing->in_place_rows) {
    codegen::run_index_copy_rows(*plan.indexing, attrs, inputs);
    return {inputs[0]};
  }
  if (plan.sort) return codegen::run_sort(*plan.sort, attrs, inputs[0], outputs);
  if (plan.cached_attention)
    return {codegen::run_cached_attention(*plan.cached_attention, inputs, attrs)};
  if (!plan.decomposed.empty()) {
    log_decomposed(OpId::cached_attention, plan.decomposed);
    NoGradGuard no_grad;
    return {autograd::cached_attention_decomposed(inputs[0], inputs[1], inputs[2], inputs[3],
                                                  inputs[4], attrs.scale)};
  }
  if (plan.indexing) return {codegen::run_indexing(*plan.indexing, attrs, inputs, outputs[0])};
  if (plan.matmul) {
    // cuBLASLt when its documented rules allow; the generated GEMM otherwise.
    std::string why;
    codegen::LtForward problem;
    problem.a = inputs[0];
    problem.b = inputs[1];
    if (auto r = codegen::try_lt_forward(problem, &why)) return {r->out};
    codegen::log_lt_fallback("eager matmul", why);
    return {codegen::run_matmul(*plan.matmul, inputs[0], inputs[1], outputs[0])};
  }
  std::vector<Tensor> values(plan.graph.values.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) values[plan.graph.nodes[0].inputs[i]] = inputs[i];
  // A reduction iterates over its input, a pointwise op over its output.
  Shape domain = plan.kernel->reduces() ? inputs[0].shape()
                 : outputs.empty()      ? Shape{}
                                        : outputs[0].shape;
  return plan.kernel->run(plan.graph, domain, values, {});
}

namespace {

// The one-node graph of an eager op call: every tensor input is an argument (0-dim CPU ones are
// numbers passed by value), sizes are the call's own.
graph::Graph one_node_graph(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                            std::span<const TensorMeta> outputs) {
  graph::Graph g;
  g.name = std::string(op_name(op));
  auto constant_sizes = [](const Shape& shape) {
    std::vector<SymExpr> sizes;
    for (auto s : shape) sizes.push_back(SymExpr::constant(s));
    return sizes;
  };
  graph::Node node;
  node.op = op;
  node.attrs = attrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    graph::Input in;
    in.kind = graph::InputKind::argument;
    in.arg_index = static_cast<int>(i);
    in.name = fmt::format("in{}", i);
    int v = g.add_input(in, {inputs[i].shape(), inputs[i].dtype()});
    g.values[v].sizes = constant_sizes(inputs[i].shape());
    g.values[v].device = inputs[i].device();
    node.inputs.push_back(v);
  }
  int n = g.add_node(node, outputs);
  for (int v : g.nodes[n].outputs) {
    g.values[v].sizes = constant_sizes(g.values[v].meta.shape);
    g.values[v].device = Device::cuda();
    g.outputs.push_back(v);
  }
  return g;
}

// What makes two calls of one op share a kernel: the op, its attributes, and each input's dtype,
// rank, which dims have size 1 (they decide broadcasting and whether a reduced value has the
// shape of its input) and whether it is a number. Other sizes and strides are kernel arguments.
std::string signature(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  std::string key = fmt::format("{}({})", op, attrs_str(op, attrs));
  for (const auto& t : inputs) {
    std::string ones;
    for (auto s : t.shape()) ones += s == 1 ? '1' : '.';
    key += fmt::format("|{}:{}{}", dtype_name(t.dtype()), ones, t.device().is_cpu() ? "n" : "");
  }
  // Its kernels are specialized for the head dims.
  if (op == OpId::cached_attention && inputs.size() > 2)
    key += fmt::format("|d{}/{}", inputs[0].shape().back(), inputs[2].shape().back());
  return key;
}

// attention / attention_backward as primitive ops (matmul, where, amax, exp, sum...: the scores
// materialized) where no fused kernel takes the call; `why` goes to KILN_LOG=fusion once per
// distinct line.
std::vector<Tensor> run_attention_decomposed(OpId op, std::span<const Tensor> inputs,
                                             const OpAttrs& attrs, const std::string& why) {
  log_decomposed(op, why);
  NoGradGuard no_grad;
  AttentionInputs layout = attention_inputs(op, inputs.size(), attrs);
  Tensor mask = layout.mask ? inputs[*layout.mask] : Tensor();
  autograd::ProbabilityDropout dropout;
  if (layout.seed) dropout = {attrs.dropout, inputs[*layout.seed], inputs[*layout.seed + 1]};
  if (op == OpId::attention) {
    auto r = autograd::attention_decomposed(inputs[0], inputs[1], inputs[2], mask, attrs.scale,
                                            attrs.causal, dropout);
    return {r.out, r.lse};
  }
  auto g =
      autograd::attention_gradients_decomposed(inputs[0], inputs[1], inputs[2], mask, inputs[5],
                                               Tensor(), attrs.scale, attrs.causal, dropout);
  return {g.dq, g.dk, g.dv};
}

// attention (q, k, v [, mask] [, seed, offset]) and attention_backward (q, k, v, out, lse, dout
// [, mask] [, seed, offset]) on the
// FlashAttention kernels, or as primitive ops with the kernels' reason for refusing the call.
std::vector<Tensor> run_attention(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  codegen::AttentionCall call = codegen::attention_call(op, inputs, attrs);
  if (std::string why = codegen::attention_unsupported(call); !why.empty())
    return run_attention_decomposed(op, inputs, attrs, why);
  return codegen::run_fused_attention(op, call, inputs);
}

class GeneratedCudaBackend : public CudaBackend {
 public:
  std::vector<Tensor> run(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                          std::span<const TensorMeta> outputs) override {
    if (op_class(op) == OpClass::attention) return run_attention(op, inputs, attrs);
    return run_eager_kernel(*plan_for(op, inputs, attrs, outputs), inputs, attrs, outputs);
  }

  bool index_copy_into(const Tensor& self, std::int64_t dim, const Tensor& index,
                       const Tensor& source) override {
    const std::array<Tensor, 3> inputs{self, index, source};
    OpAttrs attrs;
    attrs.dim = dim;
    auto plan = find_index_copy_rows(inputs, attrs);
    if (!plan) return false;
    run_eager_kernel(*plan, inputs, attrs, {});
    return true;
  }

  // Autograd's fused linear layers: one cuBLASLt call each, or nullopt (with the rule on
  // KILN_LOG=fusion) and the caller runs primitive ops.
  std::optional<LinearForwardResult> linear_forward(const LinearForwardCall& call) override {
    if (call.x.numel() == 0 || call.weight.numel() == 0) return std::nullopt;  // ops handle empties
    NoGradGuard no_grad;  // the weight's transposed view must not become autograd history
    codegen::LtForward problem;
    problem.a = call.x;
    problem.b = transpose(call.weight, 0, 1);
    problem.bias = call.bias;
    problem.act = call.act;
    problem.save_aux = call.save_aux;
    std::string why;
    auto r = codegen::try_lt_forward(problem, &why);
    if (!r) {
      codegen::log_lt_fallback(fmt::format("eager linear ({})", activation_name(call.act)), why);
      return std::nullopt;
    }
    return LinearForwardResult{r->out, r->aux, r->aux_ld};
  }

  std::optional<LinearBackwardResult> linear_backward(const LinearBackwardCall& call) override {
    // An empty product would leave a bias gradient unwritten: the ops write its zeros.
    if (call.a.numel() == 0 || call.b.numel() == 0) return std::nullopt;
    std::string why;
    auto r = codegen::try_lt_backward(call, &why);
    if (!r) {
      codegen::log_lt_fallback(
          fmt::format("eager linear backward ({}{})", activation_name(call.act),
                      call.bias_grad ? ", bias gradient" : ""),
          why);
      return std::nullopt;
    }
    return LinearBackwardResult{r->out, r->bias_grad};
  }

  // Host <-> device copies are counted (launch_stats()), so that tests and benchmarks see any
  // round trip through the host an op or a compiled call makes.
  // Copies into or between strided CUDA tensors (a write into a view) and casting ones take the
  // strided copy kernel; the base class copies contiguous memory only.
  void copy_into(const Tensor& dst, const Tensor& src) override {
    auto& stats = codegen::launch_stats();
    if (dst.device().is_cpu() && src.device().is_cuda()) ++stats.copies_to_host;
    if (dst.device().is_cuda() && src.device().is_cpu()) ++stats.copies_to_device;
    bool layout_differs =
        !dst.is_contiguous() ||
        (src.device().is_cuda() && (!src.is_contiguous() || src.dtype() != dst.dtype()));
    if (!dst.device().is_cuda() || !layout_differs) return CudaBackend::copy_into(dst, src);
    Tensor s = src.device().is_cuda() ? src : transfer(src, dst.device());
    if (s.dtype() != dst.dtype()) {
      OpAttrs cast;
      cast.dtype = dst.dtype();
      s = dispatch1(OpId::cast, {&s, 1}, cast);
    }
    codegen::strided_copy(dst, s);
  }

  // index_copy in place over self, by signature as plan_for's.
  std::shared_ptr<const EagerKernel> rows_plan_for(std::span<const Tensor> inputs,
                                                   const OpAttrs& attrs) {
    std::string key = "rows " + signature(OpId::index_copy, inputs, attrs);
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    auto plan = std::make_shared<EagerKernel>();
    plan->indexing = codegen::render_index_copy_rows(inputs);
    plans_.emplace(key, plan);
    return plan;
  }

  // The plan of the call's signature, made on its first call and shared by every later one.
  std::shared_ptr<const EagerKernel> plan_for(OpId op, std::span<const Tensor> inputs,
                                              const OpAttrs& attrs,
                                              std::span<const TensorMeta> outputs) {
    std::string key = signature(op, inputs, attrs);
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    auto plan = std::make_shared<EagerKernel>();
    plan->graph = one_node_graph(op, inputs, attrs, outputs);
    auto partition = graph::partition(plan->graph, {}, &codegen::kernel_coverage());
    const auto& group = partition.groups.at(0);
    // Every op the table has is rendered at every dtype its CPU kernel takes; an op that is not
    // is an error rather than a hidden trip through the host.
    KILN_CHECK(group.kind != graph::FusionKind::unrendered, "{}: no generated kernel on {}: {}", op,
               inputs.empty() ? "cuda" : inputs[0].device().str(), group.unrendered);
    if (codegen::has_indexing_kernel(op)) {
      plan->indexing = codegen::render_indexing(op, attrs, inputs, outputs[0]);
      plans_.emplace(key, plan);
      return plan;
    }
    if (group.kind == graph::FusionKind::sort) {
      plan->sort = codegen::render_sort(op, attrs, inputs[0].dtype());
      plans_.emplace(key, plan);
      return plan;
    }
    if (group.kind == graph::FusionKind::cached_attention) {
      std::int64_t head_d = inputs[0].shape().back(), head_dv = inputs[2].shape().back();
      plan->decomposed = codegen::cached_attention_unsupported(inputs[0].dtype(), head_d, head_dv);
      if (plan->decomposed.empty())
        plan->cached_attention = codegen::render_cached_attention(
            inputs[0].dtype(), static_cast<int>(head_d), static_cast<int>(head_dv));
      plans_.emplace(key, plan);
      return plan;
    }
    if (group.kind == graph::FusionKind::matmul) {
      plan->matmul = codegen::render_matmul(inputs[0].dtype(), inputs[1].dtype(), outputs[0].dtype,
                                            static_cast<int>(outputs[0].shape.size()) - 2);
      plans_.emplace(key, plan);
      return plan;
    }
    if (group.kind == graph::FusionKind::reduction ||
        group.kind == graph::FusionKind::normalization) {
      plan->kernel.emplace(plan->graph, group);
      plans_.emplace(key, plan);
      return plan;
    }
    if (group.kind != graph::FusionKind::pointwise) {
      std::vector<std::string> shapes;
      for (const auto& t : inputs) shapes.push_back(shape_str(t.shape()));
      throw Error(fmt::format(
          "{}: no generated kernel for {} ops on {} tensors yet (shapes {}); copy to the host "
          "with to(Device::cpu())",
          op, graph::fusion_kind_name(group.kind),
          inputs.empty() ? "cuda" : inputs[0].device().str(), fmt::join(shapes, ", ")));
    }
    plan->kernel.emplace(plan->graph, group);
    plans_.emplace(key, plan);
    return plan;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const EagerKernel>> plans_;
};

GeneratedCudaBackend& generated_backend() {
  static GeneratedCudaBackend backend;
  return backend;
}

const bool registered = [] {
  register_backend(Device::Type::cuda, &generated_backend(), 1);
  return true;
}();

}  // namespace

std::shared_ptr<const EagerKernel> find_eager_kernel(OpId op, std::span<const Tensor> inputs,
                                                     const OpAttrs& attrs,
                                                     std::span<const TensorMeta> outputs) {
  OpClass c = op_class(op);
  if (c == OpClass::attention || c == OpClass::view || c == OpClass::transfer) return nullptr;
  // Where dispatch would run it: on the device of its tensors that are not numbers (0-dim CPU
  // ones), or for a random op the device it names.
  bool on_cuda = is_random(op) && attrs.device.is_cuda();
  for (const auto& t : inputs) {
    if (!t.defined() || (!t.device().is_cuda() && t.dim() > 0)) return nullptr;
    on_cuda = on_cuda || (!is_random(op) && t.device().is_cuda());
  }
  return on_cuda ? generated_backend().plan_for(op, inputs, attrs, outputs) : nullptr;
}

std::shared_ptr<const EagerKernel> find_index_copy_rows(std::span<const Tensor> inputs,
                                                        const OpAttrs& attrs) {
  if (inputs.size() != 3) return nullptr;
  for (const auto& t : inputs)
    if (!t.defined() || !t.device().is_cuda()) return nullptr;
  if (inputs[0].dtype() != inputs[2].dtype() || inputs[1].dim() != 1) return nullptr;
  // A source or index in self's memory would be read while the kernel writes it.
  for (std::size_t k = 1; k < inputs.size(); ++k)
    if (inputs[k].impl().storage == inputs[0].impl().storage) return nullptr;
  return generated_backend().rows_plan_for(inputs, attrs);
}

}  // namespace kiln::jit
