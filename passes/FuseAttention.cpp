//===- FuseAttention.cpp - primitive attention into kiln.attention --------===//
//
// kiln-fuse-attention finds scaled-dot-product attention written in
// primitives and rewrites it into one kiln.attention, which the CUDA target
// runs as a fused FlashAttention-style library call: the [B, H, Tq, Tk]
// scores and probabilities are then never stored, and the backward pass
// becomes one kiln.attention_grad (the op's gradient rule) instead of the
// softmax and GEMM gradients over those tensors. This is XLA's cuDNN
// fused-MHA rewriter in its simplest form. The pattern, from the last op
// back:
//
//   s = dot_general(q, k)  batch [0, 1] x [0, 1], contract [3] x [3]
//   s = mul(s, scale)      optional; a splat constant, either operand
//   s = select(mask, s, -inf)  optional; mask provably causal (below)
//   p = softmax(s, dim = 3)
//   o = dot_general(p, v)  batch [0, 1] x [0, 1], contract [3] x [2]
//
// with q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv] of one float type
// and each intermediate (s at every step, p) used only by the next op.
// PyTorch's exporters write scaled_dot_product_attention (kiln import) in
// another form, also matched:
//
//   s = dot_general(mul(q, c), mul(kT, c))  contract [3] x [2]: kT is
//                          [B, H, D, Tk]; c = sqrt(scale), each mul optional
//   s = add(s, mask)       optional; mask provably causal, 0 where visible
//                          and -inf (or below -1e30: PyTorch's finfo.min)
//                          elsewhere
//
// where c is computed from constants (sqrt(1 / sqrt(D)) over a Shape): the
// pass evaluates it as it does masks. k is then a transpose of kT. The
// rewrite keeps every value's meaning: kiln.attention is defined as exactly
// this computation (its reference accumulates in f64 and rounds once, so
// results agree to the element type's rounding).
//
// The mask is accepted only when the pass can prove it is the top-left
// causal mask, key j visible to query i iff j <= i: it must be computed
// from constants alone (iota, compare, broadcast_in_dim, constants, ...: no
// argument, no side effect), so the pass evaluates it with the reference
// interpreter at compile time and compares every element. A final
// broadcast_in_dim over the batch and head dimensions is not evaluated
// (its operand is), so a [T, T] mask costs T^2 elements however large the
// batch. A mask it cannot prove (a padding mask read from an input, one too
// large to evaluate) leaves the graph as it is.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#include <cmath>
#include <optional>

#define DEBUG_TYPE "kiln-fuse-attention"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSEATTENTION
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;

// Limits on the mask's compile-time evaluation: ops in its backward slice
// and elements of any tensor in it (each held as a double: 32 MiB).
constexpr size_t kMaxMaskOps = 64;
constexpr int64_t kMaxMaskElements = int64_t(1) << 22;

bool isAttentionFloat(Type element) {
  return element.isF16() || element.isBF16() || element.isF32() ||
         element.isF64();
}

RankedTensorType staticTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && type.hasStaticShape() ? type : RankedTensorType();
}

// A rank-4 batched matmul over batch dimensions [0, 1] of both operands,
// contracting lhs dimension 3 with rhs dimension |rhsContract|.
bool isHeadMatmul(DotGeneralOp dot, int64_t rhsContract) {
  auto lhs = staticTensor(dot.getLhs()), rhs = staticTensor(dot.getRhs());
  if (!lhs || !rhs || lhs.getRank() != 4 || rhs.getRank() != 4 ||
      !staticTensor(dot.getResult()))
    return false;
  const int64_t batch[] = {0, 1};
  return dot.getLhsBatchingDimensions() == ArrayRef<int64_t>(batch) &&
         dot.getRhsBatchingDimensions() == ArrayRef<int64_t>(batch) &&
         dot.getLhsContractingDimensions() == ArrayRef<int64_t>{3} &&
         dot.getRhsContractingDimensions() == ArrayRef<int64_t>{rhsContract};
}

