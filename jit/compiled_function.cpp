// Tracing into entries, guard-checked reuse, and dynamic dims.
//
// Dynamic dims are proven, not assumed: a trace with symbolic dims is recorded twice, once with
// the call's sizes and once with every symbol moved to a different probe size. If the two
// graphs differ anywhere that is not a size following a symbol (a constant computed from a
// size, a slice bound, a branch taken on a size), or if user code read a symbolic size, those
// dims are specialized instead. Symbols are shared by dims of equal size ("duck sizing").
#include "jit/compiled_function.h"

#include <cstdlib>
#include <fstream>
#include <map>

#include "autograd/grad_mode.h"
#include "graph/passes.h"
#include "graph/tracer.h"
#include "jit/executor.h"
#include "jit/log.h"

namespace kiln::jit {

using graph::Graph;
using graph::InputKind;

void mark_dynamic(const Tensor& t, std::int64_t dim) {
  dim = normalize_dim(dim, t.dim(), "mark_dynamic");
  KILN_CHECK_AS(IndexError, dim < 64, "mark_dynamic: dim {} is beyond the 64 supported", dim);
  t.impl().dynamic_dims |= std::uint64_t{1} << dim;
}

namespace {

struct Trace {
  Graph graph;
  std::set<std::pair<int, std::int64_t>> reads;
};

// Runs `invoke` on placeholders: argument i's dim d has size sizes[symbol] when it has a symbol.
Trace run_trace(const std::string& name, std::span<const CallArg> args, InvokeRef invoke,
                const std::vector<std::string>& arg_names,
                const std::vector<std::vector<int>>& arg_symbols,
                const std::vector<std::int64_t>& symbol_sizes) {
  graph::Tracer tracer(name);
  std::vector<CallArg> traced(args.begin(), args.end());
  std::vector<Tensor> placeholders(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_tensor) continue;
    Shape shape = args[i].tensor->impl().shape;
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (arg_symbols[i][d] >= 0) shape[d] = symbol_sizes[arg_symbols[i][d]];
    placeholders[i] = tracer.add_argument(*args[i].tensor, static_cast<int>(i), arg_names[i],
                                          shape, arg_symbols[i]);
    traced[i].tensor = &placeholders[i];
  }
  {
    InterceptorScope scope(&tracer);
    NoGradGuard no_grad;
    std::vector<Tensor> outputs = invoke(traced);
    tracer.set_outputs(outputs);
  }
  traced.clear();
  placeholders.clear();
  tracer.classify_lifted();
  return {std::move(tracer.graph()), tracer.size_reads()};
}

// The symbol whose sizes in the two traces are (a, b), -2 if the size varies otherwise, -1 if
// it does not vary.
int symbol_for(std::int64_t a, std::int64_t b, const std::vector<std::int64_t>& s1,
               const std::vector<std::int64_t>& s2) {
  if (a == b) return -1;
  for (std::size_t s = 0; s < s1.size(); ++s)
    if (s1[s] == a && s2[s] == b) return static_cast<int>(s);
  return -2;
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.impl().shape != b.impl().shape || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

// True when `b` (probe trace) differs from `a` only in sizes that follow symbols; then `a`'s
// values and reshape/expand attributes are annotated with those symbols.
bool match_traces(Graph& a, const Graph& b, const std::vector<std::int64_t>& s1,
                  const std::vector<std::int64_t>& s2) {
  if (a.values.size() != b.values.size() || a.inputs.size() != b.inputs.size() ||
      a.nodes.size() != b.nodes.size() || a.outputs != b.outputs)
    return false;
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const auto &x = a.inputs[i], &y = b.inputs[i];
    if (x.kind != y.kind || x.arg_index != y.arg_index || x.value != y.value) return false;
    if (x.kind == InputKind::captured && !x.tensor.same(y.tensor)) return false;
    if (x.kind == InputKind::constant && !same_constant(x.tensor, y.tensor)) return false;
  }
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    auto& x = a.nodes[i];
    const auto& y = b.nodes[i];
    const OpAttrs &p = x.attrs, &q = y.attrs;
    if (x.op != y.op || x.inputs != y.inputs || p.dims != q.dims || p.keepdim != q.keepdim ||
        p.dim != q.dim || p.start != q.start || p.end != q.end || p.step != q.step ||
        p.dtype != q.dtype || !(p.value == q.value) || p.shape.size() != q.shape.size())
      return false;
    x.shape_symbols.clear();
    bool symbolic = false;
    std::vector<int> shape_symbols(p.shape.size(), -1);
    for (std::size_t d = 0; d < p.shape.size(); ++d) {
      int s = symbol_for(p.shape[d], q.shape[d], s1, s2);
      if (s == -2) return false;
      shape_symbols[d] = s;
      symbolic = symbolic || s >= 0;
    }
    if (symbolic) x.shape_symbols = std::move(shape_symbols);
  }
  for (std::size_t v = 0; v < a.values.size(); ++v) {
    const Shape &x = a.values[v].meta.shape, &y = b.values[v].meta.shape;
    if (x.size() != y.size() || a.values[v].meta.dtype != b.values[v].meta.dtype) return false;
    for (std::size_t d = 0; d < x.size(); ++d)
      a.values[v].symbols[d] = symbol_for(x[d], y[d], s1, s2);
  }
  return true;
}

}  // namespace

