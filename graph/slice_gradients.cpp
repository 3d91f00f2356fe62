// Gathering a backward's slice gradients back into one tensor (see passes.h).
#include <algorithm>

#include "graph/passes.h"

namespace kiln::graph {
namespace {

bool same_meta(const Value& a, const Value& b) {
  return a.meta.shape == b.meta.shape && a.meta.dtype == b.meta.dtype;
}

std::vector<int> reader_counts(const Graph& g) {
  std::vector<int> readers(g.values.size(), 0);
  for (const auto& n : g.nodes)
    for (int v : n.inputs) ++readers[v];
  for (int v : g.outputs) readers[v] += 2;  // a returned value is never folded away
  return readers;
}

// The one dim a zero pad widens and what it adds before it, or nullopt for another pad.
struct PadAlong {
  std::int64_t dim = -1, before = 0;
};
std::optional<PadAlong> pad_along(const Graph& g, const Node& pad) {
  if (pad.op != OpId::pad || pad.attrs.value != 0.0) return std::nullopt;
  const auto rank = static_cast<std::int64_t>(g.values[pad.output()].meta.shape.size());
  PadAlong along;
  // dims holds (before, after) pairs from the last dim backwards.
  for (std::size_t i = 0; i + 1 < pad.attrs.dims.size(); i += 2) {
    if (pad.attrs.dims[i] == 0 && pad.attrs.dims[i + 1] == 0) continue;
    if (along.dim >= 0) return std::nullopt;
    along.dim = rank - 1 - static_cast<std::int64_t>(i / 2);
    along.before = pad.attrs.dims[i];
  }
  if (along.dim < 0) return std::nullopt;
  return along;
}

}  // namespace

void pads_to_cat(Graph& g) {
  std::vector<int> readers = reader_counts(g);
  bool changed = false;
  for (auto& root : g.nodes) {
    if (root.op != OpId::add || !root.grad) continue;
    const Value& out = g.values[root.output()];
    // The leaves of the tree of adds under `root` whose inner sums nothing else reads.
    std::vector<int> leaves, stack(root.inputs.rbegin(), root.inputs.rend());
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      int p = g.values[v].producer;
      if (p >= 0 && g.nodes[p].op == OpId::add && g.nodes[p].grad && readers[v] == 1 &&
          same_meta(g.values[v], out)) {
        stack.insert(stack.end(), g.nodes[p].inputs.rbegin(), g.nodes[p].inputs.rend());
        continue;
      }
      leaves.push_back(v);
    }
    struct Piece {
      std::int64_t before, size;
      int value;
    };
    std::vector<Piece> pieces;
    std::int64_t dim = -1;
    bool tiles = leaves.size() >= 2;
    for (int v : leaves) {
      int p = g.values[v].producer;
      std::optional<PadAlong> along;
      // A no-grad pad is a stop-gradient a cat would not be.
      if (tiles && p >= 0 && g.nodes[p].grad && same_meta(g.values[v], out))
        along = pad_along(g, g.nodes[p]);
      if (!along || (dim >= 0 && along->dim != dim)) {
        tiles = false;
        break;
      }
      dim = along->dim;
      int in = g.nodes[p].inputs[0];
      pieces.push_back({along->before, g.values[in].meta.shape[dim], in});
    }
    if (!tiles) continue;
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.before < b.before; });
    std::int64_t next = 0;
    for (const auto& piece : pieces) {
      tiles = tiles && piece.before == next && g.values[piece.value].meta.dtype == out.meta.dtype;
      next += piece.size;
    }
    if (!tiles || next != out.meta.shape[dim]) continue;
    root.op = OpId::cat;
    root.attrs = OpAttrs{};
    root.attrs.dim = dim;
    root.inputs.clear();
    for (const auto& piece : pieces) root.inputs.push_back(piece.value);
    changed = true;
  }
  if (changed) eliminate_dead_code(g);
}

void cat_before_reshape(Graph& g) {
  std::vector<Node> nodes;
  bool changed = false;
  for (const auto& c : g.nodes) {
    const Value out = g.values[c.output()];
    const std::size_t rank = out.meta.shape.size();
    bool hoists = c.op == OpId::cat && rank > 0 && c.inputs.size() >= 2 &&
                  c.attrs.dim == static_cast<std::int64_t>(rank) - 1 && !out.is_symbolic();
    // Each input: reshape(x) merging x's dims rank-1.. into one, with the same trailing dims.
    std::vector<int> sources;
    for (int v : c.inputs) {
      if (!hoists) break;
      int p = g.values[v].producer;
      const Node* r = p >= 0 ? &g.nodes[p] : nullptr;
      hoists = r && r->op == OpId::reshape && r->grad == c.grad;
      if (!hoists) break;
      const Value& x = g.values[r->inputs[0]];
      const Shape& xs = x.meta.shape;
      const Shape& first = sources.empty() ? xs : g.values[sources[0]].meta.shape;
      hoists = !x.is_symbolic() && xs.size() > rank &&
               std::equal(out.meta.shape.begin(), out.meta.shape.end() - 1, xs.begin()) &&
               first.size() == xs.size() &&
               std::equal(xs.begin() + rank, xs.end(), first.begin() + rank);
      sources.push_back(r->inputs[0]);
    }
    if (!hoists) {
      nodes.push_back(c);  // a copy: later cats still read the reshapes in g.nodes
      continue;
    }
    // cat(x_i, dim rank-1), then the reshape the inputs had: a contiguous cat reshapes as a view.
    Value joined = g.values[sources[0]];
    joined.meta.shape[rank - 1] = 0;
    for (int s : sources) joined.meta.shape[rank - 1] += g.values[s].meta.shape[rank - 1];
    joined.sizes.clear();
    for (auto size : joined.meta.shape) joined.sizes.push_back(SymExpr::constant(size));
    joined.strides = StrideClass::contiguous;
    joined.producer = static_cast<int>(nodes.size());
    joined.output_index = 0;
    g.values.push_back(std::move(joined));
    int joined_id = static_cast<int>(g.values.size()) - 1;
    Node cat = c;
    cat.inputs = sources;
    cat.outputs = {joined_id};
    Node reshape = c;
    reshape.op = OpId::reshape;
    reshape.attrs = OpAttrs{};
    reshape.attrs.shape = out.meta.shape;
    reshape.inputs = {joined_id};
    nodes.push_back(std::move(cat));
    nodes.push_back(std::move(reshape));
    changed = true;
  }
  g.nodes = std::move(nodes);
  if (changed) eliminate_dead_code(g);  // renumbers producers, drops the old reshapes
}

}  // namespace kiln::graph
