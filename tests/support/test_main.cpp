// The one translation unit that defines the Boost.Test entry point for every suite.
#define BOOST_TEST_MODULE kiln
#include <boost/test/unit_test.hpp>
