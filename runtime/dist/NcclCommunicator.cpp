//===- NcclCommunicator.cpp - collectives over NCCL on GPUs ----------------===//
//
// See NcclCommunicator.h. NCCL's and cudart's C entry points are declared
// here with their documented signatures (nccl.h of NCCL 2.28, the CUDA
// runtime API): results are int enums, communicators and streams opaque
// pointers, ncclUniqueId 128 bytes, and ncclConfig_t the 2.28 layout
// (NCCL reads only the fields its |size| and |version| say exist). No CUDA
// or NCCL header is needed to build this file.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/NcclCommunicator.h"

#include "runtime/DynamicLibrary.h"
#include "runtime/dist/CollectiveCall.h"
#include "runtime/dist/Reduce.h"
#include "runtime/dist/TcpStore.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

//===----------------------------------------------------------------------===//
// The libraries
//===----------------------------------------------------------------------===//

using ncclComm = void *;
using cudaStream = void *;
constexpr int kNcclSuccess = 0, kNcclInProgress = 7;
constexpr int kCudaSuccess = 0, kCudaErrorNotReady = 600;
constexpr unsigned kCudaStreamNonBlocking = 1;
constexpr int kCudaMemcpyDefault = 4;

struct NcclUniqueId {
  char internal[128];
};

// ncclConfig_t as nccl.h 2.28 lays it out (NCCL_CONFIG_INITIALIZER).
struct NcclConfig {
  size_t size = sizeof(NcclConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 22800; // NCCL_VERSION(2, 28, 0)
  int blocking = INT_MIN, cgaClusterSize = INT_MIN, minCTAs = INT_MIN,
      maxCTAs = INT_MIN;
  const char *netName = nullptr;
  int splitShare = INT_MIN, trafficClass = INT_MIN;
  const char *commName = nullptr;
  int collnetEnable = INT_MIN, CTAPolicy = INT_MIN, shrinkShare = INT_MIN,
      nvlsCTAs = INT_MIN, nChannelsPerNetPeer = INT_MIN,
      nvlinkCentricSched = INT_MIN;
};

struct Libraries {
  void *nccl = nullptr, *cudart = nullptr;
  NcclLibraryInfo info;
  std::string error; // empty: everything loaded

  int (*ncclGetVersion)(int *) = nullptr;
  int (*ncclGetUniqueId)(NcclUniqueId *) = nullptr;
  int (*ncclCommInitRankConfig)(ncclComm *, int, NcclUniqueId, int,
                                NcclConfig *) = nullptr;
  int (*ncclCommGetAsyncError)(ncclComm, int *) = nullptr;
  int (*ncclCommFinalize)(ncclComm) = nullptr;
  int (*ncclCommDestroy)(ncclComm) = nullptr;
  int (*ncclCommAbort)(ncclComm) = nullptr;
  const char *(*ncclGetErrorString)(int) = nullptr;
  const char *(*ncclGetLastError)(ncclComm) = nullptr;
  int (*ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm,
                       cudaStream) = nullptr;
  int (*ncclReduceScatter)(const void *, void *, size_t, int, int, ncclComm,
                           cudaStream) = nullptr;
  int (*ncclAllGather)(const void *, void *, size_t, int, ncclComm,
                       cudaStream) = nullptr;
  int (*ncclBroadcast)(const void *, void *, size_t, int, int, ncclComm,
                       cudaStream) = nullptr;

