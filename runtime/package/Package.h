//===- Package.h - the .kpkg package as plain C++ ---------------*- C++ -*-===//
//
// The runtime's view of an executable package (serialize/schema/package.fbs):
// plain structs and vectors, copied out of the FlatBuffer once it has been
// verified, so nothing past the loader touches unchecked bytes. The loader
// runs the FlatBuffers Verifier first and then every semantic check (version,
// enums, every index, every offset and size against the arena, dtype and
// shape against byte sizes); the first failure comes back as a Status that
// names the field and its index. The compiler builds the same structs and
// hands them to serialize/PackageWriter.h.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PACKAGE_PACKAGE_H
#define KILN_RUNTIME_PACKAGE_PACKAGE_H

#include "runtime/Status.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

// The version this reader understands (package.fbs's compatibility rule).
constexpr uint16_t kPackageMajorVersion = 1;
constexpr uint16_t kPackageMinorVersion = 7;

// Enum values equal package.fbs's.
enum class PkgDType : uint8_t { F64, F32, F16, BF16, I64, I32, I8, I1 };
enum class PkgRole : uint8_t {
  None,
  Input,
  Label,
  Parameter,
  OptimizerState,
  Step,
  Loss,
  Output,
  Gradient,
  // A lower-precision copy of a parameter the step reads instead of
  // converting the parameter (kiln-parameter-copies); never checkpointed,
  // filled from the parameter whenever the runtime sets it.
  ParameterCopy,
  // State of the model that no gradient trains, updated by the step (a batch
  // norm's running statistics); initialized, checkpointed and restored with
  // the parameters.
  ModelState
};
enum class TargetKind : uint8_t { Cpu, Cuda };
enum class KernelKind : uint8_t { CpuObject, LlvmBitcode, Cuda };
enum class ThunkKind : uint8_t { KernelLaunch, LibraryCall, Collective, Copy };
enum class LibraryKind : uint8_t {
  Gemm,
  Conv2D,
  Conv2DInputGrad,
  Conv2DFilterGrad,
  Attention,
  AttentionGrad
};
enum class CollectiveKind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Send,
  Recv
};
enum class PkgReduceKind : uint8_t { Sum, Max, Min, Mean };
enum class PkgInitKind : uint8_t {
  Zeros,
  Ones,
  Constant,
  Normal,
  Uniform,
  GlorotUniform,
  KaimingNormal
};
enum class Strategy : uint8_t {
  None,
  Mirrored,
  DataParallel,
  Zero1,
  Zero2,
  Zero3,
  ParameterServer,
  Pipeline,
  TensorParallel
};

// Bytes per element of |dtype| (i1 is one byte). Inline, so libraries that
// use only the enums (the communicator) need not link the loader.
inline unsigned pkgBytesPerElement(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F64:
  case PkgDType::I64:
    return 8;
  case PkgDType::F32:
  case PkgDType::I32:
    return 4;
  case PkgDType::F16:
  case PkgDType::BF16:
    return 2;
  case PkgDType::I8:
  case PkgDType::I1:
    return 1;
  }
  return 0;
}

// The elements of |shape|, or nullopt when a dimension is negative or the
// product overflows 64 bits; pkgShapeBytes: the bytes it takes in |dtype|.
// Everything that sizes a buffer from dimensions a package states (a
// library call's parameters) goes through these, so a corrupted dimension
// cannot wrap around to a small size.
inline std::optional<uint64_t> pkgElementCount(const std::vector<int64_t> &shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      return std::nullopt;
  return n;
}
inline std::optional<uint64_t> pkgShapeBytes(PkgDType dtype,
                                             const std::vector<int64_t> &shape) {
  std::optional<uint64_t> n = pkgElementCount(shape);
  uint64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, uint64_t(pkgBytesPerElement(dtype)), &bytes))
    return std::nullopt;
  return bytes;
}

