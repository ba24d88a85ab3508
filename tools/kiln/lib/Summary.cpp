//===- Summary.cpp - what `kiln inspect` reports about a model ------------===//
//
// FLOPs come only from kiln::CostInterface: an op without it is listed as
// uncosted rather than guessed at, so a new op with a missing cost shows up in
// the report instead of silently counting zero.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Summary.h"

#include "ir/Flops.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"
#include "runtime/Units.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cstdio>

namespace kiln::cli {

namespace {

std::string typeString(mlir::Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

TensorInfo describe(mlir::Type type, mlir::DictionaryAttr attrs,
                    const std::string &fallbackName) {
  TensorInfo info;
  info.name = fallbackName;
  info.role = "-";
  if (attrs) {
    if (auto name = attrs.getAs<mlir::StringAttr>(KilnDialect::kNameAttrName))
      info.name = name.getValue().str();
    if (auto role = attrs.getAs<kiln::RoleAttr>(KilnDialect::kRoleAttrName))
      info.role = kiln::stringifyRole(role.getValue()).str();
    if (auto init =
            attrs.getAs<kiln::InitializerAttr>(KilnDialect::kInitAttrName))
    {
      info.init = kiln::stringifyInitKind(init.getKind()).str();
      if (init.getKind() == kiln::InitKind::constant) {
        char value[32];
        std::snprintf(value, sizeof value, " %g", init.getValue().convertToDouble());
        info.init += value;
      }
    }
  }
  if (auto shaped = llvm::dyn_cast<mlir::ShapedType>(type);
      shaped && shaped.hasStaticShape()) {
    info.shape.assign(shaped.getShape().begin(), shaped.getShape().end());
    info.dtype = typeString(shaped.getElementType());
    info.elements = shaped.getNumElements();
    // Element types without a bit width (index, complex) count no bytes.
    if (shaped.getElementType().isIntOrFloat()) {
      unsigned bits = shaped.getElementType().getIntOrFloatBitWidth();
      info.bytes = info.elements * ((bits + 7) / 8);
    }
  } else {
    info.dtype = typeString(type);
  }
  return info;
}

// Sums costs over |region|'s ops; an op with a cost covers its own regions.
void accumulate(mlir::Region &region, FunctionSummary &summary,
                llvm::MapVector<llvm::StringRef, int64_t> &counts) {
  for (mlir::Block &block : region)
    for (mlir::Operation &op : block) {
      if (op.hasTrait<mlir::OpTrait::IsTerminator>())
        continue;
      ++summary.opCount;
      ++counts[op.getName().getStringRef()];
      if (auto cost = llvm::dyn_cast<kiln::CostInterface>(op)) {
        summary.flops = kiln::flops::add(summary.flops, cost.getFlops());
        // Count the nested ops in the histogram, not again in the FLOPs.
        FunctionSummary nested;
        for (mlir::Region &inner : op.getRegions())
          accumulate(inner, nested, counts);
        summary.opCount += nested.opCount;
        continue;
      }
      if (op.getNumRegions() == 0) {
        summary.uncosted.push_back(op.getName().getStringRef().str());
        continue;
      }
      for (mlir::Region &inner : op.getRegions())
        accumulate(inner, summary, counts);
    }
}

// " (1.23 MFLOP)" for a value of at least one |step|, else "".
std::string humanize(double value, std::initializer_list<const char *> units,
                     double step) {
  if (value < step)
    return "";
  return " (" + runtime::formatInUnits(value, units, step) + ")";
}

} // namespace


std::string formatShape(llvm::ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  return s;
}

FunctionSummary summarizeFunction(mlir::func::FuncOp function) {
  FunctionSummary summary;
  summary.name = function.getName().str();
  mlir::FunctionType type = function.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i) {
    TensorInfo info = describe(type.getInput(i), function.getArgAttrDict(i),
                               "arg" + std::to_string(i));
    auto shaped = llvm::dyn_cast<mlir::ShapedType>(type.getInput(i));
    if (shaped && llvm::isa<mlir::IntegerType>(shaped.getElementType()) &&
        (info.role == "input" || info.role == "label")) {
      // As kiln-mark-index-bounds sets it.
      info.indexBound = kiln::argumentIndexBound(function, i).value_or(0);
    }
    if (info.role == "parameter") {
      summary.parameterElements += info.elements;
      summary.parameterBytes += info.bytes;
      summary.parameters.push_back(std::move(info));
    } else {
      summary.inputs.push_back(std::move(info));
    }
  }
  for (unsigned i = 0; i < type.getNumResults(); ++i)
    summary.outputs.push_back(describe(type.getResult(i),
                                       function.getResultAttrDict(i),
                                       "result" + std::to_string(i)));

