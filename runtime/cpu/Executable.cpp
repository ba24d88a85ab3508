//===- Executable.cpp - a loaded package, ready to run steps on the CPU ---===//
//
// create() checks the package (runtime/package's checks, then what running
// needs beyond them: operand counts, dtypes and byte sizes of library calls,
// one buffer count per kernel), allocates and zeroes the arena, loads every
// launched kernel once and resolves each thunk's buffers to pointers, so
// run() only walks precomputed arrays.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"

#include "runtime/Units.h"
#include "runtime/cpu/Blas.h"
#include "runtime/dist/Communicator.h"
#include "runtime/dist/LocalCommunicator.h"
#include "runtime/package/PackageData.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

namespace kiln::runtime::cpu {

KernelLoader::~KernelLoader() = default;

namespace {

// A kernel launch is split when its results hold at least this many
// elements per part: below it, waking another thread costs more than the
// work saves.
constexpr int64_t kElementsPerPart = 32 * 1024;

// A GEMM is split over the pool when each block gets at least this many
// flops (2 m n k / blocks); smaller GEMMs run in one call.
constexpr double kFlopsPerGemmBlock = 4e6;

Status fail(const std::ostringstream &os) { return Status::error(os.str()); }

// Elements of |shape|, or -1 when the product overflows.
int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

// Checks that buffer |id| of |p| holds at least |elements| elements of
// |dtype|; |what| names it in the message.
Status checkHolds(const LoadedPackage &p, const std::string &where,
                  const char *what, uint32_t id, PkgDType dtype,
                  int64_t elements) {
  const PackageBuffer &b = p.buffers[id];
  std::ostringstream os;
  if (b.dtype != dtype) {
    os << where << ": " << what << " (buffer " << id << ") is "
       << pkgDTypeName(b.dtype) << ", expected " << pkgDTypeName(dtype);
    return fail(os);
  }
  uint64_t bytes;
  if (elements < 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(elements),
                             static_cast<uint64_t>(pkgBytesPerElement(dtype)),
                             &bytes)) {
    os << where << ": " << what << "'s element count overflows";
    return fail(os);
  }
  if (bytes > b.size) {
    os << where << ": " << what << " (buffer " << id << ") needs " << bytes
       << " bytes, but has " << b.size;
    return fail(os);
  }
  return Status::ok();
}

Status checkCounts(const std::string &where, const char *what,
                   const PackageThunk &t, size_t operands, size_t results) {
  if (t.operands.size() == operands && t.results.size() == results)
    return Status::ok();
  std::ostringstream os;
  os << where << ": " << what << " takes " << operands << " operands and "
     << results << " result, found " << t.operands.size() << " and "
     << t.results.size();
  return fail(os);
}

Status checkLibraryCall(const LoadedPackage &p, const std::string &where,
                        const PackageThunk &t) {
  if (t.library == LibraryKind::Gemm) {
    if (Status s = checkCounts(where, "a gemm", t, 2, 1); !s.isOk())
      return s;
    const GemmParams &g = t.gemm;
    PkgDType dtype = p.buffers[t.results[0]].dtype;
    if (dtype != PkgDType::F32 && dtype != PkgDType::F64 && !isHalfDtype(dtype)) {
      std::ostringstream os;
      os << where << ": a gemm's result must be f32, f64, f16 or bf16, but buffer "
         << t.results[0] << " is " << pkgDTypeName(dtype);
      return fail(os);
    }
    int64_t lhs = elementCount({g.batch, g.m, g.k});
    int64_t rhs = elementCount({g.batch, g.k, g.n});
    int64_t out = elementCount({g.batch, g.m, g.n});
    if (Status s = checkHolds(p, where, "the gemm's lhs", t.operands[0], dtype,
                              lhs);
        !s.isOk())
      return s;
    if (Status s = checkHolds(p, where, "the gemm's rhs", t.operands[1], dtype,
                              rhs);
        !s.isOk())
      return s;
    return checkHolds(p, where, "the gemm's result", t.results[0], dtype, out);
  }
  if (Status s = checkCounts(where, "a convolution", t, 2, 1); !s.isOk())
    return s;
  if (Status s = pkgCheckConvParams(t.conv); !s.isOk())
    return Status::error(where + ": " + s.message());
  PkgDType dtype = p.buffers[t.results[0]].dtype;
  const ConvParams &c = t.conv;
  const std::vector<int64_t> *shapes[3];
  const char *names[3];
  switch (t.library) {
  case LibraryKind::Conv2D:
    shapes[0] = &c.inputShape, names[0] = "the convolution's input";
    shapes[1] = &c.filterShape, names[1] = "the convolution's filter";
    shapes[2] = &c.outputShape, names[2] = "the convolution's output";
    break;
  case LibraryKind::Conv2DInputGrad:
    shapes[0] = &c.outputShape, names[0] = "the output gradient";
    shapes[1] = &c.filterShape, names[1] = "the filter";
    shapes[2] = &c.inputShape, names[2] = "the input gradient";
    break;
  default:
    shapes[0] = &c.inputShape, names[0] = "the input";
    shapes[1] = &c.outputShape, names[1] = "the output gradient";
    shapes[2] = &c.filterShape, names[2] = "the filter gradient";
    break;
  }
  uint32_t ids[3] = {t.operands[0], t.operands[1], t.results[0]};
  for (int i = 0; i < 3; ++i)
    if (Status s = checkHolds(p, where, names[i], ids[i], dtype,
                              elementCount(*shapes[i]));
        !s.isOk())
      return s;
  return Status::ok();
}

// How many blocks to split a GEMM into on |threads| threads: 1 for small or
// batched GEMMs (and k = 0, whose zero-fill Blas.h does).
int64_t gemmBlocks(const GemmParams &g, int threads) {
  if (threads <= 1 || g.batch != 1 || g.k == 0)
    return 1;
  double flops = 2.0 * double(g.m) * double(g.n) * double(g.k);
  int64_t byWork = static_cast<int64_t>(flops / kFlopsPerGemmBlock);
  int64_t bySize = std::max(g.m, g.n) / 16; // keep blocks >= 16 wide
  return std::clamp<int64_t>(std::min(byWork, bySize), 1, threads);
}

// How many parts to split a convolution into by images: 1 for small ones.
int64_t convParts(const ConvParams &c, int threads) {
  int64_t images = c.inputShape[0];
  if (threads <= 1 || images <= 1)
    return 1;
  double flops = 2.0 * double(elementCount(c.outputShape)) *
                 double(elementCount(c.filterShape)) / double(c.filterShape[0]);
  int64_t byWork = static_cast<int64_t>(flops / kFlopsPerGemmBlock);
  return std::clamp<int64_t>(std::min(byWork, images), 1, threads);
}

void cblasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb,
               double beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, float(alpha), a, lda, b,
              ldb, float(beta), c, ldc);
}
void cblasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double *a, int64_t lda, const double *b, int64_t ldb,
               double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

