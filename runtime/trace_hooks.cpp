// Per-thread tracing state.
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {
thread_local OpInterceptor* current_interceptor = nullptr;
thread_local int shape_read_depth = 0;
}  // namespace

OpInterceptor* active_interceptor() { return current_interceptor; }

InterceptorScope::InterceptorScope(OpInterceptor* interceptor) : previous_(current_interceptor) {
  current_interceptor = interceptor;
}
InterceptorScope::~InterceptorScope() { current_interceptor = previous_; }

ShapeReadScope::ShapeReadScope() { ++shape_read_depth; }
ShapeReadScope::~ShapeReadScope() { --shape_read_depth; }

void check_not_traced(const Tensor& t, std::string_view what) {
  KILN_CHECK_AS(NotTraceableError, !t.defined() || t.impl().trace_value < 0,
                "{}: the function being compiled reads the data of a traced tensor (shape {}, "
                "dtype {}); values are unknown while tracing, so data-dependent code is not "
                "traceable. Move it outside the compiled function.",
                what, shape_str(t.impl().shape), t.impl().dtype);
}

void check_not_tracing(std::string_view what) {
  KILN_CHECK_AS(NotTraceableError, current_interceptor == nullptr,
                "{}: not traceable inside a compiled function yet; call it outside and pass the "
                "result in as an argument",
                what);
}

void report_shape_read(const TensorImpl& impl) {
  if (!current_interceptor || shape_read_depth > 0) return;
  for (std::size_t d = 0; d < impl.shape.size(); ++d)
    current_interceptor->on_size_read(
        current_interceptor->size_expr(impl, static_cast<std::int64_t>(d)));
}

void report_sym_read(const SymExpr& expr) {
  if (current_interceptor && shape_read_depth == 0) current_interceptor->on_size_read(expr);
}

SymExpr traced_size_expr(const TensorImpl& impl, std::int64_t dim) {
  if (!current_interceptor) return SymExpr::constant(impl.shape[dim]);
  return current_interceptor->size_expr(impl, dim);
}

}  // namespace kiln
