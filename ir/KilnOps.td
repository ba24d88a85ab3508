//===- KilnOps.td - kiln operations -------------------------*- tablegen -*-===//
//
// Every kiln op: operands, results, attributes, assembly, and the exact
// semantics. Shape rules live in ir/ShapeRules.h as free functions that the
// verifiers, the type inference and the importers share.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "ir/KilnDialect.td"
include "ir/KilnAttrs.td"
include "ir/KilnInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

// An op that only moves data: zero FLOPs.
defvar Kiln_DataMovement = DeclareOpInterfaceMethods<Kiln_CostInterface, ["getFlops"]>;
defvar Kiln_CustomCost = DeclareOpInterfaceMethods<Kiln_CostInterface, ["getFlops"]>;
// Elementwise ops define their scalar computation (ir/ScalarSemantics.cpp);
// the others their tensor-level reference semantics (ir/reference/). Both
// define a gradient rule (ir/gradients/).
defvar Kiln_Scalar = DeclareOpInterfaceMethods<Kiln_ScalarSemanticsInterface>;
defvar Kiln_Reference = DeclareOpInterfaceMethods<Kiln_ReferenceInterface>;
defvar Kiln_Grad = DeclareOpInterfaceMethods<Kiln_DifferentiableInterface>;

//===----------------------------------------------------------------------===//
// Constants and generators
//===----------------------------------------------------------------------===//

