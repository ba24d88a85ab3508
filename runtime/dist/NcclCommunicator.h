//===- NcclCommunicator.h - collectives over NCCL on GPUs ----------*- C++ -*-===//
//
// The Communicator on CUDA devices: NCCL (libnccl.so.2) and the CUDA runtime
// (libcudart) are loaded with dlopen on first use, never linked, so every
// binary starts without them and a missing library is an error Status that
// names the files tried. KILN_NCCL and KILN_CUDART name the library to
// load instead of searching for it.
//
// Rendezvous as the Gloo communicator's: rank 0 serves the TCP store
// (TcpStore.h) at MASTER_ADDR:MASTER_PORT, every rank says hello and waits
// for the others (naming any that never arrive); rank 0 creates the
// ncclUniqueId and the others read it from the store. ncclCommInitRankConfig
// runs non-blocking and is polled with ncclCommGetAsyncError until it
// completes or the timeout passes; then the communicator is aborted and the
// error names the ranks the store saw go or never get there.
//
// Buffers are device pointers on the communicator's device. Each collective
// is enqueued on its stream (its own by default; setStream to share the
// executable's) and, like every Communicator call, returns once it has
// completed: the stream is polled (cudaStreamQuery) together with NCCL's
// asynchronous error until done or the timeout, which aborts the
// communicator and names the ranks that did not reach the collective (each
// rank posts its sequence number to the store before enqueueing). A barrier
// goes through the store.
//
// As DeviceCollectives (Communicator::deviceCollectives()), a collective is
// enqueued on the caller's stream and returns once NCCL has taken it, so it
// can be captured into a CUDA Graph (CudaExecutable does); waitStream then
// bounds the wait for that stream by the same timeout, naming a rank whose
// process died. Every NCCL and CUDA return code is checked; errors
// give the call, the code's name and NCCL's last error text.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_NCCLCOMMUNICATOR_H
#define KILN_RUNTIME_DIST_NCCLCOMMUNICATOR_H

#include "runtime/dist/Communicator.h"

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::runtime::dist {

// What loading NCCL and cudart found.
struct NcclLibraryInfo {
  std::string ncclPath, cudartPath;
  int ncclVersion = 0; // ncclGetVersion: 22809 for 2.28.9
};

// Loads libnccl.so.2 and libcudart and resolves every entry point the
// communicator uses (once per process; later calls return the same
// answer). The error names the libraries tried or the missing symbol.
StatusOr<NcclLibraryInfo> loadNcclLibraries();

struct NcclOptions {
  // The CUDA device of this rank; -1: the launcher's LOCAL_RANK.
  int device = -1;
};

// Rendezvous, unique id through the store and ncclCommInitRank, each
// bounded by options.timeoutSeconds. Without NCCL, cudart or a CUDA device:
// an error saying which, before any rendezvous.
StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(const DistEnv &env, const CommOptions &options,
                       const NcclOptions &nccl = {});

// |worldSize| communicators of one process, rank r on CUDA device r (as
// createLocalCommunicators for the CPU: tf.distribute's MirroredStrategy
// over a machine's GPUs). The store listens on an ephemeral loopback port;
// each rank connects on a thread of its own, so the result's ranks are
// then used by one thread each. Errors: more ranks than CUDA devices, no
// NCCL or cudart, or the failure of the first rank that failed, which ends
// the others' rendezvous at once (a rank that cannot reach its device does
// not leave the others waiting for the timeout).
StatusOr<std::vector<std::unique_ptr<Communicator>>>
createLocalNcclCommunicators(int worldSize, const CommOptions &options);

// The stream a NCCL communicator enqueues on (a cudaStream_t; null: its
// own). Errors for a communicator that is not NCCL's.
Status setNcclStream(Communicator &comm, void *cudaStream);

// Device memory through the same cudart, for tests and tools: allocation on
// |device|, copies in either direction (cudaMemcpyDefault), freeing.
StatusOr<void *> ncclDeviceAlloc(int device, size_t bytes);
Status ncclDeviceCopy(void *dst, const void *src, size_t bytes);
Status ncclDeviceFree(void *ptr);

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_NCCLCOMMUNICATOR_H
