//===- Inspect.cpp - `kiln inspect`: summarize a model --------------------===//
//
// `kiln inspect FILE [--dot]` loads a model (graph file or .mlir), and prints
// its summary (tools/kiln/lib/Summary.h) or, with --dot, a Graphviz graph of
// its ops. `kiln inspect STEP.kpkg [--roofline [--csv]]` loads a compiled
// step package with the runtime's loader and prints what it holds, and with
// --roofline what each thunk would cost on an H200 (PackageRoofline.h).
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/CudaCompile.h"
#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/PackageRoofline.h"
#include "tools/kiln/lib/PackedTrainer.h"
#include "tools/kiln/lib/Summary.h"

#include "runtime/Units.h"
#include "runtime/package/Package.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <map>

namespace kiln::cli {

namespace {

constexpr llvm::StringLiteral kCommand = "kiln inspect";

// What a package holds: target, memory, kernels, and thunks by kind.
void printPackageSummary(const runtime::LoadedPackage &p, llvm::StringRef path,
                         llvm::raw_ostream &os) {
  using namespace kiln::runtime;
  os << "package: " << path << " (format " << p.majorVersion << "."
     << p.minorVersion << ")\n";
  os << "  model:            " << p.metadata.modelName << "\n";
  os << "  target:           "
     << (p.target.kind == TargetKind::Cuda ? "cuda" : "cpu");
  for (size_t i = 0; i < p.target.smArchs.size(); ++i)
    os << (i ? ",sm_" : " sm_") << p.target.smArchs[i];
  if (!p.target.triple.empty())
    os << " " << p.target.triple;
  os << "\n";
  uint64_t parameterBytes = 0;
  for (const PackageBuffer &b : p.buffers)
    if (b.role == PkgRole::Parameter)
      parameterBytes += b.size;
  os << "  parameters:       " << parameterCount(p) << " (" << parameterBytes
     << " bytes)\n";
  // The inputs of |role|: how many, and their bytes.
  auto inputsOf = [&](PkgRole role) {
    std::pair<uint64_t, uint64_t> found{0, 0};
    for (const SignatureEntry &e : p.inputs)
      if (e.role == role) {
        ++found.first;
        found.second += p.buffers[e.buffer].size;
      }
    return found;
  };
  // Mixed precision's low-precision parameter copies (docs/training.md).
  if (auto [copies, bytes] = inputsOf(PkgRole::ParameterCopy); copies)
    os << "  parameter copies: " << copies << " (" << bytes << " bytes)\n";
  // Model state: a batch norm's running statistics (not trained).
  if (auto [tensors, bytes] = inputsOf(PkgRole::ModelState); tensors)
    os << "  model state:      " << tensors << " tensors (" << bytes
       << " bytes)\n";
  os << "  arena:            " << p.arenaSize << " bytes ("
     << llvm::format("%.2f MiB", p.arenaSize / 1048576.0) << "), "
     << p.buffers.size() << " buffers\n";
  // A CUDA step's device memory: the arena and the workspaces the runtime
  // gives its libraries at load (runtime/cuda/CudaMemory.h).
  if (p.target.kind == runtime::TargetKind::Cuda && !p.target.smArchs.empty()) {
    unsigned arch = 0;
    runtime::cuda::CudaStepMemory memory = cudaPackageMemory(p, &arch);
    os << "  device memory:    " << runtime::formatBytes(memory.total())
       << " on sm_" << arch << " (" << runtime::cuda::describeStepMemory(memory)
       << ")";
    if (memory.epilogueFallback)
      os << "; up to " << runtime::formatBytes(memory.epilogueFallback)
         << " more where cuBLASLt declines a GEMM epilogue";
    os << "\n";
  }
  os << "  inputs:          ";
  for (const SignatureEntry &e : p.inputs)
    if (e.role == PkgRole::Input || e.role == PkgRole::Label) {
      os << " " << e.name << ":" << pkgDTypeName(e.dtype) << "[";
      for (size_t i = 0; i < e.shape.size(); ++i)
        os << (i ? "x" : "") << e.shape[i];
      os << "]";
      // Package 1.6: the bound the data is checked against.
      if (e.indexBound > 0)
        os << "<" << e.indexBound;
    }
  os << "\n";
  std::map<std::string, int64_t> library;
  int64_t launches = 0, calls = 0, collectives = 0, copies = 0;
  for (const PackageThunk &t : p.thunks) {
    switch (t.kind) {
    case ThunkKind::KernelLaunch:
      ++launches;
      break;
    case ThunkKind::LibraryCall:
      ++calls;
      ++library[libraryCallKind(t)];
      break;
    case ThunkKind::Collective:
      ++collectives;
      break;
    case ThunkKind::Copy:
      ++copies;
      break;
    }
  }
  os << "  kernels:          " << p.kernels.size();
  if (p.target.kind == runtime::TargetKind::Cuda) {
    size_t waiting = 0;
    for (const runtime::PackageKernel &k : p.kernels)
      waiting += k.programmaticLaunch;
    // Package 1.5: kernels whose sm_90 code waits for the kernel before
    // them, so the runtime may start them early.
    os << " (" << waiting << " with programmatic dependent launch on sm_90+)";
  }
  os << "\n";
  os << "  thunks per step:  " << p.thunks.size() << " (" << launches
     << " kernel launches, " << calls << " library calls, " << collectives
     << " collectives, " << copies << " copies)\n";
  if (!library.empty()) {
    os << "  library calls:   ";
    bool first = true;
    for (auto &[name, count] : library) {
      os << (first ? " " : ", ") << count << " " << name;
      first = false;
    }
    os << "\n";
  }
}

// --assume=KEY=VALUE[,...]: the roofline's efficiencies (gemm, attention,
// memory: fractions in (0, 1]), its launch cost (launch-us), the latency of
// a dependent load (latency-us), whether f32 GEMMs use TF32 (tf32=on|off)
// and which attention backward runs (attention-dq=recompute|stored).
bool parseAssumptions(llvm::StringRef text, RooflineDevice &device,
                      llvm::raw_ostream &errs) {
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    value = value.trim();
    auto bad = [&](llvm::StringRef expected) {
      printError(errs, kCommand,
                 "--assume: '" + item.str() + "': expected " + expected.str());
      return false;
    };
    if (key == "tf32") {
      if (value != "on" && value != "off")
        return bad("tf32=on or tf32=off");
      device.allowTf32 = value == "on";
      continue;
    }
    if (key == "attention-dq") {
      if (value != "recompute" && value != "stored")
        return bad("attention-dq=recompute or attention-dq=stored");
      device.attentionStoredScores = value == "stored";
      continue;
    }
    double number = 0;
    if (value.empty() || value.getAsDouble(number) || !std::isfinite(number))
      return bad("KEY=NUMBER (keys: gemm, attention, memory, launch-us, "
                 "latency-us, tf32, attention-dq)");
    if (key == "launch-us" || key == "latency-us") {
      if (number < 0)
        return bad(key.str() + " >= 0");
      (key == "launch-us" ? device.launchUs : device.latencyUs) = number;
      continue;
    }
    double *fraction = key == "gemm"        ? &device.gemmEfficiency
                       : key == "attention" ? &device.attentionEfficiency
                       : key == "memory"    ? &device.memoryEfficiency
                                            : nullptr;
    if (!fraction)
      return bad("one of gemm, attention, memory, launch-us, latency-us, tf32, "
                 "attention-dq");
    if (number <= 0 || number > 1)
      return bad("a fraction of peak in (0, 1]");
    *fraction = number;
  }
  return true;
}

int inspectPackage(llvm::StringRef input, bool roofline, bool csv,
                   int64_t top, const RooflineDevice &device,
                   llvm::StringRef measured, llvm::raw_ostream &outs,
                   llvm::raw_ostream &errs,
                   const runtime::StatusOr<runtime::LoadedPackage> *given = nullptr) {
  runtime::StatusOr<runtime::LoadedPackage> loaded =
      given ? *given : runtime::loadPackage(input.str());
  if (!loaded.isOk()) {
    printError(errs, kCommand, loaded.status().message());
    return kExitError;
  }
  if (!roofline) {
    printPackageSummary(loaded.value(), input, outs);
    return kExitOk;
  }
  if (loaded.value().target.kind != runtime::TargetKind::Cuda) {
    printError(errs, kCommand,
               input.str() + ": --roofline predicts a CUDA step on a GPU; this "
               "package targets the CPU (compile it with --target=cuda)");
    return kExitError;
  }
  PackageRooflineResult result = predictPackageRoofline(loaded.value(), device);
  if (!measured.empty()) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
        llvm::MemoryBuffer::getFile(measured, /*IsText=*/true);
    if (!file) {
      printError(errs, kCommand,
                 measured.str() + ": cannot read it: " +
                     file.getError().message());
      return kExitError;
    }
    std::string problem =
        applyMeasuredProfile(result, (*file)->getBuffer());
    if (!problem.empty()) {
      printError(errs, kCommand,
                 measured.str() + ": " + problem +
                     " (expected the CSV kiln-cuda-run --profile or kiln "
                     "train --profile writes for this package)");
      return kExitError;
    }
  }
  if (csv) {
    printPackageRooflineCsv(result, outs);
    return kExitOk;
  }
  printPackageSummary(loaded.value(), input, outs);
  printPackageRoofline(result, device, static_cast<size_t>(top), outs);
  return kExitOk;
}

} // namespace

