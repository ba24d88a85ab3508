//===- ScalarProgram.cpp - evaluate scalar arith/math IR on doubles -------===//

#include "ir/ScalarProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;

namespace kiln {

bool dtypeOf(Type type, DType &dtype) {
  if (type.isF64()) dtype = DType::f64;
  else if (type.isF32()) dtype = DType::f32;
  else if (type.isF16()) dtype = DType::f16;
  else if (type.isBF16()) dtype = DType::bf16;
  else if (type.isInteger(64)) dtype = DType::i64;
  else if (type.isInteger(32)) dtype = DType::i32;
  else if (type.isInteger(8)) dtype = DType::i8;
  else if (type.isInteger(1)) dtype = DType::i1;
  else return false;
  return true;
}

FailureOr<ScalarProgram> ScalarProgram::compile(Block &block, Value result) {
  ScalarProgram program;
  llvm::DenseMap<Value, int> regs;
  for (BlockArgument arg : block.getArguments())
    regs[arg] = program.numRegisters_++;
  program.numInputs_ = block.getNumArguments();

  auto reg = [&](Value v) { return regs.lookup(v); };
  for (Operation &op : block) {
    if (op.getNumResults() != 1)
      return op.emitOpError("is not a scalar op the reference evaluator knows");
    Step step;
    if (!dtypeOf(op.getResult(0).getType(), step.type))
      return op.emitOpError("produces a type the reference evaluator does not "
                            "know: ")
             << op.getResult(0).getType();
    auto arg = [&](unsigned i) { return reg(op.getOperand(i)); };
    bool known =
        llvm::TypeSwitch<Operation *, bool>(&op)
            .Case([&](arith::ConstantOp c) {
              step.kind = Kind::Const;
              if (auto f = dyn_cast<FloatAttr>(c.getValue()))
                step.imm = f.getValueAsDouble();
              else if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
                step.imm = i.getType().isInteger(1)
                               ? static_cast<double>(i.getValue().getZExtValue())
                               : static_cast<double>(i.getValue().getSExtValue());
              else
                return false;
              return true;
            })
#define KILN_BINARY(OP, KIND)                                                  \
  .Case([&](OP) {                                                              \
    step.kind = Kind::KIND;                                                    \
    step.a = arg(0);                                                           \
    step.b = arg(1);                                                           \
    return true;                                                               \
  })
#define KILN_UNARY(OP, KIND)                                                   \
  .Case([&](OP) {                                                              \
    step.kind = Kind::KIND;                                                    \
    step.a = arg(0);                                                           \
    return true;                                                               \
  })
            KILN_BINARY(arith::AddFOp, AddF) KILN_BINARY(arith::SubFOp, SubF)
            KILN_BINARY(arith::MulFOp, MulF) KILN_BINARY(arith::DivFOp, DivF)
            KILN_BINARY(arith::MaximumFOp, MaxF) KILN_BINARY(arith::MinimumFOp, MinF)
            KILN_BINARY(arith::AddIOp, AddI) KILN_BINARY(arith::SubIOp, SubI)
            KILN_BINARY(arith::MulIOp, MulI) KILN_BINARY(arith::DivSIOp, DivSI)
            KILN_BINARY(arith::MaxSIOp, MaxSI) KILN_BINARY(arith::MinSIOp, MinSI)
            KILN_BINARY(math::PowFOp, PowF) KILN_BINARY(arith::RemFOp, RemF)
            KILN_BINARY(arith::RemSIOp, RemSI)
            KILN_UNARY(arith::NegFOp, NegF) KILN_UNARY(math::AbsFOp, AbsF)
            KILN_UNARY(math::AbsIOp, AbsI) KILN_UNARY(math::ExpOp, Exp)
            KILN_UNARY(math::LogOp, Log) KILN_UNARY(math::Log1pOp, Log1p)
            KILN_UNARY(math::SqrtOp, Sqrt) KILN_UNARY(math::RsqrtOp, Rsqrt)
            KILN_UNARY(math::TanhOp, Tanh) KILN_UNARY(math::ErfOp, Erf)
            KILN_UNARY(math::SinOp, Sin) KILN_UNARY(math::CosOp, Cos)
            KILN_UNARY(math::AtanOp, Atan)
            KILN_UNARY(math::FloorOp, Floor) KILN_UNARY(math::CeilOp, Ceil)
            KILN_UNARY(math::RoundEvenOp, RoundEven)
            KILN_UNARY(arith::ExtFOp, Convert) KILN_UNARY(arith::TruncFOp, Convert)
            KILN_UNARY(arith::SIToFPOp, Convert) KILN_UNARY(arith::UIToFPOp, Convert)
            KILN_UNARY(arith::ExtSIOp, Convert) KILN_UNARY(arith::ExtUIOp, Convert)
            KILN_UNARY(arith::TruncIOp, Convert) KILN_UNARY(arith::FPToSIOp, FPToSI)
#undef KILN_BINARY
#undef KILN_UNARY
            .Case([&](arith::CmpFOp c) {
              step.kind = Kind::CmpF;
              step.pred = static_cast<int>(c.getPredicate());
              step.a = arg(0);
              step.b = arg(1);
              return true;
            })
            .Case([&](arith::CmpIOp c) {
              step.kind = Kind::CmpI;
              step.pred = static_cast<int>(c.getPredicate());
              step.a = arg(0);
              step.b = arg(1);
              return true;
            })
            .Case([&](arith::SelectOp) {
              step.kind = Kind::Select;
              step.a = arg(0);
              step.b = arg(1);
              step.c = arg(2);
              return true;
            })
            .Default([](Operation *) { return false; });
    if (!known)
      return op.emitOpError("is not a scalar op the reference evaluator knows");
    step.out = program.numRegisters_++;
    regs[op.getResult(0)] = step.out;
    program.steps_.push_back(step);
  }
  if (!regs.count(result))
    return failure();
  program.resultRegister_ = regs[result];
  return program;
}

double ScalarProgram::run(const double *inputs) const {
  llvm::SmallVector<double, 32> r(numRegisters_);
  for (int i = 0; i < numInputs_; ++i)
    r[i] = inputs[i];
  for (const Step &s : steps_) {
    double a = r[s.a], b = r[s.b];
    double v = 0;
    switch (s.kind) {
    case Kind::Const: v = s.imm; break;
    case Kind::AddF: case Kind::AddI: v = a + b; break;
    case Kind::SubF: case Kind::SubI: v = a - b; break;
    case Kind::MulF: case Kind::MulI: v = a * b; break;
    case Kind::DivF: v = a / b; break;
    case Kind::DivSI: v = b == 0 ? 0 : std::trunc(a / b); break;
    // (Exact: fmod rounds nothing.)
    case Kind::RemF: v = std::fmod(a, b); break;
    case Kind::RemSI: v = b == 0 ? 0 : std::fmod(a, b); break;
    case Kind::NegF: v = -a; break;
    case Kind::AbsF: case Kind::AbsI: v = std::fabs(a); break;
    case Kind::MaxF: v = (std::isnan(a) || std::isnan(b)) ? NAN : std::fmax(a, b); break;
    case Kind::MinF: v = (std::isnan(a) || std::isnan(b)) ? NAN : std::fmin(a, b); break;
    case Kind::MaxSI: v = std::max(a, b); break;
    case Kind::MinSI: v = std::min(a, b); break;
    case Kind::Exp: v = std::exp(a); break;
    case Kind::Log: v = std::log(a); break;
    case Kind::Log1p: v = std::log1p(a); break;
    case Kind::Sqrt: v = std::sqrt(a); break;
    case Kind::Rsqrt: v = 1.0 / std::sqrt(a); break;
    case Kind::Tanh: v = std::tanh(a); break;
    case Kind::Erf: v = std::erf(a); break;
    case Kind::Sin: v = std::sin(a); break;
    case Kind::Cos: v = std::cos(a); break;
    case Kind::Atan: v = std::atan(a); break;
    case Kind::Floor: v = std::floor(a); break;
    case Kind::Ceil: v = std::ceil(a); break;
    // (Rounded in the type's precision before: a value of the type rounds
    // to an integer of the type; halves to even, as ONNX's Round.)
    case Kind::RoundEven: v = std::nearbyint(a); break;
    case Kind::PowF: v = std::pow(a, b); break;
    case Kind::Convert: v = a; break;
    case Kind::FPToSI: v = std::isfinite(a) ? std::trunc(a) : 0; break;
    case Kind::CmpNeZero: v = a != 0; break;
    case Kind::CmpF: {
      bool unordered = std::isnan(a) || std::isnan(b);
      using P = arith::CmpFPredicate;
      switch (static_cast<P>(s.pred)) {
      case P::OEQ: v = !unordered && a == b; break;
      case P::UNE: v = unordered || a != b; break;
      case P::OLT: v = !unordered && a < b; break;
      case P::OLE: v = !unordered && a <= b; break;
      case P::OGT: v = !unordered && a > b; break;
      case P::OGE: v = !unordered && a >= b; break;
      case P::ONE: v = !unordered && a != b; break;
      case P::UEQ: v = unordered || a == b; break;
      case P::ULT: v = unordered || a < b; break;
      case P::ULE: v = unordered || a <= b; break;
      case P::UGT: v = unordered || a > b; break;
      case P::UGE: v = unordered || a >= b; break;
      case P::ORD: v = !unordered; break;
      case P::UNO: v = unordered; break;
      case P::AlwaysTrue: v = 1; break;
      case P::AlwaysFalse: v = 0; break;
      }
      break;
    }
    case Kind::CmpI: {
      using P = arith::CmpIPredicate;
      switch (static_cast<P>(s.pred)) {
      case P::eq: v = a == b; break;
      case P::ne: v = a != b; break;
      // Values are held signed; i1 holds 0/1, so unsigned order matches.
      case P::slt: case P::ult: v = a < b; break;
      case P::sle: case P::ule: v = a <= b; break;
      case P::sgt: case P::ugt: v = a > b; break;
      case P::sge: case P::uge: v = a >= b; break;
      }
      break;
    }
    case Kind::Select: v = a != 0 ? b : r[s.c]; break;
    }
    r[s.out] = roundTo(s.type, v);
  }
  return r[resultRegister_];
}

} // namespace kiln
