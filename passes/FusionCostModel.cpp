//===- FusionCostModel.cpp - kernel costs and kernel counts ---------------===//
//
// See FusionCostModel.h. The op classes are decided through traits and
// interfaces (ScalarSemantics for elementwise ops) and a short list of op
// classes by type, never by op name.
//
//===----------------------------------------------------------------------===//

#include "passes/FusionCostModel.h"

#include "ir/ScalarSemantics.h"

#include "llvm/ADT/DenseSet.h"

#include <algorithm>

using namespace mlir;

namespace kiln {

int64_t tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  Type element = tensor.getElementType();
  int64_t width = element.isIntOrFloat()
                      ? std::max<int64_t>(1, (element.getIntOrFloatBitWidth() + 7) / 8)
                      : 8;
  return tensor.getNumElements() * width;
}

double FusionCostModel::transferUs(int64_t bytes) const {
  // GB/s is 1e3 bytes per microsecond.
  return static_cast<double>(bytes) / (options_.bandwidthGBps * 1e3);
}

double FusionCostModel::kernelTimeUs(int64_t bytes, int64_t flops) const {
  double compute = static_cast<double>(flops) / (options_.peakGflops * 1e3);
  return options_.launchUs + std::max(transferUs(bytes), compute);
}

bool isLibraryOp(Operation *op) {
  return isa<DotGeneralOp, Conv2DOp, Conv2DInputGradOp, Conv2DFilterGradOp,
             AttentionOp, AttentionGradOp, AttentionQkvOp, AttentionQkvGradOp>(op);
}

bool isCollectiveOp(Operation *op) {
  return isa<AllReduceOp, ReduceScatterOp, AllGatherOp, CollectiveBroadcastOp,
             SendOp, RecvOp>(op);
}

bool isFreeOp(Operation *op) { return isa<ConstantOp, ReshapeOp>(op); }

bool isFusibleOp(Operation *op) {
  if (isa<ScalarSemantics>(op))
    return true;
  return isa<BroadcastInDimOp, TransposeOp, SliceOp, PadOp, ReshapeOp, IotaOp,
             ConstantOp, ReduceOp, ScatterAddOp, DropoutOp, RandomUniformOp>(
      op);
}

KernelStats countKernels(func::FuncOp func, const CostModelOptions &options) {
  KernelStats stats;
  if (func.isExternal())
    return stats;
  FusionCostModel model(options);
  for (Operation &op : func.getBody().front()) {
    if (op.hasTrait<OpTrait::IsTerminator>() || isFreeOp(&op))
      continue;
    if (isCollectiveOp(&op)) {
      ++stats.collectives;
      continue;
    }
    if (auto fusion = dyn_cast<FusionOp>(&op)) {
      ++stats.fusions;
      ++stats.fusionsByKind[static_cast<unsigned>(fusion.getKind())];
    } else if (isLibraryOp(&op)) {
      ++stats.libraryCalls;
    } else {
      ++stats.unfusedOps;
    }
    int64_t read = 0, written = 0;
    llvm::SmallDenseSet<Value, 8> seen;
    for (Value v : op.getOperands())
      if (seen.insert(v).second)
        read += tensorBytes(v.getType());
    for (Type t : op.getResultTypes())
      written += tensorBytes(t);
    int64_t flops = 0;
    if (auto cost = dyn_cast<CostInterface>(&op))
      flops = cost.getFlops();
    stats.bytesRead += read;
    stats.bytesWritten += written;
    stats.modeledUs += model.kernelTimeUs(read + written, flops);
  }
  stats.kernels = stats.fusions + stats.libraryCalls + stats.unfusedOps;
  return stats;
}

} // namespace kiln
