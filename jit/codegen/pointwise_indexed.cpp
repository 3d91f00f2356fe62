// Index-aware pointwise kernels (see pointwise_indexed.h): the group's expression DAG evaluated
// per output coordinate, with an index map on each edge that moves data.
#include "jit/codegen/pointwise_indexed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <kainjow/mustache.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/pointwise_schedule.h"
#include "jit/codegen/templates.h"
#include "runtime/device_checks.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

// Sizes a kernel can be given: constants, or expressions it takes as arguments.
bool all_tracked(const std::vector<SymExpr>& sizes) {
  return std::none_of(sizes.begin(), sizes.end(), [](const SymExpr& s) { return s.is_opaque(); });
}

bool is_constant_size(const SymExpr& s, std::int64_t value) {
  return s.is_constant() && s.constant_value() == value;
}

std::string sizes_text(const std::vector<SymExpr>& sizes) {
  std::vector<std::string> parts;
  for (const auto& s : sizes) parts.push_back(s.str());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::int64_t normalized(std::int64_t dim, std::size_t rank) {
  return dim < 0 ? dim + static_cast<std::int64_t>(rank) : dim;
}

// Where a value is read: one coordinate expression per dim of the value, and the condition
// under which they are in range (empty: always), set by the cat branch or pad it is read under.
struct Coords {
  std::vector<std::string> at;
  std::string guard;
};

std::string both(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return fmt::format("{} && {}", a, b);
}

// `c` of a value of `out` sizes, as read by an elementwise op from an input of `in` sizes
// (right-aligned broadcast: a size-1 or missing dim is read at 0).
Coords broadcast(const Coords& c, const std::vector<SymExpr>& out, const std::vector<SymExpr>& in) {
  Coords r{{}, c.guard};
  for (std::size_t k = 0; k < in.size(); ++k) {
    auto d = static_cast<std::ptrdiff_t>(out.size()) - static_cast<std::ptrdiff_t>(in.size()) +
             static_cast<std::ptrdiff_t>(k);
    bool one = is_constant_size(in[k], 1);
    r.at.push_back(d < 0 || one ? "0" : c.at[static_cast<std::size_t>(d)]);
  }
  return r;
}

std::string shifted(const std::string& c, std::int64_t by) {
  if (by == 0) return c;
  return by > 0 ? fmt::format("({} + {})", c, by) : fmt::format("({} - {})", c, -by);
}

class IndexedRenderer {
 public:
  IndexedRenderer(const graph::Graph& g, const graph::FusionGroup& group,
                  std::span<const std::int64_t> order)
      : g_(g),
        group_(group),
        order_(order.begin(), order.end()),
        inside_(group.nodes.begin(), group.nodes.end()) {}

  PointwiseKernel render() {
    k_.indexed = true;
    k_.logged = std::make_shared<std::atomic<bool>>(false);
    k_.name = "k_" + group_.name;
    KILN_CHECK(all_tracked(group_.domain),
               "codegen: '{}' moves data by index over a domain of untracked size {}", group_.name,
               sizes_text(group_.domain));
    k_.rank = std::max<int>(1, static_cast<int>(group_.domain.size()));
    for (int n : group_.nodes) {
      const graph::Node& node = g_.nodes[n];
      if (op_class(node.op) != OpClass::view || computed_inside(node.inputs.at(0)) ||
          reshapes_expanded(g_, n))
        continue;
      k_.host_views.push_back(n);
      host_view_.insert(n);
    }
    Coords domain = coordinates();
    // Walked in another order, an element is stored at its place among the walk's dims.
    std::string at = "i";
    if (!order_.empty()) {
      Coords walked;
      std::vector<SymExpr> sizes;
      for (std::int64_t d : order_) {
        walked.at.push_back(domain.at.at(static_cast<std::size_t>(d)));
        sizes.push_back(group_.domain.at(static_cast<std::size_t>(d)));
      }
      coords_.push_back(fmt::format("const long long kiln_out = {};", linear_index(walked, sizes)));
      at = "kiln_out";
    }
    std::vector<std::string> written;
    for (int v : group_.outputs)
      written.push_back(eval(v, broadcast(domain, group_.domain, g_.values[v].sizes)));
    for (std::size_t i = 0; i < group_.outputs.size(); ++i) {
      int v = group_.outputs[i];
      DType t = g_.values[v].meta.dtype;
      note_dtype(t);
      k_.writes.push_back(v);
      writes_.push_back(fmt::format("{}* __restrict__ out{}", storage_type(t), i));
      lines_.push_back(fmt::format("out{}[{}] = {};", i, at, store_expr(t, written[i])));
    }
    k_.source = render_template("pointwise_indexed.cu.mustache", template_data());
    return std::move(k_);
  }

 private:
  bool computed_inside(int v) const {
    int p = g_.values[v].producer;
    return p >= 0 && inside_.count(p) && !host_view_.count(p);
  }

  void note_dtype(DType t) {
    fp16_ = fp16_ || t == DType::f16;
    bf16_ = bf16_ || t == DType::bf16;
  }

  // A size in the code: a literal when constant (the compiler turns its divisions into
  // multiplies; `suffix` makes it a long long), else a kernel argument z<k> the launch evaluates
  // from the call's symbols.
  std::string size_code(const SymExpr& e, const char* suffix = "LL") {
    if (e.is_constant()) return fmt::format("{}{}", e.constant_value(), suffix);
    auto it = std::find(k_.size_args.begin(), k_.size_args.end(), e);
    auto k = static_cast<std::size_t>(it - k_.size_args.begin());
    if (it == k_.size_args.end()) {
      k_.size_args.push_back(e);
      sizes_.push_back(fmt::format("const long long z{}", k));
    }
    return fmt::format("z{}", k);
  }

  // The domain's coordinates c0.. from the linear index i.
  Coords coordinates() {
    Coords c;
    auto rank = group_.domain.size();
    coords_.push_back("long long kiln_rest = i;");
    for (std::size_t d = rank; d-- > 0;) {
      if (d == 0) {
        coords_.push_back("const long long c0 = kiln_rest;");
      } else {
        std::string size = size_code(group_.domain[d]);
        coords_.push_back(
            fmt::format("const long long c{0} = kiln_rest % {1}; kiln_rest /= {1};", d, size));
      }
    }
    for (std::size_t d = 0; d < rank; ++d) c.at.push_back(fmt::format("c{}", d));
    return c;
  }

  std::string guarded(const Coords& c, DType t, const std::string& expr) const {
    if (c.guard.empty()) return expr;
    return fmt::format("(({}) ? ({}) : static_cast<{}>(0))", c.guard, expr, register_type(t));
  }

  std::string emit(DType t, const std::string& expr) {
    std::string name = fmt::format("x{}", temps_++);
    lines_.push_back(fmt::format("const {} {} = {};", register_type(t), name, expr));
    return name;
  }

  // Value `v` at coordinates `c`, as a register (each (value, coordinates) pair computed once).
  std::string eval(int v, const Coords& c) {
    DType t = g_.values[v].meta.dtype;
    if (is_inlined(g_, v)) return literal(t, g_.input_of(v)->tensor.item());
    std::string key = fmt::format("{}|{}|{}", v, fmt::join(c.at, ","), c.guard);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::string out = computed_inside(v) ? compute(v, c) : load(v, c);
    memo_[key] = out;
    return out;
  }

  std::string load(int v, const Coords& c) {
    DType t = g_.values[v].meta.dtype;
    note_dtype(t);
    if (is_by_value(g_, v)) {
      if (!scalar_of_.count(v)) {
        scalar_of_[v] = static_cast<int>(k_.scalars.size());
        k_.scalars.push_back(v);
        scalars_.push_back(fmt::format("{} s{}", register_type(t), scalar_of_[v]));
      }
      return fmt::format("s{}", scalar_of_[v]);
    }
    if (!read_of_.count(v)) {
      read_of_[v] = static_cast<int>(k_.reads.size());
      k_.reads.push_back(v);
      k_.splat.push_back(false);
      k_.stationary.push_back(false);
      reads_.push_back(fmt::format("const {}* __restrict__ in{}", storage_type(t), read_of_[v]));
      max_rank_ = std::max(max_rank_, g_.values[v].sizes.size());
    }
    int r = read_of_[v];
    std::vector<std::string> terms;
    for (std::size_t d = 0; d < c.at.size(); ++d)
      if (c.at[d] != "0") terms.push_back(fmt::format("{} * st.s[{}][{}]", c.at[d], r, d));
    std::string offset = terms.empty() ? "0" : fmt::format("{}", fmt::join(terms, " + "));
    return emit(t, guarded(c, t, load_expr(t, fmt::format("in{}[{}]", r, offset))));
  }

  std::string compute(int v, const Coords& c) {
    int n = g_.values[v].producer;
    const graph::Node& node = g_.nodes[n];
    const auto& out = g_.values[v].sizes;
    switch (node.op) {
      case OpId::cat:
        return cat(node, c);
      case OpId::pad:
        return pad(node, c);
      default:
        break;
    }
    if (op_class(node.op) == OpClass::view) return eval(node.inputs.at(0), view_input(n, c));
    KILN_CHECK(op_class(node.op) == OpClass::elementwise, "codegen: '{}': {} is not elementwise",
               group_.name, node_text(g_, n));
    std::vector<DType> in_types;
    std::vector<std::string> args;
    for (int u : node.inputs) {
      in_types.push_back(g_.values[u].meta.dtype);
      args.push_back(eval(u, broadcast(c, out, g_.values[u].sizes)));
    }
    DType t = g_.values[v].meta.dtype;
    note_dtype(t);
    std::string expr = node_expr(node.op, node.attrs, in_types, args, t,
                                 fmt::format("'{}': {}", group_.name, node_text(g_, n)));
    k_.checks_errors =
        k_.checks_errors || reports_errors(node.op, compute_dtype_of(node.op, in_types, t));
    python_mod_ = python_mod_ || node.op == OpId::remainder;
    floor_div_ = floor_div_ || node.op == OpId::floor_divide;
    if (reads_position(node.op)) {
      // The element's place in the value's own last two dims, at these coordinates.
      KILN_CHECK(out.size() >= 2, "codegen: '{}': {} needs two dims", group_.name,
                 node_text(g_, n));
      auto rows = size_code(out[out.size() - 2]), cols = size_code(out[out.size() - 1]);
      expr = fmt::format(
          "[&]() {{ const long long kiln_rows = {}, kiln_cols = {}, kiln_index = {} * "
          "kiln_cols + {}; return {}; }}()",
          rows, cols, c.at[out.size() - 2], c.at[out.size() - 1], expr);
    }
    if (reads_index(node.op)) {
      // The element's row-major linear index in the value's own sizes, at these coordinates.
      random_ = true;
      expr = fmt::format("[&]() {{ const long long kiln_index = {}; return {}; }}()",
                         linear_index(c, out), expr);
    }
    return emit(t, guarded(c, t, expr));
  }

  Coords view_input(int n, const Coords& c) {
    const graph::Node& node = g_.nodes[n];
    const auto& in = g_.values[node.inputs[0]].sizes;
    const auto& out = g_.values[node.output()].sizes;
    Coords r{c.at, c.guard};
    switch (node.op) {
      case OpId::slice: {
        auto d = static_cast<std::size_t>(normalized(node.attrs.dim, in.size()));
        r.at[d] = node.attrs.step == 1
                      ? shifted(c.at[d], node.attrs.start)
                      : fmt::format("({} + {} * {})", node.attrs.start, node.attrs.step, c.at[d]);
        return r;
      }
      case OpId::permute:
        for (std::size_t k = 0; k < node.attrs.dims.size(); ++k)
          r.at[static_cast<std::size_t>(normalized(node.attrs.dims[k], in.size()))] = c.at[k];
        return r;
      case OpId::reshape:
        if (!is_unit_reshape(g_, n)) return relinearized(c, out, in);
        [[fallthrough]];
      default: {  // reshape adding or dropping size-1 dims, detach
        std::vector<std::string> kept;
        for (std::size_t d = 0; d < out.size(); ++d)
          if (!is_constant_size(out[d], 1)) kept.push_back(c.at[d]);
        r.at.clear();
        std::size_t next = 0;
        for (const auto& s : in) r.at.push_back(is_constant_size(s, 1) ? "0" : kept.at(next++));
        return r;
      }
    }
  }

  // Coordinates `c` of a value of `sizes` as its row-major linear index.
  std::string linear_index(const Coords& c, const std::vector<SymExpr>& sizes) {
    std::vector<std::string> terms;
    SymExpr inner = SymExpr::constant(1);
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (c.at[d] != "0")
        terms.push_back(is_constant_size(inner, 1)
                            ? fmt::format("(long long)({})", c.at[d])
                            : fmt::format("(long long)({}) * {}", c.at[d], size_code(inner)));
      inner = inner * sizes[d];
    }
    return terms.empty() ? "0LL" : fmt::format("({})", fmt::join(terms, " + "));
  }

  // A reshape in general: the element's linear index in the output's sizes, decomposed in the
  // input's (constant sizes: multiplies and shifts).
  Coords relinearized(const Coords& c, const std::vector<SymExpr>& out,
                      const std::vector<SymExpr>& in) {
    std::vector<std::string> terms;
    SymExpr inner = SymExpr::constant(1);
    for (std::size_t d = out.size(); d-- > 0;) {
      if (c.at[d] != "0")
        terms.push_back(is_constant_size(inner, 1)
                            ? c.at[d]
                            : fmt::format("{} * {}", c.at[d], size_code(inner)));
      inner = inner * out[d];
    }
    std::string linear = terms.empty() ? "0LL" : fmt::format("({})", fmt::join(terms, " + "));
    Coords r{{}, c.guard};
    inner = SymExpr::constant(1);
    std::vector<std::string> at(in.size());
    for (std::size_t d = in.size(); d-- > 0;) {
      std::string q =
          is_constant_size(inner, 1) ? linear : fmt::format("({} / {})", linear, size_code(inner));
      at[d] = is_constant_size(in[d], 1) ? "0"
              : d == 0                   ? q
                                         : fmt::format("({} % {})", q, size_code(in[d]));
      inner = inner * in[d];
    }
    r.at = std::move(at);
    return r;
  }

  // Each output element takes the input whose range along the dim holds it (its split points
  // are kernel arguments where the sizes are symbolic).
  std::string cat(const graph::Node& node, const Coords& c) {
    DType t = g_.values[node.output()].meta.dtype;
    auto d = static_cast<std::size_t>(normalized(node.attrs.dim, c.at.size()));
    std::vector<std::pair<std::string, std::string>> branches;  // (end along d, value)
    SymExpr offset;
    auto empty = [&](int u) { return is_constant_size(g_.values[u].sizes[d], 0); };
    std::size_t last = node.inputs.size();
    while (last > 0 && empty(node.inputs[last - 1])) --last;
    for (std::size_t k = 0; k < last; ++k) {
      int u = node.inputs[k];
      if (empty(u)) continue;
      SymExpr end = offset + g_.values[u].sizes[d];
      bool first = is_constant_size(offset, 0);
      Coords in{c.at, c.guard};
      std::string from = size_code(offset, ""), to = size_code(end, "");
      in.at[d] = first ? c.at[d] : fmt::format("({} - {})", c.at[d], from);
      std::string lower = first ? "" : fmt::format("{} >= {}", c.at[d], from);
      std::string upper = k + 1 < last ? fmt::format("{} < {}", c.at[d], to) : "";
      in.guard = both(c.guard, both(lower, upper));
      branches.push_back({to, convert_expr(g_.values[u].meta.dtype, t, eval(u, in))});
      offset = end;
    }
    std::string expr = branches.back().second;
    for (std::size_t k = branches.size() - 1; k-- > 0;)
      expr =
          fmt::format("({} < {} ? {} : {})", c.at[d], branches[k].first, branches[k].second, expr);
    return emit(t, expr);
  }

  // Out of the input's range: the pad value (negative amounts crop: no test on that side).
  std::string pad(const graph::Node& node, const Coords& c) {
    int u = node.inputs.at(0);
    DType t = g_.values[node.output()].meta.dtype;
    const auto& in = g_.values[u].sizes;
    const auto& p = node.attrs.dims;
    Coords r{c.at, ""};
    std::string inside;
    for (std::size_t i = 0; i < p.size() / 2; ++i) {
      std::size_t d = in.size() - 1 - i;
      std::int64_t before = p[2 * i], after = p[2 * i + 1];
      r.at[d] = shifted(c.at[d], -before);
      if (before > 0) inside = both(inside, fmt::format("{} >= {}", c.at[d], before));
      if (after > 0)
        inside = both(inside, fmt::format("{} < {}", c.at[d],
                                          size_code(in[d] + SymExpr::constant(before), "")));
    }
    r.guard = both(c.guard, inside);
    std::string x = eval(u, r);
    if (inside.empty()) return x;
    return emit(t, fmt::format("(({}) ? {} : {})", inside, x, literal(t, node.attrs.value)));
  }

  Data template_data() const {
    auto lines = [](const std::vector<std::string>& items) {
      Data l(Data::type::list);
      for (const auto& s : items) l.push_back(Data("line", s));
      return l;
    };
    Data params(Data::type::list);
    for (const auto& s : reads_) params.push_back(Data("decl", s));
    for (const auto& s : scalars_) params.push_back(Data("decl", s));
    for (const auto& s : writes_) params.push_back(Data("decl", s));
    if (k_.checks_errors) params.push_back(Data("decl", "long long* __restrict__ kiln_error"));
    for (const auto& s : sizes_) params.push_back(Data("decl", s));
    Data nodes(Data::type::list);
    for (int n : group_.nodes) nodes.push_back(Data("text", node_text(g_, n)));
    Data d;
    d.set("name", k_.name);
    d.set("description", fmt::format("pointwise over {}, by index", sizes_text(group_.domain)));
    d.set("graph", g_.name);
    d.set("nodes", nodes);
    d.set("params", params);
    d.set("num_strided", std::to_string(std::max<std::size_t>(1, k_.reads.size())));
    d.set("max_rank", std::to_string(max_rank_));
    d.set("coords", lines(coords_));
    d.set("lines", lines(lines_));
    d.set("fp16", fp16_);
    d.set("bf16", bf16_);
    d.set("helpers", elementwise_helpers(python_mod_, floor_div_, k_.checks_errors, random_));
    return d;
  }

  const graph::Graph& g_;
  const graph::FusionGroup& group_;
  std::vector<std::int64_t> order_;  // the walk's dims (empty: the domain's)
  std::set<int> inside_, host_view_;
  PointwiseKernel k_;
  std::map<std::string, std::string> memo_;
  std::map<int, int> read_of_, scalar_of_;
  std::vector<std::string> reads_, scalars_, writes_, sizes_, coords_, lines_;
  std::size_t max_rank_ = 1;
  int temps_ = 0;
  bool fp16_ = false, bf16_ = false, python_mod_ = false, floor_div_ = false, random_ = false;
};

}  // namespace

