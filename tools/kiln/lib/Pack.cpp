//===- Pack.cpp - `kiln pack` ---------------------------------------------===//
//
// `kiln pack MODEL|STEP.kpkg -o TRAINER` writes one executable that trains
// the model on a machine with no Kiln, MLIR or LLVM installed
// (PackedTrainer.h): the trainer stub kiln-trainer (beside this kiln),
// then the training step's package and, for a model, its eval package, as
// `kiln train` compiles them (the same flags), and every kernel compiled
// ahead of time into one shared library:
//
//   each distinct kernel's LLVM bitcode is compiled (CodeGenOptLevel::
//   Aggressive, as the runtime's ORC loader does, position-independent) for
//   --cpu (an x86-64 level; default x86-64-v3: AVX2 and FMA), its entry
//   point renamed to runtime/cpu/SharedObjectKernelLoader.h's symbol and
//   every other definition made internal; the system's C compiler (cc, or
//   $CC) links the objects and a definition of __truncsfbf2 (Bf16Libcall.h)
//   into the library.
//
// The trainer checks at start that its CPU has the level's instructions.
//
// --target=cuda[:sm_NN] packs CUDA packages instead (as `kiln train
// --device=cuda` compiles them, with PTX and a cubin for sm_NN, default
// sm_90, and their source, which the runtime compiles through NVRTC for
// another GPU); they need no kernel library. The trainer then runs on a
// GPU through the CUDA libraries it dlopens, as kiln-cuda-run does.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/AmpFlags.h"
#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/CudaCompile.h"
#include "tools/kiln/lib/DistFlags.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/OptimizerFlags.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/PackedTrainer.h"
#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainCompile.h"

#include "runtime/Files.h"
#include "runtime/cpu/SharedObjectKernelLoader.h"
#include "runtime/package/Package.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>

namespace kiln::cli {
namespace {

constexpr llvm::StringLiteral kCommand = "kiln pack";

// __truncsfbf2 as Bf16Libcall.h's kiln_truncsfbf2 (runtime/Half.h's
// floatToBf16: round to nearest even, a NaN kept quiet), hidden in the
// kernel library.
constexpr const char *kBf16Helper = R"(#include <stdint.h>
#include <string.h>
__attribute__((visibility("hidden"))) float __truncsfbf2(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t b = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40)
                                               : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  b &= 0xffffu;
  float out;
  memcpy(&out, &b, 4);
  return out;
}
)";

bool readFile(const std::string &path, std::string &bytes, llvm::raw_ostream &errs) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer) {
    printError(errs, kCommand, "cannot read " + path + ": " + buffer.getError().message());
    return false;
  }
  bytes = (*buffer)->getBuffer().str();
  return true;
}

// |kernel|'s bitcode compiled for |machine| into an object whose only
// external definition is |symbol|; "" and |error| on failure.
std::string compileKernel(const runtime::PackageKernel &kernel, const std::string &symbol,
                          llvm::TargetMachine &machine, std::string &error) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::MemoryBuffer> buffer = llvm::MemoryBuffer::getMemBuffer(
      llvm::StringRef(reinterpret_cast<const char *>(kernel.object.data()),
                      kernel.object.size()),
      kernel.name, /*RequiresNullTerminator=*/false);
  llvm::Expected<std::unique_ptr<llvm::Module>> parsed =
      llvm::parseBitcodeFile(buffer->getMemBufferRef(), context);
  if (!parsed) {
    error = "its bitcode does not parse: " + llvm::toString(parsed.takeError());
    return "";
  }
  llvm::Module &module = **parsed;
  llvm::Triple triple(module.getTargetTriple());
  if (!triple.getTriple().empty() &&
      triple.getArch() != machine.getTargetTriple().getArch()) {
    error = "it was compiled for " + triple.getTriple() + ", not for " +
            machine.getTargetTriple().getTriple();
    return "";
  }
  llvm::Function *entry = module.getFunction(kernel.entryPoint);
  if (!entry || entry->isDeclaration()) {
    error = "its bitcode defines no function @" + kernel.entryPoint;
    return "";
  }
  // As the runtime's loader does (OrcKernelLoader.cpp, retargetToHost):
  // the vector IR is generic; the CPU is the machine's.
  for (llvm::Function &f : module) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    f.removeFnAttr("tune-cpu");
  }
  module.setTargetTriple(machine.getTargetTriple().getTriple());
  module.setDataLayout(machine.createDataLayout());
  for (llvm::GlobalValue &value : module.global_values())
    if (!value.isDeclaration() && &value != entry)
      value.setLinkage(llvm::GlobalValue::InternalLinkage);
  entry->setName(symbol);
  entry->setLinkage(llvm::GlobalValue::ExternalLinkage);
  entry->setVisibility(llvm::GlobalValue::DefaultVisibility);
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    error = "LLVM cannot emit an object file for " + machine.getTargetTriple().getTriple();
    return "";
  }
  passes.run(module);
  return std::string(object.begin(), object.end());
}

