// The BLAS-Lt service of a CUDA backend: cublasLtMatmul with its epilogues, on real descriptors.
// The driver backend's is the real cuBLASLt (dlopened from the toolkit); the virtual GPU's is an
// implementation of cuBLASLt's documented contract that reads the same descriptors back, so
// lowering and autograd are tested end to end on a machine without a GPU.
//
// The contract the virtual GPU computes (cublasLt.h's comments, column-major throughout):
//  - D = alpha * op(A) op(B) + beta * C in the compute type (f16/bf16 widened, TF32 rounds its
//    inputs to 10 mantissa bits), then the epilogue, then one rounding to D's type.
//  - BIAS: + bias[row] (length D rows, packed). RELU: max(x, 0). GELU: the tanh approximation.
//  - *_AUX: the pre-activation (after bias) goes to the aux buffer: for GELU as D's type with ld
//    in elements (multiple of 8, >= rows); for ReLU as a bitmask, bit (col * ld + row) set where
//    the pre-activation is > 0, ld in bits (multiple of 128, >= rows).
//  - DRELU / DGELU: D = product * relu'(aux) / gelu'(aux). *_BGRAD: also bias[row] = sum over
//    columns of that D (in the compute type). BGRADA: bias[row] = sum over k of op(A)[row, k];
//    BGRADB: bias[col] = sum over k of op(B)[k, col]; D is the plain product.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/blaslt/descriptors.h"
#include "runtime/error.h"

namespace kiln::cuda::blaslt {

// cublasLtMatmulAlgoGetHeuristic found no algorithm for a problem (CUBLAS_STATUS_NOT_SUPPORTED,
// or no result): a supported call may still have no kernel, so the caller falls back to its own.
class NoAlgorithmError : public Error {
 public:
  using Error::Error;
};

// The arguments of cublasLtMatmul; alpha and beta are host values of the scale type.
struct MatmulCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr,
                         d_layout = nullptr;
  const void* alpha = nullptr;
  const void* beta = nullptr;
  DevicePtr a = 0, b = 0, c = 0, d = 0;
  DevicePtr workspace = 0;
  std::size_t workspace_bytes = 0;
  Stream stream = nullptr;
};
// A call on the layouts of `desc`.
MatmulCall make_call(const Descriptors& desc, const void* alpha, const void* beta, DevicePtr a,
                     DevicePtr b, DevicePtr c, DevicePtr d);

class BlasLt {
 public:
  virtual ~BlasLt() = default;
  virtual std::string_view kind() const = 0;  // "cublasLt" or "virtual"
  // Runs the matmul. The driver picks the algorithm with cublasLtMatmulAlgoGetHeuristic (cached
  // per problem); errors are kiln::Error naming the call and the problem (MatmulSpec::str()),
  // NoAlgorithmError when the heuristic finds none (nothing was queued).
  virtual void matmul(const MatmulCall& call) = 0;
  // The workspace a matmul should be given: 32 MiB on sm_90 and later, 4 MiB before.
  virtual std::size_t workspace_bytes() = 0;
  // Library calls made so far (benchmarks count them next to kernel launches).
  virtual std::size_t calls() const = 0;
  // The descriptors of the last matmul as read back from the library (for tests).
  MatmulSpec last_call() const {
    std::lock_guard lock(last_mutex_);
    return last_;
  }

 protected:
  void remember(const MatmulSpec& spec) {
    std::lock_guard lock(last_mutex_);
    last_ = spec;
  }

 private:
  mutable std::mutex last_mutex_;
  MatmulSpec last_;
};

// The service of `backend` (created on first use, one per backend object, thread-safe). For the
// driver, creating the cuBLASLt handle is deferred to the first matmul, whose failure (no driver,
// no GPU) is a kiln::Error saying so.
BlasLt& service(Backend& backend);

std::size_t workspace_bytes_for(const DeviceProperties& props);

// The two implementations (service() picks by Backend::kind()).
std::unique_ptr<BlasLt> make_driver_blaslt(Backend& backend);
std::unique_ptr<BlasLt> make_virtual_blaslt(Backend& backend);

}  // namespace kiln::cuda::blaslt
