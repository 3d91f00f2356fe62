// Pointwise code generation: statements per node from the expression table, rendered into
// templates/pointwise.cu.mustache; compiled once per source and launched over a grid-stride loop.
#include "jit/codegen/pointwise.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <kainjow/mustache.hpp>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
#include "runtime/dispatch.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

constexpr int kMaxRank = 8;

Data list() {
  return Data(Data::type::list);
}

}  // namespace

PointwiseKernel render_pointwise(const graph::Graph& g, const graph::FusionGroup& group) {
  KILN_CHECK(group.kind == graph::FusionKind::pointwise,
             "codegen: group '{}' is a {} group, not pointwise", group.name,
             graph::fusion_kind_name(group.kind));
  PointwiseKernel k;
  k.name = "k_" + group.name;
  k.rank = std::max<int>(1, static_cast<int>(group.domain.size()));
  KILN_CHECK(k.rank <= kMaxRank, "codegen: '{}' has rank {} (at most {} supported)", group.name,
             k.rank, kMaxRank);
  std::set<int> inside(group.nodes.begin(), group.nodes.end());
  std::set<int> computed;  // values this kernel holds in registers
  bool fp16 = false, bf16 = false, python_mod = false, floor_div = false;
  auto note_dtype = [&](DType t) {
    fp16 = fp16 || t == DType::f16;
    bf16 = bf16 || t == DType::bf16;
  };

  // Views whose input comes from outside run on the host: their results are what the kernel
  // reads, with the strides the view gives them.
  for (int n : group.nodes) {
    const graph::Node& node = g.nodes[n];
    if (op_class(node.op) != OpClass::view) continue;
    check_host_view(g, inside, n, group.name);
    k.host_views.push_back(n);
  }
  auto is_host_view_output = [&](int v) {
    int p = g.values[v].producer;
    return p >= 0 && std::find(k.host_views.begin(), k.host_views.end(), p) != k.host_views.end();
  };

  Data loads = list(), statements = list(), stores = list(), params = list(), nodes = list();
  for (int n : group.nodes) nodes.push_back(Data("text", node_text(g, n)));
  // Parameters: the tensors read, then the numbers taken by value, then the outputs.
  Data scalar_params = list(), scalar_loads = list();
  auto read = [&](int v) -> std::string {
    if (computed.count(v)) return var(v);
    if (is_inlined(g, v)) return literal(g.values[v].meta.dtype, g.input_of(v)->tensor.item());
    int p = g.values[v].producer;
    if (p >= 0 && inside.count(p) && !is_host_view_output(v))
      throw Error(fmt::format("codegen: '{}' reads %{} before it is computed", group.name, v));
    DType t = g.values[v].meta.dtype;
    note_dtype(t);
    Data load;
    load.set("type", register_type(t));
    load.set("var", var(v));
    if (is_by_value(g, v)) {
      auto index = k.scalars.size();
      k.scalars.push_back(v);
      scalar_params.push_back(Data("decl", fmt::format("{} s{}", register_type(t), index)));
      load.set("expr", fmt::format("s{}", index));
      scalar_loads.push_back(load);
    } else {
      auto index = k.reads.size();
      k.reads.push_back(v);
      params.push_back(
          Data("decl", fmt::format("const {}* __restrict__ in{}", storage_type(t), index)));
      load.set("expr", load_expr(t, fmt::format("in{}[offset[{}]]", index, index)));
      loads.push_back(load);
    }
    computed.insert(v);
    return var(v);
  };

  for (int n : group.nodes) {
    const graph::Node& node = g.nodes[n];
    if (op_class(node.op) == OpClass::view) continue;
    KILN_CHECK(op_class(node.op) == OpClass::elementwise, "codegen: '{}': {} is not elementwise",
               group.name, node_text(g, n));
    std::vector<DType> in_types;
    for (int v : node.inputs) in_types.push_back(g.values[v].meta.dtype);
    int out = node.output();
    DType out_type = g.values[out].meta.dtype;
    std::vector<std::string> args;
    for (int v : node.inputs) args.push_back(read(v));
    std::string expr = node_expr(node.op, node.attrs, in_types, args, out_type,
                                 fmt::format("'{}': {}", group.name, node_text(g, n)));
    python_mod = python_mod || node.op == OpId::remainder;
    floor_div = floor_div || node.op == OpId::floor_divide;
    note_dtype(out_type);
    Data s;
    s.set("type", register_type(out_type));
    s.set("var", var(out));
    s.set("expr", expr);
    statements.push_back(s);
    computed.insert(out);
  }
  for (auto& decl : scalar_params.list_value()) params.push_back(decl);
  for (auto& load : scalar_loads.list_value()) loads.push_back(load);
  for (int v : group.outputs) {
    DType t = g.values[v].meta.dtype;
    int index = static_cast<int>(k.writes.size());
    k.writes.push_back(v);
    params.push_back(Data("decl", fmt::format("{}* __restrict__ out{}", storage_type(t), index)));
    Data s;
    s.set("target", fmt::format("out{}", index));
    s.set("expr", store_expr(t, read(v)));
    stores.push_back(s);
  }

  std::vector<std::string> domain;
  for (const auto& s : group.domain) domain.push_back(s.str());
  Data d;
  d.set("name", k.name);
  d.set("description", fmt::format("pointwise over [{}]", fmt::join(domain, ", ")));
  d.set("graph", g.name);
  d.set("nodes", nodes);
  d.set("rank", std::to_string(k.rank));
  d.set("num_strided", std::to_string(std::max<std::size_t>(1, k.reads.size())));
  d.set("params", params);
  d.set("loads", loads);
  d.set("statements", statements);
  d.set("stores", stores);
  d.set("fp16", fp16);
  d.set("bf16", bf16);
  d.set("helpers", elementwise_helpers(python_mod, floor_div));
  k.source = render_template("pointwise.cu.mustache", d);
  return k;
}