  int (*cudaGetDeviceCount)(int *) = nullptr;
  int (*cudaSetDevice)(int) = nullptr;
  int (*cudaStreamCreateWithFlags)(cudaStream *, unsigned) = nullptr;
  int (*cudaStreamQuery)(cudaStream) = nullptr;
  int (*cudaStreamDestroy)(cudaStream) = nullptr;
  int (*cudaMalloc)(void **, size_t) = nullptr;
  int (*cudaFree)(void *) = nullptr;
  int (*cudaMemcpy)(void *, const void *, size_t, int) = nullptr;
  const char *(*cudaGetErrorName)(int) = nullptr;
  const char *(*cudaGetErrorString)(int) = nullptr;
};

const Libraries &libraries() {
  static Libraries lib;
  static std::once_flag once;
  std::call_once(once, [] {
    // KILN_NCCL / KILN_CUDART: that library only; otherwise the loader's
    // search path, then the toolkit this was built with
    // (runtime/DynamicLibrary.h).
    DynamicLibrary nccl = openCudaLibrary("libnccl", "KILN_NCCL", {".so.2"});
    if (!nccl.handle) {
      lib.error = "cannot load NCCL: " + describeLoadFailure(nccl, "KILN_NCCL");
      return;
    }
    lib.nccl = nccl.handle;
    lib.info.ncclPath = nccl.path;
    DynamicLibrary cudart = openCudaLibrary("libcudart", "KILN_CUDART");
    if (!cudart.handle) {
      lib.error = "cannot load the CUDA runtime: " +
                  describeLoadFailure(cudart, "KILN_CUDART");
      return;
    }
    lib.cudart = cudart.handle;
    lib.info.cudartPath = cudart.path;
    auto bind = [&](void *handle, const std::string &path, const char *name,
                    auto &fn) {
      void *sym = dlsym(handle, name);
      if (!sym && lib.error.empty())
        lib.error = path + " has no symbol " + name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
    };
    void *n = lib.nccl, *c = lib.cudart;
    const std::string &np = lib.info.ncclPath, &cp = lib.info.cudartPath;
    bind(n, np, "ncclGetVersion", lib.ncclGetVersion);
    bind(n, np, "ncclGetUniqueId", lib.ncclGetUniqueId);
    bind(n, np, "ncclCommInitRankConfig", lib.ncclCommInitRankConfig);
    bind(n, np, "ncclCommGetAsyncError", lib.ncclCommGetAsyncError);
    bind(n, np, "ncclCommFinalize", lib.ncclCommFinalize);
    bind(n, np, "ncclCommDestroy", lib.ncclCommDestroy);
    bind(n, np, "ncclCommAbort", lib.ncclCommAbort);
    bind(n, np, "ncclGetErrorString", lib.ncclGetErrorString);
    bind(n, np, "ncclGetLastError", lib.ncclGetLastError);
    bind(n, np, "ncclAllReduce", lib.ncclAllReduce);
    bind(n, np, "ncclReduceScatter", lib.ncclReduceScatter);
    bind(n, np, "ncclAllGather", lib.ncclAllGather);
    bind(n, np, "ncclBroadcast", lib.ncclBroadcast);
    bind(c, cp, "cudaGetDeviceCount", lib.cudaGetDeviceCount);
    bind(c, cp, "cudaSetDevice", lib.cudaSetDevice);
    bind(c, cp, "cudaStreamCreateWithFlags", lib.cudaStreamCreateWithFlags);
    bind(c, cp, "cudaStreamQuery", lib.cudaStreamQuery);
    bind(c, cp, "cudaStreamDestroy", lib.cudaStreamDestroy);
    bind(c, cp, "cudaMalloc", lib.cudaMalloc);
    bind(c, cp, "cudaFree", lib.cudaFree);
    bind(c, cp, "cudaMemcpy", lib.cudaMemcpy);
    bind(c, cp, "cudaGetErrorName", lib.cudaGetErrorName);
    bind(c, cp, "cudaGetErrorString", lib.cudaGetErrorString);
    if (!lib.error.empty())
      return;
    int version = 0;
    if (lib.ncclGetVersion(&version) != kNcclSuccess || version < 21400)
      lib.error = np + ": NCCL version " + std::to_string(version) +
                  " is too old (non-blocking ncclCommInitRankConfig needs "
                  "2.14 or later)";
    lib.info.ncclVersion = version;
  });
  return lib;
}

std::string cudaError(const Libraries &lib, const char *call, int code) {
  std::string name = lib.cudaGetErrorName ? lib.cudaGetErrorName(code) : "";
  std::string text = lib.cudaGetErrorString ? lib.cudaGetErrorString(code) : "";
  return std::string(call) + " failed: " + name + " (" + std::to_string(code) +
         "): " + text;
}

const char *ncclCodeName(int code) {
  static const char *names[] = {"ncclSuccess",       "ncclUnhandledCudaError",
                                "ncclSystemError",   "ncclInternalError",
                                "ncclInvalidArgument", "ncclInvalidUsage",
                                "ncclRemoteError",   "ncclInProgress"};
  return code >= 0 && code < 8 ? names[code] : "unknown NCCL result";
}

std::string ncclError(const Libraries &lib, const char *call, int code,
                      ncclComm comm) {
  std::string text = lib.ncclGetErrorString ? lib.ncclGetErrorString(code) : "";
  std::string last = lib.ncclGetLastError ? lib.ncclGetLastError(comm) : "";
  std::string s = std::string(call) + " failed: " + ncclCodeName(code) + " (" +
                  std::to_string(code) + "): " + text;
  if (!last.empty())
    s += " [" + last + "]";
  return s;
}

// NCCL's ncclDataType_t; -1: none.
int ncclType(PkgDType d, bool reducing) {
  switch (d) {
  case PkgDType::I8: return 0;
  case PkgDType::I32: return 2;
  case PkgDType::I64: return 4;
  case PkgDType::F16: return 6;
  case PkgDType::F32: return 7;
  case PkgDType::F64: return 8;
  case PkgDType::BF16: return 9;
  case PkgDType::I1: return reducing ? -1 : 1; // moved as uint8
  }
  return -1;
}

int ncclOp(PkgReduceKind op) {
  switch (op) {
  case PkgReduceKind::Sum: return 0;
  case PkgReduceKind::Max: return 2;
  case PkgReduceKind::Min: return 3;
  case PkgReduceKind::Mean: return 4; // ncclAvg
  }
  return 0;
}

// Whether the libraries, and a device, are there; the device count.
StatusOr<int> usableDevices() {
  const Libraries &lib = libraries();
  if (!lib.error.empty())
    return Status::error(lib.error);
  int count = 0;
  int rc = lib.cudaGetDeviceCount(&count);
  if (rc != kCudaSuccess)
    return Status::error("no CUDA device: " +
                         cudaError(lib, "cudaGetDeviceCount", rc));
  if (count == 0)
    return Status::error("no CUDA device: cudaGetDeviceCount found none");
  return count;
}

const char *const kEveryRankThere = "every rank reached it and is connected";

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

class NcclCommunicator final : public Communicator, public DeviceCollectives {
public:
  NcclCommunicator(const DistEnv &env, milliseconds timeout, int device)
      : lib_(libraries()), env_(env), timeout_(timeout), device_(device) {}
  ~NcclCommunicator() override;

