//===- Zoo.cpp - the built-in model zoo -----------------------------------===//
//
// The three zoo models, built op by op with GraphBuilder. Sizes are checked
// before anything is built, with limits that keep every element and FLOP
// count far from int64 overflow.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Zoo.h"

#include "llvm/Support/FormatVariadic.h"

#include "tools/kiln/lib/GraphBuilder.h"

#include "mlir/IR/Diagnostics.h"

#include <cmath>
#include <limits>

namespace kiln::cli {

namespace {

// No dimension above 2^20 and no tensor above 2^40 elements.
constexpr int64_t kMaxDimension = int64_t(1) << 20;
constexpr int64_t kMaxElements = int64_t(1) << 40;

std::string checkDimension(llvm::StringRef flag, int64_t value, int64_t min) {
  if (value < min || value > kMaxDimension)
    return ("--" + flag + "=" + llvm::Twine(value) + ": expected a value from " +
            llvm::Twine(min) + " to " + llvm::Twine(kMaxDimension))
        .str();
  return "";
}

std::string checkElements(llvm::StringRef what, llvm::ArrayRef<int64_t> dims) {
  int64_t total = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(total, d, &total) || total > kMaxElements)
      return ("the " + what + " tensor would have more than 2^40 elements; "
              "choose smaller sizes")
          .str();
  return "";
}

std::string checkTraining(const TrainingOptions &training) {
  if (!(training.learningRate > 0.0) || !std::isfinite(training.learningRate))
    return "--lr: expected a positive learning rate";
  if (training.seed < 0)
    return "--seed: expected a non-negative seed";
  return "";
}

mlir::OwningOpRef<mlir::ModuleOp> rejectOptions(mlir::MLIRContext *context,
                                                llvm::StringRef model,
                                                const std::string &problem) {
  mlir::emitError(mlir::UnknownLoc::get(context))
      << "cannot build model '" << model << "': " << problem;
  return nullptr;
}

kiln::TrainingAttr trainingAttr(mlir::MLIRContext *context,
                                const TrainingOptions &training) {
  return makeTraining(context, training.optimizer, training.learningRate);
}

// PyTorch's default for nn.Linear and nn.Conv2d weights and biases.
double pytorchBound(int64_t fanIn) { return 1.0 / std::sqrt(double(fanIn)); }

} // namespace

//===----------------------------------------------------------------------===//
// MLP
//===----------------------------------------------------------------------===//

std::string checkOptions(const MlpOptions &options) {
  if (options.layers.size() < 2)
    return "--layers: expected at least two sizes (inputs and classes), found " +
           std::to_string(options.layers.size());
  for (int64_t size : options.layers)
    if (std::string e = checkDimension("layers", size, 1); !e.empty())
      return e;
  if (options.layers.back() < 2)
    return "--layers: the last size is the number of classes and must be at "
           "least 2";
  if (std::string e = checkDimension("batch", options.batch, 1); !e.empty())
    return e;
  for (int64_t size : options.layers)
    if (std::string e = checkElements("activation", {options.batch, size});
        !e.empty())
      return e;
  return checkTraining(options.training);
}

mlir::OwningOpRef<mlir::ModuleOp> buildMlp(mlir::MLIRContext *context,
                                           const MlpOptions &options) {
  if (std::string problem = checkOptions(options); !problem.empty())
    return rejectOptions(context, "mlp", problem);
  GraphBuilder g(context, "main", options.training.seed);
  const int64_t batch = options.batch;
  mlir::Value x = g.addInput("x", {batch, options.layers.front()}, g.f32());
  mlir::Value labels = g.addLabel("labels", {batch}, g.i32());

  mlir::Value h = x;
  for (size_t i = 1; i < options.layers.size(); ++i) {
    int64_t in = options.layers[i - 1], out = options.layers[i];
    std::string name = "fc" + std::to_string(i);
    double bound = pytorchBound(in);
    mlir::Value w = g.addParameter(name + ".weight", {in, out},
                                   kiln::InitKind::uniform, 0.0, bound);
    mlir::Value b = g.addParameter(name + ".bias", {out},
                                   kiln::InitKind::uniform, 0.0, bound);
    h = g.linear(name, h, w, b);
    if (i + 1 < options.layers.size())
      h = g.builder().create<kiln::ReluOp>(g.loc("relu" + std::to_string(i)), h);
  }
  mlir::Value loss = g.meanCrossEntropy("loss", h, labels);
  return g.finish(loss, trainingAttr(context, options.training));
}

