//===- Precompiled.h - Headers most compiler sources parse ------*- C++ -*-===//
//
// The MLIR, LLVM and kiln-dialect headers that nearly every source of the
// compiler (ir/, passes/, codegen/, tools/kiln/lib/ and their tests)
// includes. Parsing them took about half of each such file's compile time
// (4 to 6 s of 9 to 16 s at -O3 on this project's 2-core machine), once
// per file; with KILN_PCH (the default) CMake parses them once per build
// tree into a precompiled header (the KilnMlirPch target) that every
// compiler target reuses (kiln_use_mlir_pch in the top CMakeLists.txt).
//
// Only headers that are safe to include first: include-guarded, and
// independent of macros a source defines before its includes (so no
// Passes.h.inc or .cpp.inc). A source must still include what it uses;
// without KILN_PCH this file is not read at all.
//
// The runtime never sees this file: it has no MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_PRECOMPILED_H
#define KILN_IR_PRECOMPILED_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#endif // KILN_IR_PRECOMPILED_H
