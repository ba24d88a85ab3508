//===- ReferenceStep.cpp - run a model's step on the reference interpreter -===//

#include "tools/kiln/lib/ReferenceStep.h"

#include "tools/kiln/lib/Summary.h"

#include "ir/Interpreter.h"
#include "passes/Passes.h"
#include "runtime/Initializers.h"
#include "runtime/Units.h"


#include <cmath>
#include <unistd.h>

using namespace mlir;

namespace kiln::cli {

func::FuncOp findModelFunction(ModuleOp module) {
  func::FuncOp found;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || func.isPrivate())
      continue;
    bool hasLoss = false;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto role = func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName))
        hasLoss |= role.getValue() == Role::loss;
    if (!hasLoss)
      continue;
    if (found) {
      module.emitError() << "the model has more than one function with a loss "
                            "result (@"
                         << found.getName() << " and @" << func.getName() << ")";
      return {};
    }
    found = func;
  }
  if (!found)
    module.emitError() << "the model has no public function with a result marked "
                          "kiln.role = #kiln.role<loss>";
  return found;
}

LogicalResult checkInterpreterMemory(func::FuncOp func) {
  // Tensors are within the dialect's limits (2^48 bytes), so these sums of
  // a few thousand of them cannot overflow.
  auto f64Bytes = [](Type type) -> int64_t {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.hasStaticShape() ? tensor.getNumElements() * 8 : 0;
  };
  int64_t arguments = 0;
  for (Type type : func.getArgumentTypes())
    arguments += f64Bytes(type);
  int64_t largest = 0;
  Operation *largestOp = nullptr;
  func.walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      if (int64_t bytes = f64Bytes(type); bytes > largest) {
        largest = bytes;
        largestOp = op;
      }
  });
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || pageSize <= 0)
    return success(); // unknown: the allocations decide
  int64_t memory = static_cast<int64_t>(pages) * pageSize;
  if (arguments + largest <= memory)
    return success();
  auto size = [](int64_t bytes) { return runtime::formatBytes(bytes); };
  InFlightDiagnostic error = func.emitError();
  error << "the reference interpreter holds every value as f64 and needs at "
           "least "
        << size(arguments + largest) << " for @" << func.getName() << " ("
        << size(arguments) << " of arguments";
  if (largestOp)
    error << " and " << size(largest) << " for its largest value, of '"
          << largestOp->getName() << "'";
  error << "), more than this machine's " << size(memory) << " of memory";
  if (largestOp)
    error.attachNote(largestOp->getLoc()) << "the largest value";
  return failure();
}

std::vector<ArgumentInfo> describeArguments(func::FuncOp func) {
  std::vector<ArgumentInfo> args;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    ArgumentInfo info;
    info.index = i;
    if (auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName))
      info.role = role.getValue();
    if (auto name = func.getArgAttrOfType<StringAttr>(i, KilnDialect::kNameAttrName))
      info.name = name.str();
    else
      info.name = "arg" + std::to_string(i);
    info.type = cast<RankedTensorType>(func.getArgumentTypes()[i]);
    info.init = func.getArgAttrOfType<InitializerAttr>(i, KilnDialect::kInitAttrName);
    if (auto of = func.getArgAttrOfType<IntegerAttr>(i, KilnDialect::kCopyOfAttrName))
      info.copyOf = of.getInt();
    args.push_back(info);
  }
  return args;
}

std::vector<ResultInfo> describeResults(func::FuncOp func) {
  std::vector<ResultInfo> results;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    ResultInfo info;
    info.index = i;
    if (auto role = func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName))
      info.role = role.getValue();
    if (auto name = func.getResultAttrOfType<StringAttr>(i, KilnDialect::kNameAttrName))
      info.name = name.str();
    if (auto of = func.getResultAttrOfType<IntegerAttr>(i, KilnDialect::kGradOfAttrName))
      info.gradOf = of.getInt();
    if (auto up = func.getResultAttrOfType<IntegerAttr>(i, KilnDialect::kUpdatesAttrName))
      info.updates = up.getInt();
    results.push_back(info);
  }
  return results;
}

