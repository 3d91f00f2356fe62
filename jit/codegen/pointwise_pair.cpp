// The pointwise vector path's pair function (see pointwise_pair.h).
#include "jit/codegen/pointwise_pair.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_values.h"
#include "runtime/dispatch.h"

namespace kiln::jit::codegen {
namespace {

// f16 and bf16 round from f32 two values per instruction (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32)
// where each value alone takes one: the vector path then computes elements two at a time.
bool is_half_dtype(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

}  // namespace

std::optional<ElementPair> element_pair(const graph::Graph& g, const PointwiseKernel& k,
                                        const std::vector<int>& steps,
                                        const std::set<int>& computed) {
  // The packed pair type, its rounding from two floats, and its halves back as floats.
  auto packed = [](DType t) { return t == DType::bf16 ? "__nv_bfloat162" : "__half2"; };
  auto round2 = [](DType t) {
    return t == DType::bf16 ? "__floats2bfloat162_rn" : "__floats2half2_rn";
  };
  auto from_halves = [](DType t) {
    return t == DType::bf16 ? "__halves2bfloat162" : "__halves2half2";
  };
  std::map<int, std::string> pairs;  // value -> its rounded pair, which stores and ops reuse
  bool any = false;
  for (int v : k.writes) any = any || is_half_dtype(g.values[v].meta.dtype);
  for (int n : steps) any = any || is_half_dtype(g.values[g.nodes[n].output()].meta.dtype);
  if (!any) return std::nullopt;
  auto lane = [&](int v, int l) {
    if (computed.count(v)) return fmt::format("{}_{}", var(v), l);
    return literal(g.values[v].meta.dtype, g.input_of(v)->tensor.item());
  };
  // A pair's lane l as f32: a bf16 is the top half of an f32 (a shift or a mask of the 32-bit
  // word, no unpacking mov), an f16 converts.
  auto lane_of = [](DType t, const std::string& word, const std::string& pair, int l) {
    if (t == DType::bf16)
      return l == 0 ? fmt::format("kiln_bf16_low({})", word)
                    : fmt::format("kiln_bf16_high({})", word);
    return l == 0 ? fmt::format("__low2float({})", pair) : fmt::format("__high2float({})", pair);
  };
  ElementPair p;
  // An f16/bf16 read a vector at a time comes as the 32-bit word of its two lanes (w).
  std::vector<bool> word_read(k.reads.size());
  for (std::size_t i = 0; i < k.reads.size(); ++i) {
    DType t = g.values[k.reads[i]].meta.dtype;
    word_read[i] = is_half_dtype(t) && !k.splat[i];
    if (word_read[i]) {
      p.params.push_back(fmt::format("unsigned r{}_w", i));
      p.args.push_back(fmt::format("reinterpret_cast<const unsigned*>(r{}.v)[j / 2]", i));
      std::string word = fmt::format("r{}_w", i), pair = fmt::format("r{}_p", i);
      if (t != DType::bf16)
        p.lines.push_back(
            fmt::format("const {} {} = kiln_pair_of<{}>({});", packed(t), pair, packed(t), word));
      for (int l = 0; l < 2; ++l)
        p.lines.push_back(fmt::format("const {} {} = {};", register_type(t), lane(k.reads[i], l),
                                      lane_of(t, word, pair, l)));
      continue;
    }
    p.params.push_back(fmt::format("{0} r{1}_0, {0} r{1}_1", storage_type(t), i));
    p.args.push_back(k.splat[i] ? fmt::format("r{0}, r{0}", i)
                                : fmt::format("r{0}.v[j], r{0}.v[j + 1]", i));
    for (int l = 0; l < 2; ++l)
      p.lines.push_back(fmt::format("const {} {} = {};", register_type(t), lane(k.reads[i], l),
                                    load_expr(t, fmt::format("r{}_{}", i, l))));
  }
  for (std::size_t i = 0; i < k.scalars.size(); ++i) {
    DType t = g.values[k.scalars[i]].meta.dtype;
    p.params.push_back(fmt::format("{} s{}", register_type(t), i));
    p.args.push_back(fmt::format("s{}", i));
    for (int l = 0; l < 2; ++l)
      p.lines.push_back(
          fmt::format("const {} {} = s{};", register_type(t), lane(k.scalars[i], l), i));
  }
  for (std::size_t i = 0; i < k.writes.size(); ++i) {
    DType t = g.values[k.writes[i]].meta.dtype;
    if (is_half_dtype(t)) {  // stored as the 32-bit word of the rounded pair
      p.params.push_back(fmt::format("unsigned& w{}_w", i));
      p.args.push_back(fmt::format("reinterpret_cast<unsigned*>(w{}.v)[j / 2]", i));
      continue;
    }
    p.params.push_back(fmt::format("{0}& w{1}_0, {0}& w{1}_1", storage_type(t), i));
    p.args.push_back(fmt::format("w{0}.v[j], w{0}.v[j + 1]", i));
  }
  if (k.checks_errors) {
    p.params.push_back("long long* kiln_error");
    p.args.push_back("kiln_error");
  }
  for (int n : steps) {
    const graph::Node& node = g.nodes[n];
    std::vector<DType> in_types;
    for (int v : node.inputs) in_types.push_back(g.values[v].meta.dtype);
    int out = node.output();
    DType out_type = g.values[out].meta.dtype;
    DType t = compute_dtype_of(node.op, in_types, out_type);
    std::string what = fmt::format("'{}': {}", k.name, node_text(g, n));
    // Rounded together: computed in f32 (not a comparison) and stored as f16/bf16.
    bool together = is_half_dtype(out_type) && t == DType::f32;
    std::array<std::string, 2> exprs;
    for (int l = 0; l < 2; ++l) {
      std::vector<std::string> args;
      for (int v : node.inputs) args.push_back(lane(v, l));
      exprs[l] =
          node_expr(node.op, node.attrs, in_types, args, together ? DType::f32 : out_type, what);
    }
    // add, sub and mul of two out_type values (read, or rounded in pairs): one packed instruction
    // (add.rn.bf16x2) for the pair, the result of f32 arithmetic and one rounding (f32 has more
    // than twice the 16-bit formats' precision + 2 bits, so rounding twice gives the same value).
    const char* packed_op = node.op == OpId::add   ? "__hadd2_rn"
                            : node.op == OpId::sub ? "__hsub2_rn"
                            : node.op == OpId::mul ? "__hmul2_rn"
                                                   : nullptr;
    std::vector<std::string> halves;  // each input as a packed pair: read so, or rounded so
    for (int v : node.inputs) {
      if (g.values[v].meta.dtype != out_type) break;
      auto r = std::find(k.reads.begin(), k.reads.end(), v);
      auto rounded = pairs.find(v);
      if (r != k.reads.end()) {
        auto i = r - k.reads.begin();
        if (word_read[i])
          halves.push_back(fmt::format("kiln_pair_of<{}>(r{}_w)", packed(out_type), i));
        else
          halves.push_back(fmt::format("{}(r{}_0, r{}_1)", from_halves(out_type), i, i));
      } else if (rounded != pairs.end()) {
        halves.push_back(rounded->second);
      } else {
        break;
      }
    }
    if (together) {
      std::string pair = var(out) + "_p", word = var(out) + "_w";
      p.lines.push_back(fmt::format("const {} {} = {}({}, {});", packed(out_type), pair,
                                    packed_op && halves.size() == 2 ? packed_op : round2(out_type),
                                    packed_op && halves.size() == 2 ? halves[0] : exprs[0],
                                    packed_op && halves.size() == 2 ? halves[1] : exprs[1]));
      p.lines.push_back(fmt::format("const unsigned {} = kiln_bits_of({});", word, pair));
      for (int l = 0; l < 2; ++l)
        p.lines.push_back(
            fmt::format("const float {} = {};", lane(out, l), lane_of(out_type, word, pair, l)));
      pairs[out] = pair;
    } else {
      for (int l = 0; l < 2; ++l)
        p.lines.push_back(
            fmt::format("const {} {} = {};", register_type(out_type), lane(out, l), exprs[l]));
    }
  }
  for (std::size_t i = 0; i < k.writes.size(); ++i) {
    int v = k.writes[i];
    DType t = g.values[v].meta.dtype;
    if (is_half_dtype(t)) {
      std::string pair = fmt::format("w{}_p", i);
      auto rounded = pairs.find(v);
      if (rounded != pairs.end()) {
        pair = rounded->second;  // already rounded to t: stored as it is
      } else {
        p.lines.push_back(fmt::format("const {} {} = {}({}, {});", packed(t), pair, round2(t),
                                      lane(v, 0), lane(v, 1)));
      }
      p.lines.push_back(fmt::format("w{}_w = kiln_bits_of({});", i, pair));
    } else {
      for (int l = 0; l < 2; ++l)
        p.lines.push_back(fmt::format("w{}_{} = {};", i, l, store_expr(t, lane(v, l))));
    }
  }
  return p;
}

}  // namespace kiln::jit::codegen
