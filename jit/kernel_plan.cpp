// Running a partition's groups in order (see kernel_plan.h).
#include "jit/kernel_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "graph/node_values.h"
#include "jit/accuracy_check.h"
#include "jit/codegen/epilogue_lowering.h"
#include "jit/codegen/kernel_cache.h"
#include "runtime/dispatch.h"
#include "runtime/log.h"

namespace kiln::jit {

KernelPlan::KernelPlan(const graph::Graph& g, const graph::Partition& partition) {
  for (std::size_t i = 0; i < partition.groups.size(); ++i) {
    const graph::FusionGroup& group = partition.groups[i];
    Step step;
    step.group = static_cast<int>(i);
    step.nodes = group.nodes;
    step.domain = group.domain;
    Shape sizes;
    for (const auto& d : group.domain)
      if (d.is_constant())
        if (auto v = d.evaluate({})) sizes.push_back(*v);
    if (sizes.size() == group.domain.size()) step.static_domain = std::move(sizes);
    switch (group.kind) {
      case graph::FusionKind::pointwise:
      case graph::FusionKind::reduction:
      case graph::FusionKind::normalization:
        step.kernel.emplace(g, group);
        step.kind = Step::Kind::kernel;
        step.note = step.kernel->description(group);
        break;
      case graph::FusionKind::view:
        step.kind = Step::Kind::host;
        step.note = fmt::format("host view {}", group.name);
        break;
      // The fuser made it a group of its own because no template renders it.
      case graph::FusionKind::unrendered:
        step.kind = Step::Kind::fallback;
        step.note = fmt::format("fallback {}: {}", group.name, group.unrendered);
        break;
      case graph::FusionKind::matmul:
      case graph::FusionKind::index:
      case graph::FusionKind::scan:
      case graph::FusionKind::movement:
      case graph::FusionKind::transfer:
      case graph::FusionKind::attention:
        step.kind = Step::Kind::eager;
        step.note = fmt::format("eager {} ({} ops have no generated kernel yet)", group.name,
                                graph::fusion_kind_name(group.kind));
        break;
    }
    steps_.push_back(std::move(step));
  }
  plan_placements(g);
  // ---- cuBLASLt epilogues (jit/codegen/epilogue_lowering.h) ----
  std::vector<std::string> lines;
  for (auto& l : codegen::plan_epilogues(g, partition, lines)) {
    steps_[l.epilogue_group].absorbed_by = l.matmul_group;
    if (l.epilogue_group < l.matmul_group) steps_[l.epilogue_group].runs_after = l.matmul_group;
    for (int view : l.moved_views) steps_[view].runs_after = l.matmul_group;
    steps_[l.epilogue_group].note += " [computed by the cuBLASLt epilogue of group " +
                                     std::to_string(l.matmul_group) + " unless it falls back]";
    steps_[l.matmul_group].note = "library " + l.note;
    steps_[l.matmul_group].lt = std::make_shared<const codegen::EpilogueLowering>(std::move(l));
  }
  // A bias gradient's column sum that its weight gradient's call computes (BGRADB) may come
  // before that matmul in the partition's order: it runs right after it instead, with the host
  // views of it in between (nothing else between reads it).
  std::vector<Step> ordered;
  for (auto& step : steps_) {
    if (step.runs_after >= 0) continue;
    int group = step.group;
    ordered.push_back(std::move(step));
    for (auto& later : steps_)
      if (later.runs_after == group) ordered.push_back(std::move(later));
  }
  steps_ = std::move(ordered);
  if (log_enabled(LogTopic::fusion))
    for (const auto& line : lines) log_line(line);
  plan_releases(g, partition);
  // Compile (or load from the disk cache) every kernel now rather than at each first launch:
  // one progress bar for the lot, and the first call's launches run back to back.
  std::vector<const codegen::KernelHandle*> kernels;
  for (const auto& s : steps_)
    if (s.kernel) kernels.push_back(&s.kernel->expected_kernel());
  if (!kernels.empty()) codegen::prepare_kernels(kernels);
}

void KernelPlan::plan_placements(const graph::Graph& g) {
  std::vector<int> step_of_node(g.nodes.size(), -1);
  for (std::size_t i = 0; i < steps_.size(); ++i)
    for (int n : steps_[i].nodes) step_of_node[n] = static_cast<int>(i);
  for (auto& step : steps_) {
    if (step.kind != Step::Kind::eager || step.nodes.size() != 1) continue;
    auto placement = plan_output_placement(g, step.nodes[0]);
    if (!placement) continue;
    if (placement->cat_node >= 0) {
      Step& cat = steps_[step_of_node[placement->cat_node]];
      if (cat.kind != Step::Kind::eager || cat.nodes.size() != 1) continue;
      cat.joins_placed = g.nodes[placement->cat_node].output();
      cat.note += " [made by the attention backward's placed gradients unless it falls back]";
    }
    step.note += " [" + placement->str(g) + "]";
    step.placement = std::move(placement);
  }
}

void KernelPlan::plan_releases(const graph::Graph& g, const graph::Partition& partition) {
  std::vector<int> last_reader(g.values.size(), -1);
  for (std::size_t i = 0; i < steps_.size(); ++i)
    for (int v : partition.groups[steps_[i].group].inputs) last_reader[v] = static_cast<int>(i);
  std::vector<bool> returned(g.values.size(), false);
  for (int v : g.outputs) returned[v] = true;
  auto bytes = [&](int v) {
    const auto& meta = g.values[v].meta;
    return numel(meta.shape) * static_cast<std::int64_t>(itemsize(meta.dtype));
  };
  // Bytes a step allocates: what its kernel writes, or its eager nodes' results (views share).
  std::int64_t live = 0;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    const graph::FusionGroup& group = partition.groups[step.group];
    if (step.kind != Step::Kind::host)
      for (int v : group.outputs) live += bytes(v), total_bytes_ += bytes(v);
    peak_bytes_ = std::max(peak_bytes_, live);
    for (int v : group.inputs)
      if (last_reader[v] == static_cast<int>(i) && !returned[v]) {
        step.releases.push_back(v);
        int p = g.values[v].producer;
        if (p >= 0 && op_class(g.nodes[p].op) != OpClass::view) live -= bytes(v);
      }
  }
}

