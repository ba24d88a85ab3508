//===- Executable.h - a loaded package, ready to run steps on the CPU -*- C++ -*-===//
//
// An Executable owns one LoadedPackage, its arena (allocated once, at the
// package's alignment; or another Executable's, shared as
// runtime/package/SharedArena.h places it: ExecutableOptions::
// shareMemoryWith), the kernels' entry points and a thread pool, and
// runs the package's thunk sequence once per step:
//
//   KernelLaunch  the kernel's `kiln_kernel(buffers, part, parts)`, where
//                 buffers are the thunk's operands then results; large
//                 kernels are split into parts run on the pool.
//   LibraryCall   runtime/cpu/Blas.h's GEMM or convolution, in the dtype of
//                 the result buffer; large GEMMs are split into blocks of
//                 rows or columns, large convolutions by images, run on
//                 the pool (GemmThreading).
//   Copy          a memcpy.
//   Collective    through ExecutableOptions::communicator (operand 0 into
//                 result 0; runtime/dist/Communicator.h); without one, an
//                 error from create(). Collectives run asynchronously, in
//                 thunk order, on one communication thread, while the
//                 thunks after them go on: a thunk waits only when it reads
//                 bytes a pending collective writes or writes bytes one
//                 reads or writes (found once, by create(), from the
//                 buffers' arena ranges), and the step waits for all of
//                 them before it ends.
//
// After the thunks, every output whose buffer `updates` input k is copied
// into input k's buffer (unless they are the same memory), so the next step
// reads the new parameters and optimizer state.
//
// Kernels reach the Executable through a KernelLoader: the core knows
// nothing of LLVM; runtime/cpu/jit/OrcKernelLoader.h compiles the package's
// bitcode, and a test may hand in plain C++ functions. Kernels whose code
// (object bytes and entry point) is the same are loaded once and share the
// entry point: the compiler gives every repeat of a fusion its first
// kernel's bitcode, so GPT-2's 224 CPU kernels load as 40.
//
// Everything about the package that could make a step crash (a kernel index,
// a buffer count, a buffer too small for a GEMM's sizes) is checked by
// create(), which returns an error Status naming the thunk.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_EXECUTABLE_H
#define KILN_RUNTIME_CPU_EXECUTABLE_H

#include "runtime/HostMemory.h"
#include "runtime/Status.h"
#include "runtime/ThreadPool.h"
#include "runtime/metrics/Nvtx.h"
#include "runtime/metrics/ThunkProfile.h"
#include "runtime/package/Package.h"
#include "runtime/package/SharedArena.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime::dist {
class Communicator;
} // namespace kiln::runtime::dist

namespace kiln::runtime::cpu {

class Executable;

// A kernel's entry point: |buffers| are the thunk's operands then results;
// the kernel computes partition |part| of |parts| of the outermost loop of
// each of its loop nests.
using KernelFn = void (*)(void **buffers, int64_t part, int64_t parts);

// Turns a package kernel into a callable entry point. |index| is the
// kernel's index in the package (for naming and for per-kernel symbols).
class KernelLoader {
public:
  virtual ~KernelLoader();
  virtual StatusOr<KernelFn> load(const PackageKernel &kernel,
                                  size_t index) = 0;
  // Told, before the loads, of the distinct kernels an Executable will
  // load: a loader may compile them ahead, several at once, so that each
  // load() finds its code ready. Whatever goes wrong there is left for
  // load() to find and report. The default does nothing.
  virtual void prefetch(const std::vector<const PackageKernel *> &kernels) {}
};

// How GEMM library calls use the threads.
enum class GemmThreading {
  // Single-threaded OpenBLAS calls on blocks of rows (or columns) of the
  // result, and convolutions split by images, run as parts on the
  // Executable's pool: one set of threads for the whole step, none spinning
  // against another pool. (Measured on the zoo MLP at 2 threads: the five
  // large GEMMs take ~20% less time than on OpenBLAS's threads.)
  Pool,
  // One OpenBLAS call per GEMM on OpenBLAS's own threads (as many as the
  // Executable's).
  Blas,
};

struct ExecutableOptions {
  // Threads for kernels and BLAS, the caller included; 0 means
  // std::thread::hardware_concurrency().
  int threads = 0;
  // OpenBLAS's thread count is global: create() sets it to 1 (Pool) or to
  // |threads| (Blas), for every Executable in the process.
  GemmThreading gemmThreading = GemmThreading::Pool;
  // Runs the Collective thunks (not owned; must outlive the Executable).
  // Null: a package with collectives is refused.
  dist::Communicator *communicator = nullptr;
  // Runs Collective thunks on a communication thread, overlapping the
  // thunks after them that touch none of their bytes (false: in the thunk
  // loop, one after the other; the results are the same).
  bool asyncCollectives = true;
  // What the arena is checked against before it is allocated (HostMemory.h):
  // unset, this machine's /proc/meminfo; tests give their own.
  std::optional<HostMemory> hostMemory;
  // Runs this step in another Executable's memory (runtime/package/
  // SharedArena.h), as kiln train runs its eval step in the training
  // step's: |shareMemoryWith| (not owned; the two must not run at once)
  // lends the free space of its arena between its steps (the arena stays
  // while either Executable does); each of |boundInputs| (this step's input,
  // its input) is read in place from its buffer, and initialize() leaves it
  // alone. A step with collectives cannot share.
  Executable *shareMemoryWith = nullptr;
  std::vector<InputBinding> boundInputs;
};

// Time spent in one thunk over all steps run while profiling was on, and
// its last call: when it started after the start of its run() and how long
// it took (a timeline of the last profiled step).
struct ThunkProfile {
  uint64_t totalNs = 0;
  uint64_t calls = 0;
  uint64_t lastStartNs = 0, lastNs = 0;
};

class Executable {
public:
  static StatusOr<std::unique_ptr<Executable>>
  create(LoadedPackage package, KernelLoader &loader,
         ExecutableOptions options = {});
  ~Executable();
  Executable(const Executable &) = delete;
  Executable &operator=(const Executable &) = delete;

