// Tracing into entries, guard-checked reuse, and dynamic dims.
//
// Dynamic dims are proven, not assumed: a trace with symbolic dims is recorded twice, once with
// the call's sizes and once with every symbol moved to a different probe size. If the two
// graphs differ anywhere that is not a size following a symbol (a constant computed from a
// size, a slice bound, a branch taken on a size), or if user code read a symbolic size, those
// dims are specialized instead. Symbols are shared by dims of equal size ("duck sizing").
#include "jit/compiled_function.h"
#include "jit/cuda_graphs.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>

#include "autograd/nn.h"
#include "graph/compare.h"
#include "graph/node_values.h"
#include "graph/pipeline.h"
#include "graph/tracer.h"
#include "jit/aot/joint_graph.h"
#include "jit/codegen/kernel_coverage.h"
#include "jit/codegen/lt_matmul.h"
#include "jit/reference_executor.h"
#include "jit/written_inputs.h"
#include "jit/report/report_writer.h"
#include "runtime/grad_mode.h"
#include "runtime/log.h"

namespace kiln::jit {

using graph::Graph;
using graph::InputKind;

void mark_dynamic(const Tensor& t, std::int64_t dim) {
  dim = normalize_dim(dim, t.dim(), "mark_dynamic");
  KILN_CHECK_AS(IndexError, dim < 64, "mark_dynamic: dim {} is beyond the 64 supported", dim);
  t.impl().dynamic_dims |= std::uint64_t{1} << dim;
}

struct CompiledFunctionCore::Trace {
  Graph graph;
  std::set<int> read_symbols;
  bool read_opaque = false;
};

// Runs `invoke` on placeholders: argument i's dim d has size sizes[symbol] when it has a symbol.
// The trace runs under the caller's grad mode (a guard), so that the nodes the function runs
// under NoGradGuard are recorded as such.
CompiledFunctionCore::Trace CompiledFunctionCore::run_trace(
    std::span<const CallArg> args, InvokeRef invoke,
    const std::vector<std::vector<int>>& arg_symbols,
    const std::vector<std::int64_t>& symbol_sizes) const {
  graph::Tracer tracer(options_.name);
  for (const nn::Module* m : options_.modules)
    for (const auto& [name, slot] : m->named_slots()) tracer.declare_state(slot, name);
  std::vector<CallArg> traced(args.begin(), args.end());
  std::vector<Tensor> placeholders(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_tensor) continue;
    Shape shape = args[i].tensor->impl().shape;
    std::vector<SymExpr> sizes;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      int s = arg_symbols[i][d];
      if (s >= 0) shape[d] = symbol_sizes[s];
      sizes.push_back(s >= 0 ? SymExpr::symbol(s) : SymExpr::constant(shape[d]));
    }
    placeholders[i] = tracer.add_argument(*args[i].tensor, static_cast<int>(i), arg_name(i), shape,
                                          std::move(sizes));
    traced[i].tensor = &placeholders[i];
  }
  {
    InterceptorScope scope(&tracer);
    std::vector<Tensor> outputs = invoke(traced);
    tracer.set_outputs(outputs);
  }
  traced.clear();
  placeholders.clear();
  tracer.classify_lifted();
  return {std::move(tracer.graph()), tracer.read_symbols(), tracer.read_opaque()};
}

namespace {

// Why no call of an entry may be replayed from a CUDA graph, or empty: a replay repeats the
// arguments its kernels had at the capture.
std::string graph_refusal(const graph::Graph& traced, const graph::Graph& g) {
  if (!traced.random_draws.empty())
    return "it draws random numbers, whose Philox offset each call passes its kernels from the "
           "host";
  for (int v : g.mutated_inputs)
    if (const graph::Input* in = g.input_of(v); in && in->kind == graph::InputKind::argument)
      return fmt::format("it writes argument '{}' in place (the graph would write its copy)",
                         in->name);
  return "";
}

}  // namespace

