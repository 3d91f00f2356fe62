// The fuser's partition: which nodes of a graph run together as one generated kernel, which are
// library calls or host-side views, and, for every edge between two groups, why the two were not
// fused. Pure IR: scheduling and code generation (jit/) take the groups from here.
//
// The rules, in the order they are checked (each is tested in tests/test_fusion.cpp):
//  1. Only elementwise, reduction, normalization and view nodes fuse, and only those the code
//     generator can render: it says so per node (KernelCoverage). A node it cannot render is a
//     group of its own whose reason names the op while its neighbours still fuse; one that
//     reads its element's place (tril; a random op's linear index) joins a kernel with
//     reductions only over full values whose rows are the trailing dims (tril: constant
//     sizes); cat, pad, and a view of a value computed in the kernel joins it only where the
//     generator can render that view (otherwise the value is written and the view reads it).
//     Matmul is a library call (its epilogue is the cuBLASLt lowering's), index, scan and
//     movement ops and device transfers are kernels of their own. A gather that picks one
//     element per row (its index shaped like the rows, keepdim: cross-entropy's pick of the
//     target's log-probability) is a reduction over that dim, a row select, and fuses as one.
//  2. A group iterates one domain: the shape of its largest values. Elementwise chains fuse when
//     their values cover the same number of elements (views are index arithmetic); a computed
//     value broadcast to a larger shape is a boundary, since fusing would recompute its
//     producers per element. In a pointwise kernel that moves data by index (a cat, pad, slice,
//     permute or reshape of a value it computes; constant sizes), a value of another shape is
//     computed where such a map reads it, if only the kernel reads it; the kernel writes only
//     values of its domain's shape. A cat or pad that would compute nothing else stays a
//     movement kernel of its own.
//  3. A group with reductions has rows: every reduction in it folds the same dims of the same
//     domain. Its values are either full (the domain's shape) or reduced (the rows' shape): an
//     elementwise prologue, several reductions over the same rows, epilogues over the reduced
//     values, and epilogues that broadcast a reduced value back over its row (softmax,
//     LayerNorm) are one kernel. Reading a reduced value back over the row needs the row on one
//     block, so a reduction over every dim keeps no such epilogue.
//  4. No cycles: two groups do not merge when a path between them leaves the pair.
//  5. No recomputation: every node is in exactly one group; a value needed by several groups is
//     written once by its own. The one exception is a cast of graph inputs (an f16 weight
//     widened to f32) read only by one kernel: that kernel recomputes it where it reads it,
//     unless the kernel adds it to a matmul's product as a bias (autocast's bf16 bias): then it
//     stays its own kernel, so the product's epilogue can be the cuBLASLt call's BIAS.
//  6. Bounds: at most `max_inputs` tensors read and `max_nodes` nodes per kernel.
//  7. Siblings: two groups over the same domain and rows that read a common tensor and do not
//     depend on each other become one multi-output kernel (the tensor is read once).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

enum class FusionKind : std::uint8_t {
  pointwise,         // elementwise chain over one domain
  reduction,         // reductions over the same rows, with prologues and reduced epilogues
  normalization,     // a reduction read back over its rows: the row stays on chip
  view,              // views of a value produced elsewhere: a stride change on the host, no kernel
  matmul,            // a library call
  index,             // gather, index_select, scatter_add, index_add
  scan,              // cumsum
  sort,              // sort, topk
  cached_attention,  // attention over a KV cache's live rows (split-KV kernels of its own)
  movement,          // cat, pad
  transfer,          // to_device
  attention,   // attention or its backward: one op, a kernel (or library-like call) of its own
  unrendered,  // a node the code generator cannot render: it runs alone, as an eager op
};
std::string_view fusion_kind_name(FusionKind kind);

struct FusionGroup {
  FusionKind kind = FusionKind::pointwise;
  std::string name;             // after the ops it fuses: "sum_div_sub_mul_rsqrt_add"
  std::vector<int> nodes;       // node indices, in graph (topological) order
  std::vector<int> inputs;      // values read from outside the group, in first-use order
  std::vector<int> outputs;     // values the group writes: read by other groups or returned
  std::vector<SymExpr> domain;  // the iteration shape (full values)
  std::vector<std::int64_t> reduce_dims;  // dims of `domain` folded into rows; empty: none
  std::string unrendered;                 // kind unrendered: why, naming the op and its dtypes
  // Whether running the group launches device work (a kernel or a library call); a view group
  // only changes strides on the host.
  bool launches() const;
};

// An edge between two groups: value `value` made by a node of `producer` is read by node
// `consumer_node` of group `consumer`.
struct UnfusedEdge {
  int value = -1;
  int producer = -1;
  int consumer = -1;
  int consumer_node = -1;
  std::string reason;
};

struct FusionLimits {
  int max_inputs = 24;  // tensors a kernel reads: kernel parameter space and index registers
  int max_nodes = 96;   // nodes a kernel computes: a proxy for its registers
};

struct Partition {
  std::vector<FusionGroup> groups;  // in an order that respects every edge
  std::vector<int> group_of;        // node index -> group index
  std::vector<UnfusedEdge> unfused;

  int launch_count() const;
  // One block per group (kind, name, nodes, domain, inputs, outputs), then the unfused edges
  // with their reasons: what KILN_LOG=fusion prints.
  std::string str(const Graph& graph) const;
  // The graph's DOT with one cluster per group.
  std::string dot(const Graph& graph) const;
};

// What the code generator can compute inside a generated kernel, asked per node. graph/ declares
// it and jit/ implements it from its expression table, so that coverage is a fusion rule rather
// than an error caught while rendering.
class KernelCoverage {
 public:
  virtual ~KernelCoverage() = default;
  // Why a kernel of `kind` (pointwise, or reduction, which also stands for normalization)
  // cannot compute node `node` of `graph`, naming the op and its dtypes; nullopt when it can.
  virtual std::optional<std::string> unrendered_reason(const Graph& graph, int node,
                                                       FusionKind kind) const = 0;
  // Why a kernel of `kind` cannot apply the view node `node` to a value it computes itself
  // (rather than to a tensor it reads, whose strides the host changes); nullopt when it can.
  virtual std::optional<std::string> unrendered_view(const Graph& graph, int node,
                                                     FusionKind kind) const = 0;
  // Whether node `node` reads its element's row and column (tril, triu): a kernel with
  // reductions over the trailing dims renders it over its full values (rule 1).
  virtual bool reads_position(const Graph& /*graph*/, int /*node*/) const { return false; }
  // Whether node `node` reads its element's linear index in its own output (the random ops):
  // a kernel with reductions over the trailing dims renders it over its full values, any sizes
  // (rule 1); a pointwise kernel where its output covers the domain (rule 2, never broadcast).
  virtual bool reads_index(const Graph& /*graph*/, int /*node*/) const { return false; }
};

// Without `coverage`, every node of a fusible class counts as renderable (the pure IR rules).
Partition partition(const Graph& graph, const FusionLimits& limits = {},
                    const KernelCoverage* coverage = nullptr);

// Rule 1's row select: gather(x, dim, index) with index of x's shape but 1 at dim.
bool is_row_select(const Graph& graph, const Node& node);
// How the fuser treats the node: a row select is a reduction, anything else its op's class.
OpClass fusion_class(const Graph& graph, const Node& node);

// Where a value of a group lives: over the whole domain, once per row, or neither (a cast of a
// graph input broadcast into the kernel, recomputed wherever it is read).
enum class ValueLevel { full, reduced, broadcast };
ValueLevel value_level(const FusionGroup& group, const std::vector<SymExpr>& sizes);

}  // namespace kiln::graph
