// Aliasing checks and write-back of the inputs a compiled function writes (written_inputs.h).
#include "jit/written_inputs.h"

#include "graph/node_values.h"
#include "runtime/dispatch.h"
#include "runtime/grad_mode.h"

namespace kiln::jit {

// An input written in place must not share memory with another input: the trace read them as
// two tensors (PyTorch's functionalization also refuses what it cannot replay).
void check_written_inputs_unaliased(const graph::Graph& g, std::span<const CallArg> args,
                                    const std::string& fn) {
  for (int w : g.mutated_inputs) {
    const graph::Input& in = *g.input_of(w);
    Tensor written = graph::input_value(in, args);
    for (const auto& other_in : g.inputs) {
      if (other_in.value == w || other_in.kind == graph::InputKind::constant) continue;
      Tensor other = graph::input_value(other_in, args);
      KILN_CHECK(!other.defined() || other.impl().storage != written.impl().storage,
                 "compile: '{}' writes in place to '{}' (shape {}), which shares memory with "
                 "'{}' (shape {}); pass tensors that do not overlap (clone one)",
                 fn, in.name, shape_str(written.shape()), other_in.name, shape_str(other.shape()));
    }
  }
}

std::vector<std::size_t> written_input_indices(const graph::Graph& g) {
  std::vector<std::size_t> out;
  for (int w : g.mutated_inputs)
    for (std::size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i].value == w) out.push_back(i);
  KILN_CHECK(out.size() == g.mutated_inputs.size(),
             "compile: internal error: a written value of '{}' is not an input", g.name);
  return out;
}

// Writes the final value of each input the function wrote in place into it, and drops those
// values from `out`: what a call returns is what the function returned.
void write_back(const graph::Graph& g, std::span<const std::size_t> written,
                std::span<const CallArg> args, std::vector<Tensor>& out) {
  KILN_CHECK(written.size() == g.mutated_inputs.size() && out.size() >= written.size(),
             "compile: internal error: '{}' writes {} inputs, {} found, {} values returned", g.name,
             g.mutated_inputs.size(), written.size(), out.size());
  std::size_t returned = out.size() - written.size();
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < written.size(); ++k) {
    const Tensor& dst = graph::input_ref(g.inputs[written[k]], args);
    const Tensor& src = out[returned + k];
    // The kernel that computed it wrote it there (jit/buffer_assignment.h: written_into).
    const bool there = src.raw_data() == dst.raw_data() && src.shape() == dst.shape() &&
                       src.strides() == dst.strides() && src.dtype() == dst.dtype();
    if (!there) copy_data(dst, src);
    dst.impl().storage->bump_version();
  }
  out.resize(returned);
}

}  // namespace kiln::jit
