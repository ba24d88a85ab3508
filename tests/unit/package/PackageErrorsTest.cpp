//===- PackageErrorsTest.cpp - one test per loader error ------------------===//
//
// Each test breaks one thing in the sample package, writes it without the
// writer's own checks, and expects the loader's exact message: the field,
// its index, what was expected and what was found.
//
//===----------------------------------------------------------------------===//

#include "serialize/PackageWriter.h"
#include "tests/unit/package/PackageTestUtil.h"

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <cstdint>
#include <functional>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::runtime::testing::makeSamplePackage;

namespace {

// Applies |mutate| to the sample package and returns the loader's error
// ("<loaded>" if it loads).
std::string loadError(const std::function<void(LoadedPackage &)> &mutate) {
  LoadedPackage p = makeSamplePackage();
  mutate(p);
  std::vector<uint8_t> bytes = kiln::serialize::writePackageUnchecked(p);
  StatusOr<LoadedPackage> loaded =
      loadPackageFromBytes(bytes.data(), bytes.size());
  return loaded.isOk() ? "<loaded>" : loaded.status().message();
}

template <typename E> E bad(unsigned v) { return static_cast<E>(v); }

TEST(PackageErrors, SampleLoads) {
  EXPECT_EQ(loadError([](LoadedPackage &) {}), "<loaded>");
}

TEST(PackageErrors, TooShort) {
  uint8_t bytes[4] = {0, 0, 0, 0};
  StatusOr<LoadedPackage> p = loadPackageFromBytes(bytes, 4);
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().message(), "not a Kiln package: 4 bytes is too short "
                                  "to hold a FlatBuffers header (8 bytes)");
}

TEST(PackageErrors, WrongIdentifier) {
  std::vector<uint8_t> bytes =
      kiln::serialize::writePackageUnchecked(makeSamplePackage());
  bytes[4] = 'K', bytes[5] = 'I', bytes[6] = 'L', bytes[7] = 1;
  StatusOr<LoadedPackage> p = loadPackageFromBytes(bytes.data(), bytes.size());
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().message(),
            "not a Kiln package: file identifier is 'KIL?', expected 'KPKG'");
}

TEST(PackageErrors, VerifierRejectsTruncation) {
  std::vector<uint8_t> bytes =
      kiln::serialize::writePackageUnchecked(makeSamplePackage());
  bytes.resize(bytes.size() / 2);
  StatusOr<LoadedPackage> p = loadPackageFromBytes(bytes.data(), bytes.size());
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().message(),
            "malformed package: the FlatBuffers "
            "verifier rejected it (truncated or corrupt)");
}

TEST(PackageErrors, MissingFile) {
  StatusOr<LoadedPackage> p = loadPackage("/nonexistent/step.kpkg");
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().message(),
            "/nonexistent/step.kpkg: cannot open for reading");
}

TEST(PackageErrors, NewerMajorVersion) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.majorVersion = 2; }),
            "package version 2.7 is not supported: this reader reads 1.7 "
            "(same major, minor at most 7)");
}

TEST(PackageErrors, NewerMinorVersion) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.minorVersion = 8; }),
            "package version 1.8 is not supported: this reader reads 1.7 "
            "(same major, minor at most 7)");
}

TEST(PackageErrors, TargetKind) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.target.kind = bad<TargetKind>(2); }),
      "target: kind 2 is out of range (0..1)");
}

TEST(PackageErrors, ArenaAlignment) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.arenaAlignment = 48; }),
            "arena: alignment 48 is not a power of two");
}

TEST(PackageErrors, BufferDType) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.buffers[3].dtype = bad<PkgDType>(8);
            }),
            "buffer 3: dtype 8 is out of range (0..7)");
}

TEST(PackageErrors, BufferRole) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.buffers[3].role = bad<PkgRole>(11); }),
      "buffer 3: role 11 is out of range (0..10)");
}

TEST(PackageErrors, NegativeDimension) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[0].shape[1] = -8; }),
            "buffer 0: dimension 1 is -8, expected >= 0");
}

TEST(PackageErrors, ShapeLargerThanSize) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[0].size = 100; }),
            "buffer 0: the shape needs 128 bytes, but size is 100");
}

TEST(PackageErrors, DTypeLargerThanSize) {
  // 4 x 8 f64 elements need 256 bytes; the buffer has 128.
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.buffers[0].dtype = PkgDType::F64; }),
      "buffer 0: the shape needs 256 bytes, but size is 128");
}

