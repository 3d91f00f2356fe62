// What templates/reduction.cu.mustache and reduction_outer.cu.mustache are rendered from, as
// types: jit/codegen/reduction.cpp fills them, and each mustache key is spelled once, in the
// to_data() of the struct that holds it.
#pragma once

#include <kainjow/mustache.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::jit::codegen {

// A 16-bit float statement that two columns can compute with one packed instruction: `fn(a, b)`
// on __nv_bfloat162 / __half2 pairs, where a and b are values of the same type.
struct PairOp {
  std::string fn, a, b;
};

// `const type var = expr;`: a load, a statement, a value kept in registers (no expr).
struct Assignment {
  std::string type, var, expr;
  int read = -1;  // a load's: the read (parameter in<read>) it indexes
  std::optional<PairOp> pair =
      std::nullopt;  // a statement's packed form, taken where both operands are pairs
  kainjow::mustache::data to_data() const;
};

struct Accumulator {
  std::string type, var, init;
  bool indexed = false;  // an arg reduction's or a row select's: it carries a column index too
  kainjow::mustache::data to_data() const;
};

// `target[...] = expr;`
struct Store {
  std::string target, expr;
  // A full output's (written in the column loop): its write index, the value in registers and
  // its register and storage types, for the contiguous layouts' vector stores.
  int write = -1;
  std::string value, value_type, storage;
  kainjow::mustache::data to_data() const;
};

// What one reduction of a split row's chunk leaves for the second stage, in 8-byte `slot`.
struct SplitPartial {
  std::string type, acc, combine;
  std::size_t slot = 0;
  kainjow::mustache::data to_data() const;
};

// A line after a pass's column loop. A call of the row reduction is named after the schedule
// rendered (kiln_warp_* for a warp per row, kiln_block_* for a block), so it is chosen then.
struct FinalLine {
  enum class Kind { code, reduce, arg_reduce } kind = Kind::code;
  std::string text;  // the code; the arguments after the accumulator (reduce); all of them (arg)
  std::string acc;   // reduce: the accumulator, first argument and result

  static FinalLine code(std::string code) { return {Kind::code, std::move(code), {}}; }
  // `acc = kiln_*_reduce(acc, args);`
  static FinalLine reduce(std::string acc, std::string args) {
    return {Kind::reduce, std::move(args), std::move(acc)};
  }
  // `kiln_*_arg_reduce(args);`
  static FinalLine arg_reduce(std::string args) { return {Kind::arg_reduce, std::move(args), {}}; }
  // `first_only`: only the first thread reads the result (kiln_*_reduce_first).
  kainjow::mustache::data to_data(bool warp_rows, bool first_only = false) const;
};

// A row select's column, computed once per row after the pass's loop: its loads through the
// generic offsets of column `at` and the statements that lead to the selected value.
struct SelectColumn {
  std::string at;  // the column, a CUDA expression of the row's index (range-checked on the host)
  std::vector<Assignment> loads, statements;
  std::string update;  // acc = the selected value;
  kainjow::mustache::data to_data() const;
};

// One loop over each row: its accumulators, the column body, and what follows the loop.
struct PassData {
  std::string comment;
  std::vector<Accumulator> accumulators;
  std::vector<Assignment> loads, statements, reduced_statements;
  std::vector<std::string> updates, results;
  std::vector<FinalLine> finals;
  std::vector<Store> stores;
  // Set when the row's first columns stay in registers: the loads of that first loop.
  std::optional<std::vector<Assignment>> persistent_loads;
  std::optional<std::vector<Assignment>> persistent_statements;  // and its statements
  bool split = false;  // a split row's chunks exchange partials after this pass
  std::vector<SelectColumn> selects;
};

// The kernel's `layout` argument: how a launch addresses a row's columns (reduction.h).
inline constexpr int kLayoutGeneric = 0;  // each column's offsets from the reduced dims' strides
inline constexpr int kLayoutFlat = 1;     // row base + column, 32-bit column arithmetic
inline constexpr int kLayoutVector = 2;   // the same, `vector` columns a 16-byte access

struct ReductionTemplateData {
  std::string name, description, graph, helpers;
  std::vector<std::string> nodes, params;
  bool fp16 = false, bf16 = false;
  std::size_t num_kept = 1, num_reduced = 1, num_strided = 1;
  std::vector<Assignment> row_loads;  // reads of reduced-shape values, once per row
  std::vector<PassData> passes;
  std::vector<Assignment> caches;  // register arrays of the persistent schedule
  int items = 0;
  std::vector<Store> reduced_stores;
  std::vector<SplitPartial> split_partials;
  bool warp_rows = false;                 // the warp-per-row schedule
  int warp_lanes = 32;                    // its lanes a row: 32 or 16
  std::vector<std::string> read_storage;  // per read: its element type in memory
  int vector = 1;  // columns of the vector layout's accesses (16 bytes of the widest type)
  int layout = kLayoutGeneric;  // the one layout a row kernel addresses its columns in
  // The outer schedule's rows a lane (reduction_outer.cu): 1, or `vector` neighbouring rows
  // read with one 16-byte access per reduced index.
  int outer_width = 1;

  kainjow::mustache::data to_data() const;
};

}  // namespace kiln::jit::codegen
