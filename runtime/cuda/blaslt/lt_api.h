// cuBLASLt as a table of function pointers resolved from the toolkit's libcublasLt.so.13 (or .12)
// with dlopen, so kiln never links it: a binary built here starts where the library is missing, and
// says so at the first matmul that needs it. cublasLt.h supplies only types.
#pragma once

#include <cublasLt.h>

#include <string>

namespace kiln::cuda::blaslt {

// (member, exported symbol, declaration in cublasLt.h).
#define KILN_CUBLASLT_FUNCTIONS(X)                                                          \
  X(get_version, "cublasLtGetVersion", cublasLtGetVersion)                                  \
  X(get_status_name, "cublasLtGetStatusName", cublasLtGetStatusName)                        \
  X(get_status_string, "cublasLtGetStatusString", cublasLtGetStatusString)                  \
  X(create, "cublasLtCreate", cublasLtCreate)                                               \
  X(destroy, "cublasLtDestroy", cublasLtDestroy)                                            \
  X(matmul, "cublasLtMatmul", cublasLtMatmul)                                               \
  X(desc_create, "cublasLtMatmulDescCreate", cublasLtMatmulDescCreate)                      \
  X(desc_destroy, "cublasLtMatmulDescDestroy", cublasLtMatmulDescDestroy)                   \
  X(desc_set, "cublasLtMatmulDescSetAttribute", cublasLtMatmulDescSetAttribute)             \
  X(desc_get, "cublasLtMatmulDescGetAttribute", cublasLtMatmulDescGetAttribute)             \
  X(layout_create, "cublasLtMatrixLayoutCreate", cublasLtMatrixLayoutCreate)                \
  X(layout_destroy, "cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy)             \
  X(layout_set, "cublasLtMatrixLayoutSetAttribute", cublasLtMatrixLayoutSetAttribute)       \
  X(layout_get, "cublasLtMatrixLayoutGetAttribute", cublasLtMatrixLayoutGetAttribute)       \
  X(pref_create, "cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate)          \
  X(pref_destroy, "cublasLtMatmulPreferenceDestroy", cublasLtMatmulPreferenceDestroy)       \
  X(pref_set, "cublasLtMatmulPreferenceSetAttribute", cublasLtMatmulPreferenceSetAttribute) \
  X(algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic", cublasLtMatmulAlgoGetHeuristic)

struct LtApi {
#define KILN_CUBLASLT_MEMBER(member, symbol, decl) decltype(&::decl) member = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_MEMBER)
#undef KILN_CUBLASLT_MEMBER
  std::size_t version = 0;  // cublasLtGetVersion, e.g. 130100
  std::string path;         // the file that was loaded
};

// Loads libcublasLt once per process: from the loader's search path, then $CUDA_HOME/lib64, then
// the toolkit kiln was built against. Throws kiln::Error naming every place tried when none
// loads; the failure is remembered. Creating descriptors needs no GPU; only a handle does.
const LtApi& lt_api();

// "CUBLAS_STATUS_NOT_INITIALIZED (the library was not initialized)" for `status`.
std::string status_text(cublasStatus_t status);

// Throws kiln::Error "<what>: <status_text>" unless `status` is CUBLAS_STATUS_SUCCESS.
void check_status(cublasStatus_t status, const char* what);

}  // namespace kiln::cuda::blaslt
