// Matching matmul + bias + activation in a partition (see epilogue_lowering.h).
#include "jit/codegen/epilogue_lowering.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::jit::codegen {
namespace {

// Why the pointwise group `eg` after matmul node `mm` is not a cuBLASLt epilogue ("" if it is);
// fills `out` when it is.
std::string match(const graph::Graph& g, const graph::Partition& p, int mm, int eg,
                  EpilogueLowering& out) {
  const graph::FusionGroup& group = p.groups[eg];
  int cur = g.nodes[mm].output();
  const auto& mm_meta = g.values[cur].meta;
  const std::int64_t n = mm_meta.shape.empty() ? 0 : mm_meta.shape.back();
  auto outside = [&](int v) {
    int producer = g.values[v].producer;
    return producer < 0 || p.group_of[producer] != eg;
  };
  std::vector<std::string> ops;
  int expanded_bias = -1, expanded_from = -1;
  for (int ni : group.nodes) {
    const graph::Node& node = g.nodes[ni];
    ops.emplace_back(op_name(node.op));
    auto reads = [&](int v) {
      return std::find(node.inputs.begin(), node.inputs.end(), v) != node.inputs.end();
    };
    if (node.op == OpId::expand && outside(node.inputs[0]) &&
        g.values[node.inputs[0]].meta.shape == Shape{n} && expanded_bias < 0) {
      expanded_bias = node.output(), expanded_from = node.inputs[0];
      continue;
    }
    if (node.op == OpId::add && out.bias_value < 0 && out.act == Activation::none && reads(cur)) {
      int other = node.inputs[0] == cur ? node.inputs[1] : node.inputs[0];
      if (other == expanded_bias) other = expanded_from;
      if (!outside(other) || g.values[other].meta.shape != Shape{n})
        return fmt::format("add of {} is not a bias of the {} output features",
                           value_type_str(g.values[other]), n);
      if (g.values[other].meta.dtype != mm_meta.dtype)
        return fmt::format("bias dtype {} differs from the matmul's {}",
                           dtype_name(g.values[other].meta.dtype), dtype_name(mm_meta.dtype));
      out.bias_value = other;
      cur = node.output();
      continue;
    }
    if ((node.op == OpId::relu || node.op == OpId::gelu_tanh) && out.act == Activation::none &&
        reads(cur)) {
      out.act = node.op == OpId::relu ? Activation::relu : Activation::gelu_tanh;
      cur = node.output();
      continue;
    }
    if (node.op == OpId::gelu && reads(cur))
      return "exact-erf gelu: cuBLASLt's GELU epilogue is the tanh approximation (only gelu(x, "
             "tanh) lowers)";
    return fmt::format("the epilogue group also computes {}", op_name(node.op));
  }
  if (group.outputs.size() != 1 || group.outputs[0] != cur)
    return "the epilogue group writes values besides the activation's output";
  if (out.bias_value < 0 && out.act == Activation::none) return "nothing to fuse";
  out.out_value = cur;
  out.note = fmt::format("matmul + {}", fmt::join(ops, " + "));
  return "";
}

}  // namespace

std::vector<EpilogueLowering> plan_epilogues(const graph::Graph& g, const graph::Partition& p,
                                             std::vector<std::string>& log) {
  std::vector<EpilogueLowering> result;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    const graph::FusionGroup& group = p.groups[gi];
    if (group.kind != graph::FusionKind::matmul || group.nodes.size() != 1) continue;
    int mm = group.nodes[0];
    if (g.nodes[mm].op != OpId::matmul) continue;
    int mm_out = g.nodes[mm].output();
    // The one group that reads the product, and how often.
    std::vector<int> readers;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
      for (int v : g.nodes[ni].inputs)
        if (v == mm_out) readers.push_back(static_cast<int>(ni));
    bool returned = std::find(g.outputs.begin(), g.outputs.end(), mm_out) != g.outputs.end();
    std::string why;
    int eg = readers.empty() ? -1 : p.group_of[readers[0]];
    if (readers.size() != 1 || returned)
      why = "the product is read by more than its epilogue";
    else if (p.groups[eg].kind != graph::FusionKind::pointwise)
      why = fmt::format("its consumer is a {} group", graph::fusion_kind_name(p.groups[eg].kind));
    EpilogueLowering l;
    l.matmul_group = static_cast<int>(gi);
    l.epilogue_group = eg;
    l.matmul_node = mm;
    if (why.empty()) why = match(g, p, mm, eg, l);
    DType dt = g.values[mm_out].meta.dtype;
    if (why.empty() && dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
      why = fmt::format("dtype {}: cuBLASLt epilogues take f32 (TF32 on request), f16 and bf16",
                        dtype_name(dt));
    if (!why.empty()) {
      // The plain product still goes to cuBLASLt when the eager matmul's rules allow.
      if (eg >= 0 && p.groups[eg].kind == graph::FusionKind::pointwise)
        log.push_back(
            fmt::format("kiln: group {} (matmul) -> GEMM + generated epilogue kernel "
                        "(group {}): {}",
                        gi, eg, why));
      continue;
    }
    l.epilogue = forward_epilogue(l.bias_value >= 0, l.act, false);
    l.note = fmt::format("cuBLASLt {}: {} (groups {} and {})",
                         cuda::blaslt::epilogue_name(l.epilogue), l.note, gi, eg);
    log.push_back(fmt::format("kiln: group {} (matmul) + group {} -> {}", gi, eg, l.note));
    result.push_back(std::move(l));
  }
  return result;
}

bool run_epilogue(const graph::Graph& g, const EpilogueLowering& l, std::vector<Tensor>& values) {
  const graph::Node& mm = g.nodes[l.matmul_node];
  LtForward problem;
  problem.a = values.at(mm.inputs[0]);
  problem.b = values.at(mm.inputs[1]);
  if (l.bias_value >= 0) problem.bias = values.at(l.bias_value);
  problem.act = l.act;
  std::string why;
  auto r = try_lt_forward(problem, &why);
  if (!r) {
    log_lt_fallback(fmt::format("group {} ({})", l.matmul_group, l.note), why);
    return false;
  }
  values[l.out_value] = std::move(r->out);
  return true;
}

}  // namespace kiln::jit::codegen
