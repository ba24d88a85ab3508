//===- Mirrored.cpp - kiln train --strategy=mirrored
//-----------------------===//
//
// The replicas are threads that each run kiln train's whole loop (or a
// packed trainer's) as rank r of N (Train.cpp and the trainer read
// currentReplica() where they would read the launcher's environment), so
// mirrored shares everything data-parallel does: the compiled step
// (kiln-distribute's bucketed all-reduce), the sampler, eval and checkpoints on
// rank 0, resume. A replica that stops (an error) destroys its communicator, so
// the others fail at their next collective naming it instead of waiting for the
// timeout.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Mirrored.h"

#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/TrainFlags.h"

#include "runtime/dist/Communicator.h"
#include "runtime/dist/LocalCommunicator.h"
#include "runtime/dist/NcclCommunicator.h"
#include "runtime/package/Package.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kiln::cli {
namespace {

thread_local const MirroredReplica *tlsReplica = nullptr;

} // namespace

const MirroredReplica *currentReplica() { return tlsReplica; }

int mirroredPackageDevices(const std::string &path) {
  runtime::StatusOr<runtime::LoadedPackage> pkg = runtime::loadPackage(path);
  if (!pkg.isOk() || pkg->metadata.strategy != runtime::Strategy::Mirrored)
    return 0;
  return static_cast<int>(pkg->metadata.worldSize);
}

