// The driver backend's BLAS-Lt service: the real cuBLASLt, on device 0's primary context. The
// handle is created at the first matmul, so a process without a GPU loads and runs everything
// else; algorithms come from cublasLtMatmulAlgoGetHeuristic, cached per problem.
#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/blaslt/lt_api.h"
#include "runtime/cuda/driver/driver_api.h"
#include "runtime/error.h"

namespace kiln::cuda::blaslt {
namespace {

// The largest power of two (up to 256) dividing `p`: heuristics depend on pointer alignment.
unsigned alignment(DevicePtr p) {
  return p == 0 ? 256u : std::min(256u, 1u << std::countr_zero(p));
}

class DriverBlasLt final : public BlasLt {
 public:
  explicit DriverBlasLt(Backend& backend) : backend_(backend) {}
  ~DriverBlasLt() override {
    if (handle_) lt_api().destroy(handle_);
  }

  std::string_view kind() const override { return "cublasLt"; }
  std::size_t calls() const override { return calls_; }
  std::size_t workspace_bytes() override { return workspace_bytes_for(backend_.properties()); }

  void matmul(const MatmulCall& call) override {
    std::lock_guard lock(mutex_);
    make_current();
    const LtApi& api = lt_api();
    MatmulSpec spec =
        read_back(call.desc, call.a_layout, call.b_layout, call.c_layout, call.d_layout);
    remember(spec);
    cublasLtMatmulHeuristicResult_t algo = heuristic(spec, call);
    cublasStatus_t st = api.matmul(
        handle_, call.desc, call.alpha, reinterpret_cast<const void*>(call.a), call.a_layout,
        reinterpret_cast<const void*>(call.b), call.b_layout, call.beta,
        reinterpret_cast<const void*>(call.c), call.c_layout, reinterpret_cast<void*>(call.d),
        call.d_layout, &algo.algo, reinterpret_cast<void*>(call.workspace), call.workspace_bytes,
        reinterpret_cast<cudaStream_t>(call.stream));
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error(fmt::format("cublasLtMatmul failed for {}: {}", spec.str(), status_text(st)));
    ++calls_;
  }

 private:
  void make_current() {
    const driver::DriverApi& api = driver::driver_api();
    if (!ctx_) {
      CUdevice dev = 0;
      api.device_get(&dev, 0);
      CUresult r = api.primary_ctx_retain(&ctx_, dev);
      KILN_CHECK(r == CUDA_SUCCESS, "cuBLASLt: cuDevicePrimaryCtxRetain failed: {}",
                 driver::error_text(api, r));
    }
    api.ctx_set_current(ctx_);
    if (!handle_) {
      cublasStatus_t st = lt_api().create(&handle_);
      if (st != CUBLAS_STATUS_SUCCESS) {
        handle_ = nullptr;
        throw Error(fmt::format(
            "cuBLASLt: cublasLtCreate failed ({}): the driver backend needs a CUDA driver and a "
            "GPU for library matmuls; KILN_CUDA=virtual runs them on the virtual GPU",
            status_text(st)));
      }
    }
  }

  cublasLtMatmulHeuristicResult_t heuristic(const MatmulSpec& spec, const MatmulCall& call) {
    MatmulSpec key_spec = spec;
    key_spec.bias = alignment(spec.bias);
    key_spec.aux = alignment(spec.aux);
    std::string key =
        fmt::format("{}|bias align {}|aux align {}|align {} {} {} {}|ws {}", key_spec.str(),
                    key_spec.bias, key_spec.aux, alignment(call.a), alignment(call.b),
                    alignment(call.c), alignment(call.d), call.workspace_bytes);
    if (auto it = algos_.find(key); it != algos_.end()) return it->second;
    const LtApi& api = lt_api();
    cublasLtMatmulPreference_t pref = nullptr;
    check_status(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                    cublasStatus_t (*)(cublasLtMatmulPreference_t)>
        owned(pref, api.pref_destroy);
    std::uint64_t ws = call.workspace_bytes;
    check_status(api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, DevicePtr> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, call.a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, call.b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, call.c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, call.d}};
    for (auto [attr, ptr] : aligns) {
      std::uint32_t a = alignment(ptr);
      check_status(api.pref_set(pref, attr, &a, sizeof a), "cublasLtMatmulPreferenceSetAttribute");
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st =
        api.algo_get_heuristic(handle_, call.desc, call.a_layout, call.b_layout, call.c_layout,
                               call.d_layout, pref, 1, &result, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
      throw NoAlgorithmError(
          fmt::format("cublasLtMatmulAlgoGetHeuristic found no algorithm for {}{}", spec.str(),
                      st == CUBLAS_STATUS_SUCCESS ? "" : ": " + status_text(st)));
    algos_.emplace(key, result);
    return result;
  }

  Backend& backend_;
  std::mutex mutex_;
  CUcontext ctx_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<std::string, cublasLtMatmulHeuristicResult_t> algos_;
  std::atomic<std::size_t> calls_{0};
};

}  // namespace

std::unique_ptr<BlasLt> make_driver_blaslt(Backend& backend) {
  return std::make_unique<DriverBlasLt>(backend);
}

}  // namespace kiln::cuda::blaslt