// Block |block| of |blocks| of a GEMM with batch 1 and k > 0: rows of the
// result when m >= n, else columns, cut at multiples of 16.
template <typename T>
void gemmBlock(const GemmParams &g, const void *lhsRaw, const void *rhsRaw,
               void *outRaw, int64_t block, int64_t blocks) {
  const T *lhs = static_cast<const T *>(lhsRaw);
  const T *rhs = static_cast<const T *>(rhsRaw);
  T *out = static_cast<T *>(outRaw);
  bool ta = g.transposeLhs, tb = g.transposeRhs;
  int64_t lda = ta ? g.m : g.k, ldb = tb ? g.k : g.n;
  bool byRows = g.m >= g.n;
  int64_t extent = byRows ? g.m : g.n;
  int64_t units = (extent + 15) / 16;
  int64_t begin = std::min(extent, units * block / blocks * 16);
  int64_t end = std::min(extent, units * (block + 1) / blocks * 16);
  if (begin >= end)
    return;
  if (byRows)
    cblasGemm(ta, tb, end - begin, g.n, g.k, g.alpha,
              lhs + (ta ? begin : begin * g.k), lda, rhs, ldb, g.beta,
              out + begin * g.n, g.n);
  else
    cblasGemm(ta, tb, g.m, end - begin, g.k, g.alpha, lhs, lda,
              rhs + (tb ? begin * g.k : begin), ldb, g.beta, out + begin,
              g.n);
}

