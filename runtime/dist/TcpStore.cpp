//===- TcpStore.cpp - the rendezvous key-value store over TCP ------------===//
//
// The server is one thread around poll(2): non-blocking sockets, an input
// and an output buffer per connection, and a list of waiting requests
// (get, wait, ranks) that are answered when their keys arrive, when a rank
// drops, or at their deadline, whichever comes first. The poll timeout is
// the earliest deadline, so nothing spins and nothing sleeps. Requests that
// wait are answered only after every event of a poll round is applied, so
// a dying rank's hang-up that arrives with a ranks request is seen by it.
//
// The client is a blocking socket used under poll(2) with a deadline for
// every read and write.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/TcpStore.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <unordered_map>

namespace kiln::runtime::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char *describe(RankState::Kind kind) {
  switch (kind) {
  case RankState::Kind::Absent: return "never arrived";
  case RankState::Kind::Alive: return "is connected";
  case RankState::Kind::Left: return "had already closed its communicator";
  case RankState::Kind::Dropped:
    return "exited (its connection to the store dropped)";
  }
  return "unknown";
}

bool isLoopback(const std::string &host) {
  if (host == "localhost")
    return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "::1";
}

namespace {

enum Op : uint8_t {
  kSet = 1,
  kGet,
  kWait,
  kAdd,
  kCheck,
  kHello,
  kProgress,
  kRanks,
  kLeave,
};
enum Code : uint8_t { kOk = 0, kTimedOut, kError };

// Messages larger than this are a protocol error (values are addresses and
// small ids; gloo's largest is a rank's pair addresses).
constexpr uint32_t kMaxMessage = 64u << 20;
// How long a client waits for an answer beyond the server's own timeout.
constexpr milliseconds kAnswerGrace(5000);

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(v >> (8 * i)));
}
void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>(v >> (8 * i)));
}
void putStr(std::string &out, const std::string &s) {
  putU32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
// Frames |body| (an op or code byte, then fields).
std::string frame(const std::string &body) {
  std::string out;
  putU32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

// Reads fields out of a message; any overrun clears ok.
struct Reader {
  const char *p, *end;
  bool ok = true;
  bool need(size_t n) {
    if (static_cast<size_t>(end - p) < n)
      ok = false;
    return ok;
  }
  uint8_t u8() {
    if (!need(1))
      return 0;
    return static_cast<uint8_t>(*p++);
  }
  uint32_t u32() {
    if (!need(4))
      return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= uint32_t(static_cast<uint8_t>(p[i])) << (8 * i);
    p += 4;
    return v;
  }
  uint64_t u64() {
    if (!need(8))
      return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
    p += 8;
    return v;
  }
  std::string str() {
    uint32_t n = u32();
    if (!need(n))
      return {};
    std::string s(p, n);
    p += n;
    return s;
  }
};

std::string errnoText(int err) { return std::strerror(err); }

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int msUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (left.count() <= 0)
    return 0;
  // Round up so a poll does not return just before the deadline.
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

std::string joinKeys(const std::vector<std::string> &keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 8; ++i)
    s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8)
    s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s;
}

} // namespace

//===----------------------------------------------------------------------===//
// Server
//===----------------------------------------------------------------------===//

struct TcpStoreServer::Impl {
  struct Conn {
    std::string in, out;
    int rank = -1;
    bool goodbye = false;
  };
  struct Waiter {
    int fd;
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  int listenFd = -1;
  int wake[2] = {-1, -1};
  int worldSize = 0;
  std::map<int, Conn> conns;
  std::unordered_map<std::string, std::string> data;
  std::list<Waiter> waiters;

  // Shared with waitForRanksToLeave.
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<RankState> ranks;

  ~Impl() {
    for (auto &[fd, conn] : conns)
      close(fd);
    for (int fd : {listenFd, wake[0], wake[1]})
      if (fd >= 0)
        close(fd);
  }

