// Reading and writing safetensors files.
#include "autograd/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/ops.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order

// The format caps the header at 100 MB, as the reference implementation does.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

const std::pair<const char*, DType> kDTypeNames[] = {
    {"BOOL", DType::bool_}, {"I8", DType::i8},     {"I32", DType::i32}, {"I64", DType::i64},
    {"F16", DType::f16},    {"BF16", DType::bf16}, {"F32", DType::f32}, {"F64", DType::f64},
};
// Valid in the format, but not kiln dtypes.
const char* const kForeignDTypes[] = {"U8",      "I16",     "U16", "U32",     "U64",     "F8_E5M2",
                                      "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

const char* dtype_tag(DType t) {
  for (auto [name, dtype] : kDTypeNames)
    if (dtype == t) return name;
  throw DTypeError(fmt::format("safetensors: dtype {} has no safetensors name", t));
}

DType parse_dtype(const std::string& tag, const std::string& path, const std::string& name) {
  for (auto [n, dtype] : kDTypeNames)
    if (tag == n) return dtype;
  bool foreign = std::find(std::begin(kForeignDTypes), std::end(kForeignDTypes), tag) !=
                 std::end(kForeignDTypes);
  throw DTypeError(fmt::format(
      "load_safetensors: tensor '{}' in {} has unsupported dtype {} ({}; kiln reads BOOL, I8, "
      "I32, I64, F16, BF16, F32, F64)",
      name, path, tag,
      foreign ? "a safetensors dtype kiln has no counterpart for" : "not a safetensors dtype"));
}

// JSON strings must be UTF-8; nlohmann would throw its own exception from dump().
void check_utf8(const std::string& text, const char* what, const std::string& path) {
  try {
    (void)Json(text).dump();
  } catch (const Json::exception&) {
    throw Error(fmt::format("save_safetensors: cannot write {}: {} '{}' is not valid UTF-8", path,
                            what, Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)));
  }
}

bool is_directory(const std::string& path) {
  std::error_code ec;  // a path that cannot be examined is reported when it is opened
  return std::filesystem::is_directory(path, ec);
}

