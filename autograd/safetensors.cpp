// Reading and writing safetensors files.
#include "autograd/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
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
    {"BOOL", DType::bool_}, {"I32", DType::i32}, {"I64", DType::i64}, {"F16", DType::f16},
    {"BF16", DType::bf16},  {"F32", DType::f32}, {"F64", DType::f64},
};
// Valid in the format, but not kiln dtypes.
const char* const kForeignDTypes[] = {"U8",  "I8",  "I16", "U16",     "U32",
                                      "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4"};

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
  throw DTypeError(fmt::format("safetensors: tensor '{}' in {} has dtype {}, which {}", name, path,
                               tag,
                               foreign ? "kiln does not support (BOOL, I32, I64, F16, BF16, "
                                         "F32, F64 are)"
                                       : "is not a safetensors dtype"));
}

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__" && names.insert(name).second,
               "save_safetensors: tensor name '{}' is reserved or repeated", name);
    KILN_CHECK(t.defined(), "save_safetensors: tensor '{}' is undefined", name);
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
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out.good(), "save_safetensors: cannot open {} for writing", temp);
    std::uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), sizeof length);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Tensor& t : data)
      out.write(static_cast<const char*>(t.raw_data()),
                static_cast<std::streamsize>(t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()))));
    out.flush();
    KILN_CHECK(out.good(), "save_safetensors: writing {} failed", temp);
  }
  KILN_CHECK(std::rename(temp.c_str(), path.c_str()) == 0, "save_safetensors: cannot rename {} to {}",
             temp, path);
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KILN_CHECK(in.good(), "load_safetensors: cannot open {}", path);
  auto file_size = static_cast<std::uint64_t>(in.tellg());
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
  try {
    header = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(fmt::format("load_safetensors: the header of {} is not valid JSON: {}", path,
                            e.what()));
  }
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
        KILN_CHECK(m->is_string(), "load_safetensors: metadata '{}' in {} is not a string",
                   m.key(), path);
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
    Shape shape;
    for (const auto& d : entry["shape"]) {
      KILN_CHECK(d.is_number_unsigned(),
                 "load_safetensors: tensor '{}' in {} has a size that is not a non-negative "
                 "integer: {}",
                 name, path, d.dump());
      shape.push_back(d.get<std::int64_t>());
    }
    const Json& offsets = entry["data_offsets"];
    KILN_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
               "load_safetensors: tensor '{}' in {} has non-integer data_offsets", name, path);
    Span span{offsets[0].get<std::uint64_t>(), offsets[1].get<std::uint64_t>(), name};
    std::uint64_t expected = static_cast<std::uint64_t>(numel(shape)) * itemsize(dtype);
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
               "load_safetensors: the data of {} is not laid out contiguously: tensor '{}' "
               "starts at byte {}, expected {} (an overlap or a hole)",
               path, s.name, s.begin, at);
    at = s.end;
  }
  KILN_CHECK(at == buffer_size,
             "load_safetensors: {} has {} bytes of data after its tensors that nothing indexes",
             path, buffer_size - at);
  return result;
}

}  // namespace kiln
