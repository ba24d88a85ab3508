//===- CompileReport.cpp - what `kiln compile` tells about a step ---------===//

#include "tools/kiln/lib/CompileReport.h"

#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Summary.h"

#include "ir/KilnOps.h"
#include "passes/BufferLiveness.h"
#include "passes/BufferReport.h"
#include "passes/FusionCostModel.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"

#include <algorithm>

namespace kiln::cli {

namespace {

std::string mib(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.2f MiB", bytes / 1048576.0);
  return s;
}

int64_t intAttr(mlir::func::FuncOp func, llvm::StringRef name) {
  if (auto a = func->getAttrOfType<mlir::IntegerAttr>(name))
    return a.getInt();
  return -1;
}

} // namespace

void printCompileReport(mlir::ModuleOp module, llvm::StringRef path,
                        llvm::raw_ostream &os, mlir::ModuleOp baseline,
                        llvm::StringRef amp, llvm::StringRef besidesAmp,
                        const ReportWorkspaces *workspaces) {
  for (auto func : module.getOps<mlir::func::FuncOp>()) {
    if (!func.isPublic() || func.isExternal())
      continue;
    KernelStats k = countKernels(func);
    os << "kiln compile report: " << path << " @" << func.getName() << "\n";
    os << "  kernels per step:   " << k.kernels << " (" << k.fusions
       << " fusions: " << k.fusionsByKind[0] << " loop, " << k.fusionsByKind[1]
       << " reduction, " << k.fusionsByKind[2] << " multi-output, "
       << k.fusionsByKind[3] << " horizontal, " << k.fusionsByKind[4]
       << " gemm; " << k.libraryCalls << " library calls; " << k.unfusedOps
       << " unfused ops)\n";
    // Fused attention (kiln-fuse-attention, --target=cuda): library calls.
    // The packed forms (kiln-pack-attention) read the qkv projection in place.
    std::pair<llvm::StringRef, int64_t> calls[] = {
        {AttentionOp::getOperationName(), 0},
        {AttentionGradOp::getOperationName(), 0},
        {AttentionQkvOp::getOperationName(), 0},
        {AttentionQkvGradOp::getOperationName(), 0}};
    for (mlir::Operation &op : func.getBody().front())
      for (auto &[name, count] : calls)
        count += op.getName().getStringRef() == name;
    std::string listed;
    for (auto &[name, count] : calls)
      if (count)
        listed += (listed.empty() ? "" : ", ") + std::to_string(count) + " " + name.str();
    if (!listed.empty())
      os << "  attention calls:    " << listed << " (fused library calls)\n";
    os << "  collectives:        " << k.collectives << "\n";
    os << "  modelled bytes:     " << k.bytesRead + k.bytesWritten << " ("
       << k.bytesRead << " read, " << k.bytesWritten << " written)\n";
    os << "  modelled time:      " << llvm::format("%.1f", k.modeledUs)
       << " us (kernels one after another)\n";
    int64_t arena = intAttr(func, KilnDialect::kArenaBytesAttrName);
    int64_t peak = intAttr(func, KilnDialect::kPeakBytesAttrName);
    int64_t bound = intAttr(func, KilnDialect::kLowerBoundBytesAttrName);
    if (peak < 0) {
      os << "  planned memory:     not planned (kiln-plan-buffers did not run)\n";
      continue;
    }
    int64_t args = peak - arena;
    int64_t arenaBound = bound - args;
    os << "  planned arena:      " << arena << " bytes (" << mib(arena)
       << "), lower bound " << arenaBound << ", ratio "
       << llvm::format("%.4f", arenaBound > 0 ? double(arena) / arenaBound : 1.0)
       << "\n";
    os << "  planned peak:       " << peak << " bytes (" << mib(peak)
       << ") with arguments, lower bound " << bound << ", ratio "
       << llvm::format("%.4f", bound > 0 ? double(peak) / bound : 1.0) << "\n";
    // What --memory-budget bounds for a CUDA step: the peak and the
    // workspaces the runtime allocates beside it at load.
    if (workspaces) {
      int64_t device = peak + workspaces->bytes;
      os << "  device memory:      " << device << " bytes (" << mib(device)
         << ") on sm_" << workspaces->arch << ": the planned peak and "
         << (workspaces->parts.empty() ? "no workspaces" : workspaces->parts)
         << "\n";
    }
    // Mixed precision's parameter copies (kiln-parameter-copies) are
    // arguments: in the peak for as long as the step lives.
    int64_t copies = 0, copyBytes = 0;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
          role && role.getValue() == Role::parameter_copy) {
        ++copies;
        copyBytes += getTensorBytes(func.getArgument(i).getType()).value_or(0);
      }
    if (copies)
      os << "  parameter copies:   " << copies << " arguments, " << copyBytes
         << " bytes of the peak (--amp-param-copies=off converts the "
            "parameters each step instead)\n";
    if (!baseline)
      continue;
    auto off = baseline.lookupSymbol<mlir::func::FuncOp>(func.getName());
    int64_t offPeak = off ? intAttr(off, KilnDialect::kPeakBytesAttrName) : -1;
    int64_t offArena = off ? intAttr(off, KilnDialect::kArenaBytesAttrName) : -1;
    if (offPeak <= 0)
      continue;
    auto change = [&](int64_t now, int64_t before) {
      std::string s;
      llvm::raw_string_ostream os(s);
      int64_t delta = before - now;
      os << (delta >= 0 ? delta : -delta)
         << (delta >= 0 ? " bytes saved, " : " bytes more, ")
         << llvm::format("%.1f", 100.0 * (delta >= 0 ? delta : -delta) /
                                     std::max<int64_t>(before, 1))
         << "%";
      return s;
    };
    os << "  vs --amp=off:       planned peak " << offPeak << " -> " << peak
       << " bytes (" << change(peak, offPeak) << "), arena " << offArena
       << " -> " << arena << " bytes (" << change(arena, offArena) << ") with --amp="
       << amp << (besidesAmp.empty() ? "" : " and ") << besidesAmp << "\n";
  }
}

mlir::LogicalResult writeCompileDumps(mlir::ModuleOp module, llvm::StringRef dir) {
  std::string report;
  llvm::raw_string_ostream os(report);
  for (auto func : module.getOps<mlir::func::FuncOp>())
    if (func.isPublic() && !func.isExternal())
      writeBufferReport(func, os);
  llvm::SmallString<256> reportPath(dir), dotPath(dir);
  llvm::sys::path::append(reportPath, "buffer-assignment.txt");
  llvm::sys::path::append(dotPath, "step.dot");
  if (mlir::failed(writeTextFile(module.getContext(), reportPath, os.str())))
    return mlir::failure();
  std::string dot;
  llvm::raw_string_ostream dotStream(dot);
  printDot(module, dotStream);
  return writeTextFile(module.getContext(), dotPath, dotStream.str());
}

} // namespace kiln::cli
