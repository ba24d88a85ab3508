//===- OnnxImport.h - an ONNX model as a kiln training graph ------*- C++ -*-===//
//
// `kiln import` (Import.cpp) turns an ONNX inference graph, as
// torch.onnx.export writes one, into a kiln model: the graph's data inputs
// become inputs, its floating-point initializers parameters (named as in
// the file, kept in its layout: a Gemm weight stays [out, in]), and a loss
// over its one output is added: the mean softmax cross-entropy against a
// new "labels" input ([batch] i32), or the mean squared error against a
// new "targets" input of the output's shape. Integer initializers and
// Constant nodes are constants; shape computations on them (Shape, Gather,
// Concat, Unsqueeze, ... as the TorchScript exporter writes for a flatten)
// are evaluated at import. Every shape is static: a symbolic dimension is
// the batch (the first dimension of an input) and is fixed by --batch.
//
// The initializers' values are returned too, as F32 tensors named as the
// parameters, for `kiln train --init-from`; the parameters' own #kiln.init
// follows PyTorch's default (uniform on +-1/sqrt(fan_in)) for training
// from scratch. An op outside the supported set, an attribute kiln cannot
// honor (an Einsum diagonal, a transposed convolution's SAME padding, ...) or
// an inconsistent shape is an error naming the node and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_ONNXIMPORT_H
#define KILN_TOOLS_KILN_LIB_ONNXIMPORT_H

#include "tools/kiln/lib/Zoo.h"

#include "runtime/checkpoint/Safetensors.h"
#include "serialize/OnnxModel.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kiln::cli {

// The loss the import adds over the graph's one output, or none: the
// output is the loss (a training graph exported with its loss; its labels
// are inputs like any other).
enum class OnnxLoss { crossEntropy, meanSquaredError, output };

struct OnnxImportOptions {
  OnnxLoss loss = OnnxLoss::crossEntropy;
  // The batch for a symbolic first dimension; 0: none given.
  int64_t batch = 0;
  // A DequantizeLinear of an integer initializer (a post-training
  // quantized weight or bias): true, a float parameter that starts from
  // the dequantized values and trains through a fake quantization of the
  // same scale and zero point (an INT32 bias trains in float, as in
  // PyTorch's quantization-aware training); false, a constant.
  bool trainQuantizedWeights = true;
  TrainingOptions training;
};

struct OnnxImport {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  // The parameters' and the model state's values from the file (F32; F64
  // for DOUBLE ones).
  runtime::SafetensorsFile weights;
  int64_t nodes = 0;
  // How many of weights' tensors are model state (running statistics).
  int64_t modelState = 0;
};

// The ops `kiln import` reads, comma-separated (for --help and errors).
const std::string &onnxSupportedOps();

// Imports |model|, read from |path| (named in messages). Prints the
// problem (prefixed with |command|) and returns false.
bool importOnnx(const onnx::Model &model, const std::string &path,
                const OnnxImportOptions &options, mlir::MLIRContext *context,
                OnnxImport &out, llvm::StringRef command,
                llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_ONNXIMPORT_H