  const LoadedPackage &package() const { return package_; }
  int threads() const { return pool_.size(); }

  // The arena memory of package buffer |id| (null when out of range).
  void *buffer(uint32_t id);
  const void *buffer(uint32_t id) const;

  size_t numInputs() const { return package_.inputs.size(); }
  size_t numOutputs() const { return package_.outputs.size(); }
  // The buffers of signature input |i| and output |i| (null when out of
  // range). A bound input's (ExecutableOptions::boundInputs) is the other
  // step's buffer. Where two Executables share memory, an output the
  // other's last run may have written over (one other than an update) is
  // null until this one runs again (outputOverwritten).
  void *input(size_t i);
  const void *output(size_t i);
  bool outputOverwritten(size_t i) const;
  // Where the buffers went in the memory of
  // ExecutableOptions::shareMemoryWith (null without it).
  const SharedArenaPlan *sharedArena() const {
    return sharedPlan_ ? &*sharedPlan_ : nullptr;
  }
  // The index of the signature entry named |name|, or -1.
  int findInput(const std::string &name) const;
  int findOutput(const std::string &name) const;

  // Gives every input its first value: each ParameterInit's distribution
  // (runtime/Initializers.h, converted to the buffer's dtype, f16 and bf16
  // rounded to nearest even) or its exact data bytes; a parameter copy gets
  // its parameter's values (pkgFillParameterCopy); every other input is
  // zeroed. Whoever later writes a parameter refills its copies.
  Status initialize();

  // Runs one step: every thunk in order, then the updates copies.
  Status run();

  // Per-thunk timing (steady clock around each thunk; the updates copies
  // are not counted; an asynchronous collective's time is its call on the
  // communication thread). Turning it on clears what was gathered.
  void setProfiling(bool enabled);
  bool profiling() const { return profiling_; }
  // One entry per thunk, in thunk order.
  const std::vector<ThunkProfile> &profile() const { return profile_; }
  // The same, each thunk named (ThunkProfile.h: what --profile writes).
  std::vector<ThunkTime> thunkTimes() const;
  // When the last profiled step began (its thunks' lastStartNs count from
  // here).
  std::chrono::steady_clock::time_point profileStepStart() const {
    return stepStart_;
  }

private:
  Executable(LoadedPackage package, const ExecutableOptions &options);
  Status prepare(KernelLoader &loader);
  Status runThunk(size_t index);
  Status runConv(size_t index, PkgDType dtype);
  Status runCollective(size_t index);
  Status timedThunk(size_t index);
  // Asynchronous collectives (run()): the communication thread's loop,
  // queueing collective thunk |index|, and waiting until the step's first
  // |count| collectives are complete (the first error, if one failed).
  void communicationLoop();
  void issueCollective(size_t index);
  Status waitCollectives(size_t count);

  // Places the buffers in options.shareMemoryWith's memory (prepare()).
  Status shareMemory(const ExecutableOptions &options);

  LoadedPackage package_;
  std::optional<HostMemory> hostMemory_;
  ThreadPool pool_;
  // Shared with the Executables that run in this one's memory
  // (ExecutableOptions::shareMemoryWith): the last of them frees it.
  std::shared_ptr<uint8_t> arena_;
  // Each buffer's memory: the arena's at its offset, or where
  // SharedArena.h placed it.
  std::vector<uint8_t *> bufferAddress_;
  // Running in another Executable's memory: the placement and this step's
  // own memory; whether buffer |id| is a bound input's (or within one).
  std::optional<SharedArenaPlan> sharedPlan_;
  std::unique_ptr<uint8_t, void (*)(void *)> ownMemory_{nullptr, std::free};
  bool bound(uint32_t id) const;
  // What a run of the Executable sharing this one's memory may write over,
  // and which of the two ran last.
  SharedArenaRuns runs_;
  // Per thunk: its operand then result pointers, and for kernel launches
  // the entry point and part count.
  std::vector<std::vector<void *>> thunkBuffers_;
  std::vector<KernelFn> thunkKernels_;
  std::vector<int64_t> thunkParts_; // kernel parts, or GEMM blocks
  GemmThreading gemmThreading_;
  dist::Communicator *communicator_;
  // The communicator of one a step compiled for one rank runs its
  // collectives through when it was given none (create()).
  std::unique_ptr<dist::Communicator> singleRank_;
  // Per thunk: partial filter gradients of a split Conv2DFilterGrad.
  std::vector<std::vector<uint8_t>> convScratch_;
  // (from, to, bytes) for the updates copies after a step.
  struct UpdateCopy {
    const void *from;
    void *to;
    size_t bytes;
  };
  std::vector<UpdateCopy> updates_;
  bool profiling_ = false;
  std::vector<ThunkProfile> profile_;
  // Each thunk's NVTX range (Nvtx.h: Nsight Systems shows it on the
  // thread that runs the thunk).
  std::vector<nvtx::Message> nvtxNames_;
  std::chrono::steady_clock::time_point stepStart_; // while profiling
  // Asynchronous collectives: per thunk, how many of the step's
  // collectives (counted in thunk order) must be complete before it runs;
  // empty when collectives run in the thunk loop.
  bool asyncCollectives_;
  std::vector<size_t> waitFor_;
  struct CommThread;
  std::unique_ptr<CommThread> comm_;
};

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_EXECUTABLE_H