// What running collective thunk |t| needs beyond checkPackage: a
// communicator, one operand and one result of the same dtype, sizes that
// match the kind at the communicator's world size (scatter and gather along
// dimension 0 of a row-major buffer, so over whole blocks), and groups that
// are all ranks in order (the only group the communicator has).
Status checkCollective(const LoadedPackage &p, const std::string &where,
                       const PackageThunk &t, dist::Communicator *comm) {
  std::ostringstream os;
  const CollectiveParams &c = t.collective;
  if (!comm) {
    os << where << ": collectives need a distributed strategy's "
       << "communicator (kiln launch), which this executable has not "
       << "(thunk kind: " << pkgCollectiveKindName(c.kind) << ")";
    return fail(os);
  }
  if (c.kind == CollectiveKind::Send || c.kind == CollectiveKind::Recv) {
    os << where << ": " << pkgCollectiveKindName(c.kind)
       << " is not supported by the CPU executable";
    return fail(os);
  }
  if (t.operands.size() != 1 || t.results.size() != 1) {
    os << where << ": " << pkgCollectiveKindName(c.kind)
       << " takes 1 operand and 1 result, found " << t.operands.size()
       << " and " << t.results.size();
    return fail(os);
  }
  const PackageBuffer &in = p.buffers[t.operands[0]];
  const PackageBuffer &out = p.buffers[t.results[0]];
  if (in.dtype != out.dtype) {
    os << where << ": " << pkgCollectiveKindName(c.kind) << " from "
       << pkgDTypeName(in.dtype) << " to " << pkgDTypeName(out.dtype)
       << ": dtypes differ";
    return fail(os);
  }
  if (in.dtype == PkgDType::I1 && (c.kind == CollectiveKind::AllReduce ||
                                   c.kind == CollectiveKind::ReduceScatter)) {
    os << where << ": " << pkgCollectiveKindName(c.kind) << " of "
       << pkgDTypeName(in.dtype) << " is not supported";
    return fail(os);
  }
  int64_t world = comm->worldSize();
  if (p.metadata.worldSize > 1 && p.metadata.worldSize != world) {
    os << where << ": the package was compiled for world size "
       << p.metadata.worldSize << ", but the communicator has " << world
       << " ranks";
    return fail(os);
  }
  int64_t inCount = elementCount(in.shape), outCount = elementCount(out.shape);
  uint64_t bytes = pkgBytesPerElement(in.dtype);
  if (inCount < 0 || outCount < 0 ||
      static_cast<uint64_t>(inCount) * bytes > in.size ||
      static_cast<uint64_t>(outCount) * bytes > out.size) {
    os << where << ": " << pkgCollectiveKindName(c.kind)
       << ": buffer shapes do not fit their sizes";
    return fail(os);
  }
  int64_t expectedOut = inCount;
  if (c.kind == CollectiveKind::ReduceScatter ||
      c.kind == CollectiveKind::AllGather) {
    if (c.dimension != 0) {
      os << where << ": " << pkgCollectiveKindName(c.kind) << " along dimension "
         << c.dimension << "; the CPU executable splits dimension 0 only";
      return fail(os);
    }
    const std::vector<int64_t> &split =
        c.kind == CollectiveKind::ReduceScatter ? in.shape : out.shape;
    if (split.empty() || split[0] % world != 0) {
      os << where << ": " << pkgCollectiveKindName(c.kind) << ": dimension 0 of "
         << (c.kind == CollectiveKind::ReduceScatter ? "the operand"
                                                     : "the result")
         << " is " << (split.empty() ? std::string("absent (rank 0)")
                                     : std::to_string(split[0]))
         << ", expected a multiple of the world size " << world;
      return fail(os);
    }
    expectedOut = c.kind == CollectiveKind::ReduceScatter ? inCount / world
                                                          : inCount * world;
  }
  if (outCount != expectedOut) {
    os << where << ": " << pkgCollectiveKindName(c.kind) << " of " << inCount
       << " elements at world size " << world << " yields " << expectedOut
       << " elements, but the result holds " << outCount;
    return fail(os);
  }
  if (c.kind == CollectiveKind::Broadcast && (c.root < 0 || c.root >= world)) {
    os << where << ": collective_broadcast root " << c.root
       << " is not a rank of the world size " << world;
    return fail(os);
  }
  if (!c.groups.empty()) {
    bool all = static_cast<int64_t>(c.groups.size()) == world &&
               c.groupsShape.size() == 2 && c.groupsShape[0] == 1;
    for (size_t r = 0; all && r < c.groups.size(); ++r)
      all = c.groups[r] == static_cast<int64_t>(r);
    if (!all) {
      os << where << ": " << pkgCollectiveKindName(c.kind)
         << " over replica groups other than all " << world
         << " ranks in order is not supported";
      return fail(os);
    }
  }
  return Status::ok();
}

} // namespace

// The communication thread of asynchronous collectives: a queue of
// collective thunks, run one at a time in the order queued (every rank
// issues the same collectives in the same order, and a Gloo context runs
// one collective at a time), and the count completed in this step.
struct Executable::CommThread {
  std::mutex mutex;
  std::condition_variable wake; // work queued, or stop
  std::condition_variable done; // a collective completed
  std::deque<size_t> queue;
  size_t issued = 0, completed = 0;
  // The step's first failure; later collectives of the step are skipped
  // (counted as completed) once one failed.
  Status error;
  bool stop = false;
  std::thread thread;

  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread.joinable())
      thread.join();
  }
};

Executable::Executable(LoadedPackage package, const ExecutableOptions &options)
    : package_(std::move(package)), hostMemory_(options.hostMemory),
      pool_(options.threads), gemmThreading_(options.gemmThreading),
      communicator_(options.communicator),
      asyncCollectives_(options.asyncCollectives) {}

Executable::~Executable() = default;

StatusOr<std::unique_ptr<Executable>>
Executable::create(LoadedPackage package, KernelLoader &loader,
                   ExecutableOptions options) {
  if (Status s = checkPackage(package); !s.isOk())
    return s;
  if (package.target.kind != TargetKind::Cpu)
    return Status::error(
        "the package is for a CUDA target; the CPU executable runs only CPU "
        "packages");
  // KILN_ASYNC_COLLECTIVES=0 runs collectives in the thunk loop, for
  // measuring what the overlap gains (bench/RESULTS.md).
  if (const char *async = std::getenv("KILN_ASYNC_COLLECTIVES"))
    options.asyncCollectives &= std::string(async) != "0";
  // KILN_CPU_CONV=im2col runs f32 convolutions as im2col plus OpenBLAS
  // instead of runtime/cpu/DirectConv, for comparing the two.
  if (const char *conv = std::getenv("KILN_CPU_CONV");
      conv && std::strcmp(conv, "direct") != 0 && std::strcmp(conv, "im2col") != 0)
    return Status::error(std::string("KILN_CPU_CONV=") + conv +
                         ": expected direct or im2col");
  // A step compiled for one rank (a --strategy without --world-size) runs
  // its collectives as identities: through a communicator of one.
  std::unique_ptr<dist::Communicator> single;
  if (!options.communicator && package.metadata.worldSize == 1 &&
      std::any_of(package.thunks.begin(), package.thunks.end(),
                  [](const PackageThunk &t) {
                    return t.kind == ThunkKind::Collective;
                  })) {
    StatusOr<std::vector<std::unique_ptr<dist::Communicator>>> one =
        dist::createLocalCommunicators(1, {});
    if (!one.isOk())
      return one.status();
    single = std::move(one.value()[0]);
    options.communicator = single.get();
  }
  std::unique_ptr<Executable> exe(
      new Executable(std::move(package), options));
  exe->singleRank_ = std::move(single);
  if (options.shareMemoryWith)
    if (Status s = exe->shareMemory(options); !s.isOk())
      return s;
  if (Status s = exe->prepare(loader); !s.isOk())
    return s;
  return exe;
}

