// The graph IR that tracing produces: inputs (call arguments, declared state, captured tensors,
// constants), nodes (one primitive op each, with one or more outputs) and outputs, over SSA
// values whose sizes may be symbolic.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln {
class Generator;
}

namespace kiln::graph {

enum class InputKind {
  argument,  // a tensor argument of the call
  state,     // a tensor slot the function declared (a module parameter): read on every call
  captured,  // a tensor the function closed over: fixed at trace time, but not foldable
  constant,  // a tensor made during tracing that nothing else can change: foldable
};

struct Value {
  TensorMeta meta;  // sizes as traced
  // Per dim: the size as an expression of the symbols (a constant for a static dim, opaque for
  // one that follows symbols in a way kiln does not track).
  std::vector<SymExpr> sizes;
  int producer = -1;     // node index, or -1 for a graph input (or a value a pass removed)
  int output_index = 0;  // which output of the producer
  Device device;
  StrideClass strides = StrideClass::contiguous;
  bool is_symbolic() const;
};

struct Input {
  InputKind kind = InputKind::argument;
  int arg_index = -1;            // argument: position in the call's argument list
  const Tensor* slot = nullptr;  // state: where the current tensor lives
  Tensor tensor;                 // state (as traced), captured, constant
  std::string name;
  int value = -1;
};

struct Node {
  OpId op;
  OpAttrs attrs;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids, one per output of the op
  // False when traced with grad mode off (NoGradGuard in the function): it records no history.
  bool grad = true;
  // The jit::checkpoint region it was recorded in (0: none). Values a region makes and only it
  // reads are never saved for the compiled backward, which recomputes them.
  int checkpoint = 0;
  int output() const { return outputs.at(0); }
};

// A symbolic size: its traced value and where a call's arguments give its run-time value.
struct Symbol {
  std::int64_t traced = 0;
  int arg_index = -1;
  int dim = -1;
};

// A random node's seed and offset (runtime/random.h), which the graph reads as state inputs
// through these slots. Before each call, the slots take the generator's seed and the offset that
// advancing it by the draw's counters at the call's sizes returns, draw by draw in trace order,
// as eager code would advance it. A fresh tensor each call: a backward that saved the forward's
// keeps them, and regenerates the forward's numbers.
struct RandomDraw {
  Generator* generator = nullptr;
  OpId op = OpId::random_uniform;
  std::vector<SymExpr> shape;
  std::shared_ptr<Tensor> seed, offset;
};

class Graph {
 public:
  std::string name = "fn";
  std::vector<Value> values;
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<int> outputs;
  // In-place writes to inputs, functionalized: the last mutated_inputs.size() outputs are the
  // final values of those inputs (named by their values), which a call writes back into them.
  std::vector<int> mutated_inputs;
  std::vector<Symbol> symbols;
  // Random draws, in the order the function made them (their slots are shared by copies).
  std::vector<RandomDraw> random_draws;

  // The outputs the function returned, before the written-back values.
  std::size_t num_returned() const { return outputs.size() - mutated_inputs.size(); }

  int add_value(TensorMeta meta, int producer, int output_index = 0);
  int add_input(Input input, TensorMeta meta);
  // Adds the node and one value per output; returns the node's index.
  int add_node(Node node, std::span<const TensorMeta> outputs);
  bool is_constant(int value) const;
  const Input* input_of(int value) const;
  // The random draw whose seed or offset `slot` is, or -1.
  int draw_of(const Tensor* slot) const;

  // Deterministic text: one line per node, `%3: f32[s0, 4] = add(%1, %2)`.
  std::string str() const;
  // Graphviz DOT with inputs as ellipses and ops as boxes; with `cluster_of` (node -> cluster)
  // the nodes of each cluster are drawn in a box labelled by `cluster_labels`.
  std::string dot(std::span<const int> cluster_of = {},
                  std::span<const std::string> cluster_labels = {}) const;
};

// The layout an op's output has on the backends: views keep or permute their input's layout,
// every other op writes a fresh contiguous tensor.
StrideClass output_strides(OpId op, const OpAttrs& attrs, StrideClass input);
// The permutation of `rank` dims that swaps the last two (a matrix transpose), and whether
// `dims` is one.
std::vector<std::int64_t> last_two_swapped(std::size_t rank);
bool swaps_last_two(const std::vector<std::int64_t>& dims);

// "f32[s0, 4]" (with {general} strides and @device when they are not the default).
std::string value_type_str(const Value& v);

}  // namespace kiln::graph
