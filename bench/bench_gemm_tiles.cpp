// The generated tensor-core GEMM's tile per architecture (jit/codegen/matmul_tiles.h): the table
// the rule gives for a few shapes on sm_80 (A100: 108 SMs, 163 KiB a block), sm_86 (RTX 3090:
// 82 SMs, 99 KiB), sm_90 (H100 SXM: 132 SMs, 227 KiB) and a device of 48 KiB a block; then bf16
// 1024 x 1024 x 1024 and GPT-2 small's [4096, 768] @ [768, 3072] run on the virtual GPU with the
// old fixed tile (64 x 64, 2 stages) and with the sm_80 and sm_90 choices, with the profiler's
// modeled H100 time. The model is a roofline (DRAM, issue, tensor-core peak): it sees the issue
// slots a larger tile saves, not waves, occupancy or latency hiding. `--small` skips GPT-2's
// product (about a minute per tile on the interpreter).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "jit/codegen/matmul.h"
#include "runtime/cuda/virtual/profiler.h"
#include "runtime/cuda/virtual/virtual_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/random.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;
namespace vgpu = kiln::cuda::vgpu;
using Clock = std::chrono::steady_clock;

namespace {

struct Arch {
  const char* name;
  codegen::MatmulDevice limits;
};
constexpr std::size_t KiB = 1024;
const Arch kDevices[] = {{"sm_80", {8, 0, 108, 163 * KiB}},
                         {"sm_86", {8, 6, 82, 99 * KiB}},
                         {"sm_90", {9, 0, 132, 227 * KiB}},
                         {"48 KiB", {9, 0, 132, 48 * KiB}}};

void tile_table() {
  struct Shape {
    long long m, n, batches;
  };
  const Shape shapes[] = {{512, 512, 1},  {1024, 1024, 1}, {2048, 1024, 1}, {4096, 3072, 1},
                          {4096, 768, 1}, {8192, 8192, 1}, {128, 128, 96}};
  std::printf(
      "tile per architecture (bf16 / TF32 operands, row-major; block tile, K-step, "
      "stages, shared bytes)\n%-18s",
      "m x n (x batch)");
  for (const Arch& d : kDevices) std::printf(" %-34s", d.name);
  std::printf("\n");
  for (const Shape& s : shapes) {
    std::string what = std::to_string(s.m) + " x " + std::to_string(s.n);
    if (s.batches > 1) what += " x " + std::to_string(s.batches);
    std::printf("%-18s", what.c_str());
    for (const Arch& d : kDevices) {
      std::string cell;
      for (int elem : {2, 4}) {
        codegen::MatmulStaging st{elem, true, false};
        codegen::MatmulTile t = codegen::choose_matmul_tile(s.m, s.n, s.batches, st, d.limits);
        cell += (cell.empty() ? "" : " / ") + codegen::tile_text(t) + " " +
                std::to_string(codegen::matmul_shared_bytes(t, st) / KiB) + "K";
      }
      std::printf(" %-34s", cell.c_str());
    }
    std::printf("\n");
  }
}

void run(long m, long n, long k, const char* what, const codegen::MatmulTile& tile) {
  Tensor a = randn({m, k}).to(DType::bf16).to(kiln::Device::cuda());
  Tensor b = randn({k, n}).to(DType::bf16).to(kiln::Device::cuda());
  auto kernel = codegen::render_matmul(DType::bf16, DType::bf16, DType::bf16, 0);
  codegen::MatmulVariant v = codegen::matmul_variant(a, b, DType::bf16);
  v.tile = tile;
  (void)kernel.kernel(v).function();  // compiled before the measured run
  vgpu::set_profiling(true);
  vgpu::clear_profiles();
  auto start = Clock::now();
  Tensor c = codegen::run_matmul(kernel, a, b, TensorMeta{Shape{m, n}, DType::bf16}, v);
  (void)c.to(kiln::Device::cpu());
  double host_s = std::chrono::duration<double>(Clock::now() - start).count();
  vgpu::set_profiling(false);
  double modeled = 0, issue = 0, memory = 0, tensor = 0, dram = 0;
  for (const auto& p : vgpu::profiles()) {
    modeled += p.modeled_h100_us();
    issue += p.issue_us();
    memory += p.memory_us();
    tensor += p.tensor_us();
    dram += static_cast<double>(p.dram_bytes());
  }
  vgpu::clear_profiles();
  std::printf("%-22s %-15s %-14s %8.2f %8.2f %8.2f %8.2f %8.1f\n", what,
              (std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k)).c_str(),
              codegen::tile_text(tile).c_str(), dram / 1e6, memory, issue, tensor, modeled);
  std::printf("%-22s interpreter %.1f s\n", "", host_s);
}

}  // namespace

int main(int argc, char** argv) {
  bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  tile_table();
  std::printf("\nmodeled H100 time of bf16 products on each architecture's tile\n");
  std::printf("%-22s %-15s %-14s %8s %8s %8s %8s %8s\n", "tile from", "m x n x k", "tile",
              "DRAM MB", "mem us", "issue us", "TC us", "H100 us");
  manual_seed(1);
  codegen::MatmulStaging bf16{2, true, false};
  std::vector<std::vector<long>> shapes = {{1024, 1024, 1024}};
  if (!small) shapes.push_back({4096, 3072, 768});
  for (const auto& s : shapes) {
    run(s[0], s[1], s[2], "fixed (before)", codegen::matmul_tile_shape(0, 2));
    for (const Arch& d : {kDevices[0], kDevices[2]})
      run(s[0], s[1], s[2], (std::string("rule, ") + d.name).c_str(),
          codegen::choose_matmul_tile(s[0], s[1], 1, bf16, d.limits));
  }
  std::printf(
      "\nrule: a block takes at most what lets two fit on an SM ((opt-in maximum + 1 KiB) / 2 - 1 "
      "KiB reserved), stages what fits (2 to 4; 3 at least for a 128-wide tile), and the largest "
      "shape whose grid covers every SM, else 64 x 64. H100 us: the profiler's roofline (max of "
      "DRAM, issue and tensor-core terms) plus 3 us launch latency; it has no notion of waves.\n");
  return 0;
}