namespace {

// True when the probe trace `b` (every symbol at another size) has the structure of `a` and
// every size of both follows its expression: the expressions hold at two points, not just one.
bool match_traces(const Graph& a, const Graph& b, const std::vector<std::int64_t>& s1,
                  const std::vector<std::int64_t>& s2) {
  if (graph::structural_difference(a, b) || a.values.size() != b.values.size()) return false;
  for (std::size_t v = 0; v < a.values.size(); ++v) {
    const auto& sizes = a.values[v].sizes;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d].is_opaque()) continue;  // correct while unread (reads are checked apart)
      if (sizes[d].evaluate(s1) != a.values[v].meta.shape[d] ||
          sizes[d].evaluate(s2) != b.values[v].meta.shape[d])
        return false;
    }
  }
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    const OpAttrs& attrs = a.nodes[i].attrs;
    for (std::size_t k = 0; k < attrs.shape_exprs.size(); ++k)
      if (attrs.shape_exprs[k].evaluate(s1) != attrs.shape[k] ||
          attrs.shape_exprs[k].evaluate(s2) != b.nodes[i].attrs.shape[k])
        return false;
  }
  return true;
}

// Distinct size expressions of `g` that `keep` selects.
template <class Keep>
std::vector<SymExpr> size_exprs_where(const Graph& g, Keep keep) {
  std::vector<SymExpr> out;
  auto add = [&](const SymExpr& e) {
    if (!e.is_opaque() && keep(e) && std::find(out.begin(), out.end(), e) == out.end())
      out.push_back(e);
  };
  for (const auto& v : g.values)
    for (const auto& e : v.sizes) add(e);
  for (const auto& n : g.nodes)
    for (const auto& e : n.attrs.shape_exprs) add(e);
  return out;
}

// Size expressions of `g` that divide: each must come out whole in a call.
std::vector<SymExpr> divisions(const Graph& g) {
  return size_exprs_where(g, [](const SymExpr& e) { return e.denominator() != 1; });
}

// Size expressions of `g` that subtract (a pad that crops): each must stay >= 2 in a call, as
// the trace assumed of every symbolic size.
std::vector<SymExpr> subtractions(const Graph& g) {
  return size_exprs_where(g, [](const SymExpr& e) { return e.has_negative_term(); });
}

}  // namespace

CompiledFunctionCore::CompiledFunctionCore(CompileOptions options) : options_(std::move(options)) {
  KILN_CHECK(options_.recompile_limit >= 1, "compile: recompile_limit must be >= 1, got {}",
             options_.recompile_limit);
  if (options_.verify_every == 0)
    if (const char* every = std::getenv("KILN_JIT_VERIFY"))
      options_.verify_every = std::atoi(every);
  for (const nn::Module* m : options_.modules)
    KILN_CHECK(m != nullptr, "compile: '{}' declares a null module", options_.name);
}

std::string CompiledFunctionCore::arg_name(std::size_t i) const {
  return i < options_.arg_names.size() ? options_.arg_names[i] : fmt::format("arg{}", i);
}

