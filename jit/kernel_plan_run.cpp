// Running a plan's steps in order, each by its type (see kernel_plan.h and plan_step.h).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "graph/node_values.h"
#include "jit/accuracy_check.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/epilogue_lowering.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/skinny_gemm.h"
#include "jit/eager_ops.h"
#include "jit/kernel_plan.h"
#include "jit/plan_arena.h"
#include "jit/plan_outputs.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/dispatch.h"
#include "runtime/trace_hooks.h"

namespace kiln::jit {

namespace {

// One call's values (indexed by graph value) and what its steps share.
struct RunState {
  RunState(const KernelPlan& p, const graph::Graph& graph, std::span<const std::int64_t> symbols,
           std::size_t steps, const PlanArena::Lease& buffers)
      : plan(p),
        g(graph),
        symbol_values(symbols),
        arena(buffers),
        values(graph.values.size()),
        skip(steps, false) {}

  const KernelPlan& plan;
  std::size_t step = 0;  // the position of the step running
  const graph::Graph& g;
  std::span<const std::int64_t> symbol_values;
  const PlanArena::Lease& arena;
  std::vector<Tensor> values;
  std::vector<std::shared_ptr<Storage>> into;  // the step's buffers (codegen::OutputBuffers)
  bool check = checking_accuracy();
  std::vector<bool> skip;  // per step: a library call already computed it