// The kernel library of |packages|' kernels for CPU |cpu|, linked in
// |dir|; "" after printing the problem.
std::string buildKernelLibrary(const std::vector<const runtime::LoadedPackage *> &packages,
                               const std::string &cpu, const std::string &dir,
                               size_t &kernelCount, llvm::raw_ostream &errs) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  std::string triple = llvm::sys::getProcessTriple(), error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) {
    printError(errs, kCommand, "LLVM cannot target " + triple + ": " + error);
    return "";
  }
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, cpu, "", llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine) {
    printError(errs, kCommand, "--cpu=" + cpu + ": LLVM has no such CPU for " + triple);
    return "";
  }
  std::map<std::string, std::string> objects; // symbol -> object file
  for (const runtime::LoadedPackage *package : packages)
    for (size_t i = 0; i < package->kernels.size(); ++i) {
      const runtime::PackageKernel &kernel = package->kernels[i];
      std::string where = "kernel " + std::to_string(i) + " (\"" + kernel.name + "\")";
      if (kernel.kind != runtime::KernelKind::LlvmBitcode) {
        printError(errs, kCommand,
                   where + ": expected LLVM bitcode, the code of a CPU package");
        return "";
      }
      std::string symbol = runtime::cpu::packedKernelSymbol(kernel);
      if (objects.count(symbol))
        continue;
      std::string object = compileKernel(kernel, symbol, *machine, error);
      if (object.empty()) {
        printError(errs, kCommand, where + ": " + error);
        return "";
      }
      std::string path = dir + "/k" + std::to_string(objects.size()) + ".o";
      if (runtime::Status s = runtime::writeFileAtomically(path, object); !s.isOk()) {
        printError(errs, kCommand, s.message());
        return "";
      }
      objects[symbol] = path;
    }
  kernelCount = objects.size();
  std::string helper = dir + "/bf16.c";
  if (runtime::Status s = runtime::writeFileAtomically(helper, kBf16Helper); !s.isOk()) {
    printError(errs, kCommand, s.message());
    return "";
  }
  // Link with the system's C compiler driver.
  const char *cc = std::getenv("CC");
  std::string ccName = cc && *cc ? cc : "cc";
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(ccName);
  if (!program) {
    printError(errs, kCommand,
               "cannot find the C compiler '" + ccName +
                   "' that links the kernel library (set CC, or install cc)");
    return "";
  }
  std::string library = dir + "/kernels.so", log = dir + "/link.log";
  std::vector<std::string> argv = {*program, "-shared", "-fPIC", "-O2", "-o", library, helper};
  for (const auto &[symbol, path] : objects)
    argv.push_back(path);
  argv.push_back("-lm");
  std::vector<llvm::StringRef> args(argv.begin(), argv.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(*program, args, std::nullopt, redirects, 0, 0, &message);
  if (rc != 0) {
    std::string output;
    std::ifstream in(log);
    output.assign(std::istreambuf_iterator<char>(in), {});
    printError(errs, kCommand,
               "linking the kernel library with " + *program + " failed" +
                   (message.empty() ? "" : ": " + message) +
                   (output.empty() ? "" : ":\n" + output));
    return "";
  }
  std::string bytes;
  if (!readFile(library, bytes, errs))
    return "";
  return bytes;
}

} // namespace

