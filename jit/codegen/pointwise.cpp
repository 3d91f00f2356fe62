// Pointwise code generation: statements per node from the expression table, rendered into
// templates/pointwise.cu.mustache; compiled once per code (cache::kernel_code) and launched over a
// grid-stride loop.
#include "jit/codegen/pointwise.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
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
#include "jit/codegen/pointwise_indexed.h"
#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/pointwise_pair.h"
#include "jit/codegen/pointwise_schedule.h"
#include "jit/codegen/templates.h"
#include "runtime/cuda/backend.h"
#include "runtime/device_checks.h"
#include "runtime/dispatch.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

constexpr int kMaxRank = 8;

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

// One launch of a schedule (pointwise_schedule.h); `bytes_read` and `bytes_written` are counted
// for it.
void launch_piece(const PointwiseKernel& kernel, const KernelHandle& handle,
                  const PointwiseLaunch& l, std::vector<std::array<unsigned char, 8>>& numbers,
                  cuda::DevicePtr error, std::array<long long, 3> position, std::int64_t bytes_read,
                  std::int64_t bytes_written) {
  const IterSpace& space = l.piece.space;
  // The struct the kernel declares: rank sizes, max(1, reads) rows of rank strides, then per dim
  // a magic multiplier and a shift dividing by its size.
  std::vector<std::uint32_t> index(space.sizes.begin(), space.sizes.end());
  std::size_t rows = std::max<std::size_t>(1, l.reads.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (int d = 0; d < kernel.rank; ++d) {
      bool moves = r < l.reads.size() && space.sizes[d] > 1;
      index.push_back(moves ? static_cast<std::uint32_t>(space.strides[r][d]) : 0);
    }
  // Each size's divisor (the struct's magic and shift): l = ceil(log2 size) and the multiplier
  // ceil(2^(32 + l) / size), whose bit 32 the kernel adds back; exact for indices below 2^31.
  std::vector<std::uint32_t> shifts;
  for (std::int64_t size : space.sizes) {
    auto divisor = static_cast<std::uint64_t>(std::max<std::int64_t>(1, size));
    unsigned log2 = 0;
    while ((std::uint64_t{1} << log2) < divisor) ++log2;
    std::uint64_t m = ((std::uint64_t{1} << (32 + log2)) + divisor - 1) / divisor;
    index.push_back(static_cast<std::uint32_t>(m - (std::uint64_t{1} << 32)));
    shifts.push_back(log2);
  }
  index.insert(index.end(), shifts.begin(), shifts.end());
  for (std::size_t r = 0; r < rows; ++r)
    index.push_back(r < l.advance.delta.size() ? static_cast<std::uint32_t>(l.advance.delta[r])
                                               : 0);
  index.push_back(l.advance.on ? 1 : 0);
  std::vector<cuda::DevicePtr> pointers;
  for (const auto& t : l.reads) pointers.push_back(t.address);
  for (const auto& t : l.writes) pointers.push_back(t.address);
  std::vector<void*> params;
  for (std::size_t i = 0; i < l.reads.size(); ++i) params.push_back(&pointers[i]);
  for (auto& number : numbers) params.push_back(number.data());
  for (std::size_t i = l.reads.size(); i < pointers.size(); ++i) params.push_back(&pointers[i]);
  if (kernel.checks_errors) params.push_back(&error);
  position[0] = l.piece.first;
  if (kernel.position)
    for (auto& p : position) params.push_back(&p);
  auto n = static_cast<std::uint32_t>(space.numel());
  auto vector_count = static_cast<std::uint32_t>(l.vectors);
  params.push_back(index.data());
  params.push_back(&n);
  params.push_back(&vector_count);
  handle.launch({l.blocks, 1, 1}, {kPointwiseBlock, 1, 1}, params.data(), bytes_read,
                bytes_written);
}

// KILN_LOG=kernels: the schedule of a kernel's first launch, and why.
void log_schedule(const PointwiseKernel& kernel, const IterSpace& space,
                  std::span<const TensorAccess> reads, std::span<const TensorAccess> writes,
                  const PointwiseSchedule& s) {
  if (!log_enabled(LogTopic::kernels) || !kernel.logged || kernel.logged->exchange(true)) return;
  std::vector<std::string> why;
  schedule_pointwise(kernel, space, reads, writes, schedule_limits(), &why);
  log_line(
      fmt::format("kiln: kernel {}: schedule {} ({})", kernel.name, s.str(), fmt::join(why, "; ")));
}

}  // namespace