  void run();
  void accept();
  void closeConn(int fd);
  // Handles one request; false on a protocol error (the connection closes).
  bool handle(int fd, const std::string &message);
  void reply(int fd, Code code, const std::string &fields = {}) {
    std::string body(1, static_cast<char>(code));
    conns[fd].out += frame(body + fields);
  }
  // Answers the waiters whose condition holds or whose deadline passed.
  void resolveWaiters();
  bool someRankGone();
  std::string ranksReply();
  void flush(int fd);
};

StatusOr<std::unique_ptr<TcpStoreServer>>
TcpStoreServer::start(const std::string &host, int port, int worldSize) {
  std::string where = "store server on " + (host.empty() ? "*" : host) +
                      ":" + std::to_string(port);
  if (worldSize < 1)
    return Status::error(where + ": world size " + std::to_string(worldSize) +
                         " must be at least 1");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo *found = nullptr;
  std::string portText = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                           portText.c_str(), &hints, &found);
      rc != 0)
    return Status::error(where + ": cannot resolve: " + gai_strerror(rc));
  auto impl = std::make_unique<Impl>();
  std::string lastError = "no address";
  // Prefer IPv4 when listening everywhere (MASTER_ADDR is usually v4).
  std::vector<addrinfo *> addrs;
  for (addrinfo *a = found; a; a = a->ai_next)
    addrs.push_back(a);
  std::stable_partition(addrs.begin(), addrs.end(),
                        [](addrinfo *a) { return a->ai_family == AF_INET; });
  for (addrinfo *a : addrs) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      lastError = errnoText(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
      lastError = errnoText(errno);
      close(fd);
      continue;
    }
    impl->listenFd = fd;
    break;
  }
  freeaddrinfo(found);
  if (impl->listenFd < 0)
    return Status::error(where + ": cannot listen: " + lastError);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(impl->listenFd, reinterpret_cast<sockaddr *>(&bound), &len);
  int boundPort =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  setNonBlocking(impl->listenFd);
  if (pipe2(impl->wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return Status::error(where + ": pipe: " + errnoText(errno));
  impl->worldSize = worldSize;
  impl->ranks.assign(worldSize, RankState());

  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->port_ = boundPort;
  server->impl_ = std::move(impl);
  server->thread_ = std::thread([s = server->impl_.get()] { s->run(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    char byte = 0;
    (void)!write(impl_->wake[1], &byte, 1);
    thread_.join();
  }
}

bool TcpStoreServer::waitForRanksToLeave(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] {
    for (const RankState &r : impl_->ranks)
      if (r.kind == RankState::Kind::Alive)
        return false;
    return true;
  });
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake[0], POLLIN, 0});
    fds.push_back({listenFd, POLLIN, 0});
    for (auto &[fd, conn] : conns)
      fds.push_back(
          {fd, static_cast<short>(POLLIN | (conn.out.empty() ? 0 : POLLOUT)),
           0});
    int timeout = -1;
    for (const Waiter &w : waiters)
      timeout = timeout < 0 ? msUntil(w.deadline)
                            : std::min(timeout, msUntil(w.deadline));
    int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR)
      return;
    if (fds[0].revents)
      return; // destroyed
    if (fds[1].revents & POLLIN)
      accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      int fd = fds[i].fd;
      if (!fds[i].revents || !conns.count(fd))
        continue;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buffer[65536];
        ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
          closeConn(fd);
          continue;
        }
        if (got > 0) {
          Conn &conn = conns[fd];
          conn.in.append(buffer, got);
          bool bad = false;
          while (conn.in.size() >= 4) {
            Reader r{conn.in.data(), conn.in.data() + 4};
            uint32_t size = r.u32();
            if (size == 0 || size > kMaxMessage) {
              bad = true;
              break;
            }
            if (conn.in.size() < 4 + size)
              break;
            std::string message = conn.in.substr(4, size);
            conn.in.erase(0, 4 + size);
            if (!handle(fd, message)) {
              bad = true;
              break;
            }
          }
          if (bad) {
            closeConn(fd);
            continue;
          }
        }
      }
    }
    resolveWaiters();
    for (auto it = conns.begin(); it != conns.end();) {
      int fd = it->first;
      ++it;
      flush(fd);
    }
  }
}

void TcpStoreServer::Impl::accept() {
  for (;;) {
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    setNoDelay(fd);
    conns[fd] = Conn();
  }
}

void TcpStoreServer::Impl::flush(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end() || it->second.out.empty())
    return;
  std::string &out = it->second.out;
  ssize_t sent = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  if (sent > 0)
    out.erase(0, sent);
  else if (sent < 0 && errno != EAGAIN && errno != EINTR)
    closeConn(fd);
}

void TcpStoreServer::Impl::closeConn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end())
    return;
  if (it->second.rank >= 0) {
    std::lock_guard<std::mutex> lock(mutex);
    ranks[it->second.rank].kind =
        it->second.goodbye ? RankState::Kind::Left : RankState::Kind::Dropped;
    changed.notify_all();
  }
  waiters.remove_if([&](const Waiter &w) { return w.fd == fd; });
  close(fd);
  conns.erase(it);
}