Status Executable::shareMemory(const ExecutableOptions &options) {
  Executable &host = *options.shareMemoryWith;
  if (host.sharedPlan_)
    return Status::error("running in another step's memory: that step runs "
                         "in another step's memory itself");
  for (size_t i = 0; i < package_.thunks.size(); ++i)
    if (package_.thunks[i].kind == ThunkKind::Collective)
      return Status::error("running in another step's memory: thunk " +
                           std::to_string(i) +
                           " is a collective: a step with collectives runs "
                           "in memory of its own");
  StatusOr<SharedArenaPlan> plan =
      planSharedArena(host.package_, package_, options.boundInputs);
  if (!plan.isOk())
    return Status::error("running in another step's memory: " +
                         plan.status().message());
  sharedPlan_ = std::move(plan.value());
  SharedArenaRuns::join(host.runs_, runs_, *sharedPlan_);
  bufferAddress_.resize(package_.buffers.size());
  for (size_t id = 0; id < package_.buffers.size(); ++id)
    bufferAddress_[id] = host.arena_.get() + sharedPlan_->buffers[id].offset;
  arena_ = host.arena_; // kept while this step lives
  return Status::ok();
}

Status Executable::prepare(KernelLoader &loader) {
  const LoadedPackage &p = package_;
  std::ostringstream os;

  // The arena (in another step's memory, this step's own memory):
  // aligned_alloc wants a multiple of the alignment.
  uint64_t alignment = std::max<uint64_t>(p.arenaAlignment, alignof(std::max_align_t));
  uint64_t needed = sharedPlan_ ? sharedPlan_->ownBytes : p.arenaSize;
  uint64_t bytes = std::max<uint64_t>(needed, 1);
  bytes = (bytes + alignment - 1) / alignment * alignment;
  // A step planned for more than the machine can give (its available
  // memory and free swap) is refused before the allocation, with what
  // would make it fit; so is a failed allocation. Past that, zeroing the
  // arena would end in the out-of-memory killer, with no message.
  std::optional<HostMemory> machine =
      hostMemory_ ? hostMemory_ : runtime::hostMemory();
  auto tooLarge = [&](const std::string &what) {
    os << "the step needs " << formatBytes(needed)
       << " of host memory for its arena (the parameters, optimizer state, "
          "batch and activations)";
    if (machine)
      os << " and this machine has " << formatBytes(machine->available)
         << " available of " << formatBytes(machine->total)
         << (machine->swapFree
                 ? ", and " + formatBytes(machine->swapFree) + " of swap free"
                 : std::string(""));
    os << what
       << "; compile the model again with --memory-budget=SIZE under what is "
          "available (kiln recomputes activations to fit), a smaller batch or "
          "--grad-accum, or a ZeRO strategy across processes";
    return fail(os);
  };
  if (machine && needed > machine->available + machine->swapFree)
    return tooLarge("");
  void *memory = std::aligned_alloc(alignment, bytes);
  if (!memory)
    return tooLarge(" (allocating it failed)");
  std::memset(memory, 0, bytes);
  if (sharedPlan_) {
    ownMemory_.reset(static_cast<uint8_t *>(memory));
    for (size_t id = 0; id < p.buffers.size(); ++id)
      if (sharedPlan_->buffers[id].memory == SharedArenaPlan::Memory::Own)
        bufferAddress_[id] = ownMemory_.get() + sharedPlan_->buffers[id].offset;
  } else {
    arena_.reset(static_cast<uint8_t *>(memory), std::free);
    bufferAddress_.resize(p.buffers.size());
    for (size_t id = 0; id < p.buffers.size(); ++id)
      bufferAddress_[id] = arena_.get() + p.buffers[id].offset;
  }

  std::vector<KernelFn> kernels(p.kernels.size(), nullptr);
  std::vector<int64_t> kernelBuffers(p.kernels.size(), -1);
  // Kernels with the same code (a GPT's blocks repeat theirs: the compiler
  // gives a repeated fusion its first kernel's bitcode) are loaded once:
  // the loader compiles each distinct code once (GPT-2's 224 CPU kernels
  // are 40 distinct). A code is its object bytes and entry point; byCode
  // holds each one's entry point once it is loaded.
  auto codeOf = [](const PackageKernel &k) {
    return std::make_pair(
        std::string_view(reinterpret_cast<const char *>(k.object.data()),
                         k.object.size()),
        std::string_view(k.entryPoint));
  };
  std::map<std::pair<std::string_view, std::string_view>, KernelFn> byCode;
  // Each code once, for the loader to compile ahead (checkPackage has
  // checked the indices).
  std::vector<const PackageKernel *> distinct;
  for (const PackageThunk &t : p.thunks) {
    if (t.kind != ThunkKind::KernelLaunch)
      continue;
    const PackageKernel &k = p.kernels[t.kernel];
    if (k.kind != KernelKind::Cuda && !k.object.empty() &&
        byCode.emplace(codeOf(k), nullptr).second)
      distinct.push_back(&k);
  }
  loader.prefetch(distinct);
  thunkBuffers_.resize(p.thunks.size());
  thunkKernels_.assign(p.thunks.size(), nullptr);
  thunkParts_.assign(p.thunks.size(), 1);
  convScratch_.resize(p.thunks.size());
  for (size_t i = 0; i < p.thunks.size(); ++i) {
    const PackageThunk &t = p.thunks[i];
    std::string where = "thunk " + std::to_string(i);
    switch (t.kind) {
    case ThunkKind::KernelLaunch: {
      // checkPackage has checked the index.
      const PackageKernel &kernel = p.kernels[t.kernel];
      int64_t count = static_cast<int64_t>(t.operands.size() + t.results.size());
      if (t.results.empty()) {
        os << where << ": kernel " << t.kernel << " (\"" << kernel.name
           << "\") is launched with no result buffers";
        return fail(os);
      }
      if (kernelBuffers[t.kernel] >= 0 && kernelBuffers[t.kernel] != count) {
        os << where << ": kernel " << t.kernel << " (\"" << kernel.name
           << "\") is launched with " << count << " buffers, but an earlier "
           << "thunk launched it with " << kernelBuffers[t.kernel];
        return fail(os);
      }
      kernelBuffers[t.kernel] = count;
      if (kernel.kind == KernelKind::Cuda) {
        os << where << ": kernel " << t.kernel << " (\"" << kernel.name
           << "\") is a CUDA kernel; the CPU executable runs CPU object code "
           << "or LLVM bitcode";
        return fail(os);
      }
      // Its code's entry point, shared with the kernels of the same code
      // (none for a kernel without object bytes: a test's stand-in).
      KernelFn *shared = kernel.object.empty() ? nullptr : &byCode[codeOf(kernel)];
      if (!kernels[t.kernel] && shared)
        kernels[t.kernel] = *shared;
      if (!kernels[t.kernel]) {
        StatusOr<KernelFn> fn = loader.load(kernel, t.kernel);
        if (!fn.isOk())
          return fn.status();
        if (!fn.value()) {
          os << "kernel " << t.kernel << " (\"" << kernel.name
             << "\"): the loader returned a null entry point";
          return fail(os);
        }
        kernels[t.kernel] = fn.value();
        if (shared)
          *shared = fn.value();
      }
      thunkKernels_[i] = kernels[t.kernel];
      int64_t elements = 0;
      for (uint32_t id : t.results)
        elements = std::max(elements, elementCount(p.buffers[id].shape));
      thunkParts_[i] = std::clamp<int64_t>(elements / kElementsPerPart, 1,
                                           pool_.size());
      break;
    }
    case ThunkKind::LibraryCall:
      if (Status s = checkLibraryCall(p, where, t); !s.isOk())
        return s;
      if (gemmThreading_ != GemmThreading::Pool)
        break;
      if (t.library == LibraryKind::Gemm) {
        thunkParts_[i] = gemmBlocks(t.gemm, pool_.size());
        break;
      }
      // Half-precision convolutions run whole (computed in f32 by Blas).
      thunkParts_[i] = isHalfDtype(p.buffers[t.results[0]].dtype)
                           ? 1
                           : convParts(t.conv, pool_.size());
      if (t.library == LibraryKind::Conv2DFilterGrad && thunkParts_[i] > 1)
        // Parts 1.. sum their images' filter gradients here; part 0 into
        // the result, which then adds these in part order.
        convScratch_[i].resize((thunkParts_[i] - 1) *
                               p.buffers[t.results[0]].size);
      break;
    case ThunkKind::Collective:
      if (Status s = checkCollective(p, where, t, communicator_); !s.isOk())
        return s;
      break;
    case ThunkKind::Copy:
      break; // checkPackage checked the counts and sizes
    }
    std::vector<void *> &pointers = thunkBuffers_[i];
    for (uint32_t id : t.operands)
      pointers.push_back(buffer(id));
    for (uint32_t id : t.results)
      pointers.push_back(buffer(id));
  }

  for (const PkgUpdateCopy &u : pkgUpdateCopies(p))
    updates_.push_back({buffer(u.from), buffer(u.to), size_t(u.bytes)});

  setBlasThreads(gemmThreading_ == GemmThreading::Pool ? 1 : pool_.size());
  profile_.assign(p.thunks.size(), ThunkProfile());
  for (size_t i = 0; i < p.thunks.size(); ++i)
    nvtxNames_.push_back(nvtx::registerMessage(pkgDescribeThunk(p, i)));

  // Asynchronous collectives: a thunk after collective c must wait for it
  // when it writes bytes c reads or writes, or reads bytes c writes (the
  // arena planner reuses a collective's operand bytes once the collective,
  // their last reader, has been issued). It waits for the latest such
  // collective, which completes after every collective before it.
  std::vector<size_t> collectives;
  for (size_t i = 0; i < p.thunks.size(); ++i)
    if (p.thunks[i].kind == ThunkKind::Collective)
      collectives.push_back(i);
  if (!asyncCollectives_ || !communicator_ || collectives.empty())
    return Status::ok();
  auto overlaps = [&](const std::vector<uint32_t> &a,
                      const std::vector<uint32_t> &b) {
    for (uint32_t x : a)
      for (uint32_t y : b) {
        const PackageBuffer &u = p.buffers[x], &v = p.buffers[y];
        if (u.size && v.size && u.offset < v.offset + v.size &&
            v.offset < u.offset + u.size)
          return true;
      }
    return false;
  };
  waitFor_.assign(p.thunks.size(), 0);
  for (size_t j = 0; j < p.thunks.size(); ++j) {
    const PackageThunk &t = p.thunks[j];
    if (t.kind == ThunkKind::Collective)
      continue; // queued behind the earlier ones
    for (size_t k = collectives.size(); k-- > 0;) {
      if (collectives[k] > j)
        continue;
      const PackageThunk &c = p.thunks[collectives[k]];
      if (overlaps(t.results, c.operands) || overlaps(t.results, c.results) ||
          overlaps(t.operands, c.results)) {
        waitFor_[j] = k + 1;
        break;
      }
    }
  }
  comm_ = std::make_unique<CommThread>();
  comm_->thread = std::thread([this] { communicationLoop(); });
  return Status::ok();
}

