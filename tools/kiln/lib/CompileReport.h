//===- CompileReport.h - what `kiln compile` tells about a step ---*- C++ -*-===//
//
// `--report` prints, per compiled function, the kernels one step launches
// (fusions by kind, library calls, unfused ops), the modelled bytes they
// move, and the planned memory peak against its lower bound (and, with
// --amp, against the same step compiled without mixed precision). `--dump-dir`
// also gets the buffer-assignment report and a Graphviz file of the fused
// step, whose kernels name the graph nodes they came from.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_COMPILEREPORT_H
#define KILN_TOOLS_KILN_LIB_COMPILEREPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace kiln::cli {

// A CUDA step's runtime workspaces beside its plan (CudaCompile.h
// cudaPlanMemory), for the report's device memory line.
struct ReportWorkspaces {
  int64_t bytes = 0;
  unsigned arch = 0;
  std::string parts; // "cuBLASLt workspace 32.00 MiB, ..."
};

// Prints the report of every public function of |module|. With
// |baseline| (the same model compiled with --amp=off) and a mixed-precision
// |amp| name, also the planned memory each function saves against it;
// |besidesAmp| names what else the module has that the baseline lacks
// ("--memory-budget's recomputation"). With |workspaces|, a planned
// function's device memory too: its planned peak and the workspaces.
void printCompileReport(mlir::ModuleOp module, llvm::StringRef path,
                        llvm::raw_ostream &os,
                        mlir::ModuleOp baseline = nullptr,
                        llvm::StringRef amp = "",
                        llvm::StringRef besidesAmp = "",
                        const ReportWorkspaces *workspaces = nullptr);

// Writes buffer-assignment.txt and step.dot into |dir|. Emits a diagnostic
// naming the file that cannot be written.
mlir::LogicalResult writeCompileDumps(mlir::ModuleOp module, llvm::StringRef dir);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_COMPILEREPORT_H
