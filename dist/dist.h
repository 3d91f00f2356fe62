// kiln::dist: process groups and collectives across processes and machines, with PyTorch's names
// (torch.distributed): init_process_group("gloo" | "nccl"), rank(), world_size(), barrier(),
// all_reduce, broadcast, all_gather, reduce_scatter and their async forms. Gloo runs on host
// memory (CUDA tensors are staged through host buffers); NCCL is loaded with dlopen. Every
// collective runs on the group's communication thread, in the order the calls were made, so it
// overlaps with the caller's compute; a dead or silent peer is an Error within the timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::dist {

enum class ReduceOp { sum, avg, max };

// Fields left at their defaults are read from the environment torchrun and `kiln launch` set:
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (env://).
struct InitOptions {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  std::string master_addr;  // host of rank 0's store; "127.0.0.1" when unset everywhere
  int master_port = 0;      // the store's TCP port
  // The address this rank's Gloo transport binds: KILN_DIST_HOSTNAME, else 127.0.0.1 when the
  // master is on loopback, else this machine's host name.
  std::string hostname;
  // How long a collective, the rendezvous or barrier() may wait for a peer.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

// A collective in flight. wait() blocks until it is done, rethrows its error, and finishes it
// on the calling thread (a staged CUDA tensor is copied back there). Waiting twice is harmless.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait();
  bool completed() const;
  // Seconds the collective spent on the communication thread, and when it started and ended
  // there (steady clock), once completed.
  double seconds() const;
  std::chrono::steady_clock::time_point started() const;
  std::chrono::steady_clock::time_point ended() const;

 private:
  std::shared_ptr<State> state_;
};

// Joins the default group (one per process). Error when one exists, on an unknown backend, a
// rank outside [0, world_size), or a rendezvous that does not complete within the timeout.
void init_process_group(const std::string& backend, InitOptions options = {});
bool is_initialized();
// Leaves the default group: waits for the collectives queued, then closes the connections.
void destroy_process_group();
std::string backend();
int rank();
int world_size();
int local_rank();
std::chrono::milliseconds timeout();
// Bytes this process has written so far by any write call (/proc/self/io's wchar), Gloo's
// socket writes among them: bench_ddp's bytes sent, measured around steps that write nothing
// else.
std::uint64_t bytes_written();

void barrier();

// In place on `t` (contiguous or not, CPU or CUDA) on every rank. avg needs a floating dtype.
void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
// Every rank's `t` takes rank `src`'s values.
void broadcast(const Tensor& t, int src);
Work broadcast_async(const Tensor& t, int src);
// all_gather_into_tensor: `output` is the ranks' `input`s concatenated along dim 0 in rank
// order (output.shape[0] == world_size * input.shape[0], the other dims equal).
void all_gather(const Tensor& output, const Tensor& input);
Work all_gather_async(const Tensor& output, const Tensor& input);
// reduce_scatter_tensor: `input` is world_size chunks along dim 0; rank r's `output` is the
// reduction over ranks of chunk r.
void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum);
Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum);

// Whether collectives compare every rank's shapes and dtypes first (KILN_DIST_DEBUG=1, as
// TORCH_DISTRIBUTED_DEBUG): a mismatch is an Error naming the op, both ranks and shapes.
bool debug_checks();
void set_debug_checks(bool on);

}  // namespace kiln::dist
