//===- CudaCompile.cpp - kiln compile for a CUDA target -------------------===//
//
// See CudaCompile.h. The package builder (PackageBuilder.h) walks the
// planned step exactly as for the CPU, calling back here for each kernel.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/CudaCompile.h"

#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/PackageBuilder.h"

#include "codegen/cuda/CudaEmitter.h"
#include "runtime/cuda/CudaExecutable.h"
#ifdef KILN_HAVE_NVRTC
#include "codegen/cuda/Nvrtc.h"
#endif
#include "passes/BufferLiveness.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace kiln::cli {

namespace {

// A C identifier for kernel |name| ("fusion12.lhs_pack" -> kiln_fusion12_lhs_pack).
std::string entryPointFor(const std::string &name) {
  std::string out = "kiln_";
  for (char c : name)
    out += llvm::isAlnum(c) ? c : '_';
  return out;
}

// The bytes |fusion|'s kernel reads from its inputs when a gather's table,
// read by nothing else, is read only at the rows its indices name (the
// embedding lookup reads 8192 of 50304 rows); 0 when it reads every input
// whole (the roofline then counts the operands' sizes).
uint64_t partialReadBytes(FusionOp fusion) {
  uint64_t total = 0;
  bool partial = false;
  for (mlir::BlockArgument arg : fusion.getBody().front().getArguments()) {
    uint64_t whole = uint64_t(getTensorBytes(arg.getType()).value_or(0));
    uint64_t rows = 0;
    bool onlyTables = !arg.use_empty();
    for (mlir::OpOperand &use : arg.getUses()) {
      auto gather = mlir::dyn_cast<GatherOp>(use.getOwner());
      if (!gather || use.get() != gather.getTable() ||
          mlir::cast<mlir::RankedTensorType>(arg.getType()).getDimSize(0) == 0) {
        onlyTables = false;
        break;
      }
      auto table = mlir::cast<mlir::RankedTensorType>(arg.getType());
      rows += uint64_t(mlir::cast<mlir::RankedTensorType>(
                           gather.getIndices().getType())
                           .getNumElements()) *
              (whole / uint64_t(table.getDimSize(0)));
    }
    if (onlyTables && rows < whole) {
      total += rows;
      partial = true;
    } else {
      total += whole;
    }
  }
  return partial ? total : 0;
}

PackageTargetHooks makeHooks(const CudaCompileOptions &options,
                             std::vector<CudaKernelReport> &reports) {
  PackageTargetHooks hooks;
  hooks.target.kind = runtime::TargetKind::Cuda;
  hooks.target.smArchs.assign(options.archs.begin(), options.archs.end());
  hooks.compileKernel = [&options, &reports](FusionOp fusion,
                                             const std::string &name,
                                             runtime::PackageKernel &kernel,
                                             KernelFinish &finish,
                                             std::string &error) {
    std::string entry = entryPointFor(name);
    // Rows cached in dynamic shared memory fit every target architecture.
    mlir::FailureOr<CudaKernelSource> source =
        emitCudaKernel(fusion, entry, cudaRowCacheBytes(options.archs));
    if (mlir::failed(source)) {
      error = "kernel " + name + ": the CUDA code generator could not emit it";
      return false;
    }
    kernel.kind = runtime::KernelKind::Cuda;
    kernel.entryPoint = entry;
    kernel.source = source->source;
    kernel.block = {source->launch.blockThreads, 1, 1};
    kernel.grid = {static_cast<uint32_t>(std::min<uint64_t>(
                       source->launch.maxBlocks, UINT32_MAX)),
                   1, 1};
    kernel.sharedMemoryBytes = source->dynamicSharedBytes;
    kernel.serialSteps = source->serialSteps;
    kernel.serialThreads = source->serialThreads;
    kernel.readBytes = partialReadBytes(fusion);
    kernel.programmaticLaunch = source->programmaticLaunch;
    CudaKernelReport report;
    report.name = name;
    report.entryPoint = entry;
    report.layouts.assign(source->layouts.begin(), source->layouts.end());
    report.maxBlocks = source->launch.maxBlocks;
    if (options.nvrtc) {
#ifdef KILN_HAVE_NVRTC
      // NVRTC and ptxas once every kernel is emitted, beside other
      // kernels' (the reports no longer grow then; this one writes its own).
      size_t reportIndex = reports.size();
      finish = [&options, &reports, reportIndex, name,
                entry](runtime::PackageKernel &kernel, std::string &error) {
        NvrtcResult compiled;
        std::string log;
        if (!compileCudaSource(kernel.source, entry, options.archs, compiled,
                               log)) {
          error = "kernel " + name + " (" + entry + "): NVRTC failed: " + log;
          return false;
        }
        kernel.ptx = std::move(compiled.ptx);
        CudaKernelReport &report = reports[reportIndex];
        for (CubinResult &cubin : compiled.cubins) {
          runtime::Cubin image;
          image.arch = cubin.arch;
          image.image = std::move(cubin.image);
          kernel.cubins.push_back(std::move(image));
          report.archs.push_back({cubin.arch, cubin.registers,
                                  cubin.spillStoreBytes, cubin.spillLoadBytes,
                                  cubin.fromCache});
        }
        return true;
      };
#else
      error = "compiling CUDA kernels needs NVRTC: this kiln was built "
              "without the CUDA toolkit (KILN_ENABLE_CUDA is off)";
      return false;
#endif
    }
    reports.push_back(std::move(report));
    return true;
  };
  hooks.reuseKernel = [&reports](const std::string &name,
                                 const std::string &sameAs) {
    CudaKernelReport report;
    for (const CudaKernelReport &r : reports)
      if (r.name == sameAs) {
        report = r;
        report.archs.clear();
        break;
      }
    report.name = name;
    report.sameAs = sameAs;
    reports.push_back(std::move(report));
  };
  return hooks;
}

// What the package builder is told: |hooks|, and --jobs and --timing's
// scope and kernel times from |options|.
PackageBuildOptions packageOptions(const PackageTargetHooks &hooks,
                                   const CudaCompileOptions &options) {
  return {&hooks, options.jobs, options.timing, options.finishTimes};
}

} // namespace