//===----------------------------------------------------------------------===//
// LeNet-5
//===----------------------------------------------------------------------===//

std::string checkOptions(const LeNet5Options &options) {
  if (std::string e = checkDimension("batch", options.batch, 1); !e.empty())
    return e;
  if (std::string e = checkElements("conv1 output", {options.batch, 6, 28, 28});
      !e.empty())
    return e;
  return checkTraining(options.training);
}

mlir::OwningOpRef<mlir::ModuleOp> buildLeNet5(mlir::MLIRContext *context,
                                              const LeNet5Options &options) {
  if (std::string problem = checkOptions(options); !problem.empty())
    return rejectOptions(context, "lenet5", problem);
  GraphBuilder g(context, "main", options.training.seed);
  mlir::OpBuilder &b = g.builder();
  const int64_t batch = options.batch;
  mlir::Value x = g.addInput("x", {batch, 1, 28, 28}, g.f32());
  mlir::Value labels = g.addLabel("labels", {batch}, g.i32());

  // conv -> bias -> relu -> 2x2 max pool, as one LeNet stage.
  auto stage = [&](llvm::StringRef name, mlir::Value in, int64_t channelsIn,
                   int64_t channelsOut, int64_t pad, int index) {
    double bound = pytorchBound(channelsIn * 5 * 5);
    mlir::Value w =
        g.addParameter((name + ".weight").str(), {channelsOut, channelsIn, 5, 5},
                       kiln::InitKind::uniform, 0.0, bound);
    mlir::Value bias = g.addParameter((name + ".bias").str(), {channelsOut},
                                      kiln::InitKind::uniform, 0.0, bound);
    mlir::Value y = b.create<kiln::Conv2DOp>(
        g.loc(name), in, w, b.getDenseI64ArrayAttr({1, 1}),
        b.getDenseI64ArrayAttr({pad, pad, pad, pad}),
        b.getDenseI64ArrayAttr({1, 1}), b.getI64IntegerAttr(1));
    mlir::Value wide = g.broadcast(name + ".bias_broadcast", bias, {1},
                                   GraphBuilder::shapeOf(y));
    y = b.create<kiln::AddOp>(g.loc(name + ".bias_add"), y, wide);
    y = b.create<kiln::ReluOp>(g.loc("relu" + std::to_string(index)), y);
    return b.create<kiln::MaxPool2DOp>(
               g.loc("pool" + std::to_string(index)), y,
               b.getDenseI64ArrayAttr({2, 2}), b.getDenseI64ArrayAttr({2, 2}),
               b.getDenseI64ArrayAttr({0, 0, 0, 0}))
        .getResult();
  };
  mlir::Value h = stage("conv1", x, 1, 6, 2, 1);  // [B, 6, 14, 14]
  h = stage("conv2", h, 6, 16, 0, 2);             // [B, 16, 5, 5]
  h = g.reshape("flatten", h, {batch, 16 * 5 * 5});

  const int64_t sizes[] = {16 * 5 * 5, 120, 84, 10};
  for (int i = 1; i <= 3; ++i) {
    std::string name = "fc" + std::to_string(i);
    double bound = pytorchBound(sizes[i - 1]);
    mlir::Value w = g.addParameter(name + ".weight", {sizes[i - 1], sizes[i]},
                                   kiln::InitKind::uniform, 0.0, bound);
    mlir::Value bias = g.addParameter(name + ".bias", {sizes[i]},
                                      kiln::InitKind::uniform, 0.0, bound);
    h = g.linear(name, h, w, bias);
    if (i < 3)
      h = b.create<kiln::ReluOp>(g.loc("relu" + std::to_string(i + 2)), h);
  }
  mlir::Value loss = g.meanCrossEntropy("loss", h, labels);
  return g.finish(loss, trainingAttr(context, options.training));
}

//===----------------------------------------------------------------------===//
// ResNet
//===----------------------------------------------------------------------===//

std::string checkOptions(const ResNetOptions &options) {
  if (std::string e = checkDimension("blocks", options.blocks, 1); !e.empty())
    return e;
  if (std::string e = checkDimension("width", options.width, 1); !e.empty())
    return e;
  if (std::string e = checkDimension("batch", options.batch, 1); !e.empty())
    return e;
  if (std::string e =
          checkElements("stem output", {options.batch, options.width, 28, 28});
      !e.empty())
    return e;
  return checkTraining(options.training);
}