TEST(PackageErrors, ShapeByteSizeOverflows) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.buffers[0].shape = {int64_t(1) << 40, int64_t(1) << 40};
            }),
            "buffer 0: the shape's byte size overflows 64 bits");
}

TEST(PackageErrors, BufferOffsetMisaligned) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[3].offset = 264; }),
            "buffer 3: offset 264 is not a multiple of the arena's alignment "
            "(64 bytes)");
}

TEST(PackageErrors, BufferPastTheArena) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.arenaSize = 400; }),
            "buffer 5: offset 384 + size 64 exceeds the arena of 400 bytes");
}

TEST(PackageErrors, BufferOffsetOverflows) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.buffers[4].offset = UINT64_MAX - 63; }),
      "buffer 4: offset 18446744073709551552 + size 4 exceeds the arena "
      "of 1024 bytes");
}

TEST(PackageErrors, AliasesOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[0].aliases = 5; }),
            "buffer 0: aliases input 5, but the signature has 2 inputs");
}

TEST(PackageErrors, UpdatesOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[2].updates = -2; }),
            "buffer 2: updates input -2, but the signature has 2 inputs");
}

// Adds input 2, a bf16 copy of parameter input 1 (fc.weight) in a grown
// arena, updated by output 2.
void addParameterCopy(LoadedPackage &p) {
  p.arenaSize = 1088;
  PackageBuffer copy = kiln::runtime::testing::makeBuffer(
      "fc.weight.bf16", {8, 2}, 1024, 32, PkgRole::ParameterCopy, -1, 2);
  copy.dtype = PkgDType::BF16;
  p.buffers.push_back(copy);
  SignatureEntry in = kiln::runtime::testing::makeEntry(
      "fc.weight.bf16", PkgRole::ParameterCopy, {8, 2},
      uint32_t(p.buffers.size() - 1));
  in.dtype = PkgDType::BF16;
  in.copyOf = 1;
  p.inputs.push_back(in);
  SignatureEntry out = in;
  out.copyOf = -1;
  p.outputs.push_back(out);
}

TEST(PackageErrors, ParameterCopyLoads) {
  LoadedPackage p = makeSamplePackage();
  addParameterCopy(p);
  std::vector<uint8_t> bytes = kiln::serialize::writePackageUnchecked(p);
  StatusOr<LoadedPackage> loaded = loadPackageFromBytes(bytes.data(), bytes.size());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded.value().inputs[2].copyOf, 1);
  EXPECT_EQ(loaded.value().outputs[2].copyOf, -1);
  EXPECT_EQ(pkgParameterCopiesOf(loaded.value(), 1), std::vector<size_t>{2});
  EXPECT_TRUE(pkgParameterCopiesOf(loaded.value(), 0).empty());
}

TEST(PackageErrors, ParameterCopyWithoutItsParameter) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              addParameterCopy(p);
              p.inputs[2].copyOf = -1;
            }),
            "input 2 (\"fc.weight.bf16\"): a parameter_copy input needs copy_of, "
            "the index of an input (0..2), but it is -1");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              addParameterCopy(p);
              p.inputs[2].copyOf = 3;
            }),
            "input 2 (\"fc.weight.bf16\"): a parameter_copy input needs copy_of, "
            "the index of an input (0..2), but it is 3");
}

TEST(PackageErrors, ParameterCopyOfANonParameter) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              addParameterCopy(p);
              p.inputs[2].shape = {4, 8};
              p.inputs[2].copyOf = 0;
              p.buffers.back().shape = {4, 8};
              p.buffers.back().size = 64;
              p.outputs[2].shape = {4, 8};
              p.arenaSize = 1088;
            }),
            "input 2 (\"fc.weight.bf16\"): copies input 0 (\"x\"), which is not "
            "a floating-point parameter of its shape");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              addParameterCopy(p);
              p.inputs[2].shape = p.outputs[2].shape = p.buffers.back().shape = {16};
            }),
            "input 2 (\"fc.weight.bf16\"): copies input 1 (\"fc.weight\"), which "
            "is not a floating-point parameter of its shape");
}

TEST(PackageErrors, CopyOfOnAnotherEntry) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.inputs[0].copyOf = 1; }),
            "input 0 (\"x\"): copy_of is 1, but only a parameter_copy input "
            "copies a parameter (-1)");
}

