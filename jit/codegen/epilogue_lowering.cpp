// Matching matmul + bias + activation in a partition (see epilogue_lowering.h).
#include "jit/codegen/epilogue_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "graph/subgraph.h"
#include "jit/reference_executor.h"
#include "runtime/factories.h"

namespace kiln::jit::codegen {
namespace {

// Why `cast` (reading the product, after its bias and activation if any) is not the call's
// output type: only f16/bf16 products widen, to f32, which cuBLASLt writes from its f32
// accumulator; a 16-bit bias with an f32 D is not a combination it takes.
std::string widening_failure(const graph::Graph& g, const graph::Node& cast,
                             const EpilogueLowering& out) {
  const DType from = g.values[cast.inputs[0]].meta.dtype, to = g.values[cast.output()].meta.dtype;
  if ((from != DType::f16 && from != DType::bf16) || to != DType::f32)
    return fmt::format("a cast from {} to {}: a call widens only f16/bf16 products to f32",
                       dtype_name(from), dtype_name(to));
  if (out.bias_value >= 0)
    return fmt::format("a cast to f32 after a {} bias: cuBLASLt's bias is D's type",
                       dtype_name(from));
  return "";
}

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
    if (out.out_dtype)
      return fmt::format("the epilogue group computes {} after the cast to {}", op_name(node.op),
                         dtype_name(*out.out_dtype));
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
    if (node.op == OpId::cast && reads(cur)) {
      if (std::string why = widening_failure(g, node, out); !why.empty()) return why;
      out.out_dtype = g.values[node.output()].meta.dtype;
      cur = node.output();
      continue;
    }
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
  if (out.out_dtype && out.aux_value >= 0)
    return "GELU's pre-activation is written too: cuBLASLt writes the aux in D's type, and the "
           "cast widens D";
  if (out.bias_value < 0 && out.act == Activation::none && !out.out_dtype) return "nothing to fuse";
  out.out_value = cur;
  out.note = fmt::format("matmul + {}", fmt::join(ops, " + "));
  return "";
}

// The value group `group` writes for the column sum `db`: db itself, or db through reshapes and
// one cast from f16/bf16 to f32 (autocast's bias gradient), those nodes in `tail`; -1 when the
// group does anything else with it.
int bias_grad_written(const graph::Graph& g, const graph::FusionGroup& group, int db,
                      std::vector<int>& tail) {
  auto writes = [&](int v) {
    return std::find(group.outputs.begin(), group.outputs.end(), v) != group.outputs.end();
  };
  bool widened = false;
  int v = db;
  while (!writes(v)) {
    int reader = -1;
    for (int n : group.nodes)
      if (std::find(g.nodes[n].inputs.begin(), g.nodes[n].inputs.end(), v) !=
          g.nodes[n].inputs.end()) {
        if (reader >= 0) return -1;
        reader = n;
      }
    if (reader < 0) return -1;
    const graph::Node& r = g.nodes[reader];
    const DType from = g.values[v].meta.dtype, to = g.values[r.output()].meta.dtype;
    if (r.op == OpId::cast && !widened && (from == DType::f16 || from == DType::bf16) &&
        to == DType::f32)
      widened = true;
    else if (r.op != OpId::reshape)
      return -1;
    tail.push_back(reader);
    v = r.output();
  }
  return v == db || widened ? v : -1;
}

// The group that only casts product `v` (f16/bf16) to f32, the product's one reader, or -1.
int widening_cast_group(const graph::Graph& g, const graph::Partition& p, int v) {
  int reader = -1;
  for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int in : g.nodes[ni].inputs)
      if (in == v) {
        if (reader >= 0) return -1;
        reader = static_cast<int>(ni);
      }
  if (reader < 0 || std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return -1;
  const graph::Node& cast = g.nodes[reader];
  const int cg = p.group_of[reader];
  const DType from = g.values[v].meta.dtype;
  if (cast.op != OpId::cast || (from != DType::f16 && from != DType::bf16) ||
      g.values[cast.output()].meta.dtype != DType::f32 || p.groups[cg].nodes.size() != 1 ||
      p.groups[cg].kind != graph::FusionKind::pointwise)
    return -1;
  return cg;
}

// The reduction group summing dY over its rows, where matmul node `mm` computes dYᵀ @ X with
// dY's 2-D form [rows, N] (a weight gradient): -1 when there is none it can take over. The sum
// then runs at the matmul, so only host views of it may be read between the two (they move
// with it).
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
    if (sum.op != OpId::sum) continue;
    const auto& in_shape = g.values[sum.inputs[0]].meta.shape;
    const auto& sum_meta = g.values[sum.output()].meta;
    if (in_shape.empty() || in_shape.back() != n || unreshaped(sum.inputs[0]) != dy ||
        numel(sum_meta.shape) != n || sum_meta.dtype != g.values[node.output()].meta.dtype)
      continue;
    std::vector<std::int64_t> rows;
    for (std::size_t d = 0; d + 1 < in_shape.size(); ++d)
      rows.push_back(static_cast<std::int64_t>(d));
    auto dims = normalize_dims(sum.attrs.dims, static_cast<std::int64_t>(in_shape.size()), "sum");
    std::sort(dims.begin(), dims.end());
    const int rg = p.group_of[ni];
    const graph::FusionGroup& group = p.groups[rg];
    if (dims != rows || group.outputs.size() != 1) continue;
    // The sum alone, or (autocast) reshaped and cast to f32 when the product is cast too.
    std::vector<int> tail;
    const int written = bias_grad_written(g, group, sum.output(), tail);
    if (written < 0 || group.nodes.size() != 1 + tail.size()) continue;
    int widening = -1;
    if (written != sum.output()) {
      widening = widening_cast_group(g, p, node.output());
      if (widening < 0) continue;
    }
    std::vector<int> moved, moved_values = {written};
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
    out.bias_grad_value = written;
    out.moved_views = std::move(moved);
    if (widening >= 0) {
      out.widening_group = widening;
      out.out_value = p.groups[widening].outputs[0];
      out.out_dtype = DType::f32;
    }
    return rg;
  }
  return -1;
}

