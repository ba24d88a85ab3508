//===- LoopChain.h - the chain a generated kernel's loops walk ----*- C++ -*-===//
//
// For the tests of CudaKernelSource::serialSteps (codegen/cuda/
// CudaEmitter.h), the chain kiln inspect --roofline prices: the same chain
// worked out from the kernel module's own loops (buildCudaKernelModule),
// independently of the layouts' bookkeeping.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_LOOPCHAIN_H
#define KILN_TESTS_UNIT_CUDA_LOOPCHAIN_H

#include "codegen/cuda/CudaEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::test {

// The chain read off the kernel's own loops, as an independent check of
// the one the layouts record: for each load of a kernel argument (global
// memory), the iterations one thread makes of the scf.for loops around it,
// multiplied. A loop stepping by the block's threads is split over
// |blockThreads| lanes (the kernel's CudaLaunchRule::blockThreads: 256, or
// as wide as the row for the row-group layout), one stepping by a constant
// from a lane's index over that many; a loop stepping by another run-time
// value (the grid-stride loops over units and elements) counts once: its
// iterations are other units' work, which the recorded chain leaves to
// other threads.
inline uint64_t loopChain(mlir::ModuleOp kernelModule,
                          unsigned blockThreads = kCudaBlockThreads) {
  auto kernel = kernelModule.lookupSymbol<mlir::func::FuncOp>("kernel");
  if (!kernel)
    return 0;
  auto constant = [](mlir::Value v) -> std::optional<int64_t> {
    if (auto c = v.getDefiningOp<mlir::arith::ConstantIndexOp>())
      return c.value();
    return std::nullopt;
  };
  auto trips = [&](mlir::scf::ForOp loop) -> uint64_t {
    std::optional<int64_t> ub = constant(loop.getUpperBound());
    if (!ub)
      return 1;
    int64_t lb = constant(loop.getLowerBound()).value_or(0);
    int64_t step = 0;
    if (std::optional<int64_t> c = constant(loop.getStep()))
      step = *c;
    else if (auto call = loop.getStep().getDefiningOp<mlir::func::CallOp>();
             call && call.getCallee().starts_with("kiln.block_threads"))
      step = blockThreads;
    else
      return 1;
    return *ub > lb ? uint64_t((*ub - lb + step - 1) / step) : 0;
  };
  uint64_t longest = 0;
  kernel.walk([&](mlir::memref::LoadOp load) {
    auto arg = mlir::dyn_cast<mlir::BlockArgument>(load.getMemRef());
    if (!arg || arg.getOwner() != &kernel.getBody().front())
      return;
    uint64_t steps = 1;
    for (mlir::Operation *p = load->getParentOp(); p != kernel.getOperation();
         p = p->getParentOp())
      if (auto loop = mlir::dyn_cast<mlir::scf::ForOp>(p))
        steps *= trips(loop);
    longest = std::max(longest, steps);
  });
  return longest;
}

// Whether every nest of a kernel with |layouts| (CudaKernelSource::layouts)
// is a warp or block layout, whose lanes share each unit's reductions: its
// loops then walk the recorded chain exactly.
inline bool lanesShareEveryUnit(llvm::ArrayRef<std::string> layouts) {
  return !layouts.empty() && llvm::all_of(layouts, [](const std::string &l) {
    return llvm::StringRef(l).starts_with("row.") ||
           llvm::StringRef(l).starts_with("element.");
  });
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_CUDA_LOOPCHAIN_H
