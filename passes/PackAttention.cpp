//===- PackAttention.cpp - attention reading its projection in place --------===//
//
// kiln-pack-attention rewrites a kiln.attention whose q, k and v are the
// three thirds of one projection, each split into heads and transposed
//
//   q = transpose(reshape(slice(X, [.., 0, HD)) -> [B, T, H, D]), [0, 2, 1, 3])
//   k = ... slice [HD, 2HD) ...,  v = ... slice [2HD, 3HD) ...   (X: [B, T, 3HD])
//
// into kiln.attention_qkv over reshape(X) ([B, T, 3, H, D]), whose out is
// token-major ([B, T, H, D]): a user that transposed out back to token-major
// (to merge the heads for the output projection) reads it directly. Each
// kiln.attention_grad of the same forward becomes kiln.attention_qkv_grad:
// its out operand is the packed op's out, its dout is taken before the
// transpose that made it head-major when there is one, and when dq, dk and
// dv only feed the gradient of the split (each transposed back, reshaped to
// [B, T, HD], padded into its third of [B, T, 3HD], and the three summed),
// that sum becomes a reshape of dqkv. Any other user of dq, dk or dv reads
// a slice of dqkv. So on the CUDA target the fused kernels read the
// projection and write its gradient where they lie: the layout copies
// around every attention (split, merge, and their gradients) disappear.
//
// Anything that does not match exactly is left as it is; the pass only
// moves data between layouts, so the step computes the same values.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/gradients/GradientUtils.h"
#include "passes/Decompose.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"

namespace kiln {
#define GEN_PASS_DEF_KILNPACKATTENTION
#include "passes/Passes.h.inc"
} // namespace kiln

using namespace mlir;

namespace kiln {
namespace {

constexpr int64_t kSwapHeads[] = {0, 2, 1, 3};

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

bool isSwap(TransposeOp t) {
  return t && t.getPermutation() == ArrayRef<int64_t>(kSwapHeads);
}

// The split of one projection into heads that q, k or v is.
struct Part {
  Value projection; // [B, T, 3HD]
  int64_t offset = 0;
};

// Whether |x| ([B, H, T, D]) is transpose(reshape(slice(X))) with the
// slice a contiguous range of X's last dimension, X [B, T, N].
std::optional<Part> matchPart(Value x) {
  auto transpose = x.getDefiningOp<TransposeOp>();
  if (!isSwap(transpose))
    return std::nullopt;
  auto reshape = transpose.getOperand().getDefiningOp<ReshapeOp>();
  if (!reshape)
    return std::nullopt;
  auto slice = reshape.getOperand().getDefiningOp<SliceOp>();
  if (!slice)
    return std::nullopt;
  Value projection = slice.getOperand();
  ArrayRef<int64_t> full = shapeOf(projection), split = shapeOf(reshape);
  if (full.size() != 3 || split.size() != 4 || full[0] != split[0] ||
      full[1] != split[1])
    return std::nullopt;
  ArrayRef<int64_t> start = slice.getStartIndices(),
                    limit = slice.getLimitIndices(),
                    strides = slice.getStrides();
  if (start[0] != 0 || start[1] != 0 || limit[0] != full[0] ||
      limit[1] != full[1] || !llvm::all_of(strides, [](int64_t s) { return s == 1; }) ||
      limit[2] - start[2] != split[2] * split[3])
    return std::nullopt;
  return Part{projection, start[2]};
}

// |v| transposed by kSwapHeads, taking the operand of a transpose that
// made it rather than transposing twice.
Value swapHeads(OpBuilder &b, Location loc, Value v) {
  if (auto t = v.getDefiningOp<TransposeOp>(); isSwap(t))
    return t.getOperand();
  return grad::transpose(b, loc, v, kSwapHeads);
}

// The pad of part |part| of three into [B, T, 3HD], reached from |d|
// ([B, H, T, D], a gradient) through a transpose back to token-major and a
// reshape merging the heads, each the only user of the last; null if not.
PadOp gradientPad(Value d, int64_t part) {
  auto only = [](Value v) -> Operation * {
    return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
  };
  auto transpose = dyn_cast_or_null<TransposeOp>(only(d));
  if (!isSwap(transpose))
    return nullptr;
  auto reshape = dyn_cast_or_null<ReshapeOp>(only(transpose.getResult()));
  if (!reshape || shapeOf(reshape).size() != 3)
    return nullptr;
  auto pad = dyn_cast_or_null<PadOp>(only(reshape.getResult()));
  if (!pad)
    return nullptr;
  int64_t width = shapeOf(reshape)[2];
  ArrayRef<int64_t> low = pad.getEdgePaddingLow(), high = pad.getEdgePaddingHigh();
  if (pad.getPaddingValue().convertToDouble() != 0.0 || low[0] || low[1] ||
      high[0] || high[1] || low[2] != part * width || high[2] != (2 - part) * width)
    return nullptr;
  return pad;
}

// The value that sums exactly the three pads (two adds, each pad used
// once); null if their users are anything else.
Value sumOfPads(ArrayRef<Value> pads) {
  auto only = [](Value v) -> AddOp {
    return v.hasOneUse() ? dyn_cast<AddOp>(*v.getUsers().begin()) : AddOp();
  };
  AddOp first = only(pads[0]);
  if (!first)
    return nullptr;
  Value other = first.getLhs() == pads[0] ? first.getRhs() : first.getLhs();
  // pads[0] + pads[i], then + the third.
  for (int i : {1, 2}) {
    if (other != pads[i])
      continue;
    AddOp second = only(first.getResult());
    Value third = pads[3 - i];
    if (second && third.hasOneUse() &&
        (second.getLhs() == third || second.getRhs() == third))
      return second.getResult();
    return nullptr;
  }
  // pads[0] + (pads[1] + pads[2]).
  AddOp inner = other.getDefiningOp<AddOp>();
  if (inner && inner->hasOneUse() && pads[1].hasOneUse() && pads[2].hasOneUse() &&
      ((inner.getLhs() == pads[1] && inner.getRhs() == pads[2]) ||
       (inner.getLhs() == pads[2] && inner.getRhs() == pads[1])))
    return first.getResult();
  return nullptr;
}

// Erases |op| when nothing uses it, then the producers of its operands that
// nothing else uses, up to (not including) |stop|.
void eraseDead(Operation *op, Operation *stop) {
  if (!op || op == stop || !op->use_empty() || !isPure(op))
    return;
  SmallVector<Operation *, 4> producers;
  for (Value operand : op->getOperands())
    if (Operation *def = operand.getDefiningOp())
      producers.push_back(def);
  op->erase();
  for (Operation *def : producers)
    eraseDead(def, stop);
}

struct PackAttentionPass : impl::KilnPackAttentionBase<PackAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<AttentionOp> forwards;
    getOperation().walk([&](AttentionOp op) { forwards.push_back(op); });
    for (AttentionOp op : forwards)
      pack(op);
  }

