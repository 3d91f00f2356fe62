// Safetensors files that must be rejected (truncated, bad headers, duplicate keys, offsets out
// of range or overlapping, unsupported dtypes, overflowing shapes), each with a kiln::Error that
// names the file and the problem, and writing (atomic replacement, no temporary left behind on
// failure, unwritable paths and directories named). Files are assembled by hand per the spec.
#include <boost/test/unit_test.hpp>

#include <sys/resource.h>
#include <csignal>

#include "autograd/nn.h"
#include "autograd/safetensors.h"
#include "support/file_bytes.h"
#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_SUITE(safetensors_corrupt_files)

namespace {
// Writes `bytes` as a file and checks that loading it is a kiln::Error naming the file and
// holding every part.
void check_rejected(const std::string& bytes, std::initializer_list<std::string> parts) {
  TempDir dir;
  std::string path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  try {
    load_safetensors(path);
    BOOST_ERROR("loading was not rejected; expected: " << *parts.begin());
  } catch (const Error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find(path) != std::string::npos, what);
    for (const auto& p : parts)
      BOOST_TEST(what.find(p) != std::string::npos, what << " lacks " << p);
  } catch (const std::exception& e) {
    BOOST_ERROR("not a kiln::Error: " << e.what());
  }
}
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}
const std::string kEightBytes = bytes_of<float>({1, 2});
}  // namespace

BOOST_AUTO_TEST_CASE(short_and_truncated_files) {
  check_rejected("", {"too short", "0 bytes"});
  check_rejected(std::string("\x10\0\0", 3), {"too short", "3 bytes"});
  std::string good = st_file("{" + entry("a", "F32", "[2]", "[0,8]") + "}", kEightBytes);
  check_rejected(good.substr(0, good.size() - 3), {"'a'", "[0, 8]", "5-byte"});
  check_rejected(good.substr(0, 20), {"header", "file has 12 bytes"});
  check_rejected(le64(1000) + "{}      ", {"1000-byte header"});
  check_rejected(le64(~0ull) + "{}      ", {"18446744073709551615-byte header"});
}

BOOST_AUTO_TEST_CASE(headers_that_are_not_a_json_object_of_entries) {
  check_rejected(st_file("{\"a\":", ""), {"not valid JSON"});
  check_rejected(st_file("[1, 2]", ""), {"not a JSON object"});
  // Deep nesting must not exhaust the stack.
  check_rejected(st_file(std::string(200000, '[') + std::string(200000, ']'), ""),
                 {"not a JSON object"});
  check_rejected(st_file("{\"a\": 3}", ""), {"'a'", "dtype, shape and two data_offsets"});
  check_rejected(st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", kEightBytes),
                 {"'a'", "data_offsets"});
  check_rejected(st_file("{\"__metadata__\": {\"n\": 1}}", ""),
                 {"metadata", "'n'", "not a string"});
  check_rejected(st_file("{\"__metadata__\": [1]}", ""), {"__metadata__", "not an object"});
  // The names must be UTF-8, as JSON strings are.
  check_rejected(st_file("{" + entry("a\xff\xfe", "F32", "[2]", "[0,8]") + "}", kEightBytes),
                 {"not valid JSON", "UTF-8"});
}

BOOST_AUTO_TEST_CASE(duplicate_keys_are_named) {
  check_rejected(st_file("{" + entry("w", "F32", "[1]", "[0,4]") + "," +
                             entry("w", "F32", "[1]", "[4,8]") + "}",
                         kEightBytes),
                 {"duplicate", "'w'"});
  check_rejected(st_file("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", ""), {"duplicate", "'a'"});
}

BOOST_AUTO_TEST_CASE(offsets_out_of_range_overlapping_or_not_matching_the_size) {
  auto two = [](const std::string& e1, const std::string& e2, const std::string& data) {
    return st_file("{" + e1 + "," + e2 + "}", data);
  };
  check_rejected(st_file("{" + entry("a", "F32", "[2]", "[0,100]") + "}", kEightBytes),
                 {"'a'", "[0, 100]", "8-byte data buffer"});
  check_rejected(st_file("{" + entry("a", "F32", "[0]", "[8,0]") + "}", kEightBytes),
                 {"'a'", "[8, 0]"});
  check_rejected(st_file("{" + entry("a", "F32", "[3]", "[0,8]") + "}", kEightBytes),
                 {"'a'", "12 bytes", "span 8 bytes"});
  check_rejected(st_file("{" + entry("a", "F32", "[2]", "[0,-8]") + "}", kEightBytes),
                 {"'a'", "data_offsets"});
  check_rejected(two(entry("a", "F32", "[2]", "[0,8]"), entry("b", "F32", "[2]", "[4,12]"),
                     kEightBytes + "abcd"),
                 {"overlap", "'b'", "starts at byte 4, expected 8"});
  check_rejected(two(entry("a", "F32", "[1]", "[0,4]"), entry("b", "F32", "[1]", "[8,12]"),
                     kEightBytes + "abcd"),
                 {"hole", "'b'", "starts at byte 8, expected 4"});
  check_rejected(st_file("{" + entry("a", "F32", "[1]", "[0,4]") + "}", kEightBytes),
                 {"4 bytes of data after its tensors"});
  check_rejected(st_file("{" + entry("m", "BOOL", "[2]", "[0,2]") + "}", "\x01\x07"),
                 {"BOOL", "'m'", "byte 7"});
}

