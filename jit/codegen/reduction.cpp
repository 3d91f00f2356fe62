// Row-reduction code generation (see reduction.h). The group's nodes become kernel nodes
// (softmax and log_softmax expand into max, exp, sum and an epilogue); each value is full (one
// per element of the domain) or reduced (one per row); reductions are ordered into passes by
// the reduced values they depend on; full values are recomputed inside each pass that needs
// them, reduced values live in registers for the rest of the row.
#include "jit/codegen/reduction.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/reduction_combine.h"
#include "jit/codegen/reduction_pass_data.h"
#include "jit/codegen/reduction_template_data.h"
#include "jit/codegen/templates.h"
#include "runtime/dispatch.h"

namespace kiln::jit::codegen {
namespace {

struct KernelNode {
  OpId op;
  OpAttrs attrs;
  std::vector<int> inputs, outputs;
  bool select = false;       // a row select (graph::is_row_select): a reduction picking one column
  bool shifted_exp = false;  // softmax's e^(x - max): the argument is never positive
  bool reduces() const { return select || op_class(op) == OpClass::reduction; }
};

struct ValueInfo {
  DType dtype = DType::f32;
  bool full = true;
  int rank = 0;            // of its shape, for the frame of external reads
  bool broadcast = false;  // a cast of inputs, recomputed in the frame of each read
};

class ReductionRenderer {
 public:
  ReductionRenderer(const graph::Graph& g, const graph::FusionGroup& group)
      : g_(g), group_(group) {}

  ReductionKernel render() {
    k_.name = "k_" + group_.name;
    k_.reduce_dims = group_.reduce_dims;
    domain_rank_ = static_cast<int>(group_.domain.size());
    build_nodes();
    compute_passes();
    return finish();
  }

 private:
  std::int64_t traced_size(const SymExpr& s) const {
    if (s.is_constant()) return s.constant_value();
    std::vector<std::int64_t> traced;
    for (const auto& sym : g_.symbols) traced.push_back(sym.traced);
    auto v = s.evaluate(traced);
    KILN_CHECK(v.has_value(), "codegen: '{}': domain size {} has no value", group_.name, s.str());
    return *v;
  }

  std::int64_t traced_cols() const {
    std::int64_t cols = 1;
    for (auto d : k_.reduce_dims) cols *= traced_size(group_.domain[d]);
    return cols;
  }

  int fresh(DType dtype, bool full) {
    int id = next_value_++;
    info_[id] = {dtype, full, domain_rank_};  // reduced ones keep their dims (keepdim)
    return id;
  }

  void note(int v) {
    const auto& value = g_.values[v];
    auto level = graph::value_level(group_, value.sizes);
    info_[v] = {value.meta.dtype, level == graph::ValueLevel::full,
                static_cast<int>(value.meta.shape.size()),
                level == graph::ValueLevel::broadcast && value.producer >= 0};
  }

  void build_nodes() {
    next_value_ = static_cast<int>(g_.values.size());
    std::set<int> inside(group_.nodes.begin(), group_.nodes.end());
    for (int n : group_.nodes) {
      const graph::Node& node = g_.nodes[n];
      comments_.push_back(node_text(g_, n));
      for (int v : node.inputs) note(v);
      for (int v : node.outputs) note(v);
      OpClass c = graph::fusion_class(g_, node);
      if (c == OpClass::view && is_unit_reshape(g_, n) && computed_in(inside, node.inputs[0])) {
        nodes_.push_back({OpId::copy, {}, node.inputs, node.outputs});  // an alias in registers
        continue;
      }
      if (c == OpClass::view) {
        check_host_view(g_, inside, n, group_.name);
        k_.host_views.push_back(n);
        continue;
      }
      if (c == OpClass::normalization) {
        expand_normalization(node);
        continue;
      }
      KILN_CHECK(c == OpClass::elementwise || c == OpClass::reduction,
                 "codegen: '{}': {} cannot be part of a reduction kernel", group_.name,
                 node_text(g_, n));
      nodes_.push_back(
          {node.op, node.attrs, node.inputs, node.outputs, graph::is_row_select(g_, node)});
    }
  }