// Whether reduction group `eg` after matmul node `mm` (dh = dY @ W) computes exactly
// dz = dh * gelu_tanh'(z) for a z from outside, and db = dz summed over its rows: the backward
// of matmul + bias + gelu(x, tanh), which cuBLASLt's DGELU_BGRAD computes in the call. The
// derivative rule's arithmetic is checked by running the group's pointwise part on probe values
// against the closed form, so any way of writing it matches and nothing else does.
bool match_gelu_grad(const graph::Graph& g, const graph::Partition& p, int mm, int eg,
                     EpilogueLowering& out) {
  const graph::FusionGroup& group = p.groups[eg];
  const int dh = g.nodes[mm].output();
  const graph::Value& dh_value = g.values[dh];
  const auto& shape = dh_value.meta.shape;
  if (group.kind != graph::FusionKind::reduction || group.outputs.size() != 2 || shape.empty() ||
      dh_value.is_symbolic())
    return false;
  int sum = -1;
  for (int n : group.nodes)
    if (g.nodes[n].op == OpId::sum) {
      if (sum >= 0) return false;
      sum = n;
    }
  if (sum < 0) return false;
  const int dz = g.nodes[sum].inputs[0], db = g.nodes[sum].output();
  std::vector<int> tail;
  const int db_written = bias_grad_written(g, group, db, tail);
  if (db_written < 0) return false;
  std::vector<int> pointwise;
  for (int n : group.nodes) {
    if (n == sum || std::find(tail.begin(), tail.end(), n) != tail.end()) continue;
    if (op_class(g.nodes[n].op) != OpClass::elementwise) return false;
    pointwise.push_back(n);
  }
  const std::int64_t n = shape.back();
  std::vector<std::int64_t> rows(shape.size() - 1);
  for (std::size_t d = 0; d < rows.size(); ++d) rows[d] = static_cast<std::int64_t>(d);
  auto dims =
      normalize_dims(g.nodes[sum].attrs.dims, static_cast<std::int64_t>(shape.size()), "sum");
  std::sort(dims.begin(), dims.end());
  auto writes = [&](int v) {
    return std::find(group.outputs.begin(), group.outputs.end(), v) != group.outputs.end();
  };
  if (!writes(dz) || g.values[dz].meta.shape != shape || dims != rows ||
      numel(g.values[db].meta.shape) != n)
    return false;
  // The pointwise part reads dh, one z of dh's shape and dtype, and constants.
  int z = -1;
  graph::SubgraphInputs inputs;
  for (int v : group.inputs) {
    const graph::Input* in = g.input_of(v);
    if (in && in->kind == graph::InputKind::constant) {
      if (numel(g.values[v].meta.shape) != 1) return false;  // the probe is 1-D
      graph::Input on_host = *in;                            // the probe runs on the CPU
      on_host.tensor = in->tensor.to(Device::cpu());
      inputs.emplace_back(v, std::move(on_host));
      continue;
    }
    if (v == dh) continue;
    if (z >= 0 || g.values[v].meta.shape != shape || g.values[v].meta.dtype != dh_value.meta.dtype)
      return false;
    z = v;
  }
  if (z < 0) return false;
  graph::Input dh_in, z_in;
  dh_in.arg_index = 0, dh_in.name = "dh";
  z_in.arg_index = 1, z_in.name = "z";
  inputs.emplace_back(dh, dh_in);
  inputs.emplace_back(z, z_in);
  std::vector<int> outputs = {dz};
  graph::Graph probe = graph::subgraph(g, inputs, pointwise, outputs);
  // Elementwise with scalar constants: the same arithmetic over a short 1-D probe, whatever the
  // layer's size. z from -6 to 6 (both tails and the curve between), dh varying independently.
  const std::int64_t count = 97 * 13;
  for (auto& v : probe.values)
    if (v.meta.shape == shape) {
      v.meta.shape = {count};
      v.sizes = {SymExpr::constant(count)};
    }
  std::vector<double> zs(static_cast<std::size_t>(count)), hs(zs.size());
  for (std::int64_t i = 0; i < count; ++i) {
    zs[i] = -6.0 + 12.0 * static_cast<double>(i % 97) / 96.0;
    hs[i] = 0.5 + static_cast<double>(i / 97) / 7.0;
  }
  Tensor zt = from_vector(zs).to(dh_value.meta.dtype);
  Tensor ht = from_vector(hs).to(dh_value.meta.dtype);
  std::array<CallArg, 2> args{CallArg{true, &ht, 0.0}, CallArg{true, &zt, 0.0}};
  std::vector<double> got = run_reference(probe, args, {})[0].to_vector<double>();
  std::vector<double> z_used = zt.to_vector<double>(), h_used = ht.to_vector<double>();
  const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
  const double tolerance = dh_value.meta.dtype == DType::f32 ? 1e-5 : 2e-2;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double x = z_used[i], t = std::tanh(k * (x + c * x * x * x));
    double want = h_used[i] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x));
    if (!(std::abs(got[i] - want) <= tolerance * (1 + std::abs(want)))) return false;
  }
  out.act = Activation::gelu_tanh;
  out.aux_value = z;
  out.out_value = dz;
  out.bias_grad_value = db;
  if (db_written != db) out.bias_grad_widened_value = db_written;
  out.backward = true;
  return true;
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
    // A bare widening cast gives way to a bias-gradient form, which takes the product as it is.
    const bool bare_cast =
        why.empty() && l.out_dtype && l.bias_value < 0 && l.act == Activation::none;
    if ((!why.empty() || bare_cast) &&
        (dt == DType::f32 || dt == DType::f16 || dt == DType::bf16)) {
      EpilogueLowering grad;
      grad.matmul_group = static_cast<int>(gi);
      grad.matmul_node = mm;
      grad.out_value = mm_out;
      grad.epilogue_group = bias_grad_group(g, p, mm, grad);
      if (grad.epilogue_group >= 0) {
        grad.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        grad.note = fmt::format(
            "cuBLASLt BGRADB: weight gradient + bias gradient (groups {} and {}{})", gi,
            grad.epilogue_group,
            grad.widening_group >= 0
                ? fmt::format(", and the cast of group {}, writing f32", grad.widening_group)
                : "");
      } else if (readers.size() == 1 && !returned && match_gelu_grad(g, p, mm, eg, grad)) {
        grad.epilogue_group = eg;
        grad.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
        grad.note = fmt::format(
            "cuBLASLt DGELU_BGRAD: matmul * gelu_tanh'(aux) + bias gradient (groups {} and {})", gi,
            eg);
      }
      if (grad.epilogue_group >= 0) {
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
    l.note = fmt::format(
        "cuBLASLt {}: {}{} (groups {} and {})", cuda::blaslt::epilogue_name(l.epilogue), l.note,
        l.out_dtype ? fmt::format(", writing {}", dtype_name(*l.out_dtype)) : "", gi, eg);
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
    problem.out_dtype = l.out_dtype;
    if (l.backward) {
      problem.act = l.act;
      problem.aux = values.at(l.aux_value);
      problem.aux_ld =
          problem.aux.defined() && problem.aux.dim() > 0 ? problem.aux.shape().back() : 0;
    }
    std::string why;
    auto r = try_lt_backward(problem, &why);
    if (!r) {
      log_lt_fallback(fmt::format("group {} ({})", l.matmul_group, l.note), why);
      return false;
    }
    values[l.out_value] = std::move(r->out);
    if (l.bias_grad_widened_value >= 0)  // the cuBLASLt bias gradient is D's 16-bit type
      values[l.bias_grad_widened_value] =
          r->bias_grad.to(DType::f32).reshape(g.values[l.bias_grad_widened_value].meta.shape);
    else
      values[l.bias_grad_value] = r->bias_grad.reshape(g.values[l.bias_grad_value].meta.shape);
    return true;
  }
  LtForward problem;
  problem.a = values.at(mm.inputs[0]);
  problem.b = values.at(mm.inputs[1]);
  if (l.bias_value >= 0) problem.bias = values.at(l.bias_value);
  problem.act = l.act;
  problem.save_aux = l.aux_value >= 0;
  problem.out_dtype = l.out_dtype;
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
