//===- PackageMutants.h - single-field mutants of library calls -*- C++ -*-===//
//
// A runtime trusts a package's library-call parameters to size what its
// GEMMs, convolutions and attention read and write. These helpers make
// every single-field mutant of a package's library calls and of the
// buffers they name (forEachMutant()), compute what each call spans by the
// contract Package.h documents, in 128-bit arithmetic (contractExtents()),
// and check a runtime against both (checkMutants(): each mutant is refused
// with a message, or accepted with every extent inside its buffer and two
// steps that run with nothing out of bounds). Used for the CUDA runtime on
// the fake table (tests/unit/cuda/CudaPackageMutationTest.cpp) and the CPU
// runtime (tests/unit/runtime-cpu/CpuPackageMutationTest.cpp). No LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_PACKAGE_PACKAGEMUTANTS_H
#define KILN_TESTS_UNIT_PACKAGE_PACKAGEMUTANTS_H

#include "runtime/package/Package.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::testing {

// One buffer of a test package: an input or an output.
struct BufferSpec {
  const char *name;
  std::vector<int64_t> shape;
  PkgDType dtype;
  bool input;
};

// Appends |specs| as buffers in order (256-byte aligned in the arena) with
// their input or output signature entries, and sets the arena's size.
inline void addBuffers(LoadedPackage &pkg, const std::vector<BufferSpec> &specs) {
  uint64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    PackageBuffer b;
    b.name = specs[i].name;
    b.dtype = specs[i].dtype;
    b.shape = specs[i].shape;
    b.offset = offset;
    int64_t n = 1;
    for (int64_t d : b.shape)
      n *= d;
    b.size = uint64_t(n) * pkgBytesPerElement(b.dtype);
    b.role = specs[i].input ? PkgRole::Input : PkgRole::Output;
    offset += (b.size + 255) / 256 * 256;
    pkg.buffers.push_back(b);
    SignatureEntry e;
    e.name = b.name;
    e.role = b.role;
    e.dtype = b.dtype;
    e.shape = b.shape;
    e.buffer = static_cast<uint32_t>(i);
    (specs[i].input ? pkg.inputs : pkg.outputs).push_back(e);
  }
  pkg.arenaSize = offset;
}

using Wide = unsigned __int128;

// A GEMM package for |target| and |epilogue| (None for a CPU target): lhs [m, k] (or [k, m] transposed), rhs
// [k, n], its extra operands (bias [n], aux and C [m, n]), the result and
// its extra result (bias gradient [n] or aux [m, n]).
inline LoadedPackage gemmPackage(TargetKind target, PkgGemmEpilogue epilogue,
                                 PkgDType dtype, int64_t batch = 1,
                                 bool transposeLhs = false,
                                 bool transposeRhs = false) {
  const int64_t m = 4, n = 8, k = 16;
  PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(epilogue);
  // [batch, rows, columns], without the batch when it is 1 (as the
  // epilogues' C and aux are).
  auto shape = [&](int64_t rows, int64_t columns) {
    return batch == 1 ? std::vector<int64_t>{rows, columns}
                      : std::vector<int64_t>{batch, rows, columns};
  };
  std::vector<BufferSpec> specs = {
      {"lhs", transposeLhs ? shape(k, m) : shape(m, k), dtype, true},
      {"rhs", transposeRhs ? shape(n, k) : shape(k, n), dtype, true}};
  std::vector<uint32_t> operands = {0, 1}, results;
  auto add = [&](const char *name, std::vector<int64_t> shape, bool input) {
    specs.push_back({name, shape, dtype, input});
    return uint32_t(specs.size() - 1);
  };
  if (extra.bias)
    operands.push_back(add("bias", {n}, true));
  if (extra.auxInput)
    operands.push_back(add("aux_in", {m, n}, true));
  if (extra.c)
    operands.push_back(add("c", {m, n}, true));
  results.push_back(add("out", shape(m, n), false));
  if (extra.biasGradient)
    results.push_back(add("bias_grad", {n}, false));
  if (extra.aux)
    results.push_back(add("aux", {m, n}, false));
  LoadedPackage pkg;
  pkg.target.kind = target;
  if (target == TargetKind::Cuda)
    pkg.target.smArchs = {90};
  addBuffers(pkg, specs);
  PackageThunk t;
  t.kind = ThunkKind::LibraryCall;
  t.library = LibraryKind::Gemm;
  t.hasGemm = true;
  t.gemm.m = m, t.gemm.n = n, t.gemm.k = k, t.gemm.batch = batch;
  t.gemm.transposeLhs = transposeLhs, t.gemm.transposeRhs = transposeRhs;
  t.gemm.beta = extra.c ? 1.0 : 0.0;
  t.gemm.epilogue = epilogue;
  t.operands = operands;
  t.results = results;
  pkg.thunks = {t};
  return pkg;
}