  // softmax = exp(x - max) * (1 / sum(exp(x - max))); log_softmax = (x - max) - log(sum(...));
  // all in f32 (or f64), rounded once to the output dtype.
  void expand_normalization(const graph::Node& node) {
    int x = node.inputs[0], y = node.output();
    DType t = compute_dtype(g_.values[x].meta.dtype);
    OpAttrs over_row;
    over_row.dims = {node.attrs.dim};
    over_row.keepdim = true;
    int m = fresh(t, false), d = fresh(t, true), e = fresh(t, true), s = fresh(t, false);
    nodes_.push_back({OpId::amax, over_row, {x}, {m}});
    nodes_.push_back({OpId::sub, {}, {x, m}, {d}});
    nodes_.push_back({OpId::exp, {}, {d}, {e}, false, true});
    nodes_.push_back({OpId::sum, over_row, {e}, {s}});
    if (node.op == OpId::softmax) {
      // One reciprocal per row and a multiply per element: a correctly rounded division per
      // element costs a MUFU op and ~9 FMAs (within an ulp of e / sum either way).
      int r = fresh(t, false);
      nodes_.push_back({OpId::reciprocal, {}, {s}, {r}});
      nodes_.push_back({OpId::mul, {}, {e, r}, {y}});
    } else {
      int log_s = fresh(t, false);
      nodes_.push_back({OpId::log, {}, {s}, {log_s}});
      nodes_.push_back({OpId::sub, {}, {d, log_s}, {y}});
    }
  }

  bool produced_inside(int v) const { return producer_.count(v) != 0; }
  // Whether `v` is in registers: made by a node of the group that is not a view the host applies
  // (a unit reshape of such a view is a host view too, read with its own strides).
  bool computed_in(const std::set<int>& inside, int v) const {
    const int p = g_.values[v].producer;
    return p >= 0 && inside.count(p) &&
           std::find(k_.host_views.begin(), k_.host_views.end(), p) == k_.host_views.end();
  }

  // The pass after which each value can be computed: reductions add one to their input's.
  void compute_passes() {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      for (int v : nodes_[i].outputs) producer_[v] = static_cast<int>(i);
    for (const auto& n : nodes_) {
      int ready = 0;
      for (int v : n.inputs) ready = std::max(ready, ready_.count(v) ? ready_[v] : 0);
      if (n.reduces()) ++ready;
      for (int v : n.outputs) ready_[v] = ready;
      passes_ = std::max(passes_, ready);
    }
    k_.passes = passes_;
  }

  // Value access: registers for what this kernel computed, literals, numbers by value, or a
  // strided read in the frame of the consuming node (full: inside a column loop).
  std::string read(int v, bool full_frame, int consumer_rank, std::vector<Assignment>& loads,
                   std::set<int>& loaded) {
    if (info_.at(v).broadcast && produced_inside(v)) {
      const KernelNode& n = nodes_[producer_.at(v)];
      std::vector<DType> in_types;
      std::vector<std::string> args;
      for (int u : n.inputs) {
        in_types.push_back(info_.at(u).dtype);
        args.push_back(read(u, full_frame, consumer_rank, loads, loaded));
      }
      return node_expr(n.op, n.attrs, in_types, args, info_.at(v).dtype,
                       fmt::format("'{}': {}", group_.name, n.op));
    }
    if (produced_inside(v) || (loaded.count(v) && full_frame)) return var(v);
    if (is_inlined(g_, v)) return literal(info_[v].dtype, g_.input_of(v)->tensor.item());
    DType t = info_.at(v).dtype;
    note_dtype(t);
    if (is_by_value(g_, v)) {
      auto it = std::find(k_.scalars.begin(), k_.scalars.end(), v);
      if (it == k_.scalars.end()) {
        scalar_params_.push_back(fmt::format("{} s{}", register_type(t), k_.scalars.size()));
        k_.scalars.push_back(v);
        it = k_.scalars.end() - 1;
      }
      return fmt::format("s{}", it - k_.scalars.begin());
    }
    // The frame a read aligns with: the whole domain, or the rows (keepdim or not).
    std::vector<int> frame;
    bool keep_all = full_frame || consumer_rank == domain_rank_;
    for (int d = 0; d < domain_rank_; ++d)
      if (keep_all ||
          std::find(k_.reduce_dims.begin(), k_.reduce_dims.end(), d) == k_.reduce_dims.end())
        frame.push_back(d);
    std::size_t index = 0;
    while (index < k_.reads.size() &&
           !(k_.reads[index].value == v && k_.reads[index].frame_dims == frame))
      ++index;
    if (index == k_.reads.size()) {
      k_.reads.push_back({v, frame});
      read_params_.push_back(fmt::format("const {}* __restrict__ in{}", storage_type(t), index));
    }
    std::string name = full_frame ? var(v) : fmt::format("{}_r{}", var(v), index);
    if (!loaded.count(full_frame ? v : -1 - static_cast<int>(index))) {
      loads.push_back({register_type(t), name,
                       load_expr(t, fmt::format("in{}[{}[{}]]", index,
                                                full_frame ? "offset" : "row_offset", index)),
                       full_frame ? static_cast<int>(index) : -1});
      loaded.insert(full_frame ? v : -1 - static_cast<int>(index));
      k_.reads[index].passes = std::max(1, k_.reads[index].passes + (full_frame ? 1 : 0));
    }
    return name;
  }

