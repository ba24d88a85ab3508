//===- Passes.td - kiln passes ------------------------------*- tablegen -*-===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnVerifyRoles : Pass<"kiln-verify-roles", "mlir::ModuleOp"> {
  let summary = "Check that a model module is well formed for training";
  let description = [{
    Every public function argument has a `kiln.role`; parameters have a
    `kiln.init`; a function marked with a loss result returns it as a 0-d
    float tensor. Runs first in the compile pipeline so later passes can
    rely on the roles.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnTestInterpret : Pass<"kiln-test-interpret", "mlir::ModuleOp"> {
  let summary = "Replace argument-free functions by their interpreted results";
  let description = [{
    For testing the reference interpreter in lit: every function without
    arguments is evaluated by the interpreter (ir/Interpreter.h) and its
    body replaced by `kiln.constant`s of the results, so FileCheck can check
    the values. Functions with arguments are left alone.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TD