// What one buffer of a library call spans by the contract: its id and the
// bytes read or written from its start.
struct Extent {
  const char *what;
  uint32_t buffer;
  Wide bytes;
};

inline Wide wideProduct(std::initializer_list<int64_t> dims, uint64_t elementBytes) {
  Wide n = elementBytes;
  for (int64_t d : dims) {
    if (d < 0)
      return 0; // refused elsewhere; spans nothing
    n *= Wide(uint64_t(d));
    if (n >> 100) // saturate: far past any buffer, no 128-bit wrap
      return Wide(1) << 100;
  }
  return n;
}

// The extents of library call |t| of |p| from Package.h's description of
// each kind, independent of the runtime's own checks. The operand and
// result counts are those the kind implies (the caller checks them).
inline std::vector<Extent> contractExtents(const LoadedPackage &p,
                                    const PackageThunk &t) {
  uint64_t e = pkgBytesPerElement(p.buffers[t.results[0]].dtype);
  std::vector<Extent> out;
  switch (t.library) {
  case LibraryKind::Gemm: {
    const GemmParams &g = t.gemm;
    PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(g.epilogue);
    Wide result = wideProduct({g.batch, g.m, g.n}, e);
    out = {{"lhs", t.operands[0], wideProduct({g.batch, g.m, g.k}, e)},
           {"rhs", t.operands[1], wideProduct({g.batch, g.k, g.n}, e)},
           {"result", t.results[0], result}};
    if (extra.bias)
      out.push_back({"bias", t.operands[2], wideProduct({g.n}, e)});
    if (extra.auxInput)
      out.push_back({"aux input", t.operands[2], result});
    if (extra.c)
      out.push_back({"C", t.operands.back(), result});
    if (extra.biasGradient)
      out.push_back({"bias gradient", t.results[1], wideProduct({g.n}, e)});
    if (extra.aux)
      out.push_back({"aux", t.results[1], result});
    break;
  }
  case LibraryKind::Conv2D:
  case LibraryKind::Conv2DInputGrad:
  case LibraryKind::Conv2DFilterGrad: {
    const ConvParams &c = t.conv;
    // (x, w) -> y, (dy, w) -> dx, (x, dy) -> dw.
    std::vector<std::vector<int64_t>> shapes =
        t.library == LibraryKind::Conv2D
            ? std::vector<std::vector<int64_t>>{c.inputShape, c.filterShape,
                                                c.outputShape}
        : t.library == LibraryKind::Conv2DInputGrad
            ? std::vector<std::vector<int64_t>>{c.outputShape, c.filterShape,
                                                c.inputShape}
            : std::vector<std::vector<int64_t>>{c.inputShape, c.outputShape,
                                                c.filterShape};
    const char *names[3] = {"operand 0", "operand 1", "result"};
    uint32_t ids[3] = {t.operands[0], t.operands[1], t.results[0]};
    for (int i = 0; i < 3; ++i) {
      Wide bytes = e;
      for (int64_t d : shapes[i])
        bytes = d < 0 ? 0 : std::min(bytes * Wide(uint64_t(d)), Wide(1) << 100);
      out.push_back({names[i], ids[i], bytes});
    }
    break;
  }
  case LibraryKind::Attention:
  case LibraryKind::AttentionGrad: {
    const AttentionParams &a = t.attention;
    bool grad = t.library == LibraryKind::AttentionGrad;
    uint64_t eq = pkgBytesPerElement(p.buffers[t.operands[0]].dtype);
    uint64_t el = eq == 8 ? 8 : 4; // lse: f64 for f64, else f32
    Wide q = wideProduct({a.batch, a.heads, a.qLen, a.headDim}, eq),
         k = wideProduct({a.batch, a.heads, a.kvLen, a.headDim}, eq),
         v = wideProduct({a.batch, a.heads, a.kvLen, a.valueDim}, eq),
         o = wideProduct({a.batch, a.heads, a.qLen, a.valueDim}, eq),
         lse = wideProduct({a.batch, a.heads, a.qLen}, el),
         qkv = wideProduct({a.batch, a.qLen, 3, a.heads, a.headDim}, eq);
    if (a.layout == AttentionLayout::PackedBTHD && grad)
      out = {{"qkv", t.operands[0], qkv}, {"out", t.operands[1], o},
             {"lse", t.operands[2], lse}, {"dout", t.operands[3], o},
             {"dqkv", t.results[0], qkv}};
    else if (a.layout == AttentionLayout::PackedBTHD)
      out = {{"qkv", t.operands[0], qkv}, {"out", t.results[0], o},
             {"lse", t.results[1], lse}};
    else if (grad)
      out = {{"q", t.operands[0], q},  {"k", t.operands[1], k},
             {"v", t.operands[2], v},  {"out", t.operands[3], o},
             {"lse", t.operands[4], lse}, {"dout", t.operands[5], o},
             {"dq", t.results[0], q},  {"dk", t.results[1], k},
             {"dv", t.results[2], v}};
    else
      out = {{"q", t.operands[0], q}, {"k", t.operands[1], k},
             {"v", t.operands[2], v}, {"out", t.results[0], o},
             {"lse", t.results[1], lse}};
    break;
  }
  }
  return out;
}

