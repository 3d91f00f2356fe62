// Giving the values a plan's kernels write their buffers (see buffer_assignment.h).
#include "jit/buffer_assignment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "jit/codegen/skinny_gemm.h"

namespace kiln::jit {
namespace {

// Offsets are multiples of this: what cuMemAlloc guarantees, so vector loads stay aligned.
constexpr std::int64_t kBufferAlignment = 256;

std::int64_t aligned(std::int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

std::string kilobytes(std::int64_t bytes) {
  return fmt::format("{:.1f} kB", static_cast<double>(bytes) / 1e3);
}

// Ops whose result may share its input's storage: the views, and a transfer to the device the
// input is already on. Every other op writes memory of its own (runtime/ops.def).
bool may_alias_input(OpId op) {
  OpClass c = op_class(op);
  return c == OpClass::view || c == OpClass::transfer;
}

}  // namespace

std::int64_t Buffer::bytes(std::span<const std::int64_t> symbol_values) const {
  std::int64_t n = 1;
  for (const SymExpr& s : sizes) {
    auto v = s.evaluate(symbol_values);
    KILN_CHECK(v.has_value(), "compile: buffer size {} has no value in this call", s.str());
    n *= *v;
  }
  return n * static_cast<std::int64_t>(itemsize);
}

std::vector<int> kernel_writes(const PlanStep& step) {
  if (const auto* k = step.as<KernelStep>()) return k->kernel.writes();
  if (const auto* s = step.as<SkinnyGemmStep>()) return s->gemm->writes;
  std::vector<int> out;
  if (const auto* c = step.as<ComboStep>())
    for (const auto& m : c->members)
      out.insert(out.end(), m.kernel.writes().begin(), m.kernel.writes().end());
  return out;
}

// The phases of BufferAssignment's constructor, over one graph and its steps.
struct BufferAssigner {
  const graph::Graph& g;
  const std::vector<PlanStep>& steps;
  std::vector<int> root;      // per value: the value whose storage it may share (itself if none)
  std::vector<bool> escapes;  // per root: some graph input or output may share its storage
  std::vector<int> last_use;  // per root: the last position reading it or a value sharing it
  std::vector<bool> walked;   // per value: written by a kernel walking its domain reordered
  BufferAssignment& out;

  BufferAssigner(const graph::Graph& graph, const std::vector<PlanStep>& s, BufferAssignment& a)
      : g(graph),
        steps(s),
        root(graph.values.size()),
        escapes(graph.values.size(), false),
        last_use(graph.values.size(), -1),
        walked(graph.values.size(), false),
        out(a) {}

  // Whether a call's symbols give the value's bytes (no opaque size: its kernel allocates it).
  bool sized(int v) const {
    const auto& sizes = g.values[v].sizes;
    return std::none_of(sizes.begin(), sizes.end(), [](const SymExpr& s) { return s.is_opaque(); });
  }

  void find_roots() {
    std::iota(root.begin(), root.end(), 0);
    for (const graph::Node& n : g.nodes)  // nodes are in topological order
      if (may_alias_input(n.op) && !n.inputs.empty())
        for (int v : n.outputs) root[v] = root[n.inputs[0]];
    for (const auto& in : g.inputs) escapes[root[in.value]] = true;
    for (int v : g.outputs) escapes[root[v]] = true;
  }

  void find_last_uses() {
    for (std::size_t i = 0; i < steps.size(); ++i)
      for (int n : steps[i].nodes)
        for (int v : g.nodes[n].inputs)
          last_use[root[v]] = std::max(last_use[root[v]], static_cast<int>(i));
  }

  // Whether kernel `k` may write `w` over the memory of `r` (a value it reads, or not): it
  // walks its domain in order, element by element (pointwise, not index-aware), `w` has the
  // domain's sizes and `r`'s bytes, and `k` reads `r` only at the element it writes, or not
  // at all.
  bool writable_over(const KernelStep& k, int w, int r) const {
    const codegen::PointwiseKernel* p = k.kernel.pointwise();
    if (!p || p->indexed || !k.order.empty()) return false;
    const auto& sizes = g.values[w].sizes;
    if (k.domain != sizes || g.values[r].sizes != sizes ||
        itemsize(g.values[r].meta.dtype) != itemsize(g.values[w].meta.dtype))
      return false;
    for (int other : p->reads)
      if (other != r && root[other] == root[r]) return false;  // a view of it, read elsewhere
    return true;
  }

