//===- TrainCompile.cpp - a model's step and eval packages for `kiln train` ===//
//
// compileTrainPackages: the model read and compiled once for the training
// step and once, from a copy taken before the pipeline, for the eval pass.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainCompile.h"

#include "tools/kiln/lib/AmpFlags.h"
#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/ReferenceStep.h"

#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;

namespace kiln::cli {

bool compileTrainPackages(const BackendOptions &options, llvm::StringRef command,
                          llvm::StringRef tempPrefix,
                          const TrainPackageWriter &write,
                          llvm::raw_ostream &outs, llvm::raw_ostream &errs,
                          TrainPackages &packages) {
  DialectRegistry registry;
  registerKilnDialects(registry);
  MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  diagnostics.setShowRemarks(false);
  OwningOpRef<ModuleOp> module = loadModule(options.input, &context, diagnostics);
  if (!module)
    return false;
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> source =
      llvm::MemoryBuffer::getFile(options.input);
  if (!source) {
    printError(errs, command, options.input + ": " + source.getError().message());
    return false;
  }
  OwningOpRef<ModuleOp> evalModule;
  if (options.wantEval)
    evalModule = OwningOpRef<ModuleOp>(cast<ModuleOp>((*module)->clone()));

  std::string dir = options.packageDir;
  if (dir.empty()) {
    llvm::SmallString<128> temp;
    if (std::error_code ec =
            llvm::sys::fs::createUniqueDirectory(tempPrefix, temp)) {
      printError(errs, command,
                 "cannot create a temporary directory: " + ec.message());
      return false;
    }
    packages.tempDir = dir = temp.str().str();
  } else if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    printError(errs, command, dir + ": cannot create it: " + ec.message());
    return false;
  }
  std::string model = llvm::sys::path::stem(options.input).str();

  MemoryBudgetOutcome budget;
  if (failed(runCompilePipeline(*module, options.pipeline, nullptr, &budget)))
    return false;
  if (std::string line = describeMemoryBudget(options.pipeline, budget);
      !line.empty())
    outs << command << ": " << line << "\n";
  packages.trainPath = dir + "/step.kpkg";
  if (failed(write(*module, model, (*source)->getBuffer(), {"train"},
                   packages.trainPath)))
    return false;
  if (!options.packageDir.empty())
    outs << "kiln train: compiled step " << packages.trainPath << "\n";

  if (evalModule) {
    func::FuncOp evalFunc = findModelFunction(*evalModule);
    if (!evalFunc)
      return false;
    unsigned lossIndex = 0;
    for (const ResultInfo &r : describeResults(evalFunc))
      if (r.role == Role::loss)
        lossIndex = r.index;
    exposeCrossEntropyPredictions(evalFunc, lossIndex);
    PipelineOptions forward = options.pipeline;
    forward.trainingStep = false;
    forward.optimize = true;
    forward.dumpDir.clear();
    if (failed(runCompilePipeline(*evalModule, forward)))
      return false;
    packages.evalPath = dir + "/eval.kpkg";
    if (failed(write(*evalModule, model, (*source)->getBuffer(), {"eval"},
                     packages.evalPath)))
      return false;
  }
  return true;
}

} // namespace kiln::cli
