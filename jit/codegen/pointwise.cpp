// Pointwise code generation: statements per node from the expression table, rendered into
// templates/pointwise.cu.mustache; compiled once per code (cache::kernel_code) and launched over a
// grid-stride loop.
#include "jit/codegen/pointwise.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <kainjow/mustache.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/pointwise_pair.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
#include "runtime/device_checks.h"
#include "runtime/dispatch.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

constexpr int kMaxRank = 8;

std::atomic<std::int64_t>& index_limit() {
  static std::atomic<std::int64_t> limit{kIndexLimit};
  return limit;
}

std::atomic<bool>& vectors_on() {
  static std::atomic<bool> on{true};
  return on;
}

std::atomic<bool>& advance_on() {
  static std::atomic<bool> on{true};
  return on;
}

Data list() {
  return Data(Data::type::list);
}

// `items` as a list whose entries hold `key`, the last one marked `last` (no comma after it).
Data comma_list(const char* key, const std::vector<std::string>& items) {
  Data l = list();
  for (std::size_t i = 0; i < items.size(); ++i) {
    Data item(key, items[i]);
    if (i + 1 == items.size()) item.set("last", true);
    l.push_back(item);
  }
  return l;
}

// Whether a value of `sizes` is the same along the last dim of `domain` (it broadcasts there).
bool splat_along_last_dim(const std::vector<SymExpr>& sizes, const std::vector<SymExpr>& domain) {
  auto is_one = [](const SymExpr& s) { return s.is_constant() && s.constant_value() == 1; };
  if (domain.empty() || is_one(domain.back())) return false;
  return sizes.empty() || is_one(sizes.back());
}

// Whether a value of `sizes` is the same in every row of `domain` (rank 2 or more): 1 or absent
// along every dim but the last, which it does not broadcast (a bias row). Where the vector path
// advances, such a read's delta is 0 unless the domain merged into one dim, which the host
// refuses: a thread then loads it once.
bool row_stationary(const std::vector<SymExpr>& sizes, const std::vector<SymExpr>& domain) {
  auto is_one = [](const SymExpr& s) { return s.is_constant() && s.constant_value() == 1; };
  if (domain.size() < 2 || sizes.empty() || sizes.size() > domain.size() || is_one(sizes.back()))
    return false;
  for (std::size_t d = 0; d + 1 < sizes.size(); ++d)
    if (!is_one(sizes[d])) return false;
  return true;
}

// Elements per thread on the vector path: as many as fill one 16-byte access of the widest
// dtype the kernel reads or writes (4 for f32, 8 for f16/bf16, 2 for f64 and i64). Narrower
// tensors then move less per access (an f16 input next to an f32 output: 8 bytes), but every
// vector is one load or store instruction and a thread computes at most 16 elements (bool), so
// the unrolled work, its registers and NVRTC's time stay bounded.
int vector_width(const graph::Graph& g, const PointwiseKernel& k) {
  std::size_t widest = 1;
  for (int v : k.reads) widest = std::max(widest, itemsize(g.values[v].meta.dtype));
  for (int v : k.writes) widest = std::max(widest, itemsize(g.values[v].meta.dtype));
  return static_cast<int>(16 / widest);
}

// Vectors per thread on the advancing path: 4, or 2 where a vector holds 16 elements (bool), so
// that a thread's unrolled group is at most 32 elements (its registers and NVRTC's time bounded)
// while per-thread setup and loop control are paid once per 4 vectors.
int vectors_per_thread(int width) {
  return std::clamp(32 / width, 1, 4);
}