bool haveNvrtc() {
#ifdef KILN_HAVE_NVRTC
  return true;
#else
  return false;
#endif
}

bool parseCudaTarget(const std::string &text, std::vector<unsigned> &archs,
                     std::string &error) {
  llvm::StringRef t(text);
  archs.clear();
  if (t == "cuda") {
    archs.push_back(90);
    return true;
  }
  if (!t.consume_front("cuda:")) {
    error = "expected cuda or cuda:sm_NN[,sm_MM...]";
    return false;
  }
  llvm::SmallVector<llvm::StringRef, 4> parts;
  t.split(parts, ',');
  for (llvm::StringRef part : parts) {
    llvm::StringRef digits = part;
    unsigned value;
    if (!digits.consume_front("sm_") || digits.getAsInteger(10, value) ||
        value < 50 || value > 999) {
      error = "expected an architecture such as sm_90, found '" + part.str() + "'";
      return false;
    }
    if (std::find(archs.begin(), archs.end(), value) == archs.end())
      archs.push_back(value);
  }
  return true;
}

runtime::cuda::CudaDeviceInfo cudaDeviceOfArch(unsigned arch) {
  runtime::cuda::CudaDeviceInfo device;
  device.name = "sm_" + std::to_string(arch);
  device.major = int(arch / 10);
  device.minor = int(arch % 10);
  device.maxSharedMemoryPerBlockOptin = int(cudaSharedMemoryOptinBytes(arch));
  return device;
}

runtime::cuda::CudaStepMemory
cudaPackageMemory(const runtime::LoadedPackage &pkg, unsigned *arch) {
  runtime::cuda::CudaOptions defaults;
  runtime::cuda::CudaStepMemory most;
  bool first = true;
  for (unsigned a : pkg.target.smArchs) {
    runtime::cuda::CudaStepMemory m = runtime::cuda::cudaStepMemory(
        pkg, cudaDeviceOfArch(a), defaults.gemmWorkspaceBytes,
        /*attentionMma=*/true);
    if (first || m.total() > most.total()) {
      most = m;
      if (arch)
        *arch = a;
    }
    first = false;
  }
  return most;
}

std::optional<runtime::cuda::CudaStepMemory>
cudaPlanMemory(mlir::ModuleOp module, llvm::ArrayRef<unsigned> archs,
               unsigned *arch) {
  // The thunks and buffers, with kernels that hold no code.
  PackageTargetHooks hooks;
  hooks.target.kind = runtime::TargetKind::Cuda;
  hooks.target.smArchs.assign(archs.begin(), archs.end());
  hooks.compileKernel = [](FusionOp, const std::string &name,
                           runtime::PackageKernel &kernel, KernelFinish &,
                           std::string &) {
    kernel.kind = runtime::KernelKind::Cuda;
    kernel.entryPoint = entryPointFor(name);
    return true;
  };
  runtime::LoadedPackage pkg;
  std::string ignored;
  llvm::raw_string_ostream errs(ignored);
  if (mlir::failed(buildStepPackage(module, "", "", {}, "", errs, pkg,
                                    {&hooks, 1, nullptr, nullptr})))
    return std::nullopt;
  return cudaPackageMemory(pkg, arch);
}

int64_t cudaRuntimeWorkspaceBytes(mlir::ModuleOp module,
                                  llvm::ArrayRef<unsigned> archs) {
  std::optional<runtime::cuda::CudaStepMemory> memory =
      cudaPlanMemory(module, archs);
  return memory ? int64_t(memory->workspaces()) : -1;
}

mlir::LogicalResult compileCudaKernels(mlir::ModuleOp module,
                                       const CudaCompileOptions &options,
                                       llvm::StringRef command,
                                       llvm::raw_ostream &errs,
                                       std::vector<CudaKernelReport> &reports) {
  PackageTargetHooks hooks = makeHooks(options, reports);
  runtime::LoadedPackage pkg;
  return buildStepPackage(module, "", "", {}, command, errs, pkg,
                          packageOptions(hooks, options));
}

