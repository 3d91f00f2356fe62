// The process-wide host-wait counters (see host_sync.h).
#include "runtime/cuda/host_sync.h"

namespace kiln::cuda {

HostSyncStats& host_sync_stats() {
  static HostSyncStats stats;
  return stats;
}

}  // namespace kiln::cuda
