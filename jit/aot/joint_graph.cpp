// Re-recording a forward graph with autograd history and tracing its backward.
#include "jit/aot/joint_graph.h"

#include <optional>

#include "autograd/engine.h"
#include "autograd/record.h"
#include "graph/node_values.h"
#include "graph/pipeline.h"
#include "graph/tracer.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {

using graph::InputKind;

JointGraph build_joint_graph(const graph::Graph& forward, std::span<const CallArg> args) {
  JointGraph joint;
  joint.num_args = static_cast<int>(args.size());
  joint.num_forward_outputs = forward.outputs.size();
  graph::Tracer tracer(forward.name);
  {
    std::vector<Tensor> values(forward.values.size());
    std::vector<Tensor> leaves, roots, tangents;
    InterceptorScope scope(&tracer);
    tracer.set_records_history(true);
    GradModeGuard grad_on(true);
    for (const auto& in : forward.inputs) {
      graph::Input copy = in;
      Tensor real = graph::input_value(in, args);
      Tensor p = tracer.add_input(std::move(copy), forward.values[in.value]);
      // Constants are made by the trace; nothing outside can want their gradient.
      if (in.kind != InputKind::constant && real.defined() && real.requires_grad()) {
        p.impl().requires_grad = true;
        leaves.push_back(p);
        joint.grad_targets.push_back(in);
      }
      values[in.value] = std::move(p);
    }
    for (const auto& n : forward.nodes) {
      std::vector<Tensor> operands;
      for (int v : n.inputs) operands.push_back(values[v]);
      std::optional<NoGradGuard> no_grad;
      if (!n.grad) no_grad.emplace();
      std::optional<graph::CheckpointScope> checkpoint;
      if (n.checkpoint) checkpoint.emplace(n.checkpoint);
      std::vector<Tensor> results = autograd::record_outputs(n.op, std::move(operands), n.attrs);
      for (std::size_t k = 0; k < results.size(); ++k) values[n.outputs[k]] = std::move(results[k]);
    }
    std::vector<Tensor> outputs;
    for (std::size_t k = 0; k < forward.outputs.size(); ++k) {
      const Tensor& out = values[forward.outputs[k]];
      outputs.push_back(out);
      bool needs = out.requires_grad();
      joint.output_requires_grad.push_back(needs);
      joint.tangent_arg.push_back(needs ? joint.num_args + static_cast<int>(tangents.size()) : -1);
      if (!needs) continue;
      graph::Input in;
      in.kind = InputKind::argument;
      in.arg_index = joint.tangent_arg.back();
      in.name = fmt::format("grad_out{}", k);
      graph::Value like = tracer.graph().values[out.impl().trace_value];
      like.strides = StrideClass::contiguous;  // the compiled node hands tangents contiguous
      roots.push_back(out);
      tangents.push_back(tracer.add_input(std::move(in), like));
    }
    // The backward as the engine runs it eagerly: grad mode off, the graph freed as it goes.
    // An input no gradient reaches gets none, as eagerly (its .grad stays undefined).
    std::vector<Tensor> grads;
    if (!roots.empty()) grads = autograd::grad(roots, leaves, tangents, false, false, false);
    std::vector<graph::Input> reached;
    for (std::size_t j = 0; j < grads.size(); ++j) {
      if (!grads[j].defined()) continue;
      outputs.push_back(grads[j]);
      reached.push_back(joint.grad_targets[j]);
    }
    joint.grad_targets = std::move(reached);
    tracer.set_outputs(outputs);
  }  // every placeholder (and the autograd nodes they own) is gone: constants are sole-owned
  tracer.classify_lifted();
  joint.read_symbols = tracer.read_symbols();
  joint.read_opaque = tracer.read_opaque();
  joint.graph = std::move(tracer.graph());
  joint.graph.symbols = forward.symbols;
  // Grad mode only mattered while recording: the joint graph never runs through autograd, and
  // a backward node recomputing a forward one must be free to merge with it.
  for (auto& n : joint.graph.nodes) n.grad = true;
  graph::run_pipeline(joint.graph, graph::Pipeline::joint);
  return joint;
}

}  // namespace kiln::jit
