//===- FakeNccl.cpp - NCCL and cudart stand-ins for the NCCL tests ---------===//
//
// A shared library with the NCCL and CUDA runtime entry points that
// NcclCommunicator loads, for ranks that are threads of one test process:
// "device" memory is host memory, a stream remembers the last collective
// enqueued on it and is ready once every rank of the communicator has
// enqueued that collective (the last to do so computes everyone's result,
// f32 only), and ncclCommInitRankConfig completes once every rank has
// called it. FAKE_NCCL_HANG_INIT_RANK=R makes rank R's init never complete
// anyone's; FAKE_NCCL_FAIL_INIT_RANK=R makes rank R's init fail at once
// (ncclInternalError), and FAKE_CUDA_FAIL_DEVICE=D makes cudaSetDevice(D)
// fail (cudaErrorInvalidDevice), both leaving the other ranks waiting for
// it, as a real failure would. Other dtypes are ncclInvalidArgument, as a real
// error would be.
//
// A stream this library did not create (a FakeCudaApi's, when
// CudaExecutable enqueues on its own stream) takes the collective as stream
// work through the hook a test installs with fakeNcclSetStreamHook: the
// hook runs it now or records it into a CUDA Graph being captured (and the
// graph's launches run it again), as a real stream would. That work
// arrives at the next collective of the communicator and blocks until every
// rank has arrived (a stream waits for its peers), at most 60 s.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <set>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

enum Kind { AllReduce, ReduceScatter, AllGather, Broadcast };

struct Post {
  Kind kind;
  const float *send;
  float *recv;
  size_t count;
  int op, root;
};

struct Collective {
  std::vector<Post> posts;
  int arrived = 0;
  bool done = false;
};

struct Group {
  int n = 0;
  int registered = 0;
  std::map<unsigned long, Collective> ops;
};

struct Comm {
  std::string id;
  int n, rank;
  bool hung = false, aborted = false;
  unsigned long ops = 0;
};

struct Stream {
  std::string id;
  unsigned long op = 0; // 0: nothing pending
};

std::mutex mutex;
std::condition_variable arrivedAll;
std::map<std::string, Group> groups;
int uniqueIds = 0;
std::set<void *> ownStreams;

using StreamHook = void (*)(void *stream, void (*fn)(void *), void *arg);
StreamHook streamHook = nullptr;

// A collective handed to another stream's owner, kept for every replay.
struct Deferred {
  void *comm;
  Post post;
};
std::deque<Deferred> deferred;

void compute(Group &g, Collective &c) {
  int n = g.n;
  // Every rank's result first, then the writes: a collective may be in
  // place (recv == send), and other ranks read the sends.
  std::vector<std::vector<float>> results(n);
  for (int r = 0; r < n; ++r) {
    const Post &p = c.posts[r];
    std::vector<float> &acc = results[r];
    switch (p.kind) {
    case AllReduce:
    case ReduceScatter: {
      size_t count = p.count, offset = p.kind == ReduceScatter ? r * count : 0;
      acc.resize(count);
      for (size_t i = 0; i < count; ++i) {
        float a = c.posts[0].send[offset + i];
        for (int q = 1; q < n; ++q) {
          float b = c.posts[q].send[offset + i];
          a = p.op == 2 ? std::max(a, b) : p.op == 3 ? std::min(a, b) : a + b;
        }
        acc[i] = p.op == 4 ? a / n : a;
      }
      break;
    }
    case AllGather:
      acc.resize(n * p.count);
      for (int q = 0; q < n; ++q)
        std::memcpy(acc.data() + q * p.count, c.posts[q].send, p.count * 4);
      break;
    case Broadcast:
      acc.assign(c.posts[p.root].send, c.posts[p.root].send + p.count);
      break;
    }
  }
  for (int r = 0; r < n; ++r)
    std::memcpy(c.posts[r].recv, results[r].data(), results[r].size() * 4);
  c.done = true;
}

int enqueue(void *comm, void *stream, Post post, int type) {
  if (type != 7)
    return 4; // ncclInvalidArgument
  std::lock_guard<std::mutex> lock(mutex);
  Comm *c = static_cast<Comm *>(comm);
  Group &g = groups[c->id];
  Collective &op = g.ops[++c->ops];
  op.posts.resize(g.n);
  op.posts[c->rank] = post;
  if (++op.arrived == g.n)
    compute(g, op);
  Stream *s = static_cast<Stream *>(stream);
  s->id = c->id;
  s->op = c->ops;
  return 0;
}

// Stream work on a foreign stream: arrive, and wait for every rank.
void arrive(void *arg) {
  Deferred *d = static_cast<Deferred *>(arg);
  std::unique_lock<std::mutex> lock(mutex);
  Comm *c = static_cast<Comm *>(d->comm);
  Group &g = groups[c->id];
  Collective &op = g.ops[++c->ops];
  op.posts.resize(g.n);
  op.posts[c->rank] = d->post;
  if (++op.arrived == g.n) {
    compute(g, op);
    arrivedAll.notify_all();
    return;
  }
  arrivedAll.wait_for(lock, std::chrono::seconds(60), [&] { return op.done; });
}

