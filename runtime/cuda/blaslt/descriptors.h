// cuBLASLt matmul descriptors: kiln's description of one matmul (MatmulSpec, in cuBLASLt's own
// enums), the real descriptors built from it with the real library (no GPU needed), and the
// read-back of real descriptors through cublasLt*GetAttribute, which is what the virtual GPU's
// implementation computes from and what tests assert.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "runtime/cuda/backend.h"

namespace kiln::cuda::blaslt {

// One operand's layout (cublasLtMatrixLayout_t): column-major unless `order` says otherwise.
struct MatrixSpec {
  cudaDataType_t type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;  // elements between columns (col order)
  std::int32_t order = CUBLASLT_ORDER_COL;
  std::int32_t batch_count = 1;
  std::int64_t batch_stride = 0;  // elements between batches (STRIDED_BATCH_OFFSET)
};

// D = epilogue(alpha * op(A) op(B) + beta * C), everything cublasLtMatmul's descriptors hold.
// Pointers are device addresses; `bias_type`/`aux_type` -1 mean "cuBLASLt's default" (D's type).
struct MatmulSpec {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  DevicePtr bias = 0;
  std::int32_t bias_type = -1;
  std::int64_t bias_batch_stride = 0;
  DevicePtr aux = 0;
  std::int64_t aux_ld = 0;
  std::int64_t aux_batch_stride = 0;
  std::int32_t aux_type = -1;
  MatrixSpec a, b, c, d;

  // Dimensions of the product: op(A) is m x k, op(B) is k x n, D is m x n.
  std::uint64_t m() const { return d.rows; }
  std::uint64_t n() const { return d.cols; }
  std::uint64_t k() const { return trans_a == CUBLAS_OP_N ? a.cols : a.rows; }
  std::string str() const;  // one line, for errors and logs
};

// Which parts an epilogue has, from cublasLt.h's bit layout.
bool epilogue_has_bias(cublasLtEpilogue_t e);      // BIAS, RELU_BIAS, GELU_BIAS (+AUX): reads bias
bool epilogue_writes_bgrad(cublasLtEpilogue_t e);  // DRELU_BGRAD, DGELU_BGRAD, BGRADA, BGRADB
bool epilogue_is_relu(cublasLtEpilogue_t e);       // forward ReLU forms
bool epilogue_is_gelu(cublasLtEpilogue_t e);       // forward GELU forms
bool epilogue_has_aux(cublasLtEpilogue_t e);       // writes (forward) or reads (D*) the aux
bool epilogue_is_backward(cublasLtEpilogue_t e);   // DRELU*, DGELU*
std::string epilogue_name(cublasLtEpilogue_t e);   // "GELU_AUX_BIAS"
std::string data_type_name(int type);              // "CUDA_R_16F"

// The real descriptors of one matmul: a cublasLtMatmulDesc_t and four layouts, owned.
class Descriptors {
 public:
  explicit Descriptors(const MatmulSpec& spec);
  ~Descriptors();
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cublasLtMatmulDesc_t matmul() const { return matmul_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t c() const { return c_; }
  cublasLtMatrixLayout_t d() const { return d_; }

 private:
  void release() noexcept;
  cublasLtMatmulDesc_t matmul_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
};

// Everything the descriptors say, read back with cublasLtMatmulDescGetAttribute and
// cublasLtMatrixLayoutGetAttribute.
MatmulSpec read_back(cublasLtMatmulDesc_t matmul, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d);
inline MatmulSpec read_back(const Descriptors& desc) {
  return read_back(desc.matmul(), desc.a(), desc.b(), desc.c(), desc.d());
}

}  // namespace kiln::cuda::blaslt
