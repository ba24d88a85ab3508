//===- KernelModel.h - target-neutral model of a fusion kernel -----*- C++ -*-===//
//
// What a kernel computes, independent of the target: its inputs and outputs,
// the loop nests it runs (one per distinct result shape; innermost over the
// last, contiguous dimension) and, through ElementEmitter, how the element of
// any tensor value in the fusion body at given indices is built as scalar
// arith/math ops. Elementwise ops reach their computation only through the
// ScalarSemantics interface (DESIGN.md: one op table); data movement ops
// (broadcast_in_dim, reshape, transpose, slice, pad, concatenate) map
// indices; pad and concatenate read at clamped indices and select; a
// kiln.reduce element is a loop over the reduced dimensions that accumulates
// its operand's elements (ReductionEmitter.cpp); gather, scatter_add,
// max_pool2d and max_pool2d_grad elements read at data-dependent or
// windowed indices, each written as a gather over its result
// (IndexedEmitter.cpp). The target supplies loads of
// inputs and of non-splat constants through KernelHooks, so the CPU and CUDA
// emitters share everything else.
//
// `loop`, `reduction`, `multi_output` and `horizontal` fusions are modeled
// (each result gets a loop nest over its shape); `gemm` fusions and any body
// holding an op outside the list above (dot_general, convolution, ...) are
// rejected with a diagnostic. Every output element is computed from the
// fusion's inputs alone, never from another output, so any subset of a
// nest's elements can be computed on its own (what the CPU kernel ABI's
// part/parts split relies on).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_KERNELMODEL_H
#define KILN_CODEGEN_KERNELMODEL_H

#include "ir/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// One loop nest: iterates over |shape| and stores the listed results.
struct LoopNest {
  llvm::SmallVector<int64_t, 4> shape;
  llvm::SmallVector<unsigned, 2> results; // indices into KernelModel::outputs
};

struct KernelModel {
  FusionOp fusion;
  llvm::SmallVector<mlir::RankedTensorType> inputs;
  llvm::SmallVector<mlir::RankedTensorType> outputs;
  llvm::SmallVector<LoopNest> nests;
};

// Describes |fusion|. Fails with a diagnostic on the fusion when it is a
// `gemm` fusion, when a type is not a statically shaped ranked tensor, or
// naming the first body op the model cannot express.
mlir::FailureOr<KernelModel> buildKernelModel(FusionOp fusion);

// A key that two fusions share exactly when a code generator makes the same
// kernel of both: the fusion's kind, its inputs' types, and
// each op of its body in order (name, attributes, result types, and each
// operand as the number of the value in the body). Locations do not count.
// A GPT's blocks repeat their fusions; a compile generates each kernel once
// (tools/kiln/lib/PackageBuilder.cpp). A body op with regions, or one that
// reads a value from outside the body, makes the key unique to |fusion|.
std::string fusionKey(FusionOp fusion);

// |flat| as indices into |shape| (row-major, index values built at |b|'s
// insertion point); unit dimensions get the constant 0.
llvm::SmallVector<mlir::Value, 4> delinearizeIndex(mlir::OpBuilder &b,
                                                   mlir::Location loc,
                                                   mlir::Value flat,
                                                   llvm::ArrayRef<int64_t> shape);

// Target hooks: how an element of an input or of a non-splat constant is
// read at given `index` values.
class KernelHooks {
public:
  virtual ~KernelHooks();
  virtual mlir::Value loadInput(mlir::OpBuilder &b, mlir::Location loc,
                                unsigned input, mlir::ValueRange indices) = 0;
  virtual mlir::Value loadConstant(mlir::OpBuilder &b, mlir::Location loc,
                                   ConstantOp constant,
                                   mlir::ValueRange indices) = 0;

  // Cooperative reductions (the CUDA target; the CPU keeps the defaults):
  // when the threads of a warp or block build the kiln.reduce element at
  // |b|'s insertion point together, the lane of this thread and the number
  // of lanes. The reduced loop (over one dimension, or the flattened index
  // of several) then starts at the lane and steps by the count, and
  // combineLanes joins the lanes' partial results so that
  // every lane gets the reduction's value. std::nullopt: one thread builds
  // the whole reduction (the default).
  struct ReductionLanes {
    mlir::Value lane;  // index
    mlir::Value count; // index
  };
  virtual std::optional<ReductionLanes> reductionLanes(mlir::OpBuilder &b) {
    (void)b;
    return std::nullopt;
  }
  // The combination (sum, max or min; a mean's partial sums are summed) of
  // every lane's |value|, in every lane.
  virtual mlir::Value combineLanes(mlir::OpBuilder &b, mlir::Location loc,
                                   ReduceKind kind, mlir::Value value) {
    (void)b;
    (void)loc;
    (void)kind;
    return value;
  }

