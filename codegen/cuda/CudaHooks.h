//===- CudaHooks.h - the CUDA side of the kernel model's hooks -----*- C++ -*-===//
//
// Internal to codegen/cuda. The kernel model (codegen/KernelModel.h) builds
// every element through KernelHooks; CudaHooks is the CUDA target's side:
// loads that one 16-byte vector load serves (the elementwise layout), the
// lanes a cooperative reduction is split over and how they combine (warp
// shuffles, or a block's shared memory), and constants as module globals.
// Thread indices, shuffles and the other CUDA builtins are calls of
// `kiln.*` intrinsics (Intrinsics below), which CudaPrinter.cpp writes as
// CUDA builtins and prelude functions.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAHOOKS_H
#define KILN_CODEGEN_CUDA_CUDAHOOKS_H

#include "codegen/KernelModel.h"

#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cuda_emitter {

// Calls of `kiln.*` intrinsics (the printer maps them to CUDA builtins and
// prelude functions), declared in the kernel's module once per name and
// signature.
class Intrinsics {
public:
  explicit Intrinsics(mlir::ModuleOp module) : module_(module) {}

  llvm::SmallVector<mlir::Value> call(mlir::OpBuilder &b, mlir::Location loc,
                                      llvm::StringRef name,
                                      mlir::ValueRange args,
                                      mlir::TypeRange results);

  // A call of |name| returning one index (a thread or block coordinate).
  mlir::Value index(mlir::OpBuilder &b, mlir::Location loc,
                    llvm::StringRef name) {
    return call(b, loc, name, {}, {b.getIndexType()})[0];
  }

private:
  mlir::ModuleOp module_;
  std::map<std::string, std::string> declared_;
};

class CudaHooks : public KernelHooks {
public:
  CudaHooks(mlir::ModuleOp module, const KernelModel &model,
            mlir::ValueRange inputs, Intrinsics &intrinsics)
      : model_(model), inputs_(inputs.begin(), inputs.end()),
        intrinsics_(intrinsics), constants_(module) {}

  mlir::Value loadInput(mlir::OpBuilder &b, mlir::Location loc, unsigned input,
                        mlir::ValueRange indices) override;
  mlir::Value loadConstant(mlir::OpBuilder &b, mlir::Location loc,
                           ConstantOp constant,
                           mlir::ValueRange indices) override;
  std::optional<ReductionLanes> reductionLanes(mlir::OpBuilder &b) override;
  mlir::Value combineLanes(mlir::OpBuilder &b, mlir::Location loc,
                           ReduceKind kind, mlir::Value value) override;

  // Cooperative reductions built directly in |block| use these lanes.
  void setCooperative(mlir::Block *block, mlir::Value lane, mlir::Value count,
                      bool blockScope) {
    coopBlock_ = block;
    lane_ = lane;
    laneCount_ = count;
    blockScope_ = blockScope;
  }
  // Vector loads for the elementwise layout: inputs of |shape| read at
  // |indices|[k] come from one kiln.vload at |base|, built at the start of
  // |body|.
  void setVector(unsigned width, llvm::ArrayRef<int64_t> shape,
                 mlir::Block *body, mlir::Value base,
                 std::vector<llvm::SmallVector<mlir::Value, 4>> indices) {
    vectorWidth_ = width;
    vectorShape_.assign(shape.begin(), shape.end());
    vectorBody_ = body;
    vectorBase_ = base;
    vectorIndices_ = std::move(indices);
    vectorLoads_.clear();
  }
  // Before each nest: no cooperation, no vector loads.
  void reset() {
    coopBlock_ = nullptr;
    vectorWidth_ = 0;
    vectorLoads_.clear();
    vectorIndices_.clear();
  }

private:
  const KernelModel &model_;
  llvm::SmallVector<mlir::Value> inputs_;
  Intrinsics &intrinsics_;
  ConstantGlobals constants_;
  mlir::Block *coopBlock_ = nullptr;
  mlir::Value lane_, laneCount_;
  bool blockScope_ = false;
  unsigned vectorWidth_ = 0;
  llvm::SmallVector<int64_t, 4> vectorShape_;
  mlir::Block *vectorBody_ = nullptr;
  mlir::Value vectorBase_;
  std::vector<llvm::SmallVector<mlir::Value, 4>> vectorIndices_;
  std::map<unsigned, llvm::SmallVector<mlir::Value>> vectorLoads_;
};

} // namespace kiln::cuda_emitter

#endif // KILN_CODEGEN_CUDA_CUDAHOOKS_H
