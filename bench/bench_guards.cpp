// Host cost of a compiled function's cache hit: building the call's arguments, checking an
// entry's guards and finding the entry, with no execution. Prints ns per call and per guard
// for 1, 8 and 64 tensor inputs (median of 9 runs of 20000 lookups).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <utility>

#include "autograd/ops.h"
#include "jit/compile.h"

using namespace kiln;

namespace {

template <std::size_t N>
void measure() {
  std::array<Tensor, N> inputs;
  for (auto& t : inputs) t = ones({8, 16});
  auto f = jit::compile([](const auto&... xs) { return (xs + ...); });
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>) { return f(inputs[I]...); };
  auto lookup = [&]<std::size_t... I>(std::index_sequence<I...>) { return f.lookup(inputs[I]...); };
  call(std::make_index_sequence<N>{});
  if (lookup(std::make_index_sequence<N>{}) != 0) std::abort();

  constexpr int kIters = 20000;
  std::array<double, 9> runs{};
  for (auto& run : runs) {
    auto start = std::chrono::steady_clock::now();
    int found = 0;
    for (int i = 0; i < kIters; ++i) found += lookup(std::make_index_sequence<N>{}) == 0;
    auto stop = std::chrono::steady_clock::now();
    if (found != kIters) std::abort();
    run = std::chrono::duration<double, std::nano>(stop - start).count() / kIters;
  }
  std::sort(runs.begin(), runs.end());
  double median = runs[runs.size() / 2];
  std::size_t guards = f.core().guards(0).count();
  std::printf("%3zu tensor inputs: %8.1f ns per cache hit, %5zu guards, %5.2f ns per guard\n", N,
              median, guards, median / static_cast<double>(guards));
}

}  // namespace

int main() {
  std::printf("compiled-function cache hit (guard check + entry lookup, no execution)\n");
  measure<1>();
  measure<8>();
  measure<64>();
  return 0;
}
