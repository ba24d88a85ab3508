//===- CudaEmitter.cpp - CUDA C++ kernels for loop fusions ------------------===//
//
// buildCudaKernelModule: the kernel of a fusion built as MLIR with the
// kernel model (see CudaEmitter.h), one phase per loop nest in the layout
// its uses call for (CudaLayouts.h); emitCudaKernel writes it as CUDA C++
// (CudaPrinter.cpp). The elementwise layout, which most nests take, is
// built here; the others by family in CudaReductionLayouts.cpp and
// CudaBlockLayouts.cpp.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/CudaHooks.h"
#include "codegen/cuda/CudaLayouts.h"
#include "codegen/cuda/CudaPrinter.h"

#include "codegen/KernelModel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kiln {

int64_t cudaSharedMemoryOptinBytes(unsigned arch) {
  int64_t optIn = 48 * 1024;
  if (arch >= 90 && arch < 100)
    optIn = 227 * 1024; // sm_90
  else if (arch == 100 || arch == 101 || arch == 103)
    optIn = 227 * 1024; // sm_100 class
  else if (arch == 80 || arch == 87)
    optIn = 163 * 1024;
  else if (arch == 86 || arch == 89 || arch >= 110)
    optIn = 99 * 1024;
  else if (arch == 75)
    optIn = 64 * 1024;
  else if (arch >= 70 && arch < 75)
    optIn = 96 * 1024;
  return optIn;
}

int64_t cudaRowCacheBytes(unsigned arch) {
  return cudaSharedMemoryOptinBytes(arch) - kCudaStaticSharedReserve;
}

int64_t cudaRowCacheBytes(ArrayRef<unsigned> archs) {
  int64_t bytes = cudaRowCacheBytes(90u);
  for (unsigned arch : archs)
    bytes = std::min(bytes, cudaRowCacheBytes(arch));
  return bytes;
}

namespace cuda_emitter {

NestUses usesOf(const LoopNest &nest, YieldOp yield) {
  NestUses uses;
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Value> work;
  for (unsigned result : nest.results)
    work.push_back(yield.getOperand(result));
  ArrayRef<int64_t> shape = nest.shape;
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (isa<ReduceOp, ScatterAddOp, MaxPool2DOp, MaxPool2DGradOp>(op))
      uses.loops = true;
    if (auto scatter = dyn_cast<ScatterAddOp>(op))
      uses.scatters.push_back(scatter);
    if (auto reduce = dyn_cast<ReduceOp>(op)) {
      auto operand = cast<RankedTensorType>(reduce.getOperand().getType());
      int64_t rank = operand.getRank();
      ArrayRef<int64_t> result =
          cast<RankedTensorType>(reduce.getType()).getShape();
      int64_t count = 1;
      for (int64_t d : reduce.getDimensions())
        count *= operand.getDimSize(d);
      uses.reduced = std::max(uses.reduced, count);
      if (rank > 0 && llvm::is_contained(reduce.getDimensions(), rank - 1) &&
          operand.getDimSize(rank - 1) > 1) {
        if (result == shape)
          uses.elementReduce = std::max(uses.elementReduce, count);
        else if (!shape.empty() && result == shape.drop_back())
          uses.rowReduce = std::max(uses.rowReduce, count);
      } else if (rank > 0 && result == shape &&
                 cudaColumnReductionLanes(product(shape), count) > 1) {
        // Few results with a column each: a warp per result, the lanes
        // splitting the rows (the element layout).
        uses.elementReduce = std::max(uses.elementReduce, count);
      }
    }
    for (Value operand : op->getOperands())
      work.push_back(operand);
  }
  return uses;
}

// The ops one element of an elementwise layout may take before it runs an
// element per thread instead of a vector's (buildElementwiseLayout).
constexpr int64_t kMaxLaneOps = 512;

