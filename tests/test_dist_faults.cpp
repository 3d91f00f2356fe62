// Faults: a rank killed in the middle of a step makes the others fail with an error naming it
// well within the timeout; a peer that never joins a collective is an error once the timeout
// passes; `kiln launch` stops the other ranks when one fails and names it.
#include <boost/test/unit_test.hpp>

#include <chrono>

#include "support/dist_run.h"

using namespace kiln;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_rank_killed_mid_step_makes_the_others_fail_naming_it) {
  for (int n : {2, 4}) {
    test::TempDir dir;
    auto start = std::chrono::steady_clock::now();
    auto ranks = test::spawn_workers(n, {"die", "cpu", false, "KILN_DIST_TIMEOUT=20"}, dir, 60);
    BOOST_TEST(seconds_since(start) < 10.0);  // well within the timeout: no rank waits it out
    BOOST_TEST(ranks[1].status == 137);  // SIGKILL, as `timeout` reports it
    for (int r = 0; r < n; ++r) {
      if (r == 1) continue;
      BOOST_TEST(ranks[r].status == 1, "rank " << r << ": " << ranks[r].output);
      BOOST_TEST(ranks[r].output.find("peer rank 1 is gone") != std::string::npos, ranks[r].output);
      BOOST_TEST(ranks[r].output.find("all_reduce") != std::string::npos, ranks[r].output);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_peer_that_never_joins_is_an_error_after_the_timeout) {
  test::TempDir dir;
  auto start = std::chrono::steady_clock::now();
  auto ranks = test::spawn_workers(2, {"stall", "cpu", false, "KILN_DIST_TIMEOUT=2"}, dir, 60);
  BOOST_TEST(ranks[0].status == 1, ranks[0].output);
  BOOST_TEST(ranks[0].output.find("all_reduce of 4 f32 elements [4] failed on rank 0 of 2 "
                                  "(timeout 2000 ms)") != std::string::npos,
             ranks[0].output);
  BOOST_TEST(seconds_since(start) < 30.0);
}

BOOST_AUTO_TEST_CASE(launch_prefixes_lines_with_ranks_and_names_the_rank_that_failed) {
  // Rank 2 fails once the others have printed (each leaves a file): a rank stopped before its
  // shell ran echo would have nothing to prefix.
  test::TempDir dir;
  const std::string d = dir.path().string();
  auto run = test::run_command(
      std::string("timeout 60 ") + KILN_TOOL +
      " launch -n 3 --master-port 0 -- sh -c 'echo hello $RANK of $WORLD_SIZE; touch " + d +
      "/$RANK; if [ $RANK = 2 ]; then while [ ! -e " + d + "/0 ] || [ ! -e " + d +
      "/1 ]; do sleep 0.05; done; exit 3; fi; sleep 50'");
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(run.output.find("[rank 0] hello 0 of 3") != std::string::npos, run.output);
  BOOST_TEST(run.output.find("[rank 2] hello 2 of 3") != std::string::npos, run.output);
  BOOST_TEST(run.output.find("failed: rank 2 exited with status 3") != std::string::npos,
             run.output);
}

BOOST_AUTO_TEST_CASE(launch_exits_zero_when_every_rank_does) {
  auto run = test::run_command(std::string("timeout 60 ") + KILN_TOOL +
                               " launch -n 2 -- sh -c 'echo $MASTER_ADDR $LOCAL_RANK'");
  BOOST_TEST(run.status == 0, run.output);
  BOOST_TEST(run.output.find("[rank 1] 127.0.0.1 1") != std::string::npos, run.output);
}

// A rank alone: rank 0 waits for its peer in the rendezvous, rank 1 for rank 0's store; both
// give up after the timeout with an error that says what they waited for.
BOOST_AUTO_TEST_CASE(a_rendezvous_no_peer_joins_is_an_error_after_the_timeout) {
  for (int rank : {0, 1}) {
    auto start = std::chrono::steady_clock::now();
    auto run = test::run_command(
        "env RANK=" + std::to_string(rank) +
        " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(tools::free_port()) +
        " KILN_DIST_TIMEOUT=1 timeout 60 " + KILN_DIST_WORKER + " collectives /tmp cpu");
    BOOST_TEST(run.status == 1, run.output);
    BOOST_TEST(seconds_since(start) < 20.0);
    const char* want = rank == 0 ? "init_process_group(\"gloo\") failed on rank 0 of 2"
                                 : "rank 1 could not reach the store of rank 0 at 127.0.0.1:";
    BOOST_TEST(run.output.find(want) != std::string::npos, run.output);
  }
}
