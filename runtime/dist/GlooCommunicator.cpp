//===- GlooCommunicator.cpp - collectives over Gloo's TCP transport ------===//
//
// createGlooCommunicator: rank 0 starts the TCP store (TcpStore.h); every
// rank connects to it, says hello, and waits for all ranks to arrive (a
// missing rank is named here, not in Gloo's less specific rendezvous); then
// Gloo's TCP device on the address that reaches MASTER_ADDR and
// gloo::rendezvous::Context::connectFullMesh through the store connect
// every pair.
//
// The collectives are Gloo's timed ("new style") algorithms: allreduce
// (ring, with kiln's element-wise reductions, f16 and bf16 summed in f32
// and rounded once per step), allgather, broadcast, barrier; reduce-scatter
// is an all-to-all followed by a local reduction of the blocks in rank
// order. Gloo reports a timeout or a closed peer by throwing; the
// communicator catches it, asks the store which ranks dropped or never
// reached this collective (each rank posts its sequence number before
// entering one), and returns an error that names them. It then closes its
// connections, so that peers waiting on this rank fail at once rather than
// at their own timeout, and every later call returns the same error.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/GlooCommunicator.h"
#include "runtime/dist/Sigpipe.h"

#include "runtime/dist/CollectiveCall.h"
#include "runtime/dist/Reduce.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace kiln::runtime::dist {

using std::chrono::milliseconds;

