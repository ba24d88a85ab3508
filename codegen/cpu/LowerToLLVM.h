//===- LowerToLLVM.h - CPU kernels for loop fusions ----------------*- C++ -*-===//
//
// Compiles a kiln.fusion of kind `loop`, `reduction`, `multi_output` or
// `horizontal` (whose body the kernel model supports; not `gemm`) into native
// code: the kernel model's loop nests (reductions as inner accumulation loops)
// become an MLIR func of scf.for loops over memrefs (inputs, then
// outputs; the innermost loop walks the last, contiguous dimension so LLVM
// can vectorize it), lowered with upstream passes to the LLVM dialect and
// JIT-compiled for the host CPU at -O3 by mlir::ExecutionEngine.
//
// The kernel takes bare pointers to row-major buffers of the element types
// (i1 as one byte). CompiledKernel::run adapts HostTensors for tests; the
// runtime will pass raw buffers.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CPU_LOWERTOLLVM_H
#define KILN_CODEGEN_CPU_LOWERTOLLVM_H

#include "ir/HostTensor.h"
#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace mlir {
class ExecutionEngine;
} // namespace mlir

namespace kiln {

struct BufferSignature {
  DType dtype;
  llvm::SmallVector<int64_t, 4> shape;
};

class CompiledKernel {
public:
  CompiledKernel();
  CompiledKernel(CompiledKernel &&);
  CompiledKernel &operator=(CompiledKernel &&);
  ~CompiledKernel();

  // Runs the kernel: |inputs| and |outputs| in the fusion's order, of the
  // fusion's shapes and element types. Fails with a message in |error| when
  // they do not match.
  mlir::LogicalResult run(llvm::ArrayRef<const HostTensor *> inputs,
                          llvm::ArrayRef<HostTensor *> outputs,
                          std::string *error = nullptr) const;

  // Runs the kernel on raw buffers (one pointer per input, then per output).
  void runRaw(llvm::ArrayRef<void *> buffers) const;

  llvm::ArrayRef<BufferSignature> inputs() const { return inputs_; }
  llvm::ArrayRef<BufferSignature> outputs() const { return outputs_; }

private:
  friend mlir::FailureOr<CompiledKernel> compileLoopFusion(FusionOp fusion);

  std::unique_ptr<mlir::ExecutionEngine> engine_;
  llvm::SmallVector<BufferSignature> inputs_;
  llvm::SmallVector<BufferSignature> outputs_;
};

// Builds the kernel of |fusion| as a module holding `func.func @kernel` on
// memrefs (scf/arith/math/memref), before lowering to LLVM.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildLoopKernelModule(FusionOp fusion);

// Lowers a module from buildLoopKernelModule to the LLVM dialect.
mlir::LogicalResult lowerKernelModuleToLLVM(mlir::ModuleOp module);

// The kernel of |fusion| as LLVM IR for the host CPU, optimized at -O3 (what
// the JIT compiles; what a package could carry as bitcode).
mlir::FailureOr<std::unique_ptr<llvm::Module>>
optimizedKernelIR(FusionOp fusion, llvm::LLVMContext &llvmContext);

// Builds, lowers and JIT-compiles |fusion|. Fails with a diagnostic on the
// fusion (or on the unsupported op in it).
mlir::FailureOr<CompiledKernel> compileLoopFusion(FusionOp fusion);

} // namespace kiln

#endif // KILN_CODEGEN_CPU_LOWERTOLLVM_H
