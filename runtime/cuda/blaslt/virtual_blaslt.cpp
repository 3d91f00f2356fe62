// The virtual GPU's BLAS-Lt service: cuBLASLt's documented contract (blaslt.h) computed on the
// host from the REAL descriptors, read back through cublasLt*GetAttribute. Device memory of the
// virtual GPU is host memory, so this is a library call over it (Eigen for the product), with
// every operand range checked against live allocations as kernel accesses are.
#include <fmt/format.h>
#include <Eigen/Core>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/error.h"

namespace kiln::cuda::blaslt {
namespace {

std::size_t element_bytes(int type) {
  switch (type) {
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
      return 4;
    case CUDA_R_64F:
      return 8;
    default:
      return 0;
  }
}

template <typename Acc>
Acc load(int type, DevicePtr base, std::int64_t index) {
  switch (type) {
    case CUDA_R_16F:
      return Acc(static_cast<float>(reinterpret_cast<const Eigen::half*>(base)[index]));
    case CUDA_R_16BF:
      return Acc(static_cast<float>(reinterpret_cast<const Eigen::bfloat16*>(base)[index]));
    case CUDA_R_32F:
      return Acc(reinterpret_cast<const float*>(base)[index]);
    default:
      return Acc(reinterpret_cast<const double*>(base)[index]);
  }
}

// One rounding to the storage type (round to nearest even), as the library's epilogue stores.
template <typename Acc>
void store(int type, DevicePtr base, std::int64_t index, Acc v) {
  switch (type) {
    case CUDA_R_16F:
      reinterpret_cast<Eigen::half*>(base)[index] = Eigen::half(static_cast<float>(v));
      break;
    case CUDA_R_16BF:
      reinterpret_cast<Eigen::bfloat16*>(base)[index] = Eigen::bfloat16(static_cast<float>(v));
      break;
    case CUDA_R_32F:
      reinterpret_cast<float*>(base)[index] = static_cast<float>(v);
      break;
    default:
      reinterpret_cast<double*>(base)[index] = static_cast<double>(v);
  }
}

// TF32: f32 with a 10-bit mantissa, round to nearest (ties away, as cvt.rna.tf32.f32).
float to_tf32(float x) {
  if (!std::isfinite(x)) return x;
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
template <typename Acc>
Acc gelu_tanh(Acc x) {
  return Acc(0.5) * x * (Acc(1) + std::tanh(Acc(kGeluK) * (x + Acc(0.044715) * x * x * x)));
}
template <typename Acc>
Acc gelu_tanh_grad(Acc x) {
  Acc t = std::tanh(Acc(kGeluK) * (x + Acc(0.044715) * x * x * x));
  return Acc(0.5) * (Acc(1) + t) +
         Acc(0.5) * x * (Acc(1) - t * t) * Acc(kGeluK) * (Acc(1) + Acc(3 * 0.044715) * x * x);
}

class VirtualBlasLt final : public BlasLt {
 public:
  explicit VirtualBlasLt(Backend& backend) : backend_(backend) {}
  std::string_view kind() const override { return "virtual"; }
  std::size_t calls() const override { return calls_; }
  std::size_t workspace_bytes() override { return workspace_bytes_for(backend_.properties()); }

  void matmul(const MatmulCall& call) override {
    MatmulSpec s = read_back(call.desc, call.a_layout, call.b_layout, call.c_layout, call.d_layout);
    remember(s);
    heuristic(s, call);
    validate(s, call);
    // Queued on the call's stream: run now, or a node of the graph a capture records, which
    // keeps the problem and the scalars as they were (cuBLASLt reads host scalars at the call).
    struct Queued {
      MatmulSpec spec;
      MatmulCall call;
      unsigned char alpha[8] = {}, beta[8] = {};
    };
    auto q = std::make_shared<Queued>(Queued{s, call});
    const bool wide = s.compute == CUBLAS_COMPUTE_64F || s.compute == CUBLAS_COMPUTE_64F_PEDANTIC;
    const std::size_t scalar_bytes = wide ? sizeof(double) : sizeof(float);
    std::memcpy(q->alpha, call.alpha, scalar_bytes);
    std::memcpy(q->beta, call.beta, scalar_bytes);
    q->call.alpha = q->alpha;
    q->call.beta = q->beta;
    vgpu::run_host_work(backend_, call.stream, [this, q, wide] {
      if (wide)
        run<double>(q->spec, q->call);
      else
        run<float>(q->spec, q->call);
    });
    ++calls_;
  }

 private:
  // CUBLAS_STATUS_NOT_SUPPORTED is what the real heuristic answers for a combination it has no
  // kernel for: NoAlgorithmError, so that callers fall back as they do on the driver.
  [[noreturn]] static void fail(const MatmulSpec& s, const char* status, const std::string& why) {
    if (std::string_view(status) == "CUBLAS_STATUS_NOT_SUPPORTED")
      throw NoAlgorithmError(fmt::format(
          "cublasLtMatmulAlgoGetHeuristic (virtual GPU) found no algorithm: {}: {} [{}]", status,
          why, s.str()));
    throw Error(fmt::format("cublasLtMatmul (virtual GPU): {}: {} [{}]", status, why, s.str()));
  }

  // What cublasLtMatmulAlgoGetHeuristic, told the operands' alignment (as the driver service
  // tells it, MIN_ALIGNMENT_*_BYTES), has no kernel for, beyond the type rules of validate():
  // fused epilogues load and store 16-byte vectors, so an epilogue other than DEFAULT with an
  // operand aligned to less finds none (PyTorch keeps such addmm off cuBLASLt for this reason,
  // pytorch#92201 / #98975; the bias and aux pointers set the epilogue's own alignment, per
  // cublasLt.h's BIAS_POINTER and EPILOGUE_AUX_POINTER).
  static void heuristic(const MatmulSpec& s, const MatmulCall& call) {
    if (s.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return;
    const std::pair<const char*, DevicePtr> pointers[] = {{"A", call.a},    {"B", call.b},
                                                          {"C", call.c},    {"D", call.d},
                                                          {"bias", s.bias}, {"aux", s.aux}};
    for (auto [name, p] : pointers)
      if (p % 16 != 0)
        fail(s, "CUBLAS_STATUS_NOT_SUPPORTED",
             fmt::format("epilogue {} with {} at {:#x}, aligned to {} bytes: fused epilogues need "
                         "16-byte aligned operands",
                         epilogue_name(s.epilogue), name, p, p & -p));
  }

  void validate(const MatmulSpec& s, const MatmulCall& call) {
    for (const MatrixSpec* m : {&s.a, &s.b, &s.c, &s.d})
      if (m->order != CUBLASLT_ORDER_COL)
        fail(s, "CUBLAS_STATUS_NOT_SUPPORTED", "only column-major (CUBLASLT_ORDER_COL) layouts");
    bool f64 = s.compute == CUBLAS_COMPUTE_64F || s.compute == CUBLAS_COMPUTE_64F_PEDANTIC;
    bool f32 = s.compute == CUBLAS_COMPUTE_32F || s.compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
               s.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (!f64 && !f32) fail(s, "CUBLAS_STATUS_NOT_SUPPORTED", "compute type");
    if (s.scale != (f64 ? CUDA_R_64F : CUDA_R_32F))
      fail(s, "CUBLAS_STATUS_NOT_SUPPORTED", "scale type must match the compute type");
    bool types_ok;
    if (f64)
      types_ok = s.a.type == CUDA_R_64F && s.b.type == CUDA_R_64F && s.c.type == CUDA_R_64F;
    else if (s.a.type == CUDA_R_32F)
      types_ok = s.b.type == CUDA_R_32F && s.c.type == CUDA_R_32F;
    else
      types_ok = (s.a.type == CUDA_R_16F || s.a.type == CUDA_R_16BF) && s.b.type == s.a.type &&
                 (s.c.type == s.a.type || s.c.type == CUDA_R_32F) &&
                 s.compute != CUBLAS_COMPUTE_32F_FAST_TF32;
    if (!types_ok || s.d.type != s.c.type)
      fail(s, "CUBLAS_STATUS_NOT_SUPPORTED",
           fmt::format("A/B/C/D types {}/{}/{}/{} with this compute type", data_type_name(s.a.type),
                       data_type_name(s.b.type), data_type_name(s.c.type),
                       data_type_name(s.d.type)));
    std::uint64_t m = s.m(), n = s.n(), k = s.k();
    std::uint64_t a_rows = s.trans_a == CUBLAS_OP_N ? m : k,
                  b_rows = s.trans_b == CUBLAS_OP_N ? k : n;
    std::uint64_t b_k = s.trans_b == CUBLAS_OP_N ? s.b.rows : s.b.cols;
    if (s.a.rows != a_rows || b_k != k || s.b.rows != b_rows || s.c.rows != m || s.c.cols != n)
      fail(s, "CUBLAS_STATUS_INVALID_VALUE", "operand dimensions do not agree");
    for (const MatrixSpec* x : {&s.a, &s.b, &s.c, &s.d})
      if (x->ld < static_cast<std::int64_t>(std::max<std::uint64_t>(x->rows, 1)))
        fail(s, "CUBLAS_STATUS_INVALID_VALUE", "a leading dimension is smaller than its rows");
    int batches = s.d.batch_count;
    for (const MatrixSpec* x : {&s.a, &s.b, &s.c})
      if (x->batch_count != batches) fail(s, "CUBLAS_STATUS_INVALID_VALUE", "batch counts differ");
    cublasLtEpilogue_t e = s.epilogue;
    if ((epilogue_has_bias(e) || epilogue_writes_bgrad(e)) && !s.bias)
      fail(s, "CUBLAS_STATUS_INVALID_VALUE",
           "the epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (epilogue_has_aux(e)) {
      if (!s.aux) fail(s, "CUBLAS_STATUS_INVALID_VALUE", "the epilogue needs EPILOGUE_AUX_POINTER");
      bool relu = e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
                  e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
      std::int64_t multiple = relu ? 128 : 8;
      if (s.aux_ld % multiple != 0 || s.aux_ld < static_cast<std::int64_t>(m))
        fail(
            s, "CUBLAS_STATUS_INVALID_VALUE",
            fmt::format("EPILOGUE_AUX_LD {} must be a multiple of {} and at least the {} rows of D",
                        s.aux_ld, multiple, m));
      if (s.aux_batch_stride % multiple != 0)
        fail(s, "CUBLAS_STATUS_INVALID_VALUE",
             fmt::format("EPILOGUE_AUX_BATCH_STRIDE {} must be a multiple of {}",
                         s.aux_batch_stride, multiple));
      if (!relu && s.aux_type != -1 && s.aux_type != s.d.type)
        fail(s, "CUBLAS_STATUS_NOT_SUPPORTED", "the GELU aux type must be D's type");
    }
    if (s.bias_type != -1 && s.bias_type != s.d.type &&
        !(s.bias_type == CUDA_R_32F && (s.d.type == CUDA_R_16F || s.d.type == CUDA_R_16BF) &&
          epilogue_has_bias(e)))
      fail(s, "CUBLAS_STATUS_NOT_SUPPORTED", "bias type must be D's type (or f32 for 16-bit D)");
    // Every byte the call reads or writes lies in a live allocation.
    auto span = [&](const MatrixSpec& x) {
      std::uint64_t last = (x.cols ? (x.cols - 1) * x.ld + x.rows : 0) +
                           static_cast<std::uint64_t>(x.batch_count - 1) * x.batch_stride;
      return last * element_bytes(x.type);
    };
    if (k) {
      vgpu::check_device_range(backend_, call.a, span(s.a), "cublasLtMatmul A");
      vgpu::check_device_range(backend_, call.b, span(s.b), "cublasLtMatmul B");
    }
    vgpu::check_device_range(backend_, call.d, span(s.d), "cublasLtMatmul D");
    // What the call writes counts as initialized for the virtual GPU's initcheck.
    vgpu::mark_device_initialized(backend_, call.d, span(s.d));
    bool writes_bias = e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
                       e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
    bool writes_aux = e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
                      e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (s.bias) {
      std::uint64_t len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
      int type = s.bias_type == -1 ? s.d.type : s.bias_type;
      std::uint64_t bytes = (len + (batches - 1) * s.bias_batch_stride) * element_bytes(type);
      vgpu::check_device_range(backend_, s.bias, bytes, "cublasLtMatmul bias");
      if (writes_bias) vgpu::mark_device_initialized(backend_, s.bias, bytes);
    }
    if (epilogue_has_aux(e)) {
      bool gelu = !(e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
                    e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD);
      std::uint64_t elems =
          (n ? (n - 1) * s.aux_ld + (gelu ? m : s.aux_ld) : 0) + (batches - 1) * s.aux_batch_stride;
      std::uint64_t bytes = gelu ? elems * element_bytes(s.d.type) : (elems + 7) / 8;
      vgpu::check_device_range(backend_, s.aux, bytes, "cublasLtMatmul aux");
      if (writes_aux) vgpu::mark_device_initialized(backend_, s.aux, bytes);
    }
    if (call.workspace_bytes)
      vgpu::check_device_range(backend_, call.workspace, call.workspace_bytes,
                               "cublasLtMatmul workspace");
  }

  template <typename Acc>
  void run(const MatmulSpec& s, const MatmulCall& call) {
    using Mat = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic>;
    const auto m = static_cast<std::int64_t>(s.m()), n = static_cast<std::int64_t>(s.n()),
               k = static_cast<std::int64_t>(s.k());
    const Acc alpha = *static_cast<const Acc*>(call.alpha),
              beta = *static_cast<const Acc*>(call.beta);
    const bool tf32 = s.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const cublasLtEpilogue_t e = s.epilogue;
    const int bias_type = s.bias_type == -1 ? s.d.type : s.bias_type;
    const bool relu_aux = e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
                          e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
    const int aux_type = s.aux_type == -1 ? s.d.type : s.aux_type;
    // op(X) as a dense m x k (or k x n) matrix in the compute type.
    auto operand = [&](const MatrixSpec& x, cublasOperation_t op, DevicePtr base, std::int64_t rows,
                       std::int64_t cols) {
      Mat out(rows, cols);
      for (std::int64_t j = 0; j < cols; ++j)
        for (std::int64_t i = 0; i < rows; ++i) {
          std::int64_t idx = op == CUBLAS_OP_N ? j * x.ld + i : i * x.ld + j;
          Acc v = load<Acc>(x.type, base, idx);
          out(i, j) = tf32 ? Acc(to_tf32(static_cast<float>(v))) : v;
        }
      return out;
    };
    for (int batch = 0; batch < s.d.batch_count; ++batch) {
      auto at = [&](DevicePtr p, const MatrixSpec& x) {
        return p + batch * x.batch_stride * element_bytes(x.type);
      };
      Mat a = operand(s.a, s.trans_a, at(call.a, s.a), m, k);
      Mat b = operand(s.b, s.trans_b, at(call.b, s.b), k, n);
      Mat x = k ? Mat(alpha * (a * b)) : Mat::Zero(m, n);
      if (beta != Acc(0)) {  // beta == 0: C is not read (cuBLAS semantics)
        DevicePtr c = at(call.c, s.c);
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t i = 0; i < m; ++i)
            x(i, j) += beta * load<Acc>(s.c.type, c, j * s.c.ld + i);
      }
      DevicePtr bias = s.bias + batch * s.bias_batch_stride * element_bytes(bias_type);
      DevicePtr aux = s.aux;
      if (aux)
        aux += relu_aux ? batch * s.aux_batch_stride / 8
                        : batch * s.aux_batch_stride * element_bytes(aux_type);
      if (epilogue_has_bias(e))
        for (std::int64_t i = 0; i < m; ++i) x.row(i).array() += load<Acc>(bias_type, bias, i);
      if (epilogue_has_aux(e) && !epilogue_is_backward(e)) {
        if (relu_aux) {  // bit (col * ld + row): set where the pre-activation is positive
          auto* bits = reinterpret_cast<std::uint8_t*>(aux);
          std::memset(bits, 0, static_cast<std::size_t>(n * s.aux_ld / 8));
          for (std::int64_t j = 0; j < n; ++j)
            for (std::int64_t i = 0; i < m; ++i)
              if (x(i, j) > Acc(0))
                bits[(j * s.aux_ld + i) / 8] |= std::uint8_t(1u << ((j * s.aux_ld + i) % 8));
        } else {
          for (std::int64_t j = 0; j < n; ++j)
            for (std::int64_t i = 0; i < m; ++i)
              store<Acc>(aux_type, aux, j * s.aux_ld + i, x(i, j));
        }
      }
      if (epilogue_is_relu(e)) x = x.cwiseMax(Acc(0));
      if (epilogue_is_gelu(e)) x = x.unaryExpr([](Acc v) { return gelu_tanh(v); });
      if (epilogue_is_backward(e)) {
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t i = 0; i < m; ++i) {
            if (relu_aux) {
              std::int64_t bit = j * s.aux_ld + i;
              bool on = reinterpret_cast<const std::uint8_t*>(aux)[bit / 8] >> (bit % 8) & 1u;
              if (!on) x(i, j) = Acc(0);
            } else {
              x(i, j) *= gelu_tanh_grad(load<Acc>(aux_type, aux, j * s.aux_ld + i));
            }
          }
      }
      // Bias gradients, summed in the compute type and rounded once.
      if (e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
        for (std::int64_t i = 0; i < m; ++i) store<Acc>(bias_type, bias, i, x.row(i).sum());
      if (e == CUBLASLT_EPILOGUE_BGRADA)
        for (std::int64_t i = 0; i < m; ++i) store<Acc>(bias_type, bias, i, a.row(i).sum());
      if (e == CUBLASLT_EPILOGUE_BGRADB)
        for (std::int64_t j = 0; j < n; ++j) store<Acc>(bias_type, bias, j, b.col(j).sum());
      DevicePtr d = at(call.d, s.d);
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t i = 0; i < m; ++i) store<Acc>(s.d.type, d, j * s.d.ld + i, x(i, j));
    }
  }

  Backend& backend_;
  std::atomic<std::size_t> calls_{0};
};

}  // namespace

std::unique_ptr<BlasLt> make_virtual_blaslt(Backend& backend) {
  return std::make_unique<VirtualBlasLt>(backend);
}

}  // namespace kiln::cuda::blaslt
