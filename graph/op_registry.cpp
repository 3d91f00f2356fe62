// The registry's tables.
#include "graph/op_registry.h"

#include "autograd/node.h"

namespace kiln::graph {

namespace {

int arity_of(OpId op) {
  if (is_unary(op)) return 1;
  if (is_binary(op)) return 2;
  switch (op) {
    case OpId::where:
    case OpId::scatter_add:
    case OpId::index_add: return 3;
    case OpId::gather:
    case OpId::index_select:
    case OpId::matmul: return 2;
    case OpId::cat: return -1;
    default: return 1;
  }
}

std::vector<std::string_view> attributes_of(OpId op) {
  switch (op_class(op)) {
    case OpClass::reduction: return {"dims", "keepdim"};
    case OpClass::index: return {"dim"};
    default: break;
  }
  switch (op) {
    case OpId::reshape:
    case OpId::expand: return {"shape"};
    case OpId::permute: return {"dims"};
    case OpId::slice: return {"dim", "start", "end", "step"};
    case OpId::cast: return {"dtype"};
    case OpId::cat: return {"dim"};
    case OpId::pad: return {"dims", "value"};
    default: return {};
  }
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> table;
#define KILN_REGISTER(name)                                                                 \
  table.push_back({OpId::name, op_name(OpId::name), arity_of(OpId::name),                  \
                   op_class(OpId::name), attributes_of(OpId::name),                        \
                   autograd::is_differentiable(OpId::name)});
  KILN_ALL_OPS(KILN_REGISTER)
#undef KILN_REGISTER
  return table;
}

}  // namespace

const std::vector<OpInfo>& all_ops() {
  static const std::vector<OpInfo> table = build();
  return table;
}

const OpInfo& op_info(OpId op) { return all_ops()[static_cast<std::size_t>(op)]; }

const std::vector<CompositeInfo>& all_composites() {
  using enum OpId;
  static const std::vector<CompositeInfo> table = {
      {"mean", {sum, expand, div}, false},
      {"var", {sum, expand, sub, mul, div, maximum}, false},
      {"std", {sum, expand, sub, mul, div, maximum, sqrt}, false},
      {"logsumexp", {amax, abs, eq, logical_not, where, sub, exp, sum, log, add, reshape}, false},
      {"softmax", {amax, sub, exp, sum, div}, true},
      {"log_softmax", {amax, sub, exp, sum, log}, true},
      {"layer_norm", {sum, expand, div, sub, mul, add, rsqrt}, false},
      {"rms_norm", {mul, sum, expand, div, add, rsqrt}, false},
      {"cross_entropy", {amax, sub, exp, sum, log, ne, where, gather, neg, div, cast}, false},
      {"mse_loss", {sub, mul, sum, div}, false},
      {"linear", {permute, matmul, add}, false},
      {"embedding", {reshape, index_select}, false},
      {"stack", {reshape, cat}, false},
      {"select", {slice, reshape}, false},
  };
  return table;
}

}  // namespace kiln::graph