  // Rendezvous and init. Rank 0 serves the store: |server| when given
  // (already listening at env.masterPort), else one it starts.
  Status connect(std::unique_ptr<TcpStoreServer> server = nullptr);

  // Ranks of one process (createLocalNcclCommunicators): |cancel| is set
  // when one of them failed to connect, and ends the others' waits in
  // connect at once rather than at the timeout.
  void setCancel(const std::atomic<bool> *cancel) { cancel_ = cancel; }

  void setStream(cudaStream s) { stream_ = s ? s : ownStream_; }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.isOk())
      (void)fail("rank " + std::to_string(env_.rank) + " stopped");
  }

  int rank() const override { return env_.rank; }
  int worldSize() const override { return env_.worldSize; }
  Status allReduce(const void *in, void *out, int64_t count, PkgDType dtype,
                   PkgReduceKind op) override {
    return enqueueAllReduce(in, out, count, dtype, op, nullptr);
  }
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       PkgDType dtype, PkgReduceKind op) override {
    return enqueueReduceScatter(in, out, countPerRank, dtype, op, nullptr);
  }
  Status allGather(const void *in, void *out, int64_t countPerRank,
                   PkgDType dtype) override {
    return enqueueAllGather(in, out, countPerRank, dtype, nullptr);
  }
  Status broadcast(const void *in, void *out, int64_t count, PkgDType dtype,
                   int root) override {
    return enqueueBroadcast(in, out, count, dtype, root, nullptr);
  }
  DeviceCollectives *deviceCollectives() override { return this; }

  // DeviceCollectives: with a null |stream|, the Communicator calls above
  // (the communicator's stream, waited for).
  Status enqueueAllReduce(const void *in, void *out, int64_t count,
                          PkgDType dtype, PkgReduceKind op,
                          void *stream) override {
    std::string what = describeAllReduce(count, dtype, op);
    int type = ncclType(dtype, true);
    return collective(what, count, type, [&](cudaStream st) {
      return lib_.ncclAllReduce(in, out, count, type, ncclOp(op), comm_, st);
    }, "ncclAllReduce", stream);
  }
  Status enqueueReduceScatter(const void *in, void *out, int64_t countPerRank,
                              PkgDType dtype, PkgReduceKind op,
                              void *stream) override {
    std::string what = describeReduceScatter(countPerRank, dtype, op);
    int type = ncclType(dtype, true);
    return collective(what, countPerRank, type, [&](cudaStream st) {
      return lib_.ncclReduceScatter(in, out, countPerRank, type, ncclOp(op),
                                    comm_, st);
    }, "ncclReduceScatter", stream);
  }
  Status enqueueAllGather(const void *in, void *out, int64_t countPerRank,
                          PkgDType dtype, void *stream) override {
    std::string what = describeAllGather(countPerRank, dtype);
    int type = ncclType(dtype, false);
    return collective(what, countPerRank, type, [&](cudaStream st) {
      return lib_.ncclAllGather(in, out, countPerRank, type, comm_, st);
    }, "ncclAllGather", stream);
  }
  Status enqueueBroadcast(const void *in, void *out, int64_t count,
                          PkgDType dtype, int root, void *stream) override {
    std::string what = describeBroadcast(count, dtype, root);
    if (Status s = checkRoot(what, root, env_.worldSize); !s.isOk())
      return s;
    int type = ncclType(dtype, false);
    return collective(what, count, type, [&](cudaStream st) {
      return lib_.ncclBroadcast(in, out, count, type, root, comm_, st);
    }, "ncclBroadcast", stream);
  }
  Status waitStream(void *stream) override;
  Status barrier() override;

