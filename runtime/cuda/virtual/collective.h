// Warp collectives and block barriers: the handlers only park the thread (status + what it
// waits on); the block scheduler in launch.cpp groups parked threads and calls in here to
// carry a ready group out.
#pragma once

#include <cstdint>

#include "runtime/cuda/virtual/decoder.h"
#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

enum class WarpKind : std::uint8_t {
  shfl,
  vote,
  activemask,
  match,
  redux,
  sync,
  elect,
  mma,      // mma.sync.aligned (ops_mma.cpp)
  ldmatrix  // ldmatrix.sync.aligned (ops_mma.cpp)
};

// .sync.aligned collectives with no member mask: all 32 lanes of the warp must execute the same
// instruction (PTX ISA, mma and ldmatrix: "all threads in the warp must execute the same ...").
inline bool is_whole_warp(WarpKind k) {
  return k == WarpKind::mma || k == WarpKind::ldmatrix;
}

// Which collective `in` is (stored in Instr::aux by the decoders).
inline WarpKind warp_kind(const Instr& in) {
  return static_cast<WarpKind>(in.aux);
}
const char* warp_kind_name(WarpKind k);

// Runs the collective for the lanes in `group` (all parked at a compatible collective with the
// same member mask) and writes every lane's results. `lanes` has 32 entries (null: no thread).
void execute_warp_group(ThreadState* const* lanes, std::uint32_t group);

// Sets `in` up to park its thread as collective `kind` (ops_warp.cpp).
void park_as(Instr& in, WarpKind kind);

// The tensor-core collectives over a whole converged warp (ops_mma.cpp).
void execute_mma(ThreadState* const* lanes);
void execute_ldmatrix(ThreadState* const* lanes);

// bar.warp.sync is decoded here although its opcode starts with "bar".
void decode_bar_warp_sync(DecodeCtx& c, OpcodeParts& info, Instr& in);

// Barrier instruction fields: mod 0 = sync, 1 = arrive, 2 = red; mod2 = red op (0 popc, 1 and,
// 2 or); aux = 1 when a thread count is given.
enum BarMode : std::uint8_t { kBarSync, kBarArrive, kBarRed };

}  // namespace kiln::cuda::vgpu