// Input 0 ("x") as i32 token ids the model reads below |bound|.
void makeIndexInput(LoadedPackage &p, int64_t bound) {
  p.inputs[0].dtype = p.buffers[0].dtype = PkgDType::I32;
  p.inputs[0].indexBound = bound;
}

TEST(PackageErrors, IndexBoundLoads) {
  LoadedPackage p = makeSamplePackage();
  makeIndexInput(p, 10);
  std::vector<uint8_t> bytes = kiln::serialize::writePackageUnchecked(p);
  StatusOr<LoadedPackage> loaded = loadPackageFromBytes(bytes.data(), bytes.size());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded.value().inputs[0].indexBound, 10);
  EXPECT_EQ(loaded.value().inputs[1].indexBound, 0);
  EXPECT_EQ(loaded.value(), p);
}

TEST(PackageErrors, IndexBoundOnlyOnIntegerData) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.inputs[0].indexBound = 10; }),
            "input 0 (\"x\"): index_bound is 10, but only an integer input or "
            "label has one, of at least 1 (0: none)");
  EXPECT_EQ(loadError([](LoadedPackage &p) { makeIndexInput(p, -3); }),
            "input 0 (\"x\"): index_bound is -3, but only an integer input or "
            "label has one, of at least 1 (0: none)");
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.inputs[1].indexBound = 8; }),
            "input 1 (\"fc.weight\"): index_bound is 8, but only an integer "
            "input or label has one, of at least 1 (0: none)");
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.outputs[0].indexBound = 2; }),
            "output 0 (\"loss\"): index_bound is 2, but only an integer input "
            "or label has one, of at least 1 (0: none)");
}

TEST(PackageErrors, KernelKind) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.kernels[1].kind = bad<KernelKind>(3);
            }),
            "kernel 1: kind 3 is out of range (0..2)");
}

TEST(PackageErrors, KernelEntryPointEmpty) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.kernels[0].entryPoint = ""; }),
            "kernel 0 (\"fusion_0\"): entry point is empty");
}

TEST(PackageErrors, KernelBlockZero) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.kernels[1].block[1] = 0; }),
            "kernel 1: block y is 0, expected >= 1");
}

TEST(PackageErrors, KernelGridZero) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.kernels[0].grid[2] = 0; }),
            "kernel 0: grid z is 0, expected >= 1");
}

TEST(PackageErrors, CubinForUnlistedArch) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.kernels[1].cubins[1].arch = 75; }),
      "kernel 1: cubin 1 is for sm_75, which the target's architectures "
      "(sm_80, sm_90) do not list");
}

TEST(PackageErrors, ThunkKind) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.thunks[0].kind = bad<ThunkKind>(4); }),
      "thunk 0: kind 4 is out of range (0..3)");
}

TEST(PackageErrors, ThunkOperandOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[4].operands[1] = 41; }),
            "thunk 4: operand 1 names buffer 41, but the package has 11 "
            "buffers");
}

TEST(PackageErrors, ThunkResultOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[2].results[0] = 11; }),
            "thunk 2: result 0 names buffer 11, but the package has 11 buffers");
}

TEST(PackageErrors, LaunchKernelOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[1].kernel = 7; }),
            "thunk 1: kernel 7 is out of range, the package has 2 kernels");
}

TEST(PackageErrors, LaunchWithoutKernel) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[1].kernel = -1; }),
            "thunk 1: kernel -1 is out of range, the package has 2 kernels");
}

TEST(PackageErrors, LibraryKind) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[0].library = bad<LibraryKind>(6);
            }),
            "thunk 0: library 6 is out of range (0..5)");
}

TEST(PackageErrors, GemmWithoutParameters) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[0].hasGemm = false; }),
            "thunk 0: a gemm library call needs gemm parameters");
}

TEST(PackageErrors, ConvWithoutParameters) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[4].hasConv = false; }),
            "thunk 4: a convolution library call needs conv parameters");
}

TEST(PackageErrors, AttentionWithoutParameters) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.thunks[5].hasAttention = false; }),
      "thunk 5: an attention library call needs attention parameters");
}