// The element type's name as the IR spells it (f32, bf16, i1, ...).
inline const char *pkgDTypeName(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F64: return "f64";
  case PkgDType::F32: return "f32";
  case PkgDType::F16: return "f16";
  case PkgDType::BF16: return "bf16";
  case PkgDType::I64: return "i64";
  case PkgDType::I32: return "i32";
  case PkgDType::I8: return "i8";
  case PkgDType::I1: return "i1";
  }
  return "unknown";
}

struct PackageTarget {
  TargetKind kind = TargetKind::Cpu;
  std::vector<uint32_t> smArchs;
  std::string triple;
  std::string cpuFeatures;
  bool operator==(const PackageTarget &o) const {
    return kind == o.kind && smArchs == o.smArchs && triple == o.triple &&
           cpuFeatures == o.cpuFeatures;
  }
};

struct PackageBuffer {
  std::string name;
  PkgDType dtype = PkgDType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t size = 0;
  PkgRole role = PkgRole::None;
  int32_t aliases = -1; // index into signature inputs, or -1
  int32_t updates = -1; // index into signature inputs, or -1
  bool operator==(const PackageBuffer &o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape &&
           offset == o.offset && size == o.size && role == o.role &&
           aliases == o.aliases && updates == o.updates;
  }
};

struct Cubin {
  uint32_t arch = 0;
  std::vector<uint8_t> image;
  bool operator==(const Cubin &o) const {
    return arch == o.arch && image == o.image;
  }
};

struct PackageKernel {
  KernelKind kind = KernelKind::CpuObject;
  std::string name;
  std::string entryPoint;
  std::string source;
  std::string ptx;
  std::vector<Cubin> cubins;
  std::vector<uint8_t> object;
  std::array<uint32_t, 3> block = {1, 1, 1};
  std::array<uint32_t, 3> grid = {1, 1, 1};
  uint32_t sharedMemoryBytes = 0;
  std::vector<std::string> sourceNodes;
  // Since 1.2, for cost estimates (kiln inspect --roofline): the longest
  // chain of element loads one thread performs in order (a column
  // reduction's rows), and how many threads perform such chains; 0 none.
  uint64_t serialSteps = 0, serialThreads = 0;
  // Since 1.3, for cost estimates: the bytes it reads from its operands
  // when less than their sizes (a gather's table rows); 0: all of them.
  uint64_t readBytes = 0;
  // Since 1.5: its code for sm_90 and newer waits for the previous kernel
  // on the stream before touching global memory (griddepcontrol.wait), so
  // it may be launched with programmatic stream serialization.
  bool programmaticLaunch = false;
  bool operator==(const PackageKernel &o) const {
    return kind == o.kind && name == o.name && entryPoint == o.entryPoint &&
           source == o.source && ptx == o.ptx && cubins == o.cubins &&
           object == o.object && block == o.block && grid == o.grid &&
           sharedMemoryBytes == o.sharedMemoryBytes &&
           sourceNodes == o.sourceNodes && serialSteps == o.serialSteps &&
           serialThreads == o.serialThreads && readBytes == o.readBytes &&
           programmaticLaunch == o.programmaticLaunch;
  }
};

// A CUDA GEMM's cuBLASLt epilogue (package.fbs GemmEpilogue): Bias*
// read the thunk's operand 2 ([n]), BiasGradient writes its result 1 ([n],
// the sum over k of the rhs). Since 1.1: Residual and BiasResidual read
// their last operand C (the result's dtype and [batch, m, n] shape) and
// compute result = alpha * op(lhs) x op(rhs) + beta * C (+ bias);
// GeluAux and BiasGeluAux also write result 1, aux (the result's dtype and
// shape), the pre-activation: aux = op(lhs) x op(rhs) (+ bias), result =
// gelu(aux). Since 1.1 too: DGelu reads operand 2, aux (the result's
// dtype and shape, the forward's pre-activation), and computes result =
// op(lhs) x op(rhs) * gelu'(aux) (tanh approximation). CPU packages have
// none.
enum class PkgGemmEpilogue : uint8_t {
  None,
  Bias,
  Relu,
  BiasRelu,
  Gelu,
  BiasGelu,
  BiasGradient,
  Residual,
  BiasResidual,
  GeluAux,
  BiasGeluAux,
  DGelu
};
const char *pkgGemmEpilogueName(PkgGemmEpilogue epilogue);
// A collective's name as the IR spells its op (all_reduce, reduce_scatter,
// all_gather, collective_broadcast, send, recv).
const char *pkgCollectiveKindName(CollectiveKind kind);