mlir::LogicalResult
writeCudaPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 const std::string &outputPath, const CudaCompileOptions &options,
                 llvm::StringRef command, llvm::raw_ostream &errs,
                 std::vector<CudaKernelReport> &reports) {
  PackageTargetHooks hooks = makeHooks(options, reports);
  return writeStepPackage(module, modelName, sourceBytes, flags, outputPath,
                          command, errs, packageOptions(hooks, options));
}

mlir::LogicalResult
writeCudaKernelFiles(mlir::ModuleOp module, llvm::StringRef modelName,
                     const std::string &dir, bool ptx,
                     const CudaCompileOptions &options, llvm::StringRef command,
                     llvm::raw_ostream &errs,
                     std::vector<CudaKernelReport> &reports) {
  std::string emit = ptx ? "--emit=ptx" : "--emit=cuda";
  CudaCompileOptions effective = options;
  effective.nvrtc = ptx || options.nvrtc;
  PackageTargetHooks hooks = makeHooks(effective, reports);
  runtime::LoadedPackage pkg;
  if (mlir::failed(buildStepPackage(module, modelName, "", {}, command, errs,
                                    pkg, packageOptions(hooks, options))))
    return mlir::failure();
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    printError(errs, command, emit + ": cannot create directory " + dir + ": " +
                                  ec.message());
    return mlir::failure();
  }
  auto write = [&](const std::string &name, llvm::StringRef text) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      printError(errs, command, emit + ": cannot write " + std::string(path) +
                                    ": " + ec.message());
      return false;
    }
    os << text;
    return true;
  };
  std::string index;
  llvm::raw_string_ostream is(index);
  is << "# kiln CUDA kernels of " << modelName << ": name entry_point file "
     << "block max_blocks layouts [same_as=KERNEL] "
     << "[sm_NN:registers/spill_stores/spill_loads]\n";
  for (size_t i = 0; i < pkg.kernels.size(); ++i) {
    const runtime::PackageKernel &k = pkg.kernels[i];
    std::string file = k.entryPoint + (ptx ? ".ptx" : ".cu");
    const CudaKernelReport &r = reports[i];
    // A kernel with an earlier one's code has that one's file.
    if (r.sameAs.empty() &&
        !write(file, ptx ? llvm::StringRef(k.ptx) : llvm::StringRef(k.source)))
      return mlir::failure();
    is << k.name << " " << k.entryPoint << " " << file << " " << k.block[0]
       << " " << r.maxBlocks << " " << llvm::join(r.layouts, ",");
    if (!r.sameAs.empty())
      is << " same_as=" << r.sameAs;
    for (const CudaArchStats &a : r.archs)
      is << " sm_" << a.arch << ":" << a.registers << "/" << a.spillStoreBytes
         << "/" << a.spillLoadBytes;
    is << "\n";
  }
  if (!write("kernels.index", is.str()))
    return mlir::failure();
  return mlir::success();
}

void printCudaReport(llvm::ArrayRef<CudaKernelReport> reports,
                     llvm::raw_ostream &os) {
  size_t reused = llvm::count_if(
      reports, [](const CudaKernelReport &r) { return !r.sameAs.empty(); });
  os << "CUDA kernels: " << reports.size() << ", " << reports.size() - reused
     << " compiled (" << reused << " the same as an earlier kernel)\n";
  std::map<std::string, int> layouts;
  for (const CudaKernelReport &r : reports)
    for (const std::string &l : r.layouts)
      ++layouts[l];
  os << "  nest layouts:";
  for (auto &[name, count] : layouts)
    os << " " << name << "=" << count;
  os << "\n";
  std::map<unsigned, std::vector<const CudaArchStats *>> perArch;
  for (const CudaKernelReport &r : reports)
    for (const CudaArchStats &a : r.archs)
      perArch[a.arch].push_back(&a);
  for (auto &[arch, stats] : perArch) {
    int maxRegs = 0, spilling = 0, cached = 0;
    for (const CudaArchStats *a : stats) {
      maxRegs = std::max(maxRegs, a->registers);
      spilling += (a->spillStoreBytes > 0 || a->spillLoadBytes > 0);
      cached += a->fromCache;
    }
    os << "  sm_" << arch << ": " << stats.size() << " cubins, registers max "
       << maxRegs << ", " << spilling << " kernels spill, " << cached
       << " from the NVRTC cache\n";
  }
  for (const CudaKernelReport &r : reports) {
    if (!r.sameAs.empty()) {
      os << "  " << r.name << " (the same kernel as " << r.sameAs << ")\n";
      continue;
    }
    os << "  " << r.name << " (" << llvm::join(r.layouts, ",")
       << ", blocks " << r.maxBlocks << ")";
    for (const CudaArchStats &a : r.archs)
      os << " sm_" << a.arch << ": " << a.registers << " registers, spills "
         << a.spillStoreBytes << "/" << a.spillLoadBytes << " bytes";
    os << "\n";
  }
}

} // namespace kiln::cli