HostTensor initialValue(const ArgumentInfo &arg) {
  DType dtype = DType::f32;
  dtypeOfTensor(arg.type, dtype);
  if (!arg.init)
    return HostTensor(dtype, arg.type.getShape());
  runtime::InitSpec spec;
  spec.kind = static_cast<runtime::InitKind>(arg.init.getKind());
  spec.value = arg.init.getValue().convertToDouble();
  spec.scale = arg.init.getScale().convertToDouble();
  spec.seed = static_cast<uint64_t>(arg.init.getSeed());
  HostTensor t(dtype, arg.type.getShape(),
               runtime::initialize(spec, std::vector<int64_t>(arg.type.getShape().begin(), arg.type.getShape().end())));
  t.roundAll();
  return t;
}

HostTensor parameterCopyValue(const ArgumentInfo &copy, const HostTensor &parameter) {
  DType dtype = DType::f32;
  dtypeOfTensor(copy.type, dtype);
  HostTensor t(dtype, copy.type.getShape(), parameter.values());
  t.roundAll();
  return t;
}

void fillParameterCopies(llvm::ArrayRef<ArgumentInfo> args,
                         llvm::MutableArrayRef<HostTensor> values) {
  for (const ArgumentInfo &arg : args)
    if (arg.copyOf && *arg.copyOf < values.size() && arg.index < values.size())
      values[arg.index] = parameterCopyValue(arg, values[*arg.copyOf]);
}

int64_t integerRange(func::FuncOp func, unsigned argIndex) {
  std::optional<int64_t> bound = kiln::argumentIndexBound(func, argIndex);
  // A zero-row table or zero classes bounds nothing a value could take.
  return bound && *bound > 0 ? *bound : 2;
}

HostTensor randomData(func::FuncOp func, const ArgumentInfo &arg,
                      std::mt19937_64 &rng) {
  DType dtype = DType::f32;
  dtypeOfTensor(arg.type, dtype);
  HostTensor t(dtype, arg.type.getShape());
  if (isFloat(dtype)) {
    for (double &v : t.values()) {
      double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
      double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      v = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
  } else {
    uint64_t range = static_cast<uint64_t>(integerRange(func, arg.index));
    for (double &v : t.values())
      v = static_cast<double>(rng() % range);
  }
  t.roundAll();
  return t;
}

std::optional<unsigned> exposeCrossEntropyPredictions(mlir::func::FuncOp func,
                                                      unsigned lossIndex) {
  auto ret = mlir::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator());
  mlir::Operation *def = ret.getOperand(lossIndex).getDefiningOp();
  mlir::Operation *ce = nullptr;
  for (int depth = 0; def && depth < 4; ++depth) {
    if (mlir::isa<SoftmaxCrossEntropyOp>(def)) {
      ce = def;
      break;
    }
    if (def->getNumOperands() == 0)
      break;
    def = def->getOperand(0).getDefiningOp();
  }
  if (!ce)
    return std::nullopt;
  mlir::Value logits = ce->getOperand(0);
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(logits.getType());
  if (!type || type.getRank() != 2)
    return std::nullopt;
  mlir::OpBuilder builder(ret);
  auto predictionsType =
      mlir::RankedTensorType::get({type.getDimSize(0)}, builder.getI32Type());
  mlir::Value predictions = builder.create<ArgmaxOp>(
      ce->getLoc(), predictionsType, logits, builder.getI64IntegerAttr(1));
  unsigned index = func.getNumResults();
  func.insertResult(index, predictionsType,
                    mlir::DictionaryAttr::get(func.getContext()));
  ret->insertOperands(index, predictions);
  return index;
}

std::map<std::string, int64_t> labelRanges(mlir::ModuleOp module) {
  std::map<std::string, int64_t> classes;
  if (mlir::func::FuncOp raw = findModelFunction(module))
    for (const ArgumentInfo &arg : describeArguments(raw))
      if (!mlir::isa<mlir::FloatType>(arg.type.getElementType()))
        if (std::optional<int64_t> bound = kiln::argumentIndexBound(raw, arg.index);
            bound && *bound > 0)
          classes[arg.name] = *bound;
  return classes;
}

} // namespace kiln::cli