  void note_dtype(DType t) {
    fp16_ = fp16_ || t == DType::f16;
    bf16_ = bf16_ || t == DType::bf16;
  }

  std::string statement_expr(const KernelNode& n, bool full_frame, std::vector<Assignment>& loads,
                             std::set<int>& loaded) {
    std::vector<DType> in_types;
    std::vector<std::string> args;
    int out_rank = info_.at(n.outputs[0]).rank;
    for (int v : n.inputs) {
      in_types.push_back(info_.at(v).dtype);
      args.push_back(read(v, full_frame, out_rank, loads, loaded));
    }
    if (n.shifted_exp && info_.at(n.outputs[0]).dtype == DType::f32)
      return fmt::format("kiln_exp_shifted({})", args[0]);
    python_mod_ = python_mod_ || n.op == OpId::remainder;
    floor_div_ = floor_div_ || n.op == OpId::floor_divide;
    DType out = info_.at(n.outputs[0]).dtype;
    note_dtype(out);
    std::string expr =
        node_expr(n.op, n.attrs, in_types, args, out, fmt::format("'{}': {}", group_.name, n.op));
    if (reads_index(n.op)) {
      // Kept to full values over rows that are the trailing dims: the element's linear index is
      // row * cols + col.
      KILN_CHECK(full_frame, "codegen: '{}': {} needs the element's index", group_.name, n.op);
      random_ = true;
      return fmt::format("[&]() {{ const long long kiln_index = row * cols + col; return {}; }}()",
                         expr);
    }
    if (!reads_position(n.op)) return expr;
    // The fuser keeps such an op to full values over rows that are the trailing dims (constant
    // last two sizes): the element's linear index is row * cols + col.
    auto rank = group_.domain.size();
    KILN_CHECK(full_frame && rank >= 2 && group_.domain[rank - 1].is_constant() &&
                   group_.domain[rank - 2].is_constant(),
               "codegen: '{}': {} needs the element's row and column", group_.name, n.op);
    return fmt::format(
        "[&]() {{ const long long kiln_rows = {}LL, kiln_cols = {}LL, kiln_index = row * cols + "
        "col; return {}; }}()",
        group_.domain[rank - 2].constant_value(), group_.domain[rank - 1].constant_value(), expr);
  }

  // Full values the given targets need, in kernel order (computed inside a column loop).
  std::vector<int> full_closure(const std::vector<int>& targets) const {
    std::set<int> need;
    std::vector<int> todo = targets;
    while (!todo.empty()) {
      int v = todo.back();
      todo.pop_back();
      auto p = producer_.find(v);
      if (p == producer_.end() || !info_.at(v).full || need.count(p->second)) continue;
      need.insert(p->second);
      for (int u : nodes_[p->second].inputs) todo.push_back(u);
    }
    return {need.begin(), need.end()};
  }

