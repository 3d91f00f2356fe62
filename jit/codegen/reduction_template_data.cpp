// The mustache data of the reduction templates (see reduction_template_data.h).
#include "jit/codegen/reduction_template_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/templates.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

Data list() {
  return Data(Data::type::list);
}

template <typename T>
Data list_of(const std::vector<T>& items) {
  Data l = list();
  for (const auto& item : items) l.push_back(item.to_data());
  return l;
}

Data list_of(const std::vector<std::string>& items, const std::string& key) {
  Data l = list();
  for (const auto& item : items) l.push_back(Data(key, item));
  return l;
}

// The packed pair type of a 16-bit float's storage type; empty for the others.
std::string pair_type(const std::string& storage) {
  return storage == "__nv_bfloat16" ? "__nv_bfloat162" : storage == "__half" ? "__half2" : "";
}

// A statement that rounds its value to a 16-bit float and widens it back (convert_expr's form,
// `R(inner)`, or `(v_cache[it] = R(inner))` where the persistent schedule keeps it): the pair type
// and the conversion of two floats to it, the unrounded value and the cache's assignment around it.
struct Rounding {
  std::string pair, round2, inner, cache;
};

std::optional<Rounding> rounding_of(const Assignment& a) {
  std::string expr = a.expr, cache;
  const std::string cache_prefix = "(" + a.var + "_cache[it] = ";
  if (expr.rfind(cache_prefix, 0) == 0 && expr.back() == ')') {
    cache = cache_prefix;
    expr = expr.substr(cache_prefix.size(), expr.size() - cache_prefix.size() - 1);
  }
  for (DType t : {DType::bf16, DType::f16}) {
    std::string round = convert_expr(DType::f32, t, "");
    std::string prefix = round.substr(0, round.size() - 2);
    if (expr.size() <= round.size() || expr.rfind(prefix, 0) != 0 ||
        expr.compare(expr.size() - 2, 2, "))") != 0)
      continue;
    // The prefix's last parenthesis closes at the end: one conversion of the whole value.
    int depth = 1;
    std::size_t end = prefix.size();
    for (; end < expr.size() && depth > 0; ++end)
      depth += expr[end] == '(' ? 1 : expr[end] == ')' ? -1 : 0;
    if (end != expr.size() - 1) return std::nullopt;
    bool bf = t == DType::bf16;
    return Rounding{bf ? "__nv_bfloat162" : "__half2",
                    bf ? "__floats2bfloat162_rn" : "__floats2half2_rn",
                    expr.substr(prefix.size(), expr.size() - prefix.size() - 2), cache};
  }
  return std::nullopt;
}

Data typed_var(const std::string& type, const std::string& var, const std::string& expr = "") {
  Data d;
  d.set("type", type);
  d.set("var", var);
  d.set("expr", expr);
  return d;
}

// Per value of a vector body, its two-column pair where it has one (a 16-bit read's, or a value
// rounded to a 16-bit float): the element type and the expression of pair `p`.
struct Pair {
  std::string type, expr;
};
using Pairs = std::map<std::string, Pair>;

