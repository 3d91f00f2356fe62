// Files for the nn state suites: a temporary directory per test case, raw file reads and
// writes, and safetensors bytes assembled by hand as the format spec lays them out (u64 LE
// header length, JSON header, data), independent of kiln's writer.
#pragma once

#include <boost/test/unit_test.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace kiln::test {

// A fresh directory per test case, removed with everything in it.
struct TempDir {
  std::filesystem::path root;
  TempDir() {
    static int counter = 0;
    root = std::filesystem::temp_directory_path() /
           ("kiln_nn_state_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  std::string operator/(const std::string& name) const { return (root / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(root))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
// A safetensors file from its parts, as the format spec lays it out: u64 LE header length,
// header (padded with spaces to a multiple of 8 when `pad`), data buffer.
inline std::string st_file(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}
template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}
// The raw bytes of a contiguous CPU tensor.
inline std::string raw(const Tensor& t) {
  Tensor c = t.contiguous();
  return {static_cast<const char*>(c.raw_data()), c.numel() * itemsize(c.dtype())};
}
// A tensor holding exactly `bytes` (bit patterns no arithmetic touches).
inline Tensor from_bytes(DType dtype, const Shape& shape, const std::string& bytes) {
  Tensor t = empty(shape, dtype);
  BOOST_TEST_REQUIRE(static_cast<std::size_t>(t.numel()) * itemsize(dtype) == bytes.size());
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace kiln::test
