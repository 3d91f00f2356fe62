// Register caches and unrounded stores of a reduction kernel's passes (see reduction_pass_data.h).
#include "jit/codegen/reduction_pass_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "jit/codegen/cuda_expr.h"

namespace kiln::jit::codegen {

RegisterCaches cache_rows_on_chip(std::vector<PassData>& passes, std::int64_t traced_cols,
                                  std::int64_t lanes, int max_items) {
  std::map<std::string, int> passes_of;
  for (const auto& pass : passes) {
    for (const auto& load : pass.loads) ++passes_of[load.var];
    for (const auto& statement : pass.statements) ++passes_of[statement.var];
  }
  RegisterCaches caches;
  for (const auto& pass : passes) {
    for (const auto* list : {&pass.loads, &pass.statements})
      for (const auto& a : *list) {
        if (passes_of[a.var] < 2 || !caches.cached.insert(a.var).second) continue;
        caches.arrays.push_back({a.type, a.var, ""});
      }
  }
  if (caches.cached.empty()) return caches;
  caches.items =
      static_cast<int>(std::clamp<std::int64_t>((traced_cols + lanes - 1) / lanes, 1, max_items));
  std::set<std::string> first_seen;
  auto on_chip = [&](const std::vector<Assignment>& list) {
    std::vector<Assignment> out;
    for (const auto& a : list) {
      std::string expr = a.expr;
      if (caches.cached.count(a.var))
        expr = first_seen.insert(a.var).second ? fmt::format("({}_cache[it] = {})", a.var, expr)
                                               : a.var + "_cache[it]";
      out.push_back({a.type, a.var, expr, a.read, a.pair});
    }
    return out;
  };
  for (auto& pass : passes) {
    pass.persistent_loads = on_chip(pass.loads);
    pass.persistent_statements = on_chip(pass.statements);
  }
  return caches;
}

std::string store_unrounded(PassData& pass, const std::string& var, DType t) {
  if (t != DType::bf16 && t != DType::f16) return var;
  std::string round = convert_expr(DType::f32, t, "");  // "__bfloat162float(...())"
  std::string prefix = round.substr(0, round.size() - 2), suffix = "))";
  for (std::size_t i = 0; i < pass.statements.size(); ++i) {
    Assignment& a = pass.statements[i];
    if (a.var != var || a.expr.size() <= round.size() || a.expr.rfind(prefix, 0) != 0 ||
        a.expr.compare(a.expr.size() - 2, 2, suffix) != 0)
      continue;
    // The prefix's last parenthesis must close at the end: one conversion of the whole value.
    int depth = 1;
    std::size_t end = prefix.size();
    for (; end < a.expr.size() && depth > 0; ++end)
      depth += a.expr[end] == '(' ? 1 : a.expr[end] == ')' ? -1 : 0;
    if (end != a.expr.size() - 1) return var;
    std::string wide = var + "_wide";
    std::string inner = a.expr.substr(prefix.size(), a.expr.size() - prefix.size() - 2);
    a.expr = convert_expr(DType::f32, t, wide);
    pass.statements.insert(pass.statements.begin() + static_cast<std::ptrdiff_t>(i),
                           Assignment{a.type, wide, inner});
    return wide;
  }
  return var;
}

}  // namespace kiln::jit::codegen