// One launch of `kernel` over `piece`, its tensors at `reads` and `writes` (the piece's own
// first elements); `bytes_read` and `bytes_written` are counted for it.
void launch_piece(const PointwiseKernel& kernel, const KernelHandle& handle, const IterPiece& piece,
                  const std::vector<TensorAccess>& reads, const std::vector<TensorAccess>& writes,
                  std::vector<std::array<unsigned char, 8>>& numbers, cuda::DevicePtr error,
                  std::array<long long, 3> position, std::int64_t bytes_read,
                  std::int64_t bytes_written) {
  std::int64_t vectors =
      vectors_on() ? plan_vectors(piece.space, kernel.vector_width, reads, writes) : 0;
  unsigned block = 256;
  std::int64_t threads = (vectors + kernel.vectors_per_thread - 1) / kernel.vectors_per_thread;
  AdvancePlan advance = advance_on() ? plan_advance(piece.space, vectors, kernel.vector_width,
                                                    block, grid_stride_blocks(threads, block),
                                                    grid_stride_blocks(kIndexLimit, block))
                                     : AdvancePlan{};
  // A read the kernel loads once per thread must not move.
  for (std::size_t k = 0; k < reads.size() && advance.on; ++k)
    if (kernel.stationary[k] && advance.delta[k] != 0) advance = AdvancePlan{};
  // The struct the kernel declares: rank sizes, max(1, reads) rows of rank strides, then per dim
  // a magic multiplier and a shift dividing by its size.
  std::vector<std::uint32_t> index(piece.space.sizes.begin(), piece.space.sizes.end());
  std::size_t rows = std::max<std::size_t>(1, reads.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (int d = 0; d < kernel.rank; ++d) {
      bool moves = r < reads.size() && piece.space.sizes[d] > 1;
      index.push_back(moves ? static_cast<std::uint32_t>(piece.space.strides[r][d]) : 0);
    }
  // Each size's divisor (the struct's magic and shift): l = ceil(log2 size) and the multiplier
  // ceil(2^(32 + l) / size), whose bit 32 the kernel adds back; exact for indices below 2^31.
  std::vector<std::uint32_t> shifts;
  for (std::int64_t size : piece.space.sizes) {
    auto divisor = static_cast<std::uint64_t>(std::max<std::int64_t>(1, size));
    unsigned l = 0;
    while ((std::uint64_t{1} << l) < divisor) ++l;
    std::uint64_t m = ((std::uint64_t{1} << (32 + l)) + divisor - 1) / divisor;
    index.push_back(static_cast<std::uint32_t>(m - (std::uint64_t{1} << 32)));
    shifts.push_back(l);
  }
  index.insert(index.end(), shifts.begin(), shifts.end());
  for (std::size_t r = 0; r < rows; ++r)
    index.push_back(r < advance.delta.size() ? static_cast<std::uint32_t>(advance.delta[r]) : 0);
  index.push_back(advance.on ? 1 : 0);
  std::vector<cuda::DevicePtr> pointers;
  for (const auto& t : reads) pointers.push_back(t.address);
  for (const auto& t : writes) pointers.push_back(t.address);
  std::vector<void*> params;
  for (std::size_t i = 0; i < reads.size(); ++i) params.push_back(&pointers[i]);
  for (auto& number : numbers) params.push_back(number.data());
  for (std::size_t i = reads.size(); i < pointers.size(); ++i) params.push_back(&pointers[i]);
  if (kernel.checks_errors) params.push_back(&error);
  position[0] = piece.first;
  if (kernel.position)
    for (auto& p : position) params.push_back(&p);
  auto n = static_cast<std::uint32_t>(piece.space.numel());
  auto vector_count = static_cast<std::uint32_t>(vectors);
  params.push_back(index.data());
  params.push_back(&n);
  params.push_back(&vector_count);
  unsigned blocks =
      advance.on ? advance.blocks : grid_stride_blocks(vector_count > 0 ? vector_count : n, block);
  handle.launch({blocks, 1, 1}, {block, 1, 1}, params.data(), bytes_read, bytes_written);
}

}  // namespace