bool TcpStoreServer::Impl::handle(int fd, const std::string &message) {
  Reader r{message.data(), message.data() + message.size()};
  Op op = static_cast<Op>(r.u8());
  Conn &conn = conns[fd];
  switch (op) {
  case kSet: {
    std::string key = r.str(), value = r.str();
    if (!r.ok)
      return false;
    data[key] = std::move(value);
    reply(fd, kOk);
    return true;
  }
  case kGet:
  case kWait:
  case kRanks: {
    Waiter w{fd, op, {}, {}};
    if (op == kGet)
      w.keys.push_back(r.str());
    else if (op == kWait) {
      uint32_t n = r.u32();
      if (n > kMaxMessage / 4)
        return false;
      for (uint32_t i = 0; i < n && r.ok; ++i)
        w.keys.push_back(r.str());
    }
    uint64_t ms = r.u64();
    if (!r.ok)
      return false;
    w.deadline = Clock::now() + milliseconds(std::min<uint64_t>(ms, 1ull << 40));
    waiters.push_back(std::move(w));
    return true;
  }
  case kAdd: {
    std::string key = r.str();
    int64_t delta = static_cast<int64_t>(r.u64());
    if (!r.ok)
      return false;
    int64_t value = 0;
    auto it = data.find(key);
    if (it != data.end()) {
      char *end = nullptr;
      value = std::strtoll(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end) {
        reply(fd, kError, [&] {
          std::string f;
          putStr(f, "add: the value at '" + key + "' is not an integer");
          return f;
        }());
        return true;
      }
    }
    value += delta;
    data[key] = std::to_string(value);
    std::string fields;
    putU64(fields, static_cast<uint64_t>(value));
    reply(fd, kOk, fields);
    return true;
  }
  case kCheck: {
    uint32_t n = r.u32();
    bool all = true;
    for (uint32_t i = 0; i < n && r.ok; ++i)
      all = data.count(r.str()) && all;
    if (!r.ok)
      return false;
    reply(fd, kOk, std::string(1, all ? 1 : 0));
    return true;
  }
  case kHello: {
    int64_t rank = static_cast<int32_t>(r.u32());
    if (!r.ok)
      return false;
    std::string error;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (rank < 0 || rank >= worldSize)
        error = "rank " + std::to_string(rank) + " is not below the world size " +
                std::to_string(worldSize);
      else if (conn.rank >= 0)
        error = "this connection is already rank " + std::to_string(conn.rank);
      else if (ranks[rank].kind == RankState::Kind::Alive)
        error = "rank " + std::to_string(rank) +
                " is already connected (two processes with the same RANK?)";
      else {
        conn.rank = static_cast<int>(rank);
        ranks[rank] = RankState{RankState::Kind::Alive, 0};
        changed.notify_all();
      }
    }
    if (!error.empty()) {
      std::string f;
      putStr(f, error);
      reply(fd, kError, f);
    } else
      reply(fd, kOk);
    return true;
  }
  case kProgress: {
    uint64_t seq = r.u64();
    if (!r.ok)
      return false;
    if (conn.rank >= 0) {
      std::lock_guard<std::mutex> lock(mutex);
      ranks[conn.rank].progress = std::max(ranks[conn.rank].progress, seq);
    }
    return true; // no reply
  }
  case kLeave:
    conn.goodbye = true;
    if (conn.rank >= 0) {
      std::lock_guard<std::mutex> lock(mutex);
      ranks[conn.rank].kind = RankState::Kind::Left;
      changed.notify_all();
    }
    reply(fd, kOk);
    return true;
  }
  return false;
}

bool TcpStoreServer::Impl::someRankGone() {
  std::lock_guard<std::mutex> lock(mutex);
  for (const RankState &s : ranks)
    if (s.kind != RankState::Kind::Alive)
      return true;
  return false;
}

std::string TcpStoreServer::Impl::ranksReply() {
  std::lock_guard<std::mutex> lock(mutex);
  std::string f;
  putU32(f, static_cast<uint32_t>(ranks.size()));
  for (const RankState &s : ranks) {
    f.push_back(static_cast<char>(s.kind));
    putU64(f, s.progress);
  }
  return f;
}

