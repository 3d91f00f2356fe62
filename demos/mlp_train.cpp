// Trains a 2-layer MLP (Linear -> GELU -> Linear) with cross-entropy and AdamW on a seeded,
// synthetic 4-class problem: four interleaved noisy spiral arms that no linear model separates.
// Prints the loss per epoch and the held-out accuracy. `--device cuda` trains on the CUDA
// device (the virtual GPU on a machine without one), every op a generated kernel.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <string>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"

using namespace kiln;

namespace {

struct Dataset {
  Tensor x;  // [n, 2] f32
  Tensor y;  // [n] i64
};

// Class c lives on a spiral arm starting at angle c*pi/2; arms interleave, so the boundary is
// curved, and Gaussian noise makes the problem not perfectly separable.
Dataset make_spirals(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor cls = randint(0, 4, {n}, DType::i64, &gen);
  Tensor t = rand({n}, DType::f64, &gen);  // position along the arm
  Tensor noise = randn({n, 2}, DType::f64, &gen) * 0.08;
  Tensor angle = cls.to(DType::f64) * (std::numbers::pi / 2) + t * 2.5;
  Tensor radius = t * 0.9 + 0.1;
  Tensor x = stack({radius * cos(angle), radius * sin(angle)}, 1) + noise;
  return {x.to(DType::f32), cls};
}

}  // namespace

int main(int argc, char** argv) {
  Device device = Device::cpu();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      std::string name = argv[++i];
      if (name == "cuda")
        device = Device::cuda();
      else if (name != "cpu") {
        std::fprintf(stderr, "mlp_train: unknown device '%s' (cpu or cuda)\n", name.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: mlp_train [--device cpu|cuda]\n");
      return 2;
    }
  }
  const std::int64_t batch = 64, epochs = 30;
  Dataset train = make_spirals(2048, 1);
  Dataset test = make_spirals(512, 2);
  train = {train.x.to(device), train.y.to(device)};
  test = {test.x.to(device), test.y.to(device)};

  Generator init(42);
  nn::Linear fc1(2, 64, true, DType::f32, &init);
  nn::Linear fc2(64, 4, true, DType::f32, &init);
  fc1.to(device);
  fc2.to(device);
  std::printf("training on %s\n", device.str().c_str());
  std::vector<Tensor> params = fc1.parameters();
  for (auto& p : fc2.parameters()) params.push_back(p);
  optim::AdamW opt(params, /*lr=*/1e-2, 0.9, 0.999, 1e-8, /*weight_decay=*/1e-4);

  auto model = [&](const Tensor& x) { return fc2(gelu(fc1(x))); };
  std::int64_t n = train.x.size(0);
  // Samples are drawn i.i.d. in random class order, so fixed batches need no shuffling.
  for (std::int64_t epoch = 0; epoch < epochs; ++epoch) {
    double total = 0;
    std::int64_t batches = 0;
    for (std::int64_t start = 0; start < n; start += batch) {
      std::int64_t end = std::min(n, start + batch);
      Tensor xb = train.x.slice(0, start, end), yb = train.y.slice(0, start, end);
      Tensor loss = cross_entropy(model(xb), yb);
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.item();
      ++batches;
    }
    std::printf("epoch %2lld  loss %.4f\n", static_cast<long long>(epoch + 1),
                total / static_cast<double>(batches));
  }

  NoGradGuard no_grad;
  Tensor predicted = argmax(model(test.x), 1);
  double accuracy = mean(eq(predicted, test.y).to(DType::f32)).item();
  std::printf("test accuracy %.2f%% on %lld held-out points\n", accuracy * 100,
              static_cast<long long>(test.x.size(0)));
  return accuracy >= 0.9 ? 0 : 1;
}
