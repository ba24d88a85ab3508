//===- TcpStore.h - the rendezvous key-value store over TCP --------*- C++ -*-===//
//
// The ranks of a job meet through a small key-value store that rank 0 serves
// at MASTER_ADDR:MASTER_PORT, as torch.distributed's TCPStore: set, get (which
// waits for the key), wait for several keys, and an atomic add. Gloo ships
// file, hash and Redis stores but no TCP one; GlooStore adapts this one to
// gloo::rendezvous::Store for gloo's connectFullMesh.
//
// The store also watches liveness, so that a failure can name the rank
// behind it. Each rank's client says hello with its rank and keeps its
// connection open for the life of the communicator; the server records when
// a rank arrived, when it left cleanly and when its connection dropped (the
// process died: the kernel closes its sockets). Before each collective a
// rank posts its sequence number (one message, no reply), so after a
// timeout the store can tell which ranks never reached that collective.
//
// Nothing waits without a bound: every waiting request carries its timeout,
// which the server enforces (answering "timed out" with the keys still
// missing), and the client gives up when the server does not answer shortly
// after that (rank 0, which serves the store, may be gone). Connecting
// retries until the connect timeout, since rank 0 may start last.
//
// Wire format: each message is a 4-byte little-endian length, then an op
// (request) or a code (reply) byte, then the fields; strings are a 4-byte
// length and their bytes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_TCPSTORE_H
#define KILN_RUNTIME_DIST_TCPSTORE_H

#include "runtime/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::dist {

// What the store knows of one rank.
struct RankState {
  enum class Kind : uint8_t {
    Absent,  // never said hello
    Alive,   // connected
    Left,    // closed its connection after saying goodbye
    Dropped, // its connection closed without a goodbye (the process died)
  };
  Kind kind = Kind::Absent;
  // The last collective sequence number it posted (0: none).
  uint64_t progress = 0;
};

// A short description: "never arrived", "exited (its connection to the
// store dropped)", ...
const char *describe(RankState::Kind kind);

// Whether |host| names a loopback address ("localhost", 127.x.y.z, "::1"):
// rank 0's store then listens there only; otherwise on every interface, as
// torch's TCPStore does (TcpStoreServer::start with an empty host).
bool isLoopback(const std::string &host);

// The server: a thread serving clients until destroyed.
class TcpStoreServer {
public:
  // Listens on |host|:|port| (port 0: an ephemeral port, see port()); an
  // empty |host| listens on every interface. |worldSize| ranks may say hello.
  static StatusOr<std::unique_ptr<TcpStoreServer>>
  start(const std::string &host, int port, int worldSize);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer &) = delete;
  TcpStoreServer &operator=(const TcpStoreServer &) = delete;

  int port() const { return port_; }

  // Waits up to |timeout| until every rank that said hello has left or
  // dropped (so that stopping the server strands nobody still using it).
  // True when they all did.
  bool waitForRanksToLeave(std::chrono::milliseconds timeout);

  struct Impl;

private:
  TcpStoreServer() = default;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

// A client. Thread-safe (one request at a time).
class TcpStore {
public:
  // Connects to |host|:|port|, retrying refused connections until
  // |timeout| (the server may not be up yet).
  static StatusOr<std::unique_ptr<TcpStore>>
  connect(const std::string &host, int port, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore &) = delete;
  TcpStore &operator=(const TcpStore &) = delete;

  // "host:port", for messages.
  const std::string &address() const { return address_; }

  Status set(const std::string &key, const std::string &value);
  // Waits up to |timeout| for |key| to be set, and returns its value.
  StatusOr<std::string> get(const std::string &key,
                            std::chrono::milliseconds timeout);
  // Waits up to |timeout| for every key. On a timeout the error names the
  // missing keys and, when |missing| is given, they are stored there.
  Status wait(const std::vector<std::string> &keys,
              std::chrono::milliseconds timeout,
              std::vector<std::string> *missing = nullptr);
  // Adds |delta| to the integer at |key| (absent: 0) and returns the sum.
  StatusOr<int64_t> add(const std::string &key, int64_t delta);
  // Whether every key is set, without waiting.
  StatusOr<bool> check(const std::vector<std::string> &keys);

  // Registers this connection as rank |rank|'s. An error if the rank is
  // out of range or another live connection holds it.
  Status hello(int rank);
  // Posts that this rank reached collective |seq| (no reply; failures are
  // ignored here and seen by the next request).
  void postProgress(uint64_t seq);
  // Every rank's state. Answers at once when some rank is not connected
  // (dropped, left, never arrived); otherwise waits up to |wait| for one
  // to go (a dying peer's store connection may close an instant after a
  // collective saw its gloo socket close).
  StatusOr<std::vector<RankState>> ranks(std::chrono::milliseconds wait);
  // Says goodbye: the server records this rank as left, not dropped.
  Status leave();

private:
  TcpStore() = default;
  Status request(const std::string &message, std::chrono::milliseconds wait,
                 std::string &reply);
  Status sendAll(const std::string &bytes,
                 std::chrono::steady_clock::time_point deadline);

  std::mutex mutex_;
  int fd_ = -1;
  std::string address_;
  Status broken_; // set when the connection failed; later requests fail
};

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_TCPSTORE_H
