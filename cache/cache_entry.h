// A disk cache entry's metadata (meta.json beside the binary and the source): what the kernel
// is, what it was compiled with and from, what ptxas reported, and the checksums that tell an
// intact entry from a truncated or corrupted one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cache {

struct EntryMeta {
  static constexpr int kFormat = 1;  // of meta.json and the entry's files
  int format = kFormat;
  std::string key;
  std::string kernel;  // the entry point
  std::string graph;   // the traced graph it came from, when the source says
  std::vector<std::string>
      nodes;         // the graph nodes it fuses ("%3 = add(%1, %2)"), or its description
  std::string arch;  // "compute_90" (PTX) or "sm_90a" (cubin)
  bool cubin = false;
  std::vector<std::string> options;
  std::string nvrtc_version;  // human-readable: "NVRTC 13.0 (build 13.0.88 ...)"
  std::string nvrtc_id;       // what the key hashed: nvrtc::version_id()
  int codegen_version = 0;
  double compile_ms = 0;
  int registers = -1;  // -1: not reported (PTX targets never run ptxas)
  long spill_bytes = -1;
  long shared_bytes = -1;
  std::int64_t created = 0;    // Unix seconds
  std::int64_t last_used = 0;  // Unix seconds; the entry's hits file keeps it current
  std::int64_t hits = 0;       // disk hits; likewise
  std::int64_t binary_bytes = 0;
  std::int64_t source_bytes = 0;
  std::string checksum;         // XXH3-128 of the binary
  std::string source_checksum;  // XXH3-128 of the source

  // The binary's file name in the entry: "kernel.ptx" or "kernel.cubin".
  std::string binary_file() const { return cubin ? "kernel.cubin" : "kernel.ptx"; }
  // Op names of `nodes` ("add", "relu"), for tables.
  std::vector<std::string> ops() const;
};

std::string to_json(const EntryMeta& meta, int indent = 2);
// Raises kiln::Error naming the first missing or mistyped field, or the parse error.
EntryMeta meta_from_json(std::string_view text);

// What a generated source says about itself: the graph and nodes from its "Fused from graph"
// comment (templates/pointwise.cu.mustache, reduction.cu.mustache), else the "// name: what"
// description line that every template starts with.
void describe_from_source(std::string_view source, EntryMeta& meta);

// "2025-01-31 12:00:00 UTC" for Unix seconds.
std::string format_time(std::int64_t unix_seconds);

}  // namespace kiln::cache