TEST(PackageErrors, AttentionInACpuPackage) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.target.kind = TargetKind::Cpu;
              p.target.smArchs.clear();
              p.kernels[1].cubins.clear();
            }),
            "thunk 5: an attention library call in a CPU package: only CUDA "
            "packages carry attention (the CPU pipeline decomposes it)");
}

TEST(PackageErrors, AttentionDimensionZero) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[5].attention.headDim = 0;
            }),
            "thunk 5: attention head_dim is 0, expected >= 1");
}

TEST(PackageErrors, AttentionScaleNotFinite) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[5].attention.scale = std::nan("");
            }).rfind("thunk 5: attention scale", 0),
            0u);
}

TEST(PackageErrors, AttentionGradCounts) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[5].library = LibraryKind::AttentionGrad;
            }),
            "thunk 5: attention_grad needs 6 operands and 3 results, found 3 "
            "and 2");
}

TEST(PackageErrors, AttentionBufferShape) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[5].attention.kvLen = 4; }),
            "thunk 5: attention operand 1 (k) (buffer 7) is [1x2x5x4] f32, "
            "expected [1x2x4x4] f32");
}

TEST(PackageErrors, AttentionLseType) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.buffers[10].dtype = PkgDType::BF16;
              p.buffers[10].size = 12;
            }),
            "thunk 5: attention result 1 (lse) (buffer 10) is [1x2x3] bf16, "
            "expected [1x2x3] f32");
}

// Version 1.2's packed attention (addPackedAttention: thunk 6 forward,
// thunk 7 backward): its counts, shapes, dtypes and constraints.
std::string packedError(const std::function<void(LoadedPackage &)> &mutate) {
  return loadError([&](LoadedPackage &p) {
    kiln::runtime::testing::addPackedAttention(p);
    mutate(p);
  });
}

TEST(PackageErrors, PackedAttentionLoads) {
  EXPECT_EQ(packedError([](LoadedPackage &) {}), "<loaded>");
}

TEST(PackageErrors, PackedAttentionCounts) {
  // Packed parameters on the three BHTD buffers.
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.thunks[6].operands = {6, 7, 8};
            }),
            "thunk 6: attention (layout packed_bthd) needs 1 operands and 2 "
            "results, found 3 and 2");
  // dq, dk, dv as three results.
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.thunks[7].results = {15, 15, 15};
            }),
            "thunk 7: attention_grad (layout packed_bthd) needs 4 operands "
            "and 1 results, found 4 and 3");
  // BHTD parameters on the packed buffers.
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.thunks[6].attention.layout = AttentionLayout::BHTD;
            }),
            "thunk 6: attention needs 3 operands and 2 results, found 1 and 2");
}

TEST(PackageErrors, PackedAttentionShapes) {
  // q laid out [B,H,T,D] where qkv [B,T,3,H,D] is expected.
  EXPECT_EQ(packedError([](LoadedPackage &p) { p.thunks[6].operands = {6}; }),
            "thunk 6: attention operand 0 (qkv) (buffer 6) is [1x2x3x4] f32, "
            "expected [1x3x3x2x4] f32");
  // out in the BHTD layout.
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.buffers[12].shape = {1, 2, 3, 4};
            }),
            "thunk 6: attention result 0 (out) (buffer 12) is [1x2x3x4] f32, "
            "expected [1x3x2x4] f32");
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.buffers[14].shape = {1, 3, 8};
            }),
            "thunk 7: attention_grad operand 3 (dout) (buffer 14) is [1x3x8] "
            "f32, expected [1x3x2x4] f32");
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.buffers[15].shape = {3, 1, 3, 2, 4};
            }),
            "thunk 7: attention_grad result 0 (dqkv) (buffer 15) is "
            "[3x1x3x2x4] f32, expected [1x3x3x2x4] f32");
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.buffers[13].dtype = PkgDType::BF16;
              p.buffers[13].size = 12;
            }),
            "thunk 6: attention result 1 (lse) (buffer 13) is [1x2x3] bf16, "
            "expected [1x2x3] f32");
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.buffers[11].dtype = PkgDType::I32;
            }),
            "thunk 6: attention operand 0 (qkv) has dtype i32, expected f16, "
            "bf16, f32 or f64");
}