namespace {

//===----------------------------------------------------------------------===//
// Gloo's view of the store
//===----------------------------------------------------------------------===//

// gloo::rendezvous::Store on a TcpStore, under a key prefix; failures are
// thrown as gloo::IoException, as Gloo's own stores do.
class GlooStore final : public gloo::rendezvous::Store {
public:
  GlooStore(TcpStore &store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    check(store_.set(prefix_ + key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string &key) override {
    StatusOr<std::string> v = store_.get(prefix_ + key, timeout_);
    check(v.status());
    return std::vector<char>(v.value().begin(), v.value().end());
  }
  void wait(const std::vector<std::string> &keys) override {
    wait(keys, timeout_);
  }
  void wait(const std::vector<std::string> &keys,
            const milliseconds &timeout) override {
    std::vector<std::string> full;
    for (const std::string &k : keys)
      full.push_back(prefix_ + k);
    check(store_.wait(full, std::min(timeout, timeout_)));
  }

private:
  static void check(const Status &s) {
    if (!s.isOk())
      throw gloo::IoException(s.message());
  }
  TcpStore &store_;
  std::string prefix_;
  milliseconds timeout_;
};

// The address of this host's interface that routes to |host| (connecting a
// UDP socket sends nothing). Empty when it cannot be found.
std::string localAddressToward(const std::string &host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *found = nullptr;
  std::string portText = std::to_string(port);
  if (getaddrinfo(host.c_str(), portText.c_str(), &hints, &found) != 0)
    return {};
  std::string result;
  for (addrinfo *a = found; a && result.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0) {
      const void *addr =
          local.ss_family == AF_INET6
              ? static_cast<const void *>(
                    &reinterpret_cast<sockaddr_in6 *>(&local)->sin6_addr)
              : &reinterpret_cast<sockaddr_in *>(&local)->sin_addr;
      if (inet_ntop(local.ss_family, addr, text, sizeof(text)))
        result = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return result;
}

std::string rankList(const std::vector<int> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

//===----------------------------------------------------------------------===//
// The communicators
//===----------------------------------------------------------------------===//

// World size 1: every collective is a copy.
class LocalCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  Status allReduce(const void *in, void *out, int64_t count, PkgDType dtype,
                   PkgReduceKind op) override {
    if (dtype == PkgDType::I1)
      return Status::error("all_reduce of i1 is not supported");
    (void)op;
    return copy(in, out, count, dtype);
  }
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       PkgDType dtype, PkgReduceKind op) override {
    return allReduce(in, out, countPerRank, dtype, op);
  }
  Status allGather(const void *in, void *out, int64_t countPerRank,
                   PkgDType dtype) override {
    return copy(in, out, countPerRank, dtype);
  }
  Status broadcast(const void *in, void *out, int64_t count, PkgDType dtype,
                   int root) override {
    if (root != 0)
      return Status::error("broadcast from root " + std::to_string(root) +
                           ", but the world has 1 rank");
    return copy(in, out, count, dtype);
  }
  Status barrier() override { return Status::ok(); }

private:
  static Status copy(const void *in, void *out, int64_t count, PkgDType dtype) {
    if (count < 0)
      return Status::error("negative element count " + std::to_string(count));
    if (in != out)
      std::memmove(out, in, count * pkgBytesPerElement(dtype));
    return Status::ok();
  }
};

class GlooCommunicator final : public Communicator {
public:
  GlooCommunicator(const DistEnv &env, milliseconds timeout)
      : env_(env), timeout_(timeout),
        killAt_(faultInjectionPoint("KILN_DIST_KILL_AT", env.rank)) {}
  ~GlooCommunicator() override;

  Status connect(std::unique_ptr<TcpStoreServer> server);

  int rank() const override { return env_.rank; }
  int worldSize() const override { return env_.worldSize; }
  Status allReduce(const void *in, void *out, int64_t count, PkgDType dtype,
                   PkgReduceKind op) override;
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       PkgDType dtype, PkgReduceKind op) override;
  Status allGather(const void *in, void *out, int64_t countPerRank,
                   PkgDType dtype) override;
  Status broadcast(const void *in, void *out, int64_t count, PkgDType dtype,
                   int root) override;
  Status barrier() override;

private:
  // Runs |body| as collective number seq_ + 1, described by |what| in
  // errors.
  template <typename Body> Status run(const std::string &what, Body &&body);
  Status diagnose(const std::string &what, const std::string &glooError,
                  milliseconds elapsed);
  Status rendezvous(std::unique_ptr<TcpStoreServer> server);

  DistEnv env_;
  milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::mutex mutex_;
  uint64_t seq_ = 0;
  // KILN_DIST_KILL_AT=RANK:N: rank RANK kills itself (SIGKILL) on entering
  // collective N, so tests can kill a rank at an exact point mid-step.
  uint64_t killAt_ = 0;
  Status broken_;
  std::vector<uint8_t> scratch_; // reduce-scatter's received blocks
};

Status GlooCommunicator::connect(std::unique_ptr<TcpStoreServer> server) {
  Status s = rendezvous(std::move(server));
  if (!s.isOk())
    broken_ = s; // the destructor does not wait long for the others
  return s;
}

Status GlooCommunicator::rendezvous(std::unique_ptr<TcpStoreServer> server) {
  std::string where = "rank " + std::to_string(env_.rank) + " of " +
                      std::to_string(env_.worldSize) + ": rendezvous at " +
                      env_.masterAddr + ":" + std::to_string(env_.masterPort);
  if (env_.rank == 0) {
    if (server) {
      server_ = std::move(server);
    } else {
      StatusOr<std::unique_ptr<TcpStoreServer>> s = TcpStoreServer::start(
          isLoopback(env_.masterAddr) ? env_.masterAddr : std::string(),
          env_.masterPort, env_.worldSize);
      if (!s.isOk())
        return Status::error(where + ": " + s.status().message());
      server_ = std::move(s.value());
    }
  }
  StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::connect(env_.masterAddr, env_.masterPort, timeout_);
  if (!store.isOk())
    return Status::error(where + ": " + store.status().message());
  store_ = std::move(store.value());
  if (Status s = store_->hello(env_.rank); !s.isOk())
    return Status::error(where + ": " + s.message());

  // Everyone arrives, or the ranks that did not are named.
  std::vector<std::string> keys;
  for (int r = 0; r < env_.worldSize; ++r)
    keys.push_back("kiln/arrived/" + std::to_string(r));
  if (Status s = store_->set(keys[env_.rank], "1"); !s.isOk())
    return Status::error(where + ": " + s.message());
  std::vector<std::string> missing;
  if (Status s = store_->wait(keys, timeout_, &missing); !s.isOk()) {
    if (missing.empty())
      return Status::error(where + ": " + s.message());
    std::vector<int> ranks;
    for (const std::string &k : missing)
      ranks.push_back(std::atoi(k.c_str() + std::strlen("kiln/arrived/")));
    return Status::error(where + " timed out after " + formatSeconds(timeout_) +
                         ": rank" + (ranks.size() > 1 ? "s " : " ") +
                         rankList(ranks) + " never arrived (world size " +
                         std::to_string(env_.worldSize) + ")");
  }

  try {
    // Gloo's event-loop thread, started by CreateDevice, inherits the
    // block for good; the connections' writes here have it too (Sigpipe.h).
    ScopedSigpipeBlock noSigpipe;
    gloo::transport::tcp::attr attr;
    if (const char *iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface)
      attr.iface = iface;
    else {
      attr.hostname = localAddressToward(env_.masterAddr, env_.masterPort);
      if (attr.hostname.empty())
        attr.hostname = env_.masterAddr;
    }
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(env_.rank,
                                                           env_.worldSize);
    context_->setTimeout(timeout_);
    GlooStore glooStore(*store_, "gloo/", timeout_);
    context_->connectFullMesh(glooStore, device_);
  } catch (const std::exception &e) {
    // Name the ranks that died meanwhile, if the store saw them go.
    std::string culprits;
    StatusOr<std::vector<RankState>> states =
        store_->ranks(std::min(timeout_, milliseconds(1000)));
    if (!states.isOk())
      culprits = "rank 0 is unreachable: " + states.status().message() + " ";
    else
      for (int r = 0; r < static_cast<int>(states.value().size()); ++r)
        if (r != env_.rank && states.value()[r].kind != RankState::Kind::Alive)
          culprits += "rank " + std::to_string(r) + " " +
                      describe(states.value()[r].kind) + "; ";
    return Status::error(where + ": connecting the ranks through gloo failed: " +
                         culprits + "[gloo: " + e.what() + "]");
  }
  return Status::ok();
}

GlooCommunicator::~GlooCommunicator() {
  // Peers may still be finishing their last collective on data this rank
  // sent; the sockets deliver it before they close (to a dead peer: EPIPE,
  // not SIGPIPE).
  {
    ScopedSigpipeBlock noSigpipe;
    context_.reset();
    device_.reset();
  }
  if (store_)
    (void)store_->leave();
  if (server_) {
    // Keep serving until the others are done with the store. After a
    // failure, only briefly: long enough for the survivors to ask the store
    // who is missing, not for a hung rank to leave.
    server_->waitForRanksToLeave(broken_.isOk()
                                     ? timeout_
                                     : std::min(timeout_, milliseconds(5000)));
    store_.reset();
    server_.reset();
  }
}

template <typename Body>
Status GlooCommunicator::run(const std::string &what, Body &&body) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.isOk())
    return Status::error(what + ": the communicator failed earlier: " +
                         broken_.message());
  ++seq_;
  if (seq_ == killAt_)
    raise(SIGKILL); // fault injection for tests (KILN_DIST_KILL_AT)
  store_->postProgress(seq_);
  auto start = std::chrono::steady_clock::now();
  // A write to a dead peer's socket fails with EPIPE (an error naming
  // it), not SIGPIPE (Sigpipe.h).
  ScopedSigpipeBlock noSigpipe;
  try {
    body(static_cast<uint32_t>(seq_));
  } catch (const std::exception &e) {
    broken_ = diagnose(what, e.what(),
                       std::chrono::duration_cast<milliseconds>(
                           std::chrono::steady_clock::now() - start));
    // Peers blocked on this rank fail now instead of at their timeout.
    try {
      context_->closeConnections();
    } catch (const std::exception &) {
    }
    return broken_;
  }
  return Status::ok();
}