  Shape concrete(const std::vector<SymExpr>& sizes) const {
    Shape shape;
    shape.reserve(sizes.size());
    for (const auto& s : sizes) {
      auto v = s.evaluate(symbol_values);
      KILN_CHECK(v.has_value(), "compile: size {} of '{}' has no value in this call", s.str(),
                 g.name);
      shape.push_back(*v);
    }
    return shape;
  }
  // The buffers of `writes` (null for a value that has none).
  codegen::OutputBuffers buffers_of(const std::vector<int>& writes) {
    into.clear();
    for (int v : writes) {
      int b = plan.buffers().buffer_of(v);
      int input = plan.buffers().written_into(v);
      into.push_back(b >= 0 ? arena.storage(b) : input >= 0 ? input_memory(input, v) : nullptr);
    }
    return into;
  }
  // The memory of the input `input` where `v`, its final value, can be written straight into
  // it (contiguous device memory of v's dtype; write_back then moves nothing), else null.
  std::shared_ptr<Storage> input_memory(int input, int v) const {
    const Tensor& t = values[input];
    if (check || !t.defined() || !t.device().is_cuda() || !t.is_contiguous() ||
        t.dtype() != g.values[v].meta.dtype)
      return nullptr;
    return std::make_shared<Storage>(t.raw_data(),
                                     static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()),
                                     t.device(), [keep = t.impl().storage](void*) {});
  }
  // The node's inputs in this call, into `operands` (reused across nodes).
  void operands_of(const graph::Node& node, std::vector<Tensor>& operands) const {
    operands.clear();
    for (int v : node.inputs) operands.push_back(values.at(v));
  }
  void check_eager(const PlanStep& step) {
    if (check)
      check_step_accuracy(g, step.nodes, values, symbol_values,
                          fmt::format("eager group {} ({})", step.group, step.note), "");
  }
};

// One node through dispatch (the op table, a signature and a backend's lookup), counted.
void dispatch_node(const graph::Node& node, std::span<const Tensor> operands, const OpAttrs& attrs,
                   RunState& s) {
  ++codegen::launch_stats().plan_dispatches;
  auto results = dispatch(node.op, operands, attrs);
  for (std::size_t k = 0; k < results.size(); ++k) s.values[node.outputs[k]] = results[k];
}

void dispatch_nodes(const PlanStep& step, RunState& s) {
  std::vector<Tensor> operands;
  for (int n : step.nodes) {
    const graph::Node& node = s.g.nodes[n];
    s.operands_of(node, operands);
    dispatch_node(node, operands, attrs_at(s.g, node, s.symbol_values), s);
  }
}

// The node's outputs at this call's sizes: from their expressions, or from the op's rule where a
// size follows the data (an opaque one).
void output_metas(const graph::Node& node, std::span<const Tensor> operands, const OpAttrs& attrs,
                  const RunState& s, std::vector<TensorMeta>& metas) {
  metas.clear();
  for (int v : node.outputs) {
    const auto& sizes = s.g.values[v].sizes;
    if (std::any_of(sizes.begin(), sizes.end(), [](const SymExpr& e) { return e.is_opaque(); })) {
      metas = infer_meta(node.op, metas_of(operands), attrs);
      return;
    }
    metas.push_back({s.concrete(sizes), s.g.values[v].meta.dtype});
  }
}

// View node `n` of `x`: new strides on the host, or for a reshape no strides of `x` express, a
// view of its contiguous copy (made by the node's kernel, the copy op's).
Tensor view_of(int n, const Tensor& x, const OpAttrs& attrs, const Shape& shape, RunState& s) {
  const graph::Node& node = s.g.nodes[n];
  if (node.op != OpId::reshape || view_strides(x.impl().shape, x.strides(), shape).ok)
    return run_view(node.op, x, attrs, shape);
  const TensorMeta copied{x.shape(), x.dtype()};
  const EagerKernel* kernel = s.plan.node_kernels().get(n, [&] {
    return find_eager_kernel(OpId::copy, {&x, 1}, {}, {&copied, 1});
  });
  Tensor c = kernel ? run_eager_kernel(*kernel, {&x, 1}, {}, {&copied, 1})[0] : Tensor();
  if (!c.defined()) {
    ++codegen::launch_stats().plan_dispatches;
    c = dispatch1(OpId::copy, {&x, 1}, {});
  }
  return run_view(OpId::reshape, c, attrs, shape);
}

// The step's nodes one by one without dispatch: views on the host, transfers as copies, other
// ops on the kernel each node found on its first call (eager_ops.h). A node with none
// dispatches, as every node does while a trace intercepts ops.
void run_nodes(const PlanStep& step, RunState& s) {
  if (active_interceptor()) return dispatch_nodes(step, s);
  std::vector<Tensor> operands;
  std::vector<TensorMeta> metas;
  for (int n : step.nodes) {
    const graph::Node& node = s.g.nodes[n];
    s.operands_of(node, operands);
    OpAttrs attrs = attrs_at(s.g, node, s.symbol_values);
    output_metas(node, operands, attrs, s, metas);
    if (op_class(node.op) == OpClass::view) {
      s.values[node.output()] = view_of(n, operands.at(0), attrs, metas[0].shape, s);
      continue;
    }
    if (op_class(node.op) == OpClass::transfer) {  // a host input's reads the plan's device copy
      s.values[node.output()] = transfer(operands.at(0), attrs.device);
      continue;
    }
    const EagerKernel* kernel = s.plan.node_kernels().get(n, [&] {
      // index_copy's result that the plan writes into the input it reads as self
      // (buffer_assignment.h): only the source's slices move.
      const bool rows = node.op == OpId::index_copy &&
                        s.plan.buffers().written_into(node.output()) == node.inputs.at(0);
      return rows ? find_index_copy_rows(operands, attrs)
                  : find_eager_kernel(node.op, operands, attrs, metas);
    });
    if (!kernel) {
      dispatch_node(node, operands, attrs, s);
      continue;
    }
    auto results = run_eager_kernel(*kernel, operands, attrs, metas);
    for (std::size_t k = 0; k < results.size(); ++k) s.values[node.outputs[k]] = results[k];
  }
}

void run_kernel(const KernelStep& k, const PlanStep& step, RunState& s) {
  const auto& writes = k.kernel.writes();
  codegen::OutputBuffers into = s.buffers_of(writes);
  auto outs =
      k.static_domain
          ? k.kernel.run(s.g, *k.static_domain, s.values, s.symbol_values, into, k.order)
          : k.kernel.run(s.g, s.concrete(k.domain), s.values, s.symbol_values, into, k.order);
  for (std::size_t i = 0; i < writes.size(); ++i) s.values[writes[i]] = std::move(outs[i]);
  if (s.check)
    check_step_accuracy(s.g, step.nodes, s.values, s.symbol_values,
                        fmt::format("kernel {} (group {})", k.kernel.name(), step.group),
                        k.kernel.expected_source());
}

// The members as one launch, or one by one where the combo refuses this call's tensors.
void run_combo(const ComboStep& c, const PlanStep& step, RunState& s) {
  std::vector<Shape> domains;
  for (const auto& k : c.members)
    domains.push_back(k.static_domain ? *k.static_domain : s.concrete(k.domain));
  auto outs =
      codegen::run_combo(s.g, *c.kernel, domains, s.values, s.buffers_of(kernel_writes(step)));
  for (std::size_t m = 0; m < c.members.size(); ++m) {
    const KernelStep& k = c.members[m];
    const auto& writes = k.kernel.writes();
    std::vector<Tensor> written =
        outs ? std::move((*outs)[m])
             : k.kernel.run(s.g, domains[m], s.values, s.symbol_values, s.buffers_of(writes));
    for (std::size_t i = 0; i < writes.size(); ++i) s.values[writes[i]] = std::move(written[i]);
  }
  if (s.check)
    for (std::size_t m = 0; m < c.members.size(); ++m)
      check_step_accuracy(s.g, c.nodes[m], s.values, s.symbol_values,
                          fmt::format("kernel {} in combo {} (group {})",
                                      c.members[m].kernel.name(), c.kernel->name, c.groups[m]),
                          c.kernel->handle.source());
}

void run_library(const LibraryStep& l, const PlanStep& step, RunState& s) {
  if (codegen::run_epilogue(s.g, *l.lowering, s.values)) {
    for (int absorbed : l.absorbs) s.skip[absorbed] = true;
    return;
  }
  dispatch_nodes(step, s);  // a per-call rule refused it: the matmul alone, eagerly
  s.check_eager(step);
}

void run_skinny(const SkinnyGemmStep& k, RunState& s) {
  codegen::run_skinny_gemm(s.g, *k.gemm, s.values, s.symbol_values, s.buffers_of(k.gemm->writes));
  if (s.check)
    check_step_accuracy(
        s.g, k.gemm->nodes, s.values, s.symbol_values,
        fmt::format("kernel {} (group {})", k.gemm->kernel.name(), k.gemm->matmul_group),
        k.gemm->kernel.source());
}

// The node on the fused kernels with its outputs placed, or (when they refuse the call) eagerly.
void run_attention(const AttentionStep& a, const PlanStep& step, RunState& s) {
  if (a.placement) {
    const graph::Node& node = s.g.nodes[a.placement->node];
    std::vector<Tensor> operands;
    s.operands_of(node, operands);
    std::vector<Shape> shapes;
    for (int v : node.outputs) shapes.push_back(s.concrete(s.g.values[v].sizes));
    if (auto placed =
            run_placed(s.g, *a.placement, operands, attrs_at(s.g, node, s.symbol_values), shapes)) {
      for (std::size_t k = 0; k < node.outputs.size(); ++k)
        s.values[node.outputs[k]] = placed->outputs[k];
      if (placed->joined.defined())
        s.values[s.g.nodes[a.placement->cat_node].output()] = placed->joined;
      s.check_eager(step);
      return;
    }
  }
  // On the fused kernels unplaced; where they refuse this call (its shapes or devices at run
  // time), the backend runs it as primitive ops, which the plan records so that the call is not
  // counted as kernels'.
  std::vector<Tensor> operands;
  for (int n : step.nodes) {
    const graph::Node& node = s.g.nodes[n];
    s.operands_of(node, operands);
    OpAttrs attrs = attrs_at(s.g, node, s.symbol_values);
    if (op_class(node.op) != OpClass::attention) {
      dispatch_node(node, operands, attrs, s);
      continue;
    }
    codegen::AttentionCall call = codegen::attention_call(node.op, operands, attrs);
    if (std::string why = codegen::attention_unsupported(call); !why.empty()) {
      s.plan.note_run_time_fallback(s.step, why);
      dispatch_node(node, operands, attrs, s);
      continue;
    }
    auto results = codegen::run_fused_attention(node.op, call, operands);
    for (std::size_t k = 0; k < results.size(); ++k) s.values[node.outputs[k]] = results[k];
  }
  s.check_eager(step);
}

void run_eager(const EagerStep& e, const PlanStep& step, RunState& s) {
  if (e.placed_value >= 0 && s.values[e.placed_value].defined()) return;
  run_nodes(step, s);
  s.check_eager(step);
}

void run_step(const PlanStep& step, RunState& s) {
  struct Visitor {
    const PlanStep& step;
    RunState& s;
    void operator()(const KernelStep& k) const { run_kernel(k, step, s); }
    void operator()(const LibraryStep& l) const { run_library(l, step, s); }
    void operator()(const AttentionStep& a) const { run_attention(a, step, s); }
    void operator()(const HostViewStep&) const { run_nodes(step, s); }
    void operator()(const EagerStep& e) const { run_eager(e, step, s); }
    void operator()(const ComboStep& c) const { run_combo(c, step, s); }
    void operator()(const SkinnyGemmStep& k) const { run_skinny(k, s); }
    void operator()(const AbsorbedStep&) const {}
    void operator()(const FallbackStep&) const {
      dispatch_nodes(step, s);
      s.check_eager(step);
    }
  };
  std::visit(Visitor{step, s}, step.action);
}

}  // namespace

