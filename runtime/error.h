// kiln's exception types. Every message names the op and the offending shapes, dtypes or values.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shapes that do not fit together (broadcasting, matmul, reshape, cat...).
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A dtype an op does not support, or a mix it cannot promote.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// An index or dim outside its range.
class IndexError : public Error {
 public:
  using Error::Error;
};

// Misuse of autograd: backward of a non-scalar without a gradient, in-place on a leaf, ...
class AutogradError : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln

// Throws `Type` with a fmt-formatted message when `cond` is false.
#define KILN_CHECK_AS(Type, cond, ...)                      \
  do {                                                      \
    if (!(cond)) [[unlikely]]                               \
      throw Type(fmt::format(__VA_ARGS__));                 \
  } while (0)

#define KILN_CHECK(cond, ...) KILN_CHECK_AS(::kiln::Error, cond, __VA_ARGS__)