// One body of a contiguous layout's vector (templates/reduction_flat.cu.mustache): its loads and
// statements cut into segments at each value rounded to a 16-bit float, where `width` is even;
// the last segment carries the pass's updates and stores. A cut's value is left unrounded in
// `<var>_w[width]` and rounded in pairs into `<var>_p[width / 2]` after its segment, or, an add,
// sub or mul of two pairs of its type, computed there by one packed instruction a pair (the same
// bits: f32 holds the exact result of two 16-bit operands' product, and sum up to one rounding
// that cannot make a tie); later segments read it back from its pair. `pairs` returns the pairs.
Data flat_body_of(const std::vector<Assignment>& loads, const std::vector<Assignment>& statements,
                  const PassData& p, int width, bool cached,
                  const std::vector<std::string>& read_storage, Pairs& pairs) {
  Data body;
  body.set("cached", cached);
  body.set("half", std::to_string(width / 2));
  Data arrays = list(), pair_arrays = list(), segments = list();
  pairs.clear();
  // (type, var, expression in a later segment) of the values closed segments computed.
  std::vector<std::array<std::string, 3>> earlier;
  std::vector<std::pair<std::string, std::string>> current;  // defined in the open segment
  Data seg_loads = list(), seg_statements = list();
  for (const auto& a : loads) {
    std::string t = a.read >= 0 && width % 2 == 0
                        ? pair_type(read_storage.at(static_cast<std::size_t>(a.read)))
                        : "";
    if (!t.empty())
      pairs[a.var] = {t, fmt::format("reinterpret_cast<const {}*>(in{}_v.v)[p]", t, a.read)};
    Assignment load = a;
    if (t == "__nv_bfloat162") {
      // A bf16 column from its pair's word (kiln_pair_half: one integer op, no cvt of a half).
      std::string one = load_expr(DType::bf16, fmt::format("in{0}[offset[{0}]]", a.read));
      auto at = load.expr.find(one);
      if (at != std::string::npos)
        load.expr.replace(at, one.size(),
                          fmt::format("kiln_pair_half(reinterpret_cast<const {}*>(in{}_v.v)[j >> "
                                      "1], j)",
                                      t, a.read));
    }
    seg_loads.push_back(load.to_data());
    current.emplace_back(a.type, a.var);
  }
  auto binds_of = [&](const std::string& skip) {
    Data binds = list();
    for (const auto& [type, var, expr] : earlier)
      if (var != skip) binds.push_back(typed_var(type, var, expr));
    return binds;
  };
  auto is_pair = [&](const std::string& var, const std::string& type) {
    auto it = pairs.find(var);
    return it != pairs.end() && it->second.type == type;
  };
  std::string reread;  // the rounded value the open segment starts with
  for (const auto& a : statements) {
    auto r = width % 2 == 0 ? rounding_of(a) : std::nullopt;
    if (!r) {
      seg_statements.push_back(a.to_data());
      current.emplace_back(a.type, a.var);
      continue;
    }
    bool packed = a.pair && is_pair(a.pair->a, r->pair) && is_pair(a.pair->b, r->pair);
    // Close the segment: every value it computed is kept for the later ones.
    Data seg;
    seg.set("binds", binds_of(reread));
    seg.set("loads", seg_loads);
    seg.set("statements", seg_statements);
    Data sets = list();
    for (const auto& [type, var] : current) {
      sets.push_back(typed_var(type, var, var));
      arrays.push_back(typed_var(type, var));
      earlier.push_back({type, var, var + "_w[j]"});
    }
    std::string step;
    if (packed) {
      step = fmt::format("{}_p[p] = {}({}, {});", a.var, a.pair->fn, pairs.at(a.pair->a).expr,
                         pairs.at(a.pair->b).expr);
    } else {
      sets.push_back(typed_var(a.type, a.var, r->inner));
      arrays.push_back(typed_var(a.type, a.var));
      step = fmt::format("{0}_p[p] = {1}({0}_w[2 * p], {0}_w[2 * p + 1]);", a.var, r->round2);
    }
    seg.set("sets", sets);
    seg.set("rounds", list_of(std::vector<std::string>{step}, "code"));
    seg.set("updates", list());
    seg.set("stores", list());
    segments.push_back(seg);
    pair_arrays.push_back(typed_var(r->pair, a.var));
    pairs[a.var] = {r->pair, a.var + "_p[p]"};
    std::string back = fmt::format("kiln_pair_half({}_p[j >> 1], j)", a.var);
    earlier.push_back({a.type, a.var, back});
    current.clear();
    // The next segment reads the rounded value back (into the register cache where it is kept).
    seg_loads = list();
    seg_statements = list();
    seg_statements.push_back(
        typed_var(a.type, a.var, r->cache.empty() ? back : r->cache + back + ")"));
    reread = a.var;
  }
  Data last;
  last.set("binds", binds_of(reread));
  last.set("loads", seg_loads);
  last.set("statements", seg_statements);
  last.set("sets", list());
  last.set("rounds", list());
  last.set("updates", list_of(p.updates, "code"));
  last.set("stores", list_of(p.stores));
  segments.push_back(last);
  body.set("arrays", arrays);
  body.set("pair_arrays", pair_arrays);
  body.set("segments", segments);
  return body;
}

}  // namespace

Data Assignment::to_data() const {
  Data d;
  d.set("type", type);
  d.set("var", var);
  d.set("expr", expr);
  return d;
}

Data Accumulator::to_data() const {
  Data d;
  d.set("type", type);
  d.set("var", var);
  d.set("init", init);
  d.set("indexed", indexed);
  return d;
}

Data Store::to_data() const {
  Data d;
  d.set("target", target);
  d.set("expr", expr);
  d.set("value", value);
  d.set("index", std::to_string(write));
  return d;
}

