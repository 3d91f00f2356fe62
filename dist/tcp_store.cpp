// The TCP store: a thread per connection on rank 0 serving a map under one lock, and a blocking
// client. Messages are an op byte, a key and a value, each length-prefixed; replies a status
// byte and a value.
#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <fmt/ranges.h>

#include "runtime/error.h"

namespace kiln::dist {

namespace {

bool send_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool send_blob(int fd, const char* data, std::size_t n) {
  auto len = htonl(static_cast<std::uint32_t>(n));
  return send_all(fd, &len, 4) && send_all(fd, data, n);
}

bool recv_blob(int fd, std::vector<char>& out) {
  std::uint32_t len = 0;
  if (!recv_all(fd, &len, 4)) return false;
  out.resize(ntohl(len));
  return recv_all(fd, out.data(), out.size());
}

std::string str(const std::vector<char>& v) {
  return std::string(v.begin(), v.end());
}
std::vector<char> bytes(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace

class TcpStoreServer {
 public:
  TcpStoreServer(int port, int world_size) : world_size_(world_size) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    KILN_CHECK(listen_fd_ >= 0, "kiln::dist: the store cannot make a socket: {}", strerror(errno));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
      int e = errno;
      ::close(listen_fd_);
      KILN_CHECK(false, "kiln::dist: rank 0 cannot serve the store on port {} (MASTER_PORT): {}",
                 port, strerror(e));
    }
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    accept_thread_.join();
    cv_.notify_all();
    for (auto& t : conn_threads_) t.join();
    for (int fd : conn_fds_) ::close(fd);
  }

  // Whether every rank but rank 0 said goodbye or died within `timeout`.
  bool wait_others(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] {
      std::set<int> done(bye_);
      done.insert(dead_.begin(), dead_.end());
      done.erase(0);
      return static_cast<int>(done.size()) >= world_size_ - 1;
    });
  }

 private:
  void accept_loop() {
    while (true) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      std::lock_guard lock(mutex_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      conn_fds_.push_back(fd);
      conn_threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void reply(int fd, char status, const std::vector<char>& value) {
    send_all(fd, &status, 1) && send_blob(fd, value.data(), value.size());
  }

  void serve(int fd) {
    int rank = -1;
    std::vector<char> key, value;
    char op = 0;
    while (recv_all(fd, &op, 1) && recv_blob(fd, key) && recv_blob(fd, value)) {
      std::unique_lock lock(mutex_);
      if (op == 'H') {
        rank = std::stoi(str(key));
        lock.unlock();
        reply(fd, 0, {});
      } else if (op == 'S') {
        data_[str(key)] = value;
        lock.unlock();
        cv_.notify_all();
        reply(fd, 0, {});
      } else if (op == 'G' || op == 'W') {
        auto keys = op == 'G' ? std::vector<std::string>{str(key)} : split(str(key), '\n');
        auto timeout = std::chrono::milliseconds(std::stoll(str(value)));
        bool ok = cv_.wait_for(lock, timeout, [&] {
          if (stopping_) return true;
          for (const auto& k : keys)
            if (!data_.count(k)) return false;
          return true;
        });
        ok = ok && !stopping_;
        std::vector<char> out = ok && op == 'G' ? data_[keys[0]] : std::vector<char>{};
        lock.unlock();
        reply(fd, ok ? 0 : 1, out);
      } else if (op == 'D') {
        std::string list;
        for (int r : dead_) list += (list.empty() ? "" : ",") + std::to_string(r);
        lock.unlock();
        reply(fd, 0, bytes(list));
      } else if (op == 'B') {
        bye_.insert(rank);
        lock.unlock();
        cv_.notify_all();
        reply(fd, 0, {});
      }
    }
    std::lock_guard lock(mutex_);
    if (rank >= 0 && !bye_.count(rank)) dead_.push_back(rank);
    cv_.notify_all();
  }

  int world_size_;
  int listen_fd_ = -1;
  std::thread accept_thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<int> conn_fds_;
  std::vector<std::thread> conn_threads_;
  std::map<std::string, std::vector<char>> data_;
  std::set<int> bye_;
  std::vector<int> dead_;  // in the order their connections closed
};

namespace {

int connect_once(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, int rank, int world_size,
                   std::chrono::milliseconds timeout)
    : host_(host), port_(port), rank_(rank), world_size_(world_size), timeout_(timeout) {
  if (rank == 0) server_ = std::make_unique<TcpStoreServer>(port, world_size);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Rank 0 may not listen yet: retry the connection, not the wait for it.
  while ((fd_ = connect_once(host, port)) < 0) {
    KILN_CHECK(std::chrono::steady_clock::now() < deadline,
               "kiln::dist: rank {} could not reach the store of rank 0 at {}:{} (MASTER_ADDR, "
               "MASTER_PORT) within {} ms",
               rank, host, port, timeout.count());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // No reply ever takes longer than a wait's timeout: a frozen server is an error, not a hang.
  timeval tv{};
  auto limit = timeout + std::chrono::seconds(5);
  tv.tv_sec = static_cast<time_t>(limit.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((limit.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  request('H', std::to_string(rank), {});
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<char> TcpStore::request(char op, const std::string& key,
                                    const std::vector<char>& value) {
  std::lock_guard lock(mutex_);
  char status = 0;
  std::vector<char> out;
  bool ok = fd_ >= 0 && send_all(fd_, &op, 1) && send_blob(fd_, key.data(), key.size()) &&
            send_blob(fd_, value.data(), value.size()) && recv_all(fd_, &status, 1) &&
            recv_blob(fd_, out);
  KILN_CHECK(ok,
             "kiln::dist: the store of rank 0 at {} is unreachable from rank {} (rank 0 is "
             "gone)",
             address(), rank_);
  KILN_CHECK(status == 0, "kiln::dist: rank {} timed out after {} ms waiting in the store for '{}'",
             rank_, timeout_.count(), fmt::join(split(key, '\n'), "', '"));
  return out;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request('S', key, value);
}

std::vector<char> TcpStore::get(const std::string& key) {
  return request('G', key, bytes(std::to_string(timeout_.count())));
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string joined;
  for (const auto& k : keys) joined += k + "\n";
  request('W', joined, bytes(std::to_string(timeout.count())));
}

std::vector<int> TcpStore::dead_ranks() {
  std::vector<int> ranks;
  for (const auto& r : split(str(request('D', "", {})), ',')) ranks.push_back(std::stoi(r));
  return ranks;
}

void TcpStore::linger(std::chrono::milliseconds limit) {
  if (server_) server_->wait_others(limit);
}

void TcpStore::close() {
  if (fd_ < 0) return;
  try {
    request('B', "", {});
  } catch (const Error&) {
    // Rank 0 is gone: nothing to say goodbye to.
  }
  if (server_) server_->wait_others(timeout_);
  server_.reset();
  ::close(fd_);
  fd_ = -1;
}

}  // namespace kiln::dist