// |v| evaluated by the reference interpreter when it is computed from
// constants alone (see the file comment), within the limits.
std::optional<HostTensor> evaluateConstant(Value v) {
  Operation *root = v.getDefiningOp();
  if (!root)
    return std::nullopt;
  llvm::SetVector<Operation *> slice;
  SmallVector<Operation *> work{root};
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!slice.insert(op))
      continue;
    if (slice.size() > kMaxMaskOps || op->getNumRegions() != 0 ||
        !isMemoryEffectFree(op) || op->getBlock() != root->getBlock())
      return std::nullopt;
    for (Value result : op->getResults()) {
      auto type = staticTensor(result);
      if (!type || type.getNumElements() > kMaxMaskElements)
        return std::nullopt;
    }
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def)
        return std::nullopt; // an argument: not a constant
      work.push_back(def);
    }
  }
  SmallVector<Operation *> order(slice.begin(), slice.end());
  llvm::sort(order, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  // An op the interpreter refuses means "not provable", not an error.
  ScopedDiagnosticHandler quiet(root->getContext(),
                                [](Diagnostic &) { return success(); });
  Interpreter interpreter;
  DenseMap<Value, HostTensor> values;
  for (Operation *op : order) {
    SmallVector<HostTensor> operands, results;
    for (Value operand : op->getOperands())
      operands.push_back(values.lookup(operand));
    if (failed(interpreter.evaluate(op, operands, results)) ||
        results.size() != op->getNumResults())
      return std::nullopt;
    for (auto [result, tensor] : llvm::zip(op->getResults(), results))
      values[result] = std::move(tensor);
  }
  return values.lookup(v);
}

// Whether |mask| ([B, H, Tq, Tk]) is the causal mask for every batch and
// head: an i1 mask true exactly where key j <= query i, or (|additive|) a
// float mask added to the scores, 0 there and -inf or below -1e30 (masked)
// elsewhere.
bool isCausalMask(Value mask, bool additive) {
  auto type = staticTensor(mask);
  if (!type || type.getRank() != 4 ||
      (additive ? !isa<FloatType>(type.getElementType())
                : !type.getElementType().isInteger(1)))
    return false;
  // A broadcast's operand element o is the result element whose index in
  // dimension dims[d] is o_d (or any, where the operand's dimension is 1).
  Value source = mask;
  SmallVector<int64_t, 4> dims{0, 1, 2, 3};
  if (auto broadcast = mask.getDefiningOp<BroadcastInDimOp>()) {
    source = broadcast.getOperand();
    dims.assign(broadcast.getBroadcastDimensions().begin(),
                broadcast.getBroadcastDimensions().end());
  }
  auto sourceType = staticTensor(source);
  if (!sourceType)
    return false;
  // The operand dimensions that run over the queries and the keys: each
  // must be there at full size, or the mask would not depend on it.
  int64_t queryDim = -1, keyDim = -1;
  for (auto [d, r] : llvm::enumerate(dims)) {
    if (r == 2)
      queryDim = d;
    if (r == 3)
      keyDim = d;
  }
  if (queryDim < 0 || keyDim < 0 ||
      sourceType.getDimSize(queryDim) != type.getDimSize(2) ||
      sourceType.getDimSize(keyDim) != type.getDimSize(3))
    return false;
  std::optional<HostTensor> value = evaluateConstant(source);
  if (!value || value->shape() != sourceType.getShape())
    return false;
  SmallVector<int64_t, 4> strides = value->strides();
  for (int64_t e = 0, n = value->size(); e < n; ++e) {
    int64_t i = (e / strides[queryDim]) % value->dim(queryDim);
    int64_t j = (e / strides[keyDim]) % value->dim(keyDim);
    double x = (*value)[e];
    bool visible = additive ? x == 0.0 : x != 0.0;
    if (additive && !visible && !(x <= -1e30))
      return false; // neither 0 nor masked: a bias, not a mask
    if (visible != (j <= i))
      return false;
  }
  return true;
}