Data SplitPartial::to_data() const {
  Data d;
  d.set("type", type);
  d.set("acc", acc);
  d.set("combine", combine);
  d.set("slot", std::to_string(slot));
  return d;
}

Data SelectColumn::to_data() const {
  Data d;
  d.set("at", at);
  d.set("loads", list_of(loads));
  d.set("statements", list_of(statements));
  d.set("updates", list_of(std::vector<std::string>{update}, "code"));
  d.set("stores", list());
  return d;
}

Data FinalLine::to_data(bool warp_rows, bool first_only) const {
  const char* scope = warp_rows ? "kiln_warp" : "kiln_block";
  switch (kind) {
    case Kind::code:
      return Data("code", text);
    case Kind::reduce:
      return Data("code", fmt::format("{0} = {1}_reduce{3}({0}, {2});", acc, scope, text,
                                      first_only ? "_first" : ""));
    case Kind::arg_reduce:
      return Data("code", fmt::format("{}_arg_reduce({});", scope, text));
  }
  return Data("code", text);
}

// A contiguous layout's loops for `pass`, `width` columns an access: the reads it loads as
// vectors, the full outputs it stores as vectors (16-bit floats converted in pairs, or stored
// from the pair the body holds), and the register cache's vector iterations.
Data flat_layout(const ReductionTemplateData& d, const PassData& p, int layout, int width) {
  Data l;
  l.set("layout", std::to_string(layout));
  l.set("width", std::to_string(width));
  l.set("flat_items", std::to_string((d.items + width - 1) / width));
  std::vector<int> reads;
  auto note = [&](const std::vector<Assignment>& loads) {
    for (const auto& a : loads)
      if (a.read >= 0 && std::find(reads.begin(), reads.end(), a.read) == reads.end())
        reads.push_back(a.read);
  };
  note(p.loads);
  if (p.persistent_loads) note(*p.persistent_loads);
  std::sort(reads.begin(), reads.end());
  Data vector_reads = list();
  for (int r : reads) {
    Data v;
    v.set("index", std::to_string(r));
    v.set("storage", d.read_storage.at(static_cast<std::size_t>(r)));
    vector_reads.push_back(v);
  }
  // Each body's full outputs, stored from the pairs that body holds.
  auto vector_writes = [&](const Pairs& pairs) {
    Data writes = list();
    for (const auto& s : p.stores) {
      Data v;
      v.set("index", std::to_string(s.write));
      v.set("storage", s.storage);
      v.set("value_type", s.value_type);
      std::string f = fmt::format("out{}_f", s.write);
      std::string pack, pair = pair_type(s.storage);
      // A value stored from before its rounding (reduction.cpp's stored_unrounded) has the pair
      // of the rounded statement.
      std::string rounded = s.value;
      if (rounded.size() > 5 && rounded.ends_with("_wide") && !pairs.count(rounded))
        rounded.resize(rounded.size() - 5);
      auto held = pairs.find(rounded);
      if (width % 2 == 0 && !pair.empty() && held != pairs.end() && held->second.type == pair) {
        pack = fmt::format("for (int p = 0; p < {}; ++p) reinterpret_cast<{}*>(w.v)[p] = {};",
                           width / 2, pair, held->second.expr);
      } else if (width % 2 == 0 && !pair.empty()) {
        bool bf = s.storage == "__nv_bfloat16";
        pack = fmt::format(
            "for (int p = 0; p < {0} / 2; ++p) reinterpret_cast<{1}*>(w.v)[p] = {2}({3}[2 * p], "
            "{3}[2 * p + 1]);",
            width, pair, bf ? "__floats2bfloat162_rn" : "__floats2half2_rn", f);
      } else {
        // The scalar store's conversion, element by element.
        std::string one = s.expr;
        auto at = one.rfind(s.value);
        if (at != std::string::npos) one.replace(at, s.value.size(), f + "[j]");
        pack = fmt::format("for (int j = 0; j < {}; ++j) w.v[j] = {};", width, one);
      }
      v.set("pack", pack);
      writes.push_back(v);
    }
    return writes;
  };
  Pairs pairs;
  if (p.persistent_loads) {
    Data head = flat_body_of(*p.persistent_loads, *p.persistent_statements, p, width, true,
                             d.read_storage, pairs);
    head.set("vector_writes", vector_writes(pairs));
    l.set("head", head);
  }
  Data tail = flat_body_of(p.loads, p.statements, p, width, false, d.read_storage, pairs);
  tail.set("vector_writes", vector_writes(pairs));
  l.set("tail", tail);
  l.set("vector_reads", vector_reads);
  Data vector_outs = list();
  for (const auto& s : p.stores) {
    Data v;
    v.set("index", std::to_string(s.write));
    v.set("storage", s.storage);
    vector_outs.push_back(v);
  }
  l.set("vector_outs", vector_outs);
  return l;
}