// Writes the file at `temp`; on failure, removes what it created and says why.
std::string write_file(const std::string& temp, const std::string& header,
                       const std::vector<Tensor>& data) {
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  if (!out.good()) return fmt::format("cannot create {}: {}", temp, std::strerror(errno));
  std::uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), sizeof length);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const Tensor& t : data)
    out.write(
        static_cast<const char*>(t.raw_data()),
        static_cast<std::streamsize>(t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()))));
  out.close();
  if (out.fail()) {
    std::string why = fmt::format("writing {} failed: {}", temp, std::strerror(errno));
    std::remove(temp.c_str());
    return why;
  }
  return "";
}

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  Json header = Json::object();
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "metadata key", path);
    check_utf8(value, "metadata value", path);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__" && names.insert(name).second,
               "save_safetensors: tensor name '{}' is reserved or repeated", name);
    KILN_CHECK(t.defined(), "save_safetensors: tensor '{}' is undefined", name);
    check_utf8(name, "tensor name", path);
    Tensor host = t.detach().to(Device::cpu()).contiguous();
    std::uint64_t bytes = static_cast<std::uint64_t>(host.numel()) * itemsize(host.dtype());
    header[name] = {{"dtype", dtype_tag(host.dtype())},
                    {"shape", host.impl().shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(host);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format's 8-byte alignment of the data
  KILN_CHECK(!path.empty(), "save_safetensors: the path is empty");
  KILN_CHECK(!is_directory(path), "save_safetensors: cannot write {}: it is a directory", path);
  // Written beside the target and renamed over it: a reader never sees half a file, and a
  // failure removes the temporary and leaves the old file as it was.
  std::string temp = path + ".tmp";
  std::string failure = write_file(temp, text, data);
  KILN_CHECK(failure.empty(), "save_safetensors: cannot write {}: {}", path, failure);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(temp.c_str());
    throw Error(fmt::format("save_safetensors: cannot write {}: renaming {} to it failed: {}", path,
                            temp, std::strerror(err)));
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  KILN_CHECK(!is_directory(path), "load_safetensors: {} is a directory, not a safetensors file",
             path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KILN_CHECK(in.good(), "load_safetensors: cannot open {}: {}", path, std::strerror(errno));
  auto end = in.tellg();
  KILN_CHECK(end >= 0, "load_safetensors: cannot read {}: it is not a regular file", path);
  auto file_size = static_cast<std::uint64_t>(end);
  in.seekg(0);
  std::uint64_t header_size = 0;
  KILN_CHECK(file_size >= 8 && in.read(reinterpret_cast<char*>(&header_size), 8),
             "load_safetensors: {} is too short ({} bytes) to hold a header length", path,
             file_size);
  KILN_CHECK(header_size <= kMaxHeaderBytes && header_size <= file_size - 8,
             "load_safetensors: {} declares a {}-byte header, but the file has {} bytes after "
             "the length",
             path, header_size, file_size - 8);
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  Json header;
  // nlohmann keeps one of two equal keys silently; the format forbids them.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto note_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = Json::parse(text, note_keys);
  } catch (const Json::exception& e) {
    throw Error(
        fmt::format("load_safetensors: the header of {} is not valid JSON: {}", path, e.what()));
  }
  KILN_CHECK(duplicate.empty(), "load_safetensors: the header of {} has duplicate key '{}'", path,
             duplicate);
  KILN_CHECK(header.is_object(), "load_safetensors: the header of {} is not a JSON object", path);
  std::uint64_t buffer_size = file_size - 8 - header_size;

  SafetensorsFile result;
  struct Span {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      KILN_CHECK(it->is_object(), "load_safetensors: __metadata__ in {} is not an object", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        KILN_CHECK(m->is_string(), "load_safetensors: metadata '{}' in {} is not a string", m.key(),
                   path);
        result.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const Json& entry = *it;
    bool well_formed = entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string() &&
                       entry.contains("shape") && entry["shape"].is_array() &&
                       entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                       entry["data_offsets"].size() == 2;
    KILN_CHECK(well_formed,
               "load_safetensors: tensor '{}' in {} needs dtype, shape and two data_offsets", name,
               path);
    DType dtype = parse_dtype(entry["dtype"].get<std::string>(), path, name);
    // Sizes are checked for overflow (as the reference reader does), including the product of
    // the sizes before a zero: a wrapped count could match empty data_offsets.
    Shape shape;
    std::uint64_t nonzero_count = 1;
    bool overflow = false, has_zero = false;
    for (const auto& d : entry["shape"]) {
      KILN_CHECK(d.is_number_unsigned(),
                 "load_safetensors: tensor '{}' in {} has a size that is not a non-negative "
                 "integer: {}",
                 name, path, d.dump());
      auto size = d.get<std::uint64_t>();
      KILN_CHECK(size <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                 "load_safetensors: tensor '{}' in {} has size {}, which overflows a 64-bit size",
                 name, path, size);
      shape.push_back(static_cast<std::int64_t>(size));
      overflow |=
          __builtin_mul_overflow(nonzero_count, std::max<std::uint64_t>(size, 1), &nonzero_count);
      has_zero |= size == 0;
    }
    std::uint64_t count = has_zero ? 0 : nonzero_count, expected = 0;
    overflow |=
        nonzero_count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    overflow |= __builtin_mul_overflow(count, itemsize(dtype), &expected);
    KILN_CHECK(!overflow,
               "load_safetensors: tensor '{}' in {} has shape {}, whose size in bytes overflows",
               name, path, shape_str(shape));
    const Json& offsets = entry["data_offsets"];
    KILN_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
               "load_safetensors: tensor '{}' in {} has data_offsets that are not non-negative "
               "integers: {}",
               name, path, offsets.dump());
    Span span{offsets[0].get<std::uint64_t>(), offsets[1].get<std::uint64_t>(), name};
    KILN_CHECK(span.begin <= span.end && span.end <= buffer_size,
               "load_safetensors: tensor '{}' in {} has data_offsets [{}, {}] outside the "
               "{}-byte data buffer",
               name, path, span.begin, span.end, buffer_size);
    KILN_CHECK(span.end - span.begin == expected,
               "load_safetensors: tensor '{}' in {} is {} {} ({} bytes) but its data_offsets "
               "span {} bytes",
               name, path, dtype, shape_str(shape), expected, span.end - span.begin);
    Tensor t = empty(shape, dtype);
    in.seekg(static_cast<std::streamoff>(8 + header_size + span.begin));
    in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(expected));
    KILN_CHECK(in.good() || expected == 0, "load_safetensors: reading tensor '{}' from {} failed",
               name, path);
    if (dtype == DType::bool_) {  // any byte but 0 and 1 is not a bool
      const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
      for (std::uint64_t i = 0; i < expected; ++i)
        KILN_CHECK(bytes[i] <= 1, "load_safetensors: BOOL tensor '{}' in {} holds byte {} at {}",
                   name, path, bytes[i], i);
    }
    result.tensors.emplace_back(name, t);
    spans.push_back(span);
  }
  // The format requires the buffer to be covered exactly: no overlaps, no holes.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const Span& s : spans) {
    KILN_CHECK(s.begin == at,
               "load_safetensors: the data of {} {}: tensor '{}' starts at byte {}, expected {}",
               path, s.begin < at ? "overlap" : "have a hole", s.name, s.begin, at);
    at = s.end;
  }
  KILN_CHECK(at == buffer_size,
             "load_safetensors: {} has {} bytes of data after its tensors that nothing indexes",
             path, buffer_size - at);
  return result;
}

}  // namespace kiln
