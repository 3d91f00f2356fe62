// Packaging: `cmake --install` of this build into a temporary prefix, then a tiny downstream
// project, README's snippet as written, that uses find_package(kiln) and links kiln::kiln, built
// and run; the kiln tool and the templates are installed too.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "support/run_command.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

using Run = kiln::test::CommandResult;

Run run(const std::string& command) {
  return kiln::test::run_command(command);
}

// The consumer links with --as-needed, as Ubuntu's toolchain does by default: libkiln_jit, whose
// only use is its static initializer (the CUDA backend), must not be dropped. Under
// KILN_SANITIZE the library needs the ASan/UBSan runtimes in the app that loads it.
std::string consumer_link_flags() {
#ifdef KILN_CONSUMER_LINK_FLAGS
  return std::string(" '-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed ") + KILN_CONSUMER_LINK_FLAGS +
         "'";
#else
  return " -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed";
#endif
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_downstream_project_finds_and_links_the_installed_kiln) {
  kiln::test::TempDir tmp;
  std::string cmake = KILN_CMAKE_COMMAND;
  fs::path prefix = tmp / "prefix", app = tmp / "app";
  Run install = run(cmake + " --install " + KILN_BINARY_DIR + " --prefix " + prefix.string());
  BOOST_TEST_REQUIRE(install.status == 0, install.output);
  BOOST_TEST(fs::exists(prefix / "bin" / "kiln"));
  BOOST_TEST(fs::exists(prefix / "include" / "kiln" / "runtime" / "tensor.h"));
  BOOST_TEST(fs::exists(prefix / "include" / "kiln" / "cache" / "disk_cache.h"));
  BOOST_TEST(fs::exists(prefix / "share" / "kiln" / "templates" / "pointwise.cu.mustache"));
  Run help = run((prefix / "bin" / "kiln").string() + " --help");
  BOOST_TEST(help.status == 0, help.output);

  // Exactly README's snippet: no C++ standard set by hand, kiln::kiln carries it. main.cpp uses
  // the headers that need C++20 (a defaulted operator==, std::span), and an op on the CUDA device,
  // which only the jit library's backend runs although main references none of its symbols.
  fs::create_directories(app);
  std::ofstream(app / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.25)\n"
                                           "project(app LANGUAGES CXX)\n"
                                           "find_package(kiln REQUIRED)\n"
                                           "add_executable(app main.cpp)\n"
                                           "target_link_libraries(app kiln::kiln)\n";
  std::ofstream(app / "main.cpp")
      << "#include <cstdio>\n"
         "#include \"autograd/ops.h\"\n"
         "#include \"runtime/device.h\"\n"
         "#include \"runtime/sym_int.h\"\n"
         "int main() {\n"
         "  kiln::Tensor x = kiln::ones({2, 3}).to(kiln::Device::cuda());\n"
         "  kiln::Tensor y = (x * 2.0).sum().to(kiln::Device::cpu());\n"
         "  kiln::SymExpr size = kiln::SymExpr::symbol(0) * kiln::SymExpr::constant(2);\n"
         "  bool on_cuda = x.device() == kiln::Device::cuda();\n"
         "  std::printf(\"sum %g on %s, size %s\\n\", y.item(), on_cuda ? \"cuda\" : \"?\",\n"
         "              size.str().c_str());\n"
         "}\n";
  Run configure =
      run(cmake + " -S " + app.string() + " -B " + (app / "build").string() +
          " -DCMAKE_PREFIX_PATH=" + prefix.string() + " -DCMAKE_CXX_COMPILER=" + KILN_CXX_COMPILER +
          " -DCMAKE_BUILD_TYPE=Release" + consumer_link_flags());
  BOOST_TEST_REQUIRE(configure.status == 0, configure.output);
  Run build = run(cmake + " --build " + (app / "build").string());
  BOOST_TEST_REQUIRE(build.status == 0, build.output);
  // The virtual GPU, whatever the machine, and a kernel cache of its own.
  Run app_run = run("KILN_CUDA=virtual KILN_CACHE_DIR=" + (tmp / "kernels").string() + " " +
                    (app / "build" / "app").string());
  BOOST_TEST(app_run.status == 0, app_run.output);
  BOOST_TEST(app_run.output == "sum 12 on cuda, size 2*s0\n", app_run.output);
}