bool renders_view_by_index(const graph::Graph& g, int n) {
  const graph::Node& node = g.nodes[n];
  if (!all_tracked(g.values[node.inputs.at(0)].sizes) ||
      !all_tracked(g.values[node.output()].sizes))
    return false;
  return node.op == OpId::slice || node.op == OpId::permute || node.op == OpId::reshape ||
         node.op == OpId::detach;
}

bool reshapes_expanded(const graph::Graph& g, int n) {
  const graph::Node& node = g.nodes[n];
  if (node.op != OpId::reshape || is_unit_reshape(g, n)) return false;
  int p = g.values[node.inputs.at(0)].producer;
  return p >= 0 && g.nodes[p].op == OpId::expand && renders_view_by_index(g, n);
}

bool is_indexed_group(const graph::Graph& g, const graph::FusionGroup& group) {
  // Values the group computes in registers: outputs of its compute nodes, and views of them
  // (through chains of views); group.nodes is in graph order.
  std::set<int> computed;
  for (int n : group.nodes) {
    const graph::Node& node = g.nodes[n];
    if (node.op == OpId::cat || node.op == OpId::pad || reshapes_expanded(g, n)) return true;
    if (op_class(node.op) != OpClass::view) {
      computed.insert(node.outputs.begin(), node.outputs.end());
      continue;
    }
    if (computed.count(node.inputs.at(0))) return true;
  }
  return false;
}