  // An add, sub or mul whose output and inputs are one 16-bit float type, by the names its inputs
  // have in a column loop: the vector layouts compute it two columns an instruction where both
  // are pairs there (a 16-bit read, or a value rounded to the type; not a row's constant).
  std::optional<PairOp> pair_op(const KernelNode& n) const {
    const char* fn = n.op == OpId::add   ? "__hadd2_rn"
                     : n.op == OpId::sub ? "__hsub2_rn"
                     : n.op == OpId::mul ? "__hmul2_rn"
                                         : nullptr;
    DType t = info_.at(n.outputs[0]).dtype;
    if (!fn || (t != DType::bf16 && t != DType::f16) || n.inputs.size() != 2) return std::nullopt;
    for (int v : n.inputs)
      if (info_.at(v).dtype != t || info_.at(v).broadcast ||
          (!produced_inside(v) && is_inlined(g_, v)))  // as read() tells a literal
        return std::nullopt;
    return PairOp{fn, var(n.inputs[0]), var(n.inputs[1])};
  }

  void column_pass(const std::vector<int>& full_nodes, PassData& pass, std::set<int>& loaded) {
    for (int i : full_nodes) {
      const KernelNode& n = nodes_[i];
      if (n.reduces()) continue;
      std::string expr = statement_expr(n, true, pass.loads, loaded);
      pass.statements.push_back(
          {register_type(info_.at(n.outputs[0]).dtype), var(n.outputs[0]), expr, -1, pair_op(n)});
      loaded.insert(n.outputs[0]);
    }
  }

  void add_reduction(const KernelNode& n, PassData& pass, std::set<int>& loaded) {
    if (n.select || is_arg_reduction(n.op)) splittable_ = false;
    if (n.select) return add_select(n, pass);
    int x = n.inputs[0];
    std::string in = read(x, true, domain_rank_, pass.loads, loaded);
    bool arg = is_arg_reduction(n.op);
    DType out = info_.at(n.outputs[0]).dtype;
    DType a = accumulator_dtype(n.op, arg ? info_.at(x).dtype : out);
    std::string A = register_type(a), acc = acc_var(n.outputs[0]);
    std::string value = convert_expr(info_.at(x).dtype, a, in);
    auto [init, combine] = reduction_combine(n.op, a);
    pass.accumulators.push_back({A, acc, init, arg});
    if (arg) {
      pass.updates.push_back(
          fmt::format("{{ auto better = {0}; const {1} x = {2}; if (better(x, col, {3}, "
                      "{3}_index)) {3} = x, {3}_index = col; }}",
                      combine, A, value, acc));
      pass.finals.push_back(
          FinalLine::arg_reduce(fmt::format("{0}, {0}_index, {1}, {2}", acc, init, combine)));
      // values (max_dim/min_dim) and indices
      if (n.op == OpId::max_dim || n.op == OpId::min_dim) {
        pass.finals.push_back(
            FinalLine::code(fmt::format("const {} {} = {};", register_type(out), var(n.outputs[0]),
                                        convert_expr(a, out, acc))));
        pass.finals.push_back(
            FinalLine::code(fmt::format("const long long {} = {}_index;", var(n.outputs[1]), acc)));
      } else {
        pass.finals.push_back(
            FinalLine::code(fmt::format("const long long {} = {}_index;", var(n.outputs[0]), acc)));
      }
      return;
    }
    std::string update = n.op == OpId::sum ? fmt::format("{0} = {0} + {1};", acc, value)
                         : n.op == OpId::prod
                             ? fmt::format("{0} = {0} * {1};", acc, value)
                             : fmt::format("{0} = ({1})({0}, {2});", acc, combine, value);
    pass.updates.push_back(update);
    pass.finals.push_back(FinalLine::reduce(acc, fmt::format("{}, {}", init, combine)));
    split_partials_.push_back({A, acc, combine, split_partials_.size()});
    pass.results.push_back(fmt::format("const {} {} = {};", register_type(out), var(n.outputs[0]),
                                       convert_expr(a, out, acc)));
  }

  // The register caches of the persistent schedule (reduction_pass_data.h), for `lanes` threads a
  // row; marks the reads they keep on chip.
  std::vector<Assignment> keep_rows_on_chip(std::vector<PassData>& passes, std::int64_t lanes,
                                            int max_items, int& items) {
    RegisterCaches caches = cache_rows_on_chip(passes, traced_cols(), lanes, max_items);
    if (caches.cached.empty()) return {};
    items = caches.items;
    for (auto& r : k_.reads)
      if (r.frame_dims.size() == static_cast<std::size_t>(domain_rank_) &&
          caches.cached.count(var(r.value)))
        r.on_chip = true;
    return std::move(caches.arrays);
  }

