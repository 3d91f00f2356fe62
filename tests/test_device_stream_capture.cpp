// Stream capture on the virtual GPU: recorded work does not run until the graph is launched, a
// replay runs it again at the same addresses, and each call CUDA forbids during a capture fails
// and invalidates it (cuStreamEndCapture then reports the first failure).
#include <boost/test/unit_test.hpp>

#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/virtual/virtual_backend.h"
#include "support/vgpu_harness.h"

namespace kiln::test {
namespace {

using cuda::CaptureMode;

// x[i] = x[i] * 2 + add, one thread per element.
const char* kAxpb = R"(
extern "C" __global__ void axpb(float* x, float add, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + add;
})";

struct Capture {
  Gpu gpu;
  cuda::Stream stream = gpu.b->create_stream();
  std::string ptx = compile(kAxpb);
  cuda::Module module = gpu.b->load_module(ptx);
  cuda::Function fn = gpu.b->get_function(module, "axpb");
  ~Capture() {
    gpu.b->unload_module(module);
    gpu.b->destroy_stream(stream);
  }
  void axpb(DevicePtr x, float add, int n) {
    void* params[] = {&x, &add, &n};
    gpu.b->launch(fn, {1}, {64}, 0, stream, params);
  }
  // Whatever failed inside the capture, ending it must report the invalidation.
  void expect_invalidated(const std::string& first_error) {
    try {
      gpu.b->end_capture(stream);
      BOOST_FAIL("end_capture accepted an invalidated capture");
    } catch (const Error& e) {
      std::string what = e.what();
      BOOST_TEST(what.find("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED") != std::string::npos, what);
      BOOST_TEST(what.find(first_error) != std::string::npos, what);
    }
  }
};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stream_capture)

BOOST_AUTO_TEST_CASE(recorded_work_runs_at_each_replay_and_not_before) {
  Capture c;
  DevicePtr x = c.gpu.upload(std::vector<float>{1, 2, 3});
  DevicePtr y = c.gpu.zeros<float>(3);
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  BOOST_TEST(c.gpu.b->is_capturing(c.stream));
  c.axpb(x, 1.0f, 3);                                       // x = 2x + 1
  c.gpu.b->copy_device(y, x, 3 * sizeof(float), c.stream);  // y = x
  c.axpb(y, -5.0f, 3);                                      // y = 2y - 5
  c.gpu.b->memset8(x, 0, sizeof(float), c.stream);          // x[0] = 0
  cuda::GraphExec graph = c.gpu.b->end_capture(c.stream);
  BOOST_TEST(!c.gpu.b->is_capturing(c.stream));
  // Recording ran nothing.
  BOOST_TEST(c.gpu.download<float>(x, 3) == (std::vector<float>{1, 2, 3}));
  BOOST_TEST(c.gpu.download<float>(y, 3) == (std::vector<float>{0, 0, 0}));
  const auto before = cuda::vgpu::graph_launches(*c.gpu.b);
  c.gpu.b->launch_graph(graph, c.stream);
  BOOST_TEST(c.gpu.download<float>(x, 3) == (std::vector<float>{0, 5, 7}));
  BOOST_TEST(c.gpu.download<float>(y, 3) == (std::vector<float>{1, 5, 9}));
  // A replay reads what the memory holds now, at the recorded addresses and arguments.
  c.gpu.b->launch_graph(graph, c.stream);
  BOOST_TEST(c.gpu.download<float>(x, 3) == (std::vector<float>{0, 11, 15}));
  BOOST_TEST(c.gpu.download<float>(y, 3) == (std::vector<float>{-3, 17, 25}));
  BOOST_TEST(cuda::vgpu::graph_launches(*c.gpu.b) == before + 2);
  c.gpu.b->destroy_graph(graph);
  BOOST_CHECK_THROW(c.gpu.b->launch_graph(graph, c.stream), Error);
}

BOOST_AUTO_TEST_CASE(a_library_call_is_recorded_as_host_work) {
  Capture c;
  int runs = 0;
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  cuda::vgpu::run_host_work(*c.gpu.b, c.stream, [&] { ++runs; });
  cuda::GraphExec graph = c.gpu.b->end_capture(c.stream);
  BOOST_TEST(runs == 0);
  c.gpu.b->launch_graph(graph, c.stream);
  c.gpu.b->launch_graph(graph, c.stream);
  BOOST_TEST(runs == 2);
  cuda::vgpu::run_host_work(*c.gpu.b, c.stream, [&] { ++runs; });  // not capturing: now
  BOOST_TEST(runs == 3);
  c.gpu.b->destroy_graph(graph);
}

