//===- Import.cpp - `kiln import`: an ONNX model as a kiln model ----------===//
//
// `kiln import MODEL.onnx -o OUT [--loss=cross-entropy|mse|output] [--batch=N]
// [--weights=FILE] [--quantized-weights=train|fixed]` reads an ONNX model
// (serialize/OnnxModel.h), builds the kiln model with a loss
// (tools/kiln/lib/OnnxImport.h) and writes it like `kiln models` does: a graph
// file, or MLIR text for OUT ending in .mlir. The initializers' values go to a
// safetensors file beside it (OUT with the extension .safetensors unless
// --weights names another), for `kiln train --init-from`. Nothing is written
// when the import fails.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OnnxImport.h"

#include "runtime/checkpoint/Safetensors.h"
#include "serialize/OnnxModel.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

namespace kiln::cli {

namespace {
constexpr llvm::StringLiteral kCommand = "kiln import";
} // namespace

int runImport(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs) {
  std::string input, output, loss, batch, weights, quantizedWeights;
  TrainingFlagText training;
  FlagParser parser(
      kCommand.str(), "MODEL.onnx -o OUT [options]",
      "Reads an ONNX model (as torch.onnx.export writes one) and writes it "
      "as a kiln\nmodel with a loss over its one output: a graph file, or "
      "MLIR text for OUT\nending in .mlir. Its floating-point initializers "
      "become parameters, named and\nshaped as in the file (a Gemm weight "
      "stays [out, in]), with PyTorch's default\ninitializer for training "
      "from scratch; their values go to a safetensors file\nfor `kiln train "
      "--init-from`. Every shape is static: a symbolic batch\ndimension "
      "needs --batch.");
  parser.addPositional("MODEL", &input, "an ONNX model file (.onnx)");
  parser.addValue("output", &output, "OUT",
                  "where to write the model (.kiln graph file or .mlir text)", 'o');
  parser.addValue("loss", &loss, "KIND",
                  "cross-entropy (default): mean softmax cross-entropy of the "
                  "output [batch, classes] against a new input 'labels' "
                  "[batch] of class indices; mse: mean squared error "
                  "against a new input 'targets' of the output's shape; "
                  "output: the graph's output is the loss (one element; "
                  "its labels are graph inputs)");
  parser.addValue("batch", &batch, "N",
                  "the batch size, for inputs whose first dimension is "
                  "symbolic (dynamic_axes)");
  parser.addValue("weights", &weights, "FILE",
                  "where to write the initializers' values (default: OUT "
                  "with the extension .safetensors)");
  parser.addValue("quantized-weights", &quantizedWeights, "train|fixed",
                  "a DequantizeLinear of an integer initializer (a "
                  "post-training quantized weight or bias): train (default) "
                  "makes it a float parameter that starts from the "
                  "dequantized values and trains through a fake quantization "
                  "of the same scale and zero point (a bias: in float), "
                  "named without ONNX Runtime's '_quantized' suffix; fixed "
                  "keeps it a constant");
  addTrainingSectionFlags(parser, training);
  parser.setEpilogue(std::string("ONNX ops read: ") + onnxSupportedOps() + ".");
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  if (output.empty()) {
    printError(errs, kCommand, "missing -o OUT (where to write the model)");
    parser.printUsage(errs);
    return kExitUsage;
  }

  OnnxImportOptions options;
  if (loss == "mse")
    options.loss = OnnxLoss::meanSquaredError;
  else if (loss == "output")
    options.loss = OnnxLoss::output;
  else if (!loss.empty() && loss != "cross-entropy") {
    printError(errs, kCommand,
               "--loss=" + loss + ": expected cross-entropy, mse or output");
    return kExitUsage;
  }
  if (quantizedWeights == "fixed")
    options.trainQuantizedWeights = false;
  else if (!quantizedWeights.empty() && quantizedWeights != "train") {
    printError(errs, kCommand,
               "--quantized-weights=" + quantizedWeights +
                   ": expected train or fixed");
    return kExitUsage;
  }
  if (!batch.empty()) {
    std::optional<int64_t> n = parseInteger(kCommand, "batch", batch, 1, errs);
    if (!n)
      return kExitUsage;
    options.batch = *n;
  }
  if (!parseTrainingSection(kCommand, training, options.training, errs))
    return kExitUsage;
  if (weights.empty() && output == "-") {
    printError(errs, kCommand, "-o -: name the weights' file with --weights=FILE");
    return kExitUsage;
  }
  if (weights.empty()) {
    llvm::SmallString<256> path(output);
    llvm::sys::path::replace_extension(path, "safetensors");
    weights = path.str().str();
  }
  if (weights == output) {
    printError(errs, kCommand, "--weights=" + weights + " is the model's own file");
    return kExitUsage;
  }

  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(input, /*IsText=*/false);
  if (std::error_code ec = buffer.getError()) {
    printError(errs, kCommand, input + ": cannot read it: " + ec.message());
    return kExitError;
  }
  std::string error;
  std::optional<onnx::Model> model =
      onnx::parseModel((*buffer)->getBuffer().str(), error);
  if (!model) {
    printError(errs, kCommand,
               input + ": not an ONNX model (a ModelProto): " + error);
    return kExitError;
  }
  if (!onnx::loadExternalData(
          *model, llvm::sys::path::parent_path(input).str(), error)) {
    printError(errs, kCommand, input + ": " + error);
    return kExitError;
  }

  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  diagnostics.setCurrentFile(input);
  OnnxImport imported;
  if (!importOnnx(*model, input, options, &context, imported, kCommand, errs))
    return kExitError;
  if (mlir::failed(writeModule(*imported.module, output)))
    return kExitError;
  runtime::Status written = runtime::writeSafetensors(weights, imported.weights);
  if (!written.isOk()) {
    printError(errs, kCommand, "--weights: " + written.message());
    return kExitError;
  }
  int64_t parameters =
      static_cast<int64_t>(imported.weights.tensors.size()) - imported.modelState;
  if (output != "-")
    outs << "wrote " << output << ": " << imported.nodes << " ONNX nodes of "
         << llvm::sys::path::filename(input) << " (opset "
         << model->defaultOpset()
         << (model->producerName.empty() ? std::string()
                                         : ", from " + model->producerName)
         << "), " << parameters
         << (parameters == 1 ? " parameter, " : " parameters, ")
         << (imported.modelState == 0
                 ? std::string()
                 : std::to_string(imported.modelState) + " running statistic" +
                       (imported.modelState == 1 ? ", " : "s, "))
         << (options.loss == OnnxLoss::crossEntropy ? "cross-entropy loss"
             : options.loss == OnnxLoss::meanSquaredError
                 ? "mse loss"
                 : "the graph's own loss")
         << "\nwrote " << weights
         << ": the initializers' values (train from them with --init-from="
         << weights << ")\n";
  return kExitOk;
}

} // namespace kiln::cli