PointwiseKernel render_pointwise(const graph::Graph& g, const graph::FusionGroup& group) {
  KernelNames names;
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
  // Parameters: the tensors read, then the numbers taken by value, then the outputs. The element
  // function takes each read as stored, the numbers, and a reference to each written element.
  Data scalar_params = list(), scalar_loads = list(), reads = list();
  std::vector<std::string> read_args, scalar_args;
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
      std::string decl = fmt::format("{} s{}", register_type(t), index);
      scalar_params.push_back(Data("decl", decl));
      scalar_args.push_back(decl);
      load.set("expr", fmt::format("s{}", index));
      scalar_loads.push_back(load);
    } else {
      auto index = k.reads.size();
      k.reads.push_back(v);
      params.push_back(
          Data("decl", fmt::format("const {}* __restrict__ in{}", storage_type(t), index)));
      read_args.push_back(fmt::format("{} r{}", storage_type(t), index));
      k.splat.push_back(splat_along_last_dim(g.values[v].sizes, group.domain));
      k.stationary.push_back(!k.splat.back() && row_stationary(g.values[v].sizes, group.domain));
      Data r;
      r.set("index", std::to_string(index));
      r.set("type", storage_type(t));
      r.set("splat", bool(k.splat.back()));
      r.set("stationary", bool(k.stationary.back()));
      reads.push_back(r);
      load.set("expr", load_expr(t, fmt::format("r{}", index)));
      loads.push_back(load);
    }
    computed.insert(v);
    return var(v);
  };

  std::vector<int> steps;  // the nodes computed, in order
  for (int n : group.nodes) {
    const graph::Node& node = g.nodes[n];
    if (op_class(node.op) == OpClass::view) continue;
    steps.push_back(n);
    KILN_CHECK(op_class(node.op) == OpClass::elementwise, "codegen: '{}': {} is not elementwise",
               group.name, node_text(g, n));
    std::vector<DType> in_types;
    for (int v : node.inputs) in_types.push_back(g.values[v].meta.dtype);
    int out = node.output();
    DType out_type = g.values[out].meta.dtype;
    if (reads_position(node.op)) {
      // The fuser keeps every value of a pointwise group over the domain's elements in order
      // (no view of a computed value): its last two dims are the domain's.
      const auto& sizes = g.values[out].sizes;
      auto rank = group.domain.size();
      KILN_CHECK(sizes.size() >= 2 && rank >= 2 &&
                     sizes[sizes.size() - 1] == group.domain[rank - 1] &&
                     sizes[sizes.size() - 2] == group.domain[rank - 2],
                 "codegen: '{}': {} does not iterate the domain's last two dims", group.name,
                 node_text(g, n));
      k.position = true;
    }
    std::vector<std::string> args;
    for (int v : node.inputs) args.push_back(read(v));
    std::string expr = node_expr(node.op, node.attrs, in_types, args, out_type,
                                 fmt::format("'{}': {}", group.name, node_text(g, n)));
    k.checks_errors =
        k.checks_errors || reports_errors(node.op, compute_dtype_of(node.op, in_types, out_type));
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
  // Every written value is computed (or read) before the parameters of the numbers are placed.
  std::vector<std::string> written;
  for (int v : group.outputs) written.push_back(read(v));
  for (auto& decl : scalar_params.list_value()) params.push_back(decl);
  for (auto& load : scalar_loads.list_value()) loads.push_back(load);
  Data writes = list();
  std::vector<std::string> write_args;
  for (std::size_t i = 0; i < group.outputs.size(); ++i) {
    int v = group.outputs[i];
    DType t = g.values[v].meta.dtype;
    note_dtype(t);
    k.writes.push_back(v);
    params.push_back(Data("decl", fmt::format("{}* __restrict__ out{}", storage_type(t), i)));
    write_args.push_back(fmt::format("{}& w{}", storage_type(t), i));
    Data w;
    w.set("index", std::to_string(i));
    w.set("type", storage_type(t));
    writes.push_back(w);
    Data s;
    s.set("index", std::to_string(i));
    s.set("expr", store_expr(t, written[i]));
    stores.push_back(s);
  }
  if (k.checks_errors) params.push_back(Data("decl", "long long* __restrict__ kiln_error"));
  k.vector_width = vector_width(g, k);

  // The element function's parameters and its arguments on the vector and the scalar paths; the
  // vector function's parameters and its arguments from the advancing path's group of vectors
  // (a{i}[u], or b{i} loaded once) and from one vector (r{i}).
  std::vector<std::string> element_params, vector_args, scalar_call;
  std::vector<std::string> vector_params, group_args, single_args;
  for (std::size_t i = 0; i < k.reads.size(); ++i) {
    DType t = g.values[k.reads[i]].meta.dtype;
    element_params.push_back(read_args[i]);
    vector_args.push_back(k.splat[i] ? fmt::format("r{}", i) : fmt::format("r{}.v[j]", i));
    scalar_call.push_back(fmt::format("in{0}[offset[{0}]]", i));
    vector_params.push_back(k.splat[i]
                                ? fmt::format("{} r{}", storage_type(t), i)
                                : fmt::format("const {}_vec<{}>& r{}", k.name, storage_type(t), i));
    group_args.push_back(k.stationary[i] ? fmt::format("b{}", i) : fmt::format("a{}[u]", i));
    single_args.push_back(fmt::format("r{}", i));
  }
  for (std::size_t i = 0; i < k.scalars.size(); ++i) {
    std::string s = fmt::format("s{}", i);
    element_params.push_back(scalar_args[i]);
    vector_params.push_back(scalar_args[i]);
    for (auto* args : {&vector_args, &scalar_call, &group_args, &single_args}) args->push_back(s);
  }
  for (std::size_t i = 0; i < k.writes.size(); ++i) {
    DType t = g.values[k.writes[i]].meta.dtype;
    element_params.push_back(write_args[i]);
    vector_args.push_back(fmt::format("w{}.v[j]", i));
    scalar_call.push_back(fmt::format("out{}[i]", i));
    vector_params.push_back(fmt::format("{}_vec<{}>& w{}", k.name, storage_type(t), i));
    group_args.push_back(fmt::format("w{}", i));
    single_args.push_back(fmt::format("w{}", i));
  }
  if (k.checks_errors) {
    for (auto* params : {&element_params, &vector_params})
      params->push_back("long long* kiln_error");
    for (auto* args : {&vector_args, &scalar_call, &group_args, &single_args})
      args->push_back("kiln_error");
  }
  k.vectors_per_thread = vectors_per_thread(k.vector_width);
  std::optional<ElementPair> pair;
  if (k.vector_width % 2 == 0 && !k.position) pair = element_pair(g, k, steps, computed);

  std::vector<std::string> domain;
  for (const auto& s : group.domain) domain.push_back(s.str());
  Data d;
  d.set("name", k.name);
  d.set("description", fmt::format("pointwise over [{}]", fmt::join(domain, ", ")));
  d.set("graph", g.name);
  d.set("nodes", nodes);
  d.set("rank", std::to_string(k.rank));
  d.set("num_strided", std::to_string(std::max<std::size_t>(1, k.reads.size())));
  d.set("vector", std::to_string(k.vector_width));
  d.set("params", params);
  d.set("reads", reads);
  d.set("writes", writes);
  d.set("loads", loads);
  d.set("statements", statements);
  d.set("stores", stores);
  d.set("element_params", comma_list("decl", element_params));
  d.set("vector_args", comma_list("arg", vector_args));
  d.set("scalar_args", comma_list("arg", scalar_call));
  d.set("vector_params", comma_list("decl", vector_params));
  d.set("group_args", comma_list("arg", group_args));
  d.set("single_args", comma_list("arg", single_args));
  d.set("unroll", std::to_string(k.vectors_per_thread));
  d.set("fp16", fp16);
  d.set("bf16", bf16);
  d.set("position", k.position);
  d.set("pairs", pair.has_value());
  if (pair) {
    d.set("pair_params", comma_list("decl", pair->params));
    d.set("pair_args", comma_list("arg", pair->args));
    Data lines = list();
    for (const auto& line : pair->lines) lines.push_back(Data("line", line));
    d.set("pair_lines", lines);
  }
  d.set("helpers", elementwise_helpers(python_mod, floor_div, k.checks_errors));
  k.source = render_template("pointwise.cu.mustache", d);
  return k;
}