PointwiseKernel render_indexed(const graph::Graph& g, const graph::FusionGroup& group,
                               std::span<const std::int64_t> order) {
  KernelNames names;
  return IndexedRenderer(g, group, order).render();
}

std::vector<Tensor> run_indexed(const graph::Graph& g, const PointwiseKernel& kernel,
                                const Shape& domain, std::vector<Tensor>& values,
                                std::span<const std::int64_t> symbol_values,
                                const KernelHandle* handle, OutputBuffers into,
                                std::span<const std::int64_t> order) {
  apply_host_views(g, kernel.host_views, values, symbol_values);
  std::int64_t n = 1;
  for (auto s : domain) n *= s;
  std::size_t max_rank = 1;
  for (int v : kernel.reads) max_rank = std::max(max_rank, g.values[v].sizes.size());
  std::vector<long long> strides(std::max<std::size_t>(1, kernel.reads.size()) * max_rank, 0);
  std::vector<cuda::DevicePtr> pointers;
  std::int64_t read = 0, written = 0;
  for (std::size_t r = 0; r < kernel.reads.size(); ++r) {
    int v = kernel.reads[r];
    const Tensor& t = values.at(v);
    const auto& sizes = g.values[v].sizes;
    KILN_CHECK(t.device().type == Device::Type::cuda,
               "codegen: kernel '{}' reads %{} on {}, not a CUDA device", kernel.name, v,
               t.device().str());
    bool same = t.shape().size() == sizes.size();
    for (std::size_t d = 0; same && d < sizes.size(); ++d)
      same = sizes[d].evaluate(symbol_values) == t.shape()[d];
    KILN_CHECK(same, "codegen: kernel '{}' reads %{} of shape {}, not its traced sizes {}",
               kernel.name, v, shape_str(t.shape()), sizes_text(sizes));
    for (std::size_t d = 0; d < sizes.size(); ++d) strides[r * max_rank + d] = t.strides()[d];
    pointers.push_back(reinterpret_cast<cuda::DevicePtr>(t.raw_data()));
    read += tensor_bytes(t);
  }
  std::vector<std::array<unsigned char, 8>> numbers;
  for (int v : kernel.scalars) numbers.push_back(number_argument(values.at(v)));
  std::vector<Tensor> outs;
  for (int v : kernel.writes) {
    outs.push_back(order.empty() ? empty_in(output_buffer(into, outs.size()),
                                            written_shape(domain, g.values[v].sizes.size()),
                                            g.values[v].meta.dtype, Device::cuda())
                                 : walked_output(output_buffer(into, outs.size()), domain, order,
                                                 g.values[v].meta.dtype));
    pointers.push_back(reinterpret_cast<cuda::DevicePtr>(outs.back().raw_data()));
    written += tensor_bytes(outs.back());
  }
  if (n == 0) return outs;
  std::optional<DeviceCheck> check;
  if (kernel.checks_errors) check.emplace(reserve_device_check(raise_expression_error));
  cuda::DevicePtr error = check ? check->flag() : 0;
  std::vector<void*> params;
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) params.push_back(&pointers[i]);
  for (auto& number : numbers) params.push_back(number.data());
  for (std::size_t i = kernel.reads.size(); i < pointers.size(); ++i)
    params.push_back(&pointers[i]);
  if (kernel.checks_errors) params.push_back(&error);
  std::vector<long long> sizes;
  for (const SymExpr& e : kernel.size_args) {
    auto v = e.evaluate(symbol_values);
    KILN_CHECK(v.has_value(), "codegen: kernel '{}' takes size {}, which is not whole here",
               kernel.name, e.str());
    sizes.push_back(*v);
  }
  for (auto& size : sizes) params.push_back(&size);
  long long count = n;
  params.push_back(strides.data());
  params.push_back(&count);
  KernelHandle own;
  if (!handle) handle = &(own = KernelHandle(kernel.name, kernel.source));
  auto blocks = static_cast<unsigned>(
      std::min<std::int64_t>((n + kPointwiseBlock - 1) / kPointwiseBlock, 65535));
  handle->launch({blocks, 1, 1}, {kPointwiseBlock, 1, 1}, params.data(), read, written);
  if (check) check->launched();
  return outs;
}

}  // namespace kiln::jit::codegen
