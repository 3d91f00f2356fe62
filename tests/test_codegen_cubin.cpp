// Generated kernels compile to real-GPU code: every kernel kiln renders for one sample of every
// op and dtype, for the transformer blocks of bench_codegen and for matmul, built by NVRTC as
// sm_80 and sm_90 cubins (what an A100 and an H100 run) with no register spills. The virtual
// GPU runs PTX; this is what ptxas would say about the same source on hardware.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "autograd/ops.h"
#include "cache/batch_compile.h"
#include "graph/fusion.h"
#include "jit/codegen/attention.h"
#include "jit/codegen/indexing.h"
#include "jit/codegen/kernel_coverage.h"
#include "jit/codegen/matmul.h"
#include "jit/codegen/pointwise.h"
#include "jit/codegen/reduction.h"
#include "jit/codegen/sort.h"
#include "jit/compile.h"
#include "runtime/cuda/nvrtc/nvrtc.h"
#include "runtime/cuda/shared_memory_limits.h"
#include "support/op_samples.h"

using namespace kiln;
namespace codegen = kiln::jit::codegen;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The graph `fn` traces to on (CPU) `inputs`.
graph::Graph traced(const Fn& fn, const std::vector<Tensor>& inputs) {
  if (inputs.size() == 1) {
    auto f = jit::compile([&](const Tensor& a) { return fn({a}); });
    f(inputs[0]);
    return f.core().graph(0);
  }
  if (inputs.size() == 2) {
    auto f = jit::compile([&](const Tensor& a, const Tensor& b) { return fn({a, b}); });
    f(inputs[0], inputs[1]);
    return f.core().graph(0);
  }
  auto f = jit::compile([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return fn({a, b, c});
  });
  f(inputs.at(0), inputs.at(1), inputs.at(2));
  return f.core().graph(0);
}

// name -> source of every pointwise and reduction kernel (each schedule) of the graph's partition
// (with the code generator's coverage, as plans make it). Every group renders: an error is a
// failure, not a skip.
void collect(const graph::Graph& g, std::map<std::string, std::string>& sources) {
  for (const auto& group : graph::partition(g, {}, &codegen::kernel_coverage()).groups) {
    BOOST_TEST_CONTEXT("graph '" << g.name << "' group " << group.name) {
      try {
        if (group.kind == graph::FusionKind::pointwise) {
          auto k = codegen::render_pointwise(g, group);
          sources.emplace(k.source, k.name);
        } else if (group.kind == graph::FusionKind::reduction ||
                   group.kind == graph::FusionKind::normalization) {
          auto k = codegen::render_reduction(g, group);
          using Form = codegen::ReductionForm;
          std::vector<codegen::ReductionVariant> forms = {{Form::block_per_row},
                                                          {Form::warp_per_row}};
          if (k.outer) forms.push_back({Form::outer});
          for (const auto& v : forms)
            sources.emplace(codegen::render_reduction_variant(k, v), k.name);
        } else if (group.kind == graph::FusionKind::index ||
                   group.kind == graph::FusionKind::scan ||
                   group.kind == graph::FusionKind::movement) {
          // Indexing templates look at the operands' dtypes and ranks only.
          const graph::Node& node = g.nodes[group.nodes[0]];
          BOOST_TEST_REQUIRE(codegen::has_indexing_kernel(node.op));
          std::vector<Tensor> operands;
          for (int v : node.inputs)
            operands.push_back(empty(g.values[v].meta.shape, g.values[v].meta.dtype));
          auto k =
              codegen::render_indexing(node.op, node.attrs, operands, g.values[node.output()].meta);
          sources.emplace(k.handle.source(), k.handle.name());
        } else if (group.kind == graph::FusionKind::sort) {
          const graph::Node& node = g.nodes[group.nodes[0]];
          auto k = codegen::render_sort(node.op, node.attrs, g.values[node.inputs[0]].meta.dtype);
          for (const auto* handle : {&k.chunks, &k.merge})
            sources.emplace(handle->source(), handle->name());
        } else {
          // Views run on the host, matmuls are built below, transfers are copies, attention
          // runs as primitive ops (their kernels are the other samples') where no fused kernel
          // takes it: nothing else may reach here (an unrendered group would have run through
          // the host).
          BOOST_TEST(
              (group.kind == graph::FusionKind::view || group.kind == graph::FusionKind::matmul ||
               group.kind == graph::FusionKind::transfer ||
               group.kind == graph::FusionKind::attention),
              graph::fusion_kind_name(group.kind) << ": " << group.unrendered);
        }
      } catch (const Error& e) {
        BOOST_ERROR("rendering failed: " << e.what());
      }
    }
  }
}

