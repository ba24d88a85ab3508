//===- Zoo.h - the built-in model zoo -----------------------------*- C++ -*-===//
//
// Builders for the models `kiln models` writes: an MLP, LeNet-5, a ResNet
// and a GPT.
// Each returns a verified module with one public function @main whose
// arguments are the data inputs ("x" or "tokens", role input), the labels
// ("labels" or "targets", role label) and the parameters (role parameter,
// named like PyTorch's state_dict keys), and whose one result is the mean
// cross-entropy loss (role loss). The module carries a #kiln.training.
//
// Layouts and initializers (the choice is deliberate and documented here):
//   - Linear weights are [in, out] (y = x W + b), the layout of JAX/Flax and
//     of GPT-2's original Conv1D; this is the transpose of PyTorch's
//     nn.Linear.weight, and it is the layout #kiln.init's fan rules assume.
//     Convolution filters are OIHW as in PyTorch.
//   - resnet uses torchvision's: convolution filters normal with std
//     sqrt(2 / fan_out) (kaiming_normal_, mode fan_out), batch norm scales
//     ones and shifts zeros, the classifier PyTorch's default below.
//   - mlp and lenet5 use PyTorch's default initialization: weights and biases
//     of nn.Linear and nn.Conv2d uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)]
//     (what kaiming_uniform_(a=sqrt(5)) works out to), written as
//     #kiln.init<kind = uniform, scale = 1/sqrt(fan_in)>.
//   - gpt uses GPT-2's initialization: every weight and both embeddings
//     normal(0, 0.02), the two residual projections of each block normal(0,
//     0.02/sqrt(2 * layers)), biases zeros, layer-norm scales ones. The token
//     embedding is tied to the output projection (logits = x wte^T), as in
//     GPT-2, so there is no separate lm_head parameter.
//   - Parameter i (in argument order) has seed `seed + i`.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_ZOO_H
#define KILN_TOOLS_KILN_LIB_ZOO_H

#include "ir/KilnDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kiln::cli {

class FlagParser;

// What every zoo model shares: the training section and the seeds.
struct TrainingOptions {
  kiln::OptimizerKind optimizer = kiln::OptimizerKind::adam;
  double learningRate = 1e-3;
  int64_t seed = 0;
};

// The flags of a model's training section, for `kiln models` and
// `kiln import` (Models.cpp): --optimizer, --lr and --seed.
struct TrainingFlagText {
  std::string optimizer, lr, seed;
};
void addTrainingSectionFlags(FlagParser &parser, TrainingFlagText &text);
// Fills |training| from the flags given; prints the problem (prefixed with
// |command|) and fails.
bool parseTrainingSection(llvm::StringRef command, const TrainingFlagText &text,
                          TrainingOptions &training, llvm::raw_ostream &errs);

// Fully connected layers with ReLU between them; the last size is the number
// of classes. Input "x" [batch, layers[0]] f32, labels "labels" [batch] i32.
struct MlpOptions {
  llvm::SmallVector<int64_t> layers{784, 512, 256, 10};
  int64_t batch = 128;
  TrainingOptions training;
};

// LeNet-5 for 1x28x28 images and 10 classes: conv 6@5x5 pad 2, relu,
// maxpool 2, conv 16@5x5, relu, maxpool 2, fc 400-120, relu, fc 120-84,
// relu, fc 84-10. Input "x" [batch, 1, 28, 28] f32, labels "labels" [batch].
struct LeNet5Options {
  int64_t batch = 128;
  TrainingOptions training;
};

// A ResNet for 1x28x28 images and 10 classes, as He et al.'s CIFAR ResNets
// (ResNet-8 with blocks = 1, ResNet-20 with 3): a 3x3 convolution of
// `width` channels, batch norm and ReLU; three stages of `blocks` basic
// blocks (two 3x3 convolutions, each followed by a batch norm, ReLU after
// the first and after the residual sum) of width, 2 width and 4 width
// channels, the first block of stages 2 and 3 with stride 2 and a 1x1
// convolution and batch norm on its shortcut; global average pooling and a
// linear classifier. Convolutions have no bias, as before a batch norm in
// torchvision. Names follow torchvision's resnet (conv1.weight, bn1.*,
// layer2.0.conv1.weight, layer2.0.downsample.0.weight, layer2.0.downsample.1.*,
// fc.weight [in, out], fc.bias); each batch norm keeps running_mean and
// running_var as model state (momentum 0.1). Input "x" [batch, 1, 28, 28]
// f32, labels "labels" [batch].
struct ResNetOptions {
  int64_t blocks = 1;
  int64_t width = 16;
  int64_t batch = 128;
  TrainingOptions training;
};

// A GPT-2 style decoder: token embedding (kiln.gather) plus a learned
// position embedding, `layers` pre-norm blocks (layer_norm, causal multi-head
// self-attention, residual, layer_norm, GELU MLP of width 4 * hidden,
// residual), a final layer_norm and tied output logits. Input "tokens"
// [batch, seq] i32; labels "targets" [batch, seq] i32, where targets[b, t]
// is the token that follows tokens[b, t].
struct GptOptions {
  int64_t layers = 4;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t seq = 128;
  int64_t vocab = 256;
  int64_t batch = 16;
  // Dropout on the embeddings and on each block's two residual branches
  // (GPT-2's resid_pdrop and embd_pdrop); 0: none. The attention
  // probabilities are not dropped, so attention stays one fused op.
  double dropout = 0.0;
  TrainingOptions training;
};

// Each check returns "" when the options describe a model, else what is
// wrong, naming the flag.
std::string checkOptions(const MlpOptions &options);
std::string checkOptions(const LeNet5Options &options);
std::string checkOptions(const ResNetOptions &options);
std::string checkOptions(const GptOptions &options);

// Each builder returns null after emitting a diagnostic if the options are
// invalid or (a bug) the module does not verify.
mlir::OwningOpRef<mlir::ModuleOp> buildMlp(mlir::MLIRContext *context,
                                           const MlpOptions &options);
mlir::OwningOpRef<mlir::ModuleOp> buildLeNet5(mlir::MLIRContext *context,
                                              const LeNet5Options &options);
mlir::OwningOpRef<mlir::ModuleOp> buildResNet(mlir::MLIRContext *context,
                                              const ResNetOptions &options);
mlir::OwningOpRef<mlir::ModuleOp> buildGpt(mlir::MLIRContext *context,
                                           const GptOptions &options);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_ZOO_H