// The operand and result counts |t|'s kind implies (0, 0: not a library
// call this test knows).
inline std::pair<size_t, size_t> contractCounts(const PackageThunk &t) {
  switch (t.library) {
  case LibraryKind::Gemm: {
    PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(t.gemm.epilogue);
    return {extra.operands(), extra.results()};
  }
  case LibraryKind::Attention:
    return t.attention.layout == AttentionLayout::PackedBTHD ? std::pair{1, 2}
                                                             : std::pair{3, 2};
  case LibraryKind::AttentionGrad:
    return t.attention.layout == AttentionLayout::PackedBTHD ? std::pair{4, 1}
                                                             : std::pair{6, 3};
  default: return {2, 1};
  }
}

struct Mutant {
  std::string what;
  LoadedPackage package;
};

// Values an integer field |v| is set to.
inline std::vector<int64_t> integerValues(int64_t v) {
  const int64_t big = int64_t(1) << 62;
  std::vector<int64_t> values = {0,
                                 1,
                                 -1,
                                 3,
                                 v - 1,
                                 v + 1,
                                 2 * v,
                                 v / 2,
                                 -v,
                                 int64_t(1) << 31,
                                 (int64_t(1) << 32) + v,
                                 big,
                                 std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::min()};
  std::vector<int64_t> out;
  for (int64_t x : values)
    if (x != v && std::find(out.begin(), out.end(), x) == out.end())
      out.push_back(x);
  return out;
}

