// Tensors to cuBLASLt descriptors, the documented rules, and the call (see lt_matmul.h).
#include "jit/codegen/lt_matmul.h"

#include <fmt/format.h>

#include <climits>
#include <cstdlib>

#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/blaslt/lt_api.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/cuda_backend.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

namespace lt = cuda::blaslt;

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f64:
      return CUDA_R_64F;
    default:
      return CUDA_R_32F;
  }
}

// A row-major R x C matrix (strides rs, cs) as a column-major cuBLASLt operand L with
// op(L) = X^T: a row-major matrix is its own transpose in column-major order (op N), a
// column-major one (a transposed view such as linear's weight.t()) is handed over with op T.
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};
std::optional<Operand> transposed_operand(std::int64_t R, std::int64_t C, std::int64_t rs,
                                          std::int64_t cs) {
  if (C == 1) cs = 1;  // the stride of a size-1 dim is never used
  if (R == 1) rs = std::max<std::int64_t>(C, 1);
  if (cs == 1 && rs >= std::max<std::int64_t>(C, 1))
    return Operand{CUBLAS_OP_N, std::uint64_t(C), std::uint64_t(R), rs, 0};
  if (rs == 1 && cs >= std::max<std::int64_t>(R, 1))
    return Operand{CUBLAS_OP_T, std::uint64_t(R), std::uint64_t(C), cs, 0};
  return std::nullopt;
}

// The one stride between consecutive batches of `t` over the batch shape `batch` (0 where it
// broadcasts), or nullopt when its batch dims do not collapse to one stride.
std::optional<std::int64_t> batch_stride(const Tensor& t, const Shape& batch) {
  auto r = static_cast<std::int64_t>(batch.size());
  std::optional<std::int64_t> s;
  std::int64_t inner = 1;
  for (std::int64_t d = r - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    std::int64_t td = static_cast<std::int64_t>(t.dim()) - 2 - (r - d);
    std::int64_t st = td >= 0 && t.shape()[td] != 1 ? t.strides()[td] : 0;
    if (!s) {
      s = st;
    } else if (st != *s * inner) {
      return std::nullopt;
    }
    inner *= batch[d];
  }
  return s.value_or(0);
}