// A kernel built for one target, and what ptxas reported.
struct Build {
  std::string name, source;
  nvrtc::Target target;
  long spill_stores = -1, spill_loads = -1, registers = -1;
  std::string error;
};

// Reads what ptxas reported for `b` from `module`.
void read_resources(const nvrtc::CompiledModule& module, Build& b) {
  if (const nvrtc::KernelResources* r = module.kernel(b.name)) {
    b.spill_stores = r->spill_store_bytes;
    b.spill_loads = r->spill_load_bytes;
    b.registers = r->registers;
  } else {
    b.error = "ptxas reported no resources:\n" + module.log;
  }
}

// Compiles `b` as a program of its own, so that an error names its kernel.
void build_one(Build& b) {
  try {
    read_resources(nvrtc::compile_program(b.source, b.name + ".cu", b.target), b);
  } catch (const std::exception& e) {
    b.error = e.what();
  }
}

// Builds of one target with distinct kernel names: one NVRTC program (cache/batch_compile.h's
// combined source, as a plan's cold kernels compile), so that NVRTC parses the headers once.
void build_program(std::vector<Build*>& program) {
  std::vector<cache::KernelRequest> requests;
  for (Build* b : program) requests.push_back({b->name, b->source, b->target, {}, 0});
  std::vector<const cache::KernelRequest*> pointers;
  for (const auto& r : requests) pointers.push_back(&r);
  try {
    auto module = nvrtc::compile_program(cache::combined_source(pointers),
                                         fmt::format("cubins_{}.cu", program[0]->target.arch()),
                                         program[0]->target);
    for (Build* b : program) read_resources(module, *b);
  } catch (const std::exception&) {
    for (Build* b : program) build_one(*b);
  }
}

// A source's #include lines: a combined program puts every kernel's at its top, so kernels share
// a program only where theirs are the same, and one that lacks a header it needs still fails.
std::string include_lines(const std::string& source) {
  std::istringstream in(source);
  std::string line, out;
  while (std::getline(in, line))
    if (line.starts_with("#include")) out += line + '\n';
  return out;
}

// The builds as programs, one target, one set of #include lines and distinct names each, built
// on every core (NVRTC is thread-safe) and checked on this thread (Boost.Test is not). Returns
// the number of programs.
std::size_t build_all(std::vector<Build>& builds) {
  struct Program {
    nvrtc::Target target;
    std::string includes;
    std::set<std::string> names;
  };
  std::vector<std::vector<Build*>> programs;
  std::vector<Program> keys;
  for (Build& b : builds) {
    std::string includes = include_lines(b.source);
    std::size_t p = 0;
    while (p < programs.size() && (keys[p].target != b.target || keys[p].includes != includes ||
                                   keys[p].names.count(b.name) != 0))
      ++p;
    if (p == programs.size()) {
      programs.emplace_back();
      keys.push_back({b.target, includes, {}});
    }
    programs[p].push_back(&b);
    keys[p].names.insert(b.name);
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < programs.size(); i = next++) build_program(programs[i]);
  };
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
    workers.emplace_back(work);
  for (auto& w : workers) w.join();
  std::string sizes;
  for (const auto& p : programs) sizes += fmt::format(" {}:{}", p[0]->target.arch(), p.size());
  BOOST_TEST_MESSAGE("programs (target:kernels):" << sizes);
  return programs.size();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codegen_cubin)