// Calls |visit| with every single-field mutant of the library calls of
// |base| (those in |only| when it is given) and of the buffers they name,
// one at a time, until it returns false.
inline void forEachMutant(const LoadedPackage &base,
                          const std::vector<size_t> *only,
                          const std::function<bool(Mutant &)> &visit) {
  bool going = true;
  auto emit = [&](const std::string &what,
                  const std::function<void(LoadedPackage &)> &change) {
    if (!going)
      return;
    Mutant m{what, base};
    change(m.package);
    going = visit(m);
  };
  auto chosen = [&](size_t i) {
    return !only || std::find(only->begin(), only->end(), i) != only->end();
  };
  std::vector<bool> named(base.buffers.size(), !only);
  for (size_t i = 0; i < base.thunks.size(); ++i)
    if (base.thunks[i].kind == ThunkKind::LibraryCall && chosen(i)) {
      for (uint32_t id : base.thunks[i].operands)
        named[id] = true;
      for (uint32_t id : base.thunks[i].results)
        named[id] = true;
    }
  auto integer = [&](const std::string &what, size_t thunk,
                     std::function<int64_t &(PackageThunk &)> field) {
    PackageThunk copy = base.thunks[thunk];
    int64_t v = field(copy);
    for (int64_t x : integerValues(v))
      emit(what + " = " + std::to_string(x),
           [&](LoadedPackage &p) { field(p.thunks[thunk]) = x; });
  };
  auto number = [&](const std::string &what, size_t thunk,
                    std::function<double &(PackageThunk &)> field) {
    for (double x : {0.0, -1.0, 2.0, std::nan(""), HUGE_VAL})
      emit(what + " = " + std::to_string(x),
           [&](LoadedPackage &p) { field(p.thunks[thunk]) = x; });
  };
  for (size_t i = 0; i < base.thunks.size(); ++i) {
    const PackageThunk &t = base.thunks[i];
    if (t.kind != ThunkKind::LibraryCall || !chosen(i))
      continue;
    std::string at = "thunk " + std::to_string(i) + " ";
    for (unsigned lib = 0; lib <= unsigned(LibraryKind::AttentionGrad) + 1; ++lib)
      if (lib != unsigned(t.library))
        emit(at + "library = " + std::to_string(lib), [&](LoadedPackage &p) {
          p.thunks[i].library = static_cast<LibraryKind>(lib);
        });
    emit(at + "hasGemm flipped",
         [&](LoadedPackage &p) { p.thunks[i].hasGemm ^= true; });
    emit(at + "hasConv flipped",
         [&](LoadedPackage &p) { p.thunks[i].hasConv ^= true; });
    emit(at + "hasAttention flipped",
         [&](LoadedPackage &p) { p.thunks[i].hasAttention ^= true; });
    // Operands and results: each to every buffer id (and one past them),
    // each dropped, one more appended.
    for (bool result : {false, true}) {
      const std::vector<uint32_t> &ids = result ? t.results : t.operands;
      std::string kind = result ? "result " : "operand ";
      for (size_t j = 0; j < ids.size(); ++j) {
        for (uint32_t id = 0; id <= base.buffers.size(); ++id)
          if (id != ids[j])
            emit(at + kind + std::to_string(j) + " = buffer " + std::to_string(id),
                 [&](LoadedPackage &p) {
                   (result ? p.thunks[i].results : p.thunks[i].operands)[j] = id;
                 });
        emit(at + kind + std::to_string(j) + " dropped", [&](LoadedPackage &p) {
          auto &v = result ? p.thunks[i].results : p.thunks[i].operands;
          v.erase(v.begin() + j);
        });
      }
      emit(at + "one more " + kind, [&](LoadedPackage &p) {
        (result ? p.thunks[i].results : p.thunks[i].operands).push_back(0);
      });
    }
    if (t.hasGemm) {
      integer(at + "gemm m", i, [](PackageThunk &t) -> int64_t & { return t.gemm.m; });
      integer(at + "gemm n", i, [](PackageThunk &t) -> int64_t & { return t.gemm.n; });
      integer(at + "gemm k", i, [](PackageThunk &t) -> int64_t & { return t.gemm.k; });
      integer(at + "gemm batch", i,
              [](PackageThunk &t) -> int64_t & { return t.gemm.batch; });
      emit(at + "gemm transposeLhs flipped",
           [&](LoadedPackage &p) { p.thunks[i].gemm.transposeLhs ^= true; });
      emit(at + "gemm transposeRhs flipped",
           [&](LoadedPackage &p) { p.thunks[i].gemm.transposeRhs ^= true; });
      number(at + "gemm alpha", i,
             [](PackageThunk &t) -> double & { return t.gemm.alpha; });
      number(at + "gemm beta", i,
             [](PackageThunk &t) -> double & { return t.gemm.beta; });
      for (unsigned ep = 0; ep <= unsigned(PkgGemmEpilogue::DGelu) + 1; ++ep)
        if (ep != unsigned(t.gemm.epilogue))
          emit(at + "gemm epilogue = " + std::to_string(ep), [&](LoadedPackage &p) {
            p.thunks[i].gemm.epilogue = static_cast<PkgGemmEpilogue>(ep);
          });
    }
    if (t.hasConv) {
      auto vectors = [](PackageThunk &t) {
        ConvParams &c = t.conv;
        return std::vector<std::pair<const char *, std::vector<int64_t> *>>{
            {"input shape", &c.inputShape}, {"filter shape", &c.filterShape},
            {"output shape", &c.outputShape}, {"strides", &c.strides},
            {"padding", &c.padding},          {"dilation", &c.dilation}};
      };
      PackageThunk copy = t;
      for (size_t f = 0; f < vectors(copy).size(); ++f) {
        auto [name, values] = vectors(copy)[f];
        for (size_t d = 0; d < values->size(); ++d)
          integer(at + "conv " + name + "[" + std::to_string(d) + "]", i,
                  [vectors, f, d](PackageThunk &t) -> int64_t & {
                    return (*vectors(t)[f].second)[d];
                  });
        emit(at + "conv " + name + " one entry short", [&, f](LoadedPackage &p) {
          vectors(p.thunks[i])[f].second->pop_back();
        });
      }
      integer(at + "conv groups", i,
              [](PackageThunk &t) -> int64_t & { return t.conv.groups; });
      // Two fields at once, so the shapes still agree (pkgCheckConvParams):
      // the batch of the input and the output, the output channels of the
      // filter and the output.
      for (int64_t x : integerValues(t.conv.inputShape[0]))
        emit(at + "conv batch = " + std::to_string(x), [&](LoadedPackage &p) {
          p.thunks[i].conv.inputShape[0] = p.thunks[i].conv.outputShape[0] = x;
        });
      for (int64_t x : integerValues(t.conv.filterShape[0]))
        emit(at + "conv output channels = " + std::to_string(x),
             [&](LoadedPackage &p) {
               p.thunks[i].conv.filterShape[0] = p.thunks[i].conv.outputShape[1] = x;
             });
    }
    if (t.hasAttention) {
      integer(at + "attention batch", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.batch; });
      integer(at + "attention heads", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.heads; });
      integer(at + "attention q_len", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.qLen; });
      integer(at + "attention kv_len", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.kvLen; });
      integer(at + "attention head_dim", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.headDim; });
      integer(at + "attention value_dim", i,
              [](PackageThunk &t) -> int64_t & { return t.attention.valueDim; });
      number(at + "attention scale", i,
             [](PackageThunk &t) -> double & { return t.attention.scale; });
      emit(at + "attention causal flipped",
           [&](LoadedPackage &p) { p.thunks[i].attention.causal ^= true; });
      for (unsigned l = 0; l <= unsigned(AttentionLayout::PackedBTHD) + 1; ++l)
        if (l != unsigned(t.attention.layout))
          emit(at + "attention layout = " + std::to_string(l), [&](LoadedPackage &p) {
            p.thunks[i].attention.layout = static_cast<AttentionLayout>(l);
          });
    }
  }
  // The buffers: each dtype, each dimension (the size kept), the size, the
  // offset.
  for (size_t b = 0; b < base.buffers.size(); ++b) {
    if (!named[b])
      continue;
    std::string at = "buffer " + std::to_string(b) + " ";
    for (unsigned d = 0; d <= unsigned(PkgDType::I1); ++d)
      if (d != unsigned(base.buffers[b].dtype))
        emit(at + "dtype = " + pkgDTypeName(static_cast<PkgDType>(d)),
             [&](LoadedPackage &p) { p.buffers[b].dtype = static_cast<PkgDType>(d); });
    for (size_t d = 0; d < base.buffers[b].shape.size(); ++d)
      for (int64_t x : integerValues(base.buffers[b].shape[d]))
        emit(at + "dimension " + std::to_string(d) + " = " + std::to_string(x),
             [&](LoadedPackage &p) { p.buffers[b].shape[d] = x; });
    for (uint64_t size : {uint64_t(0), base.buffers[b].size / 2,
                          base.buffers[b].size - 1})
      emit(at + "size = " + std::to_string(size),
           [&](LoadedPackage &p) { p.buffers[b].size = size; });
    // Its place: misaligned, over a neighbour, at the start, at the end.
    const PackageBuffer &buffer = base.buffers[b];
    for (uint64_t offset :
         {buffer.offset + 4, buffer.offset + 64, buffer.offset + 256,
          uint64_t(0), base.arenaSize - buffer.size,
          std::numeric_limits<uint64_t>::max() - 255})
      if (offset != buffer.offset)
        emit(at + "offset = " + std::to_string(offset),
             [&](LoadedPackage &p) { p.buffers[b].offset = offset; });
  }
}

