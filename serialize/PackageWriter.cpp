//===- PackageWriter.cpp - write a .kpkg package
//---------------------------===//
//
// A straight walk over the structs into a FlatBufferBuilder. Optional tables
// (gemm, conv, attention and collective parameters, inline parameter data) are written
// only when the struct says they are present, so a round trip through the
// loader gives back an equal LoadedPackage.
//
//===----------------------------------------------------------------------===//

#include "serialize/PackageWriter.h"

#include "serialize/schema/package_generated.h"

#include <cstdio>
#include <fstream>

namespace kiln::serialize {

using namespace kiln::runtime;
namespace fbs = kiln::pkg;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

template <typename E, typename F> E toFbs(F value) {
  return static_cast<E>(static_cast<uint8_t>(value));
}

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>>
writeStrings(FlatBufferBuilder &b, const std::vector<std::string> &strings) {
  std::vector<Offset<flatbuffers::String>> offsets;
  for (const std::string &s : strings)
    offsets.push_back(b.CreateString(s));
  return b.CreateVector(offsets);
}

Offset<fbs::SignatureEntry> writeEntry(FlatBufferBuilder &b,
                                       const SignatureEntry &e) {
  auto name = b.CreateString(e.name);
  auto shape = b.CreateVector(e.shape);
  return fbs::CreateSignatureEntry(b, name, toFbs<fbs::Role>(e.role),
                                   toFbs<fbs::DType>(e.dtype), shape, e.buffer,
                                   e.copyOf, e.indexBound);
}

Offset<fbs::Kernel> writeKernel(FlatBufferBuilder &b, const PackageKernel &k) {
  auto name = b.CreateString(k.name);
  auto entry = b.CreateString(k.entryPoint);
  auto source = b.CreateString(k.source);
  auto ptx = b.CreateString(k.ptx);
  std::vector<Offset<fbs::CubinImage>> cubins;
  for (const Cubin &c : k.cubins)
    cubins.push_back(fbs::CreateCubinImage(b, c.arch, b.CreateVector(c.image)));
  auto cubinVec = b.CreateVector(cubins);
  auto object = b.CreateVector(k.object);
  auto nodes = writeStrings(b, k.sourceNodes);
  fbs::Dim3 block(k.block[0], k.block[1], k.block[2]);
  fbs::Dim3 grid(k.grid[0], k.grid[1], k.grid[2]);
  return fbs::CreateKernel(b, toFbs<fbs::KernelKind>(k.kind), name, entry,
                           source, ptx, cubinVec, object, &block, &grid,
                           k.sharedMemoryBytes, nodes, k.serialSteps,
                           k.serialThreads, k.readBytes,
                           k.programmaticLaunch);
}

Offset<fbs::Thunk> writeThunk(FlatBufferBuilder &b, const PackageThunk &t) {
  Offset<fbs::GemmParams> gemm;
  if (t.hasGemm)
    gemm = fbs::CreateGemmParams(b, t.gemm.m, t.gemm.n, t.gemm.k, t.gemm.batch,
                                 t.gemm.transposeLhs, t.gemm.transposeRhs,
                                 t.gemm.alpha, t.gemm.beta,
                                 toFbs<fbs::GemmEpilogue>(t.gemm.epilogue));
  Offset<fbs::ConvParams> conv;
  if (t.hasConv) {
    const ConvParams &c = t.conv;
    conv = fbs::CreateConvParams(
        b, b.CreateVector(c.inputShape), b.CreateVector(c.filterShape),
        b.CreateVector(c.outputShape), b.CreateVector(c.strides),
        b.CreateVector(c.padding), b.CreateVector(c.dilation), c.groups);
  }
  Offset<fbs::CollectiveParams> collective;
  if (t.hasCollective) {
    const CollectiveParams &c = t.collective;
    collective = fbs::CreateCollectiveParams(
        b, toFbs<fbs::CollectiveKind>(c.kind),
        toFbs<fbs::ReduceKind>(c.reduction), c.dimension, c.root, c.peer,
        c.channel, b.CreateVector(c.groups), b.CreateVector(c.groupsShape));
  }
  Offset<fbs::AttentionParams> attention;
  if (t.hasAttention) {
    const AttentionParams &a = t.attention;
    attention = fbs::CreateAttentionParams(b, a.batch, a.heads, a.qLen,
                                           a.kvLen, a.headDim, a.valueDim,
                                           a.scale, a.causal,
                                           toFbs<fbs::AttentionLayout>(a.layout));
  }
  auto operands = b.CreateVector(t.operands);
  auto results = b.CreateVector(t.results);
  return fbs::CreateThunk(b, toFbs<fbs::ThunkKind>(t.kind), t.kernel,
                          toFbs<fbs::LibraryKind>(t.library), gemm, conv,
                          collective, operands, results, attention);
}

} // namespace