void Executable::communicationLoop() {
  CommThread &comm = *comm_;
  std::unique_lock<std::mutex> lock(comm.mutex);
  for (;;) {
    comm.wake.wait(lock, [&] { return comm.stop || !comm.queue.empty(); });
    if (comm.queue.empty())
      return; // stopped
    size_t index = comm.queue.front();
    comm.queue.pop_front();
    bool skip = !comm.error.isOk();
    lock.unlock();
    Status s = skip ? Status::ok() : timedThunk(index);
    lock.lock();
    if (!s.isOk() && comm.error.isOk())
      comm.error = s;
    ++comm.completed;
    comm.done.notify_all();
  }
}

void Executable::issueCollective(size_t index) {
  {
    std::lock_guard<std::mutex> lock(comm_->mutex);
    comm_->queue.push_back(index);
    ++comm_->issued;
  }
  comm_->wake.notify_one();
}

Status Executable::waitCollectives(size_t count) {
  std::unique_lock<std::mutex> lock(comm_->mutex);
  comm_->done.wait(lock, [&] {
    return comm_->completed >= count || !comm_->error.isOk();
  });
  return comm_->error;
}

void *Executable::buffer(uint32_t id) {
  return id < bufferAddress_.size() ? bufferAddress_[id] : nullptr;
}

