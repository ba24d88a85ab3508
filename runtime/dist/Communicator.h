//===- Communicator.h - collectives across the ranks of a job ------*- C++ -*-===//
//
// One interface for the collectives a distributed package runs (DESIGN.md,
// "Distribution"): Gloo over TCP on CPUs (createGlooCommunicator, in the
// library KilnRuntimeDist, which links gloo) and NCCL on GPUs. The
// Executable's Collective thunks call it; every rank must issue the same
// collectives in the same order.
//
// Ranks find each other as torchrun's do: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment (`kiln
// launch` sets them), or TensorFlow's TF_CONFIG. Rank 0 serves a small TCP
// key-value store at MASTER_ADDR:MASTER_PORT through which the ranks meet.
//
// Nothing blocks without a bound: rendezvous and every collective give up
// after CommOptions::timeoutSeconds and return an error Status naming the
// rank(s) that did not arrive or whose connection dropped.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_COMMUNICATOR_H
#define KILN_RUNTIME_DIST_COMMUNICATOR_H

#include "runtime/Status.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <memory>
#include <string>

namespace kiln::runtime::dist {

// Where this process stands in the job.
struct DistEnv {
  int rank = 0, worldSize = 1, localRank = 0, localWorldSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// as torchrun sets them (all absent: a single process, rank 0 of 1);
// otherwise TF_CONFIG ({"cluster": {"worker": ["host:port", ...]}, "task":
// {"type": "worker", "index": i}}: rank i of the workers, the master is
// worker 0). Bad or inconsistent values: an error Status naming the
// variable.
StatusOr<DistEnv> distEnvFromEnvironment();

// As distEnvFromEnvironment, on a TF_CONFIG value alone (for tests).
StatusOr<DistEnv> distEnvFromTfConfig(const std::string &tfConfig);

class DeviceCollectives;

class Communicator {
public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  // |count| elements of |dtype|; |in| and |out| may be the same buffer.
  // PkgReduceKind::Mean sums and divides by the world size.
  virtual Status allReduce(const void *in, void *out, int64_t count,
                           PkgDType dtype, PkgReduceKind op) = 0;
  // |in| holds worldSize * countPerRank elements; |out| receives this
  // rank's countPerRank (block |rank| of the reduction).
  virtual Status reduceScatter(const void *in, void *out,
                               int64_t countPerRank, PkgDType dtype,
                               PkgReduceKind op) = 0;
  // |in| holds countPerRank elements; |out| receives worldSize *
  // countPerRank, in rank order.
  virtual Status allGather(const void *in, void *out, int64_t countPerRank,
                           PkgDType dtype) = 0;
  // |count| elements of |root|'s |in| into every rank's |out|.
  virtual Status broadcast(const void *in, void *out, int64_t count,
                           PkgDType dtype, int root) = 0;
  virtual Status barrier() = 0;
  // The collectives on device memory, enqueued on a CUDA stream (NCCL's
  // communicator); null for a communicator of host memory (Gloo, local).
  virtual DeviceCollectives *deviceCollectives() { return nullptr; }
  // This rank stops with an error: once it is destroyed, the others' next
  // collective fails at once, naming it, and its destruction does not wait
  // for them (NCCL: the communicator is aborted, not finalized, which
  // would wait for the peers). Later calls fail.
  virtual void abort() {}
};

// Collectives whose buffers are device pointers and which are enqueued on
// a CUDA stream (a cudaStream_t) and return once enqueued, without waiting:
// the stream orders them with the kernels around them, and a CUDA Graph
// being captured on that stream records them (NCCL's calls can be
// captured). Ranks enqueue the same collectives in the same order.
// waitStream bounds the wait for a stream's work by the communicator's
// timeout and names a rank that died or never reached its collectives.
class DeviceCollectives {
public:
  virtual ~DeviceCollectives() = default;
  virtual Status enqueueAllReduce(const void *in, void *out, int64_t count,
                                  PkgDType dtype, PkgReduceKind op,
                                  void *stream) = 0;
  virtual Status enqueueReduceScatter(const void *in, void *out,
                                      int64_t countPerRank, PkgDType dtype,
                                      PkgReduceKind op, void *stream) = 0;
  virtual Status enqueueAllGather(const void *in, void *out,
                                  int64_t countPerRank, PkgDType dtype,
                                  void *stream) = 0;
  virtual Status enqueueBroadcast(const void *in, void *out, int64_t count,
                                  PkgDType dtype, int root, void *stream) = 0;
  // Until |stream| has done everything enqueued on it, polling it together
  // with the communicator's asynchronous error and the ranks' liveness.
  virtual Status waitStream(void *stream) = 0;
};

struct CommOptions {
  // Bound on the rendezvous and on each collective.
  double timeoutSeconds = 300;
};

// Rendezvous through a TCP store at env.masterAddr:env.masterPort (rank 0
// serves it). Errors (a timeout, a dead rank) name the rank that is
// missing. Defined in KilnRuntimeDist. One communicator per process and job:
// rank 0's store lives as long as its communicator. Gloo's writes to a
// socket whose peer is gone fail with EPIPE, whatever the program's
// SIGPIPE action (Sigpipe.h: blocked in the threads that write). A failed
// collective leaves the communicator failed: every later call returns that
// error.
StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const DistEnv &env, const CommOptions &options);

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_COMMUNICATOR_H
