// The NCCL functions kiln calls, as a table filled by dlopen("libnccl.so.2") as the CUDA driver
// is: kiln builds without NCCL's headers or library, and a test can install a fake table to
// check the calls the backend makes.
#pragma once

#include <cstddef>

namespace kiln::dist {

// NCCL's ABI values (nccl.h): ncclResult_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId.
enum NcclDataType : int {
  nccl_int32 = 2,
  nccl_int64 = 4,
  nccl_float16 = 6,
  nccl_float32 = 7,
  nccl_float64 = 8,
  nccl_bfloat16 = 9
};
enum NcclRedOp : int { nccl_sum = 0, nccl_max = 2, nccl_avg = 4 };
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;
using NcclStream = void*;

struct NcclApi {
  int (*get_unique_id)(NcclUniqueId* id) = nullptr;
  int (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank) = nullptr;
  int (*comm_destroy)(NcclComm comm) = nullptr;
  int (*all_reduce)(const void* send, void* recv, std::size_t count, int dtype, int op,
                    NcclComm comm, NcclStream stream) = nullptr;
  int (*broadcast)(const void* send, void* recv, std::size_t count, int dtype, int root,
                   NcclComm comm, NcclStream stream) = nullptr;
  int (*all_gather)(const void* send, void* recv, std::size_t count, int dtype, NcclComm comm,
                    NcclStream stream) = nullptr;
  int (*reduce_scatter)(const void* send, void* recv, std::size_t count, int dtype, int op,
                        NcclComm comm, NcclStream stream) = nullptr;
  const char* (*get_error_string)(int result) = nullptr;
};

// The table of the library `name` (dlopen, then a dlsym per function): Error naming the library
// when it cannot be loaded, or the first function it lacks.
NcclApi load_nccl_library(const char* name = "libnccl.so.2");
// The table the nccl backend uses: the fake installed for a test, else libnccl.so.2's (loaded
// once; Error naming libnccl.so.2 when dlopen cannot load it).
const NcclApi& nccl_api();
// Installs `fake` (nullptr: back to the library) for the process groups made after it.
void set_nccl_api_for_testing(const NcclApi* fake);

}  // namespace kiln::dist
