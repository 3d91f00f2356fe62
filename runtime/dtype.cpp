// Names, sizes and promotion of dtypes.
#include "runtime/dtype.h"

namespace kiln {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::i8:
      return "i8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "invalid";
}

std::size_t itemsize(DType t) {
  switch (t) {
    case DType::bool_:
    case DType::i8:
      return 1;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::i32:
    case DType::f32: return 4;
    case DType::i64:
    case DType::f64: return 8;
  }
  return 0;
}

namespace {
int category(DType t) { return t == DType::bool_ ? 0 : is_integral(t) ? 1 : 2; }
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return itemsize(a) >= itemsize(b) ? a : b;  // the wider integer
  // Two different floats: f16/bf16 mix widens to f32; otherwise the wider one.
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16))
    return DType::f32;
  return itemsize(a) >= itemsize(b) ? a : b;
}

DType scalar_result_type(DType t, Scalar::Kind kind) {
  int scalar_category = static_cast<int>(kind);  // boolean 0, integer 1, floating 2
  if (category(t) >= scalar_category) return t;
  return kind == Scalar::Kind::integer ? DType::i64 : DType::f32;
}

}  // namespace kiln
