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
  int expanded_bias = -1, expanded_from = -1, pre_activation = -1;
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
      pre_activation = cur;
      cur = node.output();
      continue;
    }
    if (node.op == OpId::gelu && reads(cur))
      return "exact-erf gelu: cuBLASLt's GELU epilogue is the tanh approximation (only gelu(x, "
             "tanh) lowers)";
    return fmt::format("the epilogue group also computes {}", op_name(node.op));
  }
  auto writes = [&](int v) {
    return std::find(group.outputs.begin(), group.outputs.end(), v) != group.outputs.end();
  };
  // GELU's pre-activation (matmul + bias) may be written too, as the call's aux output; ReLU's
  // aux is a bitmask, not the value.
  if (group.outputs.size() == 2 && writes(cur) && out.act == Activation::gelu_tanh &&
      out.bias_value >= 0 && writes(pre_activation))
    out.aux_value = pre_activation;
  else if (group.outputs.size() != 1 || group.outputs[0] != cur)
    return "the epilogue group writes values besides the activation's output (and GELU's "
           "pre-activation)";
  if (out.bias_value < 0 && out.act == Activation::none) return "nothing to fuse";
  out.out_value = cur;
  out.note = fmt::format("matmul + {}", fmt::join(ops, " + "));
  return "";
}

// The reduction group summing dY over its rows, where matmul node `mm` computes dYᵀ @ X with
// dY's 2-D form [rows, N] (a weight gradient): -1 when there is none it can take over. Its
// result must be read by no group between the two, as the sum then runs at the matmul.
int bias_grad_group(const graph::Graph& g, const graph::Partition& p, int mm,
                    EpilogueLowering& out) {
  const graph::Node& node = g.nodes[mm];
  auto producer = [&](int v) -> const graph::Node* {
    int n = g.values[v].producer;
    return n >= 0 ? &g.nodes[n] : nullptr;
  };
  const graph::Node* t = producer(node.inputs[0]);
  if (!t || t->op != OpId::permute || !graph::swaps_last_two(t->attrs.dims) ||
      g.values[t->output()].meta.shape.size() != 2)
    return -1;
  // Reshapes keep the row-major order: two of one tensor that both end in N hold the same rows.
  auto unreshaped = [&](int v) {
    for (const graph::Node* r = producer(v); r && r->op == OpId::reshape; r = producer(v))
      v = r->inputs[0];
    return v;
  };
  const int dy2 = t->inputs[0];  // [rows, N]
  const std::int64_t n = g.values[dy2].meta.shape[1];
  const int dy = unreshaped(dy2);
  const int mm_group = p.group_of[mm];
  for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const graph::Node& sum = g.nodes[ni];
    const auto& in_shape = g.values[sum.inputs.empty() ? 0 : sum.inputs[0]].meta.shape;
    if (sum.op != OpId::sum || in_shape.empty() || in_shape.back() != n ||
        unreshaped(sum.inputs[0]) != dy || numel(g.values[sum.output()].meta.shape) != n)
      continue;
    std::vector<std::int64_t> rows;
    for (std::size_t d = 0; d + 1 < in_shape.size(); ++d)
      rows.push_back(static_cast<std::int64_t>(d));
    auto dims = normalize_dims(sum.attrs.dims, static_cast<std::int64_t>(in_shape.size()), "sum");
    std::sort(dims.begin(), dims.end());
    const int rg = p.group_of[ni];
    const graph::FusionGroup& group = p.groups[rg];
    if (dims != rows || group.nodes.size() != 1 || group.outputs.size() != 1) continue;
    // What is read between the two must be host views of the sum (which move with it).
    std::vector<int> moved, moved_values = {sum.output()};
    bool read_between = false;
    for (int x = std::min(rg, mm_group) + 1; x <= std::max(rg, mm_group); ++x) {
      const graph::FusionGroup& reader = p.groups[x];
      bool reads = std::any_of(reader.inputs.begin(), reader.inputs.end(), [&](int v) {
        return std::find(moved_values.begin(), moved_values.end(), v) != moved_values.end();
      });
      if (!reads) continue;
      if (reader.kind != graph::FusionKind::view || rg > mm_group) read_between = true;
      moved.push_back(x);
      moved_values.insert(moved_values.end(), reader.outputs.begin(), reader.outputs.end());
    }
    if (read_between) continue;
    out.bias_grad_value = sum.output();
    out.moved_views = std::move(moved);
    return rg;
  }
  return -1;
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
    if (!why.empty() && (dt == DType::f32 || dt == DType::f16 || dt == DType::bf16)) {
      EpilogueLowering grad;
      grad.matmul_group = static_cast<int>(gi);
      grad.matmul_node = mm;
      grad.out_value = mm_out;
      grad.epilogue_group = bias_grad_group(g, p, mm, grad);
      if (grad.epilogue_group >= 0) {
        grad.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        grad.note =
            fmt::format("cuBLASLt BGRADB: weight gradient + bias gradient (groups {} and {})", gi,
                        grad.epilogue_group);
        log.push_back(fmt::format("kiln: group {} (matmul) + group {} -> {}", gi,
                                  grad.epilogue_group, grad.note));
        result.push_back(std::move(grad));
        continue;
      }
    }
    if (!why.empty()) {
      // The plain product still goes to cuBLASLt when the eager matmul's rules allow.
      if (eg >= 0 && p.groups[eg].kind == graph::FusionKind::pointwise)
        log.push_back(
            fmt::format("kiln: group {} (matmul) -> GEMM + generated epilogue kernel "
                        "(group {}): {}",
                        gi, eg, why));
      continue;
    }
    l.epilogue = forward_epilogue(l.bias_value >= 0, l.act, l.aux_value >= 0);
    l.note = fmt::format("cuBLASLt {}: {} (groups {} and {})",
                         cuda::blaslt::epilogue_name(l.epilogue), l.note, gi, eg);
    log.push_back(fmt::format("kiln: group {} (matmul) + group {} -> {}", gi, eg, l.note));
    result.push_back(std::move(l));
  }
  return result;
}

bool run_epilogue(const graph::Graph& g, const EpilogueLowering& l, std::vector<Tensor>& values) {
  const graph::Node& mm = g.nodes[l.matmul_node];
  if (l.bias_grad_value >= 0) {
    LtBackward problem;
    problem.a = values.at(mm.inputs[0]);
    problem.b = values.at(mm.inputs[1]);
    problem.bias_grad = true;
    std::string why;
    auto r = try_lt_backward(problem, &why);
    if (!r) {
      log_lt_fallback(fmt::format("group {} ({})", l.matmul_group, l.note), why);
      return false;
    }
    values[l.out_value] = std::move(r->out);
    values[l.bias_grad_value] = r->bias_grad.reshape(g.values[l.bias_grad_value].meta.shape);
    return true;
  }
  LtForward problem;
  problem.a = values.at(mm.inputs[0]);
  problem.b = values.at(mm.inputs[1]);
  if (l.bias_value >= 0) problem.bias = values.at(l.bias_value);
  problem.act = l.act;
  problem.save_aux = l.aux_value >= 0;
  std::string why;
  auto r = try_lt_forward(problem, &why);
  if (!r) {
    log_lt_fallback(fmt::format("group {} ({})", l.matmul_group, l.note), why);
    return false;
  }
  values[l.out_value] = std::move(r->out);
  if (l.aux_value >= 0) values[l.aux_value] = std::move(r->aux);
  return true;
}

}  // namespace kiln::jit::codegen