std::vector<Tensor> run_pointwise(const graph::Graph& g, const PointwiseKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values) {
  apply_host_views(g, kernel.host_views, values, symbol_values);
  // The struct the kernel declares has exactly rank sizes and max(1, reads) stride rows: pack
  // the same layout into a byte buffer.
  std::vector<long long> packed(static_cast<std::size_t>(kernel.rank), 1);
  Shape dom = domain.empty() ? Shape{1} : domain;
  for (int d = 0; d < kernel.rank; ++d) packed[d] = dom[d];
  std::size_t rows = std::max<std::size_t>(1, kernel.reads.size());
  std::vector<void*> params;
  std::vector<cuda::DevicePtr> pointers;
  pointers.reserve(kernel.reads.size() + kernel.writes.size());
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<long long> strides(static_cast<std::size_t>(kernel.rank), 0);
    if (r < kernel.reads.size()) {
      const Tensor& t = values.at(kernel.reads[r]);
      KILN_CHECK(t.device().type == Device::Type::cuda,
                 "codegen: kernel '{}' reads %{} on {}, not a CUDA device", kernel.name,
                 kernel.reads[r], t.device().str());
      std::vector<int> frame(static_cast<std::size_t>(kernel.rank));
      for (int d = 0; d < kernel.rank; ++d) frame[d] = d;
      strides = domain_strides(t, kernel.rank, frame);
      pointers.push_back(reinterpret_cast<cuda::DevicePtr>(t.raw_data()));
    }
    packed.insert(packed.end(), strides.begin(), strides.end());
  }
  // Numbers by value, each in its register type (at most 8 bytes).
  std::vector<std::array<unsigned char, 8>> numbers;
  for (int v : kernel.scalars) numbers.push_back(number_argument(values.at(v)));
  std::vector<Tensor> outs;
  for (int v : kernel.writes) {
    // Every value a pointwise kernel writes has the domain's shape (the graph's traced shapes
    // may hold other sizes: a dynamic dim, or an eager op's earlier call).
    outs.push_back(empty(domain, g.values[v].meta.dtype, Device::cuda()));
    pointers.push_back(reinterpret_cast<cuda::DevicePtr>(outs.back().raw_data()));
  }
  std::size_t first_write = kernel.reads.size();
  for (std::size_t i = 0; i < first_write; ++i) params.push_back(&pointers[i]);
  for (auto& number : numbers) params.push_back(number.data());
  for (std::size_t i = first_write; i < pointers.size(); ++i) params.push_back(&pointers[i]);
  long long n = numel(dom);
  params.push_back(packed.data());
  params.push_back(&n);
  if (n == 0) return outs;
  std::int64_t read = 0, written = 0;
  for (int v : kernel.reads) read += tensor_bytes(values.at(v));
  for (const auto& o : outs) written += tensor_bytes(o);
  unsigned block = 256;
  launch_generated(kernel.name, kernel.source, {grid_stride_blocks(n, block), 1, 1}, {block, 1, 1},
                   params.data(), read, written);
  return outs;
}

}  // namespace kiln::jit::codegen
