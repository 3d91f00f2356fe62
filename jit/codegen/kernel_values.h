// How a generated kernel gets each graph value it reads: a 0-dim constant is inlined as a
// literal, another 0-dim CPU value is a number passed by value, anything else is a strided read
// whose strides the host computes per call (so one kernel serves every size and layout).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "jit/codegen/pointwise_layout.h"
#include "runtime/cuda/backend.h"

namespace kiln::jit::codegen {

// Registers are named per kernel, numbered in the order its renderer first names each value,
// so that the same block rendered from two places of a graph (or from two graphs) is the same
// code and so one compiled kernel (a kernel's identity is its code: cache::kernel_code). A
// renderer holds one KernelNames while it renders; var() outside one is an internal error.
class KernelNames {
 public:
  KernelNames();
  ~KernelNames();
  KernelNames(const KernelNames&) = delete;
  KernelNames& operator=(const KernelNames&) = delete;
  int number(int value);

 private:
  std::vector<std::pair<int, int>> numbers_;  // value -> its number, in naming order
  KernelNames* outer_;
};
std::string var(int value);      // "v3": the register holding the value
std::string acc_var(int value);  // "acc3": the accumulator of the reduction producing it
bool is_inlined(const graph::Graph& g, int value);
bool is_by_value(const graph::Graph& g, int value);
// "%3: f32[2, 4] = add(%1, %2)": a node as the kernel's header comment lists it.
std::string node_text(const graph::Graph& g, int node);

// A number's bytes as the kernel parameter of its register type (f16/bf16/f32 as float).
std::array<unsigned char, 8> number_argument(const Tensor& number);

// The strides, over a domain of `domain_rank` dims, with which `t` is read when it broadcasts to
// a frame whose dims are the domain dims `frame_dims` (right-aligned, as NumPy): 0 where `t`
// broadcasts or does not reach.
std::vector<long long> domain_strides(const Tensor& t, int domain_rank,
                                      const std::vector<int>& frame_dims);
// The same into `strides` (the domain's rank of them), which a launch reuses call after call.
void domain_strides_into(const Tensor& t, const std::vector<int>& frame_dims,
                         std::span<long long> strides);

// Buffers a launch fills with its arguments, one set per thread and reused, so a warm reduction
// launch allocates nothing but its outputs (pointwise launches do not use them yet). A Lease hands
// this thread's set out (a fresh one if it is in use: a launch inside a launch's argument
// building).
struct LaunchScratch {
  std::vector<int> kept, reduced;
  std::vector<long long> packed, strides, out_strides;
  std::vector<cuda::DevicePtr> pointers;
  std::vector<std::array<unsigned char, 8>> numbers;
  std::vector<void*> params;
  std::vector<TensorAccess> read_access, write_access;  // where each tensor starts, for schedules

  class Lease {
   public:
    Lease();
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    LaunchScratch& scratch() { return *scratch_; }

   private:
    std::unique_ptr<LaunchScratch> own_;
    LaunchScratch* scratch_;
  };

 private:
  bool leased_ = false;
  void clear();
};

// Whether view node `n` only adds or removes size-1 dims: inside a kernel, the same values.
bool is_unit_reshape(const graph::Graph& g, int n);
// Raises unless view node `n` of a kernel made of `inside` reads only values from outside it,
// directly or through other views of the kernel (a view of a value the kernel computes would
// need index arithmetic in registers).
void check_host_view(const graph::Graph& g, const std::set<int>& inside, int n,
                     const std::string& kernel);

// Runs the view nodes a kernel reads through (their inputs come from outside it) on the host,
// with symbolic target sizes at this call's values.
void apply_host_views(const graph::Graph& g, const std::vector<int>& views,
                      std::vector<Tensor>& values, std::span<const std::int64_t> symbol_values);

}  // namespace kiln::jit::codegen
