// Gathering an entry's facts (see report_collect.h).
#include "jit/report/report_collect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "cache/disk_cache.h"
#include "cache/kernel_key.h"
#include "cache/kernel_store.h"
#include "jit/codegen/codegen_version.h"
#include "jit/report/graph_svg.h"
#include "runtime/cuda/backend.h"

namespace kiln::jit::report {

using graph::FusionKind;

std::string node_line(const graph::Graph& g, int node) {
  const graph::Node& n = g.nodes[node];
  std::vector<std::string> outs, ins;
  for (int v : n.outputs) outs.push_back(fmt::format("%{}: {}", v, value_type_str(g.values[v])));
  for (int v : n.inputs) ins.push_back(fmt::format("%{}", v));
  return fmt::format("{} = {}({})", fmt::join(outs, ", "), n.op, fmt::join(ins, ", "));
}

namespace {

std::int64_t value_bytes(const graph::Graph& g, int v) {
  const auto& meta = g.values[v].meta;
  return numel(meta.shape) * static_cast<std::int64_t>(itemsize(meta.dtype));
}

// What the kernel cache recorded of the kernel, found by the key a launch resolves it under.
KernelFacts kernel_facts(const std::string& name, const std::string& source) {
  KernelFacts k;
  k.name = name;
  k.source = source;
  try {
    cache::KernelRequest request{name,
                                 source,
                                 nvrtc::Target::for_device(cuda::backend().properties(0)),
                                 {},
                                 codegen::kCodegenVersion};
    k.key = cache::key_of(request);
    k.arch = request.target.arch();
    if (const cache::DiskCache* disk = cache::process_disk_cache()) {
      cache::DiskCache::Loaded entry = disk->load(k.key, false);
      if (entry.status == cache::DiskCache::Status::hit) {
        k.registers = entry.meta.registers;
        k.spill_bytes = entry.meta.spill_bytes;
        k.shared_bytes = entry.meta.shared_bytes;
        k.compile_ms = entry.meta.compile_ms;
      }
    }
  } catch (const Error&) {
    // No device to key for: the source is still shown.
  }
  return k;
}

std::string step_kind(const PlanStep& s, const graph::FusionGroup& group) {
  if (s.as<KernelStep>()) return "kernel";
  if (s.as<LibraryStep>()) return "cuBLASLt";
  if (s.as<SkinnyGemmStep>()) return "skinny GEMM";
  if (s.as<AbsorbedStep>()) return "absorbed";
  if (s.as<AttentionStep>()) return "attention";
  if (s.as<HostViewStep>()) return "host view";
  if (s.as<FallbackStep>()) return "fallback";
  return group.kind == FusionKind::matmul ? "matmul" : "eager";
}

std::string domain_str(const graph::FusionGroup& g) {
  std::vector<std::string> parts;
  for (const auto& s : g.domain) parts.push_back(s.str());
  std::string out = fmt::format("[{}]", fmt::join(parts, ", "));
  if (!g.reduce_dims.empty())
    out += fmt::format(" rows over dims [{}]", fmt::join(g.reduce_dims, ", "));
  return out;
}

PartitionFacts partition_facts(const AotPartition& part) {
  PartitionFacts p;
  const graph::Graph& fw = part.forward;
  std::size_t first = fw.outputs.size() - part.saved.size();
  for (std::size_t i = 0; i < part.saved.size(); ++i) {
    int v = fw.outputs[first + i];
    p.saved.push_back({fmt::format("%{}", v), graph::value_type_str(fw.values[v]),
                       part.saved[i].why, part.saved[i].bytes, part.saved[i].is_input});
  }
  p.activation_bytes = part.saved_activation_bytes();
  p.recomputed_count = part.recomputed_nodes;
  // The backward's arguments are the saved values, then the tangents: a node that reads no
  // tangent, directly or not, computes again from what was saved.
  const graph::Graph& bw = part.backward;
  std::vector<bool> from_tangent(bw.values.size(), false);
  for (const auto& in : bw.inputs)
    if (in.kind == graph::InputKind::argument &&
        in.arg_index >= static_cast<int>(part.saved.size()))
      from_tangent[in.value] = true;
  for (std::size_t n = 0; n < bw.nodes.size(); ++n) {
    bool reads = false;
    for (int v : bw.nodes[n].inputs) reads = reads || from_tangent[v];
    for (int v : bw.nodes[n].outputs) from_tangent[v] = reads;
    if (!reads) p.recomputed.push_back(node_line(bw, static_cast<int>(n)));
  }
  for (std::size_t n = 0; n < fw.nodes.size(); ++n)
    if (fw.nodes[n].checkpoint != 0)
      p.checkpoint_regions[fw.nodes[n].checkpoint].push_back(node_line(fw, static_cast<int>(n)));
  return p;
}

std::vector<std::string> dynamic_dims(const GuardSet& guards) {
  std::vector<std::string> out;
  for (const auto& t : guards.tensors)
    for (std::size_t d = 0; d < t.symbols.size(); ++d)
      if (t.symbols[d] >= 0)
        out.push_back(
            fmt::format("{} dim {} (s{}, traced at {})", t.name, d, t.symbols[d], t.sizes[d]));
  return out;
}

}  // namespace

GraphFacts collect_graph(const graph::Graph& g, const graph::Partition& fusion, std::string title,
                         const std::string& id) {
  GraphFacts f;
  f.title = std::move(title);
  f.id = id;
  f.nodes = static_cast<int>(g.nodes.size());
  for (const auto& group : fusion.groups) {
    GroupFacts gf{std::string(graph::fusion_kind_name(group.kind)),
                  group.name,
                  domain_str(group),
                  {},
                  group.kind == FusionKind::matmul,
                  group.kind == FusionKind::attention};
    for (int n : group.nodes) gf.nodes.push_back(node_line(g, n));
    f.groups.push_back(std::move(gf));
  }
  for (const auto& e : fusion.unfused)
    f.cuts.push_back({e.producer, e.consumer, fmt::format("%{}", e.value),
                      fmt::format("{}", g.nodes[e.consumer_node].op), e.reason});
  f.text = fusion.str(g);
  render_pictures(g, fusion, f);
  return f;
}

ProgramFacts collect_program(const graph::Graph& g, const graph::Partition& fusion,
                             const KernelPlan& plan, std::string title, const std::string& id) {
  ProgramFacts p;
  p.title = title;
  p.graph = collect_graph(g, fusion, title + " graph", id);
  p.peak_bytes = plan.peak_bytes();
  const ArenaLayout layout = plan.traced_layout();
  if (!plan.buffers().empty()) p.arena = plan.buffers().summary(layout);
  std::set<int> absorbed;
  for (const auto& s : plan.steps())
    if (const auto* l = s.as<LibraryStep>()) absorbed.insert(l->absorbs.begin(), l->absorbs.end());
  for (std::size_t i = 0; i < plan.steps().size(); ++i) {
    const PlanStep& s = plan.steps()[i];
    const graph::FusionGroup& group = fusion.groups[s.group];
    StepFacts st;
    st.kind = step_kind(s, group);
    st.group = s.group;
    st.note = s.note;
    st.buffers = plan.buffers().step_note(i, layout);
    st.absorbed = absorbed.contains(static_cast<int>(i));
    if (const auto* fb = s.as<FallbackStep>()) st.reason = fb->reason;
    if (s.as<AttentionStep>() && !s.nodes.empty())
      st.kernel_prefix =
          g.nodes[s.nodes.front()].op == OpId::attention ? "k_attention_fwd_" : "k_attention_bwd_";
    for (int n : s.nodes) st.nodes.push_back(node_line(g, n));
    if (st.kind != "host view") {
      std::set<int> touched(group.inputs.begin(), group.inputs.end());
      touched.insert(group.outputs.begin(), group.outputs.end());
      for (int v : touched) st.ideal_bytes += value_bytes(g, v);
    }
    if (const auto* k = s.as<KernelStep>()) {
      const auto& handle = k->kernel.expected_kernel();
      // Kernels of the same code (sources that differ in comments only: the layers of a
      // model) are one kernel, as the cache keys them.
      std::string code = cache::kernel_code(handle.source());
      for (std::size_t j = 0; j < p.kernels.size() && st.kernel < 0; ++j)
        if (cache::kernel_code(p.kernels[j].source) == code) st.kernel = static_cast<int>(j);
      if (st.kernel < 0) {
        st.kernel = static_cast<int>(p.kernels.size());
        p.kernels.push_back(kernel_facts(handle.name(), handle.source()));
      }
    }
    p.steps.push_back(std::move(st));
  }
  return p;
}

EntryFacts collect_entry(const EntryParts& parts) {
  EntryFacts e;
  e.index = parts.index;
  e.reason = parts.reason;
  e.guards = parts.guards.str();
  e.dynamic_dims = dynamic_dims(parts.guards);
  e.compile_ms = parts.compile_ms;
  if (parts.aot) {
    e.training = true;
    e.runs_as = "forward and backward plans (compiled for training)";
    e.partition = partition_facts(parts.aot->partition());
    e.programs.push_back(collect_program(parts.aot->partition().forward,
                                         parts.aot->forward_fusion(), parts.aot->forward_plan(),
                                         "forward", fmt::format("e{}f", parts.index)));
    e.programs.push_back(collect_program(parts.aot->partition().backward,
                                         parts.aot->backward_fusion(), parts.aot->backward_plan(),
                                         "backward", fmt::format("e{}b", parts.index)));
  } else if (parts.plan) {
    e.runs_as = "generated kernels";
    e.programs.push_back(collect_program(parts.graph, parts.fusion, *parts.plan, "inference",
                                         fmt::format("e{}p", parts.index)));
  } else {
    e.runs_as = parts.aot_fallback.empty()
                    ? "node by node (the reference executor: inputs not on a CUDA device)"
                    : "node by node through autograd: " + parts.aot_fallback;
    ProgramFacts p;
    p.title = "traced";
    p.graph =
        collect_graph(parts.graph, parts.fusion, "traced graph", fmt::format("e{}t", parts.index));
    e.programs.push_back(std::move(p));
  }
  return e;
}

}  // namespace kiln::jit::report
