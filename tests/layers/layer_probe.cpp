// Compiled by test_layers as a source of one layer (its include directory, see CMakeLists.txt's
// kiln_layer_probe), with KILN_PROBE_INCLUDE naming one more header to include.
#include "runtime/tensor.h"

#ifdef KILN_PROBE_INCLUDE
#include KILN_PROBE_INCLUDE
#endif

int kiln_layer_probe() {
  return static_cast<int>(kiln::Shape{2, 3}.size());
}
