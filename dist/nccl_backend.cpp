// The NCCL backend: libnccl.so.2 by dlopen, the communicator's unique id through the store, and
// each collective enqueued on kiln's current stream from the caller's thread (so it is ordered
// after the kernels that made its gradients); wait() synchronizes the device.
#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "dist/backend.h"
#include "dist/nccl_api.h"
#include "dist/tcp_store.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/current_stream.h"
#include "runtime/error.h"

namespace kiln::dist {

namespace {

const NcclApi* fake_api = nullptr;

}  // namespace

NcclApi load_nccl_library(const char* library) {
  void* lib = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  KILN_CHECK(lib != nullptr,
             "kiln::dist: the nccl backend needs NCCL's library {}, which could not be loaded "
             "({}); install NCCL or use the gloo backend",
             library, ::dlerror());
  auto symbol = [&](const char* name) {
    void* p = ::dlsym(lib, name);
    KILN_CHECK(p != nullptr, "kiln::dist: {} has no {}", library, name);
    return p;
  };
  NcclApi api;
#define KILN_NCCL_SYMBOL(field, name) \
  api.field = reinterpret_cast<decltype(api.field)>(symbol(name))
  KILN_NCCL_SYMBOL(get_unique_id, "ncclGetUniqueId");
  KILN_NCCL_SYMBOL(comm_init_rank, "ncclCommInitRank");
  KILN_NCCL_SYMBOL(comm_destroy, "ncclCommDestroy");
  KILN_NCCL_SYMBOL(all_reduce, "ncclAllReduce");
  KILN_NCCL_SYMBOL(broadcast, "ncclBroadcast");
  KILN_NCCL_SYMBOL(all_gather, "ncclAllGather");
  KILN_NCCL_SYMBOL(reduce_scatter, "ncclReduceScatter");
  KILN_NCCL_SYMBOL(get_error_string, "ncclGetErrorString");
#undef KILN_NCCL_SYMBOL
  return api;
}

namespace {

int nccl_type(DType dtype, const char* op) {
  constexpr std::pair<DType, int> types[] = {
      {DType::f32, nccl_float32},   {DType::f64, nccl_float64}, {DType::f16, nccl_float16},
      {DType::bf16, nccl_bfloat16}, {DType::i32, nccl_int32},   {DType::i64, nccl_int64}};
  for (auto [d, n] : types)
    if (d == dtype) return n;
  KILN_CHECK(false, "kiln::dist: {} does not take {} tensors under nccl", op, dtype_name(dtype));
  return 0;
}

int nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? nccl_sum : op == ReduceOp::max ? nccl_max : nccl_avg;
}

class NcclBackend : public Backend {
 public:
  NcclBackend(TcpStore& store, const GroupConfig& config) : api_(nccl_api()), config_(config) {
    NcclUniqueId id{};
    if (config.rank == 0) {
      check(api_.get_unique_id(&id), "ncclGetUniqueId");
      store.set("nccl/unique_id", std::vector<char>(id.internal, id.internal + sizeof id));
    } else {
      auto bytes = store.get("nccl/unique_id");
      KILN_CHECK(bytes.size() == sizeof id, "kiln::dist: a malformed NCCL unique id in the store");
      std::memcpy(id.internal, bytes.data(), sizeof id);
    }
    check(api_.comm_init_rank(&comm_, config.world_size, id, config.rank), "ncclCommInitRank");
  }
  ~NcclBackend() override {
    if (comm_) api_.comm_destroy(comm_);
  }

  std::string name() const override { return "nccl"; }
  bool takes_device_memory() const override { return true; }

  void all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override {
    check(api_.all_reduce(data, data, count, nccl_type(dtype, "all_reduce"), nccl_op(op), comm_,
                          stream()),
          "ncclAllReduce");
  }
  void broadcast(void* data, std::size_t count, DType dtype, int root) override {
    check(api_.broadcast(data, data, count, nccl_type(dtype, "broadcast"), root, comm_, stream()),
          "ncclBroadcast");
  }
  void all_gather(const void* in, void* out, std::size_t count, DType dtype) override {
    check(api_.all_gather(in, out, count, nccl_type(dtype, "all_gather"), comm_, stream()),
          "ncclAllGather");
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype,
                      ReduceOp op) override {
    check(api_.reduce_scatter(in, out, count, nccl_type(dtype, "reduce_scatter"), nccl_op(op),
                              comm_, stream()),
          "ncclReduceScatter");
  }
  // NCCL has no barrier: an all-reduce of one element, as torch's nccl barrier.
  void barrier() override {
    KILN_CHECK(false,
               "kiln::dist: barrier under nccl needs a device buffer; the process group "
               "runs it as an all-reduce of one element");
  }
  void synchronize() override { cuda::backend().synchronize(); }

 private:
  void check(int result, const char* call) const {
    KILN_CHECK(result == 0, "kiln::dist: {} failed on rank {} of {}: {} (NCCL error {})", call,
               config_.rank, config_.world_size,
               api_.get_error_string ? api_.get_error_string(result) : "?", result);
  }

  const NcclApi& api_;
  GroupConfig config_;
  NcclComm comm_ = nullptr;

  static NcclStream stream() { return reinterpret_cast<NcclStream>(cuda::current_stream()); }
};

}  // namespace

const NcclApi& nccl_api() {
  if (fake_api) return *fake_api;
  static std::mutex mutex;
  static std::optional<NcclApi> library;
  std::lock_guard lock(mutex);
  if (!library) library = load_nccl_library();
  return *library;
}

void set_nccl_api_for_testing(const NcclApi* fake) {
  fake_api = fake;
}

std::unique_ptr<Backend> make_nccl_backend(TcpStore& store, const GroupConfig& config) {
  return std::make_unique<NcclBackend>(store, config);
}

}  // namespace kiln::dist
