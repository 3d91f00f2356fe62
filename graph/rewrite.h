// The one way passes edit a graph: who reads a value, pointing its uses elsewhere, inserting a
// node in topological order, erasing nodes. Every edit keeps `Value::producer` exact (the index
// of the node making it, -1 once that node is gone), so no pass relies on dead-code elimination
// to renumber. Patterns over these edits are in graph/pattern.h.
#pragma once

#include <span>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

// A snapshot of who reads each value of a graph: the nodes naming it as an operand (in node order,
// once per operand, so a node reading it twice is listed twice) and whether a graph output returns
// it. Edits made after it is built are not seen.
class Readers {
 public:
  explicit Readers(const Graph& g);

  std::span<const int> nodes(int value) const;
  bool returned(int value) const { return returned_[value]; }
  // The node reading `value` through its only use (one operand of one node, not returned), or -1.
  int sole_reader(int value) const;
  bool unread(int value) const { return nodes(value).empty() && !returned_[value]; }

 private:
  std::vector<int> start_;  // value -> first entry in readers_ (start_[v + 1]: one past its last)
  std::vector<int> readers_;
  std::vector<bool> returned_;
};

// The node making `value`, or null for a graph input (or a value whose node was erased).
const Node* producer_of(const Graph& g, int value);

// Points every use of `from` (node operands and graph outputs) at `to`; returns how many there
// were.
int replace_all_uses(Graph& g, int from, int to);

// Inserts `node` before node `at` (at == g.nodes.size(): at the end), making one new value per
// entry of `outputs` (their producer and output_index are set here). Nodes from `at` on move one
// place later, their values' producers with them. Every operand must be made before `at` (the
// order stays topological); returns the new node's index.
int insert_before(Graph& g, int at, Node node, std::vector<Value> outputs);
// The same with op, operands and attributes only: the outputs' shapes, dtypes and size
// expressions come from the op's rules, their layout from output_strides; grad, checkpoint and
// device are those of `like` (the node the new one stands in for).
int insert_op_before(Graph& g, int at, OpId op, std::vector<int> inputs, const OpAttrs& attrs,
                     const Node& like);

// Removes the nodes at `indices` (any order, duplicates allowed). Their values keep their ids but
// name no producer; later nodes move up and their values' producers follow. Erasing a node whose
// value a remaining node reads or the graph returns is an Error.
void erase_nodes(Graph& g, std::span<const int> indices);

// Makes node `node`'s output `k` the value `value` (not a graph input), leaving the value it made
// before without a producer. A node that made `value` gives it up and must be erased next: how
// a node takes another's place and keeps its value id (transpose_matmul_results).
void rebind_output(Graph& g, int node, int k, int value);

}  // namespace kiln::graph