Data ReductionTemplateData::to_data() const {
  Data passes_data = list();
  for (const auto& p : passes) {
    Data finals = list();
    // A split pass is the kernel's only one and has no full output: its reductions' results are
    // read by the first thread alone (the partials, the row's stores).
    for (const auto& f : p.finals) finals.push_back(f.to_data(warp_rows, p.split));
    Data pass;
    pass.set("comment", p.comment);
    pass.set("accumulators", list_of(p.accumulators));
    pass.set("loads", list_of(p.loads));
    pass.set("statements", list_of(p.statements));
    pass.set("updates", list_of(p.updates, "code"));
    pass.set("finals", finals);
    pass.set("results", list_of(p.results, "code"));
    pass.set("reduced_statements", list_of(p.reduced_statements));
    pass.set("stores", list_of(p.stores));
    pass.set("selects", list_of(p.selects));
    if (p.persistent_loads) {
      Data persistent;
      persistent.set("loads", list_of(*p.persistent_loads));
      persistent.set("statements", list_of(*p.persistent_statements));
      persistent.set("cached", true);
      pass.set("persistent", persistent);
    }
    Data layouts = list();
    if (layout == kLayoutFlat) layouts.push_back(flat_layout(*this, p, kLayoutFlat, 1));
    if (layout == kLayoutVector) layouts.push_back(flat_layout(*this, p, kLayoutVector, vector));
    pass.set("flat_layouts", layouts);
    if (p.split) {
      Data split;
      split.set("partials", list_of(split_partials));
      split.set("count", std::to_string(split_partials.size()));
      pass.set("split", split);
    }
    passes_data.push_back(pass);
  }
  Data d;
  d.set("name", name);
  d.set("description", description);
  d.set("graph", graph);
  d.set("nodes", list_of(nodes, "text"));
  d.set("helpers", helpers);
  d.set("fp16", fp16);
  d.set("bf16", bf16);
  d.set("num_kept", std::to_string(num_kept));
  d.set("num_reduced", std::to_string(num_reduced));
  d.set("one_reduced", num_reduced == 1);
  d.set("one_kept", num_kept == 1);
  d.set("num_strided", std::to_string(num_strided));
  d.set("params", list_of(params, "decl"));
  d.set("row_loads", list_of(row_loads));
  d.set("passes", passes_data);
  d.set("caches", list_of(caches));
  d.set("items", std::to_string(items));
  // The register caches hold whole vectors of every layout.
  d.set("cache_items", std::to_string((items + vector - 1) / vector * vector));
  d.set("vector", std::to_string(vector));
  d.set("generic", layout == kLayoutGeneric);
  d.set("layout_name", std::string(layout == kLayoutGeneric ? "generic"
                                   : layout == kLayoutFlat  ? "flat"
                                                            : "vector"));
  d.set("prelude", std::string(template_text("reduction_prelude.cu.mustache")));
  d.set("column_body", std::string(template_text("reduction_column.cu.mustache")));
  d.set("flat_body", std::string(template_text("reduction_flat.cu.mustache")));
  d.set("reduced_stores", list_of(reduced_stores));
  d.set("outer_width", std::to_string(outer_width));
  d.set("outer_vector", outer_width > 1);
  d.set("outer_vector_body", std::string(template_text("reduction_outer_vector.cu.mustache")));
  // The outer vector form's reads: every read a column loop loads (all of them over the domain).
  std::vector<int> outer_reads;
  for (const auto& p : passes)
    for (const auto& a : p.loads)
      if (a.read >= 0 &&
          std::find(outer_reads.begin(), outer_reads.end(), a.read) == outer_reads.end())
        outer_reads.push_back(a.read);
  std::sort(outer_reads.begin(), outer_reads.end());
  Data outer_reads_data = list();
  for (int r : outer_reads) {
    Data v;
    v.set("index", std::to_string(r));
    v.set("storage", read_storage.at(static_cast<std::size_t>(r)));
    outer_reads_data.push_back(v);
  }
  d.set("outer_reads", outer_reads_data);
  d.set("warp_rows", warp_rows);
  d.set("row_lanes", std::to_string(warp_lanes));
  return d;
}

}  // namespace kiln::jit::codegen