namespace {

// A graph runs as generated kernels when its tensors live on a CUDA device: every argument with
// elements is on one (0-dim host tensors are numbers), and every node computes there (a graph
// that copies to the host runs node by node).
// The first node other than a view that computes a value with an untracked size ("mul (%5)" of
// a slice to the end), or "": a kernel or a library call would have to allocate it, and only a
// host view can size itself from its input.
std::string computes_untracked_size(const graph::Graph& g) {
  for (const auto& n : g.nodes) {
    if (op_class(n.op) == OpClass::view) continue;
    for (int v : n.outputs)
      for (const auto& e : g.values[v].sizes)
        if (e.is_opaque()) return fmt::format("{} (%{})", op_name(n.op), v);
  }
  return "";
}

// A size that subtracts ("s0 - 2 (%3)") and is below 2 at the traced symbol values, or "":
// the guards hold such sizes at >= 2, as symbols are, so that entry would never match.
std::string size_below_two(const Graph& g, std::span<const std::int64_t> traced) {
  for (const auto& e : subtractions(g)) {
    auto v = e.evaluate(traced);
    if (!v || *v < 2) return fmt::format("size {}", e.str());
  }
  return "";
}

bool runs_on_device(const graph::Graph& g, std::span<const CallArg> args) {
  for (const auto& n : g.nodes)
    for (int v : n.outputs)
      if (g.values[v].device.type != Device::Type::cuda) return false;
  bool any = false;
  for (const auto& in : g.inputs) {
    if (in.kind != graph::InputKind::argument && in.kind != graph::InputKind::state) continue;
    Tensor t = input_value(in, args);
    if (!t.defined()) continue;
    if (t.device().type == Device::Type::cuda)
      any = true;
    else if (t.dim() > 0)
      return false;
  }
  return any;
}

bool needs_grad(const graph::Graph& g, std::span<const CallArg> args) {
  for (const auto& in : g.inputs) {
    if (in.kind == graph::InputKind::constant) continue;
    Tensor t = input_value(in, args);
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

}  // namespace

// Duck sizing: candidate dims of equal size share one symbol.
struct CompiledFunctionCore::SymbolAssignment {
  std::vector<std::vector<int>> arg_symbols;  // per argument and dim: its symbol, or -1
  // Each symbol's size in the trace and in the probe trace: distinct, and multiples of 12 so
  // that exact divisions by small factors seen at the traced sizes stay exact.
  std::vector<std::int64_t> traced, probe;
  std::vector<graph::Symbol> symbols;
};

CompiledFunctionCore::SymbolAssignment CompiledFunctionCore::assign_symbols(
    std::span<const CallArg> args, const DimSet& candidates) {
  SymbolAssignment a;
  a.arg_symbols.resize(args.size());
  std::map<std::int64_t, int> symbol_of_size;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_tensor) continue;
    const Shape& shape = args[i].tensor->impl().shape;
    a.arg_symbols[i].assign(shape.size(), -1);
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (!candidates.count({static_cast<int>(i), static_cast<int>(d)})) continue;
      auto [it, fresh] = symbol_of_size.emplace(shape[d], static_cast<int>(a.traced.size()));
      if (fresh) {
        a.traced.push_back(shape[d]);
        a.probe.push_back(12 * (shape[d] + 97 + 17 * static_cast<std::int64_t>(a.probe.size())));
        a.symbols.push_back({shape[d], static_cast<int>(i), static_cast<int>(d)});
      }
      a.arg_symbols[i][d] = it->second;
    }
  }
  return a;
}

std::string CompiledFunctionCore::dump_prefix() const {
  // make_entry runs under the exclusive lock: the entry it makes gets the next index.
  return fmt::format("{}.{}", options_.name, entries_.size());
}

void CompiledFunctionCore::log_specialized(const DimSet& dims, const std::string& why) const {
  if (!log_enabled(LogTopic::recompiles)) return;
  std::vector<std::string> names;
  for (const auto& [arg, dim] : dims)
    names.push_back(fmt::format("'{}' dim {}", arg_name(arg), dim));
  log_line(
      fmt::format("kiln: '{}' keeps {} static, as {}", options_.name, fmt::join(names, ", "), why));
}

void CompiledFunctionCore::specialize(const DimSet& dims, DimSet& candidates) {
  for (const auto& d : dims) {
    specialized_.insert(d);
    candidates.erase(d);
  }
}

CompiledFunctionCore::DimSet CompiledFunctionCore::backward_demotions(
    const JointGraph& joint, const Entry& e, std::span<const CallArg> args,
    std::optional<Trace>& probe, const SymbolAssignment& sym, const DimSet& candidates) const {
  // The backward must serve every size the forward serves: its rules may not read a symbolic
  // size, and its trace must follow the symbols at the probe sizes too.
  std::string why = joint.read_opaque ? "a derivative rule read an untracked size" : "";
  if (why.empty() && probe) {
    try {
      Graph probe_forward = std::move(probe->graph);
      probe_forward.symbols = e.graph.symbols;
      graph::run_pipeline(probe_forward, graph::Pipeline::trace);
      Graph probe_joint = build_joint_graph(probe_forward, args).graph;
      if (!match_traces(joint.graph, probe_joint, sym.traced, sym.probe))
        why = fmt::format("traced at other sizes it differs ({})",
                          graph::structural_difference(joint.graph, probe_joint)
                              .value_or("a size does not follow its symbols"));
    } catch (const Error& err) {
      why = fmt::format("it cannot be traced at other sizes ({})", err.what());
    }
  }
  DimSet demote;
  for (const auto& c : candidates)
    if (!why.empty() || joint.read_symbols.count(sym.arg_symbols[c.first][c.second]))
      demote.insert(c);
  if (why.empty() && !demote.empty()) why = "a derivative rule read their sizes";
  if (!demote.empty())
    log_specialized(demote, fmt::format("the backward does not serve every size ({})", why));
  if (!demote.empty() && log_enabled(LogTopic::aot))
    log_line(
        fmt::format("kiln: aot: the backward of '{}' does not serve every size of {} dynamic "
                    "dims ({}); retracing with them static",
                    options_.name, demote.size(), why));
  return demote;
}

