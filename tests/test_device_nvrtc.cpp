// Tests of the NVRTC wrapper: targets, PTX and cubin output, ptxas resource parsing, compile
// errors with source excerpts, name expressions, and concurrent compiles.
#include <boost/test/unit_test.hpp>
#include <thread>

#include "runtime/cuda/nvrtc/nvrtc.h"

namespace {

using kiln::nvrtc::ProgramOptions;
using kiln::nvrtc::Target;

const char* kSaxpy = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

const char* kResources = R"(
__device__ __noinline__ float helper(float a) { return a * a + 1.0f; }
extern "C" __global__ void uses_shared(float* x) {
  __shared__ float s[256];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = helper(s[255 - threadIdx.x]);
}
extern "C" __global__ void uses_stack(float* x, int k) {
  float local[64];
  for (int i = 0; i < 64; ++i) local[(i * k) & 63] = x[i];
  x[threadIdx.x] = local[threadIdx.x & 63];
}
)";

kiln::cuda::DeviceProperties device(int major, int minor, bool is_virtual) {
  kiln::cuda::DeviceProperties p;
  p.name = "test device";
  p.compute_major = major;
  p.compute_minor = minor;
  p.is_virtual = is_virtual;
  return p;
}

BOOST_AUTO_TEST_SUITE(nvrtc)

BOOST_AUTO_TEST_CASE(version_and_archs) {
  const auto& v = kiln::nvrtc::version();
  BOOST_TEST(v.major >= 12);
  BOOST_TEST(v.build.starts_with(std::to_string(v.major) + "." + std::to_string(v.minor) + "."),
             "build '" << v.build << "' starts with the version");
  BOOST_TEST(v.to_string().find("NVRTC") != std::string::npos);
  const auto& archs = kiln::nvrtc::supported_archs();
  BOOST_TEST(std::is_sorted(archs.begin(), archs.end()));
  BOOST_TEST((std::find(archs.begin(), archs.end(), 90) != archs.end()));
}

BOOST_AUTO_TEST_CASE(target_from_device) {
  BOOST_TEST(Target::for_device(device(9, 0, true)).arch() == "compute_90");  // virtual: PTX
  BOOST_TEST(Target::for_device(device(9, 0, false)).arch() == "sm_90a");
  BOOST_TEST(Target::for_device(device(8, 6, false)).arch() == "sm_86");
  BOOST_TEST(Target::for_device(device(8, 0, false)).arch_option() == "-arch=sm_80");
  BOOST_TEST(Target::for_device(device(12, 0, false)).arch() == "sm_120a");
  // An arch newer than NVRTC knows: PTX for the newest one, which the driver JITs forward.
  auto future = Target::for_device(device(99, 0, false));
  BOOST_TEST(!future.cubin);
  BOOST_TEST(future.major * 10 + future.minor == kiln::nvrtc::supported_archs().back());
  BOOST_CHECK_THROW(Target::for_device(device(3, 0, false)), kiln::Error);
}

BOOST_AUTO_TEST_CASE(ptx_for_the_virtual_gpu) {
  auto m = kiln::nvrtc::compile_program(kSaxpy, "saxpy.cu", Target::ptx(9, 0));
  BOOST_TEST(m.cubin.empty());
  BOOST_TEST(m.image().data() == m.ptx.data());
  BOOST_TEST(m.ptx.find(".target sm_90") != std::string::npos);
  BOOST_TEST(m.ptx.find(".visible .entry saxpy(") != std::string::npos);
  BOOST_TEST(m.ptx.back() != '\0');
  BOOST_REQUIRE(m.kernel("saxpy"));
  BOOST_TEST(m.kernel("saxpy")->is_entry);
  BOOST_TEST(m.kernel("saxpy")->registers == -1);  // no ptxas for a PTX target
  BOOST_TEST(m.options.front() == "-arch=compute_90");
  BOOST_TEST(m.compile_ms > 0);
}

