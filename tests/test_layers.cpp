// The layers (runtime <- {autograd, graph, cache} <- jit <- dist) are enforced by the build: a
// source of one layer that includes a header of a layer it must not see does not compile. Builds
// the probe targets of CMakeLists.txt (tests/layers/layer_probe.cpp as a given layer's source).
#include <boost/test/unit_test.hpp>

#include <string>

#include "support/run_command.h"

namespace {

kiln::test::CommandResult build(const std::string& target) {
  std::string command = KILN_CMAKE_COMMAND;
  for (const char* part : {" --build ", KILN_BINARY_DIR, " --target "}) command += part;
  return kiln::test::run_command(command + target);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The compiler's "no such header" diagnostic for `header`, as GCC or Clang words it.
bool header_not_found(const std::string& output, const std::string& header) {
  return contains(output, header + ": No such file or directory") ||
         contains(output, "'" + header + "' file not found");
}

}  // namespace

// Without these, the failures below could come from a broken probe or header, not the layers.
BOOST_AUTO_TEST_CASE(a_layer_source_compiles_with_the_headers_it_may_see) {
  auto cache = build("kiln_layer_probe_cache");
  BOOST_TEST(cache.status == 0, cache.output);
  auto jit = build("kiln_layer_probe_jit_compile");
  BOOST_TEST(jit.status == 0, jit.output);
  auto autograd = build("kiln_layer_probe_autograd_ops");
  BOOST_TEST(autograd.status == 0, autograd.output);
  auto dist = build("kiln_layer_probe_dist_ddp");
  BOOST_TEST(dist.status == 0, dist.output);
}

BOOST_AUTO_TEST_CASE(a_cache_source_including_a_jit_header_does_not_compile) {
  auto r = build("kiln_layer_probe_cache_includes_jit");
  BOOST_TEST(r.status != 0, r.output);
  BOOST_TEST(header_not_found(r.output, "jit/compile.h"), r.output);
}

BOOST_AUTO_TEST_CASE(a_graph_source_including_an_autograd_header_does_not_compile) {
  auto r = build("kiln_layer_probe_graph_includes_autograd");
  BOOST_TEST(r.status != 0, r.output);
  BOOST_TEST(header_not_found(r.output, "autograd/ops.h"), r.output);
}

BOOST_AUTO_TEST_CASE(a_jit_source_including_a_dist_header_does_not_compile) {
  auto r = build("kiln_layer_probe_jit_includes_dist");
  BOOST_TEST(r.status != 0, r.output);
  BOOST_TEST(header_not_found(r.output, "dist/dist.h"), r.output);
}
