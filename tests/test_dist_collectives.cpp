// Collectives across 2 and 4 ranks on loopback (Gloo), on CPU tensors and on each rank's virtual
// GPU, against values computed by hand; a mismatch of shapes across ranks is an error that
// names both.
#include <boost/test/unit_test.hpp>

#include "support/dist_run.h"

using namespace kiln;

namespace {

std::vector<float> floats(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f32).contiguous().to_vector<float>();
}

void check_collectives(int n, const std::string& device) {
  test::TempDir dir;
  auto run = test::launch_workers(n, {"collectives", device, false, ""}, dir);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  float s = n * (n + 1) / 2.0f;  // the sum of r + 1 over ranks
  float ranks = n * (n - 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    auto got = test::rank_results(dir, r);
    BOOST_TEST_REQUIRE(got.size() == 11u, "rank " << r);
    BOOST_TEST(floats(got["sum"]) == (std::vector<float>{s, 2 * s, 3 * s}),
               boost::test_tools::per_element());
    BOOST_TEST(floats(got["avg"]) == (std::vector<float>{s / n, 2 * s / n, 3 * s / n}),
               boost::test_tools::per_element());
    BOOST_TEST(floats(got["max"]) == (std::vector<float>{float(n - 1), 0.f, 5.f}),
               boost::test_tools::per_element());
    BOOST_TEST((got["bf16_sum"].dtype() == DType::bf16));
    BOOST_TEST(floats(got["bf16_sum"]) == (std::vector<float>{s / 2, float(n)}),
               boost::test_tools::per_element());
    BOOST_TEST(got["i64_sum"].to_vector<std::int64_t>() ==
                   (std::vector<std::int64_t>{std::int64_t(ranks), 7 * n}),
               boost::test_tools::per_element());
    std::vector<float> t;
    for (float v : {1, 2, 3, 4, 5, 6}) t.push_back(v * ranks);
    BOOST_TEST(floats(got["transposed_sum"]) == t, boost::test_tools::per_element());
    BOOST_TEST(floats(got["broadcast"]) == (std::vector<float>{float(n - 1), float(n - 1)}),
               boost::test_tools::per_element());
    std::vector<float> gathered;
    for (int q = 0; q < n; ++q) {
      gathered.push_back(float(q));
      gathered.push_back(10.f * q);
    }
    BOOST_TEST(floats(got["all_gather"]) == gathered, boost::test_tools::per_element());
    // Chunk r of [100q + k for k < 2n], summed over ranks q.
    std::vector<float> scattered{100 * ranks + n * (2.f * r), 100 * ranks + n * (2.f * r + 1)};
    BOOST_TEST(floats(got["reduce_scatter"]) == scattered, boost::test_tools::per_element());
    // The same chunk averaged, in bf16 (whole numbers up to 256 are exact).
    BOOST_TEST(floats(got["reduce_scatter_avg_bf16"]) ==
                   (std::vector<float>{2.f * r + ranks / n, 2.f * r + 1 + ranks / n}),
               boost::test_tools::per_element());
    BOOST_TEST(floats(got["async_sum"]) == (std::vector<float>{ranks}),
               boost::test_tools::per_element());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(collectives_on_two_ranks_give_the_hand_computed_values) {
  check_collectives(2, "cpu");
}

BOOST_AUTO_TEST_CASE(collectives_on_four_ranks_give_the_hand_computed_values) {
  check_collectives(4, "cpu");
}

// Not a power of two: Gloo's halving-doubling reduce-scatter takes another path.
BOOST_AUTO_TEST_CASE(collectives_on_three_ranks_give_the_hand_computed_values) {
  check_collectives(3, "cpu");
}

BOOST_AUTO_TEST_CASE(collectives_on_virtual_gpus_are_staged_through_the_host) {
  check_collectives(2, "cuda");
}

BOOST_AUTO_TEST_CASE(mismatched_shapes_across_ranks_are_an_error_naming_both) {
  test::TempDir dir;
  auto ranks = test::spawn_workers(2, {"mismatch", "cpu", false, ""}, dir, 60);
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(ranks[r].status == 1, ranks[r].output);
    BOOST_TEST(ranks[r].output.find("all_reduce") != std::string::npos, ranks[r].output);
    BOOST_TEST(ranks[r].output.find("f32 [3]") != std::string::npos, ranks[r].output);
    BOOST_TEST(ranks[r].output.find("f32 [4]") != std::string::npos, ranks[r].output);
  }
}

BOOST_AUTO_TEST_CASE(a_process_group_without_its_environment_is_an_error_naming_it) {
  auto run = test::run_command("env -u RANK -u WORLD_SIZE " + std::string(KILN_DIST_WORKER) +
                               " collectives /tmp cpu");
  BOOST_TEST(run.status == 1);
  BOOST_TEST(run.output.find("WORLD_SIZE") != std::string::npos, run.output);
}
