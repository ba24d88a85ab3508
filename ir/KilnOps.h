//===- KilnOps.h - kiln operations --------------------------------*- C++ -*-===//

#ifndef KILN_IR_KILNOPS_H
#define KILN_IR_KILNOPS_H

#include "ir/KilnDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/HostTensor.h"
#include "ir/KilnInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/KilnOps.h.inc"

namespace kiln {
// The element type of kiln.attention's lse result for operands of element
// type |element|: f64 for f64, f32 otherwise.
mlir::Type attentionLseElementType(mlir::Type element);

// The largest head dimension (of q and k, and of v) the fused attention
// kernels take (runtime/cuda/CudaAttention.cpp's attentionConfig refuses
// larger ones at load). kiln-fuse-attention fuses nothing wider and
// kiln-decompose expands a wider kiln.attention even for CUDA.
constexpr int64_t kMaxFusedAttentionHeadDim = 256;

// Whether the fused kernels run this q [B,H,Tq,D] / v [B,H,Tk,Dv] pair: D
// and Dv at most kMaxFusedAttentionHeadDim.
bool fitsFusedAttention(mlir::Value q, mlir::Value v);
} // namespace kiln

#endif // KILN_IR_KILNOPS_H