namespace {

// Per step, the outputs whose producer it runs; the last list holds the graph's inputs that are
// outputs, there before any step runs. An output of no step is left for the caller to find in
// what run() returns.
std::vector<std::vector<std::size_t>> outputs_by_step(const graph::Graph& g,
                                                      const std::vector<PlanStep>& steps) {
  std::unordered_map<int, std::size_t> step_of_node;
  for (std::size_t i = 0; i < steps.size(); ++i)
    for (int n : steps[i].nodes) step_of_node[n] = i;
  std::vector<std::vector<std::size_t>> finishes(steps.size() + 1);
  for (std::size_t k = 0; k < g.outputs.size(); ++k) {
    int producer = g.values[g.outputs[k]].producer;
    auto it = step_of_node.find(producer);
    if (producer < 0)
      finishes.back().push_back(k);
    else if (it != step_of_node.end())
      finishes[it->second].push_back(k);
  }
  return finishes;
}

// The plan's steps on this call's values; `on_output` (when set) hears of each output after the
// step that produces it.
std::vector<Tensor> run_steps(const KernelPlan& plan, const graph::Graph& g,
                              std::span<const CallArg> args,
                              std::span<const std::int64_t> symbol_values,
                              const OutputReady& on_output, std::span<Tensor> given_up,
                              const PlanArena::Lease* held = nullptr) {
  const auto& steps = plan.steps();
  // Declared before the state: the values in its buffers die first, then it goes back. The
  // accuracy check recomputes a step from its inputs, which a kernel may have written over.
  PlanArena::Lease lent = held || checking_accuracy() || !plan_arena_enabled()
                              ? PlanArena::Lease{}
                              : plan.arena().lend(symbol_values);
  RunState s(plan, g, symbol_values, steps.size(), held ? *held : lent);
  auto finishes = on_output ? outputs_by_step(g, steps) : std::vector<std::vector<std::size_t>>{};
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const graph::Input& in = g.inputs[i];
    Tensor t = input_value(in, args);
    // Tensors the trace made or captured on the host are read by kernels on the device.
    if (t.defined() && t.device().is_cpu() && t.dim() > 0) t = plan.device_copy(i, t);
    s.values[in.value] = std::move(t);
  }
  for (Tensor& t : given_up) t = Tensor();
  if (on_output)
    for (std::size_t k : finishes.back()) on_output(k, s.values.at(g.outputs[k]));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    s.step = i;
    if (!s.skip[i]) {
      try {
        run_step(steps[i], s);
      } catch (const Error& e) {
        // A call a CUDA graph's capture forbids: say which step made it.
        if (!cuda::backend().is_capturing(cuda::current_stream())) throw;
        throw Error(fmt::format("step {} ({}): {}", i, steps[i].note, e.what()));
      }
    }
    if (on_output)
      for (std::size_t k : finishes[i]) on_output(k, s.values.at(g.outputs[k]));
    for (int v : steps[i].releases) s.values[v] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (int v : g.outputs) outputs.push_back(s.values.at(v));
  s.values.clear();
  return outputs;
}

}  // namespace

std::vector<Tensor> KernelPlan::run(const graph::Graph& g, std::span<const CallArg> args,
                                    std::span<const std::int64_t> symbol_values) const {
  return run_steps(*this, g, args, symbol_values, {}, {});
}

std::vector<Tensor> KernelPlan::run_in(const PlanArena::Lease& buffers, const graph::Graph& g,
                                       std::span<const CallArg> args,
                                       std::span<const std::int64_t> symbol_values) const {
  return run_steps(*this, g, args, symbol_values, {}, {}, &buffers);
}

std::vector<Tensor> run_reporting_outputs(const KernelPlan& plan, const graph::Graph& g,
                                          std::span<const CallArg> args,
                                          std::span<const std::int64_t> symbol_values,
                                          const OutputReady& on_output,
                                          std::span<Tensor> given_up) {
  return run_steps(plan, g, args, symbol_values, on_output, given_up);
}

}  // namespace kiln::jit
