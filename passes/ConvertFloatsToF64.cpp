//===- ConvertFloatsToF64.cpp - compute everything in f64 -----------------===//
//
// Gradient checking compares autodiff with finite differences, which need
// f64 to be meaningful. Rather than give the interpreter a second mode, the
// step itself is rewritten: every floating-point tensor type becomes f64 and
// floating constants are widened. Ops are type-generic, so they stay valid.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"

#define DEBUG_TYPE "kiln-convert-floats-to-f64"

namespace kiln {
#define GEN_PASS_DEF_KILNCONVERTFLOATSTOF64
#include "passes/Passes.h.inc"

namespace {

mlir::Type widen(mlir::Type type) {
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !llvm::isa<mlir::FloatType>(tensor.getElementType()))
    return type;
  return tensor.clone(mlir::Float64Type::get(type.getContext()));
}

struct ConvertFloatsToF64Pass
    : impl::KilnConvertFloatsToF64Base<ConvertFloatsToF64Pass> {
  void runOnOperation() override {
    getOperation().walk([&](mlir::Operation *op) {
      for (mlir::Region &region : op->getRegions())
        for (mlir::Block &block : region)
          for (mlir::BlockArgument arg : block.getArguments())
            arg.setType(widen(arg.getType()));
      for (mlir::OpResult result : op->getResults())
        result.setType(widen(result.getType()));
      if (auto constant = llvm::dyn_cast<ConstantOp>(op)) {
        auto dense = llvm::dyn_cast<mlir::DenseElementsAttr>(constant.getValue());
        if (!dense)
          return;
        auto type = llvm::cast<mlir::ShapedType>(widen(dense.getType()));
        if (type == dense.getType())
          return;
        // A splat stays a splat: spelled out, a zero-filled activation
        // buffer of a large model is gigabytes of host memory.
        if (dense.isSplat()) {
          llvm::APFloat value = dense.getSplatValue<llvm::APFloat>();
          bool losesInfo = false;
          value.convert(llvm::APFloat::IEEEdouble(),
                        llvm::APFloat::rmNearestTiesToEven, &losesInfo);
          constant.setValueAttr(mlir::DenseElementsAttr::get(type, value));
          return;
        }
        constant.setValueAttr(attrFromHostTensor(hostTensorFromAttr(dense), type));
      }
      if (auto func = llvm::dyn_cast<mlir::func::FuncOp>(op)) {
        auto type = func.getFunctionType();
        llvm::SmallVector<mlir::Type> inputs, results;
        for (mlir::Type t : type.getInputs())
          inputs.push_back(widen(t));
        for (mlir::Type t : type.getResults())
          results.push_back(widen(t));
        func.setFunctionType(
            mlir::FunctionType::get(func.getContext(), inputs, results));
      }
    });
  }
};

} // namespace
} // namespace kiln
