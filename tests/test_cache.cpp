// The kernel cache on disk (cache/): keys, metadata, the store's atomic writes, healing of
// corrupt entries, unusable directories, eviction, version and arch isolation. Processes that
// share a directory and the kiln tool are in test_cache_tool.cpp.
// Every test uses its own KILN_CACHE_DIR under /tmp, never ~/.cache/kiln.
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "cache/batch_compile.h"
#include "cache/cache_entry.h"
#include "cache/disk_cache.h"
#include "cache/kernel_key.h"
#include "cache/kernel_store.h"
#include "cache/progress.h"
#include "jit/codegen/codegen_version.h"
#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/launch_stats.h"
#include "jit/compile.h"
#include "runtime/log.h"
#include "support/cache_env.h"
#include "support/capture_output.h"
#include "support/device_compare.h"
#include "support/scoped_env.h"
#include "support/skip_if.h"
#include "support/temp_dir.h"

using namespace kiln;
using kiln::test::CacheEnv;
using kiln::test::contains;
using kiln::test::entry_names;
using kiln::test::write_file;
namespace fs = std::filesystem;

namespace {

std::string source_of(int i) {
  return "// k_t" + std::to_string(i) + ": a test kernel\nextern \"C\" __global__ void k_t" +
         std::to_string(i) + "(float* x) { x[threadIdx.x] += " + std::to_string(i) + ".0f; }\n";
}

cache::KernelRequest request(const std::string& name, const std::string& source,
                             nvrtc::Target target = nvrtc::Target::ptx(9, 0)) {
  return cache::KernelRequest{name, source, target, {}, jit::codegen::kCodegenVersion};
}

// Sources that live as long as the test program, for requests.
const std::string& kept_source(int i) {
  static std::map<int, std::string> sources;
  return sources.emplace(i, source_of(i)).first->second;
}

cache::EntryMeta fake_meta(const std::string& key) {
  cache::EntryMeta m;
  m.key = key;
  m.kernel = "k_fake";
  m.arch = "compute_90";
  return m;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cache_keys)

BOOST_AUTO_TEST_CASE(keys_and_checksums_are_xxh3_128_known_answers) {
  // Known answers from the reference tool (xxhsum -H2, xxHash 0.8.1), not from kiln: XXH3-128 of
  // the empty string and of "abc" ...
  BOOST_TEST(cache::checksum("") == "99aa06d3014798d86001c324468d497f");
  BOOST_TEST(cache::checksum("abc") == "06b05ab6733a618578af5f94892f3950");
  // ... and of a key's fields, each after its length as a little-endian u64: "kiln-kernel-key-2",
  // the code without its comment lines, the option count "1", the option, the arch, the NVRTC
  // version, the codegen version "7". A change of hash or field layout moves every key, so the
  // disk cache of an older kiln would be read as misses: this says when that happens.
  std::vector<std::string> options = {"-arch=compute_90"};
  cache::KeyInputs in;
  in.source = "// a comment line\nextern \"C\" __global__ void k() {}\n";
  in.options = options;
  in.arch = "compute_90";
  in.nvrtc_version = "12.8";
  in.codegen_version = 7;
  BOOST_TEST(cache::kernel_key(in) == "d05d25715ea5755bc61aa314652c5944");
}

BOOST_AUTO_TEST_CASE(a_key_covers_source_options_arch_nvrtc_and_codegen_versions) {
  std::vector<std::string> options = {"-arch=compute_90", "-I/usr/include"};
  cache::KeyInputs base{"src", options, "compute_90", "13.0:lib", 1};
  std::string key = cache::kernel_key(base);
  BOOST_TEST(cache::is_key(key));
  BOOST_TEST(cache::kernel_key(base) == key);
  auto differs = [&](cache::KeyInputs changed) { return cache::kernel_key(changed) != key; };
  BOOST_TEST(differs({"src ", options, "compute_90", "13.0:lib", 1}));
  std::vector<std::string> fast = {"-arch=compute_90", "-I/usr/include", "--use_fast_math"};
  BOOST_TEST(differs({"src", fast, "compute_90", "13.0:lib", 1}));
  BOOST_TEST(differs({"src", options, "sm_90a", "13.0:lib", 1}));
  BOOST_TEST(differs({"src", options, "compute_90", "13.1:lib", 1}));
  BOOST_TEST(differs({"src", options, "compute_90", "13.0:lib", 2}));
  // Normalized: surrounding whitespace and empty options do not matter; order does.
  std::vector<std::string> spaced = {" -arch=compute_90", "", "-I/usr/include "};
  BOOST_TEST(!differs({"src", spaced, "compute_90", "13.0:lib", 1}));
  std::vector<std::string> swapped = {"-I/usr/include", "-arch=compute_90"};
  BOOST_TEST(differs({"src", swapped, "compute_90", "13.0:lib", 1}));
}

BOOST_AUTO_TEST_CASE(the_key_of_a_request_changes_with_its_target) {
  std::string src = source_of(1);
  auto ptx90 = cache::key_of(request("k_t1", src, nvrtc::Target::ptx(9, 0)));
  BOOST_TEST(ptx90 != cache::key_of(request("k_t1", src, nvrtc::Target::ptx(8, 0))));
  BOOST_TEST(ptx90 != cache::key_of(request("k_t1", src, nvrtc::Target::sass(9, 0))));
  BOOST_TEST(cache::key_of(request("k_t1", src, nvrtc::Target::sass(9, 0))) !=
             cache::key_of(request("k_t1", src, nvrtc::Target::sass(9, 0, true))));
  auto r = request("k_t1", src);
  r.codegen_version += 1;
  BOOST_TEST(ptx90 != cache::key_of(r));
}

BOOST_AUTO_TEST_CASE(metadata_round_trips_and_bad_metadata_names_the_field) {
  cache::EntryMeta m = fake_meta(std::string(32, 'a'));
  m.nodes = {"%2 = mul(%0, %1)", "%3 = relu(%2)"};
  m.registers = 12;
  m.compile_ms = 3.5;
  cache::EntryMeta back = cache::meta_from_json(cache::to_json(m));
  BOOST_TEST(back.key == m.key);
  BOOST_TEST(back.nodes == m.nodes);
  BOOST_TEST(back.registers == 12);
  BOOST_TEST(back.compile_ms == 3.5);
  BOOST_TEST((back.ops() == std::vector<std::string>{"mul", "relu"}));
  try {
    cache::meta_from_json("{\"format\": 1}");
    BOOST_FAIL("no error");
  } catch (const Error& e) {
    BOOST_TEST(contains(e.what(), "has no 'key'"), e.what());
  }
  BOOST_CHECK_THROW(cache::meta_from_json("{\"format\": 1, "), Error);
  BOOST_CHECK_THROW(cache::meta_from_json(""), Error);
}

BOOST_AUTO_TEST_CASE(a_generated_source_names_the_nodes_it_fuses) {
  cache::EntryMeta m;
  m.kernel = "k_mul_relu";
  cache::describe_from_source(
      "// k_mul_relu: pointwise\n// Fused from graph 'f':\n//   %2 = mul(%0, %1)\n//   %3 = "
      "relu(%2)\n// The domain's sizes\n",
      m);
  BOOST_TEST(m.graph == "f");
  BOOST_TEST((m.nodes == std::vector<std::string>{"%2 = mul(%0, %1)", "%3 = relu(%2)"}));
  cache::EntryMeta g;
  g.kernel = "k_gemm";
  cache::describe_from_source("#include <x>\n// k_gemm: a tiled GEMM\n", g);
  BOOST_TEST((g.nodes == std::vector<std::string>{"a tiled GEMM"}));
}

BOOST_AUTO_TEST_CASE(
    the_progress_bar_shows_kernels_done_of_the_total_and_is_silent_off_a_terminal) {
  BOOST_TEST(cache::CompileProgress::line(3, 8, 2.14, "k_add", 8) ==
             "[###     ] 3/8 kernels, 2.1 s  k_add");
  BOOST_TEST(cache::CompileProgress::line(8, 8, 10, "", 4) == "[####] 8/8 kernels, 10.0 s  ");
  std::string err = test::capture_output(2, [] {
    cache::CompileProgress progress(5);  // stderr is a file here
    BOOST_TEST(!progress.drawing());
    progress.start("k_a");
    progress.finish();
  });
  BOOST_TEST(err.empty(), err);
}

BOOST_AUTO_TEST_CASE(kiln_log_cache_reports_misses_and_hits_with_keys) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  setenv("KILN_LOG", "cache", 1);
  reload_log_settings();
  auto r = request("k_t5", kept_source(5));
  std::string key = cache::key_of(r);
  std::string err = test::capture_output(2, [&] {
    cache::fetch_or_compile(r);
    cache::fetch_or_compile(r);
  });
  unsetenv("KILN_LOG");
  reload_log_settings();
  BOOST_TEST(contains(err, "kiln: cache miss " + key + " k_t5 (compiled in"), err);
  BOOST_TEST(contains(err, "kiln: cache hit " + key + " k_t5 (disk,"), err);
}