  // The input of `k` that `w` can be written over: an arena value `k` reads last.
  int in_place_input(const KernelStep& k, int position, int w,
                     const std::vector<bool>& taken) const {
    const codegen::PointwiseKernel* p = k.kernel.pointwise();
    if (!p) return -1;
    for (int r : p->reads) {
      if (root[r] != r || taken[r] || walked[r] || out.buffer_of(r) < 0) continue;
      if (last_use[r] == position && writable_over(k, w, r)) return r;
    }
    return -1;
  }

  // The final values of the inputs the function writes that their kernel can write into the
  // input's memory: after every read of the input, the value returned only as that write.
  void assign_written_inputs() {
    out.written_into_.assign(g.values.size(), -1);
    std::vector<int> producer_step(g.values.size(), -1);
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (const auto* k = steps[i].as<KernelStep>())
        for (int w : k->kernel.writes()) producer_step[w] = static_cast<int>(i);
    const std::size_t returned = g.num_returned();
    for (std::size_t j = 0; j < g.mutated_inputs.size(); ++j) {
      const int input = g.mutated_inputs[j], final_value = g.outputs[returned + j];
      if (std::count(g.outputs.begin(), g.outputs.end(), final_value) != 1 ||
          g.values[final_value].meta.dtype != g.values[input].meta.dtype)
        continue;
      // An output viewing the input's old value keeps it.
      if (std::any_of(g.outputs.begin(), g.outputs.end(), [&](int o) { return root[o] == input; }))
        continue;
      const int at = producer_step[final_value];
      if (at >= 0) {
        if (last_use[root[input]] <= at &&
            writable_over(*steps[at].as<KernelStep>(), final_value, input))
          out.written_into_[final_value] = input;
      } else if (int step = copies_rows_into(input, final_value); step >= 0) {
        out.written_into_[final_value] = input;
        out.rows_written_.push_back({step, final_value, input});
      }
    }
  }

  // The step of index_copy's result `final_value` over `input` itself where it comes after
  // every other read of the input (its kernel then writes only the source's slices into the
  // input), else -1.
  int copies_rows_into(int input, int final_value) const {
    const int producer = g.values[final_value].producer;
    if (producer < 0 || g.nodes[producer].op != OpId::index_copy ||
        g.nodes[producer].inputs.at(0) != input)
      return -1;
    // A source or index that views the input would be read while the kernel writes it.
    for (std::size_t k = 1; k < g.nodes[producer].inputs.size(); ++k)
      if (root[g.nodes[producer].inputs[k]] == root[input]) return -1;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto& nodes = steps[i].nodes;
      auto it = std::find(nodes.begin(), nodes.end(), producer);
      if (it == nodes.end()) continue;
      if (!steps[i].as<EagerStep>()) return -1;  // only an eager step runs the rows kernel
      // No node after it in its step reads the input (or a view of it).
      for (auto later = std::next(it); later != nodes.end(); ++later)
        for (int v : g.nodes[*later].inputs)
          if (root[v] == root[input]) return -1;
      const int position = static_cast<int>(i);
      return last_use[root[input]] <= position ? position : -1;
    }
    return -1;
  }

  void assign() {
    out.buffer_of_.assign(g.values.size(), -1);
    out.writes_of_step_.resize(steps.size());
    std::vector<bool> taken(g.values.size(), false);  // inputs already written over
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const int position = static_cast<int>(i);
      for (int w : kernel_writes(steps[i])) {
        if (escapes[w] || root[w] != w || !sized(w)) continue;
        int over = -1;
        if (const auto* k = steps[i].as<KernelStep>()) {
          over = in_place_input(*k, position, w, taken);
          walked[w] = !k->order.empty();
        }
        int b;
        if (over >= 0) {
          taken[over] = true;
          b = out.buffer_of_[over];
          ++out.in_place_;
        } else {
          b = static_cast<int>(out.buffers_.size());
          Buffer buffer;
          buffer.live = {position, position};
          buffer.sizes = g.values[w].sizes;
          buffer.itemsize = itemsize(g.values[w].meta.dtype);
          out.buffers_.push_back(std::move(buffer));
        }
        Buffer& buffer = out.buffers_[b];
        buffer.values.push_back(w);
        buffer.live.last = std::max({buffer.live.last, position, last_use[w]});
        out.buffer_of_[w] = b;
        out.writes_of_step_[i].push_back(w);
      }
    }
  }
};

