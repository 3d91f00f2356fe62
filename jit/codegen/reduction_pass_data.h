// Two decisions a reduction kernel's passes make about registers (reduction.cpp): which values
// stay on chip across passes (the persistent schedule's register caches), and which register a
// full 16-bit output is stored from so that it is rounded once.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "jit/codegen/reduction_template_data.h"
#include "runtime/dtype.h"

namespace kiln::jit::codegen {

// The persistent schedule: a value several passes load is read from memory once, into a
// per-thread register array of `items` columns (sized for the traced row over `lanes` threads),
// and later passes reuse it; so is a value several passes compute (softmax's exp(x - max): a MUFU
// op and its range reduction once, not once a pass). Columns past items * lanes (a row longer
// than the traced one) are re-read and recomputed in a tail loop.
struct RegisterCaches {
  std::vector<Assignment> arrays;  // one register array per cached value (no expr)
  std::set<std::string> cached;    // the cached values' names
  int items = 0;                   // columns per thread in each array
};
// Fills each pass's persistent loads and statements (first pass writes a cache, later ones read
// it) for a row of `traced_cols` over `lanes` threads, at most `max_items` a thread. Nothing
// is cached (and no pass changes) where no value is used by two passes.
RegisterCaches cache_rows_on_chip(std::vector<PassData>& passes, std::int64_t traced_cols,
                                  std::int64_t lanes, int max_items);

// The register a full output `var` of dtype `t` is stored from. A 16-bit float output's
// statement rounds its value (convert_expr) and the store rounds it again: the store takes the
// value before the first rounding (the same bits: rounding twice to one format is rounding once),
// so a value no other statement reads pays one conversion, in pairs where the layout stores
// vectors. May split the statement in `pass` into the wide value and its rounding.
std::string store_unrounded(PassData& pass, const std::string& var, DType t);

}  // namespace kiln::jit::codegen
