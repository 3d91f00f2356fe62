// Building real cuBLASLt descriptors from a MatmulSpec and reading them back (see descriptors.h).
#include "runtime/cuda/blaslt/descriptors.h"

#include <fmt/format.h>

#include "runtime/cuda/blaslt/lt_api.h"
#include "runtime/error.h"

namespace kiln::cuda::blaslt {
namespace {

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, T value,
              const char* name) {
  check_status(lt_api().desc_set(desc, attr, &value, sizeof value), name);
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, T value,
                const char* name) {
  check_status(lt_api().layout_set(layout, attr, &value, sizeof value), name);
}

template <typename T>
T get_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const char* name) {
  T value{};
  std::size_t written = 0;
  check_status(lt_api().desc_get(desc, attr, &value, sizeof value, &written), name);
  KILN_CHECK(written == sizeof value, "cublasLtMatmulDescGetAttribute({}): {} bytes, expected {}",
             name, written, sizeof value);
  return value;
}

template <typename T>
T get_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
             const char* name) {
  T value{};
  std::size_t written = 0;
  check_status(lt_api().layout_get(layout, attr, &value, sizeof value, &written), name);
  KILN_CHECK(written == sizeof value, "cublasLtMatrixLayoutGetAttribute({}): {} bytes, expected {}",
             name, written, sizeof value);
  return value;
}

cublasLtMatrixLayout_t make_layout(const MatrixSpec& m) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_status(lt_api().layout_create(&layout, m.type, m.rows, m.cols, m.ld),
               "cublasLtMatrixLayoutCreate");
  if (m.order != CUBLASLT_ORDER_COL)
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_ORDER, m.order, "ORDER");
  if (m.batch_count != 1) {
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, m.batch_count, "BATCH_COUNT");
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, m.batch_stride,
               "STRIDED_BATCH_OFFSET");
  }
  return layout;
}

MatrixSpec read_layout(cublasLtMatrixLayout_t layout) {
  MatrixSpec m;
  m.type = static_cast<cudaDataType_t>(
      get_layout<std::int32_t>(layout, CUBLASLT_MATRIX_LAYOUT_TYPE, "TYPE"));
  m.order = get_layout<std::int32_t>(layout, CUBLASLT_MATRIX_LAYOUT_ORDER, "ORDER");
  m.rows = get_layout<std::uint64_t>(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, "ROWS");
  m.cols = get_layout<std::uint64_t>(layout, CUBLASLT_MATRIX_LAYOUT_COLS, "COLS");
  m.ld = get_layout<std::int64_t>(layout, CUBLASLT_MATRIX_LAYOUT_LD, "LD");
  m.batch_count =
      get_layout<std::int32_t>(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, "BATCH_COUNT");
  m.batch_stride =
      get_layout<std::int64_t>(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, "BATCH_OFFSET");
  return m;
}

}  // namespace

bool epilogue_has_bias(cublasLtEpilogue_t e) {
  return !epilogue_writes_bgrad(e) && (e & CUBLASLT_EPILOGUE_BIAS);
}
bool epilogue_writes_bgrad(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
         e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool epilogue_is_backward(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool epilogue_is_relu(cublasLtEpilogue_t e) {
  return !epilogue_is_backward(e) && e < CUBLASLT_EPILOGUE_BGRADA && (e & CUBLASLT_EPILOGUE_RELU);
}
bool epilogue_is_gelu(cublasLtEpilogue_t e) {
  return !epilogue_is_backward(e) && e < CUBLASLT_EPILOGUE_BGRADA && (e & CUBLASLT_EPILOGUE_GELU);
}
bool epilogue_has_aux(cublasLtEpilogue_t e) {
  return e < CUBLASLT_EPILOGUE_BGRADA && (e & 128);
}

std::string epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
#define KILN_EPILOGUE_CASE(x) \
  case CUBLASLT_EPILOGUE_##x: \
    return #x;
    KILN_EPILOGUE_CASE(DEFAULT)
    KILN_EPILOGUE_CASE(RELU)
    KILN_EPILOGUE_CASE(RELU_AUX)
    KILN_EPILOGUE_CASE(BIAS)
    KILN_EPILOGUE_CASE(RELU_BIAS)
    KILN_EPILOGUE_CASE(RELU_AUX_BIAS)
    KILN_EPILOGUE_CASE(DRELU)
    KILN_EPILOGUE_CASE(DRELU_BGRAD)
    KILN_EPILOGUE_CASE(GELU)
    KILN_EPILOGUE_CASE(GELU_AUX)
    KILN_EPILOGUE_CASE(GELU_BIAS)
    KILN_EPILOGUE_CASE(GELU_AUX_BIAS)
    KILN_EPILOGUE_CASE(DGELU)
    KILN_EPILOGUE_CASE(DGELU_BGRAD)
    KILN_EPILOGUE_CASE(BGRADA)
    KILN_EPILOGUE_CASE(BGRADB)
#undef KILN_EPILOGUE_CASE
    default:
      return fmt::format("epilogue {}", static_cast<int>(e));
  }
}

