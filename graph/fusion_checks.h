// The checks the fuser makes of one candidate kernel before a merge (graph/fusion.cpp's
// partitioner asks them): the rules of fusion.h that look only at the merged nodes, their domain
// and the graph, not at how the partition reached them. Each answers with why the kernel would be
// refused, or nothing.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/fusion_domain.h"
#include "graph/rewrite.h"

namespace kiln::graph {
class KernelCoverage;
}

namespace kiln::graph::detail {

class KernelChecks {
 public:
  KernelChecks(const Graph& g, const KernelCoverage* coverage, const Readers& readers)
      : g_(g), coverage_(coverage), readers_(readers) {}

  // cat and pad: data movement a pointwise kernel renders as index arithmetic.
  static bool moves_by_index(OpId op);
  // A cat or pad that would compute nothing else among `members` stays a kernel of its own.
  std::optional<std::string> lone_movement_reason(const std::vector<int>& members) const;
  // Rule 2 for index-aware kernels: `v`, not covering domain `d`, is computed where index maps
  // of the kernel `inside` read it.
  bool index_mapped(int v, const std::set<int>& inside, const Domain& d) const;
  // Node `n` reads its element's row and column, and renders in a kernel over rows `d`.
  bool position_in_rows(int n, const Domain& d) const;
  // Why value `v` cannot join a kernel over `d` (it is neither full nor reduced there).
  std::string level_reason(int v, const Domain& d) const;
  // The rules on the whole candidate kernel `members` (`inside` as a set) over `d`.
  std::optional<std::string> view_reason(const std::vector<int>& members,
                                         const std::set<int>& inside, const Domain& d) const;
  std::optional<std::string> index_reason(const std::vector<int>& members,
                                          const std::set<int>& inside, const Domain& d) const;
  std::optional<std::string> row_reason(const std::vector<int>& members,
                                        const std::set<int>& inside, const Domain& d) const;
  std::optional<std::string> alignment_reason(const std::vector<int>& members,
                                              const std::set<int>& inside, const Domain& d) const;

 private:
  bool computed_in(int v, const std::set<int>& inside) const;
  bool reshapes_expanded(const Node& node) const;
  bool moves_data(const std::set<int>& inside) const;
  static bool tracked_sizes(const std::vector<SymExpr>& sizes);  // none opaque

  const Graph& g_;
  const KernelCoverage* coverage_;
  const Readers& readers_;
};

}  // namespace kiln::graph::detail