int KernelPlan::kernel_count() const {
  int n = 0;
  for (const auto& s : steps_) n += s.kind == Step::Kind::kernel && s.absorbed_by < 0;
  return n;
}

int KernelPlan::kernel_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += s.kind == Step::Kind::kernel || s.kind == Step::Kind::eager;
  return n;
}

int KernelPlan::fallback_steps() const {
  int n = 0;
  for (const auto& s : steps_) n += s.kind == Step::Kind::fallback;
  return n;
}

std::string KernelPlan::str() const {
  std::string out;
  for (const auto& s : steps_) out += fmt::format("  group {}: {}\n", s.group, s.note);
  return out;
}

std::vector<Tensor> KernelPlan::run(const graph::Graph& g, std::span<const CallArg> args,
                                    std::span<const std::int64_t> symbol_values) const {
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs) {
    Tensor t = input_value(in, args);
    // Tensors the trace made or captured on the host are read by kernels on the device.
    if (t.defined() && t.device().is_cpu() && t.dim() > 0) t = t.to(Device::cuda());
    values[in.value] = std::move(t);
  }
  auto concrete = [&](const std::vector<SymExpr>& sizes) {
    Shape shape;
    shape.reserve(sizes.size());
    for (const auto& s : sizes) {
      auto v = s.evaluate(symbol_values);
      KILN_CHECK(v.has_value(), "compile: size {} of '{}' has no value in this call", s.str(),
                 g.name);
      shape.push_back(*v);
    }
    return shape;
  };
  bool check = checking_accuracy();
  std::vector<bool> lt_done(steps_.size(), false);
  for (const Step& step : steps_) {
    auto release = [&] {
      for (int v : step.releases) values[v] = Tensor();
    };
    if (step.absorbed_by >= 0 && lt_done[step.absorbed_by]) {
      release();
      continue;
    }
    if (step.lt && codegen::run_epilogue(g, *step.lt, values)) {
      lt_done[step.group] = true;
      release();
      continue;
    }
    if (step.kernel) {
      auto outs = step.static_domain
                      ? step.kernel->run(g, *step.static_domain, values, symbol_values)
                      : step.kernel->run(g, concrete(step.domain), values, symbol_values);
      const auto& writes = step.kernel->writes();
      for (std::size_t i = 0; i < writes.size(); ++i) values[writes[i]] = std::move(outs[i]);
      if (check)
        check_step_accuracy(g, step.nodes, values, symbol_values,
                            fmt::format("kernel {} (group {})", step.kernel->name(), step.group),
                            step.kernel->expected_source());
      release();
      continue;
    }
    if (step.joins_placed >= 0 && values[step.joins_placed].defined()) {
      release();
      continue;
    }
    std::vector<Tensor> operands;
    if (step.placement) {
      const graph::Node& node = g.nodes[step.placement->node];
      for (int v : node.inputs) operands.push_back(values.at(v));
      std::vector<Shape> shapes;
      for (int v : node.outputs) shapes.push_back(concrete(g.values[v].sizes));
      if (auto placed =
              run_placed(g, *step.placement, operands, attrs_at(g, node, symbol_values), shapes)) {
        for (std::size_t k = 0; k < node.outputs.size(); ++k)
          values[node.outputs[k]] = placed->outputs[k];
        if (placed->joined.defined())
          values[g.nodes[step.placement->cat_node].output()] = placed->joined;
        if (check)
          check_step_accuracy(g, step.nodes, values, symbol_values,
                              fmt::format("eager group {} ({})", step.group, step.note), "");
        release();
        continue;
      }
    }
    for (int n : step.nodes) {
      const graph::Node& node = g.nodes[n];
      operands.clear();
      for (int v : node.inputs) operands.push_back(values.at(v));
      auto results = dispatch(node.op, operands, attrs_at(g, node, symbol_values));
      for (std::size_t k = 0; k < results.size(); ++k) values[node.outputs[k]] = results[k];
    }
    if (check && step.kind != Step::Kind::host)
      check_step_accuracy(g, step.nodes, values, symbol_values,
                          fmt::format("eager group {} ({})", step.group, step.note), "");
    release();
  }
  std::vector<Tensor> outputs;
  for (int v : g.outputs) outputs.push_back(values.at(v));
  return outputs;
}

}  // namespace kiln::jit