  // Whether a sum or mean of f32 values whose accumulator adds at least
  // kWideSumCount elements accumulates in f64 (ReductionEmitter.cpp; a
  // reduction keeping 16 partial sums counts a sixteenth). The CPU does: one
  // thread adds the elements in order, and an f32 running sum of N elements
  // is off by up to N ulps, which a batch norm's backward pass (differences
  // of sums over batch and positions) turns into gradients off by percents.
  // The CUDA target keeps f32 where lanes share a reduction and in its
  // column tiles (short runs each, after SplitReductions); a reduction one
  // CUDA thread builds alone takes f64 as the CPU's do, whatever this says.
  virtual bool wideSums() const { return false; }

  // Whether ElementEmitter builds a value whose indices do not depend on
  // the innermost enclosing loops before those loops (once per iteration
  // of the loops it does depend on) instead of once per element. The CPU
  // does: a batch norm's per-channel scale (a sqrt and two divisions) was
  // built for every element of [N, C, H, W], and LLVM cannot hoist it
  // itself, since the kernel's stores may alias any input as far as it
  // knows. Off by default (CUDA: per-thread elements, and registers).
  virtual bool hoistLoopInvariants() const { return false; }

  // A one-thread reduction over the contiguous last dimension keeps
  // |count| partial results of type |type| (ReductionEmitter.cpp). Null
  // (the default, CUDA): they are loop-carried scalars, one expression per
  // partial in the loop body. A memref<count x type> (the CPU: one stack
  // array per reduction, allocated once per kernel call): the partials
  // live there and the body is a loop over them, which LLVM's loop
  // vectorizer turns into one vector operation per step (the scalar form
  // left it to the SLP vectorizer, which split a masked softmax's chains
  // into pairs).
  virtual mlir::Value partialResults(mlir::OpBuilder &b, mlir::Location loc,
                                     mlir::Type type, int64_t count) {
    (void)b;
    (void)loc;
    (void)type;
    (void)count;
    return {};
  }
};

// What both targets' loadConstant do: a fusion's non-splat constants as
// private memref.globals of the kernel's |module| ("constant_N", one per
// constant op, declared on first use), loaded at an element's indices.
class ConstantGlobals {
public:
  explicit ConstantGlobals(mlir::ModuleOp module) : module_(module) {}
  mlir::Value load(mlir::OpBuilder &b, mlir::Location loc, ConstantOp constant,
                   mlir::ValueRange indices);

private:
  mlir::ModuleOp module_;
  llvm::DenseMap<mlir::Operation *, std::string> names_;
};

// The type a reduction or a scatter of |element| accumulates in: the
// float's compute type, i64 for integers.
mlir::Type accumulatorType(mlir::Type element);
// |acc| and |x| combined as |kind| reduces: added (sum, mean), multiplied,
// or their max or min, a NaN winning (arith.maximumf/minimumf, as kiln.max
// and kiln.min build them). A scatter's updates combine the same way.
mlir::Value combineAccumulated(mlir::OpBuilder &b, mlir::Location loc,
                               ReduceKind kind, mlir::Value acc, mlir::Value x);

// Builds element values of the fusion body's tensors at insertion points the
// caller chooses (inside its loop nest). Values are memoized per (tensor,
// indices) so a DAG in the body is built once per element, not once per path.
// One emitter serves one loop body: make a new one per nest.
class ElementEmitter {
public:
  ElementEmitter(const KernelModel &model, KernelHooks &hooks,
                 mlir::OpBuilder &builder)
      : model_(model), hooks_(hooks), b_(builder) {}

  // The scalar (stored element type) of body value |value| at |indices|.
  mlir::Value emit(mlir::Value value, mlir::ValueRange indices);

  const KernelModel &model() const { return model_; }

  // Lets a kiln.reduce be built together with the other reductions of the
  // same elements (operand type and dimensions) that the fusion results
  // |results| (those this emitter's nest stores) are computed from and that
  // do not depend on
  // each other: one loop nest accumulates all of them, each in its own
  // order as when built alone, and the others' values are cached for the
  // same indices. Lanes that cooperate on a reduction (reductionLanes)
  // split the group's loop and combine each member's partials. Off by
  // default; both targets' nest builders turn it on.
  void enableSiblingReductions(llvm::ArrayRef<unsigned> results);

  // The columns of a row that this lane holds, when the lanes that
  // cooperate on a reduction (KernelHooks::reductionLanes) each hold
  // columns lane, lane + count, ... of every row of |extent| columns
  // (CUDA's row-group layout: a block as wide as the row); |valid| says
  // which are in the row (the rest repeat its last column). A cooperative
  // reduction over the last dimension of such a row then accumulates this
  // lane's elements at those columns, built outside any loop, instead of
  // looping over its share: the same additions in the same order, and what
  // the nest builds at the same columns afterwards (the row's gradient
  // beside its sums) finds the elements in the cache, so each input
  // element is loaded once for every reduction and result of the row.
  void setLaneColumns(llvm::ArrayRef<mlir::Value> columns,
                      llvm::ArrayRef<mlir::Value> valid, int64_t extent);

