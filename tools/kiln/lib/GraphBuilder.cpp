//===- GraphBuilder.cpp - building training graphs in the kiln dialect ----===//
//
// Arguments are appended to the entry block as the model asks for them; the
// function type and the argument attributes are fixed up in finish(), once
// every argument is known.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/GraphBuilder.h"

#include "passes/Passes.h"

#include "mlir/IR/Verifier.h"

namespace kiln::cli {

GraphBuilder::GraphBuilder(mlir::MLIRContext *context,
                           llvm::StringRef functionName, int64_t seed)
    : context(context), b(context), nextSeed(seed) {
  context->loadDialect<kiln::KilnDialect, mlir::func::FuncDialect>();
  module = mlir::ModuleOp::create(b.getUnknownLoc());
  b.setInsertionPointToEnd(module->getBody());
  function = b.create<mlir::func::FuncOp>(loc(functionName),
                                          functionName,
                                          b.getFunctionType({}, {}));
  mlir::Block *entry = function.addEntryBlock();
  b.setInsertionPointToEnd(entry);
}

mlir::Location GraphBuilder::loc(const llvm::Twine &name) {
  std::string base = name.str();
  unsigned &count = nameCounts[base];
  std::string unique = count == 0 ? base : base + "." + std::to_string(count);
  ++count;
  return mlir::NameLoc::get(b.getStringAttr(unique));
}

mlir::Value GraphBuilder::addArgument(llvm::StringRef name,
                                      mlir::RankedTensorType type,
                                      kiln::Role role,
                                      kiln::InitializerAttr init) {
  llvm::SmallVector<mlir::NamedAttribute> attrs;
  attrs.push_back(b.getNamedAttr(KilnDialect::kRoleAttrName,
                                 kiln::RoleAttr::get(context, role)));
  if (init)
    attrs.push_back(b.getNamedAttr(KilnDialect::kInitAttrName, init));
  attrs.push_back(
      b.getNamedAttr(KilnDialect::kNameAttrName, b.getStringAttr(name)));
  argumentAttrs.push_back(b.getDictionaryAttr(attrs));
  return function.front().addArgument(
      type, mlir::NameLoc::get(b.getStringAttr(name)));
}

mlir::Value GraphBuilder::addInput(llvm::StringRef name,
                                   llvm::ArrayRef<int64_t> shape,
                                   mlir::Type elementType) {
  return addArgument(name, tensor(shape, elementType), kiln::Role::input, {});
}

mlir::Value GraphBuilder::addLabel(llvm::StringRef name,
                                   llvm::ArrayRef<int64_t> shape,
                                   mlir::Type elementType) {
  return addArgument(name, tensor(shape, elementType), kiln::Role::label, {});
}

mlir::Value GraphBuilder::addParameter(llvm::StringRef name,
                                       llvm::ArrayRef<int64_t> shape,
                                       kiln::InitKind kind, double value,
                                       double scale, mlir::Type elementType) {
  auto init = kiln::InitializerAttr::get(context, kind, llvm::APFloat(value),
                                         llvm::APFloat(scale), nextSeed++);
  return addArgument(name, tensor(shape, elementType ? elementType : f32()),
                     kiln::Role::parameter, init);
}

mlir::Value GraphBuilder::addStepCounter(llvm::StringRef name) {
  auto init = kiln::InitializerAttr::get(context, kiln::InitKind::zeros,
                                         llvm::APFloat(0.0), llvm::APFloat(1.0), 0);
  return addArgument(name, tensor({}, b.getI64Type()), kiln::Role::step, init);
}

mlir::Value GraphBuilder::addModelState(llvm::StringRef name,
                                        llvm::ArrayRef<int64_t> shape,
                                        double value, mlir::Type elementType) {
  auto init = kiln::InitializerAttr::get(
      context, value == 0.0 ? kiln::InitKind::zeros : kiln::InitKind::constant,
      llvm::APFloat(value), llvm::APFloat(1.0), 0);
  return addArgument(name, tensor(shape, elementType ? elementType : f32()),
                     kiln::Role::model_state, init);
}

void GraphBuilder::updateModelState(mlir::Value state, mlir::Value next) {
  stateUpdates.push_back({llvm::cast<mlir::BlockArgument>(state), next});
}

mlir::Value GraphBuilder::normalizeChannels(const std::string &name, mlir::Value x,
                                            mlir::Value mean, mlir::Value var,
                                            mlir::Value scale, mlir::Value bias,
                                            double epsilon) {
  llvm::ArrayRef<int64_t> shape = shapeOf(x);
  auto channelType = llvm::cast<mlir::RankedTensorType>(mean.getType());
  mlir::Value centered = b.create<kiln::SubOp>(
      loc(name + ".centered"), x.getType(), x, broadcast(name + ".mean_b", mean, {1}, shape));
  mlir::Value shifted = b.create<kiln::AddOp>(loc(name + ".var_eps"), channelType, var,
                                              splat(name + ".eps", epsilon, channelType));
  mlir::Value inverse = b.create<kiln::RsqrtOp>(loc(name + ".rsqrt"), channelType, shifted);
  mlir::Value gain = b.create<kiln::MulOp>(loc(name + ".gain"), channelType, inverse, scale);
  mlir::Value y = b.create<kiln::MulOp>(loc(name + ".scale"), x.getType(), centered,
                                        broadcast(name + ".gain_b", gain, {1}, shape));
  return b.create<kiln::AddOp>(loc(name), x.getType(), y,
                               broadcast(name + ".bias_b", bias, {1}, shape));
}

mlir::Value GraphBuilder::batchNorm(const std::string &name, mlir::Value x,
                                    mlir::Value scale, mlir::Value bias,
                                    mlir::Value runningMean, mlir::Value runningVar,
                                    double epsilon, double momentum) {
  llvm::ArrayRef<int64_t> shape = shapeOf(x);
  llvm::SmallVector<int64_t> others;
  int64_t count = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (d != 1) {
      others.push_back(d);
      count *= shape[d];
    }
  auto channelType = llvm::cast<mlir::RankedTensorType>(runningMean.getType());
  auto dims = b.getDenseI64ArrayAttr(others);
  mlir::Value batchMean = b.create<kiln::ReduceOp>(
      loc(name + ".mean"), channelType, kiln::ReduceKind::mean, x, dims);
  mlir::Value batchCentered =
      b.create<kiln::SubOp>(loc(name + ".batch_centered"), x.getType(), x,
                            broadcast(name + ".batch_mean_b", batchMean, {1}, shape));
  mlir::Value square = b.create<kiln::MulOp>(loc(name + ".square"), x.getType(),
                                             batchCentered, batchCentered);
  mlir::Value batchVar = b.create<kiln::ReduceOp>(
      loc(name + ".var"), channelType, kiln::ReduceKind::mean, square, dims);
  mlir::Value mean = b.create<kiln::ModeSelectOp>(loc(name + ".mean_mode"), channelType,
                                                  batchMean, runningMean);
  mlir::Value var = b.create<kiln::ModeSelectOp>(loc(name + ".var_mode"), channelType,
                                                 batchVar, runningVar);
  // The running statistics' updates (the variance's unbiased, as PyTorch's).
  auto blend = [&](const std::string &what, mlir::Value running, mlir::Value batch,
                   double batchScale) {
    mlir::Value kept =
        b.create<kiln::MulOp>(loc(what + ".kept"), channelType, running,
                              splat(what + ".keep", 1.0 - momentum, channelType));
    mlir::Value taken = b.create<kiln::MulOp>(
        loc(what + ".taken"), channelType, batch,
        splat(what + ".take", momentum * batchScale, channelType));
    return b.create<kiln::AddOp>(loc(what), channelType, kept, taken).getResult();
  };
  updateModelState(runningMean, blend(name + ".running_mean", runningMean, batchMean, 1.0));
  updateModelState(runningVar,
                   blend(name + ".running_var", runningVar, batchVar,
                         count > 1 ? static_cast<double>(count) / (count - 1) : 1.0));
  return normalizeChannels(name, x, mean, var, scale, bias, epsilon);
}

mlir::Value GraphBuilder::splat(const llvm::Twine &name, double value,
                                mlir::RankedTensorType type) {
  auto scalarType = tensor({}, type.getElementType());
  mlir::DenseElementsAttr attr;
  if (auto floatType = llvm::dyn_cast<mlir::FloatType>(type.getElementType())) {
    llvm::APFloat v(value);
    bool lost;
    v.convert(floatType.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    attr = mlir::DenseElementsAttr::get(scalarType, v);
  } else {
    attr = mlir::DenseElementsAttr::get(
        scalarType, llvm::APInt(type.getElementTypeBitWidth(),
                                static_cast<int64_t>(value), /*isSigned=*/true));
  }
  mlir::Value scalar =
      b.create<kiln::ConstantOp>(loc(name + ".value"), attr).getResult();
  if (type.getRank() == 0)
    return scalar;
  return broadcast(name, scalar, {}, type.getShape());
}

mlir::Value GraphBuilder::broadcast(const llvm::Twine &name, mlir::Value operand,
                                    llvm::ArrayRef<int64_t> dims,
                                    llvm::ArrayRef<int64_t> shape) {
  auto elementType =
      llvm::cast<mlir::RankedTensorType>(operand.getType()).getElementType();
  return b.create<kiln::BroadcastInDimOp>(loc(name), tensor(shape, elementType),
                                          operand, b.getDenseI64ArrayAttr(dims));
}

mlir::Value GraphBuilder::reshape(const llvm::Twine &name, mlir::Value operand,
                                  llvm::ArrayRef<int64_t> shape) {
  auto elementType =
      llvm::cast<mlir::RankedTensorType>(operand.getType()).getElementType();
  return b.create<kiln::ReshapeOp>(loc(name), tensor(shape, elementType),
                                   operand);
}

mlir::Value GraphBuilder::linear(const llvm::Twine &name, mlir::Value x,
                                 mlir::Value weight, mlir::Value bias) {
  int64_t rank = shapeOf(x).size();
  mlir::Value y = b.create<kiln::DotGeneralOp>(
      loc(name + ".matmul"), x, weight, b.getDenseI64ArrayAttr({}),
      b.getDenseI64ArrayAttr({}), b.getDenseI64ArrayAttr({rank - 1}),
      b.getDenseI64ArrayAttr({0}));
  if (!bias)
    return y;
  mlir::Value wide =
      broadcast(name + ".bias_broadcast", bias, {rank - 1}, shapeOf(y));
  return b.create<kiln::AddOp>(loc(name + ".bias_add"), y, wide);
}

mlir::Value GraphBuilder::meanCrossEntropy(const llvm::Twine &name,
                                           mlir::Value logits,
                                           mlir::Value labels) {
  mlir::Value perExample = b.create<kiln::SoftmaxCrossEntropyOp>(
      loc(name + ".cross_entropy"), logits, labels);
  return b.create<kiln::ReduceOp>(loc(name), kiln::ReduceKind::mean, perExample,
                                  llvm::ArrayRef<int64_t>{0});
}

mlir::OwningOpRef<mlir::ModuleOp>
GraphBuilder::finish(mlir::Value loss, kiln::TrainingAttr training) {
  llvm::SmallVector<mlir::Value> results = {loss};
  llvm::SmallVector<mlir::Type> types = {loss.getType()};
  for (auto &[state, next] : stateUpdates) {
    results.push_back(next);
    types.push_back(next.getType());
  }
  b.create<mlir::func::ReturnOp>(loc("return"), results);
  mlir::Block &entry = function.front();
  function.setType(b.getFunctionType(entry.getArgumentTypes(), types));
  for (auto [i, attrs] : llvm::enumerate(argumentAttrs))
    function.setArgAttrs(i, attrs);
  function.setResultAttrs(
      0, b.getDictionaryAttr(
             {b.getNamedAttr(KilnDialect::kRoleAttrName,
                             kiln::RoleAttr::get(context, kiln::Role::loss)),
              b.getNamedAttr(KilnDialect::kNameAttrName,
                             b.getStringAttr("loss"))}));
  for (auto [i, update] : llvm::enumerate(stateUpdates)) {
    mlir::BlockArgument state = update.first;
    auto name = argumentAttrs[state.getArgNumber()].getAs<mlir::StringAttr>(
        KilnDialect::kNameAttrName);
    function.setResultAttrs(
        i + 1,
        b.getDictionaryAttr(
            {b.getNamedAttr(KilnDialect::kRoleAttrName,
                            kiln::RoleAttr::get(context, kiln::Role::model_state)),
             b.getNamedAttr(KilnDialect::kUpdatesAttrName,
                            b.getI64IntegerAttr(state.getArgNumber())),
             b.getNamedAttr(KilnDialect::kNameAttrName,
                            name)}));
  }
  // The zoo's graphs state the bounds their integers are read under (graph
  // format 1.5), as the compiler would find them.
  markIndexBounds(function);
  if (training)
    (*module)->setAttr(KilnDialect::kTrainingAttrName, training);
  if (mlir::failed(mlir::verify(*module)))
    return nullptr;
  return std::move(module);
}

kiln::TrainingAttr makeTraining(mlir::MLIRContext *context,
                                kiln::OptimizerKind optimizer,
                                double learningRate) {
  double momentum = optimizer == kiln::OptimizerKind::momentum ? 0.9 : 0.0;
  return kiln::TrainingAttr::get(
      context, optimizer, llvm::APFloat(learningRate), llvm::APFloat(momentum),
      /*nesterov=*/false, llvm::APFloat(0.9), llvm::APFloat(0.999),
      llvm::APFloat(1e-8), llvm::APFloat(0.0), llvm::APFloat(0.0),
      kiln::LrSchedule::constant, /*warmup_steps=*/0, /*total_steps=*/0);
}

} // namespace kiln::cli
