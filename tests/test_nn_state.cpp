// Module state as PyTorch users handle it: state_dict names, in-place loads that optimizers and
// compiled functions see, strict and non-strict key checks that change nothing on failure, tied
// parameters, modules on the GPU, and safetensors round trips (every dtype's bit patterns, the
// spec's byte layout, hand-written files, a fixture from another writer). References are values
// and bytes written by hand in the test. Corrupt files and writing: test_nn_state_files.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>

#include "autograd/nn.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"
#include "jit/compile.h"
#include "support/file_bytes.h"
#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

namespace {

std::vector<std::string> names(const nn::StateDict& s) {
  std::vector<std::string> out;
  for (const auto& [name, t] : s) out.push_back(name);
  return out;
}
std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// A module with nested children, a buffer and a child's buffer.
struct Block : nn::Module {
  nn::Linear fc;
  nn::LayerNorm ln;
  Tensor running_mean = zeros({2}, DType::f64);
  explicit Block(Generator* gen)
      : fc(3, 2, true, DType::f64, gen), ln({2}, 1e-5, true, DType::f64) {
    register_module("fc", fc);
    register_buffer("running_mean", running_mean);
    register_module("ln", ln);
  }
};
struct Net : nn::Module {
  Tensor scale = full({1}, 2.0, DType::f64);
  Block block;
  Tensor steps = zeros({}, DType::i64);
  explicit Net(Generator* gen) : block(gen) {
    register_parameter("scale", scale);
    register_module("block", block);
    register_buffer("steps", steps);
  }
};

// Two layers sharing one weight tensor, as a tied embedding / output projection.
struct Tied : nn::Module {
  nn::Linear enc, dec;
  Tied() : enc(2, 2, false, DType::f64), dec(2, 2, false, DType::f64) {
    dec.weight = enc.weight;
    register_module("enc", enc);
    register_module("dec", dec);
  }
};

// A module whose buffer slot may stay empty (registered before anything is put in it).
struct Lazy : nn::Module {
  Tensor w = f64s({1, 2});
  Tensor cache;
  Lazy() {
    register_parameter("w", w);
    register_buffer("cache", cache);
  }
};

struct UseVirtualGpu {
  UseVirtualGpu() { setenv("KILN_CUDA", "virtual", 0); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(state_dicts, *boost::unit_test::fixture<UseVirtualGpu>())

BOOST_AUTO_TEST_CASE(names_follow_registration_through_nested_modules_and_buffers) {
  Generator gen(1);
  Net net(&gen);
  // As PyTorch orders them: a module's own slots, then each child's, depth first.
  std::vector<std::string> want = {"scale",           "steps",         "block.running_mean",
                                   "block.fc.weight", "block.fc.bias", "block.ln.weight",
                                   "block.ln.bias"};
  BOOST_TEST(names(net.state_dict()) == want, boost::test_tools::per_element());
  std::vector<std::string> params, buffers;
  for (auto& [n, t] : net.named_parameters()) params.push_back(n);
  for (auto& [n, t] : net.named_buffers()) buffers.push_back(n);
  BOOST_TEST(params == (std::vector<std::string>{"scale", "block.fc.weight", "block.fc.bias",
                                                 "block.ln.weight", "block.ln.bias"}),
             boost::test_tools::per_element());
  BOOST_TEST(buffers == (std::vector<std::string>{"steps", "block.running_mean"}),
             boost::test_tools::per_element());
  // Entries are detached views of the module's storage.
  for (auto& [n, t] : net.state_dict()) BOOST_TEST(!t.requires_grad(), n);
  BOOST_TEST(shares_storage(net.state_dict()[3].second, net.block.fc.weight));
}

// A non-persistent buffer (a cache, a rotary table) is a buffer in every way but the state: not
// saved, not expected by a strict load, still moved by to() and read by compiled functions.
BOOST_AUTO_TEST_CASE(non_persistent_buffers_stay_out_of_the_state) {
  struct Cached : nn::Module {
    Tensor weight = ones({2}), cache = zeros({2}), table = full({2}, 3.0);
    Cached() {
      register_parameter("weight", weight);
      register_buffer("cache", cache, false);
      register_buffer("table", table);
    }
  } m;
  BOOST_TEST(names(m.state_dict()) == (std::vector<std::string>{"weight", "table"}),
             boost::test_tools::per_element());
  std::vector<std::string> buffers;
  for (auto& [n, t] : m.named_buffers()) buffers.push_back(n);
  BOOST_TEST(buffers == (std::vector<std::string>{"cache", "table"}),
             boost::test_tools::per_element());
  m.load_state_dict(m.state_dict());  // strict: the cache is not missing
  KILN_CHECK_THROWS(
      m.load_state_dict({{"weight", ones({2})}, {"table", ones({2})}, {"cache", ones({2})}}), Error,
      "unexpected keys [cache]");
  m.to(Device::cuda());
  BOOST_TEST(m.cache.device().is_cuda());
  jit::CompileOptions options;
  options.modules = {&m};
  auto f = jit::compile(
      [&](const Tensor& x) {
        m.cache.copy_(x);
        return x * m.weight + m.table;
      },
      options);
  Tensor x = tensor({1.0f, 2.0f}).to(Device::cuda());
  BOOST_TEST(values(f(x).to(Device::cpu())) == (std::vector<double>{4.0, 5.0}));
  BOOST_TEST(values(m.cache.to(Device::cpu())) == (std::vector<double>{1.0, 2.0}));
}

BOOST_AUTO_TEST_CASE(load_copies_into_the_existing_tensors) {
  Generator gen(2);
  Net net(&gen);
  Tensor weight = net.block.fc.weight, steps = net.steps;
  nn::StateDict state = {{"scale", f64s({3})},
                         {"block.fc.weight", f64s({1, 2, 3, 4, 5, 6}, {2, 3})},
                         {"block.fc.bias", f64s({-1, 1})},
                         {"block.running_mean", f64s({0.5, 0.25})},
                         {"block.ln.weight", f64s({2, 2})},
                         {"block.ln.bias", f64s({0, 1})},
                         {"steps", typed(DType::i64, {41}, {})}};
  net.load_state_dict(state);
  BOOST_TEST(net.block.fc.weight.same(weight));
  BOOST_TEST(net.steps.same(steps));
  BOOST_TEST(net.block.fc.weight.requires_grad());
  check_values(net.block.fc.weight, {2, 3}, {1, 2, 3, 4, 5, 6});
  check_values(net.block.running_mean, {2}, {0.5, 0.25});
  check_values(net.steps, {}, DType::i64, {41});
  // The module's storage is its own: changing the state afterwards changes nothing.
  {
    NoGradGuard g;
    state[1].second.fill_(0);
  }
  check_values(net.block.fc.weight, {2, 3}, {1, 2, 3, 4, 5, 6});
}

BOOST_AUTO_TEST_CASE(an_optimizer_and_compiled_functions_built_before_the_load_see_it) {
  nn::Linear fc(2, 1, true, DType::f64);
  optim::SGD opt(fc.parameters(), 0.5);
  jit::CompileOptions options;
  options.modules = {&fc};
  auto declared = jit::compile([&](const Tensor& x) { return fc(x); }, options);
  auto captured = jit::compile([&](const Tensor& x) { return fc(x); });
  Tensor x = f64s({1, 2}, {1, 2});
  declared(x);
  captured(x);
  fc.load_state_dict({{"weight", f64s({3, -1}, {1, 2})}, {"bias", f64s({0.5})}});
  // 3*1 - 1*2 + 0.5
  check_values(declared(x), {1, 1}, {1.5});
  check_values(captured(x), {1, 1}, {1.5});
  fc.weight.set_grad(f64s({1, 2}, {1, 2}));
  fc.bias.set_grad(f64s({4}));
  opt.step();  // p -= 0.5 * g on the loaded values
  check_values(fc.weight, {1, 2}, {2.5, -2});
  check_values(fc.bias, {1}, {-1.5});
}

BOOST_AUTO_TEST_CASE(strict_load_names_every_missing_and_unexpected_key_and_changes_nothing) {
  Generator gen(3);
  Net net(&gen);
  auto before = net.state_dict();
  std::vector<std::vector<double>> old;
  for (auto& [n, t] : before) old.push_back(values(t));
  auto old_bias = values(net.block.fc.bias);
  nn::StateDict state = {{"scale", f64s({9})},
                         {"block.fc.weight", f64s({1, 2, 3, 4, 5, 6}, {2, 3})},
                         {"block.extra", f64s({1})},
                         {"head.weight", f64s({1})}};
  KILN_CHECK_THROWS(net.load_state_dict(state), Error, "load_state_dict", "block.fc.bias",
                    "block.running_mean", "block.ln.weight", "block.ln.bias", "steps",
                    "block.extra", "head.weight");
  auto after = net.state_dict();
  for (std::size_t i = 0; i < after.size(); ++i)
    BOOST_TEST(values(after[i].second) == old[i], after[i].first);
  // Non-strict: the matching keys load, the others are ignored.
  net.load_state_dict(state, /*strict=*/false);
  check_values(net.scale, {1}, {9});
  check_values(net.block.fc.weight, {2, 3}, {1, 2, 3, 4, 5, 6});
  BOOST_TEST(values(net.block.fc.bias) == old_bias);
}

BOOST_AUTO_TEST_CASE(mis_shaped_and_mis_dtyped_keys_are_all_named_even_when_not_strict) {
  Generator gen(4);
  Net net(&gen);
  auto old_scale = values(net.scale);
  auto old_bias = values(net.block.fc.bias);
  // A good key first: validation must happen before any copy.
  nn::StateDict state = {{"scale", f64s({7})},
                         {"block.fc.weight", f64s({1, 2, 3, 4, 5, 6}, {3, 2})},
                         {"block.fc.bias", f64s({1, 2, 3})},
                         {"steps", f64s({1.5}, {})},
                         {"block.running_mean", bools({true, false}, {2})}};
  for (bool strict : {true, false}) {
    KILN_CHECK_THROWS(net.load_state_dict(state, strict), Error, "load_state_dict",
                      "block.fc.weight", "[3, 2]", "[2, 3]", "block.fc.bias", "[3]", "[2]", "steps",
                      "f64", "i64", "block.running_mean", "bool");
    BOOST_TEST(values(net.scale) == old_scale);
    BOOST_TEST(values(net.block.fc.bias) == old_bias);
  }
  // Floating dtypes convert, as PyTorch's copy_ does (an f16 checkpoint into an f64 model).
  net.load_state_dict({{"scale", typed(DType::f16, {0.1}, {1})}}, false);
  check_values(net.scale, {1}, DType::f64, {round_to(DType::f16, 0.1)});
}

BOOST_AUTO_TEST_CASE(an_undefined_tensor_in_the_state_is_an_error_naming_the_key) {
  nn::Linear fc(2, 2, true, DType::f64);
  auto old = values(fc.weight);
  KILN_CHECK_THROWS(
      fc.load_state_dict({{"weight", f64s({1, 2, 3, 4}, {2, 2})}, {"bias", Tensor()}}), Error,
      "load_state_dict", "'bias'", "undefined");
  BOOST_TEST(values(fc.weight) == old);
  KILN_CHECK_THROWS(
      fc.load_state_dict(
          {{"weight", f64s({1, 2, 3, 4}, {2, 2})}, {"weight", f64s({1, 2, 3, 4}, {2, 2})}}, false),
      Error, "load_state_dict", "'weight'", "twice");
}

BOOST_AUTO_TEST_CASE(a_state_built_from_the_module_itself_is_read_before_it_is_overwritten) {
  // Swapping two layers through a state that aliases the module's own tensors.
  struct Two : nn::Module {
    nn::Linear a{2, 2, false, DType::f64}, b{2, 2, false, DType::f64};
    Two() {
      register_module("a", a);
      register_module("b", b);
    }
  } m;
  m.load_state_dict(
      {{"a.weight", f64s({1, 2, 3, 4}, {2, 2})}, {"b.weight", f64s({5, 6, 7, 8}, {2, 2})}});
  m.load_state_dict({{"a.weight", m.b.weight.detach()}, {"b.weight", m.a.weight.detach()}});
  check_values(m.a.weight, {2, 2}, {5, 6, 7, 8});
  check_values(m.b.weight, {2, 2}, {1, 2, 3, 4});
  // A transposed view of the tensor being written.
  m.load_state_dict({{"a.weight", m.a.weight.detach().t()}}, false);
  check_values(m.a.weight, {2, 2}, {5, 7, 6, 8});
}

BOOST_AUTO_TEST_CASE(a_reassigned_parameter_member_is_what_parameters_and_state_dict_hold) {
  nn::Linear fc(2, 2, true, DType::f64);
  Tensor replacement = f64s({1, 2, 3, 4}, {2, 2}).requires_grad_();
  fc.weight = replacement;
  BOOST_TEST(fc.parameters().at(0).same(replacement));
  BOOST_TEST(fc.named_parameters().at(0).first == "weight");
  BOOST_TEST(shares_storage(fc.state_dict().at(0).second, replacement));
  // A load now writes into the replacement.
  fc.load_state_dict({{"weight", f64s({5, 6, 7, 8}, {2, 2})}, {"bias", f64s({0, 0})}});
  check_values(replacement, {2, 2}, {5, 6, 7, 8});
}

BOOST_AUTO_TEST_CASE(tied_parameters_are_listed_once_but_saved_under_both_names) {
  Tied m;
  BOOST_TEST(m.parameters().size() == 1u);
  BOOST_TEST(m.named_parameters().at(0).first == "enc.weight");
  BOOST_TEST(names(m.state_dict()) == (std::vector<std::string>{"enc.weight", "dec.weight"}),
             boost::test_tools::per_element());
  // One SGD step moves the shared tensor once, not once per name.
  optim::SGD opt(m.parameters(), 1.0);
  m.load_state_dict(
      {{"enc.weight", f64s({1, 2, 3, 4}, {2, 2})}, {"dec.weight", f64s({1, 2, 3, 4}, {2, 2})}});
  m.enc.weight.set_grad(f64s({1, 1, 1, 1}, {2, 2}));
  opt.step();
  check_values(m.dec.weight, {2, 2}, {0, 1, 2, 3});
  m.zero_grad();
  BOOST_TEST(!m.enc.weight.grad().defined());
}

BOOST_AUTO_TEST_CASE(to_dtype_converts_floating_state_keeps_integers_and_ties) {
  Generator gen(7);
  Net net(&gen);
  std::vector<double> weight_before = values(net.block.fc.weight);
  net.to(DType::f32);
  for (const auto& [name, t] : net.state_dict())
    BOOST_TEST(t.dtype() == (name == "steps" ? DType::i64 : DType::f32), name);
  for (const Tensor& p : net.parameters()) {
    BOOST_TEST(p.requires_grad());
    BOOST_TEST(!p.grad_fn());
  }
  std::vector<double> weight_after = values(net.block.fc.weight);
  BOOST_REQUIRE(weight_after.size() == weight_before.size());
  for (std::size_t i = 0; i < weight_before.size(); ++i)
    BOOST_TEST(weight_after[i] == static_cast<double>(static_cast<float>(weight_before[i])));

  Tied tied;
  tied.to(DType::f32);
  BOOST_TEST(&tied.enc.weight.impl() == &tied.dec.weight.impl());
  BOOST_TEST(tied.parameters().size() == 1u);

  try {
    net.to(DType::i32);
    BOOST_FAIL("converting a module to i32 did not fail");
  } catch (const Error& e) {
    BOOST_TEST(
        std::string(e.what()).find("Module::to: i32 is not a floating dtype") != std::string::npos,
        e.what());
  }
}

BOOST_AUTO_TEST_CASE(an_empty_buffer_is_not_saved_not_required_and_filled_by_a_load) {
  TempDir dir;
  Lazy m;
  BOOST_TEST(names(m.state_dict()) == (std::vector<std::string>{"w"}),
             boost::test_tools::per_element());
  m.load_state_dict(m.state_dict());  // strict: the empty slot is not missing
  {
    NoGradGuard g;
    m.w.fill_(8);  // so that a load that read nothing would show
  }
  m.save(dir / "lazy.safetensors");
  Lazy other;
  other.load(dir / "lazy.safetensors");
  check_values(other.w, {2}, {8, 8});
  BOOST_TEST(!other.cache.defined());  // the empty buffer was neither saved nor filled
  m.load_state_dict({{"w", f64s({3, 4})}, {"cache", f64s({5, 6, 7})}});
  check_values(m.cache, {3}, {5, 6, 7});
  BOOST_TEST(!m.cache.requires_grad());
}

BOOST_AUTO_TEST_CASE(save_and_load_round_trip_a_module_through_a_file) {
  TempDir dir;
  Generator gen(5), gen2(6);
  Net a(&gen), b(&gen2);
  {
    NoGradGuard g;
    a.steps.fill_(12);
  }
  a.save(dir / "net.safetensors");
  Tensor weight = b.block.fc.weight;
  b.load(dir / "net.safetensors");
  BOOST_TEST(b.block.fc.weight.same(weight));
  auto sa = a.state_dict(), sb = b.state_dict();
  for (std::size_t i = 0; i < sa.size(); ++i)
    BOOST_TEST(raw(sa[i].second) == raw(sb[i].second), sa[i].first);
  // A load into an f32 model converts the f64 checkpoint.
  struct Small : nn::Module {
    nn::Linear fc{3, 2, true, DType::f32};
    Small() { register_module("block.fc", fc); }
  } small;
  small.load(dir / "net.safetensors", /*strict=*/false);
  auto want = values(a.block.fc.weight);
  check_values(small.fc.weight, {2, 3}, DType::f32, round_to(DType::f32, want));
}

BOOST_AUTO_TEST_CASE(a_module_on_the_gpu_saves_and_loads_in_place_across_devices) {
  TempDir dir;
  nn::Linear fc(2, 1, true, DType::f32);
  fc.weight = fc.weight.detach().to(Device::cuda()).requires_grad_();
  fc.bias = fc.bias.detach().to(Device::cuda()).requires_grad_();
  Tensor weight = fc.weight;
  fc.load_state_dict({{"weight", f64s({0.5, -1}, {1, 2})}, {"bias", f64s({2})}});
  BOOST_TEST(fc.weight.same(weight));
  BOOST_TEST(fc.weight.device().is_cuda());
  fc.save(dir / "gpu.safetensors");
  SafetensorsFile f = load_safetensors(dir / "gpu.safetensors");
  check_values(f.tensors.at(0).second, {1, 2}, DType::f32, {0.5, -1});
  {
    NoGradGuard g;
    f.tensors.at(1).second.fill_(3);
  }
  save_safetensors(dir / "gpu.safetensors", f.tensors);
  fc.load(dir / "gpu.safetensors");
  BOOST_TEST(fc.bias.device().is_cuda());
  check_values(fc.bias.to(Device::cpu()), {1}, {3});
}

BOOST_AUTO_TEST_CASE(the_fixture_from_another_writer_loads_with_its_exact_values) {
  std::string path = std::string(KILN_TEST_FIXTURES) + "/tiny.safetensors";
  SafetensorsFile f = load_safetensors(path);
  std::vector<std::string> order;
  for (auto& [n, t] : f.tensors) order.push_back(n);
  BOOST_TEST(
      order == (std::vector<std::string>{"layer.weight", "layer.bias", "half", "brain", "double",
                                         "ints", "longs", "mask", "scalar", "empty"}),
      boost::test_tools::per_element());
  auto at = [&](std::size_t i) { return f.tensors.at(i).second; };
  check_values(at(0), {2, 3}, DType::f32, {0.5, -1.25, 2.0, 3.0, -0.0, double(0.001f)});
  BOOST_TEST(std::signbit(values(at(0))[4]));
  check_values(at(1), {3}, DType::f32, {0.25, 0.5, -4.0});
  check_values(at(2), {4}, DType::f16, {1.0, -2.5, 65504.0, 0.0009765625});
  check_values(at(3), {2, 2}, DType::bf16, {1.0, -3.0, 0.15625, 256.0});
  check_values(at(4), {2}, DType::f64, {3.141592653589793, -1e300});
  check_values(at(5), {3}, DType::i32, {-7, 0, 2147483647});
  BOOST_TEST(at(6).to_vector<std::int64_t>() ==
             (std::vector<std::int64_t>{-9007199254740993LL, 42}));
  check_values(at(7), {5}, DType::bool_, {1, 0, 0, 1, 1});
  check_values(at(8), {}, DType::f32, {7.5});
  check_values(at(9), {0, 4}, DType::f32, {});
  BOOST_TEST(f.metadata.size() == 2u);
  BOOST_TEST(f.metadata.at("format") == "pt");
  BOOST_TEST(f.metadata.at("writer") == "independent fixture writer");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(safetensors_round_trip, *boost::unit_test::fixture<UseVirtualGpu>())

BOOST_AUTO_TEST_CASE(every_dtype_round_trips_bit_for_bit_in_the_spec_layout) {
  TempDir dir;
  // Bit patterns arithmetic would not preserve: NaN payloads, -0, infinities, subnormals.
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f16",
       from_bytes(DType::f16, {2, 3},
                  bytes_of<std::uint16_t>({0x7C00, 0xFC00, 0x7E01, 0x8000, 0x0001, 0x3C00}))},
      {"bf16",
       from_bytes(DType::bf16, {6},
                  bytes_of<std::uint16_t>({0x7F80, 0xFF80, 0x7FC1, 0x8000, 0x0001, 0x3F80}))},
      {"f32", from_bytes(DType::f32, {3},
                         bytes_of<std::uint32_t>({0x7FC00001u, 0xFF800000u, 0x80000000u}))},
      {"f64", from_bytes(DType::f64, {2},
                         bytes_of<std::uint64_t>({0x7FF0000000000001ull, 0x0000000000000001ull}))},
      {"i32", from_bytes(DType::i32, {2}, bytes_of<std::int32_t>({INT32_MIN, -1}))},
      {"i64", from_bytes(DType::i64, {2}, bytes_of<std::int64_t>({INT64_MIN, INT64_MAX}))},
      {"bool", from_bytes(DType::bool_, {3}, bytes_of<std::uint8_t>({1, 0, 1}))},
      {"scalar", from_bytes(DType::f32, {}, bytes_of<float>({-2.5f}))},
      {"none", empty({0, 3}, DType::f64)},
      {"none2", empty({3, 0}, DType::i32)},
  };
  std::string path = dir / "all.safetensors";
  save_safetensors(path, tensors, {{"format", "pt"}, {"note", "äöü ✓"}});
  // The bytes as the spec lays them out: header length, JSON padded to 8, data in order.
  std::string file = read_bytes(path);
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i)
    header_len |= static_cast<std::uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  BOOST_TEST(header_len % 8 == 0u);
  std::string data;
  for (auto& [n, t] : tensors) data += raw(t);
  BOOST_TEST_REQUIRE(file.size() == 8 + header_len + data.size());
  BOOST_TEST((file.substr(8 + header_len) == data));
  std::string header = file.substr(8, header_len);
  BOOST_TEST(header.find("\"f16\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}") !=
             std::string::npos);
  BOOST_TEST(header.find("\"scalar\":{\"dtype\":\"F32\",\"shape\":[]") != std::string::npos);