mlir::OwningOpRef<mlir::ModuleOp> buildResNet(mlir::MLIRContext *context,
                                              const ResNetOptions &options) {
  if (std::string problem = checkOptions(options); !problem.empty())
    return rejectOptions(context, "resnet", problem);
  GraphBuilder g(context, "main", options.training.seed);
  mlir::OpBuilder &b = g.builder();
  const int64_t batch = options.batch;
  mlir::Value x = g.addInput("x", {batch, 1, 28, 28}, g.f32());
  mlir::Value labels = g.addLabel("labels", {batch}, g.i32());

  // A bias-free k x k convolution, torchvision's initialization.
  auto conv = [&](const std::string &name, mlir::Value in, int64_t out,
                  int64_t k, int64_t stride) {
    int64_t channels = GraphBuilder::shapeOf(in)[1];
    mlir::Value w = g.addParameter(name + ".weight", {out, channels, k, k},
                                   kiln::InitKind::normal, 0.0,
                                   std::sqrt(2.0 / double(out * k * k)));
    int64_t pad = k / 2;
    return b.create<kiln::Conv2DOp>(g.loc(name), in, w,
                                    b.getDenseI64ArrayAttr({stride, stride}),
                                    b.getDenseI64ArrayAttr({pad, pad, pad, pad}),
                                    b.getDenseI64ArrayAttr({1, 1}),
                                    b.getI64IntegerAttr(1))
        .getResult();
  };
  // nn.BatchNorm2d(channels): scale ones, shift zeros, running statistics.
  auto norm = [&](const std::string &name, mlir::Value in) {
    int64_t channels = GraphBuilder::shapeOf(in)[1];
    mlir::Value scale =
        g.addParameter(name + ".weight", {channels}, kiln::InitKind::ones);
    mlir::Value shift =
        g.addParameter(name + ".bias", {channels}, kiln::InitKind::zeros);
    mlir::Value mean = g.addModelState(name + ".running_mean", {channels}, 0.0);
    mlir::Value var = g.addModelState(name + ".running_var", {channels}, 1.0);
    return g.batchNorm(name, in, scale, shift, mean, var, 1e-5, 0.1);
  };
  auto relu = [&](const std::string &name, mlir::Value in) {
    return b.create<kiln::ReluOp>(g.loc(name), in).getResult();
  };

  mlir::Value h = relu("relu", norm("bn1", conv("conv1", x, options.width, 3, 1)));
  for (int64_t stage = 0; stage < 3; ++stage) {
    int64_t channels = options.width << stage;
    for (int64_t block = 0; block < options.blocks; ++block) {
      std::string name =
          "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      mlir::Value y = relu(name + ".relu1",
                           norm(name + ".bn1", conv(name + ".conv1", h, channels, 3, stride)));
      y = norm(name + ".bn2", conv(name + ".conv2", y, channels, 3, 1));
      mlir::Value shortcut = h;
      if (stride != 1 || GraphBuilder::shapeOf(h)[1] != channels)
        shortcut = norm(name + ".downsample.1",
                        conv(name + ".downsample.0", h, channels, 1, stride));
      y = b.create<kiln::AddOp>(g.loc(name + ".residual"), y, shortcut);
      h = relu(name + ".relu2", y);
    }
  }
  // Global average pooling: [B, C, H, W] -> [B, C].
  int64_t channels = GraphBuilder::shapeOf(h)[1];
  h = b.create<kiln::ReduceOp>(
      g.loc("avgpool"), mlir::RankedTensorType::get({batch, channels}, g.f32()),
      kiln::ReduceKind::mean, h, b.getDenseI64ArrayAttr({2, 3}));
  double bound = pytorchBound(channels);
  mlir::Value w = g.addParameter("fc.weight", {channels, 10}, kiln::InitKind::uniform,
                                 0.0, bound);
  mlir::Value bias =
      g.addParameter("fc.bias", {10}, kiln::InitKind::uniform, 0.0, bound);
  h = g.linear("fc", h, w, bias);
  mlir::Value loss = g.meanCrossEntropy("loss", h, labels);
  return g.finish(loss, trainingAttr(context, options.training));
}

//===----------------------------------------------------------------------===//
// GPT
//===----------------------------------------------------------------------===//