StatusOr<std::vector<uint8_t>> writePackage(const LoadedPackage &p) {
  if (Status s = checkPackage(p); !s.isOk())
    return Status::error("refusing to write an invalid package: " +
                         s.message());
  return writePackageUnchecked(p);
}

std::vector<uint8_t> writePackageUnchecked(const LoadedPackage &p) {
  FlatBufferBuilder b;

  auto target = fbs::CreateTarget(b, toFbs<fbs::TargetKind>(p.target.kind),
                                  b.CreateVector(p.target.smArchs),
                                  b.CreateString(p.target.triple),
                                  b.CreateString(p.target.cpuFeatures));
  auto arena = fbs::CreateArena(b, p.arenaSize, p.arenaAlignment);

  std::vector<Offset<fbs::Buffer>> buffers;
  for (const PackageBuffer &buf : p.buffers) {
    auto name = b.CreateString(buf.name);
    auto shape = b.CreateVector(buf.shape);
    buffers.push_back(fbs::CreateBuffer(
        b, name, toFbs<fbs::DType>(buf.dtype), shape, buf.offset, buf.size,
        toFbs<fbs::Role>(buf.role), buf.aliases, buf.updates));
  }
  auto bufferVec = b.CreateVector(buffers);

  std::vector<Offset<fbs::Kernel>> kernels;
  for (const PackageKernel &k : p.kernels)
    kernels.push_back(writeKernel(b, k));
  auto kernelVec = b.CreateVector(kernels);

  std::vector<Offset<fbs::Thunk>> thunks;
  for (const PackageThunk &t : p.thunks)
    thunks.push_back(writeThunk(b, t));
  auto thunkVec = b.CreateVector(thunks);

  std::vector<Offset<fbs::ParameterInit>> inits;
  for (const ParameterInit &i : p.parameterInits) {
    Offset<flatbuffers::Vector<uint8_t>> data;
    if (i.hasData)
      data = b.CreateVector(i.data);
    inits.push_back(fbs::CreateParameterInit(b, i.buffer,
                                             toFbs<fbs::InitKind>(i.kind),
                                             i.value, i.scale, i.seed, data));
  }
  auto initVec = b.CreateVector(inits);

  std::vector<Offset<fbs::SignatureEntry>> inputs, outputs;
  for (const SignatureEntry &e : p.inputs)
    inputs.push_back(writeEntry(b, e));
  for (const SignatureEntry &e : p.outputs)
    outputs.push_back(writeEntry(b, e));
  auto signature =
      fbs::CreateSignature(b, b.CreateVector(inputs), b.CreateVector(outputs));

  const PackageMetadata &m = p.metadata;
  Offset<flatbuffers::Vector<Offset<fbs::ShardLayout>>> shardVec;
  if (!m.shards.empty()) {
    std::vector<Offset<fbs::ShardLayout>> shards;
    for (const ShardLayout &layout : m.shards) {
      std::vector<Offset<fbs::ShardSlot>> slots;
      for (const ShardSlot &slot : layout.slots) {
        const ParameterInit &i = slot.init;
        auto init = fbs::CreateParameterInit(
            b, 0, toFbs<fbs::InitKind>(i.kind), i.value, i.scale, i.seed);
        slots.push_back(fbs::CreateShardSlot(b, b.CreateString(slot.name),
                                             slot.offset,
                                             b.CreateVector(slot.shape), init));
      }
      shards.push_back(fbs::CreateShardLayout(
          b, b.CreateString(layout.name), layout.length, layout.worldSize,
          b.CreateVector(slots)));
    }
    shardVec = b.CreateVector(shards);
  }
  auto metadata = fbs::CreateMetadata(
      b, b.CreateString(m.modelName), toFbs<fbs::Strategy>(m.strategy),
      m.worldSize, writeStrings(b, m.compileFlags),
      b.CreateVector(m.graphHash), shardVec);

  fbs::Version version(p.majorVersion, p.minorVersion);
  auto root =
      fbs::CreatePackage(b, &version, target, arena, bufferVec, kernelVec,
                         thunkVec, initVec, signature, metadata);
  fbs::FinishPackageBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(),
                              b.GetBufferPointer() + b.GetSize());
}

Status writePackageFile(const LoadedPackage &package, const std::string &path) {
  StatusOr<std::vector<uint8_t>> bytes = writePackage(package);
  if (!bytes.isOk())
    return Status::error(path + ": " + bytes.status().message());
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::error(temp + ": cannot open for writing");
    out.write(reinterpret_cast<const char *>(bytes->data()),
              static_cast<std::streamsize>(bytes->size()));
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      return Status::error(temp + ": write failed (disk full?)");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return Status::error(path + ": rename from " + temp + " failed");
  }
  return Status::ok();
}

} // namespace kiln::serialize