// The value of every element of |v| when it is computed from constants
// alone and all its elements are equal (a scale written as sqrt(1 /
// sqrt(D))).
std::optional<double> computedSplatOf(Value v) {
  if (std::optional<double> direct = splatOf(v))
    return direct;
  auto type = staticTensor(v);
  if (!type || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  // Through the final broadcast, so only its operand is evaluated.
  if (auto broadcast = v.getDefiningOp<BroadcastInDimOp>())
    v = broadcast.getOperand();
  std::optional<HostTensor> value = evaluateConstant(v);
  if (!value || value->size() == 0)
    return std::nullopt;
  double first = (*value)[0];
  for (int64_t e = 1, n = value->size(); e < n; ++e)
    if ((*value)[e] != first)
      return std::nullopt;
  return first;
}

// One match of the pattern (see the file comment), ops in program order.
struct AttentionMatch {
  DotGeneralOp scores;
  Operation *scale = nullptr; // kiln.mul
  Operation *mask = nullptr;  // kiln.select, or kiln.add (an additive mask)
  Value additiveMask;         // the kiln.add's mask operand
  SoftmaxOp softmax;
  DotGeneralOp context;
  double scaleValue = 1.0;
  // The exporters' form: scales on q and kT (kiln.mul, each optional), and
  // the keys given as kT [B, H, D, Tk].
  Operation *queryScale = nullptr, *keyScale = nullptr;
  Value query, key;
  bool keyTransposed = false;
};

class FuseAttention : public impl::KilnFuseAttentionBase<FuseAttention> {
public:
  using KilnFuseAttentionBase::KilnFuseAttentionBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      SmallVector<DotGeneralOp> dots;
      func.walk([&](DotGeneralOp dot) { dots.push_back(dot); });
      SmallVector<Operation *> maybeDead;
      causal_.clear();
      for (DotGeneralOp dot : dots)
        if (std::optional<AttentionMatch> m = match(dot))
          rewrite(*m, maybeDead);
      eraseDead(maybeDead);
    }
  }