const void *Executable::buffer(uint32_t id) const {
  return const_cast<Executable *>(this)->buffer(id);
}

void *Executable::input(size_t i) {
  return i < package_.inputs.size() ? buffer(package_.inputs[i].buffer)
                                    : nullptr;
}

const void *Executable::output(size_t i) {
  return i < package_.outputs.size() && !outputOverwritten(i)
             ? buffer(package_.outputs[i].buffer)
             : nullptr;
}

bool Executable::outputOverwritten(size_t i) const {
  return i < package_.outputs.size() &&
         runs_.overwritten(this, package_.outputs[i].buffer);
}

bool Executable::bound(uint32_t id) const {
  return sharedPlan_ && sharedPlan_->bound(id);
}

int Executable::findInput(const std::string &name) const {
  return findSignatureEntry(package_.inputs, name);
}

int Executable::findOutput(const std::string &name) const {
  return findSignatureEntry(package_.outputs, name);
}

Status Executable::initialize() {
  // A bound input is the other step's (ExecutableOptions::boundInputs).
  for (const SignatureEntry &entry : package_.inputs) {
    const PackageBuffer &b = package_.buffers[entry.buffer];
    if (!bound(entry.buffer))
      std::memset(buffer(entry.buffer), 0, b.size);
  }
  for (size_t i = 0; i < package_.parameterInits.size(); ++i) {
    const ParameterInit &init = package_.parameterInits[i];
    if (!bound(init.buffer))
      writeInitialValue(package_.buffers[init.buffer], init,
                        buffer(init.buffer));
  }
  // Parameter copies start as their parameters' values.
  for (size_t i = 0; i < package_.inputs.size(); ++i)
    if (package_.inputs[i].role == PkgRole::ParameterCopy &&
        !bound(package_.inputs[i].buffer))
      pkgFillParameterCopy(package_, i, input(package_.inputs[i].copyOf),
                           input(i));
  return Status::ok();
}

