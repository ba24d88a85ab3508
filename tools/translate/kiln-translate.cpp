//===- kiln-translate.cpp - graph file <-> MLIR ---------------------------===//
//
//   kiln-translate --mlir-to-kiln model.mlir -o model.kiln
//   kiln-translate --kiln-to-mlir model.kiln [-o model.mlir]
//
// A thin main over serialize/ (importGraph, exportGraph) for tests and for
// looking inside graph files. Errors in a graph file print as
// `FILE: error: node 'NAME': PROBLEM`; errors in MLIR text print with their
// line and column. Any error exits with code 1.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnDialect.h"
#include "serialize/GraphExport.h"
#include "serialize/GraphImport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

enum class Direction { None, MlirToKiln, KilnToMlir };

// The file a graph-file diagnostic is about: the FileLineColLoc the importer
// nests in every location.
std::string fileOf(Location loc, StringRef fallback) {
  std::string file = fallback.str();
  loc->walk([&](Location inner) {
    if (auto flc = dyn_cast<FileLineColLoc>(inner)) {
      file = flc.getFilename().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return file;
}

StringRef severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Note:
    return "note";
  case DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

int kilnToMlir(MLIRContext &context, StringRef input, StringRef output) {
  ScopedDiagnosticHandler printer(&context, [&](Diagnostic &diag) {
    llvm::errs() << fileOf(diag.getLocation(), input) << ": "
                 << severityName(diag.getSeverity()) << ": " << diag << "\n";
    for (Diagnostic &note : diag.getNotes())
      llvm::errs() << fileOf(note.getLocation(), input) << ": note: " << note
                   << "\n";
    return success();
  });
  std::string message;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(input, &message);
  if (!buffer) {
    llvm::errs() << input << ": error: " << message << "\n";
    return 1;
  }
  OwningOpRef<ModuleOp> module =
      kiln::importGraph(buffer->getBuffer(), input, &context);
  if (!module)
    return 1;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(output, &message);
  if (!out) {
    llvm::errs() << output << ": error: " << message << "\n";
    return 1;
  }
  module->print(out->os());
  out->os() << "\n";
  out->keep();
  return 0;
}

int mlirToKiln(MLIRContext &context, StringRef input, StringRef output) {
  std::string message;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(input, &message);
  if (!buffer) {
    llvm::errs() << input << ": error: " << message << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  SourceMgrDiagnosticHandler printer(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;
  std::vector<uint8_t> bytes;
  if (failed(kiln::exportGraph(*module, bytes)))
    return 1;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(output, &message);
  if (!out) {
    llvm::errs() << output << ": error: " << message << "\n";
    return 1;
  }
  out->os().write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  out->keep();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::OptionCategory category("kiln-translate options");
  cl::opt<Direction> direction(
      cl::desc("Translation:"), cl::init(Direction::None), cl::cat(category),
      cl::values(clEnumValN(Direction::MlirToKiln, "mlir-to-kiln",
                            "MLIR text (kiln dialect) to a .kiln graph file"),
                 clEnumValN(Direction::KilnToMlir, "kiln-to-mlir",
                            ".kiln graph file to MLIR text")));
  cl::opt<std::string> input(cl::Positional, cl::desc("<input file>"),
                             cl::Required, cl::cat(category));
  cl::opt<std::string> output("o", cl::desc("Output file (default: stdout)"),
                              cl::value_desc("file"), cl::init("-"),
                              cl::cat(category));
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  // libLLVM registers hundreds of options; --help shows ours only (the MLIR
  // printer flags, e.g. --mlir-print-debuginfo, still work).
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kiln-translate: .kiln graph files <-> MLIR\n\n"
      "  kiln-translate --mlir-to-kiln model.mlir -o model.kiln\n"
      "  kiln-translate --kiln-to-mlir model.kiln [-o model.mlir]\n\n"
      "MLIR printer flags (--mlir-print-debuginfo shows node names in\n"
      "locations, --mlir-print-op-generic the generic form) also apply.\n");
  if (direction == Direction::None) {
    llvm::errs() << "kiln-translate: error: choose --mlir-to-kiln or "
                    "--kiln-to-mlir (see --help)\n";
    return 1;
  }

  DialectRegistry registry;
  registry.insert<kiln::KilnDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  return direction == Direction::MlirToKiln ? mlirToKiln(context, input, output)
                                            : kilnToMlir(context, input, output);
}