  // A row select keeps the column its row's index names: after the pass's loop every lane
  // computes the selected value from memory at that one column (through the generic offsets, which
  // every layout's index struct carries), so the column loop pays nothing for it. An index
  // outside the row sets the kernel's error flag, raised as an IndexError on the host.
  void add_select(const KernelNode& n, PassData& pass) {
    int x = n.inputs[0], index = n.inputs[1];
    std::string at = fmt::format("(long long)({})",
                                 read(index, false, info_.at(index).rank, row_loads_, row_loaded_));
    DType out = info_.at(n.outputs[0]).dtype, a = compute_dtype(out);
    std::string A = register_type(a), acc = acc_var(n.outputs[0]);
    pass.accumulators.push_back({A, acc, "(" + A + ")(0)", false});
    // One element per row: the reads it adds are no pass over the row (traffic estimates).
    std::vector<int> passes_before;
    for (const auto& r : k_.reads) passes_before.push_back(r.passes);
    PassData column;
    std::set<int> loaded;
    column_pass(full_closure({x}), column, loaded);
    std::string in = read(x, true, domain_rank_, column.loads, loaded);
    for (std::size_t i = 0; i < passes_before.size(); ++i) k_.reads[i].passes = passes_before[i];
    pass.selects.push_back({at, column.loads, column.statements,
                            fmt::format("{} = {};", acc, convert_expr(info_.at(x).dtype, a, in))});
    pass.finals.push_back(FinalLine::code(
        fmt::format("if (lane == 0 && ({0} < 0 || {0} >= cols)) {{ "
                    "atomicExch((unsigned long long*)&error[1], (unsigned long long){0}); "
                    "atomicExch((unsigned long long*)&error[0], 1ull); }}",
                    at)));
    pass.finals.push_back(FinalLine::code(fmt::format(
        "const {} {} = {};", register_type(out), var(n.outputs[0]), convert_expr(a, out, acc))));
    k_.checks_index = true;
  }

  // The register a full output is stored from (reduction_pass_data.h: store_unrounded).
  std::string stored_unrounded(PassData& pass, int v) const {
    return store_unrounded(pass, var(v), info_.at(v).dtype);
  }

  // Reduced values that need no reduction of this kernel (numbers, reduced-shape inputs) and are
  // known after `pass`.
  void reduced_statements_ready_at(int pass, std::vector<Assignment>& out) {
    for (const auto& n : nodes_) {
      int v = n.outputs[0];
      if (info_.at(v).full || info_.at(v).broadcast || n.reduces() || ready_.at(v) != pass)
        continue;
      std::string expr = statement_expr(n, false, row_loads_, row_loaded_);
      out.push_back({register_type(info_.at(v).dtype), var(v), expr});
    }
  }

  // One loop over each row per chain of dependent reductions.
  std::vector<PassData> reduction_passes() {
    std::vector<PassData> passes;
    reduced_statements_ready_at(0, row_loads_);
    for (int p = 1; p <= passes_; ++p) {
      std::vector<int> reductions, inputs;
      for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].reduces() && ready_.at(nodes_[i].outputs[0]) == p) {
          reductions.push_back(static_cast<int>(i));
          // A row select computes its input at one column, after the loop (add_select).
          if (!nodes_[i].select) inputs.push_back(nodes_[i].inputs[0]);
        }
      PassData pass;
      std::set<int> loaded;
      column_pass(full_closure(inputs), pass, loaded);
      for (int i : reductions) add_reduction(nodes_[i], pass, loaded);
      reduced_statements_ready_at(p, pass.reduced_statements);
      pass.comment = fmt::format("pass {} of {}: {} reduction(s) over each row", p, passes_,
                                 reductions.size());
      passes.push_back(std::move(pass));
    }
    return passes;
  }