int enqueueOn(void *comm, void *stream, Post post, int type) {
  bool own;
  {
    std::lock_guard<std::mutex> lock(mutex);
    own = ownStreams.count(stream) || !streamHook;
  }
  if (own)
    return enqueue(comm, stream, post, type);
  if (type != 7)
    return 4; // ncclInvalidArgument
  Deferred *d;
  {
    std::lock_guard<std::mutex> lock(mutex);
    deferred.push_back({comm, post});
    d = &deferred.back();
  }
  streamHook(stream, arrive, d);
  return 0;
}

// Whether the environment variable |name| is set to |value|.
bool envIs(const char *name, int value) {
  const char *v = std::getenv(name);
  return v && *v && std::atoi(v) == value;
}

} // namespace

extern "C" {

// Where collectives on foreign streams go (null: nowhere; they are then
// treated as this library's streams).
void fakeNcclSetStreamHook(StreamHook hook) {
  std::lock_guard<std::mutex> lock(mutex);
  streamHook = hook;
}

int ncclGetVersion(int *v) {
  *v = 22809;
  return 0;
}
int ncclGetUniqueId(char *id) {
  std::lock_guard<std::mutex> lock(mutex);
  std::memset(id, 0, 128);
  std::string s = "fake-nccl-" + std::to_string(++uniqueIds);
  std::memcpy(id, s.data(), s.size());
  return 0;
}
struct UniqueId {
  char internal[128];
};
int ncclCommInitRankConfig(void **comm, int n, UniqueId id, int rank, void *) {
  std::lock_guard<std::mutex> lock(mutex);
  if (envIs("FAKE_NCCL_FAIL_INIT_RANK", rank)) {
    *comm = nullptr;
    return 3; // ncclInternalError
  }
  auto *c = new Comm{std::string(id.internal), n, rank};
  const char *hang = std::getenv("FAKE_NCCL_HANG_INIT_RANK");
  c->hung = hang && std::atoi(hang) == rank;
  Group &g = groups[c->id];
  g.n = n;
  if (!c->hung)
    ++g.registered;
  *comm = c;
  return 7; // ncclInProgress
}
int ncclCommGetAsyncError(void *comm, int *state) {
  std::lock_guard<std::mutex> lock(mutex);
  Comm *c = static_cast<Comm *>(comm);
  Group &g = groups[c->id];
  *state = c->aborted ? 6 : (g.registered == g.n ? 0 : 7);
  return 0;
}
int ncclCommFinalize(void *) { return 0; }
int ncclCommDestroy(void *comm) {
  delete static_cast<Comm *>(comm);
  return 0;
}
int ncclCommAbort(void *comm) {
  delete static_cast<Comm *>(comm);
  return 0;
}
const char *ncclGetErrorString(int) { return "fake NCCL error"; }
const char *ncclGetLastError(void *) { return "fake NCCL: only f32 is reduced"; }
int ncclAllReduce(const void *s, void *r, size_t count, int type, int op,
                  void *comm, void *stream) {
  return enqueueOn(comm, stream,
                 {AllReduce, static_cast<const float *>(s),
                  static_cast<float *>(r), count, op, 0},
                 type);
}
int ncclReduceScatter(const void *s, void *r, size_t count, int type, int op,
                      void *comm, void *stream) {
  return enqueueOn(comm, stream,
                 {ReduceScatter, static_cast<const float *>(s),
                  static_cast<float *>(r), count, op, 0},
                 type);
}
int ncclAllGather(const void *s, void *r, size_t count, int type, void *comm,
                  void *stream) {
  return enqueueOn(comm, stream,
                 {AllGather, static_cast<const float *>(s),
                  static_cast<float *>(r), count, 0, 0},
                 type);
}
int ncclBroadcast(const void *s, void *r, size_t count, int type, int root,
                  void *comm, void *stream) {
  return enqueueOn(comm, stream,
                 {Broadcast, static_cast<const float *>(s),
                  static_cast<float *>(r), count, 0, root},
                 type);
}

int cudaGetDeviceCount(int *n) {
  *n = 2;
  return 0;
}
int cudaSetDevice(int device) {
  return envIs("FAKE_CUDA_FAIL_DEVICE", device) ? 101 : 0; // InvalidDevice
}
int cudaStreamCreateWithFlags(void **s, unsigned) {
  *s = new Stream;
  std::lock_guard<std::mutex> lock(mutex);
  ownStreams.insert(*s);
  return 0;
}
int cudaStreamQuery(void *stream) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!ownStreams.count(stream))
    return 0; // a foreign stream's work ran when it was enqueued
  Stream *s = static_cast<Stream *>(stream);
  if (!s->op)
    return 0;
  return groups[s->id].ops[s->op].done ? 0 : 600; // cudaErrorNotReady
}
int cudaStreamDestroy(void *s) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    ownStreams.erase(s);
  }
  delete static_cast<Stream *>(s);
  return 0;
}
int cudaMalloc(void **p, size_t n) {
  *p = std::malloc(n);
  return 0;
}
int cudaFree(void *p) {
  std::free(p);
  return 0;
}
int cudaMemcpy(void *d, const void *s, size_t n, int) {
  std::memcpy(d, s, n);
  return 0;
}
const char *cudaGetErrorName(int) { return "cudaErrorFake"; }
const char *cudaGetErrorString(int) { return "fake CUDA error"; }

} // extern "C"
