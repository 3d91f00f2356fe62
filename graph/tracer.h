// Records a function's ops into a Graph by running it on placeholder tensors: while a Tracer is
// active on a thread, the dispatch point hands every op to it instead of a backend. Each node
// remembers the grad mode it was recorded under (a NoGradGuard block in the function is a
// stop-gradient), and each value the expressions of its sizes.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "graph/graph.h"
#include "runtime/trace_hooks.h"

namespace kiln::graph {

class Tracer : public OpInterceptor {
 public:
  explicit Tracer(std::string name);

  // The placeholder standing for tensor argument `arg_index`, with the given (possibly
  // perturbed) sizes and the expression of each dim.
  Tensor add_argument(const Tensor& real, int arg_index, std::string name, const Shape& shape,
                      std::vector<SymExpr> sizes);
  // A tensor slot the function declared as its state: when the function reads the tensor it
  // holds, the graph reads the slot (on every call) instead of capturing the tensor.
  void declare_state(const Tensor* slot, std::string name);
  // An input described by `in` whose value has the metadata and size expressions of `like`
  // (re-tracing a graph: its inputs, or the incoming gradients of its outputs).
  Tensor add_input(Input in, const Value& like);
  // While on, recorded ops also get autograd history (see OpInterceptor::records_history).
  void set_records_history(bool on) { records_history_ = on; }
  bool records_history() const override { return records_history_; }
  void set_outputs(const std::vector<Tensor>& outputs);
  Graph& graph() { return graph_; }

  // Symbols whose sizes user code turned into plain integers, and whether it did so with a
  // size kiln does not follow symbolically.
  const std::set<int>& read_symbols() const { return read_symbols_; }
  bool read_opaque() const { return read_opaque_; }
  // After tracing: which lifted tensors turned out to be constants (nothing outside holds them).
  void classify_lifted();

  std::vector<Tensor> intercept(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs,
                                std::span<const TensorMeta> outputs) override;
  SymExpr size_expr(const TensorImpl& tensor, std::int64_t dim) override;
  void on_size_read(const SymExpr& size) override;
  // Functionalization: a write into a view becomes a new value of the tensor it views (the view
  // scattered back into it), every tensor holding the written value holds the new one, and
  // live views of it are taken again. Inputs written to are outputs of the graph.
  void on_write(const Tensor& dst, const Tensor& src) override;
  // A draw's seed and offset are state inputs, set per call (graph::RandomDraw).
  std::array<Tensor, 2> random_inputs(OpId op, const OpAttrs& attrs, Generator& gen) override;

 private:
  // A view value: the node that took it, the tensor it was taken from and the tensor holding it
  // (writes go through the tensors, never a value: two tensors may hold one value). Placeholders
  // are held here, so that a chain of views (x.t().slice(..)) stays connected when the user
  // drops its middle; a real tensor (a buffer) is held by its graph input.
  struct ViewOf {
    int node = -1;
    std::shared_ptr<TensorImpl> base_placeholder, view;
    std::weak_ptr<TensorImpl> base;
  };
  struct InputHolder {
    int input = -1;  // index into the graph's inputs
    std::weak_ptr<TensorImpl> tensor;
  };
  int value_of(const Tensor& t);
  Tensor placeholder(int value, Device device);
  Tensor held(int value) const;  // a placeholder of `value` that no tensor outside holds
  int current_value(const TensorImpl& t) const;
  void write(const std::shared_ptr<TensorImpl>& target, int value);
  void rebind(const std::shared_ptr<TensorImpl>& target, int value);
  int scattered(int value, const Node& view);
  void check_writable(std::shared_ptr<TensorImpl> target) const;
  void drop_unheld_views();
  void hold_input(const std::shared_ptr<TensorImpl>& tensor, int value, bool requires_grad);

  Graph graph_;
  std::unordered_map<const TensorImpl*, int> lifted_;  // real tensors already made inputs
  std::unordered_map<const TensorImpl*, std::pair<const Tensor*, std::string>> state_;
  std::set<int> given_inputs_;  // values from add_input: their kind is the caller's
  std::unordered_map<int, ViewOf> view_of_;   // by view value
  std::vector<InputHolder> input_holders_;    // the tensor standing for each input
  std::set<const TensorImpl*> grad_holders_;  // those whose tensors require grad
  std::set<int> read_symbols_;
  bool read_opaque_ = false;
  bool records_history_ = false;
};

// Puts the nodes traced while it lives in one checkpoint region (graph::Node::checkpoint): a new
// one, numbered per trace, unless a region is open already; or `region` when re-recording.
class CheckpointScope {
 public:
  CheckpointScope();
  explicit CheckpointScope(int region);
  ~CheckpointScope();
  CheckpointScope(const CheckpointScope&) = delete;
  CheckpointScope& operator=(const CheckpointScope&) = delete;

 private:
  int previous_;
};

}  // namespace kiln::graph