  llvm::MapVector<llvm::StringRef, int64_t> counts;
  if (!function.isExternal())
    accumulate(function.getBody(), summary, counts);
  for (auto &[name, count] : counts)
    summary.histogram.emplace_back(name.str(), count);
  std::stable_sort(summary.histogram.begin(), summary.histogram.end(),
                   [](const auto &a, const auto &b) {
                     if (a.second != b.second)
                       return a.second > b.second;
                     return a.first < b.first;
                   });
  return summary;
}

ModelSummary summarizeModule(mlir::ModuleOp module) {
  ModelSummary summary;
  for (auto function : module.getOps<mlir::func::FuncOp>())
    if (function.isPublic())
      summary.functions.push_back(summarizeFunction(function));
  if (mlir::Attribute training =
          module->getAttr(KilnDialect::kTrainingAttrName)) {
    std::string s;
    llvm::raw_string_ostream os(s);
    training.print(os);
    summary.training = s;
  }
  return summary;
}

void printSummary(const ModelSummary &summary, llvm::StringRef path,
                  llvm::raw_ostream &os) {
  os << "model: " << path << "\n";
  auto printTensors = [&](llvm::StringRef title,
                          const std::vector<TensorInfo> &tensors) {
    size_t nameWidth = 4, roleWidth = 9, shapeWidth = 5;
    for (const TensorInfo &t : tensors) {
      nameWidth = std::max(nameWidth, t.name.size());
      roleWidth = std::max(roleWidth, t.role.size());
      shapeWidth = std::max(shapeWidth, formatShape(t.shape).size());
    }
    os << "  " << title << ":\n";
    for (const TensorInfo &t : tensors) {
      os << "    " << llvm::left_justify(t.name, nameWidth) << "  "
         << llvm::left_justify(t.role, roleWidth) << "  "
         << llvm::left_justify(formatShape(t.shape), shapeWidth) << "  "
         << t.dtype;
      if (!t.init.empty())
        os << "  " << t.elements << " values, init " << t.init;
      if (t.indexBound > 0)
        os << "  indices below " << t.indexBound;
      os << "\n";
    }
  };

  for (const FunctionSummary &f : summary.functions) {
    os << "function @" << f.name << "\n";
    printTensors("inputs", f.inputs);
    printTensors("outputs", f.outputs);
    os << "  parameters: " << f.parameters.size() << " tensors, "
       << f.parameterElements << " values"
       << humanize(double(f.parameterElements), {"", "K", "M", "G", "T"}, 1000)
       << ", " << f.parameterBytes << " bytes"
       << humanize(double(f.parameterBytes), {"B", "KiB", "MiB", "GiB", "TiB"},
                   1024)
       << "\n";
    if (!f.parameters.empty())
      printTensors("parameter list", f.parameters);
    os << "  FLOPs per forward step: " << f.flops
       << humanize(double(f.flops),
                   {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"}, 1000)
       << "\n";
    if (!f.uncosted.empty()) {
      os << "  ops without a cost (not counted):";
      for (const std::string &name : f.uncosted)
        os << " " << name;
      os << "\n";
    }
    os << "  ops: " << f.opCount << " total\n";
    size_t width = 0;
    for (const auto &[name, count] : f.histogram)
      width = std::max(width, name.size());
    for (const auto &[name, count] : f.histogram)
      os << "    " << llvm::left_justify(name, width) << "  "
         << llvm::right_justify(std::to_string(count), 5) << "\n";
  }
  if (!summary.training.empty())
    os << "training: " << summary.training << "\n";
}

namespace {
std::string escapeDot(llvm::StringRef text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}
} // namespace

namespace {
// The graph-node names in |loc| (a NameLoc, or a FusedLoc of them after
// fusion), in order, without repeats.
void collectNames(mlir::Location loc, llvm::SmallVectorImpl<std::string> &names) {
  if (auto nameLoc = llvm::dyn_cast<mlir::NameLoc>(loc)) {
    std::string name = nameLoc.getName().str();
    if (!llvm::is_contained(names, name))
      names.push_back(name);
    return;
  }
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location inner : fused.getLocations())
      collectNames(inner, names);
}
} // namespace

void printDot(mlir::ModuleOp module, llvm::raw_ostream &os) {
  os << "digraph kiln {\n"
     << "  node [shape=box, fontname=\"monospace\"];\n";
  int functionIndex = 0;
  for (auto function : module.getOps<mlir::func::FuncOp>()) {
    if (!function.isPublic() || function.isExternal())
      continue;
    std::string prefix = "f" + std::to_string(functionIndex++) + "_";
    os << "  subgraph \"cluster_" << escapeDot(function.getName()) << "\" {\n"
       << "    label=\"@" << escapeDot(function.getName()) << "\";\n";
    llvm::DenseMap<mlir::Value, std::string> producer;
    mlir::Block &entry = function.front();
    for (mlir::BlockArgument arg : entry.getArguments()) {
      TensorInfo info =
          describe(arg.getType(), function.getArgAttrDict(arg.getArgNumber()),
                   "arg" + std::to_string(arg.getArgNumber()));
      std::string id = prefix + "arg" + std::to_string(arg.getArgNumber());
      producer[arg] = id;
      os << "    " << id << " [shape=ellipse, label=\"" << escapeDot(info.name)
         << "\\n" << info.role << " " << escapeDot(typeString(arg.getType()))
         << "\"];\n";
    }
    int opIndex = 0;
    for (mlir::Operation &op : entry) {
      std::string id = prefix + "op" + std::to_string(opIndex++);
      bool isReturn = op.hasTrait<mlir::OpTrait::IsTerminator>();
      std::string label = op.getName().getStringRef().str();
      if (auto fusion = llvm::dyn_cast<kiln::FusionOp>(op))
        label += " " + stringifyFusionKind(fusion.getKind()).str();
      // The graph nodes the op came from: one for an op, several for a
      // fusion (at most 8 listed).
      llvm::SmallVector<std::string> names;
      collectNames(op.getLoc(), names);
      for (size_t i = 0; i < names.size() && i < 8; ++i)
        label += "\\n" + escapeDot(names[i]);
      if (names.size() > 8)
        label += "\\n(+" + std::to_string(names.size() - 8) + " more)";
      for (mlir::Type type : op.getResultTypes())
        label += "\\n" + escapeDot(typeString(type));
      os << "    " << id << " [label=\"" << label << "\""
         << (isReturn ? ", shape=ellipse" : "") << "];\n";
      for (mlir::Value operand : op.getOperands()) {
        auto it = producer.find(operand);
        if (it != producer.end())
          os << "    " << it->second << " -> " << id << ";\n";
      }
      for (mlir::Value result : op.getResults())
        producer[result] = id;
    }
    os << "  }\n";
  }
  os << "}\n";
}

} // namespace kiln::cli
