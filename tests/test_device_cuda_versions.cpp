// Which CUDA driver and cuBLASLt kiln accepts (runtime/cuda/cuda_versions.h): the driver's
// version against the toolkit's, with messages naming both, and cuBLASLt's dlopen order.
#include <boost/test/unit_test.hpp>

#include "runtime/cuda/cuda_versions.h"

using namespace kiln::cuda;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_versions)

BOOST_AUTO_TEST_CASE(versions_print_as_major_dot_minor) {
  BOOST_TEST(cuda_version_text(13000) == "13.0");
  BOOST_TEST(cuda_version_text(12040) == "12.4");
  BOOST_TEST(cuda_version_text(12090) == "12.9");
}

BOOST_AUTO_TEST_CASE(a_driver_of_an_older_major_is_refused_naming_both_versions) {
  DriverVersionCheck c = check_driver_version(12080, 13000);
  BOOST_TEST(contains(c.error, "CUDA 12.8"), c.error);
  BOOST_TEST(contains(c.error, "12080"), c.error);
  BOOST_TEST(contains(c.error, "CUDA 13.0 toolkit"), c.error);
  BOOST_TEST(contains(c.error, "KILN_CUDA=virtual"), c.error);
  BOOST_TEST(check_driver_version(0, 13000).error != "");
}

BOOST_AUTO_TEST_CASE(an_older_minor_of_the_same_major_runs_with_a_warning) {
  DriverVersionCheck c = check_driver_version(13000, 13010);
  BOOST_TEST(c.error == "");
  BOOST_TEST(contains(c.warning, "CUDA 13.0"), c.warning);
  BOOST_TEST(contains(c.warning, "CUDA 13.1 toolkit"), c.warning);
}

BOOST_AUTO_TEST_CASE(a_driver_as_new_or_newer_is_accepted_silently) {
  for (int driver : {13000, 13020, 14000}) {
    DriverVersionCheck c = check_driver_version(driver, 13000);
    BOOST_TEST(c.error == "");
    BOOST_TEST(c.warning == "");
  }
}

BOOST_AUTO_TEST_CASE(cublaslt_13_is_tried_everywhere_before_12) {
  auto tries = cublaslt_candidates("/opt/cuda", "/usr/local/cuda/lib64");
  std::vector<std::string> want = {"libcublasLt.so.13",
                                   "/opt/cuda/lib64/libcublasLt.so.13",
                                   "/usr/local/cuda/lib64/libcublasLt.so.13",
                                   "libcublasLt.so.12",
                                   "/opt/cuda/lib64/libcublasLt.so.12",
                                   "/usr/local/cuda/lib64/libcublasLt.so.12"};
  BOOST_TEST(tries == want, boost::test_tools::per_element());
  BOOST_TEST(cublaslt_candidates(nullptr, "/x").size() == 4u);
  BOOST_TEST(cublaslt_candidates("", "/x").size() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()
