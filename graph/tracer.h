// Records a function's ops into a Graph by running it on placeholder tensors: while a Tracer is
// active on a thread, the dispatch point hands every op to it instead of a backend.
#pragma once

#include <set>
#include <unordered_map>
#include <utility>

#include "graph/graph.h"
#include "runtime/trace_hooks.h"

namespace kiln::graph {

class Tracer : public OpInterceptor {
 public:
  explicit Tracer(std::string name);

  // The placeholder standing for tensor argument `arg_index`, with the given (possibly
  // perturbed) sizes; `symbols` gives each dim's symbol or -1.
  Tensor add_argument(const Tensor& real, int arg_index, std::string name, const Shape& shape,
                      const std::vector<int>& symbols);
  void set_outputs(const std::vector<Tensor>& outputs);
  Graph& graph() { return graph_; }

  // (value, dim) pairs whose sizes user code read; dim -1 means the whole shape.
  const std::set<std::pair<int, std::int64_t>>& size_reads() const { return size_reads_; }
  // After tracing: which lifted tensors turned out to be constants (nothing outside holds them).
  void classify_lifted();

  std::vector<Tensor> intercept(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                                std::span<const TensorMeta> outputs) override;
  void on_size_read(const TensorImpl& tensor, std::int64_t dim) override;

 private:
  int value_of(const Tensor& t);
  Tensor placeholder(int value, Device device);

  Graph graph_;
  std::unordered_map<const TensorImpl*, int> lifted_;  // real tensors already made inputs
  std::set<std::pair<int, std::int64_t>> size_reads_;
};

}  // namespace kiln::graph