namespace {

// One parameter of the kernel's functions as each of them declares or passes it: the element
// function's parameter, the vector function's, and the arguments of the element call on the
// vector and scalar paths and of the vector call from an advancing group and from one vector.
struct KernelArgument {
  std::string element_param, vector_param, vector_arg, scalar_arg, group_arg, single_arg;
};

// A pointwise group's statements, parameters and template data (render_pointwise).
class PointwiseRenderer {
 public:
  PointwiseRenderer(const graph::Graph& g, const graph::FusionGroup& group)
      : g_(g), group_(group), inside_(group.nodes.begin(), group.nodes.end()) {}

  PointwiseKernel render() {
    k_.logged = std::make_shared<std::atomic<bool>>(false);
    k_.name = "k_" + group_.name;
    k_.rank = std::max<int>(1, static_cast<int>(group_.domain.size()));
    KILN_CHECK(k_.rank <= kMaxRank, "codegen: '{}' has rank {} (at most {} supported)", group_.name,
               k_.rank, kMaxRank);
    collect_host_views();
    for (int n : group_.nodes)
      if (op_class(g_.nodes[n].op) != OpClass::view) add_statement(n);
    // Every written value is computed (or read) before the parameters of the numbers are placed.
    std::vector<std::string> written;
    for (int v : group_.outputs) written.push_back(read(v));
    for (auto& decl : scalar_params_.list_value()) params_.push_back(decl);
    for (auto& load : scalar_loads_.list_value()) loads_.push_back(load);
    add_writes(written);
    if (k_.checks_errors) params_.push_back(Data("decl", "long long* __restrict__ kiln_error"));
    k_.vector_width = vector_width(g_, k_);
    k_.vectors_per_thread = vectors_per_thread(k_.vector_width);
    std::optional<ElementPair> pair;
    if (k_.vector_width % 2 == 0 && !k_.position) pair = element_pair(g_, k_, steps_, computed_);
    const Data data = template_data(pair);
    k_.source = render_template("pointwise.cu.mustache", data);
    if (combinable()) k_.element_source = render_template("pointwise_element.cu.mustache", data);
    k_.uses_f16 = fp16_;
    k_.uses_bf16 = bf16_;
    return std::move(k_);
  }

 private:
  // Whether its element function alone computes it (PointwiseKernel::element_source).
  bool combinable() const {
    if (!k_.host_views.empty() || !k_.scalars.empty() || k_.position || k_.checks_errors ||
        python_mod_ || floor_div_)
      return false;
    return std::all_of(k_.reads.begin(), k_.reads.end(),
                       [&](int v) { return g_.values[v].sizes == group_.domain; });
  }

  void note_dtype(DType t) {
    fp16_ = fp16_ || t == DType::f16;
    bf16_ = bf16_ || t == DType::bf16;
  }

  // Views whose input comes from outside run on the host: their results are what the kernel
  // reads, with the strides the view gives them.
  void collect_host_views() {
    for (int n : group_.nodes) {
      if (op_class(g_.nodes[n].op) != OpClass::view) continue;
      check_host_view(g_, inside_, n, group_.name);
      k_.host_views.push_back(n);
    }
  }

  bool is_host_view_output(int v) const {
    int p = g_.values[v].producer;
    return p >= 0 &&
           std::find(k_.host_views.begin(), k_.host_views.end(), p) != k_.host_views.end();
  }

  // A value as the element function names it: computed in registers, a literal, a number taken
  // by value, or a tensor read (a parameter and a load, added on first use).
  std::string read(int v) {
    if (computed_.count(v)) return var(v);
    if (is_inlined(g_, v)) return literal(g_.values[v].meta.dtype, g_.input_of(v)->tensor.item());
    int p = g_.values[v].producer;
    if (p >= 0 && inside_.count(p) && !is_host_view_output(v))
      throw Error(fmt::format("codegen: '{}' reads %{} before it is computed", group_.name, v));
    DType t = g_.values[v].meta.dtype;
    note_dtype(t);
    Data load;
    load.set("type", register_type(t));
    load.set("var", var(v));
    if (is_by_value(g_, v)) {
      auto index = k_.scalars.size();
      k_.scalars.push_back(v);
      std::string decl = fmt::format("{} s{}", register_type(t), index);
      scalar_params_.push_back(Data("decl", decl));
      scalar_decls_.push_back(decl);
      load.set("expr", fmt::format("s{}", index));
      scalar_loads_.push_back(load);
    } else {
      add_read(v, t);
      load.set("expr", load_expr(t, fmt::format("r{}", k_.reads.size() - 1)));
      loads_.push_back(load);
    }
    computed_.insert(v);
    return var(v);
  }

