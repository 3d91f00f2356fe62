// The graph IR that tracing produces: inputs (call arguments, captured tensors, constants),
// nodes (one primitive op each) and outputs, over SSA values with shapes that may be symbolic.
#pragma once

#include <string>
#include <vector>

#include "graph/stride_class.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::graph {

enum class InputKind {
  argument,  // a tensor argument of the call
  captured,  // a tensor the function reads but does not receive (a parameter): read per call
  constant,  // a tensor made during tracing that nothing else can change: its value is fixed
};

struct Value {
  TensorMeta meta;           // sizes as traced
  std::vector<int> symbols;  // per dim: the symbol it equals, -1 if static, -2 if derived
  int producer = -1;         // node index, or -1 for a graph input
  Device device;
  StrideClass strides = StrideClass::contiguous;
};

struct Input {
  InputKind kind = InputKind::argument;
  int arg_index = -1;  // argument: position in the call's argument list
  Tensor tensor;       // captured / constant
  std::string name;
  int value = -1;
};

struct Node {
  OpId op;
  OpAttrs attrs;
  std::vector<int> inputs;  // value ids
  int output = -1;          // value id
  // reshape/expand: per entry of attrs.shape, the symbol whose run-time value replaces it, or -1.
  std::vector<int> shape_symbols;
};

// A symbolic size: its traced value and where a call's arguments give its run-time value.
struct Symbol {
  std::int64_t traced = 0;
  int arg_index = -1;
  int dim = -1;
};

class Graph {
 public:
  std::string name = "fn";
  std::vector<Value> values;
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<int> outputs;
  std::vector<Symbol> symbols;

  int add_value(TensorMeta meta, int producer);
  int add_input(Input input, TensorMeta meta);
  int add_node(Node node, TensorMeta out);
  bool is_constant(int value) const;
  const Input* input_of(int value) const;

  // Deterministic text: one line per node, `%3: f32[s0, 4] = add(%1, %2)`.
  std::string str() const;
  // Graphviz DOT with inputs as ellipses and ops as boxes.
  std::string dot() const;
};

std::string attrs_str(OpId op, const OpAttrs& attrs, const std::vector<int>& shape_symbols);

}  // namespace kiln::graph