def Kiln_ConstantOp : Kiln_Op<"constant",
    [ConstantLike, Pure, Kiln_DataMovement, InferTypeOpAdaptor, Kiln_Reference, Kiln_Grad]> {
  let summary = "A tensor constant";
  let description = [{
    Produces the tensor held by `value`; the result type is the type of
    `value`.

    Example:
    ```mlir
    %c = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Kiln_IotaOp : Kiln_Op<"iota", [Pure, Kiln_DataMovement, Kiln_Reference, Kiln_Grad]> {
  let summary = "Counts along one dimension";
  let description = [{
    `result[i0, ..., in] = i_d` where `d = dimension`, converted to the result
    element type.

    Example:
    ```mlir
    %i = kiln.iota dim = 1 : tensor<2x3xi32>   // [[0, 1, 2], [0, 1, 2]]
    ```
  }];
  let arguments = (ins I64Attr:$dimension);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "`dim` `=` $dimension attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

class Kiln_UnaryOp<string mnemonic, Type type, string formula,
                   list<Trait> traits = []>
    : Kiln_Op<mnemonic, traits # [Pure, Elementwise, SameOperandsAndResultType,
                                  Kiln_CostInterface, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Elementwise " # formula;
  let description = "Computes `" # formula # "` for every element; the result "
    # "has the operand's type.\n\nExample:\n```mlir\n%r = kiln." # mnemonic
    # " %x : tensor<4xf32>\n```";
  let arguments = (ins type:$operand);
  let results = (outs type:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
}

def Kiln_NegOp : Kiln_UnaryOp<"neg", Kiln_NumericTensor, "-x">;
def Kiln_AbsOp : Kiln_UnaryOp<"abs", Kiln_NumericTensor, "|x|">;
def Kiln_ExpOp : Kiln_UnaryOp<"exp", Kiln_FloatTensor, "e^x">;
def Kiln_LogOp : Kiln_UnaryOp<"log", Kiln_FloatTensor, "ln(x)">;
def Kiln_Log1pOp : Kiln_UnaryOp<"log1p", Kiln_FloatTensor, "ln(1 + x)">;
def Kiln_SqrtOp : Kiln_UnaryOp<"sqrt", Kiln_FloatTensor, "sqrt(x)">;
def Kiln_RsqrtOp : Kiln_UnaryOp<"rsqrt", Kiln_FloatTensor, "1 / sqrt(x)">;
def Kiln_TanhOp : Kiln_UnaryOp<"tanh", Kiln_FloatTensor, "tanh(x)">;
def Kiln_SigmoidOp : Kiln_UnaryOp<"sigmoid", Kiln_FloatTensor, "1 / (1 + e^-x)">;
def Kiln_ReluOp : Kiln_UnaryOp<"relu", Kiln_NumericTensor, "max(x, 0)">;
def Kiln_ErfOp : Kiln_UnaryOp<"erf", Kiln_FloatTensor, "erf(x)">;
def Kiln_SinOp : Kiln_UnaryOp<"sin", Kiln_FloatTensor, "sin(x)">;
def Kiln_CosOp : Kiln_UnaryOp<"cos", Kiln_FloatTensor, "cos(x)">;
def Kiln_ReciprocalOp : Kiln_UnaryOp<"reciprocal", Kiln_FloatTensor, "1 / x">;
def Kiln_AtanOp : Kiln_UnaryOp<"atan", Kiln_FloatTensor,
                               "atan(x), in [-pi/2, pi/2] (+-pi/2 at +-infinity)">;
// Rounding to an integer value, in the float type (infinities, NaN and
// values already integral unchanged). Their gradient is zero, as XLA's and
// jax's (and PyTorch's): the function is flat between its steps.
def Kiln_FloorOp : Kiln_UnaryOp<"floor", Kiln_FloatTensor,
                                "floor(x), the largest integer not above x">;
def Kiln_CeilOp : Kiln_UnaryOp<"ceil", Kiln_FloatTensor,
                               "ceil(x), the smallest integer not below x">;
def Kiln_RoundOp : Kiln_UnaryOp<"round", Kiln_FloatTensor,
                                "x rounded to the nearest integer, halves to even">;
def Kiln_StopGradientOp : Kiln_UnaryOp<"stop_gradient", Kiln_Tensor, "x (no gradient flows back)">;

def Kiln_GeluOp : Kiln_Op<"gelu", [Pure, Elementwise, SameOperandsAndResultType,
                                   Kiln_CostInterface, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate = erf`: `0.5 x (1 + erf(x / sqrt(2)))`.
    `approximate = tanh`: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.

    Example:
    ```mlir
    %g = kiln.gelu tanh, %x : tensor<8xf32>
    ```
  }];
  let arguments = (ins Kiln_GeluApproximationAttr:$approximate,
                       Kiln_FloatTensor:$operand);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$approximate `,` $operand attr-dict `:` type($result)";
}

def Kiln_GeluGradOp : Kiln_Op<"gelu_grad", [Pure, Elementwise,
    SameOperandsAndResultType, Kiln_CustomCost, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Gradient of the Gaussian error linear unit";
  let description = [{
    `result = dy * gelu'(x)`, the derivative of `kiln.gelu` with the same
    `approximate` form at `x`, times the incoming gradient `dy`; `x`, `dy`
    and the result have one type. Autodiff emits it for `kiln.gelu`, so the
    backward stays one op (cuBLASLt's DGELU epilogue, PyTorch's
    `gelu_backward`).

    `approximate = erf`: `gelu'(x) = Phi(x) + x phi(x)` with
    `Phi(x) = 0.5 (1 + erf(x / sqrt(2)))` and `phi(x) = e^(-x^2/2) / sqrt(2 pi)`.
    `approximate = tanh`: with `u = sqrt(2/pi) (x + 0.044715 x^3)` and
    `t = tanh(u)`, `gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx`.

    f16 and bf16 compute in f32 and round once.

    Example:
    ```mlir
    %dx = kiln.gelu_grad tanh, %x, %dy : tensor<8xbf16>
    ```
  }];
  let arguments = (ins Kiln_GeluApproximationAttr:$approximate,
                       Kiln_FloatTensor:$x, Kiln_FloatTensor:$dy);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$approximate `,` $x `,` $dy attr-dict `:` type($result)";
}

def Kiln_ConvertOp : Kiln_Op<"convert", [Pure, Elementwise,
    SameOperandsAndResultShape, Kiln_DataMovement, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Element type conversion";
  let description = [{
    Converts every element to the result element type. Float to integer
    rounds toward zero; float narrowing rounds to nearest even; a value that
    is nonzero converts to true for i1.

    Example:
    ```mlir
    %h = kiln.convert %x : tensor<4xf32> -> tensor<4xbf16>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `->` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise binary and ternary
//===----------------------------------------------------------------------===//

class Kiln_BinaryOp<string mnemonic, Type type, string formula,
                    list<Trait> traits = []>
    : Kiln_Op<mnemonic, traits # [Pure, Elementwise, SameOperandsAndResultType,
                                  Kiln_CostInterface, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Elementwise " # formula;
  let description = "Computes `" # formula # "` element by element. Both "
    # "operands and the result have the same type: broadcasting is explicit "
    # "(`kiln.broadcast_in_dim`).\n\nExample:\n```mlir\n%r = kiln." # mnemonic
    # " %a, %b : tensor<4xf32>\n```";
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_AddOp : Kiln_BinaryOp<"add", Kiln_NumericTensor, "lhs + rhs", [Commutative]>;
def Kiln_SubOp : Kiln_BinaryOp<"sub", Kiln_NumericTensor, "lhs - rhs">;
def Kiln_MulOp : Kiln_BinaryOp<"mul", Kiln_NumericTensor, "lhs * rhs", [Commutative]>;
def Kiln_DivOp : Kiln_BinaryOp<"div", Kiln_NumericTensor, "lhs / rhs (integers round toward zero)">;
def Kiln_MaxOp : Kiln_BinaryOp<"max", Kiln_NumericTensor, "max(lhs, rhs)", [Commutative]>;
def Kiln_MinOp : Kiln_BinaryOp<"min", Kiln_NumericTensor, "min(lhs, rhs)", [Commutative]>;
def Kiln_PowOp : Kiln_BinaryOp<"pow", Kiln_FloatTensor, "lhs ^ rhs">;
// The remainder of the division rounded toward zero, with lhs's sign: C's
// fmod (exact) and C's % (integers), ONNX's Mod with fmod 1, torch.fmod.
def Kiln_RemOp : Kiln_BinaryOp<"rem", Kiln_NumericTensor,
    "lhs - trunc(lhs / rhs) * rhs (C's fmod and %, with lhs's sign; an integer rhs of 0 gives 0)">;

def Kiln_CompareOp : Kiln_Op<"compare", [Pure, Elementwise,
    AllTypesMatch<["lhs", "rhs"]>, InferTypeOpAdaptor, Kiln_CostInterface, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Elementwise comparison";
  let description = [{
    `result = lhs <direction> rhs` element by element, as i1. Floats compare
    as IEEE ordered comparisons (any NaN gives false), except `ne`, which is
    true when either is NaN.

    Example:
    ```mlir
    %p = kiln.compare lt, %a, %b : tensor<4xf32>   // -> tensor<4xi1>
    ```
  }];
  let arguments = (ins Kiln_CompareDirectionAttr:$direction,
                       Kiln_Tensor:$lhs, Kiln_Tensor:$rhs);
  let results = (outs Kiln_PredTensor:$result);
  let assemblyFormat = "$direction `,` $lhs `,` $rhs attr-dict `:` type($lhs)";
}

def Kiln_SelectOp : Kiln_Op<"select", [Pure, Elementwise,
    AllTypesMatch<["on_true", "on_false", "result"]>, Kiln_CostInterface, Kiln_Scalar, Kiln_Grad]> {
  let summary = "Elementwise choice";
  let description = [{
    `result = pred ? on_true : on_false` element by element. `pred` has the
    shape of the other operands and element type i1.

    Example:
    ```mlir
    %r = kiln.select %p, %a, %b : tensor<4xi1>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Kiln_PredTensor:$pred, Kiln_Tensor:$on_true,
                       Kiln_Tensor:$on_false);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $pred `,` $on_true `,` $on_false attr-dict `:` type($pred) `,` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Kiln_BroadcastInDimOp : Kiln_Op<"broadcast_in_dim",
    [Pure, Kiln_DataMovement, Kiln_Reference, Kiln_Grad]> {
  let summary = "Broadcast to a larger shape";
  let description = [{
    Operand dimension `i` maps to result dimension `dims[i]`; `dims` is
    strictly increasing, and each operand dimension is 1 or equal to the
    result dimension it maps to. Element types match.
    `result[r] = operand[o]` with `o_i = (operand.dim(i) == 1) ? 0 : r[dims[i]]`.

    Example:
    ```mlir
    %b = kiln.broadcast_in_dim %bias, dims = [1] : tensor<10xf32> -> tensor<32x10xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, DenseI64ArrayAttr:$broadcast_dimensions);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `dims` `=` $broadcast_dimensions attr-dict `:`
    type($operand) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_ReshapeOp : Kiln_Op<"reshape", [Pure, Kiln_DataMovement, Kiln_Reference, Kiln_Grad]> {
  let summary = "Same elements, new shape";
  let description = [{
    Reinterprets the operand's elements, in row-major order, with the result
    shape. Element counts and types match.

    Example:
    ```mlir
    %r = kiln.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Kiln_TransposeOp : Kiln_Op<"transpose",
    [Pure, Kiln_DataMovement, InferTypeOpAdaptor, Kiln_Reference, Kiln_Grad]> {
  let summary = "Permute dimensions";
  let description = [{
    `result.dim(i) = operand.dim(permutation[i])` and
    `result[r] = operand[o]` with `o[permutation[i]] = r[i]`.

    Example:
    ```mlir
    %t = kiln.transpose %x, permutation = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, DenseI64ArrayAttr:$permutation);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `permutation` `=` $permutation attr-dict `:`
    type($operand) `->` type($result)
  }];
  let hasFolder = 1;
}

def Kiln_SliceOp : Kiln_Op<"slice", [Pure, Kiln_DataMovement, InferTypeOpAdaptor, Kiln_Reference, Kiln_Grad]> {
  let summary = "A strided window";
  let description = [{
    For each dimension `d`, takes indices `start[d], start[d] + strides[d],
    ...` below `limit[d]`: `0 <= start <= limit <= dim`, `strides >= 1`, and
    `result.dim(d) = ceil((limit - start) / stride)`.

    Example:
    ```mlir
    %s = kiln.slice %x, start = [0, 1], limit = [2, 3], strides = [1, 1]
           : tensor<2x4xf32> -> tensor<2x2xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, DenseI64ArrayAttr:$start_indices,
                       DenseI64ArrayAttr:$limit_indices, DenseI64ArrayAttr:$strides);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `start` `=` $start_indices `,` `limit` `=` $limit_indices `,`
    `strides` `=` $strides attr-dict `:` type($operand) `->` type($result)
  }];
}

def Kiln_ConcatenateOp : Kiln_Op<"concatenate",
    [Pure, Kiln_DataMovement, InferTypeOpAdaptor, Kiln_Reference, Kiln_Grad]> {
  let summary = "Join tensors along a dimension";
  let description = [{
    All inputs have the same rank and element type and agree on every
    dimension except `dimension`, where the result's size is the sum.

    Example:
    ```mlir
    %c = kiln.concatenate(%a, %b), dim = 0 : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
    ```
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$inputs, I64Attr:$dimension);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    `(` $inputs `)` `,` `dim` `=` $dimension attr-dict `:` functional-type($inputs, $result)
  }];
}

def Kiln_PadOp : Kiln_Op<"pad", [Pure, Kiln_DataMovement, InferTypeOpAdaptor, Kiln_Reference, Kiln_Grad]> {
  let summary = "Pad the edges with a constant";
  let description = [{
    Adds `low[d]` elements before and `high[d]` after each dimension `d`
    (both non-negative), filled with `value` (converted to the element type).

    Example:
    ```mlir
    %p = kiln.pad %x, low = [0, 1], high = [0, 1], value = 0.0
           : tensor<2x2xf32> -> tensor<2x4xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, DenseI64ArrayAttr:$edge_padding_low,
                       DenseI64ArrayAttr:$edge_padding_high, F64Attr:$padding_value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `low` `=` $edge_padding_low `,` `high` `=` $edge_padding_high
    `,` `value` `=` $padding_value attr-dict `:` type($operand) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def Kiln_ReduceOp : Kiln_Op<"reduce", [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Reduce over dimensions";
  let description = [{
    Reduces `operand` over the listed `dimensions` (unique, in range) with
    `sum`, `max`, `min`, `mean` or `prod`; the result drops those dimensions
    (use `kiln.reshape` or `kiln.broadcast_in_dim` to keep them). An empty
    list is the identity. Floating sums and products accumulate in at least
    f32; integer ones in i64, wrapping, then keep the result type's low bits.
    A product's gradient is, per element, the product of the others (zeros
    included, as PyTorch's `prod` gradient).

    Example:
    ```mlir
    %s = kiln.reduce sum %x, dims = [1] : tensor<4x5xf32> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Kiln_ReduceKindAttr:$kind, Kiln_NumericTensor:$operand,
                       DenseI64ArrayAttr:$dimensions);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = [{
    $kind $operand `,` `dims` `=` $dimensions attr-dict `:`
    type($operand) `->` type($result)
  }];
}

def Kiln_ArgmaxOp : Kiln_Op<"argmax", [Pure, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Index of the largest element along a dimension";
  let description = [{
    The result drops `dimension` and holds, as i32 or i64, the index of the
    largest element along it (the first one on ties; NaN counts as largest).

    Example:
    ```mlir
    %i = kiln.argmax %logits, dim = 1 : tensor<32x10xf32> -> tensor<32xi64>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$operand, I64Attr:$dimension);
  let results = (outs Kiln_IndexTensor:$result);
  let assemblyFormat = [{
    $operand `,` `dim` `=` $dimension attr-dict `:` type($operand) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

def Kiln_DotGeneralOp : Kiln_Op<"dot_general",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Batched tensor contraction (matmul)";
  let description = [{
    Contracts `lhs` and `rhs` over the paired contracting dimensions, with the
    paired batching dimensions shared. Paired dimensions have equal sizes; no
    dimension is listed twice. The result's dimensions are the batching
    dimensions (in `lhs` order), then lhs's free dimensions, then rhs's free
    dimensions, each in increasing order. Operand element types match and the
    result has that element type; accumulation is in at least f32.

    Example (a batched matmul):
    ```mlir
    %c = kiln.dot_general %a, %b, batch = [0] x [0], contract = [2] x [1]
           : (tensor<8x32x64xf32>, tensor<8x64x16xf32>) -> tensor<8x32x16xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$lhs, Kiln_NumericTensor:$rhs,
                       DenseI64ArrayAttr:$lhs_batching_dimensions,
                       DenseI64ArrayAttr:$rhs_batching_dimensions,
                       DenseI64ArrayAttr:$lhs_contracting_dimensions,
                       DenseI64ArrayAttr:$rhs_contracting_dimensions);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` `batch` `=` $lhs_batching_dimensions `x` $rhs_batching_dimensions
    `,` `contract` `=` $lhs_contracting_dimensions `x` $rhs_contracting_dimensions
    attr-dict `:` functional-type(operands, results)
  }];
}

def Kiln_Conv2DOp : Kiln_Op<"conv2d", [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "2-D convolution, NCHW input and OIHW filter";
  let description = [{
    `input` is [N, C, H, W], `filter` is [O, C / groups, KH, KW], and the
    result is [N, O, OH, OW] with
    `OH = (H + pad_top + pad_bottom - dil_h * (KH - 1) - 1) / stride_h + 1`
    (and likewise OW). `padding` is [top, bottom, left, right]; `strides` and
    `dilation` are [h, w]. C and O are divisible by `groups`. This is
    cross-correlation, as in PyTorch's `conv2d`.

    Example:
    ```mlir
    %y = kiln.conv2d %x, %w, strides = [1, 1], padding = [2, 2, 2, 2],
           dilation = [1, 1], groups = 1
           : (tensor<8x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x6x28x28xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$filter,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilation, I64Attr:$groups);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $filter `,` `strides` `=` $strides `,` `padding` `=` $padding `,`
    `dilation` `=` $dilation `,` `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
}

def Kiln_Conv2DInputGradOp : Kiln_Op<"conv2d_input_grad",
    [Pure, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of conv2d with respect to its input";
  let description = [{
    Given `grad_output` [N, O, OH, OW] of a `kiln.conv2d` with the same
    attributes and `filter`, produces the gradient with respect to the input;
    the result type is the input's type (it is not inferable: strides floor).
    The verifier checks that a conv2d of the result shape with `filter`
    gives `grad_output`'s shape.

    Example:
    ```mlir
    %dx = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [2, 2, 2, 2],
            dilation = [1, 1], groups = 1
            : (tensor<8x6x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x1x28x28xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$grad_output, Kiln_FloatTensor:$filter,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilation, I64Attr:$groups);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $grad_output `,` $filter `,` `strides` `=` $strides `,` `padding` `=` $padding
    `,` `dilation` `=` $dilation `,` `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kiln_Conv2DFilterGradOp : Kiln_Op<"conv2d_filter_grad",
    [Pure, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of conv2d with respect to its filter";
  let description = [{
    Given the convolution's `input` [N, C, H, W] and `grad_output`
    [N, O, OH, OW], produces the gradient with respect to the filter
    [O, C / groups, KH, KW] (the result type). The verifier checks that a
    conv2d of `input` with a filter of the result shape gives `grad_output`'s
    shape.

    Example:
    ```mlir
    %dw = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [2, 2, 2, 2],
            dilation = [1, 1], groups = 1
            : (tensor<8x1x28x28xf32>, tensor<8x6x28x28xf32>) -> tensor<6x1x5x5xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilation, I64Attr:$groups);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad_output `,` `strides` `=` $strides `,` `padding` `=` $padding
    `,` `dilation` `=` $dilation `,` `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

class Kiln_Pool2DOp<string mnemonic, string what> : Kiln_Op<mnemonic,
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = what # " pooling over 2-D windows (NCHW)";
  let arguments = (ins Kiln_FloatTensor:$input, DenseI64ArrayAttr:$window,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` `window` `=` $window `,` `strides` `=` $strides `,`
    `padding` `=` $padding attr-dict `:` type($input) `->` type($result)
  }];
}

def Kiln_MaxPool2DOp : Kiln_Pool2DOp<"max_pool2d", "Max"> {
  let description = [{
    `input` is [N, C, H, W]; `window` and `strides` are [h, w]; `padding` is
    [top, bottom, left, right] and padded elements are -infinity. The result
    is [N, C, OH, OW] with `OH = (H + top + bottom - window_h) / stride_h + 1`.

    Example:
    ```mlir
    %y = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0]
           : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
    ```
  }];
}

def Kiln_AvgPool2DOp : Kiln_Pool2DOp<"avg_pool2d", "Average"> {
  let description = [{
    As `kiln.max_pool2d`, but each output is the sum of its window divided by
    the window's size (padded elements count as zeros, PyTorch's
    `count_include_pad=True`).

    Example:
    ```mlir
    %y = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0]
           : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
    ```
  }];
}

def Kiln_MaxPool2DGradOp : Kiln_Op<"max_pool2d_grad",
    [Pure, Kiln_CustomCost, AllTypesMatch<["input", "result"]>, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of max_pool2d";
  let description = [{
    Routes each element of `grad_output` to the position of its window's
    maximum in `input` (the first one in row-major order on ties) and sums
    what lands on the same position. The result has the input's type; the
    attributes are those of the forward `kiln.max_pool2d`.

    Example:
    ```mlir
    %dx = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2],
            padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32>, tensor<8x6x14x14xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$window, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad_output `,` `window` `=` $window `,` `strides` `=` $strides
    `,` `padding` `=` $padding attr-dict `:` type($input) `,` type($grad_output)
  }];
  let hasVerifier = 1;
}

def Kiln_AvgPool2DGradOp : Kiln_Op<"avg_pool2d_grad", [Pure, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of avg_pool2d";
  let description = [{
    Spreads each element of `grad_output` evenly over its window (divided by
    the window size) and sums the overlaps. The result type is the forward
    input's type.

    Example:
    ```mlir
    %dx = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2],
            padding = [0, 0, 0, 0] : tensor<8x6x14x14xf32> -> tensor<8x6x28x28xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$grad_output, DenseI64ArrayAttr:$window,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $grad_output `,` `window` `=` $window `,` `strides` `=` $strides `,`
    `padding` `=` $padding attr-dict `:` type($grad_output) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Neural-network composites
//===----------------------------------------------------------------------===//

class Kiln_SoftmaxLikeOp<string mnemonic, string formula> : Kiln_Op<mnemonic,
    [Pure, SameOperandsAndResultType, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = formula # " along one dimension";
  let description = "`result = " # formula # "`, computed stably (the maximum "
    # "along `dimension` is subtracted first).\n\nExample:\n```mlir\n%y = kiln."
    # mnemonic # " %x, dim = 1 : tensor<32x10xf32>\n```";
  let arguments = (ins Kiln_FloatTensor:$operand, I64Attr:$dimension);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$operand `,` `dim` `=` $dimension attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_SoftmaxOp : Kiln_SoftmaxLikeOp<"softmax", "exp(x) / sum(exp(x))">;
def Kiln_LogSoftmaxOp : Kiln_SoftmaxLikeOp<"log_softmax", "x - log(sum(exp(x)))">;

def Kiln_LayerNormOp : Kiln_Op<"layer_norm", [Pure, Kiln_CustomCost,
    AllTypesMatch<["input", "result"]>, AllTypesMatch<["scale", "bias"]>, Kiln_Reference, Kiln_Grad]> {
  let summary = "Layer normalization over the trailing dimensions";
  let description = [{
    Normalizes over dimensions `axis ..< rank`: with mean `m` and biased
    variance `v` over those dimensions,
    `result = (input - m) / sqrt(v + epsilon) * scale + bias`, where `scale`
    and `bias` have the shape `input.shape[axis:]`.

    Example:
    ```mlir
    %y = kiln.layer_norm %x, %g, %b, axis = 2, epsilon = 1.0e-05
           : tensor<4x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$scale,
                       Kiln_FloatTensor:$bias, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias `,` `axis` `=` $axis `,` `epsilon` `=` $epsilon
    attr-dict `:` type($input) `,` type($scale)
  }];
  let hasVerifier = 1;
}

def Kiln_GatherOp : Kiln_Op<"gather", [Pure, InferTypeOpAdaptor, Kiln_DataMovement, Kiln_Reference, Kiln_Grad]> {
  let summary = "Embedding lookup: rows of a table by index";
  let description = [{
    `table` is [V, D1, ...]; `indices` (i32 or i64) has any shape S; the
    result is S ++ [D1, ...] with `result[s, d...] = table[indices[s], d...]`.
    An index outside [0, V) is an error at run time.

    Example:
    ```mlir
    %e = kiln.gather %table, %tokens : (tensor<1000x64xf32>, tensor<4x16xi32>) -> tensor<4x16x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$table, Kiln_IndexTensor:$indices);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` functional-type(operands, results)
  }];
}

def Kiln_ScatterAddOp : Kiln_Op<"scatter_add", [Pure, InferTypeOpAdaptor,
                                                Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Add rows into a table by index (the gradient of gather)";
  let description = [{
    `operand` is [V, D1, ...], `indices` has shape S and `updates` has shape
    S ++ [D1, ...]. The result is `operand` with every `updates[s, ...]` added
    to row `indices[s]`; repeated indices accumulate.

    With `combine = max` (or `min`) each row keeps the largest (smallest) of
    its own element and the updates written to it instead of their sum
    (XLA's scatter with a max computation, jax's `.at[].max()`, PyTorch's
    `scatter_reduce(..., "amax")` with `include_self`); a NaN among them
    wins, as in `kiln.max`. With `combine = prod` each row is its own
    element times the updates written to it (PyTorch's `scatter_reduce(...,
    "prod")` with `include_self`, ONNX's `reduction = "mul"`); the gradient
    of each factor is the product of the others, zeros included, as for
    `kiln.reduce prod`. Without `combine` the updates add.

    Example:
    ```mlir
    %t = kiln.scatter_add %zeros, %tokens, %grads
           : (tensor<1000x64xf32>, tensor<4x16xi32>, tensor<4x16x64xf32>) -> tensor<1000x64xf32>
    %m = kiln.scatter_add %nodes, %targets, %messages combine = max
           : (tensor<100x8xf32>, tensor<400xi32>, tensor<400x8xf32>) -> tensor<100x8xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$operand, Kiln_IndexTensor:$indices,
                       Kiln_NumericTensor:$updates,
                       OptionalAttr<Kiln_ReduceKindAttr>:$combine);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `,` $updates (`combine` `=` $combine^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [
    // Updates that add (no `combine`).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$operand,
                   "::mlir::Value":$indices, "::mlir::Value":$updates), [{
      build($_builder, $_state, result, operand, indices, updates,
            ::kiln::ReduceKindAttr());
    }]>,
    // Updates that combine by |kind| (sum, max, min or prod).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$operand,
                   "::mlir::Value":$indices, "::mlir::Value":$updates,
                   "::kiln::ReduceKind":$kind), [{
      build($_builder, $_state, result, operand, indices, updates,
            kind == ::kiln::ReduceKind::sum
                ? ::kiln::ReduceKindAttr()
                : ::kiln::ReduceKindAttr::get($_builder.getContext(), kind));
    }]>,
  ];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // How updates combine with a row: sum (no `combine`), max, min or prod.
    ::kiln::ReduceKind getCombineKind() {
      return getCombine().value_or(::kiln::ReduceKind::sum);
    }
  }];
}

def Kiln_DropoutOp : Kiln_Op<"dropout", [Pure, Kiln_CustomCost,
    AllTypesMatch<["operand", "result"]>, Kiln_Reference, Kiln_Grad]> {
  let summary = "Inverted dropout with an explicit seed and counter";
  let description = [{
    Keeps element `i` when `u(seed, counter, i) >= rate`, where `u` is a
    counter-based uniform random number on [0, 1) (Philox-4x32-10 keyed by
    `seed`, counter `(counter, i)`), and scales kept elements by
    `1 / (1 - rate)`; dropped elements are zero. The same seed, counter and
    shape always give the same mask, so the gradient reuses them. `counter`
    is a 0-d i64 tensor (usually the training step). `0 <= rate < 1`.

    Example:
    ```mlir
    %y = kiln.dropout %x, %step, rate = 1.000000e-01, seed = 7 : tensor<32x512xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$operand, Kiln_I64Scalar:$counter,
                       F64Attr:$rate, I64Attr:$seed);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $counter `,` `rate` `=` $rate `,` `seed` `=` $seed attr-dict
    `:` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_RandomUniformOp : Kiln_Op<"random_uniform", [Pure, Kiln_CustomCost,
    Kiln_Reference, Kiln_Grad]> {
  let summary = "Counter-based uniform random numbers on [0, 1)";
  let description = [{
    Element `i` (row-major) is `u(seed, counter, i)`: the number
    `kiln.dropout` compares with its rate, from Philox-4x32-10 keyed by
    `seed` at counter `(counter, i)`, 24 bits (`(word >> 8) * 2^-24`). The
    same seed, counter and shape always give the same numbers, so a kernel
    may compute them where it reads them; a new counter (the training step)
    gives new ones. No gradient flows through it. ONNX's RandomUniform,
    RandomNormal (Box-Muller of two of them), their Like forms and
    Bernoulli (u < p) are imported as it.

    Example:
    ```mlir
    %u = kiln.random_uniform %step, seed = 3 : tensor<32x16xf32>
    ```
  }];
  let arguments = (ins Kiln_I64Scalar:$counter, I64Attr:$seed);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $counter `,` `seed` `=` $seed attr-dict `:` type($result)
  }];
}

def Kiln_ModeSelectOp : Kiln_Op<"mode_select", [Pure,
    AllTypesMatch<["training", "eval", "result"]>, Kiln_DataMovement,
    Kiln_Reference, Kiln_Grad]> {
  let summary = "One value in a training step, another in an eval step";
  let description = [{
    Where a model computes differently when it trains and when it is
    evaluated, as PyTorch's `module.train()` and `module.eval()` switch a
    batch norm between the batch's statistics and the running ones. The
    result is `training` in a training step and `eval` in an eval or
    forward-only step: `kiln-resolve-mode` replaces the op by one of them
    before any other pass of `kiln compile` runs. The reference interpreter
    and kiln-autodiff (which differentiates only `training`) treat the graph
    as written as a training step.

    Example:
    ```mlir
    %mean = kiln.mode_select %batch_mean, %running_mean : tensor<16xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$training, Kiln_Tensor:$eval);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $training `,` $eval attr-dict `:` type($result)
  }];
}

def Kiln_SoftmaxCrossEntropyOp : Kiln_Op<"softmax_cross_entropy",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Per-example softmax cross-entropy with integer labels";
  let description = [{
    `logits` is [N, C] and `labels` [N] (i32 or i64, each in [0, C)); the
    result is [N] with `result[n] = logsumexp(logits[n, :]) - logits[n, labels[n]]`.
    Reduce it (`kiln.reduce mean`) for a scalar loss.

    Example:
    ```mlir
    %l = kiln.softmax_cross_entropy %logits, %labels
           : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<32xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$logits, Kiln_IndexTensor:$labels);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
}

def Kiln_AttentionOp : Kiln_Op<"attention",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Fused scaled-dot-product attention";
  let description = [{
    `q` is [B, H, Tq, D], `k` is [B, H, Tk, D] and `v` is [B, H, Tk, Dv], all
    of one float element type T. The results are `out` [B, H, Tq, Dv] of T
    and `lse` [B, H, Tq], the log-sum-exp of each query's scores, of f32
    (f64 when T is f64). Per batch and head, with `s_ij = scale * q_i . k_j`:
    `lse_i = log(sum_j exp(s_ij))`, `p_ij = exp(s_ij - lse_i)` and
    `out_i = sum_j p_ij v_j`. With `causal`, key `j` is visible to query `i`
    only when `j <= i` (top-left aligned, as PyTorch's `is_causal`; every
    query sees key 0) and masked keys have `p_ij = 0`. The reference
    accumulates in f64 and rounds each result once.

    On CUDA this is one fused kernel (FlashAttention-2 style) that never
    materializes the [B, H, Tq, Tk] scores; elsewhere `kiln-decompose`
    expands it into primitives. Differentiable in `q`, `k` and `v` through
    `kiln.attention_grad`; no gradient may flow into `lse`.

    Example:
    ```mlir
    %out, %lse = kiln.attention %q, %k, %v {causal = true, scale = 1.250000e-01 : f64}
        : (tensor<2x12x128x64xbf16>, tensor<2x12x128x64xbf16>, tensor<2x12x128x64xbf16>)
        -> (tensor<2x12x128x64xbf16>, tensor<2x12x128xf32>)
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$q, Kiln_FloatTensor:$k,
                       Kiln_FloatTensor:$v, F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Kiln_FloatTensor:$out, Kiln_FloatTensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` functional-type(operands, results)
  }];
  let builders = [
    // Infers out and lse from q, k and v.
    OpBuilder<(ins "::mlir::Value":$q, "::mlir::Value":$k, "::mlir::Value":$v,
                   "double":$scale, "bool":$causal)>,
  ];
  let hasVerifier = 1;
}

def Kiln_AttentionGradOp : Kiln_Op<"attention_grad",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of kiln.attention";
  let description = [{
    Given the forward operands `q`, `k`, `v`, its results `out` and `lse`
    and the gradient `dout` of `out`, produces `dq`, `dk` and `dv` with the
    types of `q`, `k` and `v`. `scale` and `causal` are the forward op's.
    With `p_ij` as in `kiln.attention` (recomputed from `lse`),
    `dp_ij = dout_i . v_j`, `D_i = dout_i . out_i`,
    `ds_ij = p_ij (dp_ij - D_i)`: `dq_i = scale sum_j ds_ij k_j`,
    `dk_j = scale sum_i ds_ij q_i`, `dv_j = sum_i p_ij dout_i`.
    Not differentiable itself.

    Example:
    ```mlir
    %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %out, %lse, %dout
        {causal = true, scale = 1.250000e-01 : f64}
        : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>,
           tensor<2x4x16x8xf32>, tensor<2x4x16xf32>, tensor<2x4x16x8xf32>)
        -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$q, Kiln_FloatTensor:$k,
                       Kiln_FloatTensor:$v, Kiln_FloatTensor:$out,
                       Kiln_FloatTensor:$lse, Kiln_FloatTensor:$dout,
                       F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Kiln_FloatTensor:$dq, Kiln_FloatTensor:$dk,
                      Kiln_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $lse `,` $dout attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [
    // dq, dk and dv take the types of q, k and v.
    OpBuilder<(ins "::mlir::Value":$q, "::mlir::Value":$k, "::mlir::Value":$v,
                   "::mlir::Value":$out, "::mlir::Value":$lse,
                   "::mlir::Value":$dout, "double":$scale, "bool":$causal)>,
  ];
  let hasVerifier = 1;
}

def Kiln_AttentionQkvOp : Kiln_Op<"attention_qkv",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Fused attention over packed q, k and v, token-major";
  let description = [{
    `kiln.attention` in the layout a transformer's qkv projection writes:
    `qkv` is [B, T, 3, H, D] of one float element type T, holding
    `q = qkv[:, :, 0]`, `k = qkv[:, :, 1]` and `v = qkv[:, :, 2]`, each
    [B, T, H, D]. The results are `out` [B, T, H, D] of T and `lse`
    [B, H, T] of f32 (f64 when T is f64): with qh, kh and vh the [B, H, T, D]
    transposes of q, k and v, `out` is the [B, T, H, D] transpose of
    `kiln.attention(qh, kh, vh)`'s out and `lse` its lse. `scale` and
    `causal` mean what they mean there.

    `kiln-pack-attention` (CUDA) forms it from a `kiln.attention` whose q, k
    and v are the transposed thirds of one projection, so that the fused
    kernels read the projection where it lies and write `out` where the next
    projection reads it: no layout copies. `kiln-decompose` expands it into
    those slices and transposes around `kiln.attention`. Differentiable in
    `qkv` through `kiln.attention_qkv_grad`; no gradient may flow into
    `lse`.

    Example:
    ```mlir
    %out, %lse = kiln.attention_qkv %qkv {causal = true, scale = 1.250000e-01 : f64}
        : (tensor<2x128x3x12x64xbf16>) -> (tensor<2x128x12x64xbf16>, tensor<2x12x128xf32>)
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$qkv, F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Kiln_FloatTensor:$out, Kiln_FloatTensor:$lse);
  let assemblyFormat = [{
    $qkv attr-dict `:` functional-type(operands, results)
  }];
  let builders = [
    // Infers out and lse from qkv.
    OpBuilder<(ins "::mlir::Value":$qkv, "double":$scale, "bool":$causal)>,
  ];
  let hasVerifier = 1;
}

def Kiln_AttentionQkvGradOp : Kiln_Op<"attention_qkv_grad",
    [Pure, InferTypeOpAdaptor, Kiln_CustomCost, Kiln_Reference, Kiln_Grad]> {
  let summary = "Gradient of kiln.attention_qkv";
  let description = [{
    Given the forward operand `qkv` [B, T, 3, H, D], its results `out`
    [B, T, H, D] and `lse` [B, H, T] and the gradient `dout` [B, T, H, D]
    of `out`, produces `dqkv` with the type of `qkv`: `dqkv[:, :, 0]`,
    `dqkv[:, :, 1]` and `dqkv[:, :, 2]` are the [B, T, H, D] transposes of
    `kiln.attention_grad`'s dq, dk and dv for the transposed operands.
    `scale` and `causal` are the forward op's. Not differentiable itself.

    Example:
    ```mlir
    %dqkv = kiln.attention_qkv_grad %qkv, %out, %lse, %dout
        {causal = true, scale = 1.250000e-01 : f64}
        : (tensor<2x16x3x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x4x16xf32>,
           tensor<2x16x4x8xf32>) -> tensor<2x16x3x4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$qkv, Kiln_FloatTensor:$out,
                       Kiln_FloatTensor:$lse, Kiln_FloatTensor:$dout,
                       F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Kiln_FloatTensor:$dqkv);
  let assemblyFormat = [{
    $qkv `,` $out `,` $lse `,` $dout attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [
    // dqkv takes the type of qkv.
    OpBuilder<(ins "::mlir::Value":$qkv, "::mlir::Value":$out,
                   "::mlir::Value":$lse, "::mlir::Value":$dout,
                   "double":$scale, "bool":$causal)>,
  ];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// Collectives are not Pure: every rank issues the same ones in the same
// order, so no pass may drop, duplicate or merge them.
class Kiln_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, traits # [Kiln_CustomCost, Kiln_Reference]> {
  code groupsDoc = [{
    `groups` is a 2-D i64 tensor of ranks, one row per group (every rank in
    at most one group); absent means one group of all ranks.
  }];
}

def Kiln_AllReduceOp : Kiln_CollectiveOp<"all_reduce",
    [AllTypesMatch<["operand", "result"]>, Kiln_Grad]> {
  let summary = "Reduce across ranks, result on every rank";
  let description = [{
    Every rank of the group receives the elementwise `sum`, `max`, `min` or
    `mean` of the operands of all ranks in its group. `groups` is a 2-D i64
    tensor of ranks, one row per group; absent means all ranks.

    A `sum` or `mean` is differentiable: its gradient is the same
    all-reduce of the result's gradient (each rank's operand reaches every
    rank's result), which is how a forward all-reduce (synchronized batch
    norm statistics) gets its backward collective.

    Example:
    ```mlir
    %g = kiln.all_reduce mean %grad : tensor<512xf32>
    %h = kiln.all_reduce sum %x {groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<4xf32>
    ```
  }];
  let arguments = (ins Kiln_ReduceKindAttr:$reduction, Kiln_NumericTensor:$operand,
                       OptionalAttr<I64ElementsAttr>:$groups);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$reduction $operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_ReduceScatterOp : Kiln_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduce across ranks, each rank keeps one shard";
  let description = [{
    Reduces as `kiln.all_reduce`, then splits the result along `dimension`
    into as many equal shards as the group has ranks; rank `k` of the group
    keeps shard `k`. The result type states the shard shape, which divides
    the operand's size along `dimension`.

    Example:
    ```mlir
    %s = kiln.reduce_scatter sum %grad, dim = 0 : tensor<1024xf32> -> tensor<512xf32>
    ```
  }];
  let arguments = (ins Kiln_ReduceKindAttr:$reduction, Kiln_NumericTensor:$operand,
                       I64Attr:$dimension, OptionalAttr<I64ElementsAttr>:$groups);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = [{
    $reduction $operand `,` `dim` `=` $dimension attr-dict `:`
    type($operand) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_AllGatherOp : Kiln_CollectiveOp<"all_gather", [Kiln_Grad]> {
  let summary = "Concatenate every rank's operand along a dimension";
  let description = [{
    Every rank of the group receives the operands of all its ranks,
    concatenated along `dimension` in rank order. The result's size along
    `dimension` is a multiple of the operand's.

    Differentiable: the gradient of rank r's operand sums block r of every
    rank's result gradient, a `kiln.reduce_scatter sum` along `dimension`.

    Example:
    ```mlir
    %p = kiln.all_gather %shard, dim = 0 : tensor<512xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, I64Attr:$dimension,
                       OptionalAttr<I64ElementsAttr>:$groups);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `dim` `=` $dimension attr-dict `:` type($operand) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_CollectiveBroadcastOp : Kiln_CollectiveOp<"collective_broadcast",
    [AllTypesMatch<["operand", "result"]>]> {
  let summary = "Every rank receives the root rank's operand";
  let description = [{
    The result on every rank of the group is the operand of rank `root` (a
    rank of the group). Named `collective_broadcast` to keep it apart from
    `kiln.broadcast_in_dim`.

    Example:
    ```mlir
    %w = kiln.collective_broadcast %w0, root = 0 : tensor<784x512xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, I64Attr:$root,
                       OptionalAttr<I64ElementsAttr>:$groups);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$operand `,` `root` `=` $root attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_SendOp : Kiln_CollectiveOp<"send", [MemoryEffects<[MemWrite]>]> {
  let summary = "Send a tensor to a peer rank";
  let description = [{
    Sends `operand` to rank `peer` on `channel`; the peer has a matching
    `kiln.recv` with the same channel and type.

    Example:
    ```mlir
    kiln.send %act, peer = 1, channel = 0 : tensor<32x512xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$operand, I64Attr:$peer, I64Attr:$channel);
  let assemblyFormat = [{
    $operand `,` `peer` `=` $peer `,` `channel` `=` $channel attr-dict `:` type($operand)
  }];
  let hasVerifier = 1;
}

def Kiln_RecvOp : Kiln_CollectiveOp<"recv", [MemoryEffects<[MemRead]>]> {
  let summary = "Receive a tensor from a peer rank";
  let description = [{
    Receives the tensor that rank `peer` sends on `channel`; the result type
    is the type sent.

    Example:
    ```mlir
    %act = kiln.recv peer = 0, channel = 0 : tensor<32x512xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer, I64Attr:$channel);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    `peer` `=` $peer `,` `channel` `=` $channel attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Kiln_FusionOp : Kiln_Op<"fusion", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    Kiln_CustomCost, Kiln_Reference]> {
  let summary = "A group of ops compiled into one kernel";
  let description = [{
    The body's block arguments are the `inputs`, in order; `kiln.yield`
    returns the `results`. `kind` says how the kernel is shaped (loop,
    reduction, multi_output, horizontal, gemm). One fusion is one kernel.

    Example:
    ```mlir
    %r = kiln.fusion loop (%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
      %s = kiln.add %x, %y : tensor<4xf32>
      %t = kiln.relu %s : tensor<4xf32>
      kiln.yield %t : tensor<4xf32>
    }
    ```
  }];
  let arguments = (ins Kiln_FusionKindAttr:$kind, Variadic<Kiln_Tensor>:$inputs);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
}

def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"FusionOp">]> {
  let summary = "Returns the results of a kiln.fusion body";
  let description = [{
    Its operands are the fusion's results, in order and of the same types.

    Example: `kiln.yield %t : tensor<4xf32>`
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
}

#endif // KILN_OPS_TD
