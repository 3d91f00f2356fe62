// What tracing (graph/tracer.h) needs from runtime, without runtime knowing about graphs: a
// per-thread interceptor that records ops instead of running them, gives traced tensors their
// symbolic sizes, and hears of every size user code turns into a plain integer (such reads
// specialize dynamic dims).
#pragma once

#include <array>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln {

class Generator;

// An operation that needs tensor data (item(), printing, host copies) was
// reached while tracing a function for compilation.
class NotTraceableError : public Error {
 public:
  using Error::Error;
};

class OpInterceptor {
 public:
  virtual ~OpInterceptor() = default;
  // Records `op` and returns placeholder outputs with the inferred metadata.
  virtual std::vector<Tensor> intercept(OpId op, std::span<const Tensor> inputs,
                                        const OpAttrs& attrs,
                                        std::span<const TensorMeta> outputs) = 0;
  // The size expression of dim `dim` of a traced tensor.
  virtual SymExpr size_expr(const TensorImpl& tensor, std::int64_t dim) = 0;
  // User code turned a size with this expression into a plain integer.
  virtual void on_size_read(const SymExpr& size) = 0;
  // True while recorded ops should also get autograd history, so that running the engine on
  // traced outputs records the backward (the compiled backward's joint graph).
  virtual bool records_history() const { return false; }
  // An in-place write of `src` (already of dst's shape and dtype) into `dst`: the interceptor
  // records it as a new value that `dst`, the tensors it views and their views hold from now on.
  virtual void on_write(const Tensor& dst, const Tensor& src) = 0;
  // The seed and offset a draw of random op `op` (its shape in `attrs`) from `gen` reads: tensors
  // the trace takes as inputs, which each call sets from `gen` (advancing it), so tracing itself
  // draws nothing.
  virtual std::array<Tensor, 2> random_inputs(OpId op, const OpAttrs& attrs, Generator& gen) = 0;
};

// The interceptor active on this thread, or nullptr when not tracing.
OpInterceptor* active_interceptor();

class InterceptorScope {
 public:
  explicit InterceptorScope(OpInterceptor* interceptor);
  ~InterceptorScope();
  InterceptorScope(const InterceptorScope&) = delete;
  InterceptorScope& operator=(const InterceptorScope&) = delete;

 private:
  OpInterceptor* previous_;
};

// Size reads made inside kiln's own op implementations are not user reads: ops whose results
// depend on sizes are checked another way (graph/tracer.h). Open one at the top of such an op.
class ShapeReadScope {
 public:
  ShapeReadScope();
  ~ShapeReadScope();
  ShapeReadScope(const ShapeReadScope&) = delete;
  ShapeReadScope& operator=(const ShapeReadScope&) = delete;
};

#define KILN_OP_SCOPE ::kiln::ShapeReadScope kiln_op_scope_

// Throws NotTraceableError naming `what` when `t` is a traced placeholder.
void check_not_traced(const Tensor& t, std::string_view what);
// Throws NotTraceableError naming `what` when a trace is being recorded on this thread.
void check_not_tracing(std::string_view what);

}  // namespace kiln
