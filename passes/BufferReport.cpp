//===- BufferReport.cpp - the buffer-assignment report --------------------===//
//
// Reads only the IR: the plan attributes kiln-plan-buffers wrote, the op
// order and the result types, so the report shows what later stages will
// see. Liveness is recomputed from the order the same way the pass does.
//
//===----------------------------------------------------------------------===//

#include "passes/BufferReport.h"

#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/BufferLiveness.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace kiln {

namespace {

using mlir::Operation;
using mlir::Value;

struct ReportedBuffer {
  int64_t bytes, offset, def, last;
  Operation *op;
  unsigned result;
};

std::string formatRatio(int64_t numerator, int64_t denominator) {
  if (denominator <= 0)
    return "n/a";
  return llvm::formatv("{0:f3}", double(numerator) / double(denominator));
}

std::string formatNames(Operation *op) {
  llvm::SmallVector<std::string> names;
  collectLocNames(op->getLoc(), names);
  if (names.empty()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    op->getLoc().print(os);
    return text;
  }
  std::string text;
  for (size_t i = 0; i < names.size() && i < 3; ++i)
    text += (i ? ", " : "") + names[i];
  if (names.size() > 3)
    text += llvm::formatv(" (+{0} more)", names.size() - 3);
  return text;
}

} // namespace

void writeBufferReport(mlir::func::FuncOp func, llvm::raw_ostream &os,
                       unsigned largest) {
  os << "buffer assignment of @" << func.getName() << "\n";
  auto arena =
      func->getAttrOfType<mlir::IntegerAttr>(KilnDialect::kArenaBytesAttrName);
  auto peak =
      func->getAttrOfType<mlir::IntegerAttr>(KilnDialect::kPeakBytesAttrName);
  auto lower = func->getAttrOfType<mlir::IntegerAttr>(
      KilnDialect::kLowerBoundBytesAttrName);
  if (func.isExternal() || !func.getBody().hasOneBlock() || !arena || !peak ||
      !lower) {
    os << "  no buffer plan (run kiln-schedule and kiln-plan-buffers)\n";
    return;
  }
  mlir::Block &block = func.front();
  BlockLiveness liveness(block);

  int64_t argumentBytes = 0;
  for (Value arg : block.getArguments())
    argumentBytes += getTensorBytes(arg.getType()).value_or(0);

  std::vector<ReportedBuffer> buffers;
  int64_t views = 0, reused = 0, inArguments = 0;
  llvm::DenseMap<Value, int64_t> offsetOf;
  for (auto [stepIndex, op] : llvm::enumerate(liveness.getOps())) {
    int64_t step = stepIndex;
    auto offsets = op->getAttrOfType<mlir::DenseI64ArrayAttr>(
        KilnDialect::kBufferOffsetsAttrName);
    if (!offsets || offsets.size() != (int64_t)op->getNumResults())
      continue;
    for (auto [k, result] : llvm::enumerate(op->getResults())) {
      int64_t offset = offsets[k];
      offsetOf[result] = offset;
      if (offset < 0) {
        ++inArguments;
        continue;
      }
      if (mlir::isa<ReshapeOp>(op)) {
        ++views;
        continue;
      }
      bool overOperand = llvm::any_of(op->getOperands(), [&](Value operand) {
        auto it = offsetOf.find(operand);
        return it != offsetOf.end() && it->second == offset &&
               liveness.getLastUse(operand) == step;
      });
      reused += overOperand;
      int64_t last = liveness.getLastUse(result);
      buffers.push_back({getTensorBytes(result.getType()).value_or(0), offset,
                         step, last < 0 ? step : last, op, (unsigned)k});
    }
  }

  // Updates: in place when the returned value lives in its argument.
  int64_t updates = 0, updatesInPlace = 0;
  llvm::SmallVector<std::string> notInPlace;
  Operation *terminator = block.getTerminator();
  for (unsigned j = 0, e = func.getNumResults(); j < e; ++j) {
    auto target = func.getResultAttrOfType<mlir::IntegerAttr>(
        j, KilnDialect::kUpdatesAttrName);
    if (!target || j >= terminator->getNumOperands())
      continue;
    ++updates;
    Value value = terminator->getOperand(j);
    bool inPlace = value == block.getArgument(target.getInt());
    if (Operation *def = value.getDefiningOp()) {
      auto aliases = def->getAttrOfType<mlir::DenseI64ArrayAttr>(
          KilnDialect::kAliasesAttrName);
      unsigned k = mlir::cast<mlir::OpResult>(value).getResultNumber();
      inPlace |= aliases && k < aliases.size() && aliases[k] == target.getInt();
    }
    if (inPlace) {
      ++updatesInPlace;
      continue;
    }
    auto name = func.getResultAttrOfType<mlir::StringAttr>(
        j, KilnDialect::kNameAttrName);
    notInPlace.push_back(llvm::formatv("result {0}{1}", j,
                                       name ? " '" + name.getValue().str() + "'"
                                            : std::string()));
  }

  int64_t arenaBytes = arena.getInt();
  int64_t arenaLower = lower.getInt() - argumentBytes;
  os << llvm::formatv("  kernels (steps): {0}\n", liveness.getOps().size());
  os << llvm::formatv("  arena: {0} bytes, {1} buffers\n", arenaBytes,
                      buffers.size());
  os << llvm::formatv("  lower bound (largest sum of simultaneously live arena "
                      "bytes): {0} bytes; arena / lower bound = {1}\n",
                      arenaLower, formatRatio(arenaBytes, arenaLower));
  os << llvm::formatv("  arguments: {0} buffers, {1} bytes\n",
                      block.getNumArguments(), argumentBytes);
  os << llvm::formatv("  planned peak (arguments + arena): {0} bytes; lower "
                      "bound {1} bytes; peak / lower bound = {2}\n",
                      peak.getInt(), lower.getInt(),
                      formatRatio(peak.getInt(), lower.getInt()));
  os << llvm::formatv("  updates in place: {0} of {1}", updatesInPlace,
                      updates);
  if (!notInPlace.empty()) {
    os << " (not: ";
    llvm::interleaveComma(notInPlace, os);
    os << ")";
  }
  os << "\n";
  os << llvm::formatv("  results in an argument's buffer: {0}; reshape views: "
                      "{1}; results written over a dying operand: {2}\n",
                      inArguments, views, reused);

  std::stable_sort(buffers.begin(), buffers.end(),
                   [](const ReportedBuffer &a, const ReportedBuffer &b) {
                     return a.bytes > b.bytes;
                   });
  if (buffers.empty())
    return;
  os << llvm::formatv(
      "  largest arena buffers:\n  {0,12} {1,12}  {2,-13} {3}\n", "bytes",
      "offset", "live steps", "op, result: source");
  for (const ReportedBuffer &b : llvm::ArrayRef(buffers).take_front(largest)) {
    std::string steps = b.last >= liveness.getEndStep()
                            ? llvm::formatv("[{0}, end]", b.def).str()
                            : llvm::formatv("[{0}, {1}]", b.def, b.last).str();
    os << llvm::formatv("  {0,12} {1,12}  {2,-13} {3} #{4}: {5}\n", b.bytes,
                        b.offset, steps, b.op->getName().getStringRef(),
                        b.result, formatNames(b.op));
  }
}

} // namespace kiln