  // The outputs' parameters, in order; reduced ones are stored once per row. Returns the full
  // outputs, which a last pass over the row writes.
  std::vector<int> plan_outputs(std::vector<std::string>& write_params,
                                std::vector<Store>& reduced_stores) {
    std::vector<int> full_outputs;
    for (int v : group_.outputs) {
      DType t = info_.at(v).dtype;
      note_dtype(t);
      write_params.push_back(
          fmt::format("{}* __restrict__ out{}", storage_type(t), k_.writes.size()));
      k_.write_full.push_back(info_.at(v).full);
      if (info_.at(v).full)
        full_outputs.push_back(v);
      else {
        Store store;
        store.target = fmt::format("out{}", k_.writes.size());
        store.expr = store_expr(t, produced_inside(v)
                                       ? var(v)
                                       : read(v, false, info_.at(v).rank, row_loads_, row_loaded_));
        reduced_stores.push_back(std::move(store));
      }
      k_.writes.push_back(v);
    }
    return full_outputs;
  }

  // The last pass: the full outputs over the whole row. `widest` grows to their element sizes.
  PassData output_pass(const std::vector<int>& full_outputs, std::size_t& widest) {
    PassData pass;
    std::set<int> loaded;
    column_pass(full_closure(full_outputs), pass, loaded);
    for (std::size_t i = 0; i < k_.writes.size(); ++i) {
      if (!k_.write_full[i]) continue;
      int v = k_.writes[i];
      DType t = info_.at(v).dtype;
      std::string value = stored_unrounded(pass, v);
      pass.stores.push_back({fmt::format("out{}", i), store_expr(t, value), static_cast<int>(i),
                             value, register_type(t), storage_type(t)});
      widest = std::max(widest, itemsize(t));
    }
    pass.comment = "last pass: the outputs over the whole row";
    return pass;
  }

  // What every variant shares: parameters, the graph's nodes, dtypes, index struct sizes.
  ReductionTemplateData common_data(const std::vector<std::string>& write_params) const {
    ReductionTemplateData d;
    d.params = read_params_;
    d.params.insert(d.params.end(), scalar_params_.begin(), scalar_params_.end());
    d.params.insert(d.params.end(), write_params.begin(), write_params.end());
    if (k_.checks_index) d.params.push_back("long long* __restrict__ error");
    if (k_.splittable) {
      d.params.push_back("unsigned long long* __restrict__ partials");
      d.params.push_back("unsigned int* __restrict__ arrivals");
    }
    d.nodes = comments_;
    std::vector<std::string> domain;
    for (const auto& s : group_.domain) domain.push_back(s.str());
    d.name = k_.name;
    d.description = fmt::format("{} over [{}], rows folding dims [{}], in {} pass(es)",
                                graph::fusion_kind_name(group_.kind), fmt::join(domain, ", "),
                                fmt::join(k_.reduce_dims, ", "), passes_);
    d.graph = g_.name;
    d.helpers = elementwise_helpers(python_mod_, floor_div_, false, random_);
    d.fp16 = fp16_;
    d.bf16 = bf16_;
    auto kept = domain_rank_ - static_cast<int>(k_.reduce_dims.size());
    d.num_kept = static_cast<std::size_t>(std::max(1, kept));
    d.num_reduced = std::max<std::size_t>(1, k_.reduce_dims.size());
    d.num_strided = std::max<std::size_t>(1, k_.reads.size());
    d.row_loads = row_loads_;
    for (const auto& r : k_.reads) d.read_storage.push_back(storage_type(info_.at(r.value).dtype));
    d.vector = k_.vector;
    d.reduced_stores = reduced_stores_;
    d.split_partials = split_partials_;
    return d;
  }

  // Which schedules the kernel supports besides a block per row (reduction_schedule.h).
  void note_schedules() {
    k_.traced_cols = traced_cols();
    std::vector<std::int64_t> reduced = k_.reduce_dims;
    std::sort(reduced.begin(), reduced.end());
    k_.rows_innermost =
        !reduced.empty() && reduced.back() == domain_rank_ - 1 &&
        reduced.back() - reduced.front() + 1 == static_cast<std::int64_t>(reduced.size());
    // Reduced dims outside the innermost kept one: the outer schedule reads rows side by side.
    auto kept = domain_rank_ - static_cast<int>(k_.reduce_dims.size());
    bool inner_kept = kept > 0 && std::find(k_.reduce_dims.begin(), k_.reduce_dims.end(),
                                            domain_rank_ - 1) == k_.reduce_dims.end();
    k_.outer = k_.splittable && inner_kept;
    // Rows read once per row would be `vector` values a lane: the vector form reads none.
    if (k_.outer && row_loads_.empty() && k_.vector > 1) {
      k_.outer_vector = true;
      k_.outer_width = k_.vector;
      k_.outer_vector_expected = traced_size(group_.domain.back()) % k_.vector == 0;
    }
  }