CompiledFunctionCore::DimSet CompiledFunctionCore::compile_for_training(
    Entry& e, std::span<const CallArg> args, std::optional<Trace>& probe,
    const SymbolAssignment& sym, const DimSet& candidates) const {
  std::optional<JointGraph> joint;
  try {
    graph::PassDumpScope dump(dump_prefix());
    joint = build_joint_graph(e.graph, args);
  } catch (const Error& err) {
    e.aot_fallback = err.what();
  }
  // No output carries a gradient (an argmax of a parameter): the forward plan serves, as no
  // history would be recorded eagerly either.
  if (joint && joint->grad_targets.empty()) joint.reset();
  if (joint && !e.graph.symbols.empty()) {
    DimSet demote = backward_demotions(*joint, e, args, probe, sym, candidates);
    if (!demote.empty()) return demote;
  }
  if (joint) {
    try {
      graph::PassDumpScope dump(dump_prefix());
      auto program = std::make_shared<AotProgram>(*joint, options_.name);
      if (options_.cuda_graphs || cuda_graphs_from_env())
        program->use_cuda_graphs(options_.cuda_graph_limit, graph_refusal(e.traced, e.graph));
      e.aot = std::move(program);
    } catch (const Error& err) {
      e.aot_fallback = err.what();
    }
  }
  if (!e.aot_fallback.empty() && log_enabled(LogTopic::aot))
    log_line(fmt::format("kiln: aot: '{}' runs node by node through autograd: {}", options_.name,
                         e.aot_fallback));
  return {};
}

GuardSet CompiledFunctionCore::guards_for(const Graph& g, std::span<const CallArg> args,
                                          const std::vector<std::vector<int>>& arg_symbols) const {
  GuardSet gs;
  gs.grad_enabled = grad_enabled();
  gs.autocast = autocast_state();
  gs.matmul_tf32 = codegen::allow_tf32();
  for (const nn::Module* declared : options_.modules)
    for (const auto& [name, m] : declared->named_modules())
      gs.modules.push_back({m, name, m->is_training()});
  gs.num_symbols = static_cast<int>(g.symbols.size());
  for (int w : g.mutated_inputs)
    if (g.input_of(w)->kind == InputKind::argument)
      gs.written_args.push_back(g.input_of(w)->arg_index);
  gs.whole = divisions(g);
  gs.at_least_two = subtractions(g);
  for (std::size_t i = 0; i < args.size(); ++i) {
    gs.arg_is_tensor.push_back(args[i].is_tensor);
    gs.arg_names.push_back(arg_name(i));
    if (!args[i].is_tensor) {
      gs.scalars.push_back({static_cast<int>(i), args[i].scalar, arg_name(i)});
      continue;
    }
    const Tensor& t = *args[i].tensor;
    gs.tensors.push_back({static_cast<int>(i), nullptr, Tensor(), arg_name(i), t.device(),
                          t.dtype(), t.impl().shape, arg_symbols[i],
                          stride_class(t.impl().shape, t.strides()), t.requires_grad()});
  }
  for (const auto& in : g.inputs) {
    if (in.kind != InputKind::captured && in.kind != InputKind::state) continue;
    const Tensor& t = in.kind == InputKind::state ? *in.slot : in.tensor;
    gs.tensors.push_back({-1, in.slot, in.kind == InputKind::captured ? t : Tensor(), in.name,
                          t.device(), t.dtype(), t.impl().shape, std::vector<int>(t.dim(), -1),
                          stride_class(t.impl().shape, t.strides()), t.requires_grad()});
  }
  return gs;
}

