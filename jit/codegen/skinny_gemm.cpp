// Matching, rendering and launching the skinny GEMM (see skinny_gemm.h).
#include "jit/codegen/skinny_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/templates.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

// Warps per block and the K chunk of a's rows staged in shared memory: at 8 rows, 32 KiB.
constexpr int kWarps = 8, kChunk = 1024;

// Columns per warp: the most (up to 4) whose grid still has a block per SM.
int columns_per_warp(std::int64_t n_cols) {
  const std::int64_t sms = std::max(1, cuda::backend().properties(0).sm_count);
  for (int c : {4, 2})
    if ((n_cols + kWarps * c - 1) / (kWarps * c) >= sms) return c;
  return 1;
}

std::vector<int> readers_of(const graph::Graph& g, int v) {
  std::vector<int> out;
  for (std::size_t n = 0; n < g.nodes.size(); ++n)
    if (std::find(g.nodes[n].inputs.begin(), g.nodes[n].inputs.end(), v) != g.nodes[n].inputs.end())
      out.push_back(static_cast<int>(n));
  return out;
}

bool graph_returns(const graph::Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

bool is_float_operand(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

std::optional<std::int64_t> constant_product(const std::vector<SymExpr>& sizes, std::size_t first,
                                             std::size_t last) {
  std::int64_t n = 1;
  for (std::size_t d = first; d < last; ++d) {
    if (!sizes[d].is_constant()) return std::nullopt;
    n *= *sizes[d].evaluate({});
  }
  return n;
}

// Whether the second operand is the transpose of an [N, K] tensor (a Linear's weight), the
// layout a warp per column reads along its rows; then the weight it reads: through a cast of a
// graph input and that transpose where only the matmul reads them (nn::quantize_int8's Linear:
// matmul(x, cast(w_int8).T)), else the operand as it is.
bool match_weight(const graph::Graph& g, const graph::Partition& p, int mm, SkinnyGemm& out) {
  const int b = g.nodes[mm].inputs[1];
  out.weight_value = b;
  const int perm = g.values[b].producer;
  if (perm < 0 || g.nodes[perm].op != OpId::permute ||
      !graph::swaps_last_two(g.nodes[perm].attrs.dims))
    return false;
  const int w = g.nodes[perm].inputs[0];
  const int cast = g.values[w].producer;
  if (cast < 0 || g.nodes[cast].op != OpId::cast) return true;
  const int u = g.nodes[cast].inputs[0];
  const DType from = g.values[u].meta.dtype;
  if (!g.input_of(u) || (from != DType::i8 && !is_float_operand(from))) return true;
  if (readers_of(g, w) != std::vector<int>{perm} || readers_of(g, b) != std::vector<int>{mm} ||
      graph_returns(g, w) || graph_returns(g, b))
    return true;
  std::set<int> groups = {p.group_of[cast], p.group_of[perm]};
  for (int gi : groups)
    for (int n : p.groups[gi].nodes)
      if (n != cast && n != perm) return true;  // the group computes more than the weight
  out.weight_value = u;
  out.transposed = true;
  out.prologue_groups.assign(groups.begin(), groups.end());
  return true;
}

// The pointwise group after the product as the kernel's epilogue at (m, n): its loads, statements
// and stores, in templates/skinny_gemm.cu's terms.
class EpilogueRenderer {
 public:
  EpilogueRenderer(const graph::Graph& g, const graph::Partition& p, int matmul_group, int product,
                   SkinnyGemm& out)
      : g_(g), p_(p), matmul_group_(matmul_group), product_(product), out_(out) {}

  // Why group `eg` cannot be the epilogue, or "".
  std::string render(int eg) {
    const graph::FusionGroup& group = p_.groups[eg];
    if (group.domain != g_.values[product_].sizes)
      return "the epilogue group's domain is not the product's shape";
    std::set<int> inside(group.nodes.begin(), group.nodes.end());
    for (int n : group.nodes) {
      if (op_class(g_.nodes[n].op) != OpClass::view) continue;
      try {
        check_host_view(g_, inside, n, group.name);
      } catch (const Error&) {
        return fmt::format("the epilogue group views a value it computes ({})", node_text(g_, n));
      }
      out_.host_views.push_back(n);
      host_view_outputs_.insert(g_.nodes[n].output());
      // The product is never stored, so no host view can see it.
      if (root_of(g_.nodes[n].output()) == product_)
        return fmt::format("the epilogue group views the product ({})", node_text(g_, n));
    }
    for (int n : group.nodes)
      if (op_class(g_.nodes[n].op) != OpClass::view)
        if (std::string why = statement(n); !why.empty()) return why;
    for (std::size_t i = 0; i < group.outputs.size(); ++i) {
      const int v = group.outputs[i];
      if (g_.values[v].sizes != group.domain)
        return fmt::format("the epilogue group writes {}, not of the product's shape",
                           value_type_str(g_.values[v]));
      std::string value;
      if (std::string why = read(v, value); !why.empty()) return why;
      write(v, value);
    }
    return "";
  }

  // The product alone, written.
  void render_product() {
    std::string value;
    read(product_, value);
    write(product_, value);
  }

  Data lists() const {
    Data d;
    d.set("loads", loads_);
    d.set("statements", statements_);
    d.set("stores", stores_);
    d.set("params", params_);
    d.set("helpers", elementwise_helpers(python_mod_, floor_div_));
    return d;
  }
  bool uses(DType t) const { return dtypes_.contains(t); }

 private:
  std::string statement(int n) {
    const graph::Node& node = g_.nodes[n];
    if (op_class(node.op) != OpClass::elementwise)
      return fmt::format("the epilogue group computes {}", op_name(node.op));
    if (reads_position(node.op) || reads_index(node.op))
      return fmt::format("{} reads its element's place", op_name(node.op));
    python_mod_ = python_mod_ || node.op == OpId::remainder;
    floor_div_ = floor_div_ || node.op == OpId::floor_divide;
    std::vector<DType> in_types;
    std::vector<std::string> args;
    for (int v : node.inputs) {
      in_types.push_back(g_.values[v].meta.dtype);
      args.emplace_back();
      if (std::string why = read(v, args.back()); !why.empty()) return why;
    }
    const DType out_type = g_.values[node.output()].meta.dtype;
    if (reports_errors(node.op, compute_dtype_of(node.op, in_types, out_type)))
      return fmt::format("{} at {} reports errors", op_name(node.op), dtype_name(out_type));
    dtypes_.insert(out_type);
    Data s("type", register_type(out_type));
    s.set("var", var(node.output()));
    s.set("expr", node_expr(node.op, node.attrs, in_types, args, out_type, node_text(g_, n)));
    statements_.push_back(s);
    computed_.insert(node.output());
    return "";
  }

  // `v` as the epilogue names it, into `expr`; why it cannot read it, or "".
  std::string read(int v, std::string& expr) {
    if (v == product_) {
      expr = "product";
      return "";
    }
    if (computed_.contains(v)) {
      expr = var(v);
      return "";
    }
    const DType t = g_.values[v].meta.dtype;
    dtypes_.insert(t);
    if (is_inlined(g_, v)) {
      expr = literal(t, g_.input_of(v)->tensor.item());
      return "";
    }
    if (is_by_value(g_, v)) {
      expr = fmt::format("s{}", out_.scalars.size());
      params_.push_back(Data("decl", fmt::format("{} {}", register_type(t), expr)));
      out_.scalars.push_back(v);
      return "";
    }
    if (!broadcasts_to_product(g_.values[v].sizes))
      return fmt::format("the epilogue reads {}, which does not broadcast to the product's shape",
                         value_type_str(g_.values[v]));
    if (std::string why = produced_before(v); !why.empty()) return why;
    const std::size_t i = out_.reads.size();
    out_.reads.push_back(v);
    params_.push_back(Data("decl", fmt::format("const {}* __restrict__ in{}, long long rs{}, "
                                               "long long cs{}",
                                               storage_type(t), i, i, i)));
    Data load("type", register_type(t));
    load.set("var", var(v));
    load.set("expr", load_expr(t, fmt::format("in{0}[m * rs{0} + n * cs{0}]", i)));
    loads_.push_back(load);
    computed_.insert(v);
    expr = var(v);
    return "";
  }

  // Right-aligned as NumPy broadcasts: each of its sizes is the product's or 1.
  bool broadcasts_to_product(const std::vector<SymExpr>& sizes) const {
    const auto& to = g_.values[product_].sizes;
    if (sizes.size() > to.size()) return false;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const SymExpr& s = sizes[sizes.size() - 1 - i];
      if (s != to[to.size() - 1 - i] && !(s.is_constant() && *s.evaluate({}) == 1)) return false;
    }
    return true;
  }

  // The tensor a host view output views (itself when it is none).
  int root_of(int v) const {
    while (host_view_outputs_.contains(v)) v = g_.nodes[g_.values[v].producer].inputs[0];
    return v;
  }

  // The kernel runs where the matmul's group does: what its epilogue reads must be made before.
  std::string produced_before(int v) const {
    v = root_of(v);
    const int producer = g_.values[v].producer;
    if (producer >= 0 && p_.group_of[producer] > matmul_group_)
      return fmt::format("the epilogue reads %{}, made after the matmul runs", v);
    return "";
  }

  void write(int v, const std::string& value) {
    const DType t = g_.values[v].meta.dtype;
    dtypes_.insert(t);
    const std::size_t i = out_.writes.size();
    out_.writes.push_back(v);
    writes_decl_.push_back(fmt::format("{}* __restrict__ out{}", storage_type(t), i));
    Data s("index", std::to_string(i));
    s.set("expr", store_expr(t, value));
    stores_.push_back(s);
  }

 public:
  // The parameters in launch order: reads, numbers, then writes.
  void finish_params() {
    for (const auto& decl : writes_decl_) params_.push_back(Data("decl", decl));
  }

 private:
  const graph::Graph& g_;
  const graph::Partition& p_;
  int matmul_group_, product_;
  SkinnyGemm& out_;
  std::set<int> computed_, host_view_outputs_;
  std::set<DType> dtypes_;
  bool python_mod_ = false, floor_div_ = false;  // the helpers the expressions call
  std::vector<std::string> writes_decl_;
  Data loads_ = Data(Data::type::list), statements_ = Data(Data::type::list),
       stores_ = Data(Data::type::list), params_ = Data(Data::type::list);
};

// Why matmul node `mm` does not take the kernel (its operands' shapes, dtypes, device), or "".
std::string operand_failure(const graph::Graph& g, int mm, std::int64_t min_weight,
                            std::int64_t& rows) {
  const graph::Node& node = g.nodes[mm];
  const graph::Value &a = g.values[node.inputs[0]], &b = g.values[node.inputs[1]],
                     &prod = g.values[node.output()];
  if (!prod.device.is_cuda()) return "not on CUDA";
  const DType t = prod.meta.dtype;
  if (!is_float_operand(t) || a.meta.dtype != t || b.meta.dtype != t)
    return fmt::format("{} @ {}: the kernel takes f32, f16 or bf16 operands of one dtype",
                       dtype_name(a.meta.dtype), dtype_name(b.meta.dtype));
  if (a.sizes.size() < 2 || b.sizes.size() != 2)
    return fmt::format("{} @ {}: the kernel takes rows [..., M, K] against a 2-D weight",
                       value_type_str(a), value_type_str(b));
  auto m = constant_product(prod.sizes, 0, prod.sizes.size() - 1);
  if (!m) return "its rows are a symbolic number";
  if (!constant_product(a.sizes, 0, a.sizes.size()) || !constant_product(b.sizes, 0, 2))
    return "an operand has symbolic sizes";
  if (*m < 1 || *m > kSkinnyMaxRows)
    return fmt::format("M = {} rows, more than {}", *m, kSkinnyMaxRows);
  if (const std::int64_t weight = *constant_product(b.sizes, 0, 2); weight < min_weight)
    return fmt::format("a weight of {} elements, under {}: reading it is not the cost", weight,
                       min_weight);
  rows = *m;
  return "";
}

KernelHandle render_skinny(const graph::Graph& g, const SkinnyGemm& s,
                           const EpilogueRenderer& epilogue, const std::string& name) {
  const graph::Node& mm = g.nodes[s.matmul_node];
  const DType t = g.values[mm.output()].meta.dtype;
  const DType wt = g.values[s.weight_value].meta.dtype;
  Data d = epilogue.lists();
  d.set("name", name);
  d.set("description", s.note);
  d.set("graph", g.name);
  Data nodes(Data::type::list);
  for (int n : s.nodes) nodes.push_back(Data("text", node_text(g, n)));
  d.set("nodes", nodes);
  d.set("fp16", t == DType::f16 || wt == DType::f16 || epilogue.uses(DType::f16));
  d.set("bf16", t == DType::bf16 || wt == DType::bf16 || epilogue.uses(DType::bf16));
  d.set("rows", std::to_string(s.rows));
  d.set("cols", std::to_string(s.columns_per_warp));
  d.set("warps", std::to_string(kWarps));
  d.set("threads", std::to_string(32 * kWarps));
  d.set("chunk", std::to_string(kChunk));
  d.set("vec", std::to_string(16 / itemsize(wt)));
  d.set("int8", wt == DType::i8);
  d.set("a_type", storage_type(t));
  d.set("w_type", storage_type(wt));
  d.set("load_a", load_expr(t, "a[m * a_row + (k0 + k) * a_k]"));
  auto weight = [&](const std::string& stored) {
    // An i8 is exact in every float type: widened straight to float, no rounding to t.
    if (wt == DType::i8) return fmt::format("static_cast<float>({})", stored);
    return convert_expr(wt, t, load_expr(wt, stored));
  };
  d.set("load_w_vector", weight("e[j]"));
  d.set("load_w_scalar", weight("column[(k0 + k) * w_k]"));
  // The product rounded to its dtype, as the matmul stores it for the epilogue's ops to read.
  d.set("product_type", register_type(t));
  d.set("product_var", "product");
  d.set("product_expr", load_expr(t, store_expr(t, "sum")));
  return KernelHandle(name, render_template("skinny_gemm.cu.mustache", d));
}

// The rows of `t` ([..., N], its leading dims the rows) as one stride, where they have one.
std::optional<long long> uniform_row_stride(const Tensor& t) {
  std::optional<long long> stride;
  long long inner = 1;  // rows inside the dim
  for (std::size_t d = t.dim() - 1; d-- > 0;) {
    const long long size = t.shape()[d];
    if (size == 1) continue;
    const long long s = t.strides()[d];
    if (!stride)
      stride = s;
    else if (s != *stride * inner)
      return std::nullopt;
    inner *= size;
  }
  return stride.value_or(0);
}

// `t` seen with `domain`'s sizes, right-aligned as NumPy broadcasts (stride 0 where it repeats).
Tensor broadcast_view(const Tensor& t, const Shape& domain) {
  Strides strides(domain.size(), 0);
  const std::size_t offset = domain.size() - static_cast<std::size_t>(t.dim());
  for (std::size_t d = 0; d < static_cast<std::size_t>(t.dim()); ++d)
    if (t.shape()[d] != 1) strides[offset + d] = t.strides()[d];
  return make_view(t, domain, std::move(strides), 0);
}

// `t` with its rows at one stride (a copy only where they are not).
Tensor with_row_stride(const Tensor& t, long long& stride) {
  if (auto s = uniform_row_stride(t)) {
    stride = *s;
    return t;
  }
  Tensor c = t.contiguous();
  stride = c.shape().back();
  return c;
}

}  // namespace