int runInspect(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
               llvm::raw_ostream &errs) {
  std::string input, top = "15", assume, measured;
  bool dot = false, roofline = false, csv = false;
  FlagParser parser(
      kCommand.str(), "FILE [--dot] | STEP.kpkg [--roofline [--csv]]",
      "Prints a model's inputs and outputs (name, role, shape, dtype), its\n"
      "parameters (count and bytes), the FLOPs of one forward step (summed\n"
      "from every op's cost) and a histogram of its ops.\n"
      "For a compiled step package (.kpkg, from `kiln compile -o`): its\n"
      "target, parameters, arena, kernels and thunks by kind; --roofline\n"
      "adds what the step would take on one H200, predicted thunk by thunk\n"
      "(one launch plus the longer of its bytes at 80% of 4.8 TB/s and its\n"
      "FLOPs at 70% of the tensor-core peak, 35% for fused attention), the\n"
      "FLOPs utilization, tokens/s for a token model, and the costliest\n"
      "thunks with the layers folded together.\n"
      "For a trainer of `kiln pack`: what it was packed from and for, then\n"
      "its step as a package (--roofline too).");
  parser.addPositional("FILE", &input,
                       "a graph file (.kiln), MLIR text (.mlir), a compiled "
                       "step (.kpkg) or a trainer of kiln pack");
  parser.addSwitch("dot", &dot, "print a Graphviz graph of the ops instead");
  parser.addSwitch("roofline", &roofline,
                   "for a .kpkg: the predicted step time on one H200");
  parser.addSwitch("csv", &csv,
                   "with --roofline: one CSV row per thunk instead (thunk, "
                   "kind, name, detail, flops, bytes, us, bound)");
  parser.addValue("top", &top, "N",
                  "with --roofline: how many thunk groups to list (default 15)");
  parser.addValue("assume", &assume, "KEY=V,...",
                  "with --roofline: other efficiencies and costs, e.g. "
                  "attention=0.15,launch-us=1.5 (keys: gemm, attention, "
                  "memory: fractions of peak; launch-us; latency-us, a "
                  "dependent load's; tf32=on|off; attention-dq=recompute|"
                  "stored, the attention backward's dQ)");
  parser.addValue("measured", &measured, "FILE",
                  "with --roofline: the thunk times a GPU measured "
                  "(kiln-cuda-run --time=N --profile=FILE, or kiln train "
                  "--device=cuda --profile=FILE), beside the prediction");
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  // A trainer of `kiln pack` (any other name): what it holds, and its step
  // as a package.
  llvm::StringRef extension = llvm::sys::path::extension(input);
  std::optional<PackedTrainer> trainer;
  if (extension != ".kiln" && extension != ".mlir" && extension != ".kpkg") {
    runtime::StatusOr<PackedTrainer> packed = readPackedTrainer(input);
    if (packed.isOk())
      trainer = std::move(packed.value());
    else if (packed.status().message().find("its packed model") != std::string::npos) {
      // A trailer but a damaged payload; anything else is read as a model.
      printError(errs, kCommand, packed.status().message());
      return kExitError;
    }
  }
  bool package = extension == ".kpkg" || trainer;
  if (!package && (roofline || csv || parser.wasSet("top") ||
                   parser.wasSet("assume") || parser.wasSet("measured"))) {
    printError(errs, kCommand,
               "--roofline, --csv, --top, --assume and --measured read a compiled step (.kpkg), "
               "found '" + input + "' (compile it with `kiln compile " + input +
               " --target=cuda -o STEP.kpkg`)");
    return kExitUsage;
  }
  if (package && dot) {
    printError(errs, kCommand,
               "--dot draws a model (.kiln or .mlir), found the package '" +
                   input + "'");
    return kExitUsage;
  }
  if ((csv || !measured.empty()) && !roofline) {
    printError(errs, kCommand, "--csv and --measured go with --roofline");
    return kExitUsage;
  }
  if (package) {
    std::optional<int64_t> topCount =
        parseInteger(kCommand, "top", top, 1, errs);
    if (!topCount)
      return kExitUsage;
    RooflineDevice device;
    if (!parseAssumptions(assume, device, errs))
      return kExitUsage;
    if (!trainer)
      return inspectPackage(input, roofline, csv, *topCount, device, measured,
                            outs, errs);
    std::map<std::string, std::string> &m = trainer->manifest;
    if (!csv) {
      outs << "trainer: " << input << " (kiln pack)\n"
           << "  model:            " << m["model"] << " (from " << m["source"]
           << (m["flags"].empty() ? "" : ", with " + m["flags"]) << ")\n"
           << "  kernels:          "
           << (m["target"] == "cuda" ? "CUDA (" + m["cuda"] + ")"
                                     : "compiled for " + m["cpu"] + " CPUs, a " +
                                           std::to_string(trainer->kernels.size()) +
                                           "-byte library")
           << "\n"
           << "  eval step:        " << (trainer->eval.empty() ? "none" : "yes")
           << "\n"
           << "the step:\n";
    }
    runtime::StatusOr<runtime::LoadedPackage> step = runtime::loadPackageFromBytes(
        reinterpret_cast<const uint8_t *>(trainer->step.data()), trainer->step.size());
    return inspectPackage(input, roofline, csv, *topCount, device, measured, outs,
                          errs, &step);
  }

  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      loadModule(input, &context, diagnostics);
  if (!module)
    return kExitError;

  ModelSummary summary = summarizeModule(*module);
  if (summary.functions.empty()) {
    mlir::emitError(mlir::FileLineColLoc::get(&context, input, 0, 0))
        << "expected a public func.func (the model), found none";
    return kExitError;
  }
  if (dot)
    printDot(*module, outs);
  else
    printSummary(summary, input, outs);
  return kExitOk;
}

} // namespace kiln::cli
