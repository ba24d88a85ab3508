//===- KilnAttrs.td - kiln enums and attributes -------------*- tablegen -*-===//
//
// Enums print as bare keywords in op assembly (`kiln.compare lt, ...`). The
// attributes that annotate functions (role, initializer, training section)
// are dialect attributes so they can sit in argument dictionaries.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ATTRS_TD
#define KILN_ATTRS_TD

include "ir/KilnDialect.td"
include "mlir/IR/EnumAttr.td"

def Kiln_CmpEq : I32EnumAttrCase<"eq", 0>;
def Kiln_CmpNe : I32EnumAttrCase<"ne", 1>;
def Kiln_CmpLt : I32EnumAttrCase<"lt", 2>;
def Kiln_CmpLe : I32EnumAttrCase<"le", 3>;
def Kiln_CmpGt : I32EnumAttrCase<"gt", 4>;
def Kiln_CmpGe : I32EnumAttrCase<"ge", 5>;
def Kiln_CompareDirectionAttr : I32EnumAttr<"CompareDirection",
    "comparison direction",
    [Kiln_CmpEq, Kiln_CmpNe, Kiln_CmpLt, Kiln_CmpLe, Kiln_CmpGt, Kiln_CmpGe]> {
  let cppNamespace = "::kiln";
}

def Kiln_ReduceSum : I32EnumAttrCase<"sum", 0>;
def Kiln_ReduceMax : I32EnumAttrCase<"max", 1>;
def Kiln_ReduceMin : I32EnumAttrCase<"min", 2>;
def Kiln_ReduceMean : I32EnumAttrCase<"mean", 3>;
def Kiln_ReduceProd : I32EnumAttrCase<"prod", 4>;
def Kiln_ReduceKindAttr : I32EnumAttr<"ReduceKind", "reduction kind",
    [Kiln_ReduceSum, Kiln_ReduceMax, Kiln_ReduceMin, Kiln_ReduceMean,
     Kiln_ReduceProd]> {
  let cppNamespace = "::kiln";
}

def Kiln_GeluErf : I32EnumAttrCase<"erf", 0>;
def Kiln_GeluTanh : I32EnumAttrCase<"tanh", 1>;
def Kiln_GeluApproximationAttr : I32EnumAttr<"GeluApproximation",
    "GELU form", [Kiln_GeluErf, Kiln_GeluTanh]> {
  let cppNamespace = "::kiln";
}

def Kiln_FusionLoop : I32EnumAttrCase<"loop", 0>;
def Kiln_FusionReduction : I32EnumAttrCase<"reduction", 1>;
def Kiln_FusionMultiOutput : I32EnumAttrCase<"multi_output", 2>;
def Kiln_FusionHorizontal : I32EnumAttrCase<"horizontal", 3>;
def Kiln_FusionGemm : I32EnumAttrCase<"gemm", 4>;
def Kiln_FusionKindAttr : I32EnumAttr<"FusionKind", "fusion kind",
    [Kiln_FusionLoop, Kiln_FusionReduction, Kiln_FusionMultiOutput,
     Kiln_FusionHorizontal, Kiln_FusionGemm]> {
  let cppNamespace = "::kiln";
}

//===----------------------------------------------------------------------===//
// Function annotations.
//===----------------------------------------------------------------------===//

def Kiln_RoleInput : I32EnumAttrCase<"input", 0>;
def Kiln_RoleLabel : I32EnumAttrCase<"label", 1>;
def Kiln_RoleParameter : I32EnumAttrCase<"parameter", 2>;
def Kiln_RoleOptimizerState : I32EnumAttrCase<"optimizer_state", 3>;
def Kiln_RoleStep : I32EnumAttrCase<"step", 4>;
def Kiln_RoleLoss : I32EnumAttrCase<"loss", 5>;
def Kiln_RoleOutput : I32EnumAttrCase<"output", 6>;
def Kiln_RoleGradient : I32EnumAttrCase<"gradient", 7>;
def Kiln_RoleParameterCopy : I32EnumAttrCase<"parameter_copy", 8>;
// State of the model that no gradient trains, updated by the forward pass (a
// batch norm's running statistics, PyTorch's buffers): an initialized
// argument, and a result with kiln.updates naming it.
def Kiln_RoleModelState : I32EnumAttrCase<"model_state", 9>;
def Kiln_Role : I32EnumAttr<"Role", "role of a function argument or result",
    [Kiln_RoleInput, Kiln_RoleLabel, Kiln_RoleParameter,
     Kiln_RoleOptimizerState, Kiln_RoleStep, Kiln_RoleLoss, Kiln_RoleOutput,
     Kiln_RoleGradient, Kiln_RoleParameterCopy, Kiln_RoleModelState]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_RoleAttr : EnumAttr<Kiln_Dialect, Kiln_Role, "role"> {
  let assemblyFormat = "`<` $value `>`";
}

