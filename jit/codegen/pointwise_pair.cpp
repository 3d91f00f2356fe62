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

namespace {

// The packed pair type, its rounding from two floats, and its halves back as floats.
const char* packed(DType t) {
  return t == DType::bf16 ? "__nv_bfloat162" : "__half2";
}
const char* round2(DType t) {
  return t == DType::bf16 ? "__floats2bfloat162_rn" : "__floats2half2_rn";
}
const char* from_halves(DType t) {
  return t == DType::bf16 ? "__halves2bfloat162" : "__halves2half2";
}

// A pair's lane l as f32: a bf16 is the top half of an f32 (a shift or a mask of the 32-bit
// word, no unpacking mov), an f16 converts.
std::string lane_of(DType t, const std::string& word, const std::string& pair, int l) {
  if (t == DType::bf16)
    return l == 0 ? fmt::format("kiln_bf16_low({})", word)
                  : fmt::format("kiln_bf16_high({})", word);
  return l == 0 ? fmt::format("__low2float({})", pair) : fmt::format("__high2float({})", pair);
}

// add, sub and mul of two values of one 16-bit type: one packed instruction for the pair.
const char* packed_op(OpId op) {
  return op == OpId::add   ? "__hadd2_rn"
         : op == OpId::sub ? "__hsub2_rn"
         : op == OpId::mul ? "__hmul2_rn"
                           : nullptr;
}

// The pair function of one kernel: its parameters, then a statement pair per step, then stores.
class PairRenderer {
 public:
  PairRenderer(const graph::Graph& g, const PointwiseKernel& k, const std::set<int>& computed)
      : g_(g), k_(k), computed_(computed), word_read_(k.reads.size()) {}

  ElementPair render(const std::vector<int>& steps) {
    add_reads();
    add_scalars();
    add_write_params();
    if (k_.checks_errors) {
      p_.params.push_back("long long* kiln_error");
      p_.args.push_back("kiln_error");
    }
    for (int n : steps) add_step(n);
    add_stores();
    return std::move(p_);
  }

 private:
  std::string lane(int v, int l) const {
    if (computed_.count(v)) return fmt::format("{}_{}", var(v), l);
    return literal(g_.values[v].meta.dtype, g_.input_of(v)->tensor.item());
  }
  DType dtype(int v) const { return g_.values[v].meta.dtype; }

  // An f16/bf16 read a vector at a time comes as the 32-bit word of its two lanes (w).
  void add_reads() {
    for (std::size_t i = 0; i < k_.reads.size(); ++i) {
      DType t = dtype(k_.reads[i]);
      word_read_[i] = is_half_dtype(t) && !k_.splat[i];
      if (word_read_[i]) {
        p_.params.push_back(fmt::format("unsigned r{}_w", i));
        p_.args.push_back(fmt::format("reinterpret_cast<const unsigned*>(r{}.v)[j / 2]", i));
        std::string word = fmt::format("r{}_w", i), pair = fmt::format("r{}_p", i);
        if (t != DType::bf16)
          p_.lines.push_back(
              fmt::format("const {} {} = kiln_pair_of<{}>({});", packed(t), pair, packed(t), word));
        for (int l = 0; l < 2; ++l)
          p_.lines.push_back(fmt::format("const {} {} = {};", register_type(t),
                                         lane(k_.reads[i], l), lane_of(t, word, pair, l)));
        continue;
      }
      p_.params.push_back(fmt::format("{0} r{1}_0, {0} r{1}_1", storage_type(t), i));
      p_.args.push_back(k_.splat[i] ? fmt::format("r{0}, r{0}", i)
                                    : fmt::format("r{0}.v[j], r{0}.v[j + 1]", i));
      for (int l = 0; l < 2; ++l)
        p_.lines.push_back(fmt::format("const {} {} = {};", register_type(t), lane(k_.reads[i], l),
                                       load_expr(t, fmt::format("r{}_{}", i, l))));
    }
  }

  void add_scalars() {
    for (std::size_t i = 0; i < k_.scalars.size(); ++i) {
      DType t = dtype(k_.scalars[i]);
      p_.params.push_back(fmt::format("{} s{}", register_type(t), i));
      p_.args.push_back(fmt::format("s{}", i));
      for (int l = 0; l < 2; ++l)
        p_.lines.push_back(
            fmt::format("const {} {} = s{};", register_type(t), lane(k_.scalars[i], l), i));
    }
  }

  void add_write_params() {
    for (std::size_t i = 0; i < k_.writes.size(); ++i) {
      DType t = dtype(k_.writes[i]);
      if (is_half_dtype(t)) {  // stored as the 32-bit word of the rounded pair
        p_.params.push_back(fmt::format("unsigned& w{}_w", i));
        p_.args.push_back(fmt::format("reinterpret_cast<unsigned*>(w{}.v)[j / 2]", i));
        continue;
      }
      p_.params.push_back(fmt::format("{0}& w{1}_0, {0}& w{1}_1", storage_type(t), i));
      p_.args.push_back(fmt::format("w{0}.v[j], w{0}.v[j + 1]", i));
    }
  }

