// Trains the zoo's models (demos/zoo/catalog.h: GPT-2, a Llama-style decoder, a ViT-style encoder,
// an MLP-Mixer, GPT-NeoX, a BERT-style encoder) on their synthetic tasks, eagerly and with the
// loss compiled, from the same initialization and the same batches (and, with dropout, masks).
// Prints the loss every few steps for both, then the generated launches and cuBLASLt calls of one
// step each: what a user copying a model from demos/zoo/ sees it cost.
//
//   zoo_train [--model NAME] [--steps N] [--layers N] [--autocast bf16] [--device cpu|cuda]
//     --model NAME     only the models whose names contain NAME (default: every model)
//     --steps N        AdamW steps (default 30)
//     --layers N       blocks per model (default 2)
//     --autocast bf16  forward and loss under autocast(bf16)
//     --device         cuda (default; the virtual GPU on a machine without one) or cpu
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "demos/zoo/catalog.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/lt_matmul.h"

using namespace kiln;

namespace {

struct Options {
  std::string model;
  std::int64_t steps = 30, layers = 2;
  std::optional<DType> autocast;
  Device device = Device::cuda();
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "zoo_train: %s\nusage: zoo_train [--model NAME] [--steps N] [--layers N] "
               "[--autocast bf16] [--device cpu|cuda]\n",
               what.c_str());
  std::exit(2);
}

std::int64_t positive(const char* flag, const char* text) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 1)
    usage_error(std::string(flag) + " takes a positive integer, got '" + text + "'");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage_error("trains the zoo's models");
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--steps") {
      o.steps = positive("--steps", value);
    } else if (flag == "--layers") {
      o.layers = positive("--layers", value);
    } else if (flag == "--autocast") {
      if (std::strcmp(value, "bf16") != 0)
        usage_error(std::string("--autocast takes bf16, got '") + value + "'");
      o.autocast = DType::bf16;
    } else if (flag == "--device") {
      if (std::strcmp(value, "cuda") == 0)
        o.device = Device::cuda();
      else if (std::strcmp(value, "cpu") == 0)
        o.device = Device::cpu();
      else
        usage_error(std::string("--device takes cpu or cuda, got '") + value + "'");
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  return o;
}

std::int64_t launches_so_far() {
  return jit::codegen::launch_stats().launches.load() + jit::codegen::lt_stats().calls.load();
}

// One model, eager and compiled side by side over the same batches.
void train(const zoo::CatalogEntry& entry, const Options& o) {
  std::printf("\n%s (%lld micro-batch%s a step)\n", entry.name.c_str(),
              static_cast<long long>(entry.micro_batches), entry.micro_batches > 1 ? "es" : "");
  std::unique_ptr<zoo::Run> runs[2];
  for (int compiled = 0; compiled < 2; ++compiled) {
    zoo::TrainOptions t;
    t.autocast = o.autocast;
    t.compiled = compiled == 1;
    t.name = "zoo_" + entry.name;
    runs[compiled] = entry.start(/*seed=*/1, DType::f32, o.device, t);
  }
  Generator gen(7);
  std::int64_t launches[2] = {0, 0};
  std::printf("  %5s %12s %12s\n", "step", "eager", "compiled");
  for (std::int64_t step = 1; step <= o.steps; ++step) {
    const std::vector<zoo::Batch> batches = entry.step_batches(gen, o.device);
    double loss[2];
    for (int mode = 0; mode < 2; ++mode) {
      std::int64_t before = launches_so_far();
      loss[mode] = runs[mode]->step(batches);
      launches[mode] = launches_so_far() - before;  // the last (warm) step's
    }
    if (step == 1 || step % 5 == 0 || step == o.steps)
      std::printf("  %5lld %12.6f %12.6f\n", static_cast<long long>(step), loss[0], loss[1]);
  }
  if (o.device.is_cuda())
    std::printf(
        "  launches + library calls per step (optimizer included): eager %lld, "
        "compiled %lld (%.1fx fewer)\n",
        static_cast<long long>(launches[0]), static_cast<long long>(launches[1]),
        launches[1] ? static_cast<double>(launches[0]) / launches[1] : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  int trained = 0;
  try {
    for (const zoo::CatalogEntry& entry : zoo::catalog(o.layers)) {
      if (entry.name.find(o.model) == std::string::npos) continue;
      train(entry, o);
      ++trained;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zoo_train: %s\n", e.what());
    return 1;
  }
  if (trained == 0) usage_error("no zoo model's name contains '" + o.model + "'");
  return 0;
}