std::string checkOptions(const GptOptions &options) {
  for (auto [flag, value, min] :
       {std::tuple<const char *, int64_t, int64_t>{"layers", options.layers, 1},
        {"hidden", options.hidden, 1},
        {"heads", options.heads, 1},
        {"seq", options.seq, 1},
        {"vocab", options.vocab, 2},
        {"batch", options.batch, 1}})
    if (std::string e = checkDimension(flag, value, min); !e.empty())
      return e;
  if (options.layers > 1024)
    return "--layers=" + std::to_string(options.layers) +
           ": expected at most 1024 blocks";
  if (options.hidden % options.heads != 0)
    return "--hidden=" + std::to_string(options.hidden) +
           ": expected a multiple of --heads=" + std::to_string(options.heads);
  if (!(options.dropout >= 0 && options.dropout < 1))
    return "--dropout=" + llvm::formatv("{0}", options.dropout).str() +
           ": expected a probability in [0, 1)";
  int64_t b = options.batch, t = options.seq, h = options.hidden;
  for (auto [what, dims] :
       {std::pair<const char *, llvm::SmallVector<int64_t>>{
            "attention score", {b, options.heads, t, t}},
        {"MLP activation", {b, t, 4, h}},
        {"logits", {b, t, options.vocab}},
        {"token embedding", {options.vocab, h}},
        {"MLP weight", {h, 4, h}}})
    if (std::string e = checkElements(what, dims); !e.empty())
      return e;
  return checkTraining(options.training);
}