BOOST_AUTO_TEST_CASE(a_synchronization_fails_and_invalidates_the_capture) {
  Capture c;
  for (auto sync : std::vector<std::function<void()>>{
           [&] { c.gpu.b->synchronize(); },
           [&] { c.gpu.b->synchronize_stream(c.stream); },
       }) {
    c.gpu.b->begin_capture(c.stream, CaptureMode::global);
    std::string what = error_of(sync);
    BOOST_TEST(what.find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") != std::string::npos, what);
    BOOST_TEST(what.find("synchronization") != std::string::npos, what);
    c.expect_invalidated("Synchronize failed");
  }
}

BOOST_AUTO_TEST_CASE(a_copy_to_or_from_the_host_fails_and_invalidates_the_capture) {
  Capture c;
  DevicePtr x = c.gpu.zeros<float>(4);
  std::vector<float> pageable(4, 1.0f);
  void* pinned = c.gpu.b->host_alloc(4 * sizeof(float));
  struct Case {
    std::function<void()> call;
    std::string names;
  };
  const std::vector<Case> cases = {
      {[&] { c.gpu.b->copy_to_host(pageable.data(), x, 16, c.stream); }, "cuMemcpyDtoHAsync_v2"},
      {[&] { c.gpu.b->copy_to_device(x, pinned, 16, c.stream); }, "cuMemcpyHtoDAsync_v2"},
      {[&] { c.gpu.b->copy_to_device(x, pageable.data(), 16, c.stream); }, "cuMemcpyHtoDAsync_v2"},
  };
  for (const Case& k : cases) {
    c.gpu.b->begin_capture(c.stream, CaptureMode::global);
    std::string what = error_of(k.call);
    BOOST_TEST(what.find(k.names) != std::string::npos, what);
    BOOST_TEST(what.find("host") != std::string::npos, what);
    c.expect_invalidated(k.names);
  }
  // A pageable upload on another stream waits for the device: unsafe under a global capture.
  cuda::Stream other = c.gpu.b->create_stream();
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  std::string what = error_of([&] { c.gpu.b->copy_to_device(x, pageable.data(), 16, other); });
  BOOST_TEST(what.find("pageable") != std::string::npos, what);
  c.expect_invalidated("cuMemcpyHtoD_v2");
  c.gpu.b->destroy_stream(other);
  c.gpu.b->host_free(pinned);
}

BOOST_AUTO_TEST_CASE(an_allocation_outside_a_pool_fails_unless_the_thread_is_relaxed) {
  Capture c;
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  std::string what = error_of([&] { c.gpu.b->alloc(256); });
  BOOST_TEST(what.find("cuMemAlloc_v2") != std::string::npos, what);
  BOOST_TEST(what.find("outside the graph's memory pool") != std::string::npos, what);
  c.expect_invalidated("cuMemAlloc_v2");
  // Relaxed, as the caching allocator is when it takes memory for a graph's pool.
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  DevicePtr p = 0;
  {
    cuda::CaptureModeGuard relaxed(*c.gpu.b, CaptureMode::relaxed);
    p = c.gpu.b->alloc(256);
  }
  BOOST_TEST(p != 0u);
  c.gpu.b->destroy_graph(c.gpu.b->end_capture(c.stream));
  c.gpu.b->free(p);
}

BOOST_AUTO_TEST_CASE(a_thread_local_capture_leaves_other_threads_free) {
  Capture c;
  c.gpu.b->begin_capture(c.stream, CaptureMode::thread_local_);
  std::string other_thread;
  std::thread t([&] { other_thread = error_of([&] { c.gpu.b->free(c.gpu.b->alloc(64)); }); });
  t.join();
  BOOST_TEST(other_thread.empty(), other_thread);
  std::string same_thread = error_of([&] { c.gpu.b->alloc(64); });
  BOOST_TEST(same_thread.find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") != std::string::npos,
             same_thread);
  c.expect_invalidated("cuMemAlloc_v2");
}

BOOST_AUTO_TEST_CASE(work_on_the_legacy_stream_fails_and_invalidates_the_capture) {
  Capture c;
  DevicePtr x = c.gpu.zeros<float>(4);
  c.gpu.b->begin_capture(c.stream, CaptureMode::global);
  std::string what = error_of([&] {
    float add = 1;
    int n = 4;
    void* params[] = {&x, &add, &n};
    c.gpu.b->launch(c.fn, {1}, {64}, 0, nullptr, params);
  });
  BOOST_TEST(what.find("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT") != std::string::npos, what);
  c.expect_invalidated("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
  BOOST_CHECK_THROW(c.gpu.b->begin_capture(nullptr, CaptureMode::global), Error);
  // The kernel launched inside the failed capture never ran.
  BOOST_TEST(c.gpu.download<float>(x, 4) == (std::vector<float>(4, 0.0f)));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kiln::test