struct MutantOutcome {
  size_t refusedByCheck = 0, refusedByCreate = 0, accepted = 0;
  void add(const MutantOutcome &o) {
    refusedByCheck += o.refusedByCheck;
    refusedByCreate += o.refusedByCreate;
    accepted += o.accepted;
  }
};

// A runtime under test: makes an executable of a package (a fresh one
// each time), runs its step, and says what it saw go out of bounds.
class MutantBackend {
public:
  virtual ~MutantBackend() = default;
  virtual Status create(const LoadedPackage &package) = 0;
  virtual Status step() = 0;
  // The first access past an allocation since create(), or "".
  virtual std::string outOfBounds() { return ""; }
};

// Runs the base package and every mutant of it (of the library calls in
// |only| when given) through |backend|: a mutant is refused by
// checkPackage or create() with a message, or is accepted with the operand
// and result counts its kind implies, every extent inside its buffer, and
// two steps (each ok or failing with a message) during which nothing goes
// out of bounds. Stops at the first failure; prints the counts.
inline MutantOutcome checkMutants(const std::string &name,
                                  const LoadedPackage &base,
                                  MutantBackend &backend,
                                  const std::vector<size_t> *only = nullptr) {
  MutantOutcome outcome;
  {
    // The base package itself loads and runs cleanly.
    Status s = backend.create(base);
    EXPECT_TRUE(s.isOk()) << name << ": " << s.message();
    if (!s.isOk())
      return outcome;
    s = backend.step();
    EXPECT_TRUE(s.isOk()) << name << ": " << s.message();
  }
  forEachMutant(base, only, [&](Mutant &m) {
    SCOPED_TRACE(name + ": " + m.what);
    if (Status s = checkPackage(m.package); !s.isOk()) {
      EXPECT_FALSE(s.message().empty());
      ++outcome.refusedByCheck;
      return true;
    }
    Status made = backend.create(m.package);
    EXPECT_EQ(backend.outOfBounds(), "");
    if (!made.isOk()) {
      EXPECT_FALSE(made.message().empty());
      ++outcome.refusedByCreate;
      return !::testing::Test::HasFailure();
    }
    ++outcome.accepted;
    const LoadedPackage &p = m.package;
    for (const PackageThunk &t : p.thunks) {
      if (t.kind != ThunkKind::LibraryCall)
        continue;
      auto [operands, results] = contractCounts(t);
      EXPECT_EQ(t.operands.size(), operands) << "accepted with the wrong operands";
      EXPECT_EQ(t.results.size(), results) << "accepted with the wrong results";
      if (t.operands.size() != operands || t.results.size() != results)
        return false;
      for (const Extent &e : contractExtents(p, t))
        EXPECT_LE(e.bytes, Wide(p.buffers[e.buffer].size))
            << "accepted, but the " << e.what << " spans "
            << uint64_t(std::min(e.bytes, Wide(UINT64_MAX)))
            << " bytes of buffer " << e.buffer << " ("
            << p.buffers[e.buffer].size << " bytes)";
    }
    if (::testing::Test::HasFailure())
      return false;
    for (int step = 0; step < 2; ++step) {
      Status s = backend.step();
      EXPECT_EQ(backend.outOfBounds(), "") << "step " << step;
      if (!s.isOk()) {
        EXPECT_FALSE(s.message().empty());
        break;
      }
    }
    return !::testing::Test::HasFailure();
  });
  std::printf("%s: %zu mutants refused by checkPackage, %zu by create, %zu "
              "accepted (and ran in bounds)\n",
              name.c_str(), outcome.refusedByCheck, outcome.refusedByCreate,
              outcome.accepted);
  return outcome;
}

