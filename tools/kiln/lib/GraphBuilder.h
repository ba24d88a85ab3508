//===- GraphBuilder.h - building training graphs in the kiln dialect *- C++ -*-===//
//
// The model zoo writes models with this helper: it owns one module with one
// public function, appends arguments with their kiln.role / kiln.name /
// kiln.init attributes as the model asks for them, names every op through a
// NameLoc (the graph file's node names), and at the end returns the loss,
// attaches the training section and verifies the module. Ops themselves are
// created with mlir::OpBuilder and the generated builders; ops whose result
// type is inferred (InferTypeOpAdaptor) are created without one.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_GRAPHBUILDER_H
#define KILN_TOOLS_KILN_LIB_GRAPHBUILDER_H

#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace kiln::cli {

class GraphBuilder {
public:
  // |seed| is the first parameter's initializer seed; parameter i gets
  // seed + i, so every parameter draws different values.
  GraphBuilder(mlir::MLIRContext *context, llvm::StringRef functionName,
               int64_t seed);

  mlir::MLIRContext *getContext() { return context; }
  mlir::OpBuilder &builder() { return b; }
  mlir::Type f32() { return b.getF32Type(); }
  mlir::Type i32() { return b.getI32Type(); }

  // Function arguments.
  mlir::Value addInput(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                       mlir::Type elementType);
  mlir::Value addLabel(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                       mlir::Type elementType);
  // An f32 parameter unless |elementType| says otherwise.
  mlir::Value addParameter(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                           kiln::InitKind kind, double value = 0.0,
                           double scale = 1.0, mlir::Type elementType = {});
  // The step counter (a 0-d i64 of role step, from zero) that kiln.dropout
  // reads and kiln-apply-optimizer advances.
  mlir::Value addStepCounter(llvm::StringRef name);
  // Model state (#kiln.role<model_state>, a batch norm's running
  // statistics): an f32 argument filled with |value| at the start, and the
  // value that replaces it after each training step (a result with
  // kiln.updates naming it, added by finish()).
  // f32 unless |elementType| says otherwise.
  mlir::Value addModelState(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                            double value, mlir::Type elementType = {});
  void updateModelState(mlir::Value state, mlir::Value next);

  // Batch normalization over dimension 1 (the channels) of |x| [N, C, ...]:
  // (x - mean) * rsqrt(var + epsilon) * scale + bias, with mean, var,
  // scale and bias [C].
  mlir::Value normalizeChannels(const std::string &name, mlir::Value x,
                                mlir::Value mean, mlir::Value var,
                                mlir::Value scale, mlir::Value bias,
                                double epsilon);
  // A batch norm as PyTorch's nn.BatchNorm2d: a training step normalizes
  // with the batch's mean and biased variance over every dimension but 1
  // and updates the model state |runningMean| and |runningVar| to
  // (1 - momentum) * running + momentum * batch (the variance unbiased); an
  // eval step normalizes with the running statistics (kiln.mode_select).
  // |x| needs more than one value per channel.
  mlir::Value batchNorm(const std::string &name, mlir::Value x, mlir::Value scale,
                        mlir::Value bias, mlir::Value runningMean,
                        mlir::Value runningVar, double epsilon, double momentum);

  // A location naming one graph node; a repeated name gets a ".N" suffix.
  mlir::Location loc(const llvm::Twine &name);

  // A constant |value| of |type|, made as a 0-d constant broadcast to the
  // shape, so a large splat costs one element in any file format.
  mlir::Value splat(const llvm::Twine &name, double value,
                    mlir::RankedTensorType type);
  // kiln.broadcast_in_dim of |operand| to |shape|, operand dim i -> dims[i].
  mlir::Value broadcast(const llvm::Twine &name, mlir::Value operand,
                        llvm::ArrayRef<int64_t> dims,
                        llvm::ArrayRef<int64_t> shape);
  mlir::Value reshape(const llvm::Twine &name, mlir::Value operand,
                      llvm::ArrayRef<int64_t> shape);
  // |x| [..., in] times |weight| [in, out] plus |bias| [out] (may be null).
  mlir::Value linear(const llvm::Twine &name, mlir::Value x, mlir::Value weight,
                     mlir::Value bias);
  // mean(softmax_cross_entropy(logits [N, C], labels [N])).
  mlir::Value meanCrossEntropy(const llvm::Twine &name, mlir::Value logits,
                               mlir::Value labels);

  // Returns |loss| (a 0-d float tensor, role loss), attaches |training| to the
  // module and verifies it. Returns null after emitting diagnostics when the
  // module does not verify.
  mlir::OwningOpRef<mlir::ModuleOp> finish(mlir::Value loss,
                                           kiln::TrainingAttr training);

  static mlir::RankedTensorType tensor(llvm::ArrayRef<int64_t> shape,
                                       mlir::Type elementType) {
    return mlir::RankedTensorType::get(shape, elementType);
  }
  static llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
  }

private:
  mlir::Value addArgument(llvm::StringRef name, mlir::RankedTensorType type,
                          kiln::Role role, kiln::InitializerAttr init);

  mlir::MLIRContext *context;
  mlir::OpBuilder b;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp function;
  llvm::SmallVector<mlir::DictionaryAttr> argumentAttrs;
  // (the model state's argument, its next value), in the order given.
  llvm::SmallVector<std::pair<mlir::BlockArgument, mlir::Value>> stateUpdates;
  llvm::StringMap<unsigned> nameCounts;
  int64_t nextSeed;
};

// Builds a #kiln.training from the optimizer and learning rate; the other
// hyper-parameters keep their defaults (momentum 0.9 for momentum SGD).
kiln::TrainingAttr makeTraining(mlir::MLIRContext *context,
                                kiln::OptimizerKind optimizer,
                                double learningRate);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_GRAPHBUILDER_H