TEST(PackageErrors, PackedAttentionNeedsOneLengthAndHeadDim) {
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.thunks[6].attention.kvLen = 5;
            }),
            "thunk 6: attention layout packed_bthd needs head_dim == "
            "value_dim and q_len == kv_len, found head_dim 4, value_dim 4, "
            "q_len 3, kv_len 5");
  EXPECT_EQ(packedError([](LoadedPackage &p) {
              p.thunks[7].attention.valueDim = 2;
            }),
            "thunk 7: attention_grad layout packed_bthd needs head_dim == "
            "value_dim and q_len == kv_len, found head_dim 4, value_dim 2, "
            "q_len 3, kv_len 3");
}

TEST(PackageErrors, AttentionLayoutOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[5].attention.layout = bad<AttentionLayout>(2);
            }),
            "thunk 5: attention layout 2 is out of range (0..1)");
}

// A library call reads its operands while it writes its results, so none
// may share arena bytes with another, except a residual GEMM's C, which may
// be its result exactly.
TEST(PackageErrors, LibraryResultOverlapsAnOperand) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[9].offset = 512; }),
            "thunk 5: result 0 (buffer 9, bytes 512..560) overlaps operand 0 "
            "(buffer 6, bytes 448..544): a library call reads its operands "
            "while it writes its results");
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[0].results = {0}; }),
            "thunk 0: result 0 (buffer 0, bytes 0..128) overlaps operand 0 "
            "(buffer 0, bytes 0..128): a library call reads its operands "
            "while it writes its results");
}

TEST(PackageErrors, LibraryResultsOverlap) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[10].offset = 896; }),
            "thunk 5: results 0 and 1 (buffers 9 and 10) overlap in the arena");
}

// The GEMM operands read only at the element written (a residual's C,
// DGelu's aux) may be the result exactly: the buffer planner puts the
// result over them when they die there.
TEST(PackageErrors, ElementwiseGemmOperandMayBeTheResult) {
  using kiln::runtime::testing::setGemmEpilogue;
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::Residual);
              p.thunks[0].operands.back() = 3; // C is y, the result
            }),
            "<loaded>");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::DGelu);
              p.buffers[13].offset = 256; // aux where y is
            }),
            "<loaded>");
  // Not the rhs: every element of it is read for a column of the result.
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::DGelu);
              p.thunks[0].operands[1] = 3;
            }),
            "thunk 0: result 0 (buffer 3, bytes 256..288) overlaps operand 1 "
            "(buffer 3, bytes 256..288): a library call reads its operands "
            "while it writes its results");
}

TEST(PackageErrors, CopyRangesPartlyOverlap) {
  // Thunk 3 copies fc.weight (128..192) to fc.weight.copy (384..448).
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[5].offset = 128; }),
            "<loaded>");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.arenaAlignment = 32;
              p.buffers[5].offset = 160;
            }),
            "thunk 3: copy from bytes 128..192 to bytes 160..224: the ranges "
            "partly overlap");
}

// A collective's result is its operand's bytes only for an all-reduce or
// a broadcast (run in place), else it shares none of them.
TEST(PackageErrors, CollectiveOverlaps) {
  // Thunk 2 reduce-scatters fc.weight (128..192) into fc.weight.next.
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.buffers[2].offset = 128; }),
            "thunk 2: reduce_scatter result 0 (bytes 128..192) overlaps "
            "operand 0 (bytes 128..192)");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[2].collective.kind = CollectiveKind::AllReduce;
              p.buffers[2].offset = 128;
            }),
            "<loaded>");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[2].collective.kind = CollectiveKind::AllReduce;
              p.buffers[2].offset = 128;
              p.buffers[2].size = 128;
            }),
            "thunk 2: all_reduce result 0 (bytes 128..256) overlaps operand 0 "
            "(bytes 128..192) without being it");
}

TEST(PackageErrors, GemmAlphaNotFinite) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[0].gemm.alpha = std::nan("");
            }),
            "thunk 0: gemm alpha is nan, expected a finite number");
}

TEST(PackageErrors, GemmBetaNotFinite) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.thunks[0].gemm.beta = -HUGE_VAL; }),
      "thunk 0: gemm beta is -inf, expected a finite number");
}

TEST(PackageErrors, GemmNegativeDimension) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[0].gemm.k = -1; }),
            "thunk 0: gemm m, n, k, batch are 4, 2, -1, 3, expected m, n, k "
            ">= 0 and batch >= 1");
}

TEST(PackageErrors, GemmBatchZero) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[0].gemm.batch = 0; }),
            "thunk 0: gemm m, n, k, batch are 4, 2, 8, 0, expected m, n, k "
            ">= 0 and batch >= 1");
}

