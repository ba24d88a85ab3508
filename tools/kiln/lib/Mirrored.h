//===- Mirrored.h - kiln train --strategy=mirrored ------------*- C++ -*-===//
//
// tf.distribute.MirroredStrategy: one process, --devices=N replicas, each a
// rank driven by its own thread with its own step and its share of every
// global batch (DistributedSampler with rank r of N, as under
// data-parallel). On the CPU the replicas are device instances with their
// share of the threads, the gradients all-reduced through a
// LocalCommunicator (shared memory, the same bits as Gloo). On GPUs
// replica r runs on CUDA device r, its collectives on the device through
// NCCL communicators of this process (createLocalNcclCommunicators), or,
// without NCCL, through host memory. runTrain calls runMirrored when it
// sees the strategy outside a replica; runMirrored runs runTrain once per
// replica, on a thread that currentReplica() describes. Rank 0 prints,
// evaluates and checkpoints; the replicas' errors are printed after they
// stop, each distinct message once.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_MIRRORED_H
#define KILN_TOOLS_KILN_LIB_MIRRORED_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace kiln::runtime::dist {
class Communicator;
} // namespace kiln::runtime::dist

namespace kiln::cli {

// The replica the calling thread runs, or null outside a mirrored run.
struct MirroredReplica {
  int rank = 0;
  int devices = 1;
  // Null when devices == 1 (no collectives).
  runtime::dist::Communicator *communicator = nullptr;
  // The --threads each replica gets (0: the machine's cores shared out).
  int threads = 0;
  // The replica runs on CUDA device |rank|.
  bool cuda = false;
  // Called once the replica has compiled and loaded its step (or failed
  // to): returns when every replica has, so that the first collective's
  // --collective-timeout never runs while the others still compile (they
  // compile one after another). A replica that stops counts as done.
  std::function<void()> compiled;
};
const MirroredReplica *currentReplica();

// The flags of a mirrored run, as given (empty: not given).
struct MirroredFlags {
  std::string devices, worldSize, threads, collectiveTimeout, backend;
  // The replicas are the GPUs (runTrain decided: --device=cuda,
  // --backend=cuda or a GPU present without either).
  bool cuda = false;
};

// The device count of a package compiled with --strategy=mirrored (its
// world size), or 0 for any other package or a file that does not load.
int mirroredPackageDevices(const std::string &path);

// What each replica runs on its thread: kiln train's runTrain, or a packed
// trainer's loop, on the same arguments.
using ReplicaBody =
    std::function<int(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
                      llvm::raw_ostream &errs)>;

// Runs |body|(|args|) on every replica and returns the first non-zero exit
// status in rank order (0 when all succeeded). Bad flags: an error and
// kExitError without running anything. Messages start with
// trainCommand().
int runMirrored(llvm::ArrayRef<std::string> args, const MirroredFlags &flags,
                const ReplicaBody &body, llvm::raw_ostream &outs,
                llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_MIRRORED_H