std::optional<SkinnyGemm> plan_skinny_gemm(const graph::Graph& g, const graph::Partition& p,
                                           int group, std::int64_t min_weight, std::string& why) {
  const graph::FusionGroup& fg = p.groups[group];
  if (fg.kind != graph::FusionKind::matmul || fg.nodes.size() != 1 ||
      g.nodes[fg.nodes[0]].op != OpId::matmul) {
    why = "not one matmul";
    return std::nullopt;
  }
  SkinnyGemm s;
  s.matmul_group = group;
  s.matmul_node = fg.nodes[0];
  if (why = operand_failure(g, s.matmul_node, min_weight, s.rows); !why.empty())
    return std::nullopt;
  if (!match_weight(g, p, s.matmul_node, s)) {
    why =
        "the weight is not the transpose of an [N, K] tensor, the layout a warp per output "
        "column reads along its rows";
    return std::nullopt;
  }
  const int product = g.nodes[s.matmul_node].output();
  const std::vector<int> readers = readers_of(g, product);
  int eg = readers.empty() || graph_returns(g, product) ? -1 : p.group_of[readers[0]];
  for (int r : readers)
    if (p.group_of[r] != eg) eg = -1;
  if (eg >= 0 && p.groups[eg].kind != graph::FusionKind::pointwise) eg = -1;
  std::string epilogue_why;
  KernelNames names;  // the registers' names, v0 v1 ...
  std::optional<EpilogueRenderer> epilogue;
  epilogue.emplace(g, p, group, product, s);
  if (eg >= 0) {
    epilogue_why = epilogue->render(eg);
    if (!epilogue_why.empty()) {  // the product alone, and its readers run as they were
      s.host_views.clear(), s.reads.clear(), s.scalars.clear(), s.writes.clear();
      epilogue.emplace(g, p, group, product, s);
      eg = -1;
    }
  }
  if (eg < 0) epilogue->render_product();
  epilogue->finish_params();
  s.epilogue_group = eg;
  for (int pg : s.prologue_groups)
    s.nodes.insert(s.nodes.end(), p.groups[pg].nodes.begin(), p.groups[pg].nodes.end());
  s.nodes.push_back(s.matmul_node);
  if (eg >= 0) s.nodes.insert(s.nodes.end(), p.groups[eg].nodes.begin(), p.groups[eg].nodes.end());
  std::vector<std::string> ops;
  for (int n : s.nodes)
    if (op_class(g.nodes[n].op) != OpClass::view) ops.emplace_back(op_name(g.nodes[n].op));
  s.note = fmt::format(
      "skinny GEMM: {} (M = {} rows, at most {}: reads each weight once{}){}",
      fmt::join(ops, " + "), s.rows, kSkinnyMaxRows,
      s.transposed
          ? fmt::format(", as {} in registers", dtype_name(g.values[s.weight_value].meta.dtype))
          : "",
      eg >= 0                ? fmt::format(" (groups {} and {})", group, eg)
      : epilogue_why.empty() ? ""
                             : fmt::format("; its readers run apart: {}", epilogue_why));
  const auto& b_sizes = g.values[g.nodes[s.matmul_node].inputs[1]].sizes;
  s.columns_per_warp = columns_per_warp(*b_sizes[1].evaluate({}));
  const std::string name =
      fmt::format("k_skinny_{}_m{}_c{}", eg >= 0 ? p.groups[eg].name : std::string("matmul"),
                  s.rows, s.columns_per_warp);
  s.kernel = render_skinny(g, s, *epilogue, name);
  return s;
}