BOOST_AUTO_TEST_CASE(cubin_with_resources) {
  auto m = kiln::nvrtc::compile_program(kResources, "res.cu", Target::sass(9, 0, true));
  BOOST_TEST(m.cubin.size() > 4);
  BOOST_TEST(m.cubin.substr(0, 4) == std::string("\x7f"
                                                 "ELF"));
  BOOST_TEST(m.image().data() == m.cubin.data());
  BOOST_TEST(m.log.find("ptxas info") != std::string::npos, "log: " << m.log);
  const auto* shared = m.kernel("uses_shared");
  BOOST_REQUIRE(shared);
  BOOST_TEST(shared->is_entry);
  BOOST_TEST(shared->registers > 0);
  BOOST_TEST(shared->shared_bytes == 1024);  // float[256]
  BOOST_TEST(shared->barriers == 1);
  BOOST_TEST(shared->spill_store_bytes == 0);
  const auto* stack = m.kernel("uses_stack");
  BOOST_REQUIRE(stack);
  BOOST_TEST(stack->stack_frame_bytes >= 256, "float[64] indexed dynamically lives on the stack");
  BOOST_TEST(stack->shared_bytes == 0);
  // The __noinline__ helper is a function of its own in ptxas' report.
  bool helper = false;
  for (const auto& k : m.kernels)
    helper = helper || (!k.is_entry && k.name.find("helper") != std::string::npos);
  BOOST_TEST(helper);
}

BOOST_AUTO_TEST_CASE(fast_math_changes_code) {
  const char* src =
      "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = expf(x[threadIdx.x]) / x[1]; }";
  auto precise = kiln::nvrtc::compile_program(src, "k.cu", Target::ptx(9, 0));
  ProgramOptions fast;
  fast.flags = {"--use_fast_math"};
  auto approx = kiln::nvrtc::compile_program(src, "k.cu", Target::ptx(9, 0), fast);
  BOOST_TEST(precise.ptx.find("div.rn.f32") != std::string::npos);
  BOOST_TEST(approx.ptx.find("div.rn.f32") == std::string::npos);
  BOOST_TEST(approx.ptx.find(".ftz") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(fp16_headers_are_found) {
  const char* src = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k(__half* h, __nv_bfloat16* b) { h[0] = __float2half(__bfloat162float(b[0])); })";
  BOOST_CHECK_NO_THROW(kiln::nvrtc::compile_program(src, "k.cu", Target::ptx(9, 0)));
  // cooperative_groups needs libcu++ (cuda/std/...), which CUDA 13 keeps under include/cccl.
  const char* cg = R"(#include <cooperative_groups.h>
extern "C" __global__ void k(int* x) { x[0] = cooperative_groups::this_thread_block().size(); })";
  BOOST_CHECK_NO_THROW(kiln::nvrtc::compile_program(cg, "cg.cu", Target::ptx(9, 0)));
  ProgramOptions bare;
  bare.toolkit_include = false;
  BOOST_CHECK_THROW(kiln::nvrtc::compile_program(src, "k.cu", Target::ptx(9, 0), bare),
                    kiln::nvrtc::CompileError);
}

BOOST_AUTO_TEST_CASE(compile_error_has_log_and_excerpt) {
  std::string src =
      "// line 1\n// line 2\nextern \"C\" __global__ void bad(float* x) {\n"
      "  x[0] = undefined_name + 1;\n}\n// line 6\n";
  try {
    kiln::nvrtc::compile_program(src, "bad.cu", Target::ptx(9, 0));
    BOOST_FAIL("expected a CompileError");
  } catch (const kiln::nvrtc::CompileError& e) {
    std::string what = e.what();
    BOOST_TEST(e.log().find("bad.cu(4): error") != std::string::npos, "log: " << e.log());
    BOOST_TEST(e.log().find("undefined_name") != std::string::npos);
    BOOST_TEST(e.source_excerpt().find(">   4 |   x[0] = undefined_name + 1;") != std::string::npos,
               "excerpt:\n"
                   << e.source_excerpt());
    BOOST_TEST(e.source_excerpt().find("    1 | // line 1") != std::string::npos);
    BOOST_TEST(what.find("bad.cu") != std::string::npos);
    BOOST_TEST(what.find("compute_90") != std::string::npos);
    BOOST_TEST(what.find("undefined_name + 1") != std::string::npos);
  }
  ProgramOptions bogus;
  bogus.flags = {"--no-such-option"};
  BOOST_CHECK_THROW(kiln::nvrtc::compile_program(kSaxpy, "saxpy.cu", Target::ptx(9, 0), bogus),
                    kiln::nvrtc::CompileError);
}