private:
  std::optional<AttentionMatch> match(DotGeneralOp context) {
    AttentionMatch m;
    m.context = context;
    if (!isHeadMatmul(context, /*rhsContract=*/2))
      return std::nullopt;
    Value probs = context.getLhs();
    m.softmax = probs.getDefiningOp<SoftmaxOp>();
    if (!m.softmax || m.softmax.getDimension() != 3 || !probs.hasOneUse())
      return std::nullopt;
    Value s = m.softmax.getOperand();
    if (auto select = s.getDefiningOp<SelectOp>()) {
      std::optional<double> fill = splatOf(select.getOnFalse());
      if (!s.hasOneUse() || !fill || !std::isinf(*fill) || *fill > 0 ||
          !provenCausal(select.getPred(), /*additive=*/false))
        return std::nullopt;
      m.mask = select;
      s = select.getOnTrue();
    } else if (auto add = s.getDefiningOp<AddOp>()) {
      if (!s.hasOneUse())
        return std::nullopt;
      for (unsigned i = 0; i < 2 && !m.mask; ++i)
        if (add->getOperand(1 - i).getDefiningOp<DotGeneralOp>() ||
            add->getOperand(1 - i).getDefiningOp<MulOp>())
          if (provenCausal(add->getOperand(i), /*additive=*/true)) {
            m.mask = add;
            m.additiveMask = add->getOperand(i);
            s = add->getOperand(1 - i);
          }
      if (!m.mask)
        return std::nullopt;
    }
    if (auto mul = s.getDefiningOp<MulOp>()) {
      if (!s.hasOneUse())
        return std::nullopt;
      for (unsigned i = 0; i < 2 && !m.scale; ++i) {
        std::optional<double> scale = splatOf(mul->getOperand(i));
        if (scale && std::isfinite(*scale) &&
            mul->getOperand(1 - i).getDefiningOp<DotGeneralOp>()) {
          m.scale = mul;
          m.scaleValue = *scale;
          s = mul->getOperand(1 - i);
        }
      }
      if (!m.scale)
        return std::nullopt;
    }
    m.scores = s.getDefiningOp<DotGeneralOp>();
    if (!m.scores || !s.hasOneUse())
      return std::nullopt;
    m.query = m.scores.getLhs();
    m.key = m.scores.getRhs();
    if (!isHeadMatmul(m.scores, /*rhsContract=*/3)) {
      if (!isHeadMatmul(m.scores, /*rhsContract=*/2))
        return std::nullopt;
      m.keyTransposed = true;
    }
    // Scales on the operands (the exporters' sqrt(scale) on q and kT).
    auto operandScale = [&](Value &operand, Operation *&op) {
      auto mul = operand.getDefiningOp<MulOp>();
      if (!mul || !operand.hasOneUse())
        return;
      for (unsigned i = 0; i < 2; ++i) {
        std::optional<double> c = computedSplatOf(mul->getOperand(i));
        if (c && std::isfinite(*c) &&
            staticTensor(mul->getOperand(1 - i)) == staticTensor(operand)) {
          op = mul;
          m.scaleValue *= *c;
          operand = mul->getOperand(1 - i);
          return;
        }
      }
    };
    operandScale(m.query, m.queryScale);
    operandScale(m.key, m.keyScale);
    // One float type for q, k, v (the scores and the context have it too).
    Type element = staticTensor(m.query).getElementType();
    // The fused kernels' head dims (kMaxFusedAttentionHeadDim); a wider
    // attention stays in primitives.
    if (!fitsFusedAttention(m.query, context.getRhs()))
      return std::nullopt;
    if (!isAttentionFloat(element) ||
        staticTensor(m.key).getElementType() != element ||
        staticTensor(context.getRhs()).getElementType() != element ||
        staticTensor(context.getResult()).getElementType() != element)
      return std::nullopt;
    return m;
  }

  bool provenCausal(Value mask, bool additive) {
    auto [it, inserted] = causal_.try_emplace(mask, false);
    if (inserted)
      it->second = isCausalMask(mask, additive);
    LLVM_DEBUG(llvm::dbgs() << "kiln-fuse-attention: mask at " << mask.getLoc()
                            << (it->second ? " is" : " is not")
                            << " the causal mask\n");
    return it->second;
  }

  void rewrite(AttentionMatch m, SmallVectorImpl<Operation *> &maybeDead) {
    SmallVector<Location> locations{m.scores.getLoc()};
    if (m.scale)
      locations.push_back(m.scale->getLoc());
    if (m.mask)
      locations.push_back(m.mask->getLoc());
    locations.push_back(m.softmax.getLoc());
    locations.push_back(m.context.getLoc());
    OpBuilder b(m.context);
    Value key = m.key;
    if (m.keyTransposed) {
      // kT [B, H, D, Tk] -> k [B, H, Tk, D].
      auto kT = staticTensor(key);
      SmallVector<int64_t, 4> dims{kT.getDimSize(0), kT.getDimSize(1), kT.getDimSize(3),
                                   kT.getDimSize(2)};
      key = b.create<TransposeOp>(m.scores.getLoc(),
                                  RankedTensorType::get(dims, kT.getElementType()), key,
                                  b.getDenseI64ArrayAttr({0, 1, 3, 2}));
    }
    auto attention = b.create<AttentionOp>(
        b.getFusedLoc(locations), m.query, key, m.context.getRhs(), m.scaleValue,
        /*causal=*/bool(m.mask));
    m.context.getResult().replaceAllUsesWith(attention.getOut());
    // The mask, the fill and the scale (often shared by every layer) may
    // now be dead.
    SmallVector<Value, 3> inputs;
    if (m.scale)
      inputs.push_back(m.scale->getOperand(0) == m.scores.getResult()
                           ? m.scale->getOperand(1)
                           : m.scale->getOperand(0));
    if (auto select = dyn_cast_or_null<SelectOp>(m.mask)) {
      inputs.push_back(select.getPred());
      inputs.push_back(select.getOnFalse());
    } else if (m.mask) {
      inputs.push_back(m.additiveMask);
    }
    for (Operation *operandScale : {m.queryScale, m.keyScale})
      if (operandScale)
        for (Value operand : operandScale->getOperands())
          if (operand != m.query && operand != m.key)
            inputs.push_back(operand);
    for (Value input : inputs)
      if (Operation *def = input.getDefiningOp())
        maybeDead.push_back(def);
    m.context->erase();
    m.softmax->erase();
    if (m.mask)
      m.mask->erase();
    if (m.scale)
      m.scale->erase();
    m.scores->erase();
    if (m.queryScale)
      m.queryScale->erase();
    if (m.keyScale)
      m.keyScale->erase();
    ++numFused;
  }

  // Erases the ops of |ops| that nothing uses any more, and then their
  // producers that became unused.
  static void eraseDead(SmallVectorImpl<Operation *> &ops) {
    llvm::SetVector<Operation *> work(ops.begin(), ops.end());
    DenseSet<Operation *> erased;
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (erased.contains(op) || !isOpTriviallyDead(op))
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          work.insert(def);
      erased.insert(op);
      op->erase();
    }
  }

  // Whether each mask value seen is the causal mask, decided once.
  DenseMap<Value, bool> causal_;
};

} // namespace

std::optional<double> splatOf(mlir::Value v) {
  using namespace mlir;
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<BroadcastInDimOp, ReshapeOp>(def))
      break;
    v = def->getOperand(0);
  }
  auto constant = v.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !isa<FloatType>(dense.getElementType()) || dense.empty())
    return std::nullopt;
  if (dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  auto values = dense.getValues<APFloat>();
  APFloat first = *values.begin();
  for (const APFloat &x : values)
    if (x.bitwiseIsEqual(first) == false)
      return std::nullopt;
  return first.convertToDouble();
}

} // namespace kiln