BOOST_AUTO_TEST_CASE(every_generated_kernel_builds_for_sm80_and_sm90_without_spills) {
  std::map<std::string, std::string> sources;  // source -> kernel name
  for (OpId op : all_ops()) {
    for (DType dtype : test::sample_dtypes(op)) {
      auto samples = test::op_samples(op, dtype);
      if (samples.empty() || samples[0].inputs.empty() || samples[0].inputs.size() > 3) continue;
      const auto& s = samples[0];
      BOOST_TEST_CONTEXT(s.label << " " << dtype_name(dtype)) {
        try {
          collect(traced([&](auto& in) { return s.run(in); }, s.inputs), sources);
        } catch (const Error& e) {
          // The one documented case: a copy to the device and back is not traceable (a
          // compiled function reads tensor data on the host only through its outputs).
          if (op != OpId::to_device) BOOST_ERROR("tracing failed: " << e.what());
        }
      }
    }
  }
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = randn({8, 256}).to(t), r = randn({8, 256}).to(t), w = randn({256}).to(t);
    Tensor target = randint(0, 256, {8}, DType::i64);
    collect(traced([](auto& in) { return std::vector<Tensor>{gelu(in[0] + in[1])}; }, {x, w}),
            sources);
    collect(traced(
                [](auto& in) {
                  Tensor h = in[0] + in[1];
                  return std::vector<Tensor>{h, layer_norm(h, {256}, in[2], Tensor(), 1e-5)};
                },
                {x, r, w}),
            sources);
    collect(
        traced([](auto& in) { return std::vector<Tensor>{softmax(in[0], -1) * in[1]}; }, {x, w}),
        sources);
    collect(
        traced([](auto& in) { return std::vector<Tensor>{rms_norm(in[0], {256}, in[1], 1e-6)}; },
               {x, w}),
        sources);
    collect(traced([](auto& in) { return std::vector<Tensor>{cross_entropy(in[0], in[1])}; },
                   {x, target}),
            sources);
  }
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    codegen::KernelHandle k = codegen::render_matmul(t, t, t, 1).kernel({});
    sources.emplace(k.source(), k.name());
  }
  // The GEMM on tensor cores: every shared-tile layout with cp.async, plain loads, an f32 output
  // of bf16 operands, and f32 on TF32.
  auto add_gemm = [&](DType in, DType out, codegen::MatmulVariant v) {
    codegen::KernelHandle k = codegen::render_matmul(in, in, out, 2).kernel(v);
    sources.emplace(k.source(), k.name());
  };
  for (DType t : {DType::f16, DType::bf16})
    for (bool ak : {true, false})
      for (bool bk : {true, false}) add_gemm(t, t, {true, false, ak, bk, true, {}});
  add_gemm(DType::f16, DType::f16, {true, false, true, false, false, {}});
  add_gemm(DType::bf16, DType::f32, {true, false, false, true, false, {}});
  add_gemm(DType::f32, DType::f32, {false, true, true, false, true, {}});
  add_gemm(DType::f32, DType::f32, {false, true, false, true, false, {}});
  // The larger tiles the per-architecture rule picks (matmul_tiles.h): warps of 64 x 64.
  for (int shape : {1, 2})
    for (int stages : {3, 4}) {
      add_gemm(
          DType::bf16, DType::bf16,
          {true, false, stages == 3, stages == 4, true, codegen::matmul_tile_shape(shape, stages)});
    }
  add_gemm(DType::f32, DType::f32,
           {false, true, true, false, true, codegen::matmul_tile_shape(1, 3)});
  // The attention kernels (forward, backward): every dtype at the smallest,
  // middle and largest head dims, the masked, plain-load variants, and f32 on TF32; each with
  // the tiles of the architecture it is built for (the shared memory its blocks may have).
  const std::vector<nvrtc::Target> targets = {nvrtc::Target::sass(8, 0), nvrtc::Target::sass(9, 0)};
  std::vector<std::map<std::string, std::string>> attention(targets.size());
  for (std::size_t a = 0; a < targets.size(); ++a) {
    auto budget = static_cast<std::int64_t>(
        cuda::shared_memory_optin_limit(targets[a].major, targets[a].minor));
    auto add_attention = [&](DType t, int head, std::optional<DType> mask, bool vector_loads,
                             bool tf32 = false) {
      for (const auto& k : codegen::render_attention_kernels(t, head, head, mask, vector_loads,
                                                             mask ? 2 : 1, tf32, budget))
        attention[a].emplace(k.source(), k.name());
    };
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (int head : {16, 64, 128}) add_attention(t, head, std::nullopt, true);
    add_attention(DType::f16, 40, DType::bool_, false);
    add_attention(DType::f32, 128, DType::f32, false);
    for (int head : {16, 128})  // f32 on TF32 tensor cores (KILN_MATMUL_TF32=1)
      add_attention(DType::f32, head, std::nullopt, true, true);
  }
  BOOST_TEST(sources.size() > 100u);
  std::vector<Build> builds;
  for (const auto& [source, name] : sources)
    for (auto target : targets) builds.push_back(Build{name, source, target, -1, -1, -1, {}});
  for (std::size_t a = 0; a < targets.size(); ++a)
    for (const auto& [source, name] : attention[a])
      builds.push_back(Build{name, source, targets[a], -1, -1, -1, {}});
  std::size_t programs = build_all(builds);
  int built = 0;
  for (const auto& b : builds) {
    BOOST_TEST_CONTEXT(b.name << " for " << b.target.arch()) {
      BOOST_TEST(b.error.empty(), b.error);
      BOOST_TEST(b.spill_stores == 0, b.source);
      BOOST_TEST(b.spill_loads == 0);
      BOOST_TEST(b.registers > 0);
      BOOST_TEST(b.registers <= 255);
      built += b.error.empty();
    }
  }
  BOOST_TEST_MESSAGE(built << " cubins built from " << sources.size() << " generated kernels, in "
                           << programs << " NVRTC programs");
}