mlir::OwningOpRef<mlir::ModuleOp> buildGpt(mlir::MLIRContext *context,
                                           const GptOptions &options) {
  if (std::string problem = checkOptions(options); !problem.empty())
    return rejectOptions(context, "gpt", problem);
  GraphBuilder g(context, "main", options.training.seed);
  mlir::OpBuilder &b = g.builder();
  const int64_t B = options.batch, T = options.seq, H = options.hidden,
                NH = options.heads, HD = H / NH, V = options.vocab,
                L = options.layers;
  auto arr = [&](llvm::ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  const double initStd = 0.02;
  const double residualStd = 0.02 / std::sqrt(2.0 * double(L));

  mlir::Value tokens = g.addInput("tokens", {B, T}, g.i32());
  mlir::Value targets = g.addLabel("targets", {B, T}, g.i32());
  mlir::Value wte =
      g.addParameter("wte.weight", {V, H}, kiln::InitKind::normal, 0.0, initStd);
  mlir::Value wpe =
      g.addParameter("wpe.weight", {T, H}, kiln::InitKind::normal, 0.0, initStd);

  // --dropout: each kiln.dropout reads the step counter (its masks change
  // every step) and has a seed of its own.
  mlir::Value step;
  int64_t dropoutSeed = 1000;
  auto dropout = [&](const std::string &name, mlir::Value v) -> mlir::Value {
    if (options.dropout == 0)
      return v;
    if (!step)
      step = g.addStepCounter("step");
    return b.create<kiln::DropoutOp>(g.loc(name), v.getType(), v, step,
                                     b.getF64FloatAttr(options.dropout),
                                     b.getI64IntegerAttr(dropoutSeed++))
        .getResult();
  };

  // Embeddings: x[b, t] = wte[tokens[b, t]] + wpe[t].
  mlir::Value x = b.create<kiln::GatherOp>(g.loc("wte"), wte, tokens);
  x = b.create<kiln::AddOp>(g.loc("embed_add"), x,
                            g.broadcast("wpe", wpe, {1, 2}, {B, T, H}));
  x = dropout("embed_dropout", x);

  // Shared by every block: the causal mask (key position <= query position),
  // the -inf fill and the 1/sqrt(head_dim) score scale.
  auto scoreType = GraphBuilder::tensor({B, NH, T, T}, g.f32());
  mlir::Value query = b.create<kiln::IotaOp>(
      g.loc("mask.query"), GraphBuilder::tensor({T, T}, g.i32()),
      b.getI64IntegerAttr(0));
  mlir::Value key = b.create<kiln::IotaOp>(
      g.loc("mask.key"), GraphBuilder::tensor({T, T}, g.i32()),
      b.getI64IntegerAttr(1));
  mlir::Value causal = b.create<kiln::CompareOp>(
      g.loc("mask"), kiln::CompareDirection::ge, query, key);
  causal = g.broadcast("mask.broadcast", causal, {2, 3}, {B, NH, T, T});
  mlir::Value negInf =
      g.splat("mask.fill", -std::numeric_limits<double>::infinity(), scoreType);
  mlir::Value scale = g.splat("attn.scale", 1.0 / std::sqrt(double(HD)), scoreType);

  auto layerNorm = [&](const std::string &name, mlir::Value in) {
    mlir::Value gamma =
        g.addParameter(name + ".weight", {H}, kiln::InitKind::ones);
    mlir::Value beta = g.addParameter(name + ".bias", {H}, kiln::InitKind::zeros);
    return b.create<kiln::LayerNormOp>(g.loc(name), in.getType(), in, gamma,
                                       beta, b.getI64IntegerAttr(2),
                                       b.getF64FloatAttr(1e-5))
        .getResult();
  };
  auto linear = [&](const std::string &name, mlir::Value in, int64_t inSize,
                    int64_t outSize, double weightStd) {
    mlir::Value w = g.addParameter(name + ".weight", {inSize, outSize},
                                   kiln::InitKind::normal, 0.0, weightStd);
    mlir::Value bias =
        g.addParameter(name + ".bias", {outSize}, kiln::InitKind::zeros);
    return g.linear(name, in, w, bias);
  };

  for (int64_t layer = 0; layer < L; ++layer) {
    std::string p = "blocks." + std::to_string(layer);

    // Causal multi-head self-attention on the normalized input.
    mlir::Value h = layerNorm(p + ".ln1", x);
    mlir::Value qkv = linear(p + ".attn.qkv", h, H, 3 * H, initStd);
    mlir::Value heads[3];
    const char *part[3] = {"q", "k", "v"};
    for (int j = 0; j < 3; ++j) {
      std::string name = p + ".attn." + part[j];
      mlir::Value s = b.create<kiln::SliceOp>(
          g.loc(name), qkv, arr({0, 0, j * H}), arr({B, T, (j + 1) * H}),
          arr({1, 1, 1}));
      s = g.reshape(name + ".split_heads", s, {B, T, NH, HD});
      heads[j] = b.create<kiln::TransposeOp>(g.loc(name + ".transpose"), s,
                                             arr({0, 2, 1, 3}));
    }
    mlir::Value scores = b.create<kiln::DotGeneralOp>(
        g.loc(p + ".attn.scores"), heads[0], heads[1], arr({0, 1}), arr({0, 1}),
        arr({3}), arr({3}));
    scores = b.create<kiln::MulOp>(g.loc(p + ".attn.scale"), scores, scale);
    scores = b.create<kiln::SelectOp>(g.loc(p + ".attn.mask"), causal, scores,
                                      negInf);
    mlir::Value probs = b.create<kiln::SoftmaxOp>(g.loc(p + ".attn.softmax"),
                                                  scores, b.getI64IntegerAttr(3));
    mlir::Value mixed = b.create<kiln::DotGeneralOp>(
        g.loc(p + ".attn.context"), probs, heads[2], arr({0, 1}), arr({0, 1}),
        arr({3}), arr({2}));
    mixed = b.create<kiln::TransposeOp>(g.loc(p + ".attn.merge_transpose"),
                                        mixed, arr({0, 2, 1, 3}));
    mixed = g.reshape(p + ".attn.merge_heads", mixed, {B, T, H});
    mlir::Value attn = linear(p + ".attn.proj", mixed, H, H, residualStd);
    attn = dropout(p + ".attn.dropout", attn);
    x = b.create<kiln::AddOp>(g.loc(p + ".attn.residual"), x, attn);

    // GELU MLP, 4x wide.
    h = layerNorm(p + ".ln2", x);
    h = linear(p + ".mlp.fc", h, H, 4 * H, initStd);
    h = b.create<kiln::GeluOp>(g.loc(p + ".mlp.gelu"),
                               kiln::GeluApproximation::tanh, h);
    h = linear(p + ".mlp.proj", h, 4 * H, H, residualStd);
    h = dropout(p + ".mlp.dropout", h);
    x = b.create<kiln::AddOp>(g.loc(p + ".mlp.residual"), x, h);
  }

  x = layerNorm("ln_f", x);
  // Tied output projection: logits[b, t, v] = sum_h x[b, t, h] * wte[v, h].
  mlir::Value logits = b.create<kiln::DotGeneralOp>(
      g.loc("logits"), x, wte, arr({}), arr({}), arr({2}), arr({1}));
  logits = g.reshape("logits.flatten", logits, {B * T, V});
  mlir::Value flatTargets = g.reshape("targets.flatten", targets, {B * T});
  mlir::Value loss = g.meanCrossEntropy("loss", logits, flatTargets);
  return g.finish(loss, trainingAttr(context, options.training));
}

} // namespace kiln::cli
