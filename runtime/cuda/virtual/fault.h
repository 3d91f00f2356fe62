// Errors raised by the virtual GPU: a kernel that misbehaves at run time (out-of-bounds access,
// unreachable barrier, ...) throws KernelFault; PTX it cannot take throws PtxError.
#pragma once

#include "runtime/error.h"

namespace kiln::cuda {

// A fault inside a running kernel; the message names the kernel, block, thread and PTX line.
class KernelFault : public Error {
 public:
  using Error::Error;
};

// PTX the interpreter cannot parse or does not implement ("unsupported PTX instruction ...").
class PtxError : public Error {
 public:
  using Error::Error;
};

// A launch a real GPU would refuse (block too large, too much shared memory, ...).
class LaunchError : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln::cuda