void run_skinny_gemm(const graph::Graph& g, const SkinnyGemm& s, std::vector<Tensor>& values,
                     std::span<const std::int64_t> symbol_values, OutputBuffers into) {
  apply_host_views(g, s.host_views, values, symbol_values);
  const graph::Node& mm = g.nodes[s.matmul_node];
  long long a_row = 0;
  const Tensor a = with_row_stride(values.at(mm.inputs[0]), a_row);
  const Tensor& w = values.at(s.weight_value);
  const int n_dim = s.transposed ? 0 : 1, k_dim = 1 - n_dim;
  long long n_cols = w.shape()[n_dim], k_size = w.shape()[k_dim];
  long long w_n = w.strides()[n_dim], w_k = w.strides()[k_dim], a_k = a.strides().back();
  const long long vec = 16 / static_cast<long long>(itemsize(w.dtype()));
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(w.raw_data());
  int vector = w_k == 1 && k_size % vec == 0 && base % 16 == 0 &&
               (w_n * static_cast<long long>(itemsize(w.dtype()))) % 16 == 0;
  cuda::DevicePtr pa = device_address(a), pw = device_address(w);
  std::vector<void*> params = {&pa, &a_row, &a_k, &pw, &w_n, &w_k, &n_cols, &k_size, &vector};
  // Every argument's storage is reserved first: params point into it.
  std::vector<Tensor> reads;
  std::vector<cuda::DevicePtr> pointers;
  std::vector<long long> strides;
  std::vector<std::array<unsigned char, 8>> numbers;
  pointers.reserve(s.reads.size() + s.writes.size());
  strides.reserve(2 * s.reads.size());
  numbers.reserve(s.scalars.size());
  std::int64_t bytes_read = tensor_bytes(a) + tensor_bytes(w), bytes_written = 0;
  const Shape& domain = g.values[mm.output()].meta.shape;
  for (int v : s.reads) {
    long long rs = 0;
    const Tensor& t = values.at(v);
    reads.push_back(with_row_stride(t.shape() == domain ? t : broadcast_view(t, domain), rs));
    pointers.push_back(device_address(reads.back()));
    strides.push_back(rs);
    strides.push_back(reads.back().strides().back());
    params.push_back(&pointers.back());
    params.push_back(&strides[strides.size() - 2]);
    params.push_back(&strides.back());
    bytes_read += tensor_bytes(reads.back());
  }
  for (int v : s.scalars) {
    numbers.push_back(number_argument(values.at(v)));
    params.push_back(numbers.back().data());
  }
  std::vector<Tensor> outs;
  for (std::size_t i = 0; i < s.writes.size(); ++i) {
    const auto& meta = g.values[s.writes[i]].meta;
    outs.push_back(empty_in(output_buffer(into, i), meta.shape, meta.dtype, Device::cuda()));
    pointers.push_back(device_address(outs.back()));
    params.push_back(&pointers.back());
    bytes_written += tensor_bytes(outs.back());
  }
  const long long per_block = static_cast<long long>(kWarps) * s.columns_per_warp;
  const unsigned blocks = static_cast<unsigned>((n_cols + per_block - 1) / per_block);
  if (blocks > 0)
    s.kernel.launch({blocks, 1, 1}, {32 * kWarps, 1, 1}, params.data(), bytes_read, bytes_written);
  for (std::size_t i = 0; i < s.writes.size(); ++i) values[s.writes[i]] = std::move(outs[i]);
}

}  // namespace kiln::jit::codegen