private:
  // Enqueues (on |onStream|, else the communicator's stream) and, without
  // |onStream|, waits until done.
  template <typename Enqueue>
  Status collective(const std::string &what, int64_t count, int type,
                    Enqueue &&enqueue, const char *call,
                    cudaStream onStream = nullptr);
  // Polls |stream| until done, NCCL's asynchronous error, a rank gone or
  // the timeout. |anyStep|: the stream may hold collectives of any step
  // (a graph's replays), so a rank that died at all is the culprit.
  Status awaitStream(const std::string &head, const char *call,
                     cudaStream stream, Clock::time_point start,
                     bool anyStep = false);
  // Polls ncclCommGetAsyncError while it says ncclInProgress, until
  // |deadline|. Ok, an NCCL error, or a timeout (|timedOut| set).
  Status settle(const char *call, Clock::time_point deadline, bool &timedOut);
  // Waits up to the timeout for |keys| (TcpStore::wait), in slices when
  // the wait can be cancelled (setCancel). Ok, a store error, a timeout
  // with the keys still |missing|, or kCancelled.
  Status waitKeys(const std::vector<std::string> &keys,
                  std::vector<std::string> &missing);
  bool cancelled() const { return cancel_ && cancel_->load(); }
  // The ranks behind a timeout or a failure, from the store.
  std::string culprits(uint64_t seq);
  Status fail(const std::string &message);

  const Libraries &lib_;
  DistEnv env_;
  milliseconds timeout_;
  int device_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  ncclComm comm_ = nullptr;
  cudaStream ownStream_ = nullptr, stream_ = nullptr;
  std::mutex mutex_;
  uint64_t seq_ = 0;
  Status broken_;
  const std::atomic<bool> *cancel_ = nullptr;
};

const char *const kCancelled = "stopped: another rank of this process failed";