  SafetensorsFile back = load_safetensors(path);
  BOOST_TEST_REQUIRE(back.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    BOOST_TEST(back.tensors[i].first == tensors[i].first);
    BOOST_TEST(back.tensors[i].second.dtype() == tensors[i].second.dtype());
    BOOST_TEST(back.tensors[i].second.shape() == tensors[i].second.shape());
    BOOST_TEST((raw(back.tensors[i].second) == raw(tensors[i].second)), tensors[i].first);
  }
  BOOST_TEST(back.metadata ==
             (std::map<std::string, std::string>{{"format", "pt"}, {"note", "äöü ✓"}}));
  save_safetensors(path, {{"x", f64s({1})}});
  BOOST_TEST(load_safetensors(path).metadata.empty());
}

BOOST_AUTO_TEST_CASE(strided_and_non_contiguous_tensors_are_written_row_major) {
  TempDir dir;
  Tensor t = f64s({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  save_safetensors(dir / "t.safetensors", {{"t", t}});
  check_values(load_safetensors(dir / "t.safetensors").tensors.at(0).second, {3, 2},
               {1, 4, 2, 5, 3, 6});
}

BOOST_AUTO_TEST_CASE(hand_written_files_with_padding_any_key_order_and_scattered_offsets) {
  TempDir dir;
  // "b" is listed first but its data comes second; the entries' fields are in another order;
  // the header is padded with spaces and has whitespace inside.
  std::string header =
      "{ \"b\": {\"data_offsets\": [8, 16], \"shape\": [2], \"dtype\": \"I32\"},\n"
      "  \"__metadata__\": {\"k\": \"v\"},\n"
      "  \"a\": {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [0, 8]},\n"
      "  \"z\": {\"dtype\": \"F64\", \"shape\": [0], \"data_offsets\": [16, 16]} }";
  std::string path = dir / "hand.safetensors";
  write_bytes(path,
              st_file(header, bytes_of<float>({1.5f, -2.0f}) + bytes_of<std::int32_t>({7, -8})));
  SafetensorsFile f = load_safetensors(path);
  BOOST_TEST_REQUIRE(f.tensors.size() == 3u);
  BOOST_TEST(f.tensors[0].first == "b");
  check_values(f.tensors[0].second, {2}, DType::i32, {7, -8});
  BOOST_TEST(f.tensors[1].first == "a");
  check_values(f.tensors[1].second, {2}, DType::f32, {1.5, -2.0});
  check_values(f.tensors[2].second, {0}, DType::f64, {});
  BOOST_TEST(f.metadata.at("k") == "v");
  // Unpadded headers are valid too; an empty header object is a file with no tensors.
  write_bytes(path, st_file("{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}",
                            bytes_of<std::uint16_t>({0x4049}), false));
  check_values(load_safetensors(path).tensors.at(0).second, {1}, DType::bf16, {3.140625});
  write_bytes(path, st_file("{}", ""));
  BOOST_TEST(load_safetensors(path).tensors.empty());
}

BOOST_AUTO_TEST_SUITE_END()