void buildElementwiseLayout(CudaKernelBuilder &k, const LoopNest &nest,
                            const NestUses &uses) {
  // V consecutive elements per thread and step.
  OpBuilder &b = k.b;
  Location loc = k.loc;
  ArrayRef<int64_t> shape = nest.shape;
  int64_t total = product(shape);
  int64_t widest = 1;
  for (unsigned result : nest.results)
    widest = std::max(widest,
                      storedBytes(k.model.outputs[result].getElementType()));
  int64_t width = 16 / widest;
  if (uses.loops || total % width != 0 || shape.empty())
    width = 1;
  // Emits the loop with |V| elements per thread and returns it; |first| is
  // the first op it built in this block (the loop is the last).
  Operation *first = nullptr;
  auto emit = [&](int64_t V) {
    Value thread = k.intrinsics.index(b, loc, "kiln.thread");
    first = thread.getDefiningOp();
    Value threads = k.intrinsics.index(b, loc, "kiln.threads");
    Value w = b.create<arith::ConstantIndexOp>(loc, V);
    Value start =
        V > 1 ? b.create<arith::MulIOp>(loc, thread, w).getResult() : thread;
    Value step =
        V > 1 ? b.create<arith::MulIOp>(loc, threads, w).getResult() : threads;
    auto loop = b.create<scf::ForOp>(
        loc, start, b.create<arith::ConstantIndexOp>(loc, total), step);
    OpBuilder nb = OpBuilder::atBlockTerminator(loop.getBody());
    Value base = loop.getInductionVar();
    std::vector<SmallVector<Value, 4>> elementIvs;
    for (int64_t e = 0; e < V; ++e) {
      Value flat =
          e == 0 ? base
                 : nb.create<arith::AddIOp>(
                         loc, base, nb.create<arith::ConstantIndexOp>(loc, e))
                       .getResult();
      elementIvs.push_back(delinearizeIndex(nb, loc, flat, shape));
    }
    if (V > 1)
      k.hooks.setVector(V, shape, loop.getBody(), base, elementIvs);
    ElementEmitter emitter(k.model, k.hooks, nb);
    // A thread's reductions of the same elements (two column sums over the
    // same rows) share one loop, as on the CPU.
    emitter.enableSiblingReductions(nest.results);
    for (unsigned result : nest.results) {
      SmallVector<Value> values;
      for (int64_t e = 0; e < V; ++e)
        values.push_back(
            emitter.emit(k.yield.getOperand(result), elementIvs[e]));
      if (V == 1) {
        k.store(nb, loc, result, values[0], elementIvs[0]);
        continue;
      }
      SmallVector<Value> operands = {k.args()[k.numInputs() + result], base};
      operands.append(values.begin(), values.end());
      k.intrinsics.call(nb, loc, "kiln.vstore", operands, {});
    }
    return loop;
  };
  // A body too deep for lanes: vector loads pay where a kernel is bound by
  // memory, and a thread with thousands of ops per element is not. Its V
  // copies only multiply the code NVRTC and ptxas compile and the
  // registers each thread holds (an unrolled GRU's backward made one of
  // 28,700 lines at V = 8, 34 s of NVRTC and ptxas; the GPT's deepest
  // bodies are about 200 ops). Such a body is emitted again, an element
  // per thread.
  scf::ForOp loop = emit(width);
  if (width > 1 &&
      int64_t(loop.getBody()->getOperations().size()) > width * kMaxLaneOps) {
    // Drop what the first try built (the loop and the indices before it),
    // newest first, then the hooks' lanes.
    assert(first->getBlock() == loop->getBlock() &&
           first->isBeforeInBlock(loop));
    Operation *op = loop;
    while (op != first) {
      Operation *prev = op->getPrevNode();
      op->erase();
      op = prev;
    }
    first->erase();
    k.hooks.reset();
    width = 1;
    emit(width);
  }
  k.kernel.layouts.push_back(width > 1 ? "elementwise.v" + std::to_string(width)
                                       : "elementwise");
  // A thread builds its elements' reductions alone (a column reduction
  // walks its rows), and a scatter_add element scans every position.
  if (uses.reduced > 0)
    k.recordChain(uint64_t(uses.reduced), uint64_t(total));
  for (ScatterAddOp scatter : uses.scatters)
    k.recordChain(cast<RankedTensorType>(scatter.getIndices().getType())
                      .getNumElements(),
                  uint64_t(total));
  CudaLaunchRule &launch = k.kernel.launch;
  launch.maxBlocks = std::max<uint64_t>(
      launch.maxBlocks, ceilDiv(ceilDiv(total, width), kCudaBlockThreads));
}

} // namespace cuda_emitter

using namespace cuda_emitter;

