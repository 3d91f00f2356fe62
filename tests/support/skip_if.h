// A precondition for a test case that runs only on some machines (with a GPU, as root, ...).
// Boost.Test then reports the case as skipped, and cmake/tests.cmake gives the case a ctest entry
// of its own that ctest shows as Skipped: a case that did not run never reads as a pass.
#pragma once

#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>
#include <utility>

namespace kiln::test {

// `BOOST_AUTO_TEST_CASE(name, *skip_if(reason))`: reason() (asked when the case is reached)
// says why the case cannot run here; the case runs when it is empty, else it is skipped.
inline boost::unit_test::precondition skip_if(std::function<std::string()> reason) {
  return boost::unit_test::precondition(
      [reason = std::move(reason)](boost::unit_test::test_unit_id) {
        std::string why = reason();
        boost::test_tools::assertion_result result(why.empty());
        if (!why.empty()) result.message() << why;
        return result;
      });
}

}  // namespace kiln::test
