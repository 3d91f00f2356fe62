// The per-op CUDA expression table: how each elementwise primitive is written in CUDA C++, and
// how each dtype is stored, loaded and converted. The one place that knows CUDA spellings; the
// same semantics as the CPU kernels (runtime/cpu/elementwise.cpp), which tests compare against.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "runtime/op.h"

namespace kiln::jit::codegen {

// How a dtype lives in memory ("__half") and in registers ("float": f16/bf16 compute in f32).
std::string storage_type(DType t);
std::string register_type(DType t);
// `stored` (an lvalue of storage_type(t)) as a register value, and back.
std::string load_expr(DType t, const std::string& stored);
std::string store_expr(DType t, const std::string& value);
// A register value of dtype `from` converted to the register type of `to`.
std::string convert_expr(DType from, DType to, const std::string& value);
// A number as a literal of `t`'s register type, exact (hex floats for floating types).
std::string literal(DType t, double value);
// The identity of max (negative) or min reductions in `t`: infinity, or an integer's extreme.
std::string infinity(DType t, bool negative);

// The dtype an elementwise node computes in, given its input and output dtypes (comparisons
// compute in the promoted input dtype, everything else in the output's).
DType compute_dtype_of(OpId op, std::span<const DType> inputs, DType output);

// The expression computing `op` on `args` (register values already in the compute dtype `t`),
// or nullopt when code generation does not cover the op at `t` (what KernelCoverage reports).
std::optional<std::string> elementwise_expr(OpId op, const OpAttrs& attrs, DType t,
                                            std::span<const std::string> args);
// Whether `op`'s expression reads the element's place in the domain: its linear index and the
// domain's last two sizes (`kiln_index`, `kiln_rows`, `kiln_cols`, long long): tril and triu.
// Pointwise kernels provide them.
bool reads_position(OpId op);
// Whether `op`'s expression reads `kiln_index` as the element's row-major linear index in the
// op's own output, all of it (tril needs it only modulo a matrix): the random ops, whose
// element i is a function of (seed, offset, i). Such an expression calls the Philox helpers of
// templates/elementwise_helpers.cu.mustache (`random`).
bool reads_index(OpId op);

// Whether `op`'s expression at compute dtype `t` finds errors the CPU kernel raises: integer
// pow (a negative exponent), remainder and floor_divide (a zero divisor). Such an expression
// sets the kernel's error flag `kiln_error` (long long*: [code, operand], the codes below; see
// runtime/device_checks.h), which pointwise kernels provide, and the host raises it at its next
// sync (KILN_SYNC_CHECKS=1: at the op).
bool reports_errors(OpId op, DType t);
// The codes the helpers of templates/elementwise_helpers.cu.mustache write.
enum class ExpressionError : std::int64_t {
  floor_divide_by_zero = 1,  // operand: the dividend
  remainder_by_zero = 2,     // operand: the dividend
  negative_power = 3,        // operand: the exponent
};
// Throws the kiln::Error (the CPU kernel's message) that a set flag's words stand for.
[[noreturn]] void raise_expression_error(std::span<const std::int64_t> words);

// The whole expression of an elementwise node: its inputs (register values of `in_types`)
// converted to its compute dtype, the op, and the result converted to `out_type`. kiln::Error
// naming `what` when the table does not cover the op at that dtype.
std::string node_expr(OpId op, const OpAttrs& attrs, std::span<const DType> in_types,
                      std::span<const std::string> in_exprs, DType out_type,
                      const std::string& what);

}  // namespace kiln::jit::codegen
