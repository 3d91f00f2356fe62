// Where a tensor's memory lives: the host, or a CUDA device (a real GPU or the virtual GPU).
#pragma once

#include <string>

namespace kiln {

struct Device {
  enum class Type { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;

  static Device cpu() { return {Type::cpu, 0}; }
  static Device cuda(int index = 0) { return {Type::cuda, index}; }
  bool is_cpu() const { return type == Type::cpu; }
  bool is_cuda() const { return type == Type::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace kiln