CompiledFunctionCore::CompiledFunctionCore(CompileOptions options) : options_(std::move(options)) {
  KILN_CHECK(options_.recompile_limit >= 1, "compile: recompile_limit must be >= 1, got {}",
             options_.recompile_limit);
}

std::string CompiledFunctionCore::arg_name(std::size_t i) const {
  return i < options_.arg_names.size() ? options_.arg_names[i] : fmt::format("arg{}", i);
}

CompiledFunctionCore::Entry CompiledFunctionCore::make_entry(std::span<const CallArg> args,
                                                             InvokeRef invoke, DimSet candidates) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < args.size(); ++i) names.push_back(arg_name(i));
  for (;;) {
    // Duck sizing: candidate dims of equal size share one symbol.
    std::vector<std::vector<int>> arg_symbols(args.size());
    std::vector<std::int64_t> s1, s2;
    std::map<std::int64_t, int> symbol_of_size;
    std::vector<graph::Symbol> symbols;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_tensor) continue;
      const Shape& shape = args[i].tensor->impl().shape;
      arg_symbols[i].assign(shape.size(), -1);
      for (std::size_t d = 0; d < shape.size(); ++d) {
        if (!candidates.count({static_cast<int>(i), static_cast<int>(d)})) continue;
        auto [it, fresh] = symbol_of_size.emplace(shape[d], static_cast<int>(s1.size()));
        if (fresh) {
          s1.push_back(shape[d]);
          s2.push_back(shape[d] + 1009 + 17 * static_cast<std::int64_t>(s2.size()));
          symbols.push_back({shape[d], static_cast<int>(i), static_cast<int>(d)});
        }
        arg_symbols[i][d] = it->second;
      }
    }
    Trace trace = run_trace(options_.name, args, invoke, names, arg_symbols, s1);
    DimSet demote;
    if (!symbols.empty()) {
      bool matched = false;
      try {
        Trace probe = run_trace(options_.name, args, invoke, names, arg_symbols, s2);
        matched = match_traces(trace.graph, probe.graph, s1, s2);
      } catch (const Error&) {
        matched = false;  // the function cannot run at other sizes as traced
      }
      std::set<int> read_symbols;
      bool read_derived = !matched;
      for (auto [value, dim] : trace.reads) {
        const auto& syms = trace.graph.values[value].symbols;
        for (std::size_t d = 0; d < syms.size(); ++d) {
          if (dim >= 0 && static_cast<std::int64_t>(d) != dim) continue;
          if (syms[d] >= 0) read_symbols.insert(syms[d]);
          if (syms[d] == -2) read_derived = true;
        }
      }
      for (const auto& c : candidates) {
        int s = arg_symbols[c.first][c.second];
        if (read_derived || read_symbols.count(s)) demote.insert(c);
      }
    }
    if (!demote.empty()) {
      for (const auto& d : demote) {
        specialized_.insert(d);
        candidates.erase(d);
      }
      continue;
    }
    Entry e;
    e.graph = std::move(trace.graph);
    e.graph.symbols = std::move(symbols);
    graph::optimize(e.graph);
    GuardSet& gs = e.guards;
    gs.num_symbols = static_cast<int>(e.graph.symbols.size());
    for (std::size_t i = 0; i < args.size(); ++i) {
      gs.arg_is_tensor.push_back(args[i].is_tensor);
      gs.arg_names.push_back(names[i]);
      if (!args[i].is_tensor) {
        gs.scalars.push_back({static_cast<int>(i), args[i].scalar, names[i]});
        continue;
      }
      const Tensor& t = *args[i].tensor;
      gs.tensors.push_back({static_cast<int>(i), Tensor(), names[i], t.device(), t.dtype(),
                            t.impl().shape, arg_symbols[i], stride_class(t), t.requires_grad()});
    }
    for (const auto& in : e.graph.inputs) {
      if (in.kind != InputKind::captured) continue;
      const Tensor& t = in.tensor;
      gs.tensors.push_back({-1, t, in.name, t.device(), t.dtype(), t.impl().shape,
                            std::vector<int>(t.dim(), -1), stride_class(t), t.requires_grad()});
    }
    return e;
  }
}

