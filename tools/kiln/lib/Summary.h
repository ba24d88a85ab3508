//===- Summary.h - what `kiln inspect` reports about a model ------*- C++ -*-===//
//
// A model summary computed from the module alone: the function's inputs and
// outputs with their roles, the parameters with their sizes, the FLOPs of one
// forward step summed from each op's kiln::CostInterface::getFlops(), and a
// histogram of ops. Kept apart from the printing so tests can check numbers.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_SUMMARY_H
#define KILN_TOOLS_KILN_LIB_SUMMARY_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

// One function argument or result.
struct TensorInfo {
  std::string name;  // kiln.name, else "arg<i>" / "result<i>"
  std::string role;  // the kiln.role keyword, else "-"
  std::vector<int64_t> shape;
  std::string dtype; // "f32", "i32", ...
  int64_t elements = 0;
  int64_t bytes = 0;
  std::string init;  // the kiln.init kind of a parameter, else ""
  // An integer input or label: the bound it is read under as indices (its
  // kiln.index_bound, else what kiln-mark-index-bounds would find), which
  // kiln train checks the data against; 0 none.
  int64_t indexBound = 0;
};

struct FunctionSummary {
  std::string name;
  std::vector<TensorInfo> inputs;     // arguments that are not parameters
  std::vector<TensorInfo> parameters; // arguments with role parameter
  std::vector<TensorInfo> outputs;
  int64_t parameterElements = 0;
  int64_t parameterBytes = 0;
  // Sum of getFlops() over the ops of the body (a kiln.fusion counts its body
  // once, through its own getFlops()).
  int64_t flops = 0;
  // Ops in the body, nested ones included, terminators excluded.
  int64_t opCount = 0;
  // (op name, count), most frequent first, then by name.
  std::vector<std::pair<std::string, int64_t>> histogram;
  // Names of ops that have no cost interface (not counted in |flops|).
  std::vector<std::string> uncosted;
};

struct ModelSummary {
  std::vector<FunctionSummary> functions; // the public functions, in order
  std::string training;                   // the #kiln.training, printed, or ""
};

FunctionSummary summarizeFunction(mlir::func::FuncOp function);
ModelSummary summarizeModule(mlir::ModuleOp module);

// "128x784", or "scalar" for rank 0.
std::string formatShape(llvm::ArrayRef<int64_t> shape);

// The text `kiln inspect` prints for |summary| of the file |path|.
void printSummary(const ModelSummary &summary, llvm::StringRef path,
                  llvm::raw_ostream &os);

// A Graphviz digraph of the public functions' ops: one node per argument and
// per top-level op (a kiln.fusion is one node), edges along SSA uses.
void printDot(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_SUMMARY_H