  void pack(AttentionOp op) {
    std::optional<Part> q = matchPart(op.getQ()), k = matchPart(op.getK()),
                        v = matchPart(op.getV());
    if (!q || !k || !v || q->projection != k->projection ||
        q->projection != v->projection)
      return;
    ArrayRef<int64_t> qs = shapeOf(op.getQ());
    int64_t B = qs[0], H = qs[1], T = qs[2], D = qs[3], width = H * D;
    if (shapeOf(op.getK()) != qs || shapeOf(op.getV()) != qs ||
        shapeOf(q->projection)[2] != 3 * width || q->offset != 0 ||
        k->offset != width || v->offset != 2 * width)
      return;
    Value projection = q->projection;
    // The gradients of this forward, before its results change.
    SmallVector<AttentionGradOp> grads;
    for (Operation *user : op.getOut().getUsers())
      if (auto g = dyn_cast<AttentionGradOp>(user))
        if (g.getOut() == op.getOut() && g.getLse() == op.getLse() &&
            g.getQ() == op.getQ() && g.getK() == op.getK() && g.getV() == op.getV() &&
            g.getScale() == op.getScale() && g.getCausal() == op.getCausal() &&
            !llvm::is_contained(grads, g))
          grads.push_back(g);

    OpBuilder b(op);
    Location loc = op.getLoc();
    auto elementType = cast<RankedTensorType>(projection.getType()).getElementType();
    Value qkv = grad::reshape(
        b, loc, projection, RankedTensorType::get({B, T, 3, H, D}, elementType));
    auto packed = b.create<AttentionQkvOp>(loc, qkv, op.getScaleAttr(), op.getCausalAttr());
    Value out = packed.getOut();
    // Users that turned out token-major read the packed op's out.
    for (Operation *user : llvm::make_early_inc_range(op.getOut().getUsers()))
      if (auto t = dyn_cast<TransposeOp>(user); isSwap(t))
        t.getResult().replaceAllUsesWith(out);
    Value headMajor = grad::transpose(b, loc, out, kSwapHeads);
    op.getOut().replaceAllUsesExcept(headMajor, headMajor.getDefiningOp());
    op.getLse().replaceAllUsesWith(packed.getLse());
    op.erase();
    ++numPacked;

    for (AttentionGradOp g : grads) {
      OpBuilder gb(g);
      Location gloc = g.getLoc();
      Value dout = swapHeads(gb, gloc, g.getDout());
      auto dqkv = gb.create<AttentionQkvGradOp>(gloc, qkv, out, packed.getLse(), dout,
                                                g.getScaleAttr(), g.getCausalAttr());
      Value parts[3] = {g.getDq(), g.getDk(), g.getDv()};
      SmallVector<Value, 3> pads;
      for (int64_t p = 0; p < 3; ++p)
        if (PadOp pad = gradientPad(parts[p], p))
          pads.push_back(pad.getResult());
      if (pads.size() == 3) {
        if (Value sum = sumOfPads(pads)) {
          OpBuilder sb(sum.getDefiningOp());
          sum.replaceAllUsesWith(
              grad::reshape(sb, gloc, dqkv.getDqkv(),
                            cast<RankedTensorType>(sum.getType())));
          eraseDead(sum.getDefiningOp(), g);
          ++numGradientsPacked;
        }
      }
      // Whatever still reads dq, dk or dv reads its part of dqkv.
      for (int64_t p = 0; p < 3; ++p)
        if (!parts[p].use_empty())
          parts[p].replaceAllUsesWith(
              packedAttentionPart(gb, gloc, dqkv.getDqkv(), p));
      g.erase();
    }
  }
};

} // namespace
} // namespace kiln