  void add_read(int v, DType t) {
    auto index = k_.reads.size();
    k_.reads.push_back(v);
    params_.push_back(
        Data("decl", fmt::format("const {}* __restrict__ in{}", storage_type(t), index)));
    read_decls_.push_back(fmt::format("{} r{}", storage_type(t), index));
    k_.splat.push_back(splat_along_last_dim(g_.values[v].sizes, group_.domain));
    k_.stationary.push_back(!k_.splat.back() && row_stationary(g_.values[v].sizes, group_.domain));
    Data r;
    r.set("index", std::to_string(index));
    r.set("type", storage_type(t));
    r.set("splat", bool(k_.splat.back()));
    r.set("stationary", bool(k_.stationary.back()));
    reads_.push_back(r);
  }

  // Node `n`'s statement, from the expression table.
  void add_statement(int n) {
    const graph::Node& node = g_.nodes[n];
    steps_.push_back(n);
    KILN_CHECK(op_class(node.op) == OpClass::elementwise, "codegen: '{}': {} is not elementwise",
               group_.name, node_text(g_, n));
    std::vector<DType> in_types;
    for (int v : node.inputs) in_types.push_back(g_.values[v].meta.dtype);
    int out = node.output();
    DType out_type = g_.values[out].meta.dtype;
    if (reads_position(node.op)) check_position(n);
    if (reads_index(node.op)) check_index(n);
    std::vector<std::string> args;
    for (int v : node.inputs) args.push_back(read(v));
    std::string expr = node_expr(node.op, node.attrs, in_types, args, out_type,
                                 fmt::format("'{}': {}", group_.name, node_text(g_, n)));
    k_.checks_errors =
        k_.checks_errors || reports_errors(node.op, compute_dtype_of(node.op, in_types, out_type));
    python_mod_ = python_mod_ || node.op == OpId::remainder;
    floor_div_ = floor_div_ || node.op == OpId::floor_divide;
    random_ = random_ || reads_index(node.op);
    note_dtype(out_type);
    Data s;
    s.set("type", register_type(out_type));
    s.set("var", var(out));
    s.set("expr", expr);
    statements_.push_back(s);
    computed_.insert(out);
  }

  // An op that reads its element's row and column: the fuser keeps every value of a pointwise
  // group over the domain's elements in order (no view of a computed value), so its last two
  // dims are the domain's.
  void check_position(int n) {
    const auto& sizes = g_.values[g_.nodes[n].output()].sizes;
    auto rank = group_.domain.size();
    KILN_CHECK(sizes.size() >= 2 && rank >= 2 &&
                   sizes[sizes.size() - 1] == group_.domain[rank - 1] &&
                   sizes[sizes.size() - 2] == group_.domain[rank - 2],
               "codegen: '{}': {} does not iterate the domain's last two dims", group_.name,
               node_text(g_, n));
    k_.position = true;
  }