std::int64_t set_pointwise_index_limit(std::int64_t limit) {
  return index_limit().exchange(limit);
}

bool set_pointwise_vectors(bool on) {
  return vectors_on().exchange(on);
}

bool set_pointwise_advance(bool on) {
  return advance_on().exchange(on);
}

std::vector<Tensor> run_pointwise(const graph::Graph& g, const PointwiseKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values,
                                  const KernelHandle* handle) {
  apply_host_views(g, kernel.host_views, values, symbol_values);
  Shape dom = domain.empty() ? Shape{1} : domain;
  IterSpace space;
  space.sizes.assign(dom.begin(), dom.end());
  std::vector<int> frame(static_cast<std::size_t>(kernel.rank));
  for (int d = 0; d < kernel.rank; ++d) frame[d] = d;
  std::vector<TensorAccess> reads, writes;
  for (int v : kernel.reads) {
    const Tensor& t = values.at(v);
    KILN_CHECK(t.device().type == Device::Type::cuda,
               "codegen: kernel '{}' reads %{} on {}, not a CUDA device", kernel.name, v,
               t.device().str());
    auto strides = domain_strides(t, kernel.rank, frame);
    KILN_CHECK(std::all_of(strides.begin(), strides.end(), [](long long s) { return s >= 0; }),
               "codegen: kernel '{}' reads %{} with a negative stride", kernel.name, v);
    space.strides.emplace_back(strides.begin(), strides.end());
    reads.push_back({reinterpret_cast<std::uintptr_t>(t.raw_data()), itemsize(t.dtype()),
                     kernel.splat[reads.size()]});
  }
  // Numbers by value, each in its register type (at most 8 bytes).
  std::vector<std::array<unsigned char, 8>> numbers;
  for (int v : kernel.scalars) numbers.push_back(number_argument(values.at(v)));
  std::vector<Tensor> outs;
  for (int v : kernel.writes) {
    // Every value a pointwise kernel writes has the domain's elements, so its shape is the
    // domain's up to leading 1s (a [c] value beside a [1, c] one); the graph's traced sizes may
    // be others (a dynamic dim, or an eager op's earlier call).
    Shape shape = domain;
    auto rank = g.values[v].sizes.size();
    while (shape.size() > rank && shape.front() == 1) shape.erase(shape.begin());
    while (shape.size() < rank) shape.insert(shape.begin(), 1);
    outs.push_back(empty(shape, g.values[v].meta.dtype, Device::cuda()));
    const Tensor& o = outs.back();
    writes.push_back({reinterpret_cast<std::uintptr_t>(o.raw_data()), itemsize(o.dtype())});
  }
  if (space.numel() == 0) return outs;
  // The element's row and column come from its linear index and the domain's last two sizes.
  std::array<long long, 3> position = {0, 1, 1};
  if (kernel.position) {
    KILN_CHECK(domain.size() >= 2,
               "codegen: kernel '{}' reads rows and columns of a rank-{} domain", kernel.name,
               domain.size());
    position = {0, domain[domain.size() - 2], domain[domain.size() - 1]};
  }
  std::int64_t read = 0, written = 0;
  for (int v : kernel.reads) read += tensor_bytes(values.at(v));
  for (const auto& o : outs) written += tensor_bytes(o);

  KernelHandle own;
  if (!handle) handle = &(own = KernelHandle(kernel.name, kernel.source));
  // A zero divisor or a negative integer exponent: the flag is read at the next sync.
  std::optional<DeviceCheck> check;
  if (kernel.checks_errors) check.emplace(reserve_device_check(raise_expression_error));
  cuda::DevicePtr error = check ? check->flag() : 0;
  // The plan's bytes are counted once, with its first launch.
  for (const IterPiece& piece : split_for_index(merge_dims(space), index_limit())) {
    std::vector<TensorAccess> piece_reads = reads, piece_writes = writes;
    for (std::size_t k = 0; k < reads.size(); ++k)
      piece_reads[k].address += piece.read_offsets[k] * reads[k].itemsize;
    for (auto& w : piece_writes) w.address += piece.first * w.itemsize;
    launch_piece(kernel, *handle, piece, piece_reads, piece_writes, numbers, error, position,
                 std::exchange(read, 0), std::exchange(written, 0));
  }
  if (check) check->launched();
  return outs;
}

}  // namespace kiln::jit::codegen