void CompiledFunctionCore::report(const Entry& e, std::size_t index) const {
  if (index > 0 && log_enabled(LogTopic::recompiles))
    log_line(fmt::format("kiln: recompiling '{}' (entry {}): {}", options_.name, index, e.reason));
  if (log_enabled(LogTopic::guards))
    log_line(
        fmt::format("kiln: guards of '{}' entry {}:\n{}", options_.name, index, e.guards.str()));
  if (log_enabled(LogTopic::graph))
    log_line(fmt::format("kiln: graph of '{}' entry {}:\n{}", options_.name, index, e.graph.str()));
  if (const char* dir = std::getenv("KILN_DUMP_DIR")) {
    std::string path = fmt::format("{}/{}.{}.dot", dir, options_.name, index);
    std::ofstream out(path);
    out << e.graph.dot();
    if (!out) log_line(fmt::format("kiln: cannot write {} (KILN_DUMP_DIR)", path));
  }
}

std::vector<Tensor> CompiledFunctionCore::call(std::span<const CallArg> args, InvokeRef invoke) {
  std::vector<std::int64_t> symbol_values;
  std::shared_ptr<const Entry> entry;
  {
    std::lock_guard lock(mutex_);
    ++stats_.calls;
    for (auto& e : entries_) {
      if (e->guards.check(args, symbol_values)) {
        ++e->hits;
        ++stats_.hits;
        entry = e;
        break;
      }
    }
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
        auto e = std::make_shared<Entry>(make_entry(args, invoke, std::move(candidates)));
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
  return execute(entry->graph, args, symbol_values);
}

int CompiledFunctionCore::lookup(std::span<const CallArg> args) const {
  std::lock_guard lock(mutex_);
  thread_local std::vector<std::int64_t> symbol_values;
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i]->guards.check(args, symbol_values)) return static_cast<int>(i);
  return -1;
}

namespace {
std::string indent(const std::string& text, int by) {
  std::string out, pad(by, ' ');
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += pad + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}
}  // namespace

std::string CompiledFunctionCore::explain() const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format(
      "compiled function '{}': {} calls, {} hits, {} compiles, {} eager calls, {} entries\n",
      options_.name, stats_.calls, stats_.hits, stats_.compiles, stats_.eager_calls,
      entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    out += fmt::format("entry {} ({} hits), traced because: {}\n  guards ({} checks):\n{}", i,
                       e.hits, e.reason, e.guards.count(), indent(e.guards.str(), 2));
    out += "  graph:\n" + indent(e.graph.str(), 4);
  }
  return out;
}

std::string CompiledFunctionCore::graph_dot(int entry) const {
  std::lock_guard lock(mutex_);
  KILN_CHECK(!entries_.empty(), "graph_dot: '{}' has not been traced yet", options_.name);
  if (entry < 0) entry = static_cast<int>(entries_.size()) - 1;
  KILN_CHECK_AS(IndexError, entry < static_cast<int>(entries_.size()),
                "graph_dot: entry {} does not exist ('{}' has {})", entry, options_.name,
                entries_.size());
  return entries_[entry]->graph.dot();
}

std::size_t CompiledFunctionCore::num_entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

const graph::Graph& CompiledFunctionCore::graph(int entry) const {
  std::lock_guard lock(mutex_);
  return entries_.at(entry)->graph;
}

const GuardSet& CompiledFunctionCore::guards(int entry) const {
  std::lock_guard lock(mutex_);
  return entries_.at(entry)->guards;
}

std::vector<std::string> CompiledFunctionCore::recompile_reasons() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (std::size_t i = 1; i < entries_.size(); ++i) out.push_back(entries_[i]->reason);
  return out;
}

CompiledStats CompiledFunctionCore::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace kiln::jit
