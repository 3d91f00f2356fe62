// The mustache data of the reduction templates (see reduction_template_data.h).
#include "jit/codegen/reduction_template_data.h"

#include <fmt/format.h>

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
      pass.set("persistent", persistent);
    }
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
  d.set("num_strided", std::to_string(num_strided));
  d.set("params", list_of(params, "decl"));
  d.set("row_loads", list_of(row_loads));
  d.set("passes", passes_data);
  d.set("caches", list_of(caches));
  d.set("items", std::to_string(items));
  d.set("prelude", std::string(template_text("reduction_prelude.cu.mustache")));
  d.set("column_body", std::string(template_text("reduction_column.cu.mustache")));
  d.set("reduced_stores", list_of(reduced_stores));
  d.set("warp_rows", warp_rows);
  return d;
}

}  // namespace kiln::jit::codegen
