//===- PackageTestUtil.h - a package with every field set -------*- C++ -*-===//
//
// The package the tests start from: every table and field holds a value
// other than its default, so a field the writer or loader drops shows up as
// a round-trip difference.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_PACKAGE_PACKAGETESTUTIL_H
#define KILN_TESTS_UNIT_PACKAGE_PACKAGETESTUTIL_H

#include "runtime/package/Package.h"

namespace kiln::runtime::testing {

inline PackageBuffer makeBuffer(std::string name, std::vector<int64_t> shape,
                                uint64_t offset, uint64_t size, PkgRole role,
                                int32_t aliases = -1, int32_t updates = -1) {
  PackageBuffer b;
  b.name = std::move(name);
  b.dtype = PkgDType::F32;
  b.shape = std::move(shape);
  b.offset = offset;
  b.size = size;
  b.role = role;
  b.aliases = aliases;
  b.updates = updates;
  return b;
}

inline SignatureEntry makeEntry(std::string name, PkgRole role,
                                std::vector<int64_t> shape, uint32_t buffer) {
  SignatureEntry e;
  e.name = std::move(name);
  e.role = role;
  e.dtype = PkgDType::F32;
  e.shape = std::move(shape);
  e.buffer = buffer;
  return e;
}

// Buffers: 0 x, 1 fc.weight, 2 fc.weight (new), 3 y, 4 loss, 5 a copy of 1,
// 6-10 an attention's q, k, v, out and lse. Thunks: 0 gemm, 1 launch,
// 2 collective, 3 copy, 4 conv, 5 attention.
inline LoadedPackage makeSamplePackage() {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = {80, 90};
  p.target.triple = "x86_64-unknown-linux-gnu";
  p.target.cpuFeatures = "+avx2,+fma";
  p.arenaSize = 1024;
  p.arenaAlignment = 64;
  p.buffers = {
      makeBuffer("x", {4, 8}, 0, 128, PkgRole::Input, 0),
      makeBuffer("fc.weight", {8, 2}, 128, 64, PkgRole::Parameter, 1),
      makeBuffer("fc.weight.next", {8, 2}, 192, 64, PkgRole::Parameter, -1, 1),
      makeBuffer("y", {4, 2}, 256, 32, PkgRole::None),
      makeBuffer("loss", {}, 320, 4, PkgRole::Loss),
      makeBuffer("fc.weight.copy", {8, 2}, 384, 64, PkgRole::None),
      makeBuffer("q", {1, 2, 3, 4}, 448, 96, PkgRole::None),
      makeBuffer("k", {1, 2, 5, 4}, 576, 160, PkgRole::None),
      makeBuffer("v", {1, 2, 5, 2}, 768, 80, PkgRole::None),
      makeBuffer("out", {1, 2, 3, 2}, 896, 48, PkgRole::None),
      makeBuffer("lse", {1, 2, 3}, 960, 24, PkgRole::None),
  };
  p.buffers[4].dtype = PkgDType::F32;
  p.buffers[3].dtype = PkgDType::BF16;

  PackageKernel cpu;
  cpu.kind = KernelKind::CpuObject;
  cpu.name = "fusion_0";
  cpu.entryPoint = "kiln_fusion_0";
  cpu.source = "func.func @fusion_0() { return }";
  cpu.object = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  cpu.block = {8, 1, 1};
  cpu.grid = {2, 3, 1};
  cpu.sourceNodes = {"relu_1", "add_2"};
  PackageKernel cuda;
  cuda.kind = KernelKind::Cuda;
  cuda.name = "fusion_1";
  cuda.entryPoint = "kiln_fusion_1";
  cuda.source = "extern \"C\" __global__ void kiln_fusion_1() {}";
  cuda.ptx = ".version 8.0\n.target sm_80\n";
  cuda.cubins = {{80, {1, 2, 3}}, {90, {4, 5, 6, 7}}};
  cuda.block = {128, 1, 1};
  cuda.grid = {4, 2, 1};
  cuda.sharedMemoryBytes = 1024;
  cuda.serialSteps = 128;
  cuda.serialThreads = 768;
  cuda.readBytes = 4096;
  cuda.programmaticLaunch = true;
  cuda.sourceNodes = {"softmax_cross_entropy_3"};
  p.kernels = {cpu, cuda};

  PackageThunk gemm;
  gemm.kind = ThunkKind::LibraryCall;
  gemm.library = LibraryKind::Gemm;
  gemm.hasGemm = true;
  gemm.gemm = {4, 2, 8, 3, true, true, 0.5, 1.0};
  gemm.operands = {0, 1};
  gemm.results = {3};
  PackageThunk launch;
  launch.kind = ThunkKind::KernelLaunch;
  launch.kernel = 1;
  launch.operands = {3};
  launch.results = {4};
  PackageThunk collective;
  collective.kind = ThunkKind::Collective;
  collective.hasCollective = true;
  collective.collective.kind = CollectiveKind::ReduceScatter;
  collective.collective.reduction = PkgReduceKind::Mean;
  collective.collective.dimension = 1;
  collective.collective.root = 2;
  collective.collective.peer = 3;
  collective.collective.channel = 4;
  collective.collective.groups = {0, 1, 2, 3};
  collective.collective.groupsShape = {2, 2};
  collective.operands = {1};
  collective.results = {2};
  PackageThunk copy;
  copy.kind = ThunkKind::Copy;
  copy.operands = {1};
  copy.results = {5};
  PackageThunk conv;
  conv.kind = ThunkKind::LibraryCall;
  conv.library = LibraryKind::Conv2DFilterGrad;
  conv.hasConv = true;
  conv.conv.inputShape = {1, 2, 4, 4};
  conv.conv.filterShape = {2, 1, 3, 3};
  conv.conv.outputShape = {1, 2, 3, 2};
  conv.conv.strides = {1, 2};
  conv.conv.padding = {0, 1, 0, 1};
  conv.conv.dilation = {1, 1};
  conv.conv.groups = 2;
  conv.operands = {0, 3};
  conv.results = {1};
  PackageThunk attention;
  attention.kind = ThunkKind::LibraryCall;
  attention.library = LibraryKind::Attention;
  attention.hasAttention = true;
  attention.attention = {1, 2, 3, 5, 4, 2, 0.5, true};
  attention.operands = {6, 7, 8};
  attention.results = {9, 10};
  p.thunks = {gemm, launch, collective, copy, conv, attention};

  ParameterInit glorot;
  glorot.buffer = 1;
  glorot.kind = PkgInitKind::GlorotUniform;
  glorot.value = 0.25;
  glorot.scale = 2.0;
  glorot.seed = 3;
  ParameterInit inlined;
  inlined.buffer = 2;
  inlined.kind = PkgInitKind::Constant;
  inlined.hasData = true;
  for (int i = 0; i < 64; ++i)
    inlined.data.push_back(static_cast<uint8_t>(i * 7));
  p.parameterInits = {glorot, inlined};

  p.inputs = {makeEntry("x", PkgRole::Input, {4, 8}, 0),
              makeEntry("fc.weight", PkgRole::Parameter, {8, 2}, 1)};
  p.outputs = {makeEntry("loss", PkgRole::Loss, {}, 4),
               makeEntry("fc.weight", PkgRole::Parameter, {8, 2}, 2)};

  p.metadata.modelName = "mlp";
  p.metadata.strategy = Strategy::DataParallel;
  p.metadata.worldSize = 2;
  p.metadata.compileFlags = {"--target=cuda:sm_90", "--amp=bf16"};
  for (int i = 0; i < 32; ++i)
    p.metadata.graphHash.push_back(static_cast<uint8_t>(255 - i));
  return p;
}

// The sample's gemm (thunk 0, writing y: [4, 2] bf16) with |epilogue| and
// the buffers it reads or writes besides lhs and rhs: a bias [2] (buffer
// 11), C (12) and aux (13, written, or read by DGelu), both shaped as y,
// in a grown arena.
inline void setGemmEpilogue(LoadedPackage &p, PkgGemmEpilogue epilogue) {
  p.arenaSize = 1216;
  p.buffers.push_back(makeBuffer("bias", {2}, 1024, 64, PkgRole::None));
  p.buffers.push_back(makeBuffer("residual", {4, 2}, 1088, 32, PkgRole::None));
  p.buffers.push_back(makeBuffer("pre", {4, 2}, 1152, 32, PkgRole::None));
  for (size_t i = 11; i < 14; ++i)
    p.buffers[i].dtype = PkgDType::BF16;
  PackageThunk &t = p.thunks[0];
  PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(epilogue);
  t.gemm.epilogue = epilogue;
  t.gemm.batch = 1;
  t.operands = {0, 1};
  if (extra.bias)
    t.operands.push_back(11);
  if (extra.auxInput)
    t.operands.push_back(13);
  if (extra.c)
    t.operands.push_back(12);
  t.results = {3};
  if (extra.aux)
    t.results.push_back(13);
}

// Version 1.2's packed attention appended to the sample: buffers 11 qkv
// [1,3,3,2,4], 12 out [1,3,2,4], 13 lse [1,2,3], 14 dout [1,3,2,4], 15 dqkv
// [1,3,3,2,4] (f32, in a grown arena); thunk 6 an Attention (qkv -> out,
// lse) and thunk 7 an AttentionGrad (qkv, out, lse, dout -> dqkv), both
// layout PackedBTHD with B 1, T 3, H 2, D 4, causal.
inline void addPackedAttention(LoadedPackage &p) {
  p.buffers.push_back(makeBuffer("qkv", {1, 3, 3, 2, 4}, 1024, 288, PkgRole::None));
  p.buffers.push_back(makeBuffer("out.packed", {1, 3, 2, 4}, 1344, 96, PkgRole::None));
  p.buffers.push_back(makeBuffer("lse.packed", {1, 2, 3}, 1472, 24, PkgRole::None));
  p.buffers.push_back(makeBuffer("dout.packed", {1, 3, 2, 4}, 1536, 96, PkgRole::None));
  p.buffers.push_back(makeBuffer("dqkv", {1, 3, 3, 2, 4}, 1664, 288, PkgRole::None));
  p.arenaSize = 1984;
  PackageThunk fwd;
  fwd.kind = ThunkKind::LibraryCall;
  fwd.library = LibraryKind::Attention;
  fwd.hasAttention = true;
  fwd.attention = {1, 2, 3, 3, 4, 4, 0.5, true, AttentionLayout::PackedBTHD};
  fwd.operands = {11};
  fwd.results = {12, 13};
  PackageThunk grad = fwd;
  grad.library = LibraryKind::AttentionGrad;
  grad.operands = {11, 12, 13, 14};
  grad.results = {15};
  p.thunks.push_back(fwd);
  p.thunks.push_back(grad);
}

} // namespace kiln::runtime::testing

#endif // KILN_TESTS_UNIT_PACKAGE_PACKAGETESTUTIL_H
