//===- RandomGraph.h - random kiln functions for pass tests -------*- C++ -*-===//
//
// Builds a random DAG of kiln ops on small random shapes: elementwise ops,
// broadcasts, reshapes, transposes, slices, reductions, dot_generals, the
// composites kiln-decompose rewrites and the odd all_reduce, with diamonds
// and values used many times, so that fusion meets every rule it has (and
// every way to get one wrong). Everything is f64 (or the options' float
// type) unless a convert narrows it; inputs come from randomArguments.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_PASSES_RANDOMGRAPH_H
#define KILN_TESTS_UNIT_PASSES_RANDOMGRAPH_H

#include "ir/HostTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <vector>

namespace kiln::test {

struct RandomGraphOptions {
  int minOps = 8;
  int maxOps = 40;
  // Also composites (softmax, layer_norm, ...) and collectives.
  bool composites = true;
  bool collectives = true;
  // A convert to a narrower type and back (a rounding step). Off for tests
  // whose two sides compute in different orders (generated kernels against
  // the interpreter): x and its rounding are near-ties, so a comparison of
  // the two flips on an ulp; a tanh then takes its place.
  bool roundingSteps = true;
  // Also embedding lookups (kiln.gather of a table's rows by i32 indices
  // below 4, from a new argument; a model's gradient scatters them back).
  bool gathers = false;
  // The float type of the arguments and ops: f64 or f32 (then the rounding
  // step goes through bf16).
  DType floatType = DType::f64;
  // Extents are 2 to 5; with longExtent > 5, a dimension is 6 to longExtent
  // (log-uniform) instead with probability longChance (rows wider than a
  // warp or a block, odd ones), while the tensor stays within maxElements.
  int64_t longExtent = 0;
  double longChance = 0.2;
  int64_t maxElements = 1 << 14;
};

// A module with one function @main built from |seed|.
mlir::OwningOpRef<mlir::ModuleOp> buildRandomGraph(mlir::MLIRContext *context,
                                                   uint64_t seed,
                                                   const RandomGraphOptions &options = {});

// |module|'s @main (from buildRandomGraph, f32) made a model to train:
// about half its float arguments of rank >= 1 become parameters (uniform
// initializers on [-1, 1)), the other float arguments inputs and integer
// ones labels; it returns one loss, the sum of every float result's mean.
void makeRandomModel(mlir::ModuleOp module, uint64_t seed);

// Arguments for |func|: floats uniform on [-2, 2]; integer arguments
// uniform on [0, |intBound|) (labels, tokens) unless they are 0-d, which
// get 3 (a step counter).
std::vector<HostTensor> randomArguments(mlir::func::FuncOp func, uint64_t seed,
                                        int64_t intBound);

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_PASSES_RANDOMGRAPH_H
