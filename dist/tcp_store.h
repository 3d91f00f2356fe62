// The store ranks meet through: a key-value server on rank 0 at MASTER_ADDR:MASTER_PORT and a
// client in every rank (rank 0's included), over TCP. Gloo's rendezvous reads and writes it
// (through gloo_store.h's adapter), NCCL's unique id goes through it, and it knows which ranks
// are gone: a rank whose connection closed before it said goodbye has died, which is how a
// failed collective names its peer.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::dist {

class TcpStoreServer;

class TcpStore {
 public:
  // Rank 0 starts the server first; every rank then connects, retrying until `timeout`.
  TcpStore(const std::string& host, int port, int rank, int world_size,
           std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits for the key until the timeout; Error naming it then.
  std::vector<char> get(const std::string& key);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Ranks whose connection closed without a goodbye, the first to go first; Error when the
  // server is unreachable.
  std::vector<int> dead_ranks();
  // Says goodbye; rank 0 then waits (within the timeout) for every other rank's goodbye or
  // death before it stops the server.
  void close();
  // On rank 0: waits (up to `limit`) until every other rank said goodbye or died, so that those
  // still failing can ask which rank went first.
  void linger(std::chrono::milliseconds limit);
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value);

  std::string host_;
  int port_, rank_, world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mutex_;  // one request at a time on the socket
  int fd_ = -1;
};

}  // namespace kiln::dist