BOOST_AUTO_TEST_CASE(malformed_settings_are_errors_naming_the_variable) {
  test::TempDir dir;
  {
    CacheEnv env(dir.path(), "maybe");
    try {
      cache::settings_from_env();
      BOOST_FAIL("no error");
    } catch (const Error& e) {
      BOOST_TEST(contains(e.what(), "KILN_CACHE is 'maybe'"), e.what());
    }
  }
  {
    CacheEnv env(dir.path(), nullptr, "12x");
    BOOST_CHECK_THROW(cache::settings_from_env(), Error);
  }
  {
    CacheEnv env(dir.path(), nullptr, "7");
    BOOST_TEST(cache::settings_from_env().max_bytes == 7LL << 20);
  }
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  BOOST_TEST(cache::settings_from_env().dir == fs::path("/tmp/xdg/kiln"));
  unsetenv("XDG_CACHE_HOME");
  {
    // HOME set for this check, so that it does not depend on the environment the suite runs in.
    test::ScopedEnv home("HOME", "/tmp/home-of-the-test");
    BOOST_TEST(cache::settings_from_env().dir == fs::path("/tmp/home-of-the-test/.cache/kiln"));
  }
  {
    // No HOME and no XDG_CACHE_HOME: no directory (the cache stays in memory), not a crash.
    const char* home = std::getenv("HOME");
    std::string saved = home ? home : "";
    unsetenv("HOME");
    BOOST_TEST(cache::settings_from_env().dir.empty());
    if (home) setenv("HOME", saved.c_str(), 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(disk_store)

BOOST_AUTO_TEST_CASE(a_stored_entry_loads_and_counts_its_hits) {
  test::TempDir dir;
  cache::DiskCache disk(dir.path());
  BOOST_TEST(!disk.open().has_value());
  BOOST_TEST(((fs::status(dir.path()).permissions() & fs::perms::group_write) == fs::perms::none));
  std::string key(32, 'b');
  BOOST_TEST((disk.load(key).status == cache::DiskCache::Status::miss));
  disk.store(fake_meta(key), "source", "binary bytes");
  auto l = disk.load(key);
  BOOST_TEST((l.status == cache::DiskCache::Status::hit));
  BOOST_TEST(l.binary == "binary bytes");
  disk.load(key);
  auto entries = disk.list();
  BOOST_TEST_REQUIRE(entries.size() == 1u);
  BOOST_TEST(entries[0].meta.hits == 2);
  BOOST_TEST(entries[0].problem.empty());
  BOOST_TEST(disk.read_source(key) == "source");
  BOOST_TEST(disk.resolve("bbbb") == key);
  BOOST_CHECK_THROW(disk.resolve("c"), Error);
  // No temporaries are left behind.
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{key}));
}

BOOST_AUTO_TEST_CASE(cold_then_disk_hit_then_memory_hit_in_one_process) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  auto r = request("k_t1", kept_source(1));
  auto first = cache::fetch_or_compile(r);
  BOOST_TEST(first.compiled.has_value());
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{first.key}));
  auto second = cache::fetch_or_compile(r);
  BOOST_TEST(!second.compiled.has_value());
  BOOST_TEST(second.image == first.image);
  auto meta = cache::DiskCache(dir.path()).load(first.key, false).meta;
  BOOST_TEST(meta.kernel == "k_t1");
  BOOST_TEST(meta.arch == "compute_90");
  BOOST_TEST((meta.nodes == std::vector<std::string>{"a test kernel"}));
  BOOST_TEST(meta.codegen_version == jit::codegen::kCodegenVersion);
  BOOST_TEST(contains(meta.nvrtc_version, "NVRTC"));
}