int runPack(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
            llvm::raw_ostream &errs) {
  std::string input, output, cpu, targetText;
  OptimizerFlags optimizerFlags;
  AmpFlags ampFlags;
  DistFlags distFlags;
  FlagParser parser(
      kCommand.str(), "FILE -o TRAINER [--cpu=LEVEL] [compile options]",
      "Writes TRAINER: one executable that trains FILE's training step on the\n"
      "CPU of a machine with no Kiln, MLIR or LLVM (it needs the C and C++\n"
      "runtime, OpenBLAS, zlib and Gloo's shared libraries). FILE is compiled\n"
      "as `kiln train` compiles it (the same flags), with its eval step; a\n"
      "package (.kpkg) is packed as it is, without one. Every kernel is\n"
      "compiled ahead of time for --cpu and linked into one shared library\n"
      "inside TRAINER (by the C compiler cc, or $CC). With --target=cuda the\n"
      "step is compiled for a GPU instead and TRAINER runs it through the\n"
      "CUDA libraries of the machine it runs on. TRAINER takes `kiln train`'s\n"
      "data, step, checkpoint and metrics flags (TRAINER --help); under\n"
      "`kiln launch` each process is one rank. See docs/training.md.");
  parser.addPositional("FILE", &input,
                       "a graph file (.kiln), MLIR text (.mlir) or a CPU step package (.kpkg)");
  parser.addValue("output", &output, "TRAINER", "the executable to write", 'o');
  parser.addValue("cpu", &cpu, "LEVEL",
                  "the x86-64 level the kernels are compiled for: x86-64, "
                  "x86-64-v2, x86-64-v3 (AVX2, FMA; the default) or "
                  "x86-64-v4 (AVX-512); TRAINER refuses to run on a CPU "
                  "without its instructions");
  parser.addValue("target", &targetText, "TARGET",
                  "cpu (the default) or cuda[:sm_NN] (a GPU trainer: CUDA "
                  "kernels for sm_NN, sm_90 by default, recompiled by NVRTC "
                  "for another GPU at start)");
  addDistFlags(parser, distFlags,
               "number of ranks the step is compiled for (default 1; more "
               "needs a --strategy)");
  addAmpFlags(parser, ampFlags);
  addOptimizerFlags(parser, optimizerFlags);
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  if (output.empty()) {
    printError(errs, kCommand, "missing -o TRAINER: where to write the trainer");
    return kExitUsage;
  }
  bool cuda = llvm::StringRef(targetText).starts_with("cuda");
  std::vector<unsigned> archs;
  if (cuda) {
    std::string error;
    if (!parseCudaTarget(targetText, archs, error) || archs.size() != 1) {
      printError(errs, kCommand,
                 "--target=" + targetText + ": expected cpu, cuda or cuda:sm_NN");
      return kExitError;
    }
    if (!cpu.empty()) {
      printError(errs, kCommand, "--cpu=" + cpu + ": a CUDA trainer has no CPU kernels");
      return kExitError;
    }
  } else if (!targetText.empty() && targetText != "cpu") {
    printError(errs, kCommand,
               "--target=" + targetText + ": expected cpu, cuda or cuda:sm_NN");
    return kExitError;
  }
#if defined(__x86_64__)
  if (cpu.empty() && !cuda)
    cpu = "x86-64-v3";
  if (!cuda && cpu != "x86-64" && cpu != "x86-64-v2" && cpu != "x86-64-v3" &&
      cpu != "x86-64-v4") {
    printError(errs, kCommand,
               "--cpu=" + cpu + ": expected x86-64, x86-64-v2, x86-64-v3 or x86-64-v4");
    return kExitError;
  }
#else
  if (cpu.empty() && !cuda)
    cpu = "generic";
  if (!cuda && cpu != "generic") {
    printError(errs, kCommand, "--cpu=" + cpu + ": expected generic on this architecture");
    return kExitError;
  }
#endif
  BackendOptions options;
  options.input = input;
  options.wantEval = true;
  if (!parseDistFlags(kCommand, distFlags, options.pipeline, errs) ||
      !parseAmpFlags(kCommand, ampFlags, options.pipeline, errs) ||
      !parseOptimizerFlags(kCommand, optimizerFlags, options.pipeline.optimizer, errs))
    return kExitError;
  bool isPackage = llvm::sys::path::extension(input) == ".kpkg";
  std::vector<std::string> flagWords;
  for (const std::string &arg : args)
    if (llvm::StringRef(arg).starts_with("--") && !llvm::StringRef(arg).starts_with("--output") &&
        !llvm::StringRef(arg).starts_with("--cpu") &&
        !llvm::StringRef(arg).starts_with("--target"))
      flagWords.push_back(arg);
  if (isPackage && !flagWords.empty()) {
    printError(errs, kCommand,
               input + ": a package has its step compiled in; drop " +
                   llvm::join(flagWords, " ") + " or pack the .kiln file");
    return kExitError;
  }
  if (!isPackage)
    if (std::string problem = checkPipelineOptions(options.pipeline); !problem.empty()) {
      printError(errs, kCommand, problem);
      return kExitError;
    }

  // The trainer stub, beside this kiln.
  std::string self = llvm::sys::fs::getMainExecutable(nullptr, (void *)&runPack);
  std::string stubPath = (llvm::sys::path::parent_path(self) + "/kiln-trainer").str();
  std::string stub;
  if (!llvm::sys::fs::exists(stubPath)) {
    printError(errs, kCommand,
               "cannot find the trainer stub " + stubPath +
                   " (build the kiln-trainer target; it is installed beside kiln)");
    return kExitError;
  }
  if (!readFile(stubPath, stub, errs))
    return kExitError;

  // The packages.
  PackedTrainer trainer;
  llvm::SmallString<128> dir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("kiln-pack", dir)) {
    printError(errs, kCommand, "cannot create a temporary directory: " + ec.message());
    return kExitError;
  }
  struct Remove {
    std::string dir;
    ~Remove() { llvm::sys::fs::remove_directories(dir); }
  } remove{dir.str().str()};
  if (isPackage) {
    if (!readFile(input, trainer.step, errs))
      return kExitError;
  } else {
    options.packageDir = (dir + "/packages").str();
    TrainPackages packages;
    llvm::raw_null_ostream quiet;
    bool compiled =
        cuda ? compileCudaTrainPackages(options, archs.front(), /*cubins=*/true,
                                        kCommand, quiet, errs, packages)
             : compileTrainPackages(
                   options, kCommand, "kiln-pack",
                   [&](mlir::ModuleOp module, llvm::StringRef model,
                       llvm::StringRef source, llvm::ArrayRef<std::string> flags,
                       const std::string &path) {
                     return writeStepPackage(module, model, source, flags, path,
                                             kCommand, errs);
                   },
                   quiet, errs, packages);
    if (!compiled)
      return kExitError;
    if (!readFile(packages.trainPath, trainer.step, errs) ||
        (!packages.evalPath.empty() && !readFile(packages.evalPath, trainer.eval, errs)))
      return kExitError;
  }
  std::vector<runtime::LoadedPackage> loaded;
  for (const std::string *bytes : {&trainer.step, &trainer.eval}) {
    if (bytes->empty())
      continue;
    runtime::StatusOr<runtime::LoadedPackage> package = runtime::loadPackageFromBytes(
        reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size());
    if (!package.isOk()) {
      printError(errs, kCommand, input + ": " + package.status().message());
      return kExitError;
    }
    if (bytes == &trainer.step && package->target.kind == runtime::TargetKind::Cuda)
      cuda = true; // a CUDA .kpkg packs as a GPU trainer
    if ((package->target.kind == runtime::TargetKind::Cuda) != cuda) {
      printError(errs, kCommand,
                 input + ": the package targets " +
                     (cuda ? "the CPU: expected a CUDA package (--target=cuda)"
                           : "CUDA: expected a CPU package (compile it with "
                             "--target=cpu)"));
      return kExitError;
    }
    loaded.push_back(std::move(package.value()));
  }
  std::vector<const runtime::LoadedPackage *> packages;
  for (const runtime::LoadedPackage &p : loaded)
    packages.push_back(&p);
  size_t kernelCount = 0;
  if (cuda) {
    cpu.clear();
    for (const runtime::LoadedPackage *p : packages)
      kernelCount += p->kernels.size();
  } else {
    trainer.kernels = buildKernelLibrary(packages, cpu, dir.str().str(), kernelCount, errs);
    if (trainer.kernels.empty())
      return kExitError;
  }

  const runtime::LoadedPackage &step = loaded.front();
  trainer.manifest["format"] = "1";
  trainer.manifest["model"] = step.metadata.modelName.empty()
                                  ? llvm::sys::path::stem(input).str()
                                  : step.metadata.modelName;
  trainer.manifest["source"] = llvm::sys::path::filename(input).str();
  trainer.manifest["target"] = cuda ? "cuda" : "cpu";
  if (cuda) {
    std::string archList;
    for (const runtime::Cubin &cubin : step.kernels.empty() ? std::vector<runtime::Cubin>{}
                                                            : step.kernels.front().cubins)
      archList += (archList.empty() ? "sm_" : ",sm_") + std::to_string(cubin.arch);
    trainer.manifest["cuda"] = archList.empty() ? "source only" : archList;
  } else {
    trainer.manifest["cpu"] = cpu;
  }
  trainer.manifest["flags"] = llvm::join(flagWords, " ");
  trainer.manifest["world-size"] = std::to_string(step.metadata.worldSize);
  // Mirrored replicas run as threads of the trainer (Mirrored.h).
  if (step.metadata.strategy == runtime::Strategy::Mirrored)
    trainer.manifest["strategy"] = "mirrored";
  std::string bytes = writePackedTrainer(stub, trainer);
  if (runtime::Status s = runtime::writeFileAtomically(output, bytes); !s.isOk()) {
    printError(errs, kCommand, "-o " + output + ": " + s.message());
    return kExitError;
  }
  if (::chmod(output.c_str(), 0755) != 0) {
    printError(errs, kCommand, "cannot make " + output + " executable");
    return kExitError;
  }
  outs << "kiln pack: wrote " << output << " ("
       << llvm::format("%.1f", bytes.size() / 1048576.0) << " MiB): "
       << trainer.manifest["model"] << "'s training step"
       << (trainer.eval.empty() ? "" : " and its eval step") << ", " << kernelCount
       << (cuda ? " CUDA kernels (" + trainer.manifest["cuda"] + ")"
                : " kernels compiled for " + cpu)
       << "; run " << output << " --help\n";
  return kExitOk;
}

} // namespace kiln::cli