TEST(PackageErrors, ConvShapeRank) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[4].conv.filterShape = {2, 3, 3};
            }),
            "thunk 4 (conv2d_filter_grad): filter shape must have 4 entries, "
            "but is [2, 3, 3]");
}

TEST(PackageErrors, ConvStridesRank) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[4].conv.strides = {}; }),
            "thunk 4 (conv2d_filter_grad): strides must have 2 entries, but "
            "is []");
}

TEST(PackageErrors, ConvGroups) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[4].conv.groups = 0; }),
            "thunk 4 (conv2d_filter_grad): groups 0 must be positive and "
            "divide the input channels (2) and output channels (2)");
}

TEST(PackageErrors, ConvOutputShapeDisagrees) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[4].conv.outputShape = {1, 2, 2, 2};
            }),
            "thunk 4 (conv2d_filter_grad): output shape must be [1, 2, 3, 2], "
            "but is [1, 2, 2, 2]");
}

// Sizes whose arithmetic would pass 64 bits are refused, not wrapped (the
// sanitizer build, scripts/sanitize.sh, fails on a signed overflow).
TEST(PackageErrors, ConvSizesThatWrapAreRefused) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[4].conv.inputShape = {1, 2, kMax, 4};
              p.thunks[4].conv.padding = {kMax, kMax, 0, 1};
            }),
            "thunk 4 (conv2d_filter_grad): the padded input [1, 2, "
            "9223372036854775807, 4] with padding [9223372036854775807, "
            "9223372036854775807, 0, 1] makes an output dimension past 2^63 "
            "- 1");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[4].conv.dilation = {kMax, 1};
            }),
            "thunk 4 (conv2d_filter_grad): the dilated filter [2, 1, 3, 3] is "
            "larger than the padded input [1, 2, 4, 4]");
  // The largest input that fits: its output size is stated exactly.
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[4].conv.inputShape = {1, 2, kMax, 4};
              p.thunks[4].conv.padding = {0, 0, 0, 1};
            }),
            "thunk 4 (conv2d_filter_grad): output shape must be [1, 2, "
            "9223372036854775805, 2], but is [1, 2, 3, 2]");
}

TEST(PackageErrors, CollectiveGroupsShape) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[2].collective.groupsShape = {3, 2};
            }),
            "thunk 2: collective groups hold 4 ranks, which does not match "
            "groups_shape (3, 2)");
}

TEST(PackageErrors, CollectiveGroupsShapeOverflows) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              // 2^62 * 4 wraps to 0 in 64 bits, the size of empty groups.
              p.thunks[2].collective.groups = {};
              p.thunks[2].collective.groupsShape = {int64_t(1) << 62, 4};
            }),
            "thunk 2: collective groups hold 0 ranks, which does not match "
            "groups_shape (4611686018427387904, 4)");
}

TEST(PackageErrors, CollectiveWithoutParameters) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.thunks[2].hasCollective = false; }),
      "thunk 2: a collective needs collective parameters");
}

TEST(PackageErrors, CollectiveKind) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[2].collective.kind = bad<CollectiveKind>(6);
            }),
            "thunk 2: collective kind 6 is out of range (0..5)");
}

TEST(PackageErrors, CollectiveReduction) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.thunks[2].collective.reduction = bad<PkgReduceKind>(4);
            }),
            "thunk 2: reduction 4 is out of range (0..3)");
}

TEST(PackageErrors, CopyArity) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.thunks[3].results.push_back(2); }),
      "thunk 3: a copy takes 1 operand and 1 result, found 1 and 2");
}

TEST(PackageErrors, CopySizesDiffer) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.thunks[3].results[0] = 3; }),
            "thunk 3: copy from buffer 1 (64 bytes) to buffer 3 (32 bytes): "
            "sizes differ");
}

TEST(PackageErrors, InitKind) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.parameterInits[0].kind = bad<PkgInitKind>(7);
            }),
            "parameter init 0: kind 7 is out of range (0..6)");
}

TEST(PackageErrors, InitBufferOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.parameterInits[1].buffer = 19; }),
            "parameter init 1 names buffer 19, but the package has 11 buffers");
}

TEST(PackageErrors, InitValueNotFinite) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.parameterInits[0].value = HUGE_VAL; }),
      "parameter init 0: value is inf, expected a finite number");
}