Status GlooCommunicator::diagnose(const std::string &what,
                                  const std::string &glooError,
                                  milliseconds elapsed) {
  std::string head = "rank " + std::to_string(env_.rank) + ": " + what +
                     " (collective #" + std::to_string(seq_) +
                     ") failed after " + formatSeconds(elapsed);
  std::string tail = " [gloo: " + glooError + "]";
  // Timed out: the ranks that never reached this collective are the cause,
  // and the store knows them now. Otherwise a peer's socket closed: if the
  // peer died, its store connection closes an instant later; wait for that
  // (briefly) so that it, and not a rank merely behind, is named.
  bool timedOut = elapsed + milliseconds(50) >= timeout_ ||
                  glooError.find("Timed out") != std::string::npos;
  StatusOr<std::vector<RankState>> states = store_->ranks(
      timedOut ? milliseconds(0) : std::min(timeout_, milliseconds(1000)));
  if (!states.isOk())
    return Status::error(head + ": rank 0 is unreachable: " +
                         states.status().message() + tail);
  // Per other rank: gone before reaching this collective (always a cause),
  // alive but not there (hung or slow), or died during it.
  std::vector<std::string> goneBefore, notThere, diedDuring;
  for (int r = 0; r < static_cast<int>(states.value().size()); ++r) {
    if (r == env_.rank)
      continue;
    const RankState &s = states.value()[r];
    std::string name = "rank " + std::to_string(r) + " ";
    std::string last = s.progress ? " (its last collective was #" +
                                        std::to_string(s.progress) + ")"
                                  : " (it reached no collective)";
    bool alive = s.kind == RankState::Kind::Alive;
    if (s.progress < seq_ && alive)
      notThere.push_back(name + "did not reach it" + last);
    else if (s.progress < seq_)
      goneBefore.push_back(name + describe(s.kind) +
                           (s.progress ? " after collective #" +
                                             std::to_string(s.progress)
                                       : std::string(" before any collective")));
    else if (s.kind == RankState::Kind::Dropped)
      diedDuring.push_back(name + "exited during it (its connection to the "
                                  "store dropped)");
  }
  // After a timeout, a rank that never got here explains it (one that failed
  // here and exited is a consequence); after a closed socket, a rank that
  // died does (one not there yet may just be slower).
  std::vector<std::string> named = goneBefore;
  const std::vector<std::string> &first = timedOut ? notThere : diedDuring;
  const std::vector<std::string> &second = timedOut ? diedDuring : notThere;
  named.insert(named.end(), first.begin(), first.end());
  if (named.empty())
    named = second;
  if (named.empty())
    return Status::error(head + ": every rank reached it and is connected" +
                         tail);
  std::string list;
  for (size_t i = 0; i < named.size(); ++i)
    list += (i ? "; " : "") + named[i];
  return Status::error(head + ": " + list + tail);
}

