// The reverse-mode engine. A node's inputs come from nodes created before it, so running the
// reachable nodes by decreasing sequence number is a topological order; leaf accumulators have
// no successors and run last, so the leaves whose .grad takes an in-place update are added all at
// once at the end (one launch per dtype group on CUDA).
#include "autograd/engine.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autocast.h"
#include "autograd/foreach.h"
#include "autograd/grad_ready_tracker.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "runtime/grad_mode.h"
#include "runtime/trace_hooks.h"

namespace kiln::autograd {

namespace {

std::vector<Node*> execution_order(const std::vector<Node*>& roots) {
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    nodes.push_back(n);
    for (const auto& e : n->next_edges())
      if (e.valid()) stack.push_back(e.fn.get());
  }
  std::sort(nodes.begin(), nodes.end(), [](Node* a, Node* b) {
    bool acc_a = dynamic_cast<AccumulateGrad*>(a) != nullptr;
    bool acc_b = dynamic_cast<AccumulateGrad*>(b) != nullptr;
    if (acc_a != acc_b) return acc_b;
    return a->sequence_nr() > b->sequence_nr();
  });
  return nodes;
}

// Incoming gradients per node, one slot per forward output.
using Buffers = ReadyTracker::Buffers;

void add_to(Buffers& buffers, const Edge& edge, const Tensor& g) {
  auto [it, inserted] = buffers.try_emplace(edge.fn.get());
  if (inserted) it->second.resize(edge.fn->num_outputs());
  Tensor& slot = it->second.at(edge.input_nr);
  slot = slot.defined() ? add(slot, g) : g;
}

// Runs the graph; when `capture` is given, gradients reaching those nodes are stored there
// instead of being accumulated into leaves.
void execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
             bool create_graph, std::unordered_map<Node*, Tensor>* capture) {
  KILN_CHECK_AS(AutogradError, roots.size() == grads.size(),
                "backward: {} outputs but {} gradients", roots.size(), grads.size());
  GradModeGuard mode(create_graph);
  // Gradients follow the dtypes the forward chose; a derivative rule is never autocast itself.
  AutocastOff no_autocast;
  Buffers buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> root_nodes;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KILN_CHECK_AS(AutogradError, r.requires_grad(),
                  "backward: output {} (shape {}) does not require grad and has no grad_fn", i,
                  shape_str(r.shape()));
    Edge e = gradient_edge(r);
    keep_alive.push_back(e.fn);
    root_nodes.push_back(e.fn.get());
    add_to(buffers, e, grads[i]);
  }
  // The .grad tensors updated in place after the graph has run, and what each takes.
  std::vector<Tensor> in_place_grads, in_place_incoming;
  std::vector<Node*> order = execution_order(root_nodes);
  ReadyTracker ready(!capture && !active_interceptor(), order, buffers);
  for (Node* node : order) {
    auto it = buffers.find(node);
    if (it == buffers.end()) {
      ready.visited(node);
      continue;
    }
    std::vector<Tensor> g = std::move(it->second);
    buffers.erase(it);
    if (capture) {
      if (auto c = capture->find(node); c != capture->end()) c->second = g.at(0);
      if (dynamic_cast<AccumulateGrad*>(node)) continue;
    } else if (auto* acc = dynamic_cast<AccumulateGrad*>(node)) {
      if (Tensor target = acc->in_place_target(g.at(0)); target.defined()) {
        in_place_grads.push_back(std::move(target));
        in_place_incoming.push_back(g.at(0));
        continue;
      }
    }
    ready.running(node);
    // The graph built under create_graph refers back to this one (PyTorch's retain_graph
    // defaults to create_graph for the same reason).
    std::vector<Tensor> next =
        retain_graph || create_graph ? node->apply(g) : node->apply_releasing(std::move(g));
    ready.running(nullptr);
    const auto& edges = node->next_edges();
    for (std::size_t i = 0; i < edges.size() && i < next.size(); ++i)
      if (edges[i].valid() && next[i].defined()) add_to(buffers, edges[i], next[i]);
    ready.visited(node);
  }
  if (!in_place_grads.empty()) foreach_add_(in_place_grads, in_place_incoming);
  if (ready.active()) ready.finished();
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph) {
  execute(roots, grads, retain_graph, create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool create_graph, bool materialize_unused) {
  std::vector<Tensor> seeds = grad_outputs;
  if (seeds.empty())
    for (const auto& o : outputs) {
      KILN_CHECK_AS(AutogradError, o.numel() == 1,
                    "grad: a gradient can be implied only for one-element outputs; got shape {}",
                    shape_str(o.shape()));
      seeds.push_back(ones_like(o));
    }
  std::unordered_map<Node*, Tensor> capture;
  std::vector<Edge> edges;
  for (const auto& in : inputs) {
    Edge e = gradient_edge(in);
    KILN_CHECK_AS(AutogradError, e.valid(), "grad: an input of shape {} does not require grad",
                  shape_str(in.shape()));
    KILN_CHECK_AS(AutogradError, in.is_leaf(),
                  "grad: only leaf inputs are supported (got a non-leaf of shape {})",
                  shape_str(in.shape()));
    capture.emplace(e.fn.get(), Tensor());
    edges.push_back(e);
  }
  execute(outputs, seeds, retain_graph, create_graph, &capture);
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = capture[edges[i].fn.get()];
    result.push_back(g.defined() || !materialize_unused ? g : zeros_like(inputs[i]));
  }
  return result;
}

}  // namespace kiln::autograd
