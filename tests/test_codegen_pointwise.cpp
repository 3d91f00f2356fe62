// Generated pointwise kernels (jit/codegen): every elementwise op of the table, alone and fused,
// rendered from templates/, compiled by NVRTC and run on the CUDA backend (the virtual GPU
// here), against the CPU kernels run eagerly.
#include <boost/test/unit_test.hpp>

#include <set>

#include "autograd/ops.h"
#include "graph/fusion.h"
#include "jit/codegen/pointwise.h"
#include "jit/compile.h"
#include "support/device_compare.h"
#include "support/op_samples.h"

using namespace kiln;

namespace {

bool close(const Tensor& got, const Tensor& want, DType t, std::string& why) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    why = fmt::format("shape/dtype {} {} vs {} {}", shape_str(got.shape()), got.dtype(),
                      shape_str(want.shape()), want.dtype());
    return false;
  }
  Tensor g = got.to(DType::f64).contiguous(), w = want.to(DType::f64).contiguous();
  const double* a = static_cast<const double*>(g.raw_data());
  const double* b = static_cast<const double*>(w.raw_data());
  double tol = test::pointwise_tolerance(t);
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    bool same_inf = std::isinf(a[i]) && a[i] == b[i];
    if (both_nan || same_inf) continue;
    if (!(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])))) {
      why = fmt::format("element {}: generated {} vs cpu {}", i, a[i], b[i]);
      return false;
    }
  }
  return true;
}

struct Traced {
  graph::Graph graph;
  graph::Partition partition;
};

Traced trace(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
             const std::vector<Tensor>& inputs) {
  graph::Graph g;
  if (inputs.size() == 1) {
    auto f = jit::compile([&](const Tensor& a) { return fn({a}); });
    f(inputs[0]);
    g = f.core().graph(0);
  } else if (inputs.size() == 2) {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return fn({a, b}); });
    f(inputs[0], inputs[1]);
    g = f.core().graph(0);
  } else {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return fn({a, b, c});
    });
    f(inputs[0], inputs[1], inputs[2]);
    g = f.core().graph(0);
  }
  auto p = graph::partition(g);
  return {std::move(g), std::move(p)};
}

// Runs a graph made of one pointwise group through generated code on the CUDA backend.
std::vector<Tensor> run_generated(const Traced& t, const std::vector<Tensor>& inputs,
                                  std::string* source = nullptr) {
  const graph::Graph& g = t.graph;
  BOOST_TEST_REQUIRE(t.partition.groups.size() == 1u);
  const auto& group = t.partition.groups[0];
  auto kernel = jit::codegen::render_pointwise(g, group);
  if (source) *source = kernel.source;
  std::vector<Tensor> values(g.values.size());
  for (const auto& in : g.inputs)
    values[in.value] = (in.kind == graph::InputKind::argument ? inputs.at(in.arg_index) : in.tensor)
                           .to(Device::cuda());
  Shape domain;
  for (const auto& s : group.domain) domain.push_back(s.constant_value());
  auto outs = jit::codegen::run_pointwise(g, kernel, domain, values);
  for (std::size_t i = 0; i < kernel.writes.size(); ++i) values[kernel.writes[i]] = outs[i];
  std::vector<Tensor> results;
  for (int v : g.outputs) results.push_back(values[v].to(Device::cpu()));
  return results;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_pointwise)

BOOST_AUTO_TEST_CASE(every_elementwise_op_matches_the_cpu_kernel) {
  std::set<OpId> covered;
  int runs = 0;
  for (OpId op : all_ops()) {
    if (op_class(op) != OpClass::elementwise) continue;
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const auto& s : test::op_samples(op, dtype)) {
        if (s.inputs.size() > 3) continue;
        BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
          Traced t = trace(s.run, s.inputs);
          if (t.partition.groups.size() != 1 ||
              t.partition.groups[0].kind != graph::FusionKind::pointwise)
            continue;
          std::vector<Tensor> got;
          try {
            got = run_generated(t, s.inputs);
          } catch (const Error& e) {
            if (std::string(e.what()).find("not covered by code generation yet") !=
                std::string::npos)
              continue;
            throw;
          }
          std::vector<Tensor> want = s.run(s.inputs);
          BOOST_TEST_REQUIRE(got.size() == want.size());
          for (std::size_t i = 0; i < got.size(); ++i) {
            std::string why;
            BOOST_TEST(close(got[i], want[i], dtype, why), why);
          }
          covered.insert(op);
          ++runs;
        }
      }
    }
  }
  BOOST_TEST(runs > 80);
  // Every elementwise op but the two whose value depends on the position (tril, triu).
  for (OpId op : all_ops())
    if (op_class(op) == OpClass::elementwise && op != OpId::tril && op != OpId::triu)
      BOOST_TEST(covered.count(op) == 1u, "not covered: " << op_name(op));
}

BOOST_AUTO_TEST_CASE(a_fused_chain_with_broadcast_and_a_transposed_input_in_every_float_dtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Tensor x = randn({5, 3}).to(dtype), b = randn({5}).to(dtype);
      auto fn = [](const std::vector<Tensor>& in) {
        Tensor xt = in[0].t();  // [3, 5], strided
        return std::vector<Tensor>{relu(xt + in[1]) * 2.0 - sigmoid(xt), exp(xt) > 1.0};
      };
      Traced t = trace(fn, {x, b});
      std::string source;
      auto got = run_generated(t, {x, b}, &source);
      auto want = fn({x, b});
      for (std::size_t i = 0; i < got.size(); ++i) {
        std::string why;
        BOOST_TEST(close(got[i], want[i], dtype, why), why);
      }
      bool half = dtype == DType::f16, brain = dtype == DType::bf16;
      BOOST_TEST((source.find("cuda_fp16.h") != std::string::npos) == half);
      BOOST_TEST((source.find("cuda_bf16.h") != std::string::npos) == brain);
      BOOST_TEST(source.find("// Fused from graph") != std::string::npos);
      BOOST_TEST(source.find("= sigmoid(") != std::string::npos, source);
    }
  }
}

BOOST_AUTO_TEST_CASE(one_kernel_serves_every_size_and_numbers_are_literals) {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 3.0 + 1.0}; };
  std::string first, second;
  Tensor a = randn({4, 6}), b = randn({4, 6});
  Traced t = trace(fn, {a});
  run_generated(t, {a}, &first);
  BOOST_TEST(first.find("0x1.8p+1f") != std::string::npos, first);  // 3.0 as an exact literal
  BOOST_TEST(first.find("in1") == std::string::npos);  // the numbers are not read from memory
  auto got = run_generated(t, {b}, &second);
  BOOST_TEST(first == second);
  std::string why;
  BOOST_TEST(close(got[0], fn({b})[0], DType::f32, why), why);
}

BOOST_AUTO_TEST_SUITE_END()
