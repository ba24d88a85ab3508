//===- KilnDialect.td - the kiln dialect --------------------*- tablegen -*-===//
//
// The kiln dialect: a static-shape tensor IR for training graphs. Every op
// works on ranked tensors of static shape; implicit broadcasting does not
// exist (broadcast_in_dim makes it explicit, as in StableHLO).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_TD
#define KILN_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Static-shape tensor operations for compiled training steps";
  let description = [{
    The `kiln` dialect holds the forward graph of a model, its loss, and every
    later form of the training step (gradients, optimizer updates, collectives,
    fusions). Tensors are ranked and statically shaped, with element types
    f64, f32, f16, bf16, i64, i32, i8 and i1. Functions use the builtin `func`
    dialect; each argument carries a `kiln.role` (input, label, parameter, ...)
    and parameters carry a `kiln.init` initializer.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
    // Names of the argument and result attributes the dialect owns.
    static constexpr llvm::StringLiteral kRoleAttrName = "kiln.role";
    static constexpr llvm::StringLiteral kInitAttrName = "kiln.init";
    static constexpr llvm::StringLiteral kNameAttrName = "kiln.name";
    static constexpr llvm::StringLiteral kTrainingAttrName = "kiln.training";
    // On a gradient result: the index of the argument it is the gradient of.
    static constexpr llvm::StringLiteral kGradOfAttrName = "kiln.grad_of";
    // On an updated parameter/state/step result: the argument it replaces.
    static constexpr llvm::StringLiteral kUpdatesAttrName = "kiln.updates";
    // On a parameter copy argument (kiln-parameter-copies): the index of the
    // parameter argument it is a lower-precision copy of.
    static constexpr llvm::StringLiteral kCopyOfAttrName = "kiln.copy_of";
    // On an integer input or label argument (kiln-mark-index-bounds): the
    // model reads it as indices below this bound (a table's rows, a
    // cross-entropy's classes); the package records it and the runtime
    // refuses data outside [0, bound).
    static constexpr llvm::StringLiteral kIndexBoundAttrName = "kiln.index_bound";
    // The buffer plan (kiln-plan-buffers). On each top-level op: the arena
    // offset of each result (-1: it lives in an argument's buffer) and, when
    // some result does, the argument index per result (-1: none).
    static constexpr llvm::StringLiteral kBufferOffsetsAttrName = "kiln.buffer_offsets";
    static constexpr llvm::StringLiteral kAliasesAttrName = "kiln.aliases";
    // On the function: arena size, planned peak and its lower bound, bytes.
    static constexpr llvm::StringLiteral kArenaBytesAttrName = "kiln.arena_bytes";
    static constexpr llvm::StringLiteral kPeakBytesAttrName = "kiln.peak_bytes";
    static constexpr llvm::StringLiteral kLowerBoundBytesAttrName = "kiln.lower_bound_bytes";
  }];
}

// Every kiln op's tensors keep the limits of ir/ShapeRules.h (rank at most
// 64, at most 2^48 bytes), which graph files keep too: past them, element
// counts and byte sizes would overflow int64_t. Checked after the ops' type
// constraints and before their verifiers (whose shape rules count elements).
def Kiln_TensorsWithinLimits : NativeOpTrait<"TensorsWithinLimits"> {
  let cppNamespace = "::kiln";
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, !listconcat([Kiln_TensorsWithinLimits], traits)>;

//===----------------------------------------------------------------------===//
// Types accepted by kiln ops.
//===----------------------------------------------------------------------===//

def Kiln_AnyElement : AnyTypeOf<[F64, F32, F16, BF16, I64, I32, I8, I1]>;
def Kiln_Tensor : StaticShapeTensorOf<[F64, F32, F16, BF16, I64, I32, I8, I1]>;
def Kiln_NumericTensor : StaticShapeTensorOf<[F64, F32, F16, BF16, I64, I32, I8]>;
def Kiln_FloatTensor : StaticShapeTensorOf<[F64, F32, F16, BF16]>;
def Kiln_IndexTensor : StaticShapeTensorOf<[I64, I32]>;
def Kiln_PredTensor : StaticShapeTensorOf<[I1]>;
def Kiln_I64Scalar : 0DTensorOf<[I64]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getI64Type())";
}

#endif // KILN_DIALECT_TD
