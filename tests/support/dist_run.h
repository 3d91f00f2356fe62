// Runs the ranks of tests/support/dist_worker.cpp for the data-parallel suites: under `kiln
// launch` (the way users start them), or as a shell line of background processes where a test
// needs every rank to end on its own (a dead peer). Every run is bounded by `timeout`.
#pragma once

#include <fstream>
#include <map>
#include <string>

#include "autograd/safetensors.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "tools/launch.h"

namespace kiln::test {

struct WorkerArgs {
  std::string mode;
  std::string device = "cpu";
  bool compiled = false;
  std::string env;  // more VAR=value words for every rank
};

inline std::string worker_line(const WorkerArgs& a, const TempDir& dir) {
  return std::string(KILN_DIST_WORKER) + " " + a.mode + " " + dir.path().string() + " " + a.device +
         (a.compiled ? " compiled" : "");
}

// `kiln launch -n N` of the worker, killed after `timeout` seconds.
inline CommandResult launch_workers(int n, const WorkerArgs& a, const TempDir& dir,
                                    int timeout = 120) {
  return run_command("env KILN_CUDA=virtual " + a.env + " timeout " + std::to_string(timeout) +
                     " " + KILN_TOOL + " launch -n " + std::to_string(n) + " --master-port 0 -- " +
                     worker_line(a, dir));
}

// Each rank's exit status and output when every rank is left to end by itself.
struct RankOutcome {
  int status = -1;
  std::string output;
};

inline std::vector<RankOutcome> spawn_workers(int n, const WorkerArgs& a, const TempDir& dir,
                                              int timeout = 60) {
  std::string line, port = std::to_string(tools::free_port());
  for (int r = 0; r < n; ++r) {
    std::string out = (dir / ("out" + std::to_string(r))).string();
    line += "(env KILN_CUDA=virtual RANK=" + std::to_string(r) +
            " WORLD_SIZE=" + std::to_string(n) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
            " " + a.env + " timeout " + std::to_string(timeout) + " " + worker_line(a, dir) +
            " > " + out + " 2>&1; echo $? > " + out + ".status) & ";
  }
  run_command(line + "wait");
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::ifstream status(dir / ("out" + std::to_string(r) + ".status"));
    status >> outcomes[r].status;
    std::ifstream out(dir / ("out" + std::to_string(r)));
    outcomes[r].output.assign(std::istreambuf_iterator<char>(out), {});
  }
  return outcomes;
}

// What rank `r` wrote, by name.
inline std::map<std::string, Tensor> rank_results(const TempDir& dir, int r) {
  std::map<std::string, Tensor> m;
  auto file = dir / ("rank" + std::to_string(r) + ".safetensors");
  if (!std::ifstream(file)) return m;
  for (auto& [name, t] : load_safetensors(file.string()).tensors) m[name] = t;
  return m;
}

}  // namespace kiln::test