BOOST_AUTO_TEST_CASE(unsupported_and_unknown_dtypes_are_named) {
  for (const char* tag : {"F8_E4M3", "F8_E5M2", "C64", "U8", "U64", "F4"})
    check_rejected(st_file("{" + entry("q", tag, "[1]", "[0,1]") + "}", "\x01"),
                   {"'q'", tag, "unsupported dtype"});
  check_rejected(st_file("{" + entry("q", "Q7", "[1]", "[0,1]") + "}", "\x01"),
                 {"'q'", "Q7", "not a safetensors dtype"});
}

BOOST_AUTO_TEST_CASE(shapes_that_are_negative_fractional_or_overflow) {
  check_rejected(st_file("{" + entry("s", "F32", "[-1, 2]", "[0,8]") + "}", kEightBytes),
                 {"'s'", "-1"});
  check_rejected(st_file("{" + entry("s", "F32", "[2.5]", "[0,8]") + "}", kEightBytes),
                 {"'s'", "2.5"});
  // 2^62 * 4 elements: 2^64 wraps to 0 elements, which would match empty offsets.
  check_rejected(st_file("{" + entry("s", "F32", "[4611686018427387904, 4]", "[0,0]") + "}", ""),
                 {"'s'", "overflow"});
  check_rejected(st_file("{" + entry("s", "I64", "[4611686018427387904]", "[0,0]") + "}", ""),
                 {"'s'", "overflow"});
  check_rejected(st_file("{" + entry("s", "F32", "[18446744073709551615]", "[0,0]") + "}", ""),
                 {"'s'", "18446744073709551615"});
  check_rejected(st_file("{" + entry("s", "F32", "[4294967296, 4294967296, 0]", "[0,0]") + "}", ""),
                 {"'s'", "overflow"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(safetensors_writing)

BOOST_AUTO_TEST_CASE(a_save_replaces_the_file_atomically_and_leaves_no_temporary) {
  TempDir dir;
  std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"a", f64s({1, 2})}});
  save_safetensors(path, {{"a", f64s({3})}});
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"w.safetensors"}),
             boost::test_tools::per_element());
  check_values(load_safetensors(path).tensors.at(0).second, {1}, {3});
  // A failed save leaves the old file as it was, and no temporary.
  std::string before = read_bytes(path);
  KILN_CHECK_THROWS(save_safetensors(path, {{"a", f64s({4})}, {"b", Tensor()}}), Error, "'b'",
                    "undefined");
  KILN_CHECK_THROWS(save_safetensors(path, {{"a", f64s({4})}, {"a", f64s({5})}}), Error, "'a'",
                    "repeated");
  KILN_CHECK_THROWS(save_safetensors(path, {{"\xff", f64s({4})}}), Error, "save_safetensors",
                    "UTF-8");
  KILN_CHECK_THROWS(save_safetensors(path, {{"a", f64s({4})}}, {{"k", "\xc3"}}), Error,
                    "save_safetensors", "UTF-8");
  BOOST_TEST((read_bytes(path) == before));
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"w.safetensors"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_write_that_fails_midway_removes_its_temporary_and_keeps_the_old_file) {
  TempDir dir;
  std::string path = dir / "big.safetensors";
  save_safetensors(path, {{"a", f64s({1})}});
  std::string before = read_bytes(path);
  {
    // Files may not grow past 256 bytes for a moment: the write of 8 KiB fails with EFBIG.
    struct FileSizeLimit {
      rlimit old{};
      void (*old_handler)(int);
      explicit FileSizeLimit(rlim_t bytes) {
        getrlimit(RLIMIT_FSIZE, &old);
        old_handler = std::signal(SIGXFSZ, SIG_IGN);
        rlimit small = old;
        small.rlim_cur = bytes;
        setrlimit(RLIMIT_FSIZE, &small);
      }
      ~FileSizeLimit() {
        setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
      }
    } limit(256);
    KILN_CHECK_THROWS(save_safetensors(path, {{"a", zeros({1024}, DType::f64)}}), Error, path,
                      "too large");
  }
  BOOST_TEST((read_bytes(path) == before));
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"big.safetensors"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unwritable_paths_and_directories_are_named) {
  TempDir dir;
  std::string missing_dir = dir / "no/such/dir/m.safetensors";
  KILN_CHECK_THROWS(save_safetensors(missing_dir, {{"a", f64s({1})}}), Error, "save_safetensors",
                    missing_dir);
  fs::create_directory(dir / "sub");
  write_bytes(dir / "sub/keep", "x");
  KILN_CHECK_THROWS(save_safetensors(dir / "sub", {{"a", f64s({1})}}), Error, "save_safetensors",
                    dir / "sub", "directory");
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"sub"}), boost::test_tools::per_element());
  KILN_CHECK_THROWS(load_safetensors(dir / "sub"), Error, "load_safetensors", dir / "sub",
                    "directory");
  KILN_CHECK_THROWS(load_safetensors(dir / "absent.safetensors"), Error, "load_safetensors",
                    dir / "absent.safetensors", "No such file");
  KILN_CHECK_THROWS(save_safetensors("", {{"a", f64s({1})}}), Error, "save_safetensors", "empty");
  nn::Linear fc(1, 1);
  KILN_CHECK_THROWS(fc.load(dir / "sub"), Error, "directory");
}

BOOST_AUTO_TEST_SUITE_END()