int runMirrored(llvm::ArrayRef<std::string> args, const MirroredFlags &flags,
                const ReplicaBody &body, llvm::raw_ostream &outs,
                llvm::raw_ostream &errs) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // One replica per GPU, or one device instance per core (each gets one
  // thread), by default.
  int64_t devices = cores, gpus = 0;
  std::string gpuNames;
  if (flags.cuda) {
    std::string reason;
    gpus = cudaDeviceCount(reason, gpuNames);
    if (gpus == 0) {
      printError(errs, trainCommand(),
                 "--strategy=mirrored on CUDA: " + reason);
      return kExitError;
    }
    devices = gpus;
  }
  if (!flags.devices.empty()) {
    std::optional<int64_t> n =
        parseInteger(trainCommand(), "devices", flags.devices, 1, errs);
    if (!n)
      return kExitError;
    if (*n > 1024) {
      printError(errs, trainCommand(),
                 "--devices=" + flags.devices + ": expected at most 1024");
      return kExitError;
    }
    devices = *n;
    if (flags.cuda && devices > gpus) {
      printError(errs, trainCommand(),
                 "--devices=" + flags.devices +
                     ": --strategy=mirrored runs "
                     "one replica per GPU, and this machine has " +
                     std::to_string(gpus) + " (" + gpuNames + ")");
      return kExitError;
    }
  }
  if (!flags.worldSize.empty() && flags.worldSize != std::to_string(devices)) {
    printError(
        errs, trainCommand(),
        "--world-size=" + flags.worldSize +
            ": --strategy=mirrored runs --devices=" + std::to_string(devices) +
            " replicas in this process; drop --world-size or make "
            "it equal");
    return kExitError;
  }
  if (flags.backend == "reference" && devices > 1) {
    printError(errs, trainCommand(),
               "--backend=reference: --strategy=mirrored runs on the cpu "
               "and cuda backends (the reference interpreter has no "
               "collectives across replicas); use --backend=cpu or "
               "--devices=1");
    return kExitError;
  }
  int threadsEach = 0;
  if (!flags.threads.empty()) {
    std::optional<int64_t> t =
        parseInteger(trainCommand(), "threads", flags.threads, 1, errs);
    if (!t)
      return kExitError;
    // --threads is the process's: shared out among the replicas.
    threadsEach = static_cast<int>(std::max<int64_t>(1, *t / devices));
  }
  double timeout = 300;
  if (!flags.collectiveTimeout.empty()) {
    std::optional<double> t = parsePositiveReal(
        trainCommand(), "collective-timeout", flags.collectiveTimeout, errs);
    if (!t)
      return kExitError;
    timeout = *t;
  }

  if (devices == 1) {
    // One replica: kiln train as it is, on this thread.
    MirroredReplica one;
    one.threads = threadsEach;
    one.cuda = flags.cuda;
    tlsReplica = &one;
    int code = body(args, outs, errs);
    tlsReplica = nullptr;
    return code;
  }
  runtime::dist::CommOptions options;
  options.timeoutSeconds = timeout;
  runtime::StatusOr<std::vector<std::unique_ptr<runtime::dist::Communicator>>>
      comms = std::vector<std::unique_ptr<runtime::dist::Communicator>>();
  if (flags.cuda) {
    // NCCL on the GPUs, as MirroredStrategy's default all-reduce; without
    // NCCL the collectives go through host memory (the runtime copies).
    runtime::StatusOr<runtime::dist::NcclLibraryInfo> nccl =
        runtime::dist::loadNcclLibraries();
    if (nccl.isOk()) {
      outs << trainCommand() << ": mirrored over " << devices
           << " GPUs, the collectives through NCCL "
           << nccl->ncclVersion / 10000 << "." << nccl->ncclVersion / 100 % 100
           << "." << nccl->ncclVersion % 100 << "\n";
      comms = runtime::dist::createLocalNcclCommunicators(
          static_cast<int>(devices), options);
    } else {
      outs << trainCommand() << ": mirrored over " << devices
           << " GPUs, the collectives through host memory (NCCL: "
           << nccl.status().message() << ")\n";
    }
  }
  if (comms.isOk() && comms->empty())
    comms = runtime::dist::createLocalCommunicators(static_cast<int>(devices),
                                                    options);
  if (!comms.isOk()) {
    printError(errs, trainCommand(),
               "mirrored replicas: " + comms.status().message());
    return kExitError;
  }
  std::vector<std::unique_ptr<runtime::dist::Communicator>> &communicators =
      comms.value();
  // Replicas that have compiled their step or stopped.
  std::mutex mutex;
  std::condition_variable changed;
  int ready = 0;
  std::vector<bool> counted(devices, false);
  auto markReady = [&](int r) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!counted[r]) {
      counted[r] = true;
      ++ready;
      changed.notify_all();
    }
    return lock;
  };
  std::vector<MirroredReplica> replicas(devices);
  std::vector<std::string> errors(devices);
  std::vector<int> codes(devices, kExitOk);
  std::vector<std::thread> threads;
  for (int r = 0; r < devices; ++r) {
    replicas[r].rank = r;
    replicas[r].devices = static_cast<int>(devices);
    replicas[r].communicator = communicators[r].get();
    replicas[r].threads = threadsEach;
    replicas[r].cuda = flags.cuda;
    replicas[r].compiled = [&, r] {
      std::unique_lock<std::mutex> lock = markReady(r);
      changed.wait(lock, [&] { return ready == devices; });
    };
    threads.emplace_back([&, r] {
      tlsReplica = &replicas[r];
      llvm::raw_string_ostream err(errors[r]);
      llvm::raw_null_ostream quiet;
      // Rank 0 prints (runTrain sends other ranks' lines nowhere anyway).
      codes[r] = body(args, r == 0 ? outs : quiet, err);
      err.flush();
      // The others waiting on this replica fail now, naming it.
      if (codes[r] != kExitOk)
        communicators[r]->abort();
      communicators[r].reset();
      (void)markReady(r);
      tlsReplica = nullptr;
    });
  }
  for (std::thread &t : threads)
    t.join();
  outs.flush();
  // Each distinct error once, in rank order.
  std::set<std::string> printed;
  for (const std::string &e : errors)
    if (!e.empty() && printed.insert(e).second)
      errs << e;
  for (int code : codes)
    if (code != kExitOk)
      return code;
  return kExitOk;
}

} // namespace kiln::cli