CompiledFunctionCore::Entry CompiledFunctionCore::make_entry(std::span<const CallArg> args,
                                                             InvokeRef invoke, DimSet candidates) {
  for (;;) {
    SymbolAssignment sym = assign_symbols(args, candidates);
    Trace trace = run_trace(args, invoke, sym.arg_symbols, sym.traced);
    check_written_inputs_unaliased(trace.graph, args, options_.name);
    std::optional<Trace> probe;
    if (!sym.symbols.empty()) {
      bool matched = false;
      std::string differs = "traced at other sizes it differs";
      try {
        probe = run_trace(args, invoke, sym.arg_symbols, sym.probe);
        matched = match_traces(trace.graph, probe->graph, sym.traced, sym.probe);
        if (auto what = graph::structural_difference(trace.graph, probe->graph))
          differs += fmt::format(" ({})", *what);
      } catch (const Error& err) {
        matched = false;  // the function cannot run at other sizes as traced
        differs = fmt::format("it cannot be traced at other sizes ({})", err.what());
      }
      // A compiled plan sizes what it computes from the symbols, so an untracked size there
      // specializes as a read does; the CPU runs ops on real tensors and needs no sizes.
      std::string untracked =
          runs_on_device(trace.graph, args) ? computes_untracked_size(trace.graph) : "";
      std::string small = size_below_two(trace.graph, sym.traced);
      std::string why = !matched            ? differs
                        : trace.read_opaque ? "it read an untracked size"
                        : !untracked.empty()
                            ? fmt::format("{} computes a size its symbols do not track", untracked)
                        : !small.empty() ? fmt::format("{} is below 2 where traced", small)
                                         : "";
      DimSet demote;
      for (const auto& c : candidates) {
        int s = sym.arg_symbols[c.first][c.second];
        if (!why.empty() || trace.read_symbols.count(s)) demote.insert(c);
      }
      if (!demote.empty()) {
        log_specialized(demote, why.empty() ? "it read their sizes as numbers" : why);
        specialize(demote, candidates);
        continue;
      }
    }
    Entry e;
    e.traced = trace.graph;
    e.traced.symbols = sym.symbols;
    e.graph = std::move(trace.graph);
    e.graph.symbols = sym.symbols;
    e.arg_symbols = sym.arg_symbols;
    {
      graph::PassDumpScope dump(dump_prefix());
      graph::run_pipeline(e.graph, graph::Pipeline::trace);
    }
    bool on_device = runs_on_device(e.graph, args);
    // Guards pin grad mode and every requires_grad: this entry's calls all need gradients, or
    // none does.
    if (on_device && grad_enabled() && needs_grad(e.graph, args)) {
      DimSet demote = compile_for_training(e, args, probe, sym, candidates);
      if (!demote.empty()) {
        specialize(demote, candidates);
        continue;
      }
    }
    e.fusion = graph::partition(e.graph, {}, &codegen::kernel_coverage());
    if (on_device && !e.aot && e.aot_fallback.empty()) e.plan.emplace(e.graph, e.fusion);
    if (e.plan && (options_.cuda_graphs || cuda_graphs_from_env()))
      e.graphs =
          std::make_shared<PlanGraphs>(options_.cuda_graph_limit, graph_refusal(e.traced, e.graph));
    e.guards = guards_for(e.graph, args, sym.arg_symbols);
    e.written = written_input_indices(e.graph);
    return e;
  }
}

void CompiledFunctionCore::verify(const Entry& entry, std::span<const CallArg> args,
                                  InvokeRef invoke,
                                  std::span<const std::int64_t> symbol_values) const {
  std::vector<std::int64_t> sizes(symbol_values.begin(), symbol_values.end());
  Trace now = run_trace(args, invoke, entry.arg_symbols, sizes);
  auto difference = graph::structural_difference(entry.traced, now.graph);
  KILN_CHECK_AS(StaleCaptureError, !difference,
                "compile: '{}' (KILN_JIT_VERIFY) no longer matches its trace: {}. A compiled "
                "function uses what it captured (tensors, numbers) as it was when traced; pass "
                "what changes as an argument, or declare modules in CompileOptions::modules",
                options_.name, *difference);
}

