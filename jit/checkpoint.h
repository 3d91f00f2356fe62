// jit::checkpoint: activation checkpointing for compiled functions. Inside a function compiled
// for training, what `fn` computes is never saved for the backward: the compiled backward
// recomputes it from the region's inputs, trading compute for activation memory. Outside a
// trace, or in a call that needs no gradients, it simply calls `fn`.
//
//   auto step = jit::compile([&](const Tensor& x) {
//     Tensor h = x;
//     for (auto& block : blocks) h = jit::checkpoint([&](const Tensor& a) { return block(a); }, h);
//     return sum(h);
//   });
#pragma once

#include <utility>

#include "graph/tracer.h"

namespace kiln::jit {

template <typename Fn, typename... Args>
decltype(auto) checkpoint(Fn&& fn, Args&&... args) {
  graph::CheckpointScope scope;
  return std::forward<Fn>(fn)(std::forward<Args>(args)...);
}

}  // namespace kiln::jit
