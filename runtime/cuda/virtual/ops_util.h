// Helpers shared by the instruction families: picking a handler instantiation for a PTX type,
// and decoding the common operand shapes.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "runtime/cuda/virtual/decoder.h"
#include "runtime/cuda/virtual/thread.h"

namespace kiln::cuda::vgpu {

// H<T>::run for the integer C++ type matching PTX type `t`.
template <template <class> class H>
Handler int_handler(DecodeCtx& c, Type t, bool allow16 = true) {
  switch (t) {
    case Type::u16:
    case Type::b16:
      if (allow16) return H<std::uint16_t>::run;
      break;
    case Type::s16:
      if (allow16) return H<std::int16_t>::run;
      break;
    case Type::u32:
    case Type::b32:
      return H<std::uint32_t>::run;
    case Type::s32:
      return H<std::int32_t>::run;
    case Type::u64:
    case Type::b64:
      return H<std::uint64_t>::run;
    case Type::s64:
      return H<std::int64_t>::run;
    default:
      break;
  }
  c.fail(fmt::format("type .{} not supported", type_name(t)));
}

// "op d, a, b, ..." with `nsrc` sources of type `t`.
inline void decode_dst_srcs(DecodeCtx& c, Instr& in, Type t, int nsrc) {
  in.d[0] = c.dst(c.op(0));
  for (int i = 0; i < nsrc; ++i) in.s[i] = c.src(c.op(1 + static_cast<std::size_t>(i)), t);
}

template <class T>
using Unsigned = std::make_unsigned_t<T>;

}  // namespace kiln::cuda::vgpu