Status GlooCommunicator::allReduce(const void *in, void *out, int64_t count,
                                   PkgDType dtype, PkgReduceKind op) {
  std::string what = describeAllReduce(count, dtype, op);
  if (Status s = checkCount(what, count); !s.isOk())
    return s;
  ReduceFn fn;
  if (Status s = checkReduction(what, dtype, op, fn); !s.isOk())
    return s;
  size_t bytes = count * pkgBytesPerElement(dtype);
  if (in != out)
    std::memmove(out, in, bytes);
  if (count == 0)
    return Status::ok();
  Status s = run(what, [&](uint32_t tag) {
    gloo::AllreduceOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    opts.setReduceFunction(fn);
    switch (pkgBytesPerElement(dtype)) {
    case 8: opts.setOutput(static_cast<uint64_t *>(out), count); break;
    case 4: opts.setOutput(static_cast<uint32_t *>(out), count); break;
    case 2: opts.setOutput(static_cast<uint16_t *>(out), count); break;
    default: opts.setOutput(static_cast<uint8_t *>(out), count); break;
    }
    gloo::allreduce(opts);
  });
  if (s.isOk() && op == PkgReduceKind::Mean)
    divideBy(dtype, out, count, env_.worldSize);
  return s;
}

Status GlooCommunicator::reduceScatter(const void *in, void *out,
                                       int64_t countPerRank, PkgDType dtype,
                                       PkgReduceKind op) {
  std::string what = describeReduceScatter(countPerRank, dtype, op);
  if (Status s = checkCount(what, countPerRank); !s.isOk())
    return s;
  ReduceFn fn;
  if (Status s = checkReduction(what, dtype, op, fn); !s.isOk())
    return s;
  if (countPerRank == 0)
    return Status::ok();
  size_t block = countPerRank * pkgBytesPerElement(dtype);
  size_t total = block * env_.worldSize;
  // Block r of every rank's |in| lands in rank r's scratch, in rank order
  // (kept between calls: gradients are reduced every step).
  std::vector<uint8_t> &gathered = scratch_;
  Status s = run(what, [&](uint32_t tag) {
    gathered.resize(total);
    gloo::AlltoallOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    opts.setInput(static_cast<uint8_t *>(const_cast<void *>(in)), total);
    opts.setOutput(gathered.data(), total);
    gloo::alltoall(opts);
    // Reduce in rank order, so every rank's block is summed the same way
    // (inside run(), which holds the lock that guards the scratch).
    uint8_t *o = static_cast<uint8_t *>(out);
    std::memcpy(o, gathered.data(), block);
    for (int r = 1; r < env_.worldSize; ++r)
      fn(o, o, gathered.data() + r * block, countPerRank);
    if (op == PkgReduceKind::Mean)
      divideBy(dtype, out, countPerRank, env_.worldSize);
  });
  return s;
}

