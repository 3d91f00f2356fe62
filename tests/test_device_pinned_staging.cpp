// Uploads that do not make the host wait: a copy from pageable memory counts as a
// synchronization (as cuMemcpyHtoD waits for all queued work), one from pinned memory does not,
// and PinnedStaging reuses a pinned block only after its copy's event has completed.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime/cuda/host_sync.h"
#include "runtime/cuda/pinned_staging.h"
#include "runtime/cuda/selection.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/error.h"

namespace {

using namespace kiln;

cuda::Backend& gpu() {
  return cuda::backend("virtual");
}

std::vector<float> iota(std::size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<float> download(cuda::DevicePtr p, std::size_t n) {
  std::vector<float> v(n);
  gpu().copy_to_host(v.data(), p, n * sizeof(float));
  return v;
}

// Restores hold_events on scope exit.
struct HeldEvents {
  HeldEvents() { cuda::vgpu::hold_events(true); }
  ~HeldEvents() { cuda::vgpu::hold_events(false); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(pinned_staging)

BOOST_AUTO_TEST_CASE(a_pageable_upload_counts_as_a_synchronization_and_a_pinned_one_does_not) {
  auto& stats = cuda::host_sync_stats();
  const std::size_t n = 1000;
  cuda::DevicePtr d = gpu().alloc(n * sizeof(float));
  std::vector<float> pageable = iota(n, 1);
  auto syncs = stats.synchronizations.load(), uploads = stats.pageable_uploads.load();
  gpu().copy_to_device(d, pageable.data(), n * sizeof(float));
  BOOST_TEST(stats.synchronizations.load() == syncs + 1);
  BOOST_TEST(stats.pageable_uploads.load() == uploads + 1);

  auto* pinned = static_cast<float*>(gpu().host_alloc(n * sizeof(float)));
  std::vector<float> want = iota(n, -5);
  std::memcpy(pinned, want.data(), n * sizeof(float));
  syncs = stats.synchronizations.load();
  gpu().copy_to_device(d, pinned, n * sizeof(float));
  BOOST_TEST(stats.synchronizations.load() == syncs);
  BOOST_TEST(download(d, n) == want);
  // A copy that runs past the pinned block's end reads pageable memory: it waits.
  gpu().copy_to_device(d, pinned + 1, n * sizeof(float));
  BOOST_TEST(stats.synchronizations.load() == syncs + 1);
  gpu().host_free(pinned);
  BOOST_CHECK_THROW(gpu().host_free(pageable.data()), Error);
  gpu().free(d);
}

BOOST_AUTO_TEST_CASE(staged_uploads_arrive_without_a_synchronization) {
  cuda::PinnedStaging staging(gpu());
  auto& stats = cuda::host_sync_stats();
  const std::size_t n = 3000;
  cuda::DevicePtr d = gpu().alloc(n * sizeof(float));
  auto syncs = stats.synchronizations.load();
  for (int round = 0; round < 3; ++round) {
    std::vector<float> src = iota(n, float(round * 7));
    staging.upload(d, src.data(), n * sizeof(float));
    src.assign(n, -1);  // the caller may reuse its memory at once
    BOOST_TEST(stats.synchronizations.load() == syncs);
    BOOST_TEST(download(d, n) == iota(n, float(round * 7)));
  }
  // Events complete at once here: one block serves every upload.
  BOOST_TEST(staging.stats().host_allocs == 1u);
  BOOST_TEST(staging.stats().reuses == 2u);
  BOOST_TEST(staging.stats().uploads == 3u);
  gpu().free(d);
}

BOOST_AUTO_TEST_CASE(a_block_is_reused_only_after_its_copys_event_completes) {
  cuda::PinnedStaging staging(gpu());
  const std::size_t n = 256;
  cuda::DevicePtr d = gpu().alloc(2 * n * sizeof(float));
  std::vector<float> a = iota(n, 0), b = iota(n, 1000);
  {
    HeldEvents held;  // the device is "still copying" until a synchronization
    staging.upload(d, a.data(), n * sizeof(float));
    staging.upload(d + n * sizeof(float), b.data(), n * sizeof(float));
    // The first block's copy has not completed: the second upload took a new block.
    BOOST_TEST(staging.stats().host_allocs == 2u);
    BOOST_TEST(staging.stats().reuses == 0u);
    BOOST_TEST(staging.stats().in_flight == 2u);
    gpu().synchronize();
    staging.upload(d, b.data(), n * sizeof(float));
    BOOST_TEST(staging.stats().host_allocs == 2u);
    BOOST_TEST(staging.stats().reuses == 1u);
  }
  BOOST_TEST(download(d, n) == b);
  BOOST_TEST(download(d + n * sizeof(float), n) == b);
  staging.empty_cache();
  BOOST_TEST(staging.stats().cached_bytes == 0u);
  gpu().free(d);
}

BOOST_AUTO_TEST_CASE(block_sizes_are_powers_of_two_from_512_bytes) {
  BOOST_TEST(cuda::PinnedStaging::block_size(1) == 512u);
  BOOST_TEST(cuda::PinnedStaging::block_size(512) == 512u);
  BOOST_TEST(cuda::PinnedStaging::block_size(513) == 1024u);
  BOOST_TEST(cuda::PinnedStaging::block_size(3 << 20) == std::size_t(4) << 20);
}

BOOST_AUTO_TEST_SUITE_END()