Status NcclCommunicator::fail(const std::string &message) {
  broken_ = Status::error(message);
  if (comm_) {
    // Peers blocked on this rank see its connections close.
    lib_.ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return broken_;
}

std::string NcclCommunicator::culprits(uint64_t seq) {
  StatusOr<std::vector<RankState>> states = store_->ranks(milliseconds(0));
  if (!states.isOk())
    return "rank 0 is unreachable: " + states.status().message();
  std::string list;
  for (int r = 0; r < static_cast<int>(states.value().size()); ++r) {
    if (r == env_.rank)
      continue;
    const RankState &s = states.value()[r];
    std::string item;
    if (s.kind != RankState::Kind::Alive)
      item = "rank " + std::to_string(r) + " " + describe(s.kind);
    else if (s.progress < seq)
      item = "rank " + std::to_string(r) + " did not reach it (its last "
             "collective was " +
             (s.progress ? "#" + std::to_string(s.progress)
                         : std::string("none")) + ")";
    if (!item.empty())
      list += (list.empty() ? "" : "; ") + item;
  }
  return list.empty() ? kEveryRankThere : list;
}

Status NcclCommunicator::settle(const char *call, Clock::time_point deadline,
                                bool &timedOut) {
  timedOut = false;
  while (true) {
    int state = kNcclSuccess;
    int rc = lib_.ncclCommGetAsyncError(comm_, &state);
    if (rc != kNcclSuccess)
      return Status::error(ncclError(lib_, "ncclCommGetAsyncError", rc, comm_));
    if (state == kNcclSuccess)
      return Status::ok();
    if (state != kNcclInProgress)
      return Status::error(ncclError(lib_, call, state, comm_));
    if (cancelled())
      return Status::error(kCancelled);
    if (Clock::now() >= deadline) {
      timedOut = true;
      return Status::ok();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status NcclCommunicator::waitKeys(const std::vector<std::string> &keys,
                                  std::vector<std::string> &missing) {
  missing.clear();
  if (!cancel_)
    return store_->wait(keys, timeout_, &missing);
  Clock::time_point deadline = Clock::now() + timeout_;
  while (true) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    Status s = store_->wait(
        keys, std::clamp(left, milliseconds(0), milliseconds(50)), &missing);
    if (s.isOk() || missing.empty() || Clock::now() >= deadline)
      return s;
    if (cancelled())
      return Status::error(kCancelled);
  }
}

Status NcclCommunicator::connect(std::unique_ptr<TcpStoreServer> server) {
  std::string where = "rank " + std::to_string(env_.rank) + " of " +
                      std::to_string(env_.worldSize) + ": NCCL rendezvous at " +
                      env_.masterAddr + ":" + std::to_string(env_.masterPort);
  // Held before anything can fail, so that the other ranks of this process
  // reach the store and see the cancellation.
  if (server)
    server_ = std::move(server);
  if (int rc = lib_.cudaSetDevice(device_); rc != kCudaSuccess)
    return fail(where + ": " + cudaError(lib_, "cudaSetDevice", rc));
  if (env_.rank == 0 && !server_) {
    StatusOr<std::unique_ptr<TcpStoreServer>> s = TcpStoreServer::start(
        isLoopback(env_.masterAddr) ? env_.masterAddr : std::string(),
        env_.masterPort, env_.worldSize);
    if (!s.isOk())
      return fail(where + ": " + s.status().message());
    server_ = std::move(s.value());
  }
  StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::connect(env_.masterAddr, env_.masterPort, timeout_);
  if (!store.isOk())
    return fail(where + ": " + store.status().message());
  store_ = std::move(store.value());
  if (Status s = store_->hello(env_.rank); !s.isOk())
    return fail(where + ": " + s.message());
  std::vector<std::string> keys;
  for (int r = 0; r < env_.worldSize; ++r)
    keys.push_back("nccl/arrived/" + std::to_string(r));
  if (Status s = store_->set(keys[env_.rank], "1"); !s.isOk())
    return fail(where + ": " + s.message());
  std::vector<std::string> missing;
  if (Status s = waitKeys(keys, missing); !s.isOk()) {
    if (cancelled())
      return fail(where + ": " + kCancelled);
    std::string ranks;
    for (const std::string &k : missing)
      ranks += (ranks.empty() ? "" : ", ") + k.substr(std::strlen("nccl/arrived/"));
    return fail(where + " timed out after " + formatSeconds(timeout_) +
                (ranks.empty() ? ": " + s.message()
                               : ": rank(s) " + ranks + " never arrived"));
  }
  // The unique id: rank 0's, through the store.
  NcclUniqueId id{};
  if (env_.rank == 0) {
    if (int rc = lib_.ncclGetUniqueId(&id); rc != kNcclSuccess)
      return fail(where + ": " + ncclError(lib_, "ncclGetUniqueId", rc, nullptr));
    if (Status s = store_->set("nccl/unique-id", std::string(id.internal, 128));
        !s.isOk())
      return fail(where + ": " + s.message());
  } else {
    std::vector<std::string> missing;
    Status s = waitKeys({"nccl/unique-id"}, missing);
    if (!s.isOk() && cancelled())
      return fail(where + ": " + kCancelled);
    if (!s.isOk() && !missing.empty())
      return fail(where + ": rank 0 did not post the NCCL unique id within " +
                  formatSeconds(timeout_));
    StatusOr<std::string> v =
        s.isOk() ? store_->get("nccl/unique-id", milliseconds(0))
                 : StatusOr<std::string>(s);
    if (!v.isOk())
      return fail(where + ": the NCCL unique id from rank 0: " +
                  v.status().message());
    if (v.value().size() != sizeof(id.internal))
      return fail(where + ": the NCCL unique id from rank 0 has " +
                  std::to_string(v.value().size()) + " bytes, expected 128");
    std::memcpy(id.internal, v.value().data(), sizeof(id.internal));
  }
  if (int rc = lib_.cudaStreamCreateWithFlags(&ownStream_, kCudaStreamNonBlocking);
      rc != kCudaSuccess)
    return fail(where + ": " + cudaError(lib_, "cudaStreamCreateWithFlags", rc));
  stream_ = ownStream_;
  // Non-blocking init, polled until done or the timeout. Each rank says in
  // the store that it entered it, so a timeout can name those that did not.
  std::vector<std::string> entered;
  for (int r = 0; r < env_.worldSize; ++r)
    entered.push_back("nccl/init/" + std::to_string(r));
  if (Status s = store_->set(entered[env_.rank], "1"); !s.isOk())
    return fail(where + ": " + s.message());
  NcclConfig config;
  config.blocking = 0;
  Clock::time_point start = Clock::now();
  int rc = lib_.ncclCommInitRankConfig(&comm_, env_.worldSize, id, env_.rank,
                                       &config);
  if (rc != kNcclSuccess && rc != kNcclInProgress) {
    std::string e = ncclError(lib_, "ncclCommInitRankConfig", rc, comm_);
    return fail(where + ": " + e + " (device " + std::to_string(device_) + ")");
  }
  if (!comm_)
    return fail(where + ": ncclCommInitRankConfig returned no communicator");
  bool timedOut = false;
  Status s = settle("ncclCommInitRankConfig", start + timeout_, timedOut);
  if (!s.isOk())
    return fail(where + ": " + s.message());
  if (timedOut) {
    std::vector<std::string> absent;
    (void)store_->wait(entered, milliseconds(0), &absent);
    std::string who;
    for (const std::string &k : absent)
      who += (who.empty() ? "" : "; ") + ("rank " + k.substr(10)) +
             " never called ncclCommInitRank";
    std::string gone = culprits(0);
    if (gone != kEveryRankThere)
      who += (who.empty() ? "" : "; ") + gone;
    if (who.empty())
      who = "every rank entered ncclCommInitRank and is connected to the "
            "store; NCCL did not finish connecting them (NCCL_DEBUG=INFO "
            "tells why)";
    return fail(where + ": ncclCommInitRankConfig did not complete within " +
                formatSeconds(timeout_) + ": " + who);
  }
  return Status::ok();
}

template <typename Enqueue>
Status NcclCommunicator::collective(const std::string &what, int64_t count,
                                    int type, Enqueue &&enqueue,
                                    const char *call, cudaStream onStream) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string head = "rank " + std::to_string(env_.rank) + ": " + what;
  if (Status s = checkCount(head, count); !s.isOk())
    return s;
  // NCCL's types, not Reduce.h's reductions: NCCL reduces on the device.
  if (type < 0)
    return Status::error(head + ": not supported for this dtype");
  if (!broken_.isOk())
    return Status::error(head + ": the communicator failed earlier: " +
                         broken_.message());
  if (count == 0)
    return Status::ok();
  ++seq_;
  head += " (collective #" + std::to_string(seq_) + ")";
  store_->postProgress(seq_);
  if (int rc = lib_.cudaSetDevice(device_); rc != kCudaSuccess)
    return fail(head + ": " + cudaError(lib_, "cudaSetDevice", rc));
  Clock::time_point start = Clock::now(), deadline = start + timeout_;
  cudaStream stream = onStream ? onStream : stream_;
  int rc = enqueue(stream);
  if (rc != kNcclSuccess && rc != kNcclInProgress)
    return fail(head + ": " + ncclError(lib_, call, rc, comm_));
  bool timedOut = false;
  if (Status s = settle(call, deadline, timedOut); !s.isOk())
    return fail(head + ": " + s.message() + ": " + culprits(seq_));
  if (timedOut)
    return fail(head + ": enqueueing did not complete within " +
                formatSeconds(timeout_) + ": " + culprits(seq_));
  // Enqueued on the caller's stream: the caller waits (waitStream).
  if (onStream)
    return Status::ok();
  return awaitStream(head, call, stream, start);
}

Status NcclCommunicator::awaitStream(const std::string &head, const char *call,
                                     cudaStream stream,
                                     Clock::time_point start, bool anyStep) {
  Clock::time_point deadline = start + timeout_;
  Clock::time_point nextLivenessCheck = start + milliseconds(200);
  // Done when the stream is; NCCL's asynchronous errors end the wait too.
  while (true) {
    int q = lib_.cudaStreamQuery(stream);
    if (q == kCudaSuccess)
      return Status::ok();
    if (q != kCudaErrorNotReady)
      return fail(head + ": " + cudaError(lib_, "cudaStreamQuery", q));
    int state = kNcclSuccess;
    int e = lib_.ncclCommGetAsyncError(comm_, &state);
    if (e != kNcclSuccess || (state != kNcclSuccess && state != kNcclInProgress))
      return fail(head + " failed after " +
                  formatSeconds(Clock::now() - start) + ": " +
                  ncclError(lib_, call, e != kNcclSuccess ? e : state, comm_) +
                  ": " + culprits(seq_));
    Clock::time_point now = Clock::now();
    if (now >= deadline)
      break;
    if (now >= nextLivenessCheck) {
      // A rank that died or left before reaching this collective never
      // will: fail now, naming it, rather than at the timeout.
      nextLivenessCheck = now + milliseconds(200);
      StatusOr<std::vector<RankState>> states = store_->ranks(milliseconds(0));
      bool gone = !states.isOk();
      // Waiting for a stream (a CUDA Graph may replay collectives the
      // sequence numbers never saw): a rank whose process died is gone.
      for (int r = 0; !gone && r < static_cast<int>(states.value().size()); ++r)
        gone = r != env_.rank &&
               ((states.value()[r].kind != RankState::Kind::Alive &&
                 states.value()[r].progress < seq_) ||
                (anyStep && states.value()[r].kind == RankState::Kind::Dropped));
      if (gone)
        return fail(head + " failed after " + formatSeconds(now - start) +
                    ": " + culprits(seq_));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return fail(head + " timed out after " + formatSeconds(Clock::now() - start) +
              ": " + culprits(seq_));
}

Status NcclCommunicator::waitStream(void *stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string head = "rank " + std::to_string(env_.rank) +
                     ": waiting for the step's collectives (up to #" +
                     std::to_string(seq_) + ")";
  if (!broken_.isOk())
    return Status::error(head + ": the communicator failed earlier: " +
                         broken_.message());
  if (int rc = lib_.cudaSetDevice(device_); rc != kCudaSuccess)
    return fail(head + ": " + cudaError(lib_, "cudaSetDevice", rc));
  return awaitStream(head, "the stream's NCCL work", stream ? stream : stream_,
                     Clock::now(), /*anyStep=*/true);
}

Status NcclCommunicator::barrier() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string head = "rank " + std::to_string(env_.rank) + ": barrier";
  if (!broken_.isOk())
    return Status::error(head + ": the communicator failed earlier: " +
                         broken_.message());
  ++seq_;
  head += " (collective #" + std::to_string(seq_) + ")";
  store_->postProgress(seq_);
  std::vector<std::string> keys;
  for (int r = 0; r < env_.worldSize; ++r)
    keys.push_back("nccl/barrier/" + std::to_string(seq_) + "/" +
                   std::to_string(r));
  if (Status s = store_->set(keys[env_.rank], "1"); !s.isOk())
    return fail(head + ": " + s.message());
  if (Status s = store_->wait(keys, timeout_); !s.isOk())
    return fail(head + ": " + culprits(seq_));
  return Status::ok();
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // Finalize flushes what was enqueued (polled: the communicator is
    // non-blocking); a failed or stuck finalize aborts instead.
    int rc = broken_.isOk() ? lib_.ncclCommFinalize(comm_) : -1;
    bool clean = rc == kNcclSuccess || rc == kNcclInProgress;
    if (clean) {
      bool timedOut = false;
      Status s = settle("ncclCommFinalize", Clock::now() + timeout_, timedOut);
      clean = s.isOk() && !timedOut;
    }
    if (clean)
      lib_.ncclCommDestroy(comm_);
    else
      lib_.ncclCommAbort(comm_);
  }
  if (ownStream_)
    lib_.cudaStreamDestroy(ownStream_);
  if (store_)
    (void)store_->leave();
  if (server_) {
    server_->waitForRanksToLeave(broken_.isOk()
                                     ? timeout_
                                     : std::min(timeout_, milliseconds(5000)));
    store_.reset();
    server_.reset();
  }
}

} // namespace

StatusOr<NcclLibraryInfo> loadNcclLibraries() {
  const Libraries &lib = libraries();
  if (!lib.error.empty())
    return Status::error(lib.error);
  return lib.info;
}

StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(const DistEnv &env, const CommOptions &options,
                       const NcclOptions &nccl) {
  if (env.worldSize < 1 || env.rank < 0 || env.rank >= env.worldSize)
    return Status::error("rank " + std::to_string(env.rank) +
                         " is not a rank of the world size " +
                         std::to_string(env.worldSize));
  StatusOr<milliseconds> timeout = collectiveTimeout(options);
  if (!timeout.isOk())
    return timeout.status();
  if (env.masterPort < 1 || env.masterPort > 65535)
    return Status::error("MASTER_PORT " + std::to_string(env.masterPort) +
                         " is not a port (1-65535)");
  StatusOr<int> devices = usableDevices();
  if (!devices.isOk())
    return Status::error("rank " + std::to_string(env.rank) + ": NCCL: " +
                         devices.status().message());
  int device = nccl.device >= 0 ? nccl.device : env.localRank;
  if (device >= devices.value())
    return Status::error("rank " + std::to_string(env.rank) + ": NCCL: CUDA "
                         "device " + std::to_string(device) + " does not "
                         "exist (" + std::to_string(devices.value()) +
                         " found); one device per rank on a machine");
  auto comm = std::make_unique<NcclCommunicator>(env, timeout.value(), device);
  if (Status s = comm->connect(); !s.isOk())
    return s;
  return std::unique_ptr<Communicator>(std::move(comm));
}

StatusOr<std::vector<std::unique_ptr<Communicator>>>
createLocalNcclCommunicators(int worldSize, const CommOptions &options) {
  if (worldSize < 1)
    return Status::error("a world size of " + std::to_string(worldSize) +
                         ": expected at least 1");
  StatusOr<milliseconds> timeout = collectiveTimeout(options);
  if (!timeout.isOk())
    return timeout.status();
  StatusOr<int> devices = usableDevices();
  if (!devices.isOk())
    return Status::error("NCCL: " + devices.status().message());
  if (worldSize > devices.value())
    return Status::error("NCCL: " + std::to_string(worldSize) +
                         " ranks need as many CUDA devices, " +
                         std::to_string(devices.value()) + " found");
  // The store on an ephemeral loopback port, so that two jobs on one
  // machine never meet; rank 0's communicator owns it.
  StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::start("127.0.0.1", 0, worldSize);
  if (!server.isOk())
    return Status::error("NCCL: " + server.status().message());
  DistEnv env;
  env.worldSize = env.localWorldSize = worldSize;
  env.masterAddr = "127.0.0.1";
  env.masterPort = server.value()->port();
  std::vector<std::unique_ptr<NcclCommunicator>> comms;
  for (int r = 0; r < worldSize; ++r) {
    env.rank = env.localRank = r;
    comms.push_back(
        std::make_unique<NcclCommunicator>(env, timeout.value(), r));
  }
  // Each rank connects on a thread of its own: the rendezvous and
  // ncclCommInitRankConfig wait for every rank. The first to fail cancels
  // the others' waits, and its error is the result.
  std::atomic<bool> cancel{false};
  std::atomic<int> first{-1};
  std::vector<Status> statuses(worldSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < worldSize; ++r) {
    comms[r]->setCancel(&cancel);
    threads.emplace_back(
        [&, r, s = r == 0 ? std::move(server.value()) : nullptr]() mutable {
          statuses[r] = comms[r]->connect(std::move(s));
          int none = -1;
          if (!statuses[r].isOk() && first.compare_exchange_strong(none, r))
            cancel = true;
        });
  }
  for (std::thread &t : threads)
    t.join();
  if (first >= 0) {
    // Each closes on a thread of its own: ncclCommDestroy waits for the
    // process's other ranks, and rank 0's store for the others to leave.
    threads.clear();
    for (std::unique_ptr<NcclCommunicator> &c : comms)
      threads.emplace_back([&c] { c.reset(); });
    for (std::thread &t : threads)
      t.join();
    return statuses[first];
  }
  for (std::unique_ptr<NcclCommunicator> &c : comms)
    c->setCancel(nullptr);
  std::vector<std::unique_ptr<Communicator>> result;
  for (std::unique_ptr<NcclCommunicator> &c : comms)
    result.push_back(std::move(c));
  return result;
}

Status setNcclStream(Communicator &comm, void *cudaStream) {
  auto *nccl = dynamic_cast<NcclCommunicator *>(&comm);
  if (!nccl)
    return Status::error("setNcclStream: not a NCCL communicator");
  nccl->setStream(cudaStream);
  return Status::ok();
}

StatusOr<void *> ncclDeviceAlloc(int device, size_t bytes) {
  StatusOr<int> devices = usableDevices();
  if (!devices.isOk())
    return devices.status();
  const Libraries &lib = libraries();
  if (int rc = lib.cudaSetDevice(device); rc != kCudaSuccess)
    return Status::error(cudaError(lib, "cudaSetDevice", rc));
  void *p = nullptr;
  if (int rc = lib.cudaMalloc(&p, bytes); rc != kCudaSuccess)
    return Status::error(cudaError(lib, "cudaMalloc", rc));
  return p;
}

Status ncclDeviceCopy(void *dst, const void *src, size_t bytes) {
  const Libraries &lib = libraries();
  if (!lib.error.empty())
    return Status::error(lib.error);
  if (int rc = lib.cudaMemcpy(dst, src, bytes, kCudaMemcpyDefault);
      rc != kCudaSuccess)
    return Status::error(cudaError(lib, "cudaMemcpy", rc));
  return Status::ok();
}

Status ncclDeviceFree(void *ptr) {
  const Libraries &lib = libraries();
  if (!lib.error.empty())
    return Status::error(lib.error);
  if (int rc = lib.cudaFree(ptr); rc != kCudaSuccess)
    return Status::error(cudaError(lib, "cudaFree", rc));
  return Status::ok();
}

} // namespace kiln::runtime::dist