Status Executable::runThunk(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  std::vector<void *> &buffers = thunkBuffers_[index];
  switch (t.kind) {
  case ThunkKind::KernelLaunch: {
    KernelFn fn = thunkKernels_[index];
    int64_t parts = thunkParts_[index];
    void **args = buffers.data();
    if (parts == 1) {
      fn(args, 0, 1);
    } else {
      pool_.parallelFor(parts, [&](int64_t part) { fn(args, part, parts); });
    }
    return Status::ok();
  }
  case ThunkKind::LibraryCall: {
    PkgDType dtype = package_.buffers[t.results[0]].dtype;
    Status s;
    switch (t.library) {
    case LibraryKind::Gemm: {
      int64_t blocks = thunkParts_[index];
      if (blocks == 1) {
        s = gemm(dtype, t.gemm, buffers[0], buffers[1], buffers[2]);
        break;
      }
      // create() checked the dtype and the sizes.
      const GemmParams &g = t.gemm;
      void **b = buffers.data();
      if (isHalfDtype(dtype)) {
        // Split the f32 GEMM on widened copies; round the result once.
        std::vector<float> lhs(g.batch * g.m * g.k), rhs(g.batch * g.k * g.n),
            out(g.batch * g.m * g.n, 0.0f);
        widenToF32(dtype, b[0], lhs.data(), lhs.size());
        widenToF32(dtype, b[1], rhs.data(), rhs.size());
        if (g.beta != 0)
          widenToF32(dtype, b[2], out.data(), out.size());
        pool_.parallelFor(blocks, [&](int64_t block) {
          gemmBlock<float>(g, lhs.data(), rhs.data(), out.data(), block, blocks);
        });
        narrowFromF32(dtype, out.data(), b[2], out.size());
      } else if (dtype == PkgDType::F32)
        pool_.parallelFor(blocks, [&](int64_t block) {
          gemmBlock<float>(g, b[0], b[1], b[2], block, blocks);
        });
      else
        pool_.parallelFor(blocks, [&](int64_t block) {
          gemmBlock<double>(g, b[0], b[1], b[2], block, blocks);
        });
      break;
    }
    case LibraryKind::Conv2D:
    case LibraryKind::Conv2DInputGrad:
    case LibraryKind::Conv2DFilterGrad:
      s = runConv(index, dtype);
      break;
    case LibraryKind::Attention:
    case LibraryKind::AttentionGrad:
      // checkPackage refuses attention in a CPU package (kiln-decompose
      // expands it for the CPU).
      s = Status::error("attention runs in CUDA packages only");
      break;
    }
    if (!s.isOk())
      return Status::error("thunk " + std::to_string(index) + ": " +
                           s.message());
    return Status::ok();
  }
  case ThunkKind::Copy:
    std::memmove(buffers[1], buffers[0], package_.buffers[t.results[0]].size);
    return Status::ok();
  case ThunkKind::Collective:
    return runCollective(index);
  }
  return Status::error("thunk " + std::to_string(index) +
                       ": unknown thunk kind");
}

Status Executable::runCollective(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  const CollectiveParams &c = t.collective;
  void **b = thunkBuffers_[index].data();
  const PackageBuffer &in = package_.buffers[t.operands[0]];
  const PackageBuffer &out = package_.buffers[t.results[0]];
  int64_t inCount = elementCount(in.shape), outCount = elementCount(out.shape);
  Status s;
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    s = communicator_->allReduce(b[0], b[1], inCount, in.dtype, c.reduction);
    break;
  case CollectiveKind::ReduceScatter:
    s = communicator_->reduceScatter(b[0], b[1], outCount, in.dtype,
                                     c.reduction);
    break;
  case CollectiveKind::AllGather:
    s = communicator_->allGather(b[0], b[1], inCount, in.dtype);
    break;
  case CollectiveKind::Broadcast:
    s = communicator_->broadcast(b[0], b[1], inCount, in.dtype,
                                 static_cast<int>(c.root));
    break;
  default: // refused by create()
    s = Status::error("unsupported collective");
    break;
  }
  if (!s.isOk())
    return Status::error("thunk " + std::to_string(index) + " (" +
                         pkgCollectiveKindName(c.kind) + "): " + s.message());
  return Status::ok();
}