  // Column-reduction tiles (ReductionEmitter.cpp). A column reduction keeps
  // its operand's last dimension. Lanes of a tile are accumulators the
  // target stores (one per consecutive result element, in the reduction's
  // accumulator type).
  using LaneLoad = llvm::function_ref<mlir::Value(mlir::OpBuilder &,
                                                  mlir::Location, mlir::Value)>;
  using LaneStore = llvm::function_ref<void(mlir::OpBuilder &, mlir::Location,
                                            mlir::Value, mlir::Value)>;
  // Called with the indices of each operand element a reduction tile
  // accumulates, at the point where the element was built: values built
  // there at those indices come from the cache, so a target can store
  // another result of the operand's shape (the gradient a bias gradient
  // sums) without building or reading its elements again.
  using ElementVisit = llvm::function_ref<void(mlir::ValueRange)>;
  static bool isColumnReduction(ReduceOp reduce);
  // |wideSums|: the target's KernelHooks::wideSums().
  static mlir::Type reductionAccumulatorType(ReduceOp reduce,
                                             bool wideSums = false);
  // Builds, at the insertion point, the accumulation of |reduce|'s result
  // elements (|outer|..., |tileStart| + lane) for lane in [0, |tileSize|):
  // the reduced loops outside, the lanes inside. |visit| (optional) is
  // called for each element accumulated, in the innermost loop.
  void emitReductionTile(ReduceOp reduce, mlir::ValueRange outer,
                         mlir::Value tileStart, mlir::Value tileSize,
                         LaneLoad load, LaneStore store,
                         ElementVisit visit = nullptr);
  // Makes emit(|reduce|, |indices|) give lane |lane|'s finished value.
  void seedReduction(ReduceOp reduce, mlir::ValueRange indices,
                     mlir::Value lane, LaneLoad load);
  // The same for scatter_add rows (IndexedEmitter.cpp): a tile of a result
  // row's consecutive elements scans the indices once.
  static bool isTiledScatter(ScatterAddOp scatter);
  void emitScatterTile(ScatterAddOp scatter, mlir::ValueRange outer,
                       mlir::Value tileStart, mlir::Value tileSize,
                       LaneLoad load, LaneStore store);
  void seedScatter(ScatterAddOp scatter, mlir::ValueRange indices,
                   mlir::Value lane, LaneLoad load);
  // Scatter rows built by a target that finds the index positions naming a
  // row itself (CUDA: a block scans the indices together and lists the
  // matches in shared memory). The result elements (|outer|...,
  // |columns|[l]) for every l, in the accumulator type: the operand's
  // elements, then, for every chunk start c = 0, |chunkStep|, ... below the
  // indices' element count, |collect|(c) positions (the count it returns)
  // in increasing flat row-major order, the k-th of which |match|(k) gives,
  // each adding its updates' elements in that order (the interpreter's
  // order, as emitScatterAdd). |collect| must be called by every thread of
  // the target's cooperation, so the chunk loop has the same trip count in
  // all of them.
  using ScatterCollect = llvm::function_ref<mlir::Value(
      mlir::OpBuilder &, mlir::Location, mlir::Value)>;
  llvm::SmallVector<mlir::Value, 4>
  emitScatterRows(ScatterAddOp scatter, mlir::ValueRange outer,
                  llvm::ArrayRef<mlir::Value> columns, mlir::Value chunkStep,
                  ScatterCollect collect, ScatterCollect match);
  // Makes emit(|scatter|, |indices|) give |accumulator| (converted to the
  // result's element type).
  void seedScatterValue(ScatterAddOp scatter, mlir::ValueRange indices,
                        mlir::Value accumulator);
  // Dispatch over the tiled ops (a column ReduceOp or a ScatterAddOp).
  static mlir::Type tileAccumulatorType(mlir::Operation *op,
                                        bool wideSums = false);
  // |visit|: a column ReduceOp's (emitReductionTile); null for a scatter.
  void emitTile(mlir::Operation *op, mlir::ValueRange outer,
                mlir::Value tileStart, mlir::Value tileSize, LaneLoad load,
                LaneStore store, ElementVisit visit = nullptr);
  void seedTile(mlir::Operation *op, mlir::ValueRange indices,
                mlir::Value lane, LaneLoad load);

private:
  mlir::Value indexConstant(mlir::Location loc, int64_t v);
  // The outermost scf.for enclosing the insertion point (through scf.for
  // ops only) whose region defines none of |indices|, or null.
  mlir::Operation *hoistPoint(mlir::ValueRange indices);
  // Calls |build| with the insertion point before |hoistBefore| and
  // |indices| as values valid there (constants rebuilt); cached values
  // built inside |hoistBefore| are set aside meanwhile, then come back.
  void buildBefore(mlir::Operation *hoistBefore, mlir::ValueRange indices,
                   llvm::function_ref<void(mlir::ValueRange)> build);
  mlir::Value emitUncached(mlir::Value value, mlir::ValueRange indices);
  // A kiln.reduce element: scf.for loops (with the accumulator as iter_arg)
  // over the reduced dimensions, innermost over the last one. Values built
  // inside the loops are dropped from the caches afterwards, since they do
  // not dominate what follows.
  // It is built before the outermost enclosing loop whose induction
  // variable |indices| do not depend on.
  mlir::Value emitReduce(ReduceOp reduce, mlir::ValueRange indices);
  // |reduce| and the siblings to build with it at |indices| (itself alone
  // unless enableSiblingReductions).
  llvm::SmallVector<ReduceOp> reductionGroup(ReduceOp reduce,
                                             mlir::ValueRange indices);
  // The values of |group|'s reductions (same operand type and dimensions)
  // at |indices|, built in one loop nest at the insertion point.
  llvm::SmallVector<mlir::Value> emitReduceHere(llvm::ArrayRef<ReduceOp> group,
                                                mlir::ValueRange indices);
  // Gather, scatter_add and max pooling (IndexedEmitter.cpp).
  struct CacheScope;
  struct WindowArgmax {
    mlir::Value value;    // in the compute type
    mlir::Value position; // ih * W + iw as an index, -1 for an empty window
  };
  mlir::Value toIndex(mlir::Location loc, mlir::Value integer);
  mlir::Value emitGather(GatherOp gather, mlir::ValueRange indices);
  mlir::Value emitScatterAdd(ScatterAddOp scatter, mlir::ValueRange indices);
  // The best element of window (oh, ow) of |input| for a pooling whose
  // output has |outShape| (which says whether any window reaches past the
  // input).
  WindowArgmax emitWindowArgmax(mlir::Location loc, mlir::Value input,
                                mlir::Value n, mlir::Value c, mlir::Value oh,
                                mlir::Value ow, llvm::ArrayRef<int64_t> window,
                                llvm::ArrayRef<int64_t> strides,
                                llvm::ArrayRef<int64_t> padding,
                                llvm::ArrayRef<int64_t> outShape);
  mlir::Value emitMaxPool(MaxPool2DOp pool, mlir::ValueRange indices);
  // kiln.dropout's element at |indices|: ir/reference/Philox.h's recipe
  // (Philox-4x32-10 on the element's row-major index) in arith ops.
  mlir::Value emitDropout(DropoutOp dropout, mlir::ValueRange indices);
  mlir::Value emitRandomUniform(RandomUniformOp random,
                                mlir::ValueRange indices);
  // u(seed, counter, i) on [0, 1) in f64 for the element at |indices| of
  // |type| (kiln.dropout's and kiln.random_uniform's Philox-4x32-10).
  mlir::Value emitUniform(mlir::Location loc, mlir::RankedTensorType type,
                          mlir::Value counterTensor, uint64_t seed,
                          mlir::ValueRange indices);
  mlir::Value emitMaxPoolGrad(MaxPool2DGradOp grad, mlir::ValueRange indices);
  // Window (oh, ow) of |grad|'s input: whether input position |here| (ih * W
  // + iw) is its maximum, and its gradient dy[n, c, oh, ow] in the compute
  // type.
  std::pair<mlir::Value, mlir::Value>
  emitWindowGradient(MaxPool2DGradOp grad, mlir::Value n, mlir::Value c,
                     mlir::Value oh, mlir::Value ow, mlir::Value here);
  // |index| clamped to [0, extent - 1].
  mlir::Value clamp(mlir::Location loc, mlir::Value index, int64_t extent);
  llvm::SmallVector<mlir::Value, 4>
  reshapeIndices(mlir::Location loc, llvm::ArrayRef<int64_t> fromShape,
                 llvm::ArrayRef<int64_t> toShape, mlir::ValueRange indices);

  const KernelModel &model_;
  KernelHooks &hooks_;
  mlir::OpBuilder &b_;
  std::map<std::vector<void *>, mlir::Value> cache_;
  llvm::DenseMap<int64_t, mlir::Value> indexConstants_;
  llvm::SmallVector<ReduceOp> siblingCandidates_;
  llvm::SmallVector<mlir::Value, 4> laneColumns_, laneColumnsValid_;
  int64_t laneColumnsExtent_ = 0;
};

} // namespace kiln

#endif // KILN_CODEGEN_KERNELMODEL_H