void CompiledFunctionCore::report(const Entry& e, std::size_t index) const {
  if (index > 0 && log_enabled(LogTopic::recompiles))
    log_line(fmt::format("kiln: recompiling '{}' (entry {}): {}", options_.name, index, e.reason));
  if (log_enabled(LogTopic::guards))
    log_line(
        fmt::format("kiln: guards of '{}' entry {}:\n{}", options_.name, index, e.guards.str()));
  if (log_enabled(LogTopic::graph))
    log_line(fmt::format("kiln: graph of '{}' entry {}:\n{}", options_.name, index, e.graph.str()));
  if (log_enabled(LogTopic::fusion)) log_line(fmt::format("kiln: {}", e.fusion.str(e.graph)));
  if (e.aot && log_enabled(LogTopic::aot))
    log_line(fmt::format("kiln: aot: '{}' entry {}:\n{}", options_.name, index, e.aot->str()));
  if (const char* dir = std::getenv("KILN_DUMP_DIR")) {
    std::string path = fmt::format("{}/{}.{}.dot", dir, options_.name, index);
    std::ofstream out(path);
    out << e.fusion.dot(e.graph);
    if (!out) log_line(fmt::format("kiln: cannot write {} (KILN_DUMP_DIR)", path));
  }
  if (!report::report_dir().empty())
    report::record_entry(this, options_.name,
                         {static_cast<int>(index), e.reason, e.guards, e.graph, e.fusion,
                          e.plan ? &*e.plan : nullptr, e.aot.get(), e.aot_fallback, e.compile_ms});
}

std::shared_ptr<const CompiledFunctionCore::Entry> CompiledFunctionCore::find_entry(
    std::span<const CallArg> args, std::vector<std::int64_t>& symbol_values) {
  for (auto& e : entries_) {
    if (!e->guards.check(args, symbol_values)) continue;
    ++e->hits;
    ++stats_.hits;
    return e;
  }
  return nullptr;
}