// checkMutants over the three convolutions (conv2d, its input gradient
// and its filter gradient), each in f32 and bf16, as |make| builds their
// packages; stops at the first failure.
inline MutantOutcome checkConvolutionMutants(
    const std::string &prefix,
    const std::function<LoadedPackage(LibraryKind, PkgDType)> &make,
    MutantBackend &backend) {
  MutantOutcome all;
  for (auto [kind, name] :
       {std::pair{LibraryKind::Conv2D, "conv2d "},
        std::pair{LibraryKind::Conv2DInputGrad, "conv2d_input_grad "},
        std::pair{LibraryKind::Conv2DFilterGrad, "conv2d_filter_grad "}}) {
    for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16}) {
      all.add(checkMutants(prefix + name + pkgDTypeName(dtype),
                           make(kind, dtype), backend));
      if (::testing::Test::HasFailure())
        return all;
    }
  }
  return all;
}

// Each layer of checks had work to do: some mutants were refused by
// checkPackage, some by the runtime's create(), and some (a smaller m, a
// larger buffer) were harmless and ran.
inline void expectEveryOutcome(const MutantOutcome &all) {
  EXPECT_GT(all.refusedByCheck, 0u);
  EXPECT_GT(all.refusedByCreate, 0u);
  EXPECT_GT(all.accepted, 0u);
}

} // namespace kiln::runtime::testing

#endif // KILN_TESTS_UNIT_PACKAGE_PACKAGEMUTANTS_H