void TcpStoreServer::Impl::resolveWaiters() {
  Clock::time_point now = Clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    Waiter &w = *it;
    bool expired = now >= w.deadline;
    bool done = false;
    switch (w.op) {
    case kGet: {
      auto found = data.find(w.keys[0]);
      if (found != data.end()) {
        std::string f;
        putStr(f, found->second);
        reply(w.fd, kOk, f);
        done = true;
      } else if (expired) {
        std::string f;
        putU32(f, 1);
        putStr(f, w.keys[0]);
        reply(w.fd, kTimedOut, f);
        done = true;
      }
      break;
    }
    case kWait: {
      std::vector<std::string> missing;
      for (const std::string &k : w.keys)
        if (!data.count(k))
          missing.push_back(k);
      if (missing.empty()) {
        reply(w.fd, kOk);
        done = true;
      } else if (expired) {
        std::string f;
        putU32(f, static_cast<uint32_t>(missing.size()));
        for (const std::string &k : missing)
          putStr(f, k);
        reply(w.fd, kTimedOut, f);
        done = true;
      }
      break;
    }
    default: // kRanks
      if (expired || someRankGone()) {
        reply(w.fd, kOk, ranksReply());
        done = true;
      }
      break;
    }
    it = done ? waiters.erase(it) : std::next(it);
  }
}

//===----------------------------------------------------------------------===//
// Client
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<TcpStore>>
TcpStore::connect(const std::string &host, int port, milliseconds timeout) {
  std::string address = host + ":" + std::to_string(port);
  Clock::time_point deadline = Clock::now() + timeout;
  std::string lastError;
  milliseconds backoff(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    std::string portText = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), portText.c_str(), &hints, &found);
    if (rc != 0) {
      lastError = std::string("cannot resolve: ") + gai_strerror(rc);
    } else {
      for (addrinfo *a = found; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        a->ai_protocol);
        if (fd < 0) {
          lastError = errnoText(errno);
          continue;
        }
        int err = 0;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
          err = errno;
          if (err == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            if (poll(&p, 1, msUntil(deadline)) == 1) {
              socklen_t len = sizeof(err);
              getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            } else
              err = ETIMEDOUT;
          }
        }
        if (err != 0) {
          lastError = errnoText(err);
          close(fd);
          continue;
        }
        int flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        setNoDelay(fd);
        freeaddrinfo(found);
        std::unique_ptr<TcpStore> store(new TcpStore());
        store->fd_ = fd;
        store->address_ = address;
        return store;
      }
      freeaddrinfo(found);
    }
    // The server may not be listening yet: try again, backing off, until
    // the deadline.
    milliseconds left =
        std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return Status::error("cannot reach the store at " + address + " within " +
                           std::to_string(timeout.count() / 1000.0).substr(0, 6) +
                           " s (is rank 0 running, and MASTER_ADDR/MASTER_PORT "
                           "right?): " + lastError);
    std::this_thread::sleep_for(std::min(backoff, left));
    backoff = std::min(backoff * 2, milliseconds(500));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0)
    close(fd_);
}

Status TcpStore::sendAll(const std::string &bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    pollfd p{fd_, POLLOUT, 0};
    int n = poll(&p, 1, msUntil(deadline));
    if (n == 0)
      return Status::error("the store at " + address_ +
                           " does not take requests (timed out sending)");
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return Status::error("store " + address_ + ": poll: " + errnoText(errno));
    }
    ssize_t sent = send(fd_, bytes.data() + done, bytes.size() - done,
                        MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return Status::error("lost the connection to the store at " + address_ +
                           " (rank 0 exited?): " + errnoText(errno));
    }
    done += sent;
  }
  return Status::ok();
}

Status TcpStore::request(const std::string &message, milliseconds wait,
                         std::string &reply) {
  if (!broken_.isOk())
    return broken_;
  Clock::time_point deadline = Clock::now() + wait + kAnswerGrace;
  if (Status s = sendAll(frame(message), deadline); !s.isOk())
    return broken_ = s;
  std::string in;
  size_t want = 4;
  bool haveHeader = false;
  while (in.size() < want) {
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, msUntil(deadline));
    if (n == 0)
      return broken_ = Status::error(
                 "the store at " + address_ + " did not answer within " +
                 std::to_string((wait + kAnswerGrace).count() / 1000) +
                 " s (rank 0, which serves it, may be stuck)");
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return broken_ =
                 Status::error("store " + address_ + ": poll: " + errnoText(errno));
    }
    char buffer[65536];
    ssize_t got = recv(fd_, buffer, std::min(sizeof(buffer), want - in.size()), 0);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
      return broken_ = Status::error(
                 "lost the connection to the store at " + address_ +
                 " (rank 0, which serves it, exited?)" +
                 (got < 0 ? ": " + errnoText(errno) : std::string()));
    if (got > 0)
      in.append(buffer, got);
    if (!haveHeader && in.size() == 4) {
      Reader r{in.data(), in.data() + 4};
      uint32_t size = r.u32();
      if (size == 0 || size > kMaxMessage)
        return broken_ = Status::error("store " + address_ +
                                       ": malformed answer (is that port a "
                                       "kiln store?)");
      haveHeader = true;
      want = 4 + size;
    }
  }
  reply = in.substr(4);
  return Status::ok();
}