BOOST_AUTO_TEST_CASE(name_expressions_for_templates) {
  const char* src = "template <class T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }";
  ProgramOptions opts;
  opts.name_expressions = {"scale<float>", "scale<double>"};
  auto m = kiln::nvrtc::compile_program(src, "tmpl.cu", Target::ptx(9, 0), opts);
  auto f = m.lowered_name("scale<float>");
  auto d = m.lowered_name("scale<double>");
  BOOST_REQUIRE(f.has_value());
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST(*f != *d);
  BOOST_TEST(m.kernel(*f) != nullptr, *f << " is an entry of the PTX");
  BOOST_TEST(!m.lowered_name("scale<int>").has_value());
}

BOOST_AUTO_TEST_CASE(parse_ptxas_report) {
  const char* log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kern' for 'sm_90a'
ptxas info    : Function properties for kern
ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Function properties for _Z3food
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";
  auto ks = kiln::nvrtc::parse_ptxas_info(log);
  BOOST_REQUIRE_EQUAL(ks.size(), 2u);
  BOOST_TEST(ks[0].name == "kern");
  BOOST_TEST(ks[0].is_entry);
  BOOST_TEST(ks[0].registers == 40);
  BOOST_TEST(ks[0].barriers == 1);
  BOOST_TEST(ks[0].shared_bytes == 2048);
  BOOST_TEST(ks[0].constant_bytes == 380);
  BOOST_TEST(ks[0].stack_frame_bytes == 24);
  BOOST_TEST(ks[0].spill_store_bytes == 8);
  BOOST_TEST(ks[0].spill_load_bytes == 12);
  BOOST_TEST(ks[1].name == "_Z3food");
  BOOST_TEST(!ks[1].is_entry);
  BOOST_TEST(ks[1].stack_frame_bytes == 16);
  BOOST_TEST(ks[1].registers == -1);
}

BOOST_AUTO_TEST_CASE(concurrent_compiles) {
  // Each thread compiles a different program several times; results must match serial ones.
  const int threads = 4;
  std::vector<std::string> sources, serial;
  for (int t = 0; t < threads; ++t) {
    sources.push_back(
        fmt::format("extern \"C\" __global__ void k{0}(float* x) {{ x[threadIdx.x] = "
                    "x[threadIdx.x] * {0}.5f + sinf(x[0]); }}",
                    t));
    serial.push_back(
        kiln::nvrtc::compile_program(sources[t], fmt::format("k{}.cu", t), Target::ptx(9, 0)).ptx);
  }
  std::vector<std::string> got(threads);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int rep = 0; rep < 3; ++rep) {
          auto target = rep == 1 ? Target::sass(8, 0) : Target::ptx(9, 0);
          auto m = kiln::nvrtc::compile_program(sources[t], fmt::format("k{}.cu", t), target);
          if (rep != 1)
            got[t] = m.ptx;
          else if (!m.kernel(fmt::format("k{}", t)) ||
                   m.kernel(fmt::format("k{}", t))->registers <= 0)
            errors[t] = "no resources for the cubin";
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    BOOST_TEST(errors[t].empty(), "thread " << t << ": " << errors[t]);
    BOOST_TEST(got[t] == serial[t], "thread " << t << " PTX matches the serial compile");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
