// A reference-counted block of memory shared by a tensor and all of its views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/device.h"

namespace kiln {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  Storage(void* data, std::size_t nbytes, Device device, Deleter deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter_) deleter_(data_);
  }

  // Zero-initialized host memory.
  static std::shared_ptr<Storage> allocate_cpu(std::size_t nbytes);

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // From now on the bytes live at `data` (the same size), freed by `deleter`; the old memory is
  // freed by its deleter. A CUDA graph hands an output it is about to overwrite to the tensors
  // still holding it this way, after copying the bytes.
  void rehome(void* data, Deleter deleter) {
    if (deleter_) deleter_(data_);
    data_ = data;
    deleter_ = std::move(deleter);
  }

  // Bumped by every in-place write; autograd compares it with the version a saved tensor saw.
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_;
  Deleter deleter_;
  std::uint64_t version_ = 0;
};

}  // namespace kiln