FailureOr<OwningOpRef<ModuleOp>>
buildCudaKernelModule(FusionOp fusion, CudaKernelSource &kernel,
                      int64_t rowCacheBytes) {
  kernel.layouts.clear();
  kernel.dynamicSharedBytes = 0;
  kernel.cachedInputs.clear();
  kernel.serialSteps = kernel.serialThreads = 0;
  kernel.launch = CudaLaunchRule();
  kernel.launch.maxBlocks = 1;
  FailureOr<KernelModel> model = buildKernelModel(fusion);
  if (failed(model))
    return failure();
  MLIRContext *context = fusion.getContext();
  context->loadDialect<arith::ArithDialect, math::MathDialect,
                       memref::MemRefDialect, scf::SCFDialect,
                       func::FuncDialect>();
  Location loc = fusion.getLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argTypes;
  for (RankedTensorType type : model->inputs)
    argTypes.push_back(MemRefType::get(type.getShape(), type.getElementType()));
  for (RankedTensorType type : model->outputs)
    argTypes.push_back(MemRefType::get(type.getShape(), type.getElementType()));
  auto func = b.create<func::FuncOp>(loc, kCudaKernelFunc,
                                     b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Intrinsics intrinsics(*module);
  CudaHooks hooks(*module, *model,
                  entry->getArguments().take_front(model->inputs.size()),
                  intrinsics);
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());
  CudaKernelBuilder k{fusion,     *model, yield,  b,
                      loc,        entry,  intrinsics, hooks,
                      kernel,     rowCacheBytes};

  // The layout of each nest, from what its results reach. A block-scope
  // element nest whose units are the rows of a block-scope row nest (a loss
  // per row beside the row's gradient) is built in that row nest's unit
  // body, before its lane loop: the reductions both need are built once and
  // every pass over the row (both nests') shares one row cache, so the row
  // is read from global memory once.
  SmallVector<NestUses> nestUses;
  for (const LoopNest &nest : model->nests)
    nestUses.push_back(usesOf(nest, yield));
  SmallVector<int> partner = inRowPartners(*model, nestUses);
  std::optional<RowGroupPlan> rowGroups =
      rowGroupPlanOf(*model, nestUses, yield);
  for (auto [nestIndex, nest] : llvm::enumerate(model->nests)) {
    if (llvm::is_contained(partner, int(nestIndex)))
      continue; // built with its row nest
    if (rowGroups && nestIndex == rowGroups->partialNest)
      continue; // built with the rows
    hooks.reset();
    const NestUses &uses = nestUses[nestIndex];
    if (rowGroups && nestIndex == rowGroups->rowNest) {
      buildRowGroupLayout(k, *rowGroups);
    } else if (auto [scatter, indicesInput] =
                   scatterRowsOf(nest, uses, fusion);
               scatter) {
      buildScatterRowsLayout(k, nest, scatter, indicesInput);
    } else if (uses.elementReduce || uses.rowReduce) {
      const LoopNest *inRow = partner[nestIndex] >= 0
                                  ? &model->nests[partner[nestIndex]]
                                  : nullptr;
      buildReductionLayout(k, nest, uses, inRow);
    } else {
      buildElementwiseLayout(k, nest, uses);
    }
  }
  b.create<func::ReturnOp>(loc);
  if (failed(func.verify()))
    return failure();
  return module;
}


FailureOr<CudaKernelSource> emitCudaKernel(FusionOp fusion, StringRef name,
                                           int64_t rowCacheBytes) {
  CudaKernelSource kernel;
  kernel.name = name.str();
  FailureOr<OwningOpRef<ModuleOp>> module =
      buildCudaKernelModule(fusion, kernel, rowCacheBytes);
  if (failed(module))
    return failure();
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "// Kiln CUDA kernel " << name << " (fusion of kind "
     << stringifyFusionKind(fusion.getKind()) << "; nests:";
  for (const std::string &layout : kernel.layouts)
    os << " " << layout;
  os << "; block " << kernel.launch.blockThreads << ", up to "
     << kernel.launch.maxBlocks << " blocks, at most "
     << kernel.launch.blocksPerSm << " per SM";
  if (kernel.dynamicSharedBytes) {
    os << "; rows of";
    for (unsigned input : kernel.cachedInputs)
      os << " in" << input;
    os << " cached in " << kernel.dynamicSharedBytes
       << " bytes of dynamic shared memory";
  }
  os << ")\n";
  os << kCudaPrelude;
  if (failed(printCudaKernel(**module, name, fusion.getNumResults(),
                             kernel.dynamicSharedBytes,
                             kernel.launch.blockThreads, os)))
    return fusion.emitOpError() << "cannot print its CUDA kernel";
  kernel.source = std::move(os.str());
  return kernel;
}

} // namespace kiln