std::vector<Tensor> CompiledFunctionCore::call(std::span<const CallArg> args, InvokeRef invoke) {
  std::vector<std::int64_t> symbol_values;
  std::shared_ptr<const Entry> entry;
  std::int64_t call = ++stats_.calls;
  bool verify_now = options_.verify_every > 0 && call % options_.verify_every == 0;
  if (verify_now) ++stats_.verifications;
  // A warm call: the guard check under a shared lock, so threads calling one function do not
  // wait for each other.
  {
    std::shared_lock lock(mutex_);
    entry = find_entry(args, symbol_values);
  }
  if (!entry) {
    std::unique_lock lock(mutex_);
    // Another thread may have traced this call's entry meanwhile.
    entry = find_entry(args, symbol_values);
    if (!entry) {
      // Explain the miss against the closest entry: the one that passed the most checks.
      GuardFailure failure;
      const Entry* closest = nullptr;
      for (const auto& e : entries_) {
        GuardFailure f;
        e->guards.check(args, symbol_values, &f);
        if (!closest || f.passed >= failure.passed) {  // ties: the newest entry
          failure = std::move(f);
          closest = e.get();
        }
      }
      if (closest) last_reason_ = failure.reason;
      if (static_cast<int>(entries_.size()) >= options_.recompile_limit) {
        KILN_CHECK(!options_.error_on_recompile_limit,
                   "compile: '{}' reached its recompile limit ({} entries); last reason: {}",
                   options_.name, entries_.size(), last_reason_);
        if (!warned_limit_) {
          warned_limit_ = true;
          log_line(
              fmt::format("kiln: '{}' reached its recompile limit ({} entries) and now runs "
                          "eagerly; last reason: {}",
                          options_.name, entries_.size(), last_reason_));
        }
        ++stats_.eager_calls;
        entry = nullptr;
      } else {
        KILN_CHECK(!options_.error_on_recompile || entries_.empty(),
                   "compile: '{}' would recompile (error_on_recompile is set): {}", options_.name,
                   last_reason_);
        // Dims whose size changed become symbolic for the next trace.
        if (options_.dynamic == DynamicMode::automatic &&
            failure.kind == GuardFailure::Kind::size) {
          for (const auto& g : closest->guards.tensors) {
            if (g.arg_index < 0) continue;
            const Shape& now = args[g.arg_index].tensor->impl().shape;
            if (now.size() != g.sizes.size()) continue;
            for (std::size_t d = 0; d < now.size(); ++d)
              if (g.symbols[d] < 0 && now[d] != g.sizes[d])
                dynamic_.insert({g.arg_index, static_cast<int>(d)});
          }
        }
        DimSet candidates;
        for (std::size_t i = 0; i < args.size(); ++i) {
          if (!args[i].is_tensor) continue;
          const TensorImpl& impl = args[i].tensor->impl();
          for (std::size_t d = 0; d < impl.shape.size(); ++d) {
            std::pair<int, int> key{static_cast<int>(i), static_cast<int>(d)};
            bool wanted = options_.dynamic == DynamicMode::always || dynamic_.count(key) ||
                          (d < 64 && (impl.dynamic_dims >> d & 1));
            // Sizes 0 and 1 change broadcasting and emptiness: they stay specialized.
            if (wanted && options_.dynamic != DynamicMode::never && impl.shape[d] >= 2 &&
                !specialized_.count(key))
              candidates.insert(key);
          }
        }
        auto started = std::chrono::steady_clock::now();
        auto e = std::make_shared<Entry>(make_entry(args, invoke, std::move(candidates)));
        e->compile_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
                .count();
        e->reason = entries_.empty() ? "first call" : last_reason_;
        KILN_CHECK(e->guards.check(args, symbol_values),
                   "compile: internal error: a new entry of '{}' rejects the call it was traced "
                   "for",
                   options_.name);
        ++e->hits;
        ++stats_.compiles;
        entries_.push_back(e);
        report(*e, entries_.size() - 1);
        entry = e;
      }
    }
  }
  if (!entry) return invoke(args);
  if (verify_now) verify(*entry, args, invoke, symbol_values);
  // An entry that draws random numbers runs one call at a time: its draws' inputs are slots.
  std::unique_lock draws_lock(*entry->draws_mutex, std::defer_lock);
  if (!entry->traced.random_draws.empty()) {
    draws_lock.lock();
    graph::draw_random_inputs(entry->traced, symbol_values);
  }
  // A kernel call: no step of its plans falls back to primitive ops, whether the plan says so
  // when built or a step found so at run time (counted after the forward has run; a backward
  // that fell back in an earlier call keeps later calls of the entry out too).
  auto all_kernels = [](const KernelPlan& plan) {
    return plan.fallback_steps() == 0 && !plan.fell_back_at_run_time();
  };
  std::vector<Tensor> out;
  if (entry->aot) {
    out = entry->aot->run(args, symbol_values);
    if (all_kernels(entry->aot->forward_plan()) && all_kernels(entry->aot->backward_plan()))
      ++stats_.kernel_calls;
  } else if (entry->plan && !(grad_enabled() && needs_grad(entry->graph, args))) {
    // A plan's kernels record no autograd history: an entry whose calls need gradients and that
    // could not be compiled for training (aot_fallback says why) runs node by node.
    out = entry->graphs ? entry->graphs->run(*entry->plan, entry->graph, args, symbol_values)
                        : entry->plan->run(entry->graph, args, symbol_values);
    if (all_kernels(*entry->plan)) ++stats_.kernel_calls;
  } else {
    out = run_reference(entry->graph, args, symbol_values);
  }
  if (!entry->graph.mutated_inputs.empty()) write_back(entry->graph, entry->written, args, out);
  return out;
}

int CompiledFunctionCore::lookup(std::span<const CallArg> args) const {
  std::shared_lock lock(mutex_);
  thread_local std::vector<std::int64_t> symbol_values;
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i]->guards.check(args, symbol_values)) return static_cast<int>(i);
  return -1;
}

}  // namespace kiln::jit
