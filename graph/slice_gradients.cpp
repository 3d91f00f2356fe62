// Gathering a backward's slice gradients back into one tensor: pads_to_cat and
// cat_before_reshape (see passes.h).
#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "graph/passes.h"
#include "graph/rewrite.h"

namespace kiln::graph {
namespace {

bool same_meta(const Value& a, const Value& b) {
  return a.meta.shape == b.meta.shape && a.meta.dtype == b.meta.dtype;
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

// The leaves of the tree of adds under `root` whose inner sums nothing else reads.
std::vector<int> sum_leaves(const Graph& g, const Readers& readers, const Node& root) {
  const Value& out = g.values[root.output()];
  std::vector<int> leaves, stack(root.inputs.rbegin(), root.inputs.rend());
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    const Node* p = producer_of(g, v);
    if (p && p->op == OpId::add && p->grad && readers.sole_reader(v) >= 0 &&
        same_meta(g.values[v], out)) {
      stack.insert(stack.end(), p->inputs.rbegin(), p->inputs.rend());
      continue;
    }
    leaves.push_back(v);
  }
  return leaves;
}

struct Piece {
  std::int64_t before, size;
  int value;
};

// The padded values, in order along the one dim their pads tile, when `leaves` are zero pads
// that together cover `out` exactly once.
std::optional<std::pair<std::int64_t, std::vector<Piece>>> tiling(const Graph& g,
                                                                  std::span<const int> leaves,
                                                                  const Value& out) {
  if (leaves.size() < 2) return std::nullopt;
  std::vector<Piece> pieces;
  std::int64_t dim = -1;
  for (int v : leaves) {
    const Node* p = producer_of(g, v);
    std::optional<PadAlong> along;
    // A no-grad pad is a stop-gradient a cat would not be.
    if (p && p->grad && same_meta(g.values[v], out)) along = pad_along(g, *p);
    if (!along || (dim >= 0 && along->dim != dim)) return std::nullopt;
    dim = along->dim;
    int in = p->inputs[0];
    pieces.push_back({along->before, g.values[in].meta.shape[dim], in});
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.before < b.before; });
  std::int64_t next = 0;
  for (const auto& piece : pieces) {
    if (piece.before != next || g.values[piece.value].meta.dtype != out.meta.dtype)
      return std::nullopt;
    next += piece.size;
  }
  if (next != out.meta.shape[dim]) return std::nullopt;
  return std::make_pair(dim, std::move(pieces));
}

// The values cat `c` would read instead of its reshapes, when every operand is a reshape that
// merges its input's trailing dims (from the cat's last dim on) into one; else empty.
std::vector<int> hoistable_sources(const Graph& g, const Node& c) {
  const Value& out = g.values[c.output()];
  const std::size_t rank = out.meta.shape.size();
  if (c.op != OpId::cat || rank == 0 || c.inputs.size() < 2 ||
      c.attrs.dim != static_cast<std::int64_t>(rank) - 1 || out.is_symbolic())
    return {};
  std::vector<int> sources;
  for (int v : c.inputs) {
    const Node* r = producer_of(g, v);
    if (!r || r->op != OpId::reshape || r->grad != c.grad) return {};
    const Value& x = g.values[r->inputs[0]];
    const Shape& xs = x.meta.shape;
    const Shape& first = sources.empty() ? xs : g.values[sources[0]].meta.shape;
    if (x.is_symbolic() || xs.size() <= rank ||
        !std::equal(out.meta.shape.begin(), out.meta.shape.end() - 1, xs.begin()) ||
        first.size() != xs.size() || !std::equal(xs.begin() + rank, xs.end(), first.begin() + rank))
      return {};
    sources.push_back(r->inputs[0]);
  }
  return sources;
}

// Turns cat node `at` into the reshape of a cat of `sources`, inserted before it.
void hoist_cat(Graph& g, int at, const std::vector<int>& sources) {
  const Value out = g.values[g.nodes[at].output()];
  const std::size_t rank = out.meta.shape.size();
  // cat(x_i, dim rank-1), then the reshape the inputs had: a contiguous cat reshapes as a view.
  Value joined = g.values[sources[0]];
  joined.meta.shape[rank - 1] = 0;
  for (int s : sources) joined.meta.shape[rank - 1] += g.values[s].meta.shape[rank - 1];
  joined.sizes.clear();
  for (auto size : joined.meta.shape) joined.sizes.push_back(SymExpr::constant(size));
  joined.strides = StrideClass::contiguous;
  Node cat = g.nodes[at];
  cat.inputs = sources;
  at = insert_before(g, at, std::move(cat), {std::move(joined)});
  Node& reshape = g.nodes[at + 1];
  reshape.op = OpId::reshape;
  reshape.attrs = OpAttrs{};
  reshape.attrs.shape = out.meta.shape;
  reshape.inputs = {g.nodes[at].output()};
}

}  // namespace

void pads_to_cat(Graph& g) {
  const Readers readers(g);  // as the pass found the graph: a rewritten add is a cat, not a sum
  for (auto& root : g.nodes) {
    if (root.op != OpId::add || !root.grad) continue;
    auto tiled = tiling(g, sum_leaves(g, readers, root), g.values[root.output()]);
    if (!tiled) continue;
    root.op = OpId::cat;
    root.attrs = OpAttrs{};
    root.attrs.dim = tiled->first;
    root.inputs.clear();
    for (const auto& piece : tiled->second) root.inputs.push_back(piece.value);
  }
}

void cat_before_reshape(Graph& g) {
  // Every cat is judged on the graph as found (a hoisted cat's reshape is not another cat's
  // operand to hoist through until the next run), then rewritten, by value.
  std::vector<std::pair<int, std::vector<int>>> hoists;
  for (const auto& c : g.nodes)
    if (auto sources = hoistable_sources(g, c); !sources.empty())
      hoists.emplace_back(c.output(), std::move(sources));
  for (const auto& [value, sources] : hoists) hoist_cat(g, g.values[value].producer, sources);
}

}  // namespace kiln::graph