def Kiln_InitZeros : I32EnumAttrCase<"zeros", 0>;
def Kiln_InitOnes : I32EnumAttrCase<"ones", 1>;
def Kiln_InitConstant : I32EnumAttrCase<"constant", 2>;
def Kiln_InitNormal : I32EnumAttrCase<"normal", 3>;
def Kiln_InitUniform : I32EnumAttrCase<"uniform", 4>;
def Kiln_InitGlorotUniform : I32EnumAttrCase<"glorot_uniform", 5>;
def Kiln_InitKaimingNormal : I32EnumAttrCase<"kaiming_normal", 6>;
def Kiln_InitKind : I32EnumAttr<"InitKind", "parameter initializer",
    [Kiln_InitZeros, Kiln_InitOnes, Kiln_InitConstant, Kiln_InitNormal,
     Kiln_InitUniform, Kiln_InitGlorotUniform, Kiln_InitKaimingNormal]> {
  let cppNamespace = "::kiln";
}

// A double-precision attribute parameter, printed exactly (shortest form
// that round-trips), with a default that the printer elides.
class Kiln_F64Param<string default> : AttrParameter<"::llvm::APFloat", "f64"> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double v;
    if (::mlir::failed($_parser.parseFloat(v)))
      return ::mlir::failure();
    return ::llvm::APFloat(v);
  }() }];
  let printer = [{ $_printer.printFloat($_self) }];
  let comparator = [{ $_lhs.bitwiseIsEqual($_rhs) }];
  let defaultValue = "::llvm::APFloat(" # default # ")";
}

def Kiln_InitializerAttr : AttrDef<Kiln_Dialect, "Initializer"> {
  let mnemonic = "init";
  let summary = "How a parameter is initialized";
  let description = [{
    `kind` selects the distribution; `value` and `scale` are its parameters:
    - zeros, ones: no parameters;
    - constant: every element is `value`;
    - normal: mean `value`, standard deviation `scale`;
    - uniform: uniform on [`value` - `scale`, `value` + `scale`];
    - glorot_uniform: uniform on [-l, l], l = `scale` * sqrt(6 / (fan_in + fan_out));
    - kaiming_normal: normal with std `scale` * sqrt(2 / fan_in).
    Fans follow PyTorch: for a rank-2 [in, out] weight fan_in = in, fan_out = out;
    for a convolution filter OIHW, fan_in = I*H*W and fan_out = O*H*W.
    `seed` makes the values reproducible.

    Example: `#kiln.init<kind = glorot_uniform, seed = 3>`
  }];
  let parameters = (ins
    "::kiln::InitKind":$kind,
    Kiln_F64Param<"0.0">:$value,
    Kiln_F64Param<"1.0">:$scale,
    DefaultValuedParameter<"int64_t", "0">:$seed);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Kiln_OptSgd : I32EnumAttrCase<"sgd", 0>;
def Kiln_OptMomentum : I32EnumAttrCase<"momentum", 1>;
def Kiln_OptAdam : I32EnumAttrCase<"adam", 2>;
def Kiln_OptAdamW : I32EnumAttrCase<"adamw", 3>;
def Kiln_OptimizerKind : I32EnumAttr<"OptimizerKind", "optimizer",
    [Kiln_OptSgd, Kiln_OptMomentum, Kiln_OptAdam, Kiln_OptAdamW]> {
  let cppNamespace = "::kiln";
}

def Kiln_SchedConstant : I32EnumAttrCase<"constant", 0>;
def Kiln_SchedWarmupCosine : I32EnumAttrCase<"warmup_cosine", 1>;
def Kiln_SchedWarmupLinear : I32EnumAttrCase<"warmup_linear", 2>;
def Kiln_LrSchedule : I32EnumAttr<"LrSchedule", "learning-rate schedule",
    [Kiln_SchedConstant, Kiln_SchedWarmupCosine, Kiln_SchedWarmupLinear]> {
  let cppNamespace = "::kiln";
}

def Kiln_TrainingAttr : AttrDef<Kiln_Dialect, "Training"> {
  let mnemonic = "training";
  let summary = "The optimizer and its hyper-parameters";
  let description = [{
    Attached to the module as `kiln.training`; the graph file's training
    section. Flags of `kiln compile` override each field.

    Example: `#kiln.training<optimizer = adam, learning_rate = 1.000000e-03>`
  }];
  let parameters = (ins
    "::kiln::OptimizerKind":$optimizer,
    Kiln_F64Param<"0.01">:$learning_rate,
    Kiln_F64Param<"0.0">:$momentum,
    DefaultValuedParameter<"bool", "false">:$nesterov,
    Kiln_F64Param<"0.9">:$beta1,
    Kiln_F64Param<"0.999">:$beta2,
    Kiln_F64Param<"1e-8">:$epsilon,
    Kiln_F64Param<"0.0">:$weight_decay,
    Kiln_F64Param<"0.0">:$clip_norm,
    DefaultValuedParameter<"::kiln::LrSchedule", "::kiln::LrSchedule::constant">:$schedule,
    DefaultValuedParameter<"int64_t", "0">:$warmup_steps,
    DefaultValuedParameter<"int64_t", "0">:$total_steps);
  let assemblyFormat = "`<` struct(params) `>`";
}

#endif // KILN_ATTRS_TD