// What a Gemm thunk with |epilogue| has besides lhs, rhs and the result:
// a bias operand (operand 2), a C operand (the last one), an aux operand
// (operand 2, DGelu), a bias-gradient result or an aux result (result 1).
struct PkgGemmEpilogueBuffers {
  bool bias = false, c = false, auxInput = false, biasGradient = false,
       aux = false;
  size_t operands() const { return 2 + bias + c + auxInput; }
  size_t results() const { return 1 + biasGradient + aux; }
};
PkgGemmEpilogueBuffers pkgGemmEpilogueBuffers(PkgGemmEpilogue epilogue);

struct GemmParams {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool transposeLhs = false, transposeRhs = false;
  double alpha = 1.0, beta = 0.0;
  PkgGemmEpilogue epilogue = PkgGemmEpilogue::None;
  bool operator==(const GemmParams &o) const {
    return m == o.m && n == o.n && k == o.k && batch == o.batch &&
           transposeLhs == o.transposeLhs && transposeRhs == o.transposeRhs &&
           alpha == o.alpha && beta == o.beta && epilogue == o.epilogue;
  }
};

struct ConvParams {
  std::vector<int64_t> inputShape, filterShape, outputShape;
  std::vector<int64_t> strides, padding, dilation;
  int64_t groups = 1;
  bool operator==(const ConvParams &o) const {
    return inputShape == o.inputShape && filterShape == o.filterShape &&
           outputShape == o.outputShape && strides == o.strides &&
           padding == o.padding && dilation == o.dilation && groups == o.groups;
  }
};

// Whether a convolution's shapes agree: input [N, C, H, W], filter
// [K, C / groups, R, S], output [N, K, P, Q] with P = (H + padding top +
// bottom - dilation (R - 1) - 1) / stride + 1 (Q alike), strides and
// dilation positive, padding non-negative, groups dividing C and K.
// Computed in 128 bits, so no dimension can wrap the arithmetic. The one
// rule for checkPackage, both runtimes and the package builder; the
// message names the field ("output shape must be [1, 2, 3, 2], but is
// [1, 2, 2, 2]"), the caller says which call.
Status pkgCheckConvParams(const ConvParams &params);

// "gemm", "conv2d", "conv2d_input_grad", "conv2d_filter_grad",
// "attention", "attention_grad".
const char *pkgLibraryKindName(LibraryKind kind);

// How an attention thunk's tensors are laid out (package.fbs
// AttentionLayout, since 1.2). BHTD: operands q [B,H,Tq,D], k [B,H,Tk,D],
// v [B,H,Tk,Dv] (grad: then out, lse, dout), results out [B,H,Tq,Dv] and lse
// [B,H,Tq] (grad: dq, dk, dv shaped as q, k, v). PackedBTHD (D == Dv,
// Tq == Tk = T): operands qkv [B,T,3,H,D] (grad: then out, lse, dout, with
// out and dout [B,T,H,D]), results out [B,T,H,D] and lse [B,H,T] (grad: one
// dqkv [B,T,3,H,D]).
enum class AttentionLayout : uint8_t { BHTD, PackedBTHD };
const char *attentionLayoutName(AttentionLayout layout);

// package.fbs AttentionParams.
struct AttentionParams {
  int64_t batch = 0, heads = 0, qLen = 0, kvLen = 0, headDim = 0, valueDim = 0;
  double scale = 1.0;
  bool causal = false;
  AttentionLayout layout = AttentionLayout::BHTD;
  bool operator==(const AttentionParams &o) const {
    return batch == o.batch && heads == o.heads && qLen == o.qLen &&
           kvLen == o.kvLen && headDim == o.headDim && valueDim == o.valueDim &&
           scale == o.scale && causal == o.causal && layout == o.layout;
  }
};