namespace {
// The error text of a kError reply.
Status replyError(const std::string &address, Reader &r) {
  std::string message = r.str();
  return Status::error("store " + address + ": " + message);
}
} // namespace

Status TcpStore::set(const std::string &key, const std::string &value) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kSet)), reply;
  putStr(m, key);
  putStr(m, value);
  if (Status s = request(m, milliseconds(0), reply); !s.isOk())
    return s;
  return Status::ok();
}

StatusOr<std::string> TcpStore::get(const std::string &key,
                                    milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kGet)), reply;
  putStr(m, key);
  putU64(m, static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0)));
  if (Status s = request(m, timeout, reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  if (code == kTimedOut)
    return Status::error("store " + address_ + ": key '" + key +
                         "' was not set within " +
                         std::to_string(timeout.count()) + " ms");
  std::string value = r.str();
  if (code != kOk || !r.ok)
    return Status::error("store " + address_ + ": malformed answer to get");
  return value;
}

Status TcpStore::wait(const std::vector<std::string> &keys, milliseconds timeout,
                      std::vector<std::string> *missing) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kWait)), reply;
  putU32(m, static_cast<uint32_t>(keys.size()));
  for (const std::string &k : keys)
    putStr(m, k);
  putU64(m, static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0)));
  if (Status s = request(m, timeout, reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  if (code == kOk)
    return Status::ok();
  std::vector<std::string> absent;
  uint32_t n = r.u32();
  for (uint32_t i = 0; i < n && r.ok; ++i)
    absent.push_back(r.str());
  if (code != kTimedOut || !r.ok)
    return Status::error("store " + address_ + ": malformed answer to wait");
  if (missing)
    *missing = absent;
  return Status::error("store " + address_ + ": keys " + joinKeys(absent) +
                       " were not set within " + std::to_string(timeout.count()) +
                       " ms");
}

StatusOr<int64_t> TcpStore::add(const std::string &key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kAdd)), reply;
  putStr(m, key);
  putU64(m, static_cast<uint64_t>(delta));
  if (Status s = request(m, milliseconds(0), reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  if (code == kError)
    return replyError(address_, r);
  int64_t value = static_cast<int64_t>(r.u64());
  if (code != kOk || !r.ok)
    return Status::error("store " + address_ + ": malformed answer to add");
  return value;
}

StatusOr<bool> TcpStore::check(const std::vector<std::string> &keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kCheck)), reply;
  putU32(m, static_cast<uint32_t>(keys.size()));
  for (const std::string &k : keys)
    putStr(m, k);
  if (Status s = request(m, milliseconds(0), reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  bool all = r.u8() != 0;
  if (code != kOk || !r.ok)
    return Status::error("store " + address_ + ": malformed answer to check");
  return all;
}

Status TcpStore::hello(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kHello)), reply;
  putU32(m, static_cast<uint32_t>(rank));
  if (Status s = request(m, milliseconds(0), reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  if (code == kError)
    return replyError(address_, r);
  return Status::ok();
}

void TcpStore::postProgress(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.isOk())
    return;
  std::string m(1, static_cast<char>(kProgress));
  putU64(m, seq);
  if (Status s = sendAll(frame(m), Clock::now() + kAnswerGrace); !s.isOk())
    broken_ = s;
}

StatusOr<std::vector<RankState>> TcpStore::ranks(milliseconds wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kRanks)), reply;
  putU64(m, static_cast<uint64_t>(std::max<int64_t>(wait.count(), 0)));
  if (Status s = request(m, wait, reply); !s.isOk())
    return s;
  Reader r{reply.data(), reply.data() + reply.size()};
  Code code = static_cast<Code>(r.u8());
  uint32_t n = r.u32();
  std::vector<RankState> states;
  for (uint32_t i = 0; i < n && r.ok && i < (1u << 20); ++i) {
    RankState s;
    uint8_t kind = r.u8();
    s.kind = static_cast<RankState::Kind>(std::min<uint8_t>(kind, 3));
    s.progress = r.u64();
    states.push_back(s);
  }
  if (code != kOk || !r.ok)
    return Status::error("store " + address_ + ": malformed answer to ranks");
  return states;
}

Status TcpStore::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string m(1, static_cast<char>(kLeave)), reply;
  return request(m, milliseconds(0), reply);
}

} // namespace kiln::runtime::dist