Status Executable::runConv(size_t index, PkgDType dtype) {
  const PackageThunk &t = package_.thunks[index];
  void **b = thunkBuffers_[index].data();
  int64_t parts = thunkParts_[index];
  auto call = [&](const ConvParams &c, const void *x, const void *y,
                  void *out) {
    switch (t.library) {
    case LibraryKind::Conv2D: return conv2d(dtype, c, x, y, out);
    case LibraryKind::Conv2DInputGrad: return conv2dInputGrad(dtype, c, x, y, out);
    default: return conv2dFilterGrad(dtype, c, x, y, out);
    }
  };
  if (parts == 1)
    return call(t.conv, b[0], b[1], b[2]);

  // Split by images: part p takes images [n p / parts, n (p+1) / parts).
  const ConvParams &c = t.conv;
  int64_t images = c.inputShape[0];
  size_t elementBytes = pkgBytesPerElement(dtype);
  size_t inputImage = elementCount(c.inputShape) / images * elementBytes;
  size_t outputImage = elementCount(c.outputShape) / images * elementBytes;
  size_t filterBytes = elementCount(c.filterShape) * elementBytes;
  std::vector<Status> statuses(parts);
  pool_.parallelFor(parts, [&](int64_t part) {
    int64_t begin = images * part / parts, end = images * (part + 1) / parts;
    ConvParams slice = c;
    slice.inputShape[0] = slice.outputShape[0] = end - begin;
    auto at = [&](void *base, size_t perImage) {
      return static_cast<uint8_t *>(base) + begin * perImage;
    };
    switch (t.library) {
    case LibraryKind::Conv2D:
      statuses[part] =
          call(slice, at(b[0], inputImage), b[1], at(b[2], outputImage));
      break;
    case LibraryKind::Conv2DInputGrad:
      statuses[part] =
          call(slice, at(b[0], outputImage), b[1], at(b[2], inputImage));
      break;
    default: {
      void *out = part == 0 ? b[2]
                            : convScratch_[index].data() + (part - 1) * filterBytes;
      statuses[part] =
          call(slice, at(b[0], inputImage), at(b[1], outputImage), out);
      break;
    }
    }
  });
  for (const Status &s : statuses)
    if (!s.isOk())
      return s;
  if (t.library == LibraryKind::Conv2DFilterGrad) {
    int64_t n = elementCount(c.filterShape);
    for (int64_t part = 1; part < parts; ++part) {
      const uint8_t *partial = convScratch_[index].data() + (part - 1) * filterBytes;
      if (dtype == PkgDType::F32) {
        auto *out = static_cast<float *>(b[2]);
        auto *in = reinterpret_cast<const float *>(partial);
        for (int64_t i = 0; i < n; ++i)
          out[i] += in[i];
      } else {
        auto *out = static_cast<double *>(b[2]);
        auto *in = reinterpret_cast<const double *>(partial);
        for (int64_t i = 0; i < n; ++i)
          out[i] += in[i];
      }
    }
  }
  return Status::ok();
}

Status Executable::timedThunk(size_t index) {
  nvtx::Range range(nvtxNames_[index]);
  if (!profiling_)
    return runThunk(index);
  auto start = std::chrono::steady_clock::now();
  Status s = runThunk(index);
  auto end = std::chrono::steady_clock::now();
  auto ns = [](std::chrono::steady_clock::duration d) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  ThunkProfile &p = profile_[index];
  p.totalNs += ns(end - start);
  ++p.calls;
  p.lastStartNs = start > stepStart_ ? ns(start - stepStart_) : 0;
  p.lastNs = ns(end - start);
  return s;
}

Status Executable::run() {
  // From its first thunk on, the step writes over the free space it lends
  // or borrows (ExecutableOptions::shareMemoryWith).
  runs_.started(this);
  if (profiling_)
    stepStart_ = std::chrono::steady_clock::now();
  if (!comm_) {
    for (size_t i = 0; i < package_.thunks.size(); ++i)
      if (Status s = timedThunk(i); !s.isOk())
        return s;
  } else {
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      comm_->issued = comm_->completed = 0;
      comm_->error = Status::ok();
    }
    // Collectives go to the communication thread; a thunk that touches
    // their bytes waits first (waitFor_). A failure, here or there, stops
    // the loop; the collectives already issued are waited for either way,
    // as they read and write the arena.
    Status failure;
    for (size_t i = 0; i < package_.thunks.size() && failure.isOk(); ++i) {
      if (waitFor_[i])
        if (Status s = waitCollectives(waitFor_[i]); !s.isOk()) {
          failure = s;
          break;
        }
      if (package_.thunks[i].kind == ThunkKind::Collective)
        issueCollective(i);
      else
        failure = timedThunk(i);
    }
    size_t issued;
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      issued = comm_->issued;
    }
    // Every issued collective, even after an error (a failed one makes the
    // rest return at once).
    {
      std::unique_lock<std::mutex> lock(comm_->mutex);
      comm_->done.wait(lock, [&] { return comm_->completed >= issued; });
      if (failure.isOk())
        failure = comm_->error;
    }
    if (!failure.isOk())
      return failure;
  }
  for (const UpdateCopy &copy : updates_)
    std::memmove(copy.to, copy.from, copy.bytes);
  return Status::ok();
}

std::vector<ThunkTime> Executable::thunkTimes() const {
  return runtime::thunkTimes(package_, profile_,
                             [](const ThunkProfile &t, ThunkTime &row) {
                               row.ms = t.totalNs / 1e6;
                               row.lastStartMs = t.lastStartNs / 1e6;
                               row.lastMs = t.lastNs / 1e6;
                             });
}

void Executable::setProfiling(bool enabled) {
  profiling_ = enabled;
  if (enabled)
    profile_.assign(package_.thunks.size(), ThunkProfile());
}

} // namespace kiln::runtime::cpu
