// KILN_CHECK=accuracy (see accuracy_check.h).
#include "jit/accuracy_check.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string_view>

#include "graph/node_values.h"
#include "runtime/dispatch.h"

namespace kiln::jit {
// Read per run, so tests and users can switch it at run time.
bool checking_accuracy() {
  const char* v = std::getenv("KILN_CHECK");
  return v && std::string_view(v).find("accuracy") != std::string_view::npos;
}

namespace {

double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-9;
    case DType::f32:
      return 1e-4;
    case DType::f16:
      return 1e-2;
    case DType::bf16:
      return 6e-2;
    default:
      return 0;
  }
}

}  // namespace

void check_step_accuracy(const graph::Graph& g, const std::vector<int>& nodes,
                         const std::vector<Tensor>& device_values,
                         std::span<const std::int64_t> symbol_values, const std::string& what,
                         const std::string& source) {
  std::map<int, Tensor> cpu;
  auto value = [&](int v) -> Tensor {
    auto it = cpu.find(v);
    if (it != cpu.end()) return it->second;
    return cpu[v] = device_values.at(v).to(Device::cpu());
  };
  for (int n : nodes) {
    const graph::Node& node = g.nodes[n];
    std::vector<Tensor> operands;
    for (int v : node.inputs) operands.push_back(value(v));
    auto results = dispatch(node.op, operands, attrs_at(g, node, symbol_values));
    for (std::size_t k = 0; k < results.size(); ++k) cpu[node.outputs[k]] = results[k];
  }
  for (int n : nodes)
    for (int v : g.nodes[n].outputs) {
      if (!device_values.at(v).defined()) continue;  // kept in registers, never written
      Tensor got = device_values[v].to(Device::cpu()).to(DType::f64).contiguous();
      Tensor want = cpu.at(v).to(DType::f64).contiguous();
      const double* a = static_cast<const double*>(got.raw_data());
      const double* b = static_cast<const double*>(want.raw_data());
      double tol = tolerance(g.values[v].meta.dtype);
      for (std::int64_t i = 0; i < got.numel(); ++i) {
        bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                    std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]));
        if (same) continue;
        throw Error(fmt::format(
            "KILN_CHECK=accuracy: {} diverges from the CPU reference in '{}': %{} element {} is "
            "{} on the device and {} on the CPU (tolerance {} for {}){}{}",
            what, g.name, v, i, a[i], b[i], tol, g.values[v].meta.dtype,
            source.empty() ? "" : "\nsource:\n", source));
      }
    }
}

}  // namespace kiln::jit
