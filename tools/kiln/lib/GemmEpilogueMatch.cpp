//===- GemmEpilogueMatch.cpp - gemm fusions as cuBLASLt epilogues --------===//
//
// See GemmEpilogueMatch.h.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/GemmEpilogueMatch.h"

namespace kiln::cli {

using runtime::PkgGemmEpilogue;

std::optional<GemmEpilogueMatch> matchGemmEpilogue(FusionOp fusion,
                                                   DotGeneralOp dotOp) {
  // f32, bf16 and f16 (cuBLASLt has no f64 epilogues). For bf16 and f16
  // this is XLA's choice too: cuBLASLt keeps the product in f32 through
  // the epilogue and rounds once, where the step's IR (and the
  // interpreter) rounds the product and then the epilogue's result, so the
  // fused result is the more accurate one and may differ from the
  // interpreter's by one rounding of the output type (docs/cuda.md).
  auto resultType =
      mlir::cast<mlir::RankedTensorType>(fusion.getResult(0).getType());
  mlir::Type element = resultType.getElementType();
  if (fusion.getNumResults() > 2 ||
      !(element.isF32() || element.isBF16() || element.isF16()))
    return std::nullopt;
  mlir::Block &body = fusion.getBody().front();
  auto yield = mlir::dyn_cast<YieldOp>(body.getTerminator());
  if (!yield || yield.getNumOperands() != fusion.getNumResults())
    return std::nullopt;
  mlir::Value dot = dotOp.getResult();
  auto dotType = mlir::cast<mlir::RankedTensorType>(dot.getType());
  bool unbatched = dotOp.getLhsBatchingDimensions().empty();
  GemmEpilogueMatch match;
  size_t ops = 2; // the dot and the yield
  auto single = [](mlir::Value x) { return x.hasOneUse(); };
  // A fusion input of the body, read once.
  auto input = [&](mlir::Value x) -> mlir::BlockArgument {
    auto arg = mlir::dyn_cast<mlir::BlockArgument>(x);
    return arg && arg.getOwner() == &body && single(x) ? arg
                                                       : mlir::BlockArgument();
  };
  // v = add(dot, broadcast(bias)): sets biasInput and returns the dot, or
  // returns v.
  auto peelBias = [&](mlir::Value v) -> mlir::Value {
    auto add = v.getDefiningOp<AddOp>();
    if (!add)
      return v;
    mlir::Value other = add.getLhs() == dot   ? add.getRhs()
                        : add.getRhs() == dot ? add.getLhs()
                                              : mlir::Value();
    auto broadcast = other ? other.getDefiningOp<BroadcastInDimOp>() : nullptr;
    if (!broadcast || !single(other))
      return v;
    mlir::BlockArgument arg = input(broadcast.getOperand());
    auto argType = arg ? mlir::dyn_cast<mlir::RankedTensorType>(arg.getType())
                       : nullptr;
    llvm::ArrayRef<int64_t> dims = broadcast.getBroadcastDimensions();
    if (!arg || !argType || argType.getRank() != 1 ||
        argType.getElementType() != dotType.getElementType() ||
        dims.size() != 1 || dims[0] != dotType.getRank() - 1)
      return v;
    // The GEMM's n is the rhs's one free dimension, the result's last.
    auto rhsType =
        mlir::cast<mlir::RankedTensorType>(dotOp.getRhs().getType());
    if (rhsType.getRank() -
            static_cast<int64_t>(dotOp.getRhsBatchingDimensions().size() +
                                 dotOp.getRhsContractingDimensions().size()) !=
        1)
      return v;
    match.biasInput = arg.getArgNumber();
    ops += 2;
    return dot;
  };
  auto bodyIs = [&](size_t count) {
    return static_cast<size_t>(std::distance(body.begin(), body.end())) ==
           count;
  };

  if (fusion.getNumResults() == 2) {
    // (pre, gelu(pre)) in either order, pre = dot (+ bias).
    if (!unbatched || fusion.getResult(1).getType() != resultType)
      return std::nullopt;
    for (unsigned out = 0; out < 2; ++out) {
      auto gelu = yield.getOperand(out).getDefiningOp<GeluOp>();
      mlir::Value pre = yield.getOperand(1 - out);
      if (!gelu || gelu.getApproximate() != GeluApproximation::tanh ||
          gelu.getOperand() != pre || !single(gelu.getResult()) ||
          std::distance(pre.use_begin(), pre.use_end()) != 2 ||
          pre.getType() != resultType)
        continue;
      ops = 3; // the dot, the gelu and the yield
      match.biasInput.reset();
      if (pre != dot) {
        if (!single(dot) || peelBias(pre) != dot)
          return std::nullopt;
      }
      if (!bodyIs(ops))
        return std::nullopt;
      match.kind = match.biasInput ? PkgGemmEpilogue::BiasGeluAux
                                   : PkgGemmEpilogue::GeluAux;
      match.outResult = out;
      match.auxResult = 1 - out;
      return match;
    }
    return std::nullopt;
  }

  mlir::Value v = yield.getOperand(0);
  if (auto grad = v.getDefiningOp<GeluGradOp>()) {
    mlir::BlockArgument x = input(grad.getX());
    if (!unbatched || grad.getApproximate() != GeluApproximation::tanh ||
        grad.getDy() != dot || !single(dot) || !x ||
        x.getType() != resultType || v.getType() != resultType || !bodyIs(3))
      return std::nullopt;
    match.kind = PkgGemmEpilogue::DGelu;
    match.auxInput = x.getArgNumber();
    return match;
  }
  enum { None, Relu, Gelu } activation = None;
  if (auto relu = v.getDefiningOp<ReluOp>()) {
    activation = Relu;
    v = relu.getOperand();
    ++ops;
  } else if (auto gelu = v.getDefiningOp<GeluOp>()) {
    if (gelu.getApproximate() != GeluApproximation::tanh)
      return std::nullopt;
    activation = Gelu;
    v = gelu.getOperand();
    ++ops;
  } else if (auto add = v.getDefiningOp<AddOp>();
             add && unbatched && v.getType() == resultType) {
    // A residual: add(C, dot (+ bias)) or add(dot (+ bias), C), C a fusion
    // input of the result's type (a bias add is tried first, so a
    // broadcast operand is never taken for C).
    for (unsigned side = 0; side < 2 && !match.cInput; ++side) {
      mlir::BlockArgument c = input(add->getOperand(side));
      mlir::Value rest = add->getOperand(1 - side);
      if (!c || c.getType() != resultType || !single(rest))
        continue;
      size_t before = ops;
      match.biasInput.reset();
      if (rest == dot || peelBias(rest) == dot) {
        match.cInput = c.getArgNumber();
        v = dot;
        ++ops; // the residual add
      } else {
        ops = before;
      }
    }
    if (match.cInput) {
      if (!single(dot) || !bodyIs(ops))
        return std::nullopt;
      match.kind = match.biasInput ? PkgGemmEpilogue::BiasResidual
                                   : PkgGemmEpilogue::Residual;
      return match;
    }
  }
  if (v != dot) {
    if (!single(v))
      return std::nullopt;
    v = peelBias(v);
  }
  if (v != dot || !single(dot) || !bodyIs(ops))
    return std::nullopt;
  bool bias = match.biasInput.has_value();
  if (!bias && activation == None)
    return std::nullopt;
  match.kind = activation == Relu
                   ? (bias ? PkgGemmEpilogue::BiasRelu : PkgGemmEpilogue::Relu)
               : activation == Gelu
                   ? (bias ? PkgGemmEpilogue::BiasGelu : PkgGemmEpilogue::Gelu)
                   : PkgGemmEpilogue::Bias;
  return match;
}

bool matchBiasGradient(FusionOp fusion, DotGeneralOp dotOp, unsigned &dotResult,
                       unsigned &gradResult) {
  mlir::Block &body = fusion.getBody().front();
  auto yield = mlir::dyn_cast<YieldOp>(body.getTerminator());
  if (!yield || yield.getNumOperands() != 2 ||
      std::distance(body.begin(), body.end()) != 3 ||
      !dotOp.getRhsBatchingDimensions().empty())
    return false;
  auto reduce = mlir::dyn_cast<ReduceOp>(&*std::next(body.begin()));
  if (!reduce || reduce.getKind() != ReduceKind::sum ||
      reduce.getOperand() != dotOp.getRhs() ||
      reduce.getType().getElementType() != dotOp.getType().getElementType() ||
      reduce.getType().getRank() != 1 ||
      reduce.getType().getElementType().isF64()) // cuBLASLt: no f64 epilogues
    return false;
  llvm::SmallVector<int64_t> dims(reduce.getDimensions());
  llvm::SmallVector<int64_t> contract(dotOp.getRhsContractingDimensions());
  llvm::sort(dims);
  llvm::sort(contract);
  if (dims != contract)
    return false;
  for (unsigned i = 0; i < 2; ++i) {
    if (yield.getOperand(i) == dotOp.getResult() &&
        yield.getOperand(1 - i) == reduce.getResult()) {
      dotResult = i;
      gradResult = 1 - i;
      return true;
    }
  }
  return false;
}

} // namespace kiln::cli