Status GlooCommunicator::allGather(const void *in, void *out,
                                   int64_t countPerRank, PkgDType dtype) {
  std::string what = describeAllGather(countPerRank, dtype);
  if (Status s = checkCount(what, countPerRank); !s.isOk())
    return s;
  size_t block = countPerRank * pkgBytesPerElement(dtype);
  size_t total = block * env_.worldSize;
  // In place: this rank's block of |out| holds the input.
  uint8_t *mine = static_cast<uint8_t *>(out) + env_.rank * block;
  if (in != mine)
    std::memmove(mine, in, block);
  if (countPerRank == 0)
    return Status::ok();
  return run(what, [&](uint32_t tag) {
    gloo::AllgatherOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    opts.setOutput(static_cast<uint8_t *>(out), total);
    gloo::allgather(opts);
  });
}

Status GlooCommunicator::broadcast(const void *in, void *out, int64_t count,
                                   PkgDType dtype, int root) {
  std::string what = describeBroadcast(count, dtype, root);
  if (Status s = checkCount(what, count); !s.isOk())
    return s;
  if (Status s = checkRoot(what, root, env_.worldSize); !s.isOk())
    return s;
  size_t bytes = count * pkgBytesPerElement(dtype);
  if (env_.rank == root && in != out)
    std::memmove(out, in, bytes);
  if (count == 0)
    return Status::ok();
  return run(what, [&](uint32_t tag) {
    gloo::BroadcastOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    opts.setRoot(root);
    opts.setOutput(static_cast<uint8_t *>(out), bytes);
    gloo::broadcast(opts);
  });
}

Status GlooCommunicator::barrier() {
  return run("barrier", [&](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

} // namespace

StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const DistEnv &env, const CommOptions &options,
                       std::unique_ptr<TcpStoreServer> server) {
  if (env.worldSize < 1 || env.rank < 0 || env.rank >= env.worldSize)
    return Status::error("rank " + std::to_string(env.rank) +
                         " is not a rank of the world size " +
                         std::to_string(env.worldSize));
  StatusOr<milliseconds> timeout = collectiveTimeout(options);
  if (!timeout.isOk())
    return timeout.status();
  if (env.worldSize == 1)
    return std::unique_ptr<Communicator>(new LocalCommunicator());
  if (env.masterPort < 0 || env.masterPort > 65535 ||
      (env.masterPort == 0 && !(env.rank == 0 && server)))
    return Status::error("MASTER_PORT " + std::to_string(env.masterPort) +
                         " is not a port (1-65535)");
  auto comm = std::make_unique<GlooCommunicator>(env, timeout.value());
  if (Status s = comm->connect(std::move(server)); !s.isOk())
    return s;
  return std::unique_ptr<Communicator>(std::move(comm));
}

StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const DistEnv &env, const CommOptions &options) {
  return createGlooCommunicator(env, options, nullptr);
}

} // namespace kiln::runtime::dist