  // An op that reads its element's linear index: the domain's index is the value's only where
  // the value has the domain's sizes (up to leading 1s), which the fuser keeps so (the level
  // rule: no broadcast of a computed value, no view of one outside index-aware kernels).
  void check_index(int n) {
    const auto& sizes = g_.values[g_.nodes[n].output()].sizes;
    auto squeezed = [](const std::vector<SymExpr>& s) {
      std::size_t k = 0;
      while (k < s.size() && s[k].is_constant() && s[k].constant_value() == 1) ++k;
      return std::vector<SymExpr>(s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
    };
    KILN_CHECK(squeezed(sizes) == squeezed(group_.domain),
               "codegen: '{}': {} does not iterate the domain's elements in order", group_.name,
               node_text(g_, n));
    k_.position = true;
  }

  void add_writes(const std::vector<std::string>& written) {
    for (std::size_t i = 0; i < group_.outputs.size(); ++i) {
      int v = group_.outputs[i];
      DType t = g_.values[v].meta.dtype;
      note_dtype(t);
      k_.writes.push_back(v);
      params_.push_back(Data("decl", fmt::format("{}* __restrict__ out{}", storage_type(t), i)));
      Data w;
      w.set("index", std::to_string(i));
      w.set("type", storage_type(t));
      writes_.push_back(w);
      Data s;
      s.set("index", std::to_string(i));
      s.set("expr", store_expr(t, written[i]));
      stores_.push_back(s);
    }
  }

  // The functions' parameters in order: the reads (a{i}[u], or b{i} loaded once, from an
  // advancing group; r{i} from one vector), the numbers, the writes, the error flag.
  std::vector<KernelArgument> arguments() const {
    std::vector<KernelArgument> out;
    for (std::size_t i = 0; i < k_.reads.size(); ++i) {
      std::string type = storage_type(g_.values[k_.reads[i]].meta.dtype);
      out.push_back({read_decls_[i],
                     k_.splat[i] ? fmt::format("{} r{}", type, i)
                                 : fmt::format("const {}_vec<{}>& r{}", k_.name, type, i),
                     k_.splat[i] ? fmt::format("r{}", i) : fmt::format("r{}.v[j]", i),
                     fmt::format("in{0}[offset[{0}]]", i),
                     k_.stationary[i] ? fmt::format("b{}", i) : fmt::format("a{}[u]", i),
                     fmt::format("r{}", i)});
    }
    for (std::size_t i = 0; i < k_.scalars.size(); ++i) {
      std::string s = fmt::format("s{}", i);
      out.push_back({scalar_decls_[i], scalar_decls_[i], s, s, s, s});
    }
    for (std::size_t i = 0; i < k_.writes.size(); ++i) {
      std::string type = storage_type(g_.values[k_.writes[i]].meta.dtype);
      std::string w = fmt::format("w{}", i);
      out.push_back({fmt::format("{}& {}", type, w),
                     fmt::format("{}_vec<{}>& {}", k_.name, type, w), w + ".v[j]",
                     fmt::format("out{}[i]", i), w, w});
    }
    if (k_.checks_errors) {
      const std::string flag = "long long* kiln_error", arg = "kiln_error";
      out.push_back({flag, flag, arg, arg, arg, arg});
    }
    return out;
  }

  Data template_data(const std::optional<ElementPair>& pair) const {
    std::vector<std::string> domain;
    for (const auto& s : group_.domain) domain.push_back(s.str());
    Data nodes = list();
    for (int n : group_.nodes) nodes.push_back(Data("text", node_text(g_, n)));
    const std::vector<KernelArgument> args = arguments();
    auto column = [&](const char* key, std::string KernelArgument::*field) {
      std::vector<std::string> items;
      for (const auto& a : args) items.push_back(a.*field);
      return comma_list(key, items);
    };
    Data d;
    d.set("name", k_.name);
    d.set("description", fmt::format("pointwise over [{}]", fmt::join(domain, ", ")));
    d.set("graph", g_.name);
    d.set("nodes", nodes);
    d.set("rank", std::to_string(k_.rank));
    d.set("num_strided", std::to_string(std::max<std::size_t>(1, k_.reads.size())));
    d.set("vector", std::to_string(k_.vector_width));
    d.set("params", params_);
    d.set("reads", reads_);
    d.set("writes", writes_);
    d.set("loads", loads_);
    d.set("statements", statements_);
    d.set("stores", stores_);
    d.set("element_params", column("decl", &KernelArgument::element_param));
    d.set("vector_args", column("arg", &KernelArgument::vector_arg));
    d.set("scalar_args", column("arg", &KernelArgument::scalar_arg));
    d.set("vector_params", column("decl", &KernelArgument::vector_param));
    d.set("group_args", column("arg", &KernelArgument::group_arg));
    d.set("single_args", column("arg", &KernelArgument::single_arg));
    d.set("unroll", std::to_string(k_.vectors_per_thread));
    d.set("fp16", fp16_);
    d.set("bf16", bf16_);
    d.set("position", k_.position);
    d.set("pairs", pair.has_value());
    if (pair) {
      d.set("pair_params", comma_list("decl", pair->params));
      d.set("pair_args", comma_list("arg", pair->args));
      Data lines = list();
      for (const auto& line : pair->lines) lines.push_back(Data("line", line));
      d.set("pair_lines", lines);
    }
    d.set("helpers", elementwise_helpers(python_mod_, floor_div_, k_.checks_errors, random_));
    return d;
  }

  const graph::Graph& g_;
  const graph::FusionGroup& group_;
  std::set<int> inside_;
  PointwiseKernel k_;
  std::set<int> computed_;  // values this kernel holds in registers
  std::vector<int> steps_;  // the nodes computed, in order
  bool fp16_ = false, bf16_ = false, python_mod_ = false, floor_div_ = false, random_ = false;
  // Parameters: the tensors read, then the numbers taken by value, then the outputs.
  Data params_ = list(), reads_ = list(), writes_ = list(), loads_ = list(), statements_ = list(),
       stores_ = list(), scalar_params_ = list(), scalar_loads_ = list();
  std::vector<std::string> read_decls_, scalar_decls_;
};

}  // namespace

PointwiseKernel render_pointwise(const graph::Graph& g, const graph::FusionGroup& group,
                                 std::span<const std::int64_t> order) {
  KernelNames names;
  KILN_CHECK(group.kind == graph::FusionKind::pointwise,
             "codegen: group '{}' is a {} group, not pointwise", group.name,
             graph::fusion_kind_name(group.kind));
  if (is_indexed_group(g, group)) return render_indexed(g, group, order);
  return PointwiseRenderer(g, group).render();
}

Shape written_shape(const Shape& domain, std::size_t rank) {
  Shape shape = domain;
  while (shape.size() > rank && shape.front() == 1) shape.erase(shape.begin());
  while (shape.size() < rank) shape.insert(shape.begin(), 1);
  return shape;
}

Tensor walked_output(const std::shared_ptr<Storage>& buffer, const Shape& domain,
                     std::span<const std::int64_t> order, DType dtype) {
  Shape walked;
  for (std::int64_t d : order) walked.push_back(domain[static_cast<std::size_t>(d)]);
  Tensor t = empty_in(buffer, walked, dtype, Device::cuda());
  const Strides contiguous = contiguous_strides(walked);
  Strides strides(domain.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    strides[static_cast<std::size_t>(order[i])] = contiguous[i];
  return make_view(t, domain, std::move(strides), 0);
}

std::vector<Tensor> run_pointwise(const graph::Graph& g, const PointwiseKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values,
                                  const KernelHandle* handle, OutputBuffers into,
                                  std::span<const std::int64_t> order) {
  KILN_CHECK(order.empty() || (!kernel.position && order.size() == domain.size() &&
                               static_cast<int>(domain.size()) == kernel.rank),
             "codegen: kernel '{}' cannot walk its domain {} in the order {}", kernel.name,
             shape_str(domain), fmt::join(order, ", "));
  if (kernel.indexed)
    return run_indexed(g, kernel, domain, values, symbol_values, handle, into, order);
  apply_host_views(g, kernel.host_views, values, symbol_values);
  Shape dom = domain.empty() ? Shape{1} : domain;
  // Walked in `order`, domain dim d is the walk's dim at[d].
  std::vector<int> frame(static_cast<std::size_t>(kernel.rank));
  for (int d = 0; d < kernel.rank; ++d) frame[d] = d;
  if (!order.empty()) {
    Shape walked;
    for (std::size_t i = 0; i < order.size(); ++i) {
      walked.push_back(dom[static_cast<std::size_t>(order[i])]);
      frame[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    }
    dom = std::move(walked);
  }
  IterSpace space;
  space.sizes.assign(dom.begin(), dom.end());
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
    if (order.empty())
      outs.push_back(empty_in(output_buffer(into, outs.size()),
                              written_shape(domain, g.values[v].sizes.size()),
                              g.values[v].meta.dtype, Device::cuda()));
    else
      outs.push_back(
          walked_output(output_buffer(into, outs.size()), domain, order, g.values[v].meta.dtype));
    const Tensor& o = outs.back();
    writes.push_back({reinterpret_cast<std::uintptr_t>(o.raw_data()), itemsize(o.dtype())});
  }
  if (space.numel() == 0) return outs;
  // The element's row and column come from its linear index and the domain's last two sizes
  // (1 past its rank: an op reading the index alone takes any rank; tril's renderer checked 2).
  std::array<long long, 3> position = {0, 1, 1};
  if (kernel.position) {
    auto rank = domain.size();
    position = {0, rank >= 2 ? domain[rank - 2] : 1, rank >= 1 ? domain[rank - 1] : 1};
  }
  std::int64_t read = 0, written = 0;
  for (int v : kernel.reads) read += tensor_bytes(values.at(v));
  for (const auto& o : outs) written += tensor_bytes(o);

  KernelHandle own;
  if (!handle) handle = &(own = KernelHandle(kernel.name, kernel.source));
  PointwiseSchedule schedule = schedule_pointwise(kernel, space, reads, writes, schedule_limits());
  log_schedule(kernel, space, reads, writes, schedule);
  // A zero divisor or a negative integer exponent: the flag is read at the next sync.
  std::optional<DeviceCheck> check;
  if (kernel.checks_errors) check.emplace(reserve_device_check(raise_expression_error));
  cuda::DevicePtr error = check ? check->flag() : 0;
  // The plan's bytes are counted once, with its first launch.
  for (const PointwiseLaunch& l : schedule.launches)
    launch_piece(kernel, *handle, l, numbers, error, position, std::exchange(read, 0),
                 std::exchange(written, 0));
  if (check) check->launched();
  return outs;
}

}  // namespace kiln::jit::codegen