BOOST_AUTO_TEST_CASE(a_graphs_kernels_compile_as_one_program_with_an_entry_each) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  // Two kernels with the same helper, header and macro: each lives in a namespace of its own,
  // the header is included once, the macro ends with its kernel.
  auto kernel = [](int i) {
    return fmt::format(
        "#include <cuda_fp16.h>\n#define SCALE {0}.0f\ntemplate <typename T> __device__ T twice(T "
        "v) {{ return v + v; }}\nextern \"C\" __global__ void k_b{0}(float* x) {{ x[threadIdx.x] "
        "= twice(x[threadIdx.x]) * SCALE + __half2float(__float2half(1.0f)); }}\n",
        i);
  };
  std::string s1 = kernel(1), s2 = kernel(2);
  auto r1 = request("k_b1", s1), r2 = request("k_b2", s2);
  std::string combined = cache::combined_source({&r1, &r2});
  auto count = [&](const std::string& part) {
    std::size_t n = 0;
    for (auto at = combined.find(part); at != std::string::npos; at = combined.find(part, at + 1))
      ++n;
    return n;
  };
  BOOST_TEST(count("#include <cuda_fp16.h>") == 1u);
  BOOST_TEST(count("namespace kiln_kernel_") == 4u);  // two opened, two closing comments
  BOOST_TEST(count("#undef SCALE") == 2u);
  auto images = cache::compile_together({&r1, &r2});
  BOOST_TEST_REQUIRE(images.size() == 2u);
  BOOST_TEST(images[0].image == images[1].image);  // one program
  BOOST_TEST(images[0].compiled->kernel("k_b1") != nullptr);
  BOOST_TEST(images[0].compiled->kernel("k_b2") != nullptr);
  // An entry each, under each kernel's own key: a later lookup of either hits.
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{images[0].key, images[1].key}));
  BOOST_TEST(cache::fetch_from_disk(r2)->image == images[1].image);
  BOOST_TEST(cache::DiskCache(dir.path()).load(images[1].key, false).meta.kernel == "k_b2");
  // Two kernels of one name are refused; a broken kernel in a plan's batch is named by the error
  // of the one-by-one retry.
  BOOST_CHECK_THROW(cache::compile_together({&r1, &r1}), Error);
  jit::codegen::KernelHandle ok("k_ok",
                                "extern \"C\" __global__ void k_ok(float* x) { x[0] = 1.0f; }\n");
  jit::codegen::KernelHandle broken(
      "k_broken", "extern \"C\" __global__ void k_broken(float* x) { x[0] = oops; }\n");
  std::vector<const jit::codegen::KernelHandle*> plan = {&ok, &broken};
  BOOST_CHECK_EXCEPTION(jit::codegen::prepare_kernels(plan), nvrtc::CompileError,
                        [](const Error& e) { return contains(e.what(), "k_broken.cu"); });
}

