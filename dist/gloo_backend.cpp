// The Gloo backend: a TCP device, a full mesh built through the store, and Gloo's collectives on
// host buffers. f16/bf16 reduce through f32 element by element; avg is a sum scaled afterwards.
// reduce_scatter is Gloo's halving-doubling algorithm (it has no reduce-scatter taking options).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <limits>
#include <vector>

#include "dist/backend.h"
#include "dist/tcp_store.h"
#include "runtime/error.h"

namespace kiln::dist {

namespace {

// gloo::rendezvous::Store over kiln's TCP store.
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(TcpStore& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  TcpStore& store_;
  std::chrono::milliseconds timeout_;
};

template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, f16> || std::is_same_v<T, bf16>, float, T>;

template <typename T, bool Max>
void reduce_elements(void* c_, const void* a_, const void* b_, std::size_t n) {
  T* c = static_cast<T*>(c_);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (std::size_t i = 0; i < n; ++i) {
    Wide<T> x = static_cast<Wide<T>>(a[i]), y = static_cast<Wide<T>>(b[i]);
    c[i] = static_cast<T>(Max ? (x > y ? x : y) : x + y);
  }
}

// The same as a ReductionFunction of the older algorithms: x = op(x, y).
template <typename T, bool Max>
void reduce_into(T* x, const T* y, std::size_t n) {
  reduce_elements<T, Max>(x, x, y, n);
}

template <typename Visit>
void with_type(DType dtype, const char* op, Visit&& visit) {
  switch (dtype) {
    case DType::f32:
      return visit(float{});
    case DType::f64:
      return visit(double{});
    case DType::f16:
      return visit(f16{});
    case DType::bf16:
      return visit(bf16{});
    case DType::i8:
      return visit(std::int8_t{});
    case DType::i32:
      return visit(std::int32_t{});
    case DType::i64:
      return visit(std::int64_t{});
    case DType::bool_:
      break;
  }
  KILN_CHECK(false, "kiln::dist: {} does not take {} tensors under gloo", op, dtype_name(dtype));
}

class GlooBackend : public Backend {
 public:
  GlooBackend(TcpStore& store, const GroupConfig& config) : config_(config) {
    gloo::transport::tcp::attr attr;
    attr.hostname = config.hostname;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
    context->setTimeout(config.timeout);
    GlooStore adapter(store, config.timeout);
    gloo::rendezvous::PrefixStore prefixed("gloo", adapter);
    context->connectFullMesh(prefixed, device_);
    context_ = std::move(context);
  }

  std::string name() const override { return "gloo"; }
  bool takes_device_memory() const override { return false; }

  void all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override {
    with_type(dtype, "all_reduce", [&]<typename T>(T) {
      KILN_CHECK(op != ReduceOp::avg || !std::is_integral_v<T>,
                 "kiln::dist: all_reduce with avg needs a floating dtype, not {}",
                 dtype_name(dtype));
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(static_cast<T*>(data), count);
      if (op == ReduceOp::max)
        opts.setReduceFunction(&reduce_elements<T, true>);
      else
        opts.setReduceFunction(&reduce_elements<T, false>);
      opts.setTag(next_tag());
      opts.setTimeout(config_.timeout);
      gloo::allreduce(opts);
      if constexpr (!std::is_integral_v<T>)
        if (op == ReduceOp::avg) scale(static_cast<T*>(data), count);
    });
  }

  void broadcast(void* data, std::size_t count, DType dtype, int root) override {
    with_type(dtype, "broadcast", [&]<typename T>(T) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<T*>(data), count);
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(config_.timeout);
      gloo::broadcast(opts);
    });
  }

  void all_gather(const void* in, void* out, std::size_t count, DType dtype) override {
    with_type(dtype, "all_gather", [&]<typename T>(T) {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
      opts.setOutput(static_cast<T*>(out), count * static_cast<std::size_t>(config_.world_size));
      opts.setTag(next_tag());
      opts.setTimeout(config_.timeout);
      gloo::allgather(opts);
    });
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype,
                      ReduceOp op) override {
    auto n = static_cast<std::size_t>(config_.world_size);
    KILN_CHECK(count * n <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
               "kiln::dist: reduce_scatter of {} elements: Gloo's takes at most 2^31 - 1",
               count * n);
    with_type(dtype, "reduce_scatter", [&]<typename T>(T) {
      KILN_CHECK(op != ReduceOp::avg || !std::is_integral_v<T>,
                 "kiln::dist: reduce_scatter with avg needs a floating dtype, not {}",
                 dtype_name(dtype));
      static const gloo::ReductionFunction<T> sum(gloo::SUM, &reduce_into<T, false>);
      static const gloo::ReductionFunction<T> max(gloo::MAX, &reduce_into<T, true>);
      // In place; each rank's reduced chunk lands at the buffer's start.
      std::vector<T> scratch(static_cast<const T*>(in), static_cast<const T*>(in) + count * n);
      gloo::ReduceScatterHalvingDoubling<T> algorithm(
          context_, {scratch.data()}, static_cast<int>(count * n),
          std::vector<int>(n, static_cast<int>(count)), op == ReduceOp::max ? &max : &sum);
      algorithm.run();
      T* result = static_cast<T*>(out);
      std::memcpy(result, scratch.data(), count * sizeof(T));
      if constexpr (!std::is_integral_v<T>)
        if (op == ReduceOp::avg) scale(result, count);
    });
  }

  void barrier() override {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(config_.timeout);
    gloo::barrier(opts);
  }

 private:
  std::uint32_t next_tag() { return tag_++; }
  // A sum into an average.
  template <typename T>
  void scale(T* p, std::size_t count) const {
    auto n = static_cast<Wide<T>>(config_.world_size);
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Wide<T>>(p[i]) / n);
  }

  GroupConfig config_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t tag_ = 1;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(TcpStore& store, const GroupConfig& config) {
  return std::make_unique<GlooBackend>(store, config);
}

}  // namespace kiln::dist