struct CollectiveParams {
  CollectiveKind kind = CollectiveKind::AllReduce;
  PkgReduceKind reduction = PkgReduceKind::Sum;
  int64_t dimension = 0, root = 0, peer = 0, channel = 0;
  std::vector<int64_t> groups, groupsShape;
  bool operator==(const CollectiveParams &o) const {
    return kind == o.kind && reduction == o.reduction &&
           dimension == o.dimension && root == o.root && peer == o.peer &&
           channel == o.channel && groups == o.groups &&
           groupsShape == o.groupsShape;
  }
};

struct PackageThunk {
  ThunkKind kind = ThunkKind::KernelLaunch;
  int32_t kernel = -1;
  LibraryKind library = LibraryKind::Gemm;
  // Exactly the table the kind needs is present (has* says so).
  bool hasGemm = false, hasConv = false, hasCollective = false,
       hasAttention = false;
  GemmParams gemm;
  ConvParams conv;
  AttentionParams attention;
  CollectiveParams collective;
  std::vector<uint32_t> operands;
  std::vector<uint32_t> results;
  bool operator==(const PackageThunk &o) const {
    return kind == o.kind && kernel == o.kernel && library == o.library &&
           hasGemm == o.hasGemm && hasConv == o.hasConv &&
           hasCollective == o.hasCollective &&
           hasAttention == o.hasAttention && gemm == o.gemm &&
           conv == o.conv && attention == o.attention &&
           collective == o.collective &&
           operands == o.operands && results == o.results;
  }
};

struct ParameterInit {
  uint32_t buffer = 0;
  PkgInitKind kind = PkgInitKind::Zeros;
  double value = 0.0;
  double scale = 1.0;
  int64_t seed = 0;
  bool hasData = false;
  std::vector<uint8_t> data;
  bool operator==(const ParameterInit &o) const {
    return buffer == o.buffer && kind == o.kind && value == o.value &&
           scale == o.scale && seed == o.seed && hasData == o.hasData &&
           data == o.data;
  }
};

struct SignatureEntry {
  std::string name;
  PkgRole role = PkgRole::None;
  PkgDType dtype = PkgDType::F32;
  std::vector<int64_t> shape;
  uint32_t buffer = 0;
  // A ParameterCopy input: the index of the input it copies; else -1.
  int32_t copyOf = -1;
  // Since 1.6, an integer Input or Label: the model reads it as indices
  // below this bound (kiln.index_bound), so data outside [0, indexBound) is
  // refused; 0 when unknown.
  int64_t indexBound = 0;
  bool operator==(const SignatureEntry &o) const {
    return name == o.name && role == o.role && dtype == o.dtype &&
           shape == o.shape && buffer == o.buffer && copyOf == o.copyOf &&
           indexBound == o.indexBound;
  }
};

// Whether |dtype| is a floating-point type.
inline bool isFloatDType(PkgDType dtype) {
  return dtype == PkgDType::F64 || dtype == PkgDType::F32 ||
         dtype == PkgDType::F16 || dtype == PkgDType::BF16;
}

// The index of the entry named |name| in a signature (inputs or outputs),
// or -1.
inline int findSignatureEntry(const std::vector<SignatureEntry> &entries,
                              const std::string &name) {
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].name == name)
      return static_cast<int>(i);
  return -1;
}

// ZeRO: one parameter of a sharded bucket (package.fbs ShardSlot).
struct ShardSlot {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  ParameterInit init; // buffer unused
  bool operator==(const ShardSlot &o) const {
    return name == o.name && offset == o.offset && shape == o.shape &&
           init == o.init;
  }
};