std::string data_type_name(int type) {
  switch (type) {
    case -1:
      return "default";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_64F:
      return "CUDA_R_64F";
    case CUDA_R_8I:
      return "CUDA_R_8I";
    case CUDA_R_32I:
      return "CUDA_R_32I";
    default:
      return fmt::format("cudaDataType {}", type);
  }
}

std::string MatmulSpec::str() const {
  auto mat = [](const MatrixSpec& x) {
    return fmt::format("{} {}x{} ld {}{}{}", data_type_name(x.type), x.rows, x.cols, x.ld,
                       x.order == CUBLASLT_ORDER_COL ? "" : " row-major",
                       x.batch_count == 1
                           ? std::string()
                           : fmt::format(" batch {} stride {}", x.batch_count, x.batch_stride));
  };
  return fmt::format(
      "m={} n={} k={} op(A)={} op(B)={} A[{}] B[{}] C[{}] D[{}] compute {} scale {} "
      "epilogue {}",
      m(), n(), k(), trans_a == CUBLAS_OP_N ? "N" : "T", trans_b == CUBLAS_OP_N ? "N" : "T", mat(a),
      mat(b), mat(c), mat(d), static_cast<int>(compute), data_type_name(scale),
      epilogue_name(epilogue));
}

Descriptors::Descriptors(const MatmulSpec& s) {
  const LtApi& api = lt_api();
  try {
    check_status(api.desc_create(&matmul_, s.compute, s.scale), "cublasLtMatmulDescCreate");
    set_desc(matmul_, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(s.trans_a), "TRANSA");
    set_desc(matmul_, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(s.trans_b), "TRANSB");
    set_desc(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(s.epilogue),
             "EPILOGUE");
    if (s.bias) {
      set_desc(matmul_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<void*>(s.bias),
               "BIAS_POINTER");
      if (s.bias_type != -1)
        set_desc(matmul_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, s.bias_type, "BIAS_DATA_TYPE");
      if (s.bias_batch_stride)
        set_desc(matmul_, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, s.bias_batch_stride,
                 "BIAS_BATCH_STRIDE");
    }
    if (s.aux) {
      set_desc(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, reinterpret_cast<void*>(s.aux),
               "EPILOGUE_AUX_POINTER");
      set_desc(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.aux_ld, "EPILOGUE_AUX_LD");
      if (s.aux_batch_stride)
        set_desc(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, s.aux_batch_stride,
                 "EPILOGUE_AUX_BATCH_STRIDE");
      if (s.aux_type != -1)
        set_desc(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, s.aux_type,
                 "EPILOGUE_AUX_DATA_TYPE");
    }
    a_ = make_layout(s.a);
    b_ = make_layout(s.b);
    c_ = make_layout(s.c);
    d_ = make_layout(s.d);
  } catch (...) {
    release();
    throw;
  }
}

Descriptors::~Descriptors() {
  release();
}

void Descriptors::release() noexcept {
  const LtApi& api = lt_api();
  for (auto* l : {&a_, &b_, &c_, &d_})
    if (*l) api.layout_destroy(*l), *l = nullptr;
  if (matmul_) api.desc_destroy(matmul_), matmul_ = nullptr;
}

MatmulSpec read_back(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  MatmulSpec s;
  s.compute = static_cast<cublasComputeType_t>(
      get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, "COMPUTE_TYPE"));
  s.scale = static_cast<cudaDataType_t>(
      get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, "SCALE_TYPE"));
  s.trans_a = static_cast<cublasOperation_t>(
      get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSA, "TRANSA"));
  s.trans_b = static_cast<cublasOperation_t>(
      get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSB, "TRANSB"));
  s.epilogue = static_cast<cublasLtEpilogue_t>(
      get_desc<std::uint32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, "EPILOGUE"));
  s.bias = reinterpret_cast<DevicePtr>(
      get_desc<void*>(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, "BIAS_POINTER"));
  s.bias_type = get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, "BIAS_DATA_TYPE");
  s.bias_batch_stride =
      get_desc<std::int64_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, "BIAS_BATCH_STRIDE");
  s.aux = reinterpret_cast<DevicePtr>(
      get_desc<void*>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, "EPILOGUE_AUX_POINTER"));
  s.aux_ld = get_desc<std::int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, "EPILOGUE_AUX_LD");
  s.aux_batch_stride = get_desc<std::int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                              "EPILOGUE_AUX_BATCH_STRIDE");
  s.aux_type = get_desc<std::int32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                      "EPILOGUE_AUX_DATA_TYPE");
  s.a = read_layout(a);
  s.b = read_layout(b);
  s.c = read_layout(c);
  s.d = read_layout(d);
  return s;
}

}  // namespace kiln::cuda::blaslt