BufferAssignment::BufferAssignment(const graph::Graph& g, const std::vector<PlanStep>& steps) {
  BufferAssigner a(g, steps, *this);
  a.find_roots();
  a.find_last_uses();
  a.assign();
  a.assign_written_inputs();
}

namespace {

// Offsets for `buffers` placed one by one in `order`, each at the first gap that fits among the
// placed buffers live at the same time; the offsets and the arena's size.
std::pair<std::vector<std::int64_t>, std::int64_t> place_in_order(
    const std::vector<Buffer>& buffers, const std::vector<std::int64_t>& bytes,
    const std::vector<int>& order) {
  std::vector<std::int64_t> offsets(buffers.size(), 0);
  std::int64_t total = 0;
  std::vector<int> placed;
  std::vector<std::pair<std::int64_t, std::int64_t>> busy;
  for (int b : order) {
    const BufferInterval& live = buffers[b].live;
    busy.clear();
    for (int p : placed) {
      const BufferInterval& other = buffers[p].live;
      if (other.first <= live.last && live.first <= other.last)
        busy.emplace_back(offsets[p], offsets[p] + bytes[p]);
    }
    std::sort(busy.begin(), busy.end());
    std::int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (begin - offset >= bytes[b]) break;
      offset = std::max(offset, end);
    }
    offsets[b] = offset;
    total = std::max(total, offset + bytes[b]);
    placed.push_back(b);
  }
  return {std::move(offsets), total};
}

}  // namespace

// Two greedy orders, the smaller arena kept: by size (largest first; TFLite's and XLA's
// default), and by when each buffer is first written, largest first at one step (the order a
// stack allocator would see), which packs chains of short-lived values that size alone splits.
ArenaLayout BufferAssignment::layout(std::span<const std::int64_t> symbol_values) const {
  ArenaLayout l;
  std::vector<std::int64_t> bytes(buffers_.size());
  for (std::size_t b = 0; b < buffers_.size(); ++b)
    bytes[b] = aligned(buffers_[b].bytes(symbol_values));
  std::vector<int> by_size(buffers_.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::vector<int> by_start = by_size;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return bytes[a] > bytes[b]; });
  std::stable_sort(by_start.begin(), by_start.end(), [&](int a, int b) {
    const auto &x = buffers_[a].live, &y = buffers_[b].live;
    return x.first != y.first ? x.first < y.first : bytes[a] > bytes[b];
  });
  std::tie(l.offsets, l.bytes) = place_in_order(buffers_, bytes, by_size);
  if (auto [offsets, total] = place_in_order(buffers_, bytes, by_start); total < l.bytes) {
    l.offsets = std::move(offsets);
    l.bytes = total;
  }
  // The bound: the most bytes live at one position.
  int positions = 0;
  for (const Buffer& b : buffers_) positions = std::max(positions, b.live.last + 1);
  std::vector<std::int64_t> live_at(static_cast<std::size_t>(positions), 0);
  for (std::size_t b = 0; b < buffers_.size(); ++b)
    for (int i = buffers_[b].live.first; i <= buffers_[b].live.last; ++i) live_at[i] += bytes[b];
  for (auto v : live_at) l.live_bound = std::max(l.live_bound, v);
  return l;
}

std::string BufferAssignment::summary(const ArenaLayout& l) const {
  std::size_t values = 0;
  for (const Buffer& b : buffers_) values += b.values.size();
  return fmt::format(
      "arena {} for {} values in {} buffers (liveness bound {}, {} written in place)",
      kilobytes(l.bytes), values, buffers_.size(), kilobytes(l.live_bound), in_place_);
}

std::string BufferAssignment::step_note(std::size_t position, const ArenaLayout& layout) const {
  for (const RowsWritten& r : rows_written_)
    if (r.step == static_cast<int>(position))
      return fmt::format("writes %{} into input %{} by the source's slices alone", r.value,
                         r.input);
  if (position >= writes_of_step_.size() || writes_of_step_[position].empty()) return "";
  std::vector<std::string> parts;
  for (int v : writes_of_step_[position]) {
    int b = buffer_of_[v];
    bool over = buffers_[b].values.front() != v;
    parts.push_back(
        fmt::format("%{} at +{}{}", v, layout.offsets[b],
                    over ? fmt::format(" (in place of %{})", buffers_[b].values.front()) : ""));
  }
  return fmt::format("arena: {}", fmt::join(parts, ", "));
}

}  // namespace kiln::jit