// ZeRO: the sharded input |name| (package.fbs ShardLayout): block |rank| of
// the flat bucket of |slots|, |length| elements padded to a multiple of
// |worldSize|.
struct ShardLayout {
  std::string name;
  int64_t length = 0;
  uint32_t worldSize = 1;
  std::vector<ShardSlot> slots;
  int64_t shardLength() const {
    return (length + worldSize - 1) / worldSize;
  }
  bool operator==(const ShardLayout &o) const {
    return name == o.name && length == o.length && worldSize == o.worldSize &&
           slots == o.slots;
  }
};

struct PackageMetadata {
  std::string modelName;
  Strategy strategy = Strategy::None;
  uint32_t worldSize = 1;
  std::vector<std::string> compileFlags;
  std::vector<uint8_t> graphHash;
  std::vector<ShardLayout> shards;
  bool operator==(const PackageMetadata &o) const {
    return modelName == o.modelName && strategy == o.strategy &&
           worldSize == o.worldSize && compileFlags == o.compileFlags &&
           graphHash == o.graphHash && shards == o.shards;
  }
};

struct LoadedPackage {
  uint16_t majorVersion = kPackageMajorVersion;
  uint16_t minorVersion = kPackageMinorVersion;
  PackageTarget target;
  uint64_t arenaSize = 0;
  uint64_t arenaAlignment = 64;
  std::vector<PackageBuffer> buffers;
  std::vector<PackageKernel> kernels;
  std::vector<PackageThunk> thunks;
  std::vector<ParameterInit> parameterInits;
  std::vector<SignatureEntry> inputs;
  std::vector<SignatureEntry> outputs;
  PackageMetadata metadata;
  bool operator==(const LoadedPackage &o) const {
    return majorVersion == o.majorVersion && minorVersion == o.minorVersion &&
           target == o.target && arenaSize == o.arenaSize &&
           arenaAlignment == o.arenaAlignment && buffers == o.buffers &&
           kernels == o.kernels && thunks == o.thunks &&
           parameterInits == o.parameterInits && inputs == o.inputs &&
           outputs == o.outputs && metadata == o.metadata;
  }
};

// An output that updates an input (its buffer's `updates`) but was planned
// in another buffer: after every step the runtime copies its bytes over
// that input's. checkPackage has checked that both have one dtype and shape.
struct PkgUpdateCopy {
  uint32_t output = 0; // index into the signature outputs
  uint32_t from = 0, to = 0; // buffer ids
  uint64_t bytes = 0;
};
std::vector<PkgUpdateCopy> pkgUpdateCopies(const LoadedPackage &package);

// The ParameterCopy inputs that copy input |parameter| (SignatureEntry::
// copyOf), in signature order.
std::vector<size_t> pkgParameterCopiesOf(const LoadedPackage &package,
                                         size_t parameter);

// Fills ParameterCopy input |copy| of |package| from the parameter it copies:
// |parameter| holds that parameter's elements (in its dtype), |out| receives
// the copy's, each converted as the step's convert would (through f32, then
// rounded to nearest even). checkPackage has checked both dtypes are floats.
void pkgFillParameterCopy(const LoadedPackage &package, size_t copy,
                          const void *parameter, void *out);

// Reads and checks the package at |path|; errors start with the path.
StatusOr<LoadedPackage> loadPackage(const std::string &path);

// Checks and copies out the package in |data|..|data|+|size|.
StatusOr<LoadedPackage> loadPackageFromBytes(const uint8_t *data, size_t size);

// The semantic checks alone, on an already copied-out package (the writer
// runs them too, so a compiler bug is caught before a file is written).
Status checkPackage(const LoadedPackage &package);

// What thunk |index| of |p| runs, for messages and profiles: its kind
// ("kernel", "gemm", a library call's or a collective's name, "copy") and
// that with its details ("kernel 'fusion7', kiln_fusion7", "gemm m=64 n=32
// k=16 batch=1", "all_reduce", ...).
const char *pkgThunkKindName(const LoadedPackage &p, size_t index);
std::string pkgDescribeThunk(const LoadedPackage &p, size_t index);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_PACKAGE_PACKAGE_H
