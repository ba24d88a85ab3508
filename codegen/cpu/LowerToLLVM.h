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
// Shaped for the vectorizer: rank-0 values (an optimizer's bias
// corrections) are built once before a nest's loops; a nest whose results
// use column reductions or scatter_add rows walks its last dimension in
// tiles whose lanes accumulate together (contiguous reads); reductions over
// a long last dimension keep 16 partial results; f32 transcendentals become
// polynomial approximations; innermost loops are marked
// llvm.loop.parallel_accesses (no runtime alias checks, which in-place
// updates would fail). Summation orders are fixed, so a kernel's results do
// not depend on the run, the part split or the thread count.
//
// Kernel ABI. Every kernel module defines the C entry point
//   extern "C" void kiln_kernel(void **buffers, int64_t part, int64_t parts);
// |buffers| holds bare pointers to the fusion's row-major buffers of their
// element types (i1 as one byte), inputs then outputs. A call computes only
// its share: each loop nest's outermost loop covers [extent * part / parts,
// extent * (part + 1) / parts), and a rank-0 nest runs in part 0 only, so
// calling every part in 0..parts-1 (in any order, or concurrently on
// threads) computes every output element exactly once, and the result does
// not depend on |parts|. Any part can run alone because the nests read only
// the fusion's inputs, never another nest's outputs. A call with part
// outside [0, parts) does nothing. (Inside, the entry point loads the
// pointers and calls the internal `kernel` function of the MLIR module,
// which -O3 inlines.) CompiledKernel::run adapts HostTensors for tests.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CPU_LOWERTOLLVM_H
#define KILN_CODEGEN_CPU_LOWERTOLLVM_H

#include "ir/HostTensor.h"
#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace mlir {
class ExecutionEngine;
} // namespace mlir

namespace kiln {

// The symbol of every CPU kernel's entry point (see above).
constexpr const char kCpuKernelEntryPoint[] = "kiln_kernel";

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

  // Runs the kernel on raw buffers (one pointer per input, then per output),
  // the whole range.
  void runRaw(llvm::ArrayRef<void *> buffers) const;
  // Runs part |part| of |parts| (see the kernel ABI above).
  void runRaw(llvm::ArrayRef<void *> buffers, int64_t part,
              int64_t parts) const;

  llvm::ArrayRef<BufferSignature> inputs() const { return inputs_; }
  llvm::ArrayRef<BufferSignature> outputs() const { return outputs_; }

private:
  friend mlir::FailureOr<CompiledKernel> compileLoopFusion(FusionOp fusion);

  using EntryPoint = void (*)(void **, int64_t, int64_t);

  std::unique_ptr<mlir::ExecutionEngine> engine_;
  EntryPoint entry_ = nullptr;
  llvm::SmallVector<BufferSignature> inputs_;
  llvm::SmallVector<BufferSignature> outputs_;
};

// One element of |dtype| in a kernel buffer, as the kernel ABI lays it out
// (f16 and bf16 rounded to nearest even, i1 one byte holding 0 or 1), and
// back as a double. The tests that run kernels on buffers of their own use
// these too.
void storeNativeElement(DType dtype, double value, uint8_t *at);
double loadNativeElement(DType dtype, const uint8_t *at);

// |tensor|'s elements as a kernel buffer (row-major, native element type),
// and a buffer's elements back into |tensor| (whose dtype and size say how
// many and of which type).
void toNativeBuffer(const HostTensor &tensor, std::vector<uint8_t> &buffer);
void fromNativeBuffer(const std::vector<uint8_t> &buffer, HostTensor &tensor);

// Builds the kernel of |fusion| as a module holding `func.func @kernel` on
// memrefs (scf/arith/math/memref), before lowering to LLVM: its arguments
// are the inputs' and outputs' memrefs, then `part` and `parts` (index).
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildLoopKernelModule(FusionOp fusion);

// Lowers a module from buildLoopKernelModule to the LLVM dialect and adds
// the `kiln_kernel` entry point.
mlir::LogicalResult lowerKernelModuleToLLVM(mlir::ModuleOp module);

// The kernel of |fusion| as LLVM IR for the host CPU (its triple and data
// layout set), not yet optimized: what optimizeKernelIR takes. This part
// needs the fusion's MLIRContext; the rest does not.
mlir::FailureOr<std::unique_ptr<llvm::Module>>
kernelIR(FusionOp fusion, llvm::LLVMContext &llvmContext);

// Optimizes a kernelIR module at -O3 for the host CPU (what the JIT does;
// the parallel-loop marks and the bf16-as-bits rewrite included). Touches
// no MLIR and nothing shared: modules in distinct LLVMContexts may be
// optimized on threads side by side (the package builder does).
llvm::Error optimizeKernelIR(llvm::Module &module);

// kernelIR then optimizeKernelIR: the kernel of |fusion| as LLVM IR for the
// host CPU, optimized at -O3 (what the JIT compiles; what a package carries
// as bitcode).
mlir::FailureOr<std::unique_ptr<llvm::Module>>
optimizedKernelIR(FusionOp fusion, llvm::LLVMContext &llvmContext);

// Builds, lowers and JIT-compiles |fusion|. Fails with a diagnostic on the
// fusion (or on the unsupported op in it).
mlir::FailureOr<CompiledKernel> compileLoopFusion(FusionOp fusion);

} // namespace kiln

#endif // KILN_CODEGEN_CPU_LOWERTOLLVM_H
