//===- ModuleLoader.cpp - read and write model files ----------------------===//
//
// The single place where the CLI touches model files. A missing file, a file
// of the wrong kind or a module that does not verify is reported through the
// context's diagnostics with the path in the message; nothing here aborts.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/ModuleLoader.h"

#include "tools/kiln/lib/Diagnostics.h"

#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include "serialize/GraphExport.h"
#include "serialize/GraphImport.h"

namespace kiln::cli {

void registerKilnDialects(mlir::DialectRegistry &registry) {
  registry.insert<kiln::KilnDialect, mlir::func::FuncDialect>();
}

bool isTextPath(llvm::StringRef path) {
  return path == "-" || llvm::sys::path::extension(path) == ".mlir";
}

static mlir::Location fileLocation(mlir::MLIRContext *context,
                                   llvm::StringRef path) {
  return mlir::FileLineColLoc::get(context, path, 0, 0);
}

mlir::OwningOpRef<mlir::ModuleOp> loadModule(llvm::StringRef path,
                                             mlir::MLIRContext *context,
                                             DiagnosticPrinter &diagnostics) {
  diagnostics.setCurrentFile(path);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> bufferOr =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/false);
  if (std::error_code error = bufferOr.getError()) {
    mlir::emitError(fileLocation(context, path))
        << "cannot read the model file: " << error.message();
    return nullptr;
  }
  std::unique_ptr<llvm::MemoryBuffer> buffer = std::move(*bufferOr);

  if (llvm::sys::path::extension(path) == ".onnx") {
    mlir::emitError(fileLocation(context, path))
        << "an ONNX model: convert it with `kiln import " << path
        << " -o MODEL.kiln`, which also writes its weights for --init-from";
    return nullptr;
  }

  if (isTextPath(path)) {
    llvm::SourceMgr &sourceMgr = diagnostics.sourceMgr();
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    mlir::ParserConfig config(context);
    // parseSourceFile verifies the module and reports at FILE:LINE:COL.
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, config);
    return module;
  }

  diagnostics.setImporting(true);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      kiln::importGraph(buffer->getBuffer(), path, context);
  diagnostics.setImporting(false);
  if (!module)
    return nullptr;
  // The importer verifies already; checking again keeps the contract of this
  // function independent of the importer.
  if (mlir::failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

mlir::LogicalResult writeTextFile(mlir::MLIRContext *context,
                                  llvm::StringRef path, llvm::StringRef text) {
  std::error_code error;
  auto file = std::make_unique<llvm::ToolOutputFile>(path, error,
                                                     llvm::sys::fs::OF_None);
  if (error)
    return mlir::emitError(fileLocation(context, path))
           << "cannot write the output file: " << error.message();
  file->os() << text;
  file->os().flush();
  if (file->os().has_error())
    return mlir::emitError(fileLocation(context, path))
           << "cannot write the output file: "
           << file->os().error().message();
  file->keep();
  return mlir::success();
}

mlir::LogicalResult writeModuleText(mlir::ModuleOp module,
                                    llvm::StringRef path) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  os << "\n";
  return writeTextFile(module.getContext(), path, text);
}

mlir::LogicalResult writeModule(mlir::ModuleOp module, llvm::StringRef path) {
  mlir::MLIRContext *context = module.getContext();
  if (isTextPath(path))
    return writeModuleText(module, path);
  std::vector<uint8_t> bytes;
  if (mlir::failed(kiln::exportGraph(module, bytes)))
    return mlir::emitError(fileLocation(context, path))
           << "cannot write the model as a graph file (see above); an .mlir "
              "output keeps every op";
  return writeTextFile(
      context, path,
      llvm::StringRef(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
}

} // namespace kiln::cli
