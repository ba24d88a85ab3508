//===- ScalarProgram.h - evaluate scalar arith/math IR on doubles -*- C++ -*-===//
//
// Compiles a straight-line block of upstream arith/math scalar ops (what
// ScalarSemantics builds) into a flat register program and runs it on
// doubles, rounding each step's result to its type, as hardware computing in
// that type would. This is how the reference interpreter evaluates every
// elementwise op, so there is no second table of op semantics.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_SCALARPROGRAM_H
#define KILN_IR_SCALARPROGRAM_H

#include "ir/HostTensor.h"

#include "mlir/IR/Block.h"
#include "mlir/Support/LogicalResult.h"

#include <vector>

namespace kiln {

// Maps a scalar MLIR type (f64 ... i1) to its DType; false for others.
bool dtypeOf(mlir::Type type, DType &dtype);

class ScalarProgram {
public:
  // Compiles the ops of |block| that |result| depends on; the block's
  // arguments are the inputs. Fails (with a diagnostic on the unsupported
  // op) when an op is not a scalar arith/math op this evaluator knows.
  static mlir::FailureOr<ScalarProgram> compile(mlir::Block &block,
                                                mlir::Value result);

  // Runs the program on one set of inputs (one per block argument).
  double run(const double *inputs) const;

private:
  enum class Kind : uint8_t {
    Const, AddF, SubF, MulF, DivF, NegF, AbsF, MaxF, MinF, AddI, SubI, MulI,
    DivSI, AbsI, MaxSI, MinSI, Exp, Log, Log1p, Sqrt, Rsqrt, Tanh, Erf, Sin,
    RemF, RemSI, Cos, Atan, Floor, Ceil, RoundEven, PowF, CmpF, CmpI, Select, Convert, FPToSI, CmpNeZero
  };
  struct Step {
    Kind kind;
    DType type;     // the result type, for rounding
    int pred = 0;   // comparison predicate
    int out, a = 0, b = 0, c = 0;
    double imm = 0; // constant value
  };
  std::vector<Step> steps_;
  int numInputs_ = 0;
  int numRegisters_ = 0;
  int resultRegister_ = 0;
};

} // namespace kiln

#endif // KILN_IR_SCALARPROGRAM_H
