// Rendering and launching combo kernels (see combo_kernel.h).
#include "jit/codegen/combo_kernel.h"

#include <fmt/format.h>

#include <functional>
#include <kainjow/mustache.hpp>
#include <optional>

#include "jit/codegen/cuda_expr.h"
#include "jit/codegen/pointwise_schedule.h"
#include "jit/codegen/templates.h"

namespace kiln::jit::codegen {
namespace {

using Data = kainjow::mustache::data;

Data comma_list(const char* key, const std::vector<std::string>& items) {
  Data l(Data::type::list);
  for (std::size_t i = 0; i < items.size(); ++i) {
    Data item(key, items[i]);
    if (i + 1 == items.size()) item.set("last", true);
    l.push_back(item);
  }
  return l;
}

// A member's shape for a value it writes: the domain's, up to leading 1s (as run_pointwise).
Shape written_shape(const graph::Graph& g, int v, const Shape& domain) {
  Shape shape = domain;
  auto rank = g.values[v].sizes.size();
  while (shape.size() > rank && shape.front() == 1) shape.erase(shape.begin());
  while (shape.size() < rank) shape.insert(shape.begin(), 1);
  return shape;
}

}  // namespace

ComboKernel render_combo(const graph::Graph& g, std::span<const PointwiseKernel* const> members) {
  KILN_CHECK(!members.empty() && members.size() <= kMaxComboMembers,
             "codegen: a combo kernel of {} members (1 to {})", members.size(), kMaxComboMembers);
  ComboKernel combo;
  bool fp16 = false, bf16 = false;
  std::vector<std::string> params;
  std::vector<std::string> elements;  // per member: its element function
  Data member_list(Data::type::list);
  for (std::size_t m = 0; m < members.size(); ++m) {
    const PointwiseKernel& k = *members[m];
    KILN_CHECK(!k.element_source.empty(), "codegen: kernel '{}' cannot be a combo member", k.name);
    // Kernels of one name may differ (k_cast to bf16 and to f16): each member's own function.
    std::string element = k.element_source;
    const std::string from = k.name + "_element(", to = fmt::format("m{}_element(", m);
    for (auto at = element.find(from); at != std::string::npos; at = element.find(from, at))
      element.replace(at, from.size(), to);
    elements.push_back(std::move(element));
    fp16 = fp16 || k.uses_f16;
    bf16 = bf16 || k.uses_bf16;
    std::vector<std::string> args;
    auto note = [&](int v) {
      DType t = g.values[v].meta.dtype;
      fp16 = fp16 || t == DType::f16;
      bf16 = bf16 || t == DType::bf16;
      return storage_type(t);
    };
    for (std::size_t i = 0; i < k.reads.size(); ++i) {
      params.push_back(fmt::format("const {}* __restrict__ m{}_in{}", note(k.reads[i]), m, i));
      args.push_back(fmt::format("m{}_in{}[i]", m, i));
    }
    for (std::size_t i = 0; i < k.writes.size(); ++i) {
      params.push_back(fmt::format("{}* __restrict__ m{}_out{}", note(k.writes[i]), m, i));
      args.push_back(fmt::format("m{}_out{}[i]", m, i));
    }
    for (const char* number : {"n", "first", "blocks"})
      params.push_back(fmt::format("unsigned m{}_{}", m, number));
    Data member;
    member.set("index", std::to_string(m));
    member.set("kernel", k.name);
    member.set("args", comma_list("arg", args));
    member_list.push_back(member);
    combo.reads.push_back(k.reads);
    combo.writes.push_back(k.writes);
  }
  Data element_list(Data::type::list);
  for (const auto& source : elements) element_list.push_back(Data("source", source));
  Data d;
  d.set("graph", g.name);
  d.set("count", std::to_string(members.size()));
  d.set("fp16", fp16);
  d.set("bf16", bf16);
  d.set("helpers", elementwise_helpers(false, false));  // members need no others
  d.set("elements", element_list);
  d.set("members", member_list);
  d.set("params", comma_list("decl", params));
  // The name tells the members' first kernel and count; the hash keeps distinct combos apart.
  d.set("name", std::string("KILN_COMBO_NAME"));
  std::string body = render_template("pointwise_combo.cu.mustache", d);
  combo.name = fmt::format("k_combo{}_{}_{:08x}", members.size(), members[0]->name.substr(2),
                           static_cast<std::uint32_t>(std::hash<std::string>{}(body)));
  d.set("name", combo.name);
  combo.handle = KernelHandle(combo.name, render_template("pointwise_combo.cu.mustache", d));
  return combo;
}

std::optional<std::vector<std::vector<Tensor>>> run_combo(const graph::Graph& g,
                                                          const ComboKernel& combo,
                                                          std::span<const Shape> domains,
                                                          const std::vector<Tensor>& values,
                                                          OutputBuffers into) {
  KILN_CHECK(domains.size() == combo.reads.size(),
             "codegen: combo kernel '{}' of {} members run "
             "over {} domains",
             combo.name, combo.reads.size(), domains.size());
  std::vector<std::int64_t> counts;
  for (std::size_t m = 0; m < domains.size(); ++m) {
    std::int64_t n = numel(domains[m]);
    if (n >= (std::int64_t{1} << 31)) return std::nullopt;
    for (int v : combo.reads[m]) {
      const Tensor& t = values.at(v);
      if (!t.defined() || t.device().type != Device::Type::cuda || !t.is_contiguous() ||
          t.numel() != n)
        return std::nullopt;
    }
    counts.push_back(n);
  }
  std::vector<std::vector<Tensor>> outs(domains.size());
  std::vector<cuda::DevicePtr> pointers;
  std::vector<std::uint32_t> numbers;
  std::int64_t bytes_read = 0, bytes_written = 0;
  unsigned blocks = 0;
  std::size_t written = 0;  // outputs so far, over all members
  for (std::size_t m = 0; m < domains.size(); ++m) {
    for (int v : combo.reads[m]) {
      pointers.push_back(reinterpret_cast<cuda::DevicePtr>(values[v].raw_data()));
      bytes_read += tensor_bytes(values[v]);
    }
    for (int v : combo.writes[m]) {
      outs[m].push_back(empty_in(output_buffer(into, written++), written_shape(g, v, domains[m]),
                                 g.values[v].meta.dtype, Device::cuda()));
      pointers.push_back(reinterpret_cast<cuda::DevicePtr>(outs[m].back().raw_data()));
      bytes_written += tensor_bytes(outs[m].back());
    }
    unsigned own = counts[m] == 0 ? 0 : grid_stride_blocks(counts[m], kPointwiseBlock);
    numbers.insert(numbers.end(), {static_cast<std::uint32_t>(counts[m]), blocks, own});
    blocks += own;
  }
  if (blocks == 0) return outs;
  std::vector<void*> params;
  std::size_t pointer = 0, number = 0;
  for (std::size_t m = 0; m < domains.size(); ++m) {
    for (std::size_t i = 0; i < combo.reads[m].size() + combo.writes[m].size(); ++i)
      params.push_back(&pointers[pointer++]);
    for (int i = 0; i < 3; ++i) params.push_back(&numbers[number++]);
  }
  combo.handle.launch({blocks, 1, 1}, {kPointwiseBlock, 1, 1}, params.data(), bytes_read,
                      bytes_written);
  return outs;
}

}  // namespace kiln::jit::codegen
