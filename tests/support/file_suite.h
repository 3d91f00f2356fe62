// Makes each test file a Boost.Test suite named after the file inside its area's runner
// (cmake/tests.cmake compiles tests/test_x.cpp through a generated unit that wraps it in
// KILN_FILE_SUITE_BEGIN(test_x) ... KILN_FILE_SUITE_END()), so that ctest's entry for the file
// runs `runner --run_test=test_x` and a case is test_x/suite/case.
#pragma once

#include <boost/test/unit_test.hpp>

// The registrars BOOST_AUTO_TEST_SUITE uses, without the namespace it opens: the file's code
// keeps its own namespaces. Statics of one unit initialize in order, so every case the file
// registers lands between these two.
#define KILN_FILE_SUITE_BEGIN(name)                                                    \
  static boost::unit_test::ut_detail::auto_test_unit_registrar kiln_file_suite_begin_( \
      BOOST_TEST_STRINGIZE(name), __FILE__, __LINE__,                                  \
      boost::unit_test::decorator::collector_t::instance())
#define KILN_FILE_SUITE_END() \
  static boost::unit_test::ut_detail::auto_test_unit_registrar kiln_file_suite_end_(1)