TEST(PackageErrors, InitScaleNotFinite) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.parameterInits[1].scale = std::nan("");
            }),
            "parameter init 1: scale is nan, expected a finite number");
}

TEST(PackageErrors, InitDataSize) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.parameterInits[1].data.resize(12); }),
      "parameter init 1: data has 12 bytes, but buffer 2 has 64");
}

TEST(PackageErrors, InputRole) {
  EXPECT_EQ(
      loadError([](LoadedPackage &p) { p.inputs[1].role = bad<PkgRole>(200); }),
      "input 1: role 200 is out of range (0..10)");
}

TEST(PackageErrors, OutputDType) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.outputs[0].dtype = bad<PkgDType>(8);
            }),
            "output 0: dtype 8 is out of range (0..7)");
}

TEST(PackageErrors, InputBufferOutOfRange) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.inputs[0].buffer = 12; }),
            "input 0 names buffer 12, but the package has 11 buffers");
}

TEST(PackageErrors, OutputShapeDiffersFromBuffer) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.outputs[1].shape = {16}; }),
            "output 1 (\"fc.weight\"): dtype or shape differs from buffer 2's");
}

TEST(PackageErrors, Strategy) {
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              p.metadata.strategy = bad<Strategy>(9);
            }),
            "metadata: strategy 9 is out of range (0..8)");
}

TEST(PackageErrors, WorldSizeZero) {
  EXPECT_EQ(loadError([](LoadedPackage &p) { p.metadata.worldSize = 0; }),
            "metadata: world size is 0, expected >= 1");
}

// Version 1.1's GEMM epilogue buffers: C and aux have the result's dtype,
// shape and size; each epilogue has its operand and result count.
TEST(PackageErrors, GemmEpilogueBuffers) {
  using kiln::runtime::testing::setGemmEpilogue;
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::BiasResidual);
            }),
            "<loaded>");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::Residual);
              p.buffers[12].dtype = PkgDType::F32;
            }),
            "thunk 0: gemm epilogue residual C (buffer 12) is [4x2] f32 (32 "
            "bytes), expected the result's [4x2] bf16 (32 bytes)");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::BiasResidual);
              p.thunks[0].operands.back() = 11; // the bias as C
            }),
            "thunk 0: gemm epilogue bias_residual C (buffer 11) is [2] bf16 "
            "(64 bytes), expected the result's [4x2] bf16 (32 bytes)");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::BiasGeluAux);
              p.buffers[13].shape = {2, 4};
            }),
            "thunk 0: gemm epilogue bias_gelu_aux aux (buffer 13) is [2x4] "
            "bf16 (32 bytes), expected the result's [4x2] bf16 (32 bytes)");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::GeluAux);
              p.thunks[0].results.pop_back();
            }),
            "thunk 0: gemm epilogue gelu_aux needs 2 operands and 2 "
            "result(s), found 2 and 1");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::GeluAux);
              p.thunks[0].results.back() = 14;
            }),
            "thunk 0: result 1 names buffer 14, but the package has 14 "
            "buffers");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::BiasGeluAux);
              p.thunks[0].gemm.epilogue = bad<PkgGemmEpilogue>(12);
            }),
            "thunk 0: gemm epilogue 12 is out of range (0..11)");
  EXPECT_EQ(loadError([](LoadedPackage &p) {
              setGemmEpilogue(p, PkgGemmEpilogue::DGelu);
              p.thunks[0].operands[2] = 0; // x [4x8] f32 as the aux
            }),
            "thunk 0: gemm epilogue dgelu aux (buffer 0) is [4x8] f32 (128 "
            "bytes), expected the result's [4x2] bf16 (32 bytes)");
}

TEST(PackageErrors, LoadFromFileNamesThePath) {
  std::string path =
      ::testing::TempDir() + "bad_" + std::to_string(getpid()) + ".kpkg";
  LoadedPackage p = makeSamplePackage();
  p.thunks[1].kernel = 2;
  std::vector<uint8_t> bytes = kiln::serialize::writePackageUnchecked(p);
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  StatusOr<LoadedPackage> loaded = loadPackage(path);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().message(),
            path + ": thunk 1: kernel 2 is out of range, the package has 2 "
                   "kernels");
  std::remove(path.c_str());
}

} // namespace