  ReductionKernel finish() {
    std::vector<PassData> passes = reduction_passes();
    std::vector<std::string> write_params;
    std::vector<int> full_outputs = plan_outputs(write_params, reduced_stores_);
    // The vector layout's width: 16 bytes of the widest type a column loop reads or writes.
    std::size_t widest = 1;
    for (const auto& r : k_.reads)
      if (r.frame_dims.size() == static_cast<std::size_t>(domain_rank_))
        widest = std::max(widest, itemsize(info_.at(r.value).dtype));
    if (!full_outputs.empty()) passes.push_back(output_pass(full_outputs, widest));
    k_.vector = static_cast<int>(std::min<std::size_t>(8, 16 / widest));
    std::vector<PassData> warp_passes = passes;
    auto caches = keep_rows_on_chip(passes, reduction_block(traced_cols()), kMaxRowItems, k_.items);
    k_.warp_lanes = warp_row_lanes(traced_cols(), widest);
    auto warp_caches =
        keep_rows_on_chip(warp_passes, k_.warp_lanes, kMaxWarpRowItems, k_.warp_items);
    // Two stages (split_reduction below) for one pass of plain reductions and no full output.
    k_.splittable = splittable_ && passes_ == 1 && full_outputs.empty();
    if (k_.splittable) {
      passes.at(0).split = true;
      warp_passes.at(0).split = true;
      k_.partial_slots = static_cast<int>(split_partials_.size());
    }
    note_schedules();
    auto block = std::make_shared<ReductionTemplateData>(common_data(write_params));
    auto warp = std::make_shared<ReductionTemplateData>(*block);
    block->passes = std::move(passes);
    block->caches = std::move(caches);
    block->items = k_.items;
    // Short rows: a warp per row (or two), its register caches sized for its lanes.
    warp->warp_rows = true;
    warp->warp_lanes = k_.warp_lanes;
    warp->passes = std::move(warp_passes);
    warp->caches = std::move(warp_caches);
    warp->items = k_.warp_items;
    k_.block_data = std::move(block);
    k_.warp_data = std::move(warp);
    k_.variants = KernelVariants(k_.name, kReductionVariants);
    return k_;
  }
  const graph::Graph& g_;
  const graph::FusionGroup& group_;
  ReductionKernel k_;
  int domain_rank_ = 0;
  int next_value_ = 0;
  int passes_ = 0;
  std::vector<KernelNode> nodes_;
  std::vector<std::string> comments_;
  std::map<int, ValueInfo> info_;
  std::map<int, int> producer_;  // value -> index in nodes_
  std::map<int, int> ready_;     // value -> the pass after which it is known
  std::vector<std::string> read_params_, scalar_params_;
  std::vector<Assignment> row_loads_;         // reads of reduced-shape values, once per row
  std::vector<SplitPartial> split_partials_;  // per reduction: what a split row's blocks exchange
  std::vector<Store> reduced_stores_;         // outputs stored once per row
  bool splittable_ = true;
  std::set<int> row_loaded_;
  bool fp16_ = false, bf16_ = false, python_mod_ = false, floor_div_ = false, random_ = false;
};

}  // namespace

ReductionKernel render_reduction(const graph::Graph& graph, const graph::FusionGroup& group) {
  KernelNames names;
  KILN_CHECK(
      group.kind == graph::FusionKind::reduction || group.kind == graph::FusionKind::normalization,
      "codegen: group '{}' is a {} group, not a reduction", group.name,
      graph::fusion_kind_name(group.kind));
  return ReductionRenderer(graph, group).render();
}

}  // namespace kiln::jit::codegen