// a's batch dims and its row dim as ONE row dim (x [B, T, K] @ w [K, N] is one [B*T, K] GEMM):
// the folded row stride, or nullopt when the dims do not collapse.
std::optional<std::int64_t> fold_rows(const Tensor& a) {
  std::optional<std::int64_t> stride;
  std::int64_t inner = 1;
  for (std::int64_t d = static_cast<std::int64_t>(a.dim()) - 2; d >= 0; --d) {
    if (a.shape()[d] == 1) continue;
    if (!stride)
      stride = a.strides()[d];
    else if (a.strides()[d] != *stride * inner)
      return std::nullopt;
    inner *= a.shape()[d];
  }
  return stride.value_or(std::max<std::int64_t>(a.shape().back(), 1));
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Everything try_lt_forward needs, or the rule that failed.
struct Mapping {
  Shape out_shape;
  lt::MatmulSpec spec;
  std::int64_t rows = 0, n = 0, batches = 1;
};

// A forward or backward problem: what map_problem needs from either.
struct Problem {
  Tensor a, b, bias;
  Activation act = Activation::none;
  bool save_aux = false;
  bool backward = false;  // DRELU/DGELU read `aux_in`; bias_grad writes a bias gradient
  Tensor aux_in;
  std::int64_t aux_in_ld = 0;
  bool bias_grad = false;
  std::optional<DType> out_dtype;  // unset: a's
  DType out() const { return out_dtype.value_or(a.dtype()); }
};
Problem forward_problem(const LtForward& f) {
  Problem p;
  p.a = f.a, p.b = f.b, p.bias = f.bias, p.act = f.act, p.save_aux = f.save_aux;
  p.out_dtype = f.out_dtype;
  return p;
}

cublasLtEpilogue_t backward_epilogue(Activation act, bool bias_grad) {
  switch (act) {
    case Activation::relu:
      return bias_grad ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
    case Activation::gelu_tanh:
      return bias_grad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    default:
      return bias_grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// Rules on the operands alone: the library, ranks, dtypes and devices.
std::string operand_rule_failure(const Problem& p) {
  try {
    (void)lt::lt_api();  // descriptors need the library, not a GPU
  } catch (const Error& e) {
    return e.what();
  }
  const Tensor &a = p.a, &b = p.b;
  DType dt = a.dtype();
  if (a.dim() < 2 || b.dim() < 2)
    return fmt::format("operands of rank {} and {}: cuBLASLt takes matrices", a.dim(), b.dim());
  if (dt != b.dtype() || (p.bias.defined() && p.bias.dtype() != dt))
    return fmt::format(
        "dtypes {} @ {}{} differ: cuBLASLt's supported combinations have one "
        "storage type",
        dtype_name(dt), dtype_name(b.dtype()),
        p.bias.defined() ? fmt::format(" + {}", dtype_name(p.bias.dtype())) : "");
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16 && dt != DType::f64)
    return fmt::format(
        "dtype {}: cuBLASLt takes f32 (TF32 on request), f16 and bf16 with f32 "
        "compute, f64",
        dtype_name(dt));
  if (dt == DType::f64 && (p.bias.defined() || p.act != Activation::none || p.bias_grad))
    return "f64 with an epilogue: kiln lowers f64 only as a plain GEMM (cuBLASLt documents its "
           "epilogues for f32, f16 and bf16)";
  if (p.out() != dt) {
    if ((dt != DType::f16 && dt != DType::bf16) || p.out() != DType::f32)
      return fmt::format("a {} output of a {} product: cuBLASLt widens only f16/bf16 to f32",
                         dtype_name(p.out()), dtype_name(dt));
    if (p.bias.defined() || p.save_aux || (p.backward && p.act != Activation::none))
      return fmt::format(
          "a {} output of a {} product with a bias, aux or activation gradient: kiln widens "
          "only the product, its activation and its BGRADB bias gradient (cuBLASLt's bias and "
          "aux are D's type)",
          dtype_name(p.out()), dtype_name(dt));
  }
  if (!a.device().is_cuda() || !b.device().is_cuda() ||
      (p.bias.defined() && !p.bias.device().is_cuda()))
    return "an operand is not a CUDA tensor";
  return "";
}

// The operands' leading dims, broadcast.
Shape broadcast_batch(const Tensor& a, const Tensor& b) {
  std::size_t r = std::max(a.dim(), b.dim()) - 2;
  Shape batch(r, 1);
  for (std::size_t d = 0; d < r; ++d)
    for (const Tensor* t : {&a, &b}) {
      std::int64_t td = static_cast<std::int64_t>(t->dim()) - 2 - static_cast<std::int64_t>(r - d);
      if (td >= 0 && t->shape()[td] != 1) batch[d] = t->shape()[td];
    }
  return batch;
}

// The bias of the N output features, and the operands' pointers.
std::string bias_and_alignment_failure(const Problem& p, std::int64_t N) {
  if (p.bias.defined()) {
    if (p.bias.dim() != 1 || p.bias.shape()[0] != N)
      return fmt::format(
          "bias of shape {}: the BIAS epilogue adds a vector of the {} output "
          "features",
          shape_str(p.bias.shape()), N);
    if (N > 1 && p.bias.strides()[0] != 1) return "bias is not packed (stride between elements 1)";
    if (!aligned(p.bias.raw_data(), 16)) return "bias pointer is not 16-byte aligned";
  }
  std::size_t item = itemsize(p.a.dtype());
  for (const Tensor* t : {&p.a, &p.b})
    if (!aligned(t->raw_data(), item))
      return fmt::format("an operand pointer is not aligned to its {}-byte elements", item);
  return "";
}

// b and a as cuBLASLt's A and B (swapped), with the rows of the product and its batches.
struct Operands {
  Operand A, B;
  std::int64_t rows = 0, batches = 1;
};

std::string map_operands(const Problem& p, const Shape& batch, Operands& o) {
  const Tensor &a = p.a, &b = p.b;
  const std::int64_t M = a.shape()[a.dim() - 2], K = a.shape().back(), N = b.shape().back();
  // Rows of the product: a's batch dims fold into M when b is one matrix and a's dims allow.
  std::int64_t batches = 1;
  for (auto s : batch) batches *= s;
  std::int64_t rows = M, a_rs = a.strides()[a.dim() - 2];
  if (b.dim() == 2 && batches > 1)
    if (auto folded = fold_rows(a)) rows = M * batches, batches = 1, a_rs = *folded;
  auto A = transposed_operand(K, N, b.strides()[b.dim() - 2], b.strides().back());
  auto B = transposed_operand(rows, K, a_rs, a.strides().back());
  if (!A || !B)
    return fmt::format("operand strides {} / {}: neither row- nor column-major matrices",
                       fmt::join(a.strides(), ","), fmt::join(b.strides(), ","));
  if (batches > 1) {
    auto sa = batch_stride(a, batch), sb = batch_stride(b, batch);
    if (!sa || !sb) return "batch dims do not collapse to one stride per operand";
    if (batches > INT_MAX) return "more batches than cuBLASLt's int32 batch count";
    B->batch_stride = *sa;
    A->batch_stride = *sb;
  }
  o = Operands{*A, *B, rows, batches};
  return "";
}

// The spec asked of cuBLASLt: types, transposes, epilogue, layouts and the forward aux's.
void fill_spec(const Problem& p, const Operands& o, std::int64_t M, std::int64_t N,
               lt::MatmulSpec& s) {
  DType dt = p.a.dtype();
  cudaDataType_t type = lt_type(dt);
  s.compute = dt == DType::f64                   ? CUBLAS_COMPUTE_64F
              : dt == DType::f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
  s.scale = dt == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
  s.trans_a = o.A.op;
  s.trans_b = o.B.op;
  s.epilogue = p.backward ? backward_epilogue(p.act, p.bias_grad)
                          : forward_epilogue(p.bias.defined(), p.act, p.save_aux);
  auto bc = static_cast<std::int32_t>(o.batches);
  s.a = {type, o.A.rows, o.A.cols, o.A.ld, CUBLASLT_ORDER_COL, bc, o.A.batch_stride};
  s.b = {type, o.B.rows, o.B.cols, o.B.ld, CUBLASLT_ORDER_COL, bc, o.B.batch_stride};
  s.c = s.d = {lt_type(p.out()),         std::uint64_t(N),
               std::uint64_t(o.rows),    std::max<std::int64_t>(N, 1),
               CUBLASLT_ORDER_COL,       bc,
               o.batches > 1 ? M * N : 0};
  if (p.save_aux && p.act == Activation::gelu_tanh) {
    s.aux_ld = N;  // the aux is the pre-activation as a plain [..., M, N] tensor
    s.aux_batch_stride = o.batches > 1 ? M * N : 0;
  } else if (p.save_aux && p.act == Activation::relu) {
    s.aux_ld = (N + 127) / 128 * 128;  // bits; kiln owns this buffer, so it pads
    s.aux_batch_stride = o.batches > 1 ? s.aux_ld * M : 0;
  }
}

// The documented rules, on what will be asked (cublasLt.h: EPILOGUE_AUX_LD, ORDER).
std::string epilogue_rule_failure(const Problem& p, const lt::MatmulSpec& s, std::int64_t N) {
  if (s.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    for (const auto* x : {&s.a, &s.b, &s.c, &s.d})
      if (x->order != CUBLASLT_ORDER_COL) return "row-major order with an epilogue";
  if (p.save_aux && p.act == Activation::gelu_tanh && s.aux_ld % 8 != 0)
    return fmt::format(
        "GELU aux leading dimension {} (the {} output features) is not a multiple "
        "of 8",
        s.aux_ld, N);
  if (p.save_aux && p.act == Activation::relu && s.aux_ld % 128 != 0)
    return fmt::format("ReLU bitmask leading dimension {} is not a multiple of 128", s.aux_ld);
  if (p.save_aux && p.act == Activation::none) return "an aux output needs an activation";
  return "";
}

// A backward form's aux: the forward's, for this product's shape (GELU's pre-activation,
// ReLU's bitmask).
std::string backward_aux_failure(const Problem& p, Mapping& m, std::int64_t M, std::int64_t N) {
  lt::MatmulSpec& s = m.spec;
  const Tensor& aux = p.aux_in;
  s.aux_ld = p.aux_in_ld;
  bool relu = p.act == Activation::relu;
  std::int64_t per_row = relu ? s.aux_ld / 8 : s.aux_ld;
  if (!aux.defined() || !aux.device().is_cuda() || !aux.is_contiguous() ||
      aux.numel() != m.batches * m.rows * per_row ||
      aux.dtype() != (relu ? DType::bool_ : p.a.dtype()))
    return fmt::format("the {} aux does not match the product [{} rows, {} features]",
                       activation_name(p.act), m.batches * m.rows, N);
  if (s.aux_ld % (relu ? 128 : 8) != 0 || s.aux_ld < N)
    return fmt::format(
        "aux leading dimension {} breaks the {} rule (a multiple of {}, at least "
        "{})",
        s.aux_ld, activation_name(p.act), relu ? 128 : 8, N);
  if (!aligned(aux.raw_data(), 16)) return "aux pointer is not 16-byte aligned";
  s.aux_batch_stride = m.batches > 1 ? s.aux_ld * M : 0;
  return "";
}

std::string map_problem(const Problem& p, Mapping& m) {
  if (std::string failed = operand_rule_failure(p); !failed.empty()) return failed;
  const Tensor &a = p.a, &b = p.b;
  const std::int64_t M = a.shape()[a.dim() - 2], K = a.shape().back(), N = b.shape().back();
  if (b.shape()[b.dim() - 2] != K)
    return fmt::format("inner dims {} and {} differ", K, b.shape()[b.dim() - 2]);
  Shape batch = broadcast_batch(a, b);
  m.out_shape = batch;
  m.out_shape.push_back(M);
  m.out_shape.push_back(N);
  m.n = N;
  if (K == 0) return "k = 0 (an empty sum): the generated GEMM writes its zeros";
  if (std::string failed = bias_and_alignment_failure(p, N); !failed.empty()) return failed;
  Operands o;
  if (std::string failed = map_operands(p, batch, o); !failed.empty()) return failed;
  m.rows = o.rows;
  m.batches = o.batches;
  fill_spec(p, o, M, N, m.spec);
  if (std::string failed = epilogue_rule_failure(p, m.spec, N); !failed.empty()) return failed;
  if (p.backward && p.act != Activation::none) return backward_aux_failure(p, m, M, N);
  return "";
}

// One cublasLtMatmul of `s` on the backend's service: out = a @ b in row-major terms (A and B
// swapped), with a workspace from the caching allocator. When the library's heuristic finds no
// algorithm, nothing ran: returns why, for the caller's fallback; "" after the call.
std::string execute(const lt::MatmulSpec& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  lt::Descriptors desc(s);
  auto& service = lt::service(cuda::backend());
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool f64 = s.scale == CUDA_R_64F;
  auto d = reinterpret_cast<cuda::DevicePtr>(out.raw_data());
  lt::MatmulCall call = lt::make_call(desc, f64 ? static_cast<const void*>(&one64) : &one32,
                                      f64 ? static_cast<const void*>(&zero64) : &zero32,
                                      reinterpret_cast<cuda::DevicePtr>(b.raw_data()),
                                      reinterpret_cast<cuda::DevicePtr>(a.raw_data()), d, d);
  cuda::CachingAllocator& allocator = cuda_allocator();
  call.workspace_bytes = service.workspace_bytes();
  call.stream = cuda::current_stream();
  call.workspace = allocator.allocate(call.workspace_bytes, call.stream);
  std::string no_algorithm;
  try {
    service.matmul(call);
  } catch (const lt::NoAlgorithmError& e) {
    no_algorithm = fmt::format("cuBLASLt found no algorithm ({})", e.what());
  } catch (...) {
    allocator.deallocate(call.workspace);
    throw;
  }
  allocator.deallocate(call.workspace);  // stream-ordered: the next user queues after this call
  return no_algorithm;
}

}  // namespace

cublasLtEpilogue_t forward_epilogue(bool bias, Activation act, bool save_aux) {
  switch (act) {
    case Activation::relu:
      return save_aux ? (bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX)
                      : (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU);
    case Activation::gelu_tanh:
      return save_aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                      : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    default:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

std::string lt_rule_failure(const LtForward& problem) {
  Mapping m;
  return map_problem(forward_problem(problem), m);
}

namespace {
// Whether a rule failed; if so, says which in `why` and counts the fallback.
bool refused(const std::string& failed, std::string* why) {
  if (failed.empty()) return false;
  if (why) *why = failed;
  ++lt_stats().fallbacks;
  return true;
}
}  // namespace

std::optional<LtResult> try_lt_forward(const LtForward& p, std::string* why) {
  Mapping m;
  if (refused(map_problem(forward_problem(p), m), why)) return std::nullopt;
  DType dt = p.a.dtype();
  LtResult r;
  r.out = empty(m.out_shape, forward_problem(p).out(), Device::cuda());
  lt::MatmulSpec& s = m.spec;
  if (p.save_aux) {
    r.aux_ld = s.aux_ld;
    if (p.act == Activation::gelu_tanh) {
      r.aux = empty(m.out_shape, dt, Device::cuda());
    } else {
      // The bitmask: rows of aux_ld bits, one row per output row of every batch.
      r.aux = empty({m.batches * m.rows, s.aux_ld / 8}, DType::bool_, Device::cuda());
    }
  }
  if (r.out.numel() == 0) {
    r.spec = s;
    return r;
  }
  if (p.bias.defined()) s.bias = reinterpret_cast<cuda::DevicePtr>(p.bias.raw_data());
  if (r.aux.defined()) s.aux = reinterpret_cast<cuda::DevicePtr>(r.aux.raw_data());
  if (refused(execute(s, p.a, p.b, r.out), why)) return std::nullopt;
  r.spec = s;
  ++lt_stats().calls;
  std::int64_t read = (p.a.numel() + p.b.numel()) * std::int64_t(itemsize(dt));
  if (p.bias.defined()) read += p.bias.numel() * std::int64_t(itemsize(dt));
  lt_stats().bytes_read += read;
  lt_stats().bytes_written +=
      r.out.numel() * std::int64_t(itemsize(r.out.dtype())) +
      (r.aux.defined() ? r.aux.numel() * std::int64_t(itemsize(r.aux.dtype())) : 0);
  return r;
}

std::optional<LtGrad> try_lt_backward(const LtBackward& g, std::string* why) {
  Problem p;
  p.a = g.a, p.b = g.b, p.act = g.act, p.backward = true, p.aux_in = g.aux, p.aux_in_ld = g.aux_ld,
  p.bias_grad = g.bias_grad;
  p.out_dtype = g.out_dtype;
  Mapping m;
  std::string failed = map_problem(p, m);
  if (failed.empty() && g.bias_grad && m.batches > 1)
    failed = "a bias gradient over batches that do not fold into rows";
  if (refused(failed, why)) return std::nullopt;
  DType dt = p.out();  // the product's and the bias gradient's (D's type)
  LtGrad r;
  r.out = empty(m.out_shape, dt, Device::cuda());
  lt::MatmulSpec& s = m.spec;
  if (g.bias_grad) {
    // D*_BGRAD: one per output feature; BGRADB: one per row of `a` (its sum over k).
    std::int64_t len = g.act == Activation::none ? m.rows : m.n;
    r.bias_grad = empty({len}, dt, Device::cuda());
    s.bias = reinterpret_cast<cuda::DevicePtr>(r.bias_grad.raw_data());
  }
  if (g.act != Activation::none) s.aux = reinterpret_cast<cuda::DevicePtr>(g.aux.raw_data());
  if (r.out.numel() == 0) return r;
  if (refused(execute(s, g.a, g.b, r.out), why)) return std::nullopt;
  r.spec = s;
  ++lt_stats().calls;
  std::int64_t item = static_cast<std::int64_t>(itemsize(dt));
  lt_stats().bytes_read +=
      (g.a.numel() + g.b.numel()) * static_cast<std::int64_t>(itemsize(g.a.dtype())) +
      (g.aux.defined() ? g.aux.numel() * std::int64_t(itemsize(g.aux.dtype())) : 0);
  lt_stats().bytes_written +=
      (r.out.numel() + (r.bias_grad.defined() ? r.bias_grad.numel() : 0)) * item;
  return r;
}

void log_lt_fallback(std::string_view what, const std::string& why) {
  if (log_enabled(LogTopic::fusion))
    log_line_once(fmt::format("kiln: {} -> generated GEMM + epilogue kernel: {}", what, why));
}

LtStats& lt_stats() {
  static LtStats stats;
  return stats;
}

namespace {
std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{[] {
    const char* v = std::getenv("KILN_MATMUL_TF32");
    return v && std::string_view(v) == "1";
  }()};
  return flag;
}
}  // namespace

bool allow_tf32() {
  return tf32_flag();
}
void set_allow_tf32(bool allow) {
  tf32_flag() = allow;
}

}  // namespace kiln::jit::codegen
