// The mustache data of the reduction templates (see reduction_template_data.h).
#include "jit/codegen/reduction_template_data.h"

#include <fmt/format.h>

#include <algorithm>

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

Data FinalLine::to_data(bool warp_rows) const {
  const char* scope = warp_rows ? "kiln_warp" : "kiln_block";
  switch (kind) {
    case Kind::code:
      return Data("code", text);
    case Kind::reduce:
      return Data("code", fmt::format("{0} = {1}_reduce({0}, {2});", acc, scope, text));
    case Kind::arg_reduce:
      return Data("code", fmt::format("{}_arg_reduce({});", scope, text));
  }
  return Data("code", text);
}

// A contiguous layout's loops for `pass`, `width` columns an access: the reads it loads as
// vectors, the full outputs it stores as vectors (16-bit floats converted in pairs), and the
// register cache's vector iterations.
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
  Data vector_writes = list();
  for (const auto& s : p.stores) {
    Data v;
    v.set("index", std::to_string(s.write));
    v.set("storage", s.storage);
    v.set("value_type", s.value_type);
    std::string f = fmt::format("out{}_f", s.write);
    std::string pack;
    if (width % 2 == 0 && (s.storage == "__nv_bfloat16" || s.storage == "__half")) {
      bool bf = s.storage == "__nv_bfloat16";
      pack = fmt::format(
          "for (int p = 0; p < {0} / 2; ++p) reinterpret_cast<{1}*>(w.v)[p] = {2}({3}[2 * p], "
          "{3}[2 * p + 1]);",
          width, bf ? "__nv_bfloat162" : "__half2",
          bf ? "__floats2bfloat162_rn" : "__floats2half2_rn", f);
    } else {
      // The scalar store's conversion, element by element.
      std::string one = s.expr;
      auto at = one.rfind(s.value);
      if (at != std::string::npos) one.replace(at, s.value.size(), f + "[j]");
      pack = fmt::format("for (int j = 0; j < {}; ++j) w.v[j] = {};", width, one);
    }
    v.set("pack", pack);
    vector_writes.push_back(v);
  }
  l.set("vector_reads", vector_reads);
  l.set("vector_writes", vector_writes);
  return l;
}

Data ReductionTemplateData::to_data() const {
  Data passes_data = list();
  for (const auto& p : passes) {
    Data finals = list();
    for (const auto& f : p.finals) finals.push_back(f.to_data(warp_rows));
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
    if (p.persistent_loads) {
      Data persistent;
      persistent.set("loads", list_of(*p.persistent_loads));
      persistent.set("statements", list_of(*p.persistent_statements));
      persistent.set("cached", true);
      pass.set("persistent", persistent);
    }
    Data layouts = list();
    layouts.push_back(flat_layout(*this, p, kLayoutFlat, 1));
    if (vector > 1) layouts.push_back(flat_layout(*this, p, kLayoutVector, vector));
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
  d.set("prelude", std::string(template_text("reduction_prelude.cu.mustache")));
  d.set("column_body", std::string(template_text("reduction_column.cu.mustache")));
  d.set("flat_body", std::string(template_text("reduction_flat.cu.mustache")));
  d.set("reduced_stores", list_of(reduced_stores));
  d.set("warp_rows", warp_rows);
  return d;
}

}  // namespace kiln::jit::codegen