BOOST_AUTO_TEST_CASE(a_compiled_functions_first_call_compiles_its_kernels_in_one_program) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  // Softmax over rows, then over columns: two kernels (the + 1 is the second one's epilogue).
  auto f = jit::compile([](const Tensor& x) { return softmax(softmax(x, 1) * 2.0, 0) + 1.0; });
  Tensor x = randn({5, 7});
  Tensor got = f(x.to(Device::cuda()));
  BOOST_TEST(test::relative_error(got, softmax(softmax(x, 1) * 2.0, 0) + 1.0) <= 1e-5);
  std::set<std::string> images;
  for (const auto& key : entry_names(dir.path()))
    images.insert(cache::DiskCache(dir.path()).load(key, false).binary);
  BOOST_TEST(entry_names(dir.path()).size() == 2u);
  BOOST_TEST(images.size() == 1u);
}

BOOST_AUTO_TEST_CASE(truncated_bit_flipped_and_empty_entries_heal_with_one_warning) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  auto r = request("k_t2", kept_source(2));
  std::string key = cache::fetch_or_compile(r).key;
  fs::path entry = dir.path() / "kernels" / key;
  std::string ptx = read(entry / "kernel.ptx");
  auto damage = std::vector<std::pair<std::string, std::function<void()>>>{
      {"truncated binary",
       [&] { write_file(entry / "kernel.ptx", ptx.substr(0, ptx.size() / 2)); }},
      {"bit-flipped binary",
       [&] {
         std::string flipped = ptx;
         flipped[flipped.size() / 3] ^= 0x10;
         write_file(entry / "kernel.ptx", flipped);
       }},
      {"empty binary", [&] { write_file(entry / "kernel.ptx", ""); }},
      {"empty metadata", [&] { write_file(entry / "meta.json", ""); }},
      {"truncated metadata",
       [&] { write_file(entry / "meta.json", read(entry / "meta.json").substr(0, 40)); }},
      {"missing binary", [&] { fs::remove(entry / "kernel.ptx"); }},
  };
  for (auto& [what, hurt] : damage) {
    BOOST_TEST_CONTEXT(what) {
      hurt();
      cache::KernelImage healed;
      std::string err = test::capture_output(2, [&] { healed = cache::fetch_or_compile(r); });
      BOOST_TEST(healed.compiled.has_value());
      BOOST_TEST(lines(err) == 1, err);
      BOOST_TEST(contains(err, "kiln: warning: kernel cache entry " + key), err);
      BOOST_TEST(contains(err, "recompiling it"), err);
      BOOST_TEST(read(entry / "kernel.ptx") == ptx);
      BOOST_TEST(cache::DiskCache(dir.path()).verify(false).bad.empty());
      // And it is a plain hit again.
      BOOST_TEST(!cache::fetch_or_compile(r).compiled.has_value());
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unusable_directory_degrades_to_memory_with_one_warning) {
  test::TempDir dir;
  write_file(dir / "file", "not a directory");
  {
    // Unwritable for anyone, root included: its parent is a regular file.
    CacheEnv env(dir / "file" / "cache");
    std::string err = test::capture_output(2, [] {
      BOOST_TEST(cache::process_disk_cache() == nullptr);
      BOOST_TEST(cache::process_disk_cache() == nullptr);
    });
    BOOST_TEST(lines(err) == 1, err);
    BOOST_TEST(contains(err, "cannot be created"), err);
    BOOST_TEST(contains(err, "cached in memory only"), err);
    // Kernels still compile.
    cache::KernelImage k;
    test::capture_output(2, [&] { k = cache::fetch_or_compile(request("k_t3", kept_source(3))); });
    BOOST_TEST(k.compiled.has_value());
  }
  {
    CacheEnv env(dir / "file");
    std::string err = test::capture_output(2, [] { BOOST_TEST(!cache::process_disk_cache()); });
    BOOST_TEST(contains(err, "is not a directory"), err);
  }
  {
    fs::create_directory(dir / "shared");
    fs::permissions(dir / "shared", fs::perms::owner_all | fs::perms::group_all);
    CacheEnv env(dir / "shared");
    std::string err = test::capture_output(2, [] { BOOST_TEST(!cache::process_disk_cache()); });
    BOOST_TEST(contains(err, "writable by its group or others (mode 0770)"), err);
  }
  {
    CacheEnv env(dir / "off", "0");
    BOOST_TEST(!cache::process_disk_cache());
    BOOST_TEST(!fs::exists(dir / "off"));
  }
}

// Root writes through mode 0500 (the regular-file parent above covers root).
BOOST_AUTO_TEST_CASE(a_read_only_directory_is_not_used, *test::skip_if([] {
                       return geteuid() == 0 ? "running as root, which writes through mode 0500"
                                             : "";
                     })) {
  test::TempDir dir;
  fs::create_directory(dir / "readonly");
  fs::permissions(dir / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
  CacheEnv env(dir / "readonly");
  std::string err = test::capture_output(2, [] { BOOST_TEST(!cache::process_disk_cache()); });
  BOOST_TEST(contains(err, "is not writable"), err);
}

BOOST_AUTO_TEST_CASE(a_directory_owned_by_another_user_is_not_used, *test::skip_if([] {
                       return geteuid() == 0 ? ""
                                             : "not root: cannot give a directory to another user";
                     })) {
  test::TempDir dir;
  fs::create_directory(dir / "theirs");
  BOOST_TEST_REQUIRE(chown((dir / "theirs").c_str(), 12345, 12345) == 0);
  CacheEnv env(dir / "theirs");
  std::string err = test::capture_output(2, [] { BOOST_TEST(!cache::process_disk_cache()); });
  BOOST_TEST(contains(err, "is owned by uid 12345"), err);
}

BOOST_AUTO_TEST_CASE(eviction_removes_the_least_recently_used_first) {
  // Last uses are set explicitly (an entry's last use is its files' mtime), hours apart and in
  // the past, so that nothing depends on the clock's or the file system's granularity; a load
  // then makes its entry the most recent.
  test::TempDir dir;
  cache::DiskCache disk(dir.path(), 1 << 20);
  BOOST_TEST(!disk.open().has_value());
  std::string big(300 << 10, 'x');
  auto key = [](char c) { return std::string(32, c); };
  const auto past = fs::file_time_type::clock::now() - std::chrono::hours(24 * 365);
  auto last_used = [&](char c, int hour) {
    for (const auto& f : fs::directory_iterator(dir.path() / "kernels" / key(c)))
      fs::last_write_time(f.path(), past + std::chrono::hours(hour));
  };
  disk.store(fake_meta(key('a')), "a", big);
  disk.store(fake_meta(key('b')), "b", big);
  disk.store(fake_meta(key('c')), "c", big);
  last_used('a', 1);
  last_used('b', 2);
  last_used('c', 3);
  disk.load(key('a'));                        // a is now the most recently used; b the least
  disk.store(fake_meta(key('d')), "d", big);  // past the cap of 1 MiB: one goes
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{key('a'), key('c'), key('d')}));
  last_used('a', 4);
  last_used('d', 5);
  last_used('c', 6);
  auto report = disk.prune(700 << 10);
  BOOST_TEST(report.removed == 1);
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{key('c'), key('d')}));
  // A tie goes by key: c before d.
  last_used('c', 7);
  last_used('d', 7);
  BOOST_TEST(disk.prune(400 << 10).removed == 1);
  BOOST_TEST((entry_names(dir.path()) == std::set<std::string>{key('d')}));
  BOOST_TEST(disk.prune(0).removed == 1);
  BOOST_TEST(entry_names(dir.path()).empty());
}

BOOST_AUTO_TEST_CASE(another_arch_or_codegen_version_never_gets_a_stale_binary) {
  test::TempDir dir;
  CacheEnv env(dir.path());
  std::string src = source_of(4);
  auto a = cache::fetch_or_compile(request("k_t4", src, nvrtc::Target::ptx(9, 0)));
  auto b = cache::fetch_or_compile(request("k_t4", src, nvrtc::Target::ptx(8, 0)));
  BOOST_TEST(b.compiled.has_value());
  BOOST_TEST(a.key != b.key);
  BOOST_TEST(contains(b.image, ".target sm_80"));
  auto r = request("k_t4", src);
  r.codegen_version += 1;
  BOOST_TEST(cache::fetch_or_compile(r).compiled.has_value());
  BOOST_TEST(entry_names(dir.path()).size() == 3u);
  BOOST_TEST(!cache::fetch_or_compile(request("k_t4", src, nvrtc::Target::ptx(8, 0))).compiled);
}

BOOST_AUTO_TEST_SUITE_END()
