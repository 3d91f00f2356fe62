// Kernel value access (see kernel_values.h).
#include "jit/codegen/kernel_values.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "graph/node_values.h"
#include "runtime/dispatch.h"

namespace kiln::jit::codegen {

namespace {
thread_local KernelNames* current_names = nullptr;

int number_of(int value) {
  KILN_CHECK(current_names, "codegen: a register named outside a kernel's KernelNames");
  return current_names->number(value);
}
}  // namespace

KernelNames::KernelNames() : outer_(current_names) {
  current_names = this;
}

KernelNames::~KernelNames() {
  current_names = outer_;
}

int KernelNames::number(int value) {
  for (const auto& [v, n] : numbers_)
    if (v == value) return n;
  numbers_.emplace_back(value, static_cast<int>(numbers_.size()));
  return numbers_.back().second;
}

std::string var(int value) {
  return fmt::format("v{}", number_of(value));
}

std::string acc_var(int value) {
  return fmt::format("acc{}", number_of(value));
}

bool is_inlined(const graph::Graph& g, int v) {
  return g.values[v].producer < 0 && g.is_constant(v) && g.values[v].meta.shape.empty();
}

// A number next to CUDA tensors is an argument, so one kernel serves every value of it.
bool is_by_value(const graph::Graph& g, int v) {
  return g.values[v].producer < 0 && !is_inlined(g, v) && g.values[v].device.is_cpu() &&
         g.values[v].meta.shape.empty();
}

std::string node_text(const graph::Graph& g, int n) {
  const graph::Node& node = g.nodes[n];
  std::vector<std::string> ins, outs;
  for (int v : node.inputs) ins.push_back(fmt::format("%{}", v));
  for (int v : node.outputs)
    outs.push_back(fmt::format("%{}: {}", v, graph::value_type_str(g.values[v])));
  std::string attrs = attrs_str(node.op, node.attrs);
  return fmt::format("{} = {}({}{}{})", fmt::join(outs, ", "), node.op, fmt::join(ins, ", "),
                     attrs.empty() ? "" : ", ", attrs);
}

std::array<unsigned char, 8> number_argument(const Tensor& number) {
  Tensor t = number.to(Device::cpu());
  std::array<unsigned char, 8> bytes{};
  switch (t.dtype()) {
    case DType::bool_:
    case DType::i8:
    case DType::i32:
    case DType::i64:
    case DType::f64:
      std::memcpy(bytes.data(), t.raw_data(), itemsize(t.dtype()));
      break;
    default: {
      float x = static_cast<float>(t.item());
      std::memcpy(bytes.data(), &x, sizeof x);
    }
  }
  return bytes;
}

std::vector<long long> domain_strides(const Tensor& t, int domain_rank,
                                      const std::vector<int>& frame_dims) {
  std::vector<long long> strides(static_cast<std::size_t>(domain_rank), 0);
  domain_strides_into(t, frame_dims, strides);
  return strides;
}

void domain_strides_into(const Tensor& t, const std::vector<int>& frame_dims,
                         std::span<long long> strides) {
  std::fill(strides.begin(), strides.end(), 0);
  auto rank = static_cast<int>(t.dim());
  auto frame_rank = static_cast<int>(frame_dims.size());
  const Shape& shape = t.shape();
  const Strides& steps = t.strides();
  for (int d = 0; d < rank; ++d) {
    int fd = frame_rank - rank + d;
    if (fd >= 0 && shape[d] != 1) strides[frame_dims[fd]] = steps[d];
  }
}

void LaunchScratch::clear() {
  kept.clear();
  reduced.clear();
  packed.clear();
  strides.clear();
  out_strides.clear();
  pointers.clear();
  numbers.clear();
  params.clear();
  read_access.clear();
  write_access.clear();
}

LaunchScratch::Lease::Lease() {
  thread_local LaunchScratch mine;
  if (mine.leased_) {
    own_ = std::make_unique<LaunchScratch>();
    scratch_ = own_.get();
  } else {
    scratch_ = &mine;
  }
  scratch_->leased_ = true;
}

LaunchScratch::Lease::~Lease() {
  scratch_->clear();
  scratch_->leased_ = false;
}

void check_host_view(const graph::Graph& g, const std::set<int>& inside, int n,
                     const std::string& kernel) {
  for (int v : g.nodes[n].inputs) {
    // Through a chain of host views to what the kernel reads (views apply on the host in order).
    int p = g.values[v].producer;
    while (p >= 0 && inside.count(p) && op_class(g.nodes[p].op) == OpClass::view)
      p = g.values[g.nodes[p].inputs.at(0)].producer;
    KILN_CHECK(p < 0 || !inside.count(p),
               "codegen: '{}': the view {} of a value computed in the same kernel is not "
               "supported yet",
               kernel, node_text(g, n));
  }
}

bool is_unit_reshape(const graph::Graph& g, int n) {
  const graph::Node& node = g.nodes[n];
  // A permute of [n, n] keeps the sizes and still moves elements: only reshape and detach.
  if ((node.op != OpId::reshape && node.op != OpId::detach) || node.inputs.size() != 1)
    return false;
  auto squeezed = [](const std::vector<SymExpr>& sizes) {
    std::vector<SymExpr> out;
    for (const auto& s : sizes)
      if (!(s.is_constant() && s.constant_value() == 1)) out.push_back(s);
    return out;
  };
  auto a = squeezed(g.values[node.inputs[0]].sizes), b = squeezed(g.values[node.output()].sizes);
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].is_opaque() || !(a[i] == b[i])) return false;
  return true;
}

void apply_host_views(const graph::Graph& g, const std::vector<int>& views,
                      std::vector<Tensor>& values, std::span<const std::int64_t> symbol_values) {
  for (int n : views) {
    const graph::Node& node = g.nodes[n];
    std::vector<Tensor> ins;
    for (int v : node.inputs) ins.push_back(values.at(v));
    values.at(node.output()) = dispatch1(node.op, ins, attrs_at(g, node, symbol_values));
  }
}

}  // namespace kiln::jit::codegen
