// The decisions a KernelPlan is built from, one phase each (see plan_build.h).
#include "jit/plan_build.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace kiln::jit::plan_build {

namespace {

// Kinds whose nodes run one by one as eager CUDA ops.
bool runs_eagerly(graph::FusionKind kind) {
  switch (kind) {
    case graph::FusionKind::matmul:
    case graph::FusionKind::index:
    case graph::FusionKind::scan:
    case graph::FusionKind::sort:
    case graph::FusionKind::cached_attention:
    case graph::FusionKind::movement:
    case graph::FusionKind::transfer:
    case graph::FusionKind::attention:
      return true;
    case graph::FusionKind::pointwise:
    case graph::FusionKind::reduction:
    case graph::FusionKind::normalization:
    case graph::FusionKind::view:
    case graph::FusionKind::unrendered:
      return false;
  }
  return false;
}

bool renders(graph::FusionKind kind) {
  return kind == graph::FusionKind::pointwise || kind == graph::FusionKind::reduction ||
         kind == graph::FusionKind::normalization;
}

}  // namespace

std::vector<std::optional<codegen::GroupKernel>> render_kernels(const graph::Graph& g,
                                                                const graph::Partition& p,
                                                                const LibraryCalls& library) {
  std::vector<std::optional<codegen::GroupKernel>> kernels(p.groups.size());
  for (std::size_t i = 0; i < p.groups.size(); ++i)
    if (renders(p.groups[i].kind) && library.skinny_absorbed_by[i] < 0)
      kernels[i].emplace(g, p.groups[i]);
  return kernels;
}

Placements place_attention_outputs(const graph::Graph& g, const graph::Partition& p) {
  Placements result;
  result.of_group.resize(p.groups.size());
  result.joined_value.assign(p.groups.size(), -1);
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    const graph::FusionGroup& group = p.groups[i];
    if (group.kind != graph::FusionKind::attention || group.nodes.size() != 1) continue;
    auto placement = plan_output_placement(g, group.nodes[0]);
    if (!placement) continue;
    if (placement->cat_node >= 0) {
      // The cat must be a step of its own that can be skipped.
      int cat = p.group_of[placement->cat_node];
      if (!runs_eagerly(p.groups[cat].kind) || p.groups[cat].nodes.size() != 1) continue;
      result.joined_value[cat] = g.nodes[placement->cat_node].output();
    }
    result.of_group[i] = std::move(placement);
  }
  return result;
}

namespace {

// KILN_SKINNY_GEMM: 0 off, 1 every weight size, else (the default) weights of
// kSkinnyMinWeight elements and more; -1 when off.
std::int64_t skinny_min_weight() {
  const char* v = std::getenv("KILN_SKINNY_GEMM");
  if (v && std::string_view(v) == "0") return -1;
  if (v && std::string_view(v) == "1") return 0;
  return codegen::kSkinnyMinWeight;
}

// The skinny GEMMs: at decode's few rows a generated kernel that reads each weight once beats
// the library's tiles, and it takes the epilogue cuBLASLt could not (a residual, a scale).
void plan_skinny_gemms(const graph::Graph& g, const graph::Partition& p, LibraryCalls& result) {
  const std::int64_t min_weight = skinny_min_weight();
  if (min_weight < 0) return;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    if (p.groups[gi].kind != graph::FusionKind::matmul) continue;
    std::string why;
    auto gemm = codegen::plan_skinny_gemm(g, p, static_cast<int>(gi), min_weight, why);
    if (!gemm) {
      result.log.push_back(fmt::format("kiln: group {} (matmul): no skinny GEMM: {}", gi, why));
      continue;
    }
    result.log.push_back(fmt::format("kiln: group {} (matmul) -> {}", gi, gemm->note));
    if (gemm->epilogue_group >= 0) result.skinny_absorbed_by[gemm->epilogue_group] = gi;
    for (int pg : gemm->prologue_groups) result.skinny_absorbed_by[pg] = gi;
    result.skinny_of_group[gi] = std::make_shared<const codegen::SkinnyGemm>(std::move(*gemm));
  }
}

}  // namespace

LibraryCalls plan_library_calls(const graph::Graph& g, const graph::Partition& p) {
  LibraryCalls result;
  result.of_group.resize(p.groups.size());
  result.absorbed_by.assign(p.groups.size(), -1);
  result.runs_after.assign(p.groups.size(), -1);
  result.skinny_of_group.resize(p.groups.size());
  result.skinny_absorbed_by.assign(p.groups.size(), -1);
  plan_skinny_gemms(g, p, result);
  for (auto& l : codegen::plan_epilogues(g, p, result.log)) {
    if (result.skinny_of_group[l.matmul_group]) continue;  // the skinny GEMM computes it
    result.absorbed_by[l.epilogue_group] = l.matmul_group;
    if (l.widening_group >= 0) result.absorbed_by[l.widening_group] = l.matmul_group;
    if (l.epilogue_group < l.matmul_group) result.runs_after[l.epilogue_group] = l.matmul_group;
    for (int view : l.moved_views) result.runs_after[view] = l.matmul_group;
    int matmul = l.matmul_group;
    result.of_group[matmul] = std::move(l);
  }
  return result;
}

// A bias gradient's column sum that its weight gradient's call computes (BGRADB) may come
// before that matmul in the partition's order: it runs right after it instead, with the host
// views of it in between (nothing else between reads it).
std::vector<int> order_groups(const graph::Partition& p, const LibraryCalls& library) {
  std::vector<int> order;
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    if (library.runs_after[i] >= 0) continue;
    order.push_back(static_cast<int>(i));
    for (std::size_t later = 0; later < p.groups.size(); ++later)
      if (library.runs_after[later] == static_cast<int>(i))
        order.push_back(static_cast<int>(later));
  }
  return order;
}

Releases plan_releases(const graph::Graph& g, const graph::Partition& p,
                       const std::vector<int>& order) {
  std::vector<int> last_reader(g.values.size(), -1);
  for (std::size_t i = 0; i < order.size(); ++i)
    for (int v : p.groups[order[i]].inputs) last_reader[v] = static_cast<int>(i);
  std::vector<bool> returned(g.values.size(), false);
  for (int v : g.outputs) returned[v] = true;
  auto bytes = [&](int v) {
    const auto& meta = g.values[v].meta;
    return numel(meta.shape) * static_cast<std::int64_t>(itemsize(meta.dtype));
  };
  // Bytes a step allocates: what its kernel writes, or its eager nodes' results (views share).
  Releases r;
  r.at.resize(order.size());
  std::int64_t live = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const graph::FusionGroup& group = p.groups[order[i]];
    if (group.kind != graph::FusionKind::view)
      for (int v : group.outputs) live += bytes(v), r.total_bytes += bytes(v);
    r.peak_bytes = std::max(r.peak_bytes, live);
    for (int v : group.inputs)
      if (last_reader[v] == static_cast<int>(i) && !returned[v]) {
        r.at[i].push_back(v);
        int producer = g.values[v].producer;
        if (producer >= 0 && op_class(g.nodes[producer].op) != OpClass::view) live -= bytes(v);
      }
  }
  return r;
}

}  // namespace kiln::jit::plan_build
