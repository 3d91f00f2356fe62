// The README's example: a model function compiled with jit::compile and run, forward and
// backward, on the CUDA device (the virtual GPU on a machine without one). Run it with
// `scripts/build quickstart && build/quickstart`.
#include <iostream>

#include "autograd/nn.h"
#include "jit/compile.h"

using namespace kiln;

int main() {
  Device cuda = Device::cuda();  // a GPU, else kiln's virtual GPU
  nn::Linear fc1(4, 16), fc2(16, 3);
  fc1.to(cuda);
  fc2.to(cuda);
  jit::CompileOptions options;
  options.name = "loss";
  options.modules = {&fc1, &fc2};  // their parameters are read on every call
  auto loss_fn = jit::compile(
      [&](const Tensor& x, const Tensor& y) { return cross_entropy(fc2(gelu(fc1(x))), y); },
      options);

  Tensor x = randn({8, 4}).to(cuda), y = randint(0, 3, {8}).to(cuda);
  Tensor loss = loss_fn(x, y);       // first call: traced, fused, compiled by NVRTC
  loss.backward();                   // the compiled backward
  Tensor again = loss_fn(x * 2, y);  // guards pass: the same kernels, no trace
  jit::CompiledStats stats = loss_fn.core().stats();
  std::cout << "loss " << loss.item() << ", then " << again.item() << "; |grad fc1.weight| "
            << sqrt(square(fc1.weight.grad()).sum()).item() << "\n"
            << stats.calls << " calls, " << stats.compiles << " trace, " << stats.kernel_calls
            << " on generated kernels (loss_fn.explain() lists them)\n";
}