// Head dim 256, the widest: the bf16 backward with the tiles of a 48 KB budget (the static
// kernels') and of sm_90's 227 KB, and f32 (which only a budget past 48 KB takes) on sm_90. Each
// builds within 255 registers and the forward spills nothing. The backward holds dk and dv for
// its 16 key rows a warp in registers (2 x 256 / 8 x 4 floats a thread whatever the tiles), so
// what it spills is reported, not asserted: no tile choice removes it.
BOOST_AUTO_TEST_CASE(head_dim_256_at_the_48_kb_and_sm90_budgets) {
  std::vector<Build> builds;
  auto add = [&](DType t, std::int64_t budget, int major, bool forward) {
    auto kernels =
        codegen::render_attention_kernels(t, 256, 256, std::nullopt, true, 1, false, budget);
    const auto& k = kernels.at(forward ? 0 : 1);
    builds.push_back(Build{k.name(), k.source(), nvrtc::Target::sass(major, 0), -1, -1, -1, {}});
  };
  add(DType::bf16, 48 * 1024, 8, false);
  add(DType::bf16, 227 * 1024, 9, false);
  add(DType::f32, 227 * 1024, 9, true);
  add(DType::f32, 227 * 1024, 9, false);
  build_all(builds);
  for (const auto& b : builds) {
    BOOST_TEST_CONTEXT(b.name << " for " << b.target.arch()) {
      BOOST_TEST(b.error.empty(), b.error);
      BOOST_TEST(b.registers > 0);
      BOOST_TEST(b.registers <= 255);
      if (b.name.find("_fwd_") != std::string::npos) BOOST_TEST(b.spill_stores == 0);
      BOOST_TEST_MESSAGE(b.name << " " << b.target.arch() << ": " << b.registers
                                << " registers, spills " << b.spill_stores << " bytes stored, "
                                << b.spill_loads << " loaded");
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
