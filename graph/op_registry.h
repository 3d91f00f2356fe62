// The op registry: one entry per primitive (name, arity, class, attribute schema, shape/dtype
// inference shared with eager execution), and the composites with the primitives they
// decompose into. Composites never appear in graphs: tracing records their primitives.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/op.h"

namespace kiln::graph {

struct OpInfo {
  OpId op;
  std::string_view name;
  int arity;  // -1: variadic (cat)
  OpClass op_class;
  std::vector<std::string_view> attributes;  // the OpAttrs fields the op reads
  bool differentiable;
  std::vector<TensorMeta> infer(std::span<const TensorMeta> inputs, const OpAttrs& attrs) const {
    return infer_meta(op, inputs, attrs);
  }
};

struct CompositeInfo {
  std::string_view name;
  std::vector<OpId> primitives;  // what its decomposition records
  bool closed_form_backward;     // registers a cheaper derivative than its primitives'
};

const OpInfo& op_info(OpId op);
const std::vector<OpInfo>& all_ops();
const std::vector<CompositeInfo>& all_composites();

}  // namespace kiln::graph
