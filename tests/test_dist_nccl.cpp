// The NCCL backend against a fake function table (there is no NCCL here): the calls it makes
// for a one-rank group, in order and with their arguments, and the error that names
// libnccl.so.2 where the library is absent.
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include "autograd/ops.h"
#include "dist/dist.h"
#include "dist/nccl_api.h"
#include "runtime/cuda/backend.h"
#include "support/skip_if.h"
#include "tools/launch.h"

using namespace kiln;

namespace {

std::vector<std::string> calls;

int fake_unique_id(dist::NcclUniqueId* id) {
  id->internal[0] = 42;
  calls.push_back("ncclGetUniqueId");
  return 0;
}
int fake_init(dist::NcclComm* comm, int nranks, dist::NcclUniqueId id, int rank) {
  static int handle;
  *comm = &handle;
  calls.push_back(
      fmt::format("ncclCommInitRank nranks={} rank={} id={}", nranks, rank, int(id.internal[0])));
  return 0;
}
int fake_destroy(dist::NcclComm) {
  calls.push_back("ncclCommDestroy");
  return 0;
}
int fake_all_reduce(const void* send, void* recv, std::size_t count, int dtype, int op,
                    dist::NcclComm, dist::NcclStream) {
  calls.push_back(fmt::format("ncclAllReduce count={} dtype={} op={} in_place={}", count, dtype, op,
                              send == recv));
  return 0;
}
int fake_broadcast(const void*, void*, std::size_t count, int dtype, int root, dist::NcclComm,
                   dist::NcclStream) {
  calls.push_back(fmt::format("ncclBroadcast count={} dtype={} root={}", count, dtype, root));
  return 0;
}
int fake_all_gather(const void*, void*, std::size_t count, int dtype, dist::NcclComm,
                    dist::NcclStream) {
  calls.push_back(fmt::format("ncclAllGather count={} dtype={}", count, dtype));
  return 0;
}
int fake_reduce_scatter(const void*, void*, std::size_t count, int dtype, int op, dist::NcclComm,
                        dist::NcclStream) {
  calls.push_back(fmt::format("ncclReduceScatter count={} dtype={} op={}", count, dtype, op));
  return 1;  // ncclUnhandledCudaError
}
const char* fake_error_string(int) {
  return "unhandled cuda error (a fake's)";
}

dist::InitOptions one_rank() {
  dist::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.master_port = tools::free_port();
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_nccl_backend_makes_the_calls_nccl_expects) {
  dist::NcclApi fake{.get_unique_id = fake_unique_id,
                     .comm_init_rank = fake_init,
                     .comm_destroy = fake_destroy,
                     .all_reduce = fake_all_reduce,
                     .broadcast = fake_broadcast,
                     .all_gather = fake_all_gather,
                     .reduce_scatter = fake_reduce_scatter,
                     .get_error_string = fake_error_string};
  dist::set_nccl_api_for_testing(&fake);
  calls.clear();
  dist::init_process_group("nccl", one_rank());
  BOOST_TEST(dist::backend() == "nccl");
  Tensor t = zeros({3, 4}, DType::f32, Device::cuda());
  dist::all_reduce(t, dist::ReduceOp::avg);
  dist::broadcast(zeros({5}, DType::bf16, Device::cuda()), 0);
  dist::all_gather(zeros({2}, DType::f64, Device::cuda()), zeros({2}, DType::f64, Device::cuda()));
  dist::barrier();
  try {
    dist::reduce_scatter(zeros({2}, DType::f16, Device::cuda()),
                         zeros({2}, DType::f16, Device::cuda()));
    BOOST_ERROR("a failed NCCL call raised nothing");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("ncclReduceScatter failed on rank 0 of 1: unhandled "
                                          "cuda error") != std::string::npos,
               e.what());
  }
  BOOST_CHECK_THROW(dist::all_reduce(zeros({2})), Error);  // a CPU tensor
  dist::destroy_process_group();
  dist::set_nccl_api_for_testing(nullptr);
  std::vector<std::string> want{"ncclGetUniqueId",
                                "ncclCommInitRank nranks=1 rank=0 id=42",
                                "ncclAllReduce count=12 dtype=7 op=4 in_place=true",
                                "ncclBroadcast count=5 dtype=9 root=0",
                                "ncclAllGather count=2 dtype=8",
                                "ncclAllReduce count=1 dtype=7 op=0 in_place=true",
                                "ncclReduceScatter count=2 dtype=6 op=0",
                                "ncclCommDestroy"};
  BOOST_TEST(calls == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(without_libnccl_the_nccl_backend_is_an_error_naming_it, *test::skip_if([] {
                       void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
                       if (lib) ::dlclose(lib);
                       return lib ? std::string("libnccl.so.2 is installed here") : "";
                     })) {
  try {
    dist::init_process_group("nccl", one_rank());
    BOOST_ERROR("init_process_group(\"nccl\") succeeded without NCCL");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("libnccl.so.2") != std::string::npos, e.what());
  }
  BOOST_TEST(!dist::is_initialized());
}

BOOST_AUTO_TEST_CASE(a_library_that_cannot_be_loaded_is_an_error_naming_it) {
  BOOST_CHECK_EXCEPTION(dist::load_nccl_library("libnccl.so.2-not-here"), Error,
                        [](const Error& e) {
                          return std::string(e.what()).find(
                                     "needs NCCL's library libnccl.so.2-not-here, which could "
                                     "not be loaded") != std::string::npos;
                        });
}

// Where NCCL is installed (a CUDA toolkit ships it), it has every function the backend calls.
BOOST_AUTO_TEST_CASE(libnccl_has_every_function_the_backend_calls, *test::skip_if([] {
                       void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
                       if (lib) ::dlclose(lib);
                       return lib ? std::string() : "libnccl.so.2 is not installed here";
                     })) {
  dist::NcclApi api = dist::load_nccl_library();
  BOOST_TEST((api.all_reduce != nullptr && api.reduce_scatter != nullptr &&
              api.get_error_string != nullptr));
  BOOST_TEST(std::string(api.get_error_string(0)).size() > 0u);
}

// One rank on a real GPU (the GPU bundle's run; elsewhere skipped): every collective of a group
// of one leaves its tensor as it was, against the values on the host.
BOOST_AUTO_TEST_CASE(a_one_rank_group_on_a_gpu_leaves_every_tensor_as_it_was, *test::skip_if([] {
                       void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
                       if (lib) ::dlclose(lib);
                       if (!lib) return std::string("libnccl.so.2 is not installed here");
                       return cuda::backend().kind() == "driver"
                                  ? std::string()
                                  : std::string("no GPU: the CUDA backend is the virtual one");
                     })) {
  dist::init_process_group("nccl", one_rank());
  Tensor host = arange(0, 12, 1, DType::f32) * 0.5;
  for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
    Tensor t = host.to(Device::cuda());
    dist::all_reduce(t, op);
    BOOST_TEST(t.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  }
  Tensor b = host.to(DType::bf16).to(Device::cuda());
  dist::broadcast(b, 0);
  BOOST_TEST(b.to(Device::cpu()).to_vector<float>() == host.to(DType::bf16).to_vector<float>());
  Tensor gathered = zeros({12}, DType::f32, Device::cuda());
  dist::all_gather(gathered, host.to(Device::cuda()));
  BOOST_TEST(gathered.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  Tensor scattered = zeros({12}, DType::f32, Device::cuda());
  dist::reduce_scatter(scattered, host.to(Device::cuda()));
  BOOST_TEST(scattered.to(Device::cpu()).to_vector<float>() == host.to_vector<float>());
  dist::barrier();
  dist::destroy_process_group();
}

BOOST_AUTO_TEST_CASE(an_unknown_backend_is_an_error_naming_both) {
  BOOST_CHECK_EXCEPTION(dist::init_process_group("mpi", one_rank()), Error, [](const Error& e) {
    return std::string(e.what()).find("unknown backend 'mpi' (gloo or nccl)") != std::string::npos;
  });
}