  // Each input of a node as a packed pair of `t`, read so or rounded so; fewer when one is not.
  std::vector<std::string> halves_of(const graph::Node& node, DType t) const {
    std::vector<std::string> halves;
    for (int v : node.inputs) {
      if (dtype(v) != t) break;
      auto r = std::find(k_.reads.begin(), k_.reads.end(), v);
      auto rounded = pairs_.find(v);
      if (r != k_.reads.end()) {
        auto i = r - k_.reads.begin();
        if (word_read_[i])
          halves.push_back(fmt::format("kiln_pair_of<{}>(r{}_w)", packed(t), i));
        else
          halves.push_back(fmt::format("{}(r{}_0, r{}_1)", from_halves(t), i, i));
      } else if (rounded != pairs_.end()) {
        halves.push_back(rounded->second);
      } else {
        break;
      }
    }
    return halves;
  }

  void add_step(int n) {
    const graph::Node& node = g_.nodes[n];
    std::vector<DType> in_types;
    for (int v : node.inputs) in_types.push_back(dtype(v));
    int out = node.output();
    DType out_type = dtype(out);
    DType t = compute_dtype_of(node.op, in_types, out_type);
    std::string what = fmt::format("'{}': {}", k_.name, node_text(g_, n));
    // Rounded together: computed in f32 (not a comparison) and stored as f16/bf16.
    bool together = is_half_dtype(out_type) && t == DType::f32;
    std::array<std::string, 2> exprs;
    for (int l = 0; l < 2; ++l) {
      std::vector<std::string> args;
      for (int v : node.inputs) args.push_back(lane(v, l));
      exprs[l] =
          node_expr(node.op, node.attrs, in_types, args, together ? DType::f32 : out_type, what);
    }
    if (!together) {
      for (int l = 0; l < 2; ++l)
        p_.lines.push_back(
            fmt::format("const {} {} = {};", register_type(out_type), lane(out, l), exprs[l]));
      return;
    }
    // add, sub and mul of two out_type values (read, or rounded in pairs): one packed instruction
    // (add.rn.bf16x2) for the pair, the result of f32 arithmetic and one rounding (f32 has more
    // than twice the 16-bit formats' precision + 2 bits, so rounding twice gives the same value).
    const char* op = packed_op(node.op);
    std::vector<std::string> halves = halves_of(node, out_type);
    bool packs = op && halves.size() == 2;
    std::string pair = var(out) + "_p", word = var(out) + "_w";
    p_.lines.push_back(fmt::format("const {} {} = {}({}, {});", packed(out_type), pair,
                                   packs ? op : round2(out_type), packs ? halves[0] : exprs[0],
                                   packs ? halves[1] : exprs[1]));
    p_.lines.push_back(fmt::format("const unsigned {} = kiln_bits_of({});", word, pair));
    for (int l = 0; l < 2; ++l)
      p_.lines.push_back(
          fmt::format("const float {} = {};", lane(out, l), lane_of(out_type, word, pair, l)));
    pairs_[out] = pair;
  }

  void add_stores() {
    for (std::size_t i = 0; i < k_.writes.size(); ++i) {
      int v = k_.writes[i];
      DType t = dtype(v);
      if (!is_half_dtype(t)) {
        for (int l = 0; l < 2; ++l)
          p_.lines.push_back(fmt::format("w{}_{} = {};", i, l, store_expr(t, lane(v, l))));
        continue;
      }
      std::string pair = fmt::format("w{}_p", i);
      auto rounded = pairs_.find(v);
      if (rounded != pairs_.end())
        pair = rounded->second;  // already rounded to t: stored as it is
      else
        p_.lines.push_back(fmt::format("const {} {} = {}({}, {});", packed(t), pair, round2(t),
                                       lane(v, 0), lane(v, 1)));
      p_.lines.push_back(fmt::format("w{}_w = kiln_bits_of({});", i, pair));
    }
  }

  const graph::Graph& g_;
  const PointwiseKernel& k_;
  const std::set<int>& computed_;
  std::vector<bool> word_read_;
  std::map<int, std::string> pairs_;  // value -> its rounded pair, which stores and ops reuse
  ElementPair p_;
};

}  // namespace

std::optional<ElementPair> element_pair(const graph::Graph& g, const PointwiseKernel& k,
                                        const std::vector<int>& steps,
                                        const std::set<int>& computed) {
  bool any = false;
  for (int v : k.writes) any = any || is_half_dtype(g.values[v].meta.dtype);
  for (int n : steps) any = any || is_half_dtype(g.values[g.nodes[n].output()].meta.dtype);
  if (!any) return std::nullopt;
  return PairRenderer(g, k, computed).render(steps);
}

}  // namespace kiln::jit::codegen
