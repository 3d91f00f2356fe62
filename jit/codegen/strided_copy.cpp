// The strided copy kernel (see strided_copy.h): bits moved as unsigned integers of the element's
// size, so one kernel serves every dtype of that size.
#include "jit/codegen/strided_copy.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <mutex>

#include "jit/codegen/kernel_cache.h"

namespace kiln::jit::codegen {
namespace {

constexpr int kMaxRank = 8;

// Sizes and both stride vectors, passed by value; dims past `rank` are unused.
struct CopyLayout {
  std::array<long long, kMaxRank> size{}, in{}, out{};
  long long rank = 0;
};

const char* bits_type(std::size_t itemsize) {
  switch (itemsize) {
    case 1:
      return "unsigned char";
    case 2:
      return "unsigned short";
    case 4:
      return "unsigned int";
    default:
      return "unsigned long long";
  }
}

std::string copy_source(const std::string& name, std::size_t itemsize) {
  return fmt::format(
      "// Strided copy of {0}-byte elements: element i of the shape, read and written through\n"
      "// each side's strides.\n"
      "struct CopyLayout {{ long long size[{1}], in[{1}], out[{1}]; long long rank; }};\n"
      "extern \"C\" __global__ void {2}(const {3}* __restrict__ src, {3}* __restrict__ dst,\n"
      "                                 CopyLayout l, long long n) {{\n"
      "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
      "       i += (long long)gridDim.x * blockDim.x) {{\n"
      "    long long rest = i, from = 0, to = 0;\n"
      "    for (long long d = l.rank - 1; d >= 0; --d) {{\n"
      "      long long c = rest % l.size[d];\n"
      "      rest /= l.size[d];\n"
      "      from += c * l.in[d];\n"
      "      to += c * l.out[d];\n"
      "    }}\n"
      "    dst[to] = src[from];\n"
      "  }}\n"
      "}}\n",
      itemsize, kMaxRank, name, bits_type(itemsize));
}

const KernelHandle& copy_kernel(std::size_t itemsize) {
  static std::mutex mutex;
  static std::map<std::size_t, KernelHandle> kernels;
  std::lock_guard lock(mutex);
  auto it = kernels.find(itemsize);
  if (it == kernels.end()) {
    std::string name = fmt::format("k_strided_copy_{}", itemsize * 8);
    it = kernels.emplace(itemsize, KernelHandle(name, copy_source(name, itemsize))).first;
  }
  return it->second;
}

}  // namespace

void strided_copy(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
             "copy_: strided copy of {} {} into {} {} needs one shape and dtype",
             shape_str(src.shape()), src.dtype(), shape_str(dst.shape()), dst.dtype());
  KILN_CHECK(dst.dim() <= kMaxRank, "copy_: strided copy of rank {} (at most {})", dst.dim(),
             kMaxRank);
  long long n = dst.numel();
  if (n == 0) return;
  CopyLayout layout;
  layout.rank = dst.dim();
  for (std::int64_t d = 0; d < dst.dim(); ++d) {
    layout.size[d] = dst.shape()[d];
    layout.in[d] = src.strides()[d];
    layout.out[d] = dst.strides()[d];
  }
  auto from = reinterpret_cast<cuda::DevicePtr>(src.raw_data());
  auto to = reinterpret_cast<cuda::DevicePtr>(dst.raw_data());
  std::array<void*, 4> params{&from, &to, &layout, &n};
  unsigned block = 256;
  std::int64_t bytes = n * static_cast<std::int64_t>(itemsize(dst.dtype()));
  copy_kernel(itemsize(dst.dtype()))
      .launch({grid_stride_blocks(n, block), 1, 1}, {block, 1, 1}, params.data(), bytes, bytes);
}

}  // namespace kiln::jit::codegen
