//===- Package.cpp - load and check a .kpkg package
//------------------------===//
//
// Loading happens in three stages, each refusing what the next one would
// trip over: the file identifier (so a graph file or a random file gets a
// plain "not a package" rather than a verifier failure), the FlatBuffers
// Verifier (every offset inside the buffer, strings terminated, required
// fields present), and then the semantic checks of checkPackage on the
// copied-out structs. Enum fields are copied as raw numbers and range-checked
// there, so a value written by a newer minor version is reported by name of
// field rather than silently mapped.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/Package.h"

#include "runtime/Half.h"
#include "serialize/schema/package_generated.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

namespace kiln::runtime {

namespace {

template <typename E> constexpr unsigned raw(E e) {
  return static_cast<unsigned>(e);
}

// Highest valid value of each enum, from the schema; a minor version bump
// raises them. The plain C++ enums of Package.h must end at the same value.
constexpr unsigned kMaxDType = raw(pkg::DType::MAX);
constexpr unsigned kMaxRole = raw(pkg::Role::MAX);
constexpr unsigned kMaxTarget = raw(pkg::TargetKind::MAX);
constexpr unsigned kMaxKernelKind = raw(pkg::KernelKind::MAX);
constexpr unsigned kMaxThunkKind = raw(pkg::ThunkKind::MAX);
constexpr unsigned kMaxLibraryKind = raw(pkg::LibraryKind::MAX);
constexpr unsigned kMaxCollectiveKind = raw(pkg::CollectiveKind::MAX);
constexpr unsigned kMaxReduceKind = raw(pkg::ReduceKind::MAX);
constexpr unsigned kMaxInitKind = raw(pkg::InitKind::MAX);
constexpr unsigned kMaxStrategy = raw(pkg::Strategy::MAX);
constexpr unsigned kMaxGemmEpilogue = raw(pkg::GemmEpilogue::MAX);
constexpr unsigned kMaxAttentionLayout = raw(pkg::AttentionLayout::MAX);
static_assert(kMaxAttentionLayout == raw(AttentionLayout::PackedBTHD));
static_assert(kMaxGemmEpilogue == raw(PkgGemmEpilogue::DGelu));
static_assert(kMaxDType == raw(PkgDType::I1));
static_assert(kMaxRole == raw(PkgRole::ModelState));
static_assert(kMaxTarget == raw(TargetKind::Cuda));
static_assert(kMaxKernelKind == raw(KernelKind::Cuda));
static_assert(kMaxThunkKind == raw(ThunkKind::Copy));
static_assert(kMaxLibraryKind == raw(LibraryKind::AttentionGrad));
static_assert(kMaxCollectiveKind == raw(CollectiveKind::Recv));
static_assert(kMaxReduceKind == raw(PkgReduceKind::Mean));
static_assert(kMaxInitKind == raw(PkgInitKind::KaimingNormal));
static_assert(kMaxStrategy == raw(Strategy::TensorParallel));

Status fail(const std::ostringstream &os) { return Status::error(os.str()); }

Status checkEnum(const std::string &where, const char *field, unsigned value,
                 unsigned max) {
  if (value <= max)
    return Status::ok();
  std::ostringstream os;
  os << where << ": " << field << " " << value << " is out of range (0.." << max
     << ")";
  return fail(os);
}

// Checks |shape| and that |size| bytes hold it in |dtype|.
Status checkShapeAndSize(const std::string &where, PkgDType dtype,
                         const std::vector<int64_t> &shape, uint64_t size) {
  uint64_t bytes = pkgBytesPerElement(dtype);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      std::ostringstream os;
      os << where << ": dimension " << d << " is " << shape[d]
         << ", expected >= 0";
      return fail(os);
    }
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(shape[d]),
                               &bytes)) {
      std::ostringstream os;
      os << where << ": the shape's byte size overflows 64 bits";
      return fail(os);
    }
  }
  if (bytes > size) {
    std::ostringstream os;
    os << where << ": the shape needs " << bytes << " bytes, but size is "
       << size;
    return fail(os);
  }
  return Status::ok();
}

Status checkFinite(const std::string &where, const char *field, double value) {
  if (std::isfinite(value))
    return Status::ok();
  std::ostringstream os;
  os << where << ": " << field << " is " << value
     << ", expected a finite number";
  return fail(os);
}

Status checkBufferId(const std::string &where, uint32_t id, size_t count) {
  if (id < count)
    return Status::ok();
  std::ostringstream os;
  os << where << " names buffer " << id << ", but the package has " << count
     << " buffers";
  return fail(os);
}

Status checkSignature(const LoadedPackage &p,
                      const std::vector<SignatureEntry> &entries,
                      const char *kind) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const SignatureEntry &e = entries[i];
    std::string where = std::string(kind) + " " + std::to_string(i);
    if (Status s = checkEnum(where, "role", raw(e.role), kMaxRole); !s.isOk())
      return s;
    if (Status s = checkEnum(where, "dtype", raw(e.dtype), kMaxDType);
        !s.isOk())
      return s;
    if (Status s = checkBufferId(where, e.buffer, p.buffers.size()); !s.isOk())
      return s;
    const PackageBuffer &b = p.buffers[e.buffer];
    if (b.dtype != e.dtype || b.shape != e.shape) {
      std::ostringstream os;
      os << where << " (\"" << e.name << "\"): dtype or shape differs from "
         << "buffer " << e.buffer << "'s";
      return fail(os);
    }
    // An index bound belongs to an integer data input (an output's would be
    // a promise about values the step computes).
    if (e.indexBound != 0 &&
        (e.indexBound < 0 || &entries != &p.inputs || isFloatDType(e.dtype) ||
         (e.role != PkgRole::Input && e.role != PkgRole::Label))) {
      std::ostringstream os;
      os << where << " (\"" << e.name << "\"): index_bound is " << e.indexBound
         << ", but only an integer input or label has one, of at least 1 "
            "(0: none)";
      return fail(os);
    }
    // A parameter copy input names a floating-point parameter input of its
    // shape (an output that updates it does not).
    bool copy = &entries == &p.inputs && e.role == PkgRole::ParameterCopy;
    if (copy || e.copyOf != -1) {
      std::ostringstream os;
      os << where << " (\"" << e.name << "\"): ";
      const SignatureEntry *source =
          e.copyOf >= 0 && size_t(e.copyOf) < entries.size() ? &entries[e.copyOf]
                                                             : nullptr;
      if (!copy)
        os << "copy_of is " << e.copyOf << ", but only a parameter_copy input "
           << "copies a parameter (-1)";
      else if (!source)
        os << "a parameter_copy input needs copy_of, the index of an input "
           << "(0.." << entries.size() - 1 << "), but it is " << e.copyOf;
      else if (source->role != PkgRole::Parameter || source->shape != e.shape ||
               !isFloatDType(source->dtype) || !isFloatDType(e.dtype))
        os << "copies input " << e.copyOf << " (\"" << source->name
           << "\"), which is not a floating-point parameter of its shape";
      else
        continue;
      return fail(os);
    }
  }
  return Status::ok();
}

// An attention library call: its parameters, its operand and result counts
// for its layout, and that every buffer has the shape and type the
// parameters and the layout imply (the runtime indexes them by the
// parameters alone).
Status checkAttentionThunk(const LoadedPackage &p, const std::string &where,
                           const PackageThunk &t) {
  std::ostringstream os;
  bool grad = t.library == LibraryKind::AttentionGrad;
  const char *name = grad ? "attention_grad" : "attention";
  if (!t.hasAttention) {
    os << where << ": an " << name << " library call needs attention "
       << "parameters";
    return fail(os);
  }
  if (p.target.kind != TargetKind::Cuda) {
    os << where << ": an " << name << " library call in a CPU package: only "
       << "CUDA packages carry attention (the CPU pipeline decomposes it)";
    return fail(os);
  }
  const AttentionParams &a = t.attention;
  if (Status s = checkEnum(where, "attention layout", raw(a.layout),
                           kMaxAttentionLayout);
      !s.isOk())
    return s;
  for (auto [field, v] : {std::pair<const char *, int64_t>{"batch", a.batch},
                          {"heads", a.heads},
                          {"q_len", a.qLen},
                          {"kv_len", a.kvLen},
                          {"head_dim", a.headDim},
                          {"value_dim", a.valueDim}})
    if (v < 1) {
      os << where << ": attention " << field << " is " << v
         << ", expected >= 1";
      return fail(os);
    }
  if (Status s = checkFinite(where, "attention scale", a.scale); !s.isOk())
    return s;
  bool packed = a.layout == AttentionLayout::PackedBTHD;
  if (packed && (a.headDim != a.valueDim || a.qLen != a.kvLen)) {
    os << where << ": " << name << " layout packed_bthd needs head_dim == "
       << "value_dim and q_len == kv_len, found head_dim " << a.headDim
       << ", value_dim " << a.valueDim << ", q_len " << a.qLen << ", kv_len "
       << a.kvLen;
    return fail(os);
  }
  size_t operands = packed ? (grad ? 4 : 1) : (grad ? 6 : 3);
  size_t results = packed ? (grad ? 1 : 2) : (grad ? 3 : 2);
  if (t.operands.size() != operands || t.results.size() != results) {
    os << where << ": " << name;
    if (packed)
      os << " (layout " << attentionLayoutName(a.layout) << ")";
    os << " needs " << operands << " operands and " << results
       << " results, found " << t.operands.size() << " and "
       << t.results.size();
    return fail(os);
  }
  const std::vector<int64_t> q{a.batch, a.heads, a.qLen, a.headDim},
      k{a.batch, a.heads, a.kvLen, a.headDim},
      v{a.batch, a.heads, a.kvLen, a.valueDim},
      out{a.batch, a.heads, a.qLen, a.valueDim}, lse{a.batch, a.heads, a.qLen},
      qkv{a.batch, a.qLen, 3, a.heads, a.headDim},
      outPacked{a.batch, a.qLen, a.heads, a.headDim};
  PkgDType type = p.buffers[t.operands[0]].dtype;
  if (type != PkgDType::F32 && type != PkgDType::F16 &&
      type != PkgDType::BF16 && type != PkgDType::F64) {
    os << where << ": " << name << " operand 0 (" << (packed ? "qkv" : "q")
       << ") has dtype " << pkgDTypeName(type)
       << ", expected f16, bf16, f32 or f64";
    return fail(os);
  }
  PkgDType lseType = type == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
  struct Expect {
    const char *what;
    uint32_t buffer;
    const std::vector<int64_t> *shape;
    PkgDType dtype;
  };
  std::vector<Expect> expected;
  if (packed && grad)
    expected = {{"operand 0 (qkv)", t.operands[0], &qkv, type},
                {"operand 1 (out)", t.operands[1], &outPacked, type},
                {"operand 2 (lse)", t.operands[2], &lse, lseType},
                {"operand 3 (dout)", t.operands[3], &outPacked, type},
                {"result 0 (dqkv)", t.results[0], &qkv, type}};
  else if (packed)
    expected = {{"operand 0 (qkv)", t.operands[0], &qkv, type},
                {"result 0 (out)", t.results[0], &outPacked, type},
                {"result 1 (lse)", t.results[1], &lse, lseType}};
  else if (grad)
    expected = {{"operand 0 (q)", t.operands[0], &q, type},
                {"operand 1 (k)", t.operands[1], &k, type},
                {"operand 2 (v)", t.operands[2], &v, type},
                {"operand 3 (out)", t.operands[3], &out, type},
                {"operand 4 (lse)", t.operands[4], &lse, lseType},
                {"operand 5 (dout)", t.operands[5], &out, type},
                {"result 0 (dq)", t.results[0], &q, type},
                {"result 1 (dk)", t.results[1], &k, type},
                {"result 2 (dv)", t.results[2], &v, type}};
  else
    expected = {{"operand 0 (q)", t.operands[0], &q, type},
                {"operand 1 (k)", t.operands[1], &k, type},
                {"operand 2 (v)", t.operands[2], &v, type},
                {"result 0 (out)", t.results[0], &out, type},
                {"result 1 (lse)", t.results[1], &lse, lseType}};
  for (const Expect &e : expected) {
    const PackageBuffer &b = p.buffers[e.buffer];
    if (b.shape != *e.shape || b.dtype != e.dtype) {
      auto dims = [](const std::vector<int64_t> &shape) {
        std::string text = "[";
        for (size_t d = 0; d < shape.size(); ++d)
          text += (d ? "x" : "") + std::to_string(shape[d]);
        return text + "]";
      };
      os << where << ": " << name << " " << e.what << " (buffer " << e.buffer
         << ") is " << dims(b.shape) << " " << pkgDTypeName(b.dtype)
         << ", expected " << dims(*e.shape) << " " << pkgDTypeName(e.dtype);
      return fail(os);
    }
  }
  return Status::ok();
}

// Whether |x| and |y| share arena bytes (an empty buffer shares none).
bool sharesBytes(const PackageBuffer &x, const PackageBuffer &y) {
  return x.size && y.size && x.offset < y.offset + y.size &&
         y.offset < x.offset + x.size;
}

// A library call's results overlap none of its operands and none of each
// other in the arena: cuBLASLt, the convolutions and the attention read
// their operands while they write, so a shared byte would be read after it
// was overwritten (on a GPU, a race). The exceptions are the GEMM operands
// read only at the element written, which may be the result exactly (the
// buffer planner puts a result over such a dying operand, BufferModel.cpp):
// a residual GEMM's C (cuBLASLt reads each element of C before it writes
// that element of D) and DGelu's aux. Empty buffers overlap nothing.
Status checkLibraryCallOverlap(const LoadedPackage &p, const std::string &where,
                               const PackageThunk &t) {
  PkgGemmEpilogueBuffers extra;
  if (t.library == LibraryKind::Gemm && t.hasGemm)
    extra = pkgGemmEpilogueBuffers(t.gemm.epilogue);
  // Operand o is read only at the element of result 0 it is written to.
  auto elementwise = [&](size_t o) {
    if (t.operands.size() != extra.operands())
      return false; // refused below for its counts
    return (extra.c && o + 1 == t.operands.size()) ||
           (extra.auxInput && o == 2);
  };
  for (size_t r = 0; r < t.results.size(); ++r) {
    for (size_t o = 0; o < t.operands.size(); ++o) {
      uint32_t result = t.results[r], operand = t.operands[o];
      if (!sharesBytes(p.buffers[result], p.buffers[operand]))
        continue;
      const PackageBuffer &x = p.buffers[result], &y = p.buffers[operand];
      if (r == 0 && elementwise(o) && x.offset == y.offset && x.size == y.size)
        continue; // C or aux in place of the result
      std::ostringstream os;
      os << where << ": result " << r << " (buffer " << result << ", bytes "
         << x.offset << ".." << x.offset + x.size << ") overlaps operand " << o
         << " (buffer " << operand << ", bytes " << y.offset << ".."
         << y.offset + y.size << "): a library call reads its operands while "
         << "it writes its results";
      return fail(os);
    }
    for (size_t q = 0; q < r; ++q)
      if (sharesBytes(p.buffers[t.results[r]], p.buffers[t.results[q]])) {
        std::ostringstream os;
        os << where << ": results " << q << " and " << r << " (buffers "
           << t.results[q] << " and " << t.results[r]
           << ") overlap in the arena";
        return fail(os);
      }
  }
  return Status::ok();
}

Status checkThunkFields(const LoadedPackage &p, size_t i,
                        const PackageThunk &t) {
  std::string where = "thunk " + std::to_string(i);
  if (Status s = checkEnum(where, "kind", raw(t.kind), kMaxThunkKind);
      !s.isOk())
    return s;
  for (size_t j = 0; j < t.operands.size(); ++j)
    if (Status s = checkBufferId(where + ": operand " + std::to_string(j),
                                 t.operands[j], p.buffers.size());
        !s.isOk())
      return s;
  for (size_t j = 0; j < t.results.size(); ++j)
    if (Status s = checkBufferId(where + ": result " + std::to_string(j),
                                 t.results[j], p.buffers.size());
        !s.isOk())
      return s;
  std::ostringstream os;
  switch (t.kind) {
  case ThunkKind::KernelLaunch:
    if (t.kernel < 0 || static_cast<size_t>(t.kernel) >= p.kernels.size()) {
      os << where << ": kernel " << t.kernel << " is out of range, the "
         << "package has " << p.kernels.size() << " kernels";
      return fail(os);
    }
    break;
  case ThunkKind::LibraryCall:
    if (Status s = checkEnum(where, "library", raw(t.library), kMaxLibraryKind);
        !s.isOk())
      return s;
    if (t.library == LibraryKind::Gemm && !t.hasGemm) {
      os << where << ": a gemm library call needs gemm parameters";
      return fail(os);
    }
    if (t.hasGemm) {
      if (Status s = checkFinite(where, "gemm alpha", t.gemm.alpha); !s.isOk())
        return s;
      if (Status s = checkFinite(where, "gemm beta", t.gemm.beta); !s.isOk())
        return s;
    }
    if (t.hasGemm) {
      if (Status s = checkEnum(where, "gemm epilogue", raw(t.gemm.epilogue),
                               kMaxGemmEpilogue);
          !s.isOk())
        return s;
      PkgGemmEpilogue e = t.gemm.epilogue;
      PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(e);
      size_t operands = extra.operands();
      size_t results = extra.results();
      if (e != PkgGemmEpilogue::None && p.target.kind != TargetKind::Cuda) {
        os << where << ": gemm epilogue " << pkgGemmEpilogueName(e)
           << " in a CPU package: only CUDA packages carry GEMM epilogues";
        return fail(os);
      }
      if (e != PkgGemmEpilogue::None &&
          (t.operands.size() != operands || t.results.size() != results)) {
        os << where << ": gemm epilogue " << pkgGemmEpilogueName(e)
           << " needs " << operands << " operands and " << results
           << " result(s), found " << t.operands.size() << " and "
           << t.results.size();
        return fail(os);
      }
      // C and aux have the result's layout: its dtype and shape (the
      // counts are checked above, so result 0 exists).
      auto sameAsResult = [&](const char *what, uint32_t id) {
        const PackageBuffer &d = p.buffers[t.results[0]];
        const PackageBuffer &b = p.buffers[id];
        if (b.dtype == d.dtype && b.shape == d.shape && b.size == d.size)
          return Status::ok();
        auto dims = [](const std::vector<int64_t> &shape) {
          std::string text = "[";
          for (size_t k = 0; k < shape.size(); ++k)
            text += (k ? "x" : "") + std::to_string(shape[k]);
          return text + "]";
        };
        os << where << ": gemm epilogue " << pkgGemmEpilogueName(e) << " "
           << what << " (buffer " << id << ") is " << dims(b.shape) << " "
           << pkgDTypeName(b.dtype) << " (" << b.size << " bytes), expected "
           << "the result's " << dims(d.shape) << " " << pkgDTypeName(d.dtype)
           << " (" << d.size << " bytes)";
        return fail(os);
      };
      if (extra.c)
        if (Status s = sameAsResult("C", t.operands.back()); !s.isOk())
          return s;
      if (extra.aux)
        if (Status s = sameAsResult("aux", t.results[1]); !s.isOk())
          return s;
      if (extra.auxInput)
        if (Status s = sameAsResult("aux", t.operands[2]); !s.isOk())
          return s;
    }
    if (t.hasGemm &&
        (t.gemm.m < 0 || t.gemm.n < 0 || t.gemm.k < 0 || t.gemm.batch < 1)) {
      os << where << ": gemm m, n, k, batch are " << t.gemm.m << ", "
         << t.gemm.n << ", " << t.gemm.k << ", " << t.gemm.batch
         << ", expected m, n, k >= 0 and batch >= 1";
      return fail(os);
    }
    if (t.library == LibraryKind::Attention ||
        t.library == LibraryKind::AttentionGrad)
      return checkAttentionThunk(p, where, t);
    if (t.library != LibraryKind::Gemm && !t.hasConv) {
      os << where << ": a convolution library call needs conv parameters";
      return fail(os);
    }
    if (t.hasConv)
      if (Status s = pkgCheckConvParams(t.conv); !s.isOk())
        return Status::error(where + " (" + pkgLibraryKindName(t.library) +
                             "): " + s.message());
    break;
  case ThunkKind::Collective:
    if (!t.hasCollective) {
      os << where << ": a collective needs collective parameters";
      return fail(os);
    }
    if (Status s = checkEnum(where, "collective kind", raw(t.collective.kind),
                             kMaxCollectiveKind);
        !s.isOk())
      return s;
    if (Status s = checkEnum(where, "reduction", raw(t.collective.reduction),
                             kMaxReduceKind);
        !s.isOk())
      return s;
    if (!t.collective.groups.empty() || !t.collective.groupsShape.empty()) {
      const CollectiveParams &c = t.collective;
      uint64_t ranks = 0;
      if (c.groupsShape.size() != 2 || c.groupsShape[0] < 0 ||
          c.groupsShape[1] < 0 ||
          __builtin_mul_overflow(static_cast<uint64_t>(c.groupsShape[0]),
                                 static_cast<uint64_t>(c.groupsShape[1]),
                                 &ranks) ||
          ranks != c.groups.size()) {
        os << where << ": collective groups hold " << c.groups.size()
           << " ranks, which does not match groups_shape (";
        for (size_t d = 0; d < c.groupsShape.size(); ++d)
          os << (d ? ", " : "") << c.groupsShape[d];
        os << ")";
        return fail(os);
      }
    }
    break;
  case ThunkKind::Copy:
    if (t.operands.size() != 1 || t.results.size() != 1) {
      os << where << ": a copy takes 1 operand and 1 result, found "
         << t.operands.size() << " and " << t.results.size();
      return fail(os);
    }
    if (p.buffers[t.operands[0]].size != p.buffers[t.results[0]].size) {
      os << where << ": copy from buffer " << t.operands[0] << " ("
         << p.buffers[t.operands[0]].size << " bytes) to buffer "
         << t.results[0] << " (" << p.buffers[t.results[0]].size
         << " bytes): sizes differ";
      return fail(os);
    }
    // The same bytes (nothing to do) or none in common: cudaMemcpyAsync's
    // result is undefined for ranges that partly overlap.
    if (uint64_t from = p.buffers[t.operands[0]].offset,
        to = p.buffers[t.results[0]].offset,
        size = p.buffers[t.results[0]].size;
        from != to &&
        sharesBytes(p.buffers[t.operands[0]], p.buffers[t.results[0]])) {
      os << where << ": copy from bytes " << from << ".." << from + size
         << " to bytes " << to << ".." << to + size
         << ": the ranges partly overlap";
      return fail(os);
    }
    break;
  }
  return Status::ok();
}

// A collective's results and operands: the same bytes only for an
// all-reduce or a broadcast (NCCL and Gloo run them in place, and the
// buffer planner puts them there, BufferModel.cpp), else disjoint; NCCL's
// in-place reduce-scatter and all-gather depend on the rank, which one
// package for every rank cannot say.
Status checkCollectiveOverlap(const LoadedPackage &p, const std::string &where,
                              const PackageThunk &t) {
  bool inPlace = t.collective.kind == CollectiveKind::AllReduce ||
                 t.collective.kind == CollectiveKind::Broadcast;
  for (size_t r = 0; r < t.results.size(); ++r)
    for (size_t o = 0; o < t.operands.size(); ++o) {
      const PackageBuffer &x = p.buffers[t.results[r]];
      const PackageBuffer &y = p.buffers[t.operands[o]];
      if (!sharesBytes(x, y))
        continue;
      if (inPlace && x.offset == y.offset && x.size == y.size)
        continue;
      std::ostringstream os;
      os << where << ": " << pkgCollectiveKindName(t.collective.kind)
         << " result " << r << " (bytes " << x.offset << ".."
         << x.offset + x.size << ") overlaps operand " << o << " (bytes "
         << y.offset << ".." << y.offset + y.size << ")"
         << (inPlace ? " without being it" : "");
      return fail(os);
    }
  return Status::ok();
}

// A thunk's fields, then (its counts and shapes being right) where its
// buffers lie.
Status checkThunk(const LoadedPackage &p, size_t i, const PackageThunk &t) {
  if (Status s = checkThunkFields(p, i, t); !s.isOk())
    return s;
  if (t.kind == ThunkKind::LibraryCall)
    return checkLibraryCallOverlap(p, "thunk " + std::to_string(i), t);
  if (t.kind == ThunkKind::Collective)
    return checkCollectiveOverlap(p, "thunk " + std::to_string(i), t);
  return Status::ok();
}

} // namespace

Status pkgCheckConvParams(const ConvParams &p) {
  auto list = [](const std::vector<int64_t> &v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  for (auto [what, v, rank] :
       {std::tuple<const char *, const std::vector<int64_t> *, size_t>{
            "input shape", &p.inputShape, 4},
        {"filter shape", &p.filterShape, 4},
        {"output shape", &p.outputShape, 4},
        {"strides", &p.strides, 2},
        {"padding", &p.padding, 4},
        {"dilation", &p.dilation, 2}})
    if (v->size() != rank)
      return Status::error(std::string(what) + " must have " +
                           std::to_string(rank) + " entries, but is " + list(*v));
  for (int64_t v : p.inputShape)
    if (v < 0)
      return Status::error("input shape " + list(p.inputShape) +
                           " has a negative size");
  for (auto [what, v, least] :
       {std::tuple<const char *, const std::vector<int64_t> *, int64_t>{
            "filter shape", &p.filterShape, 1},
        {"strides", &p.strides, 1},
        {"dilation", &p.dilation, 1},
        {"padding", &p.padding, 0}})
    for (int64_t x : *v)
      if (x < least)
        return Status::error(std::string(what) + " " + list(*v) +
                             (least ? " must be positive"
                                    : " must be non-negative"));
  if (p.groups <= 0 || p.inputShape[1] % p.groups || p.filterShape[0] % p.groups)
    return Status::error("groups " + std::to_string(p.groups) +
                         " must be positive and divide the input channels (" +
                         std::to_string(p.inputShape[1]) +
                         ") and output channels (" +
                         std::to_string(p.filterShape[0]) + ")");
  if (p.filterShape[1] != p.inputShape[1] / p.groups)
    return Status::error("filter shape " + list(p.filterShape) +
                         " must have " + std::to_string(p.inputShape[1] / p.groups) +
                         " input channels (C / groups), but has " +
                         std::to_string(p.filterShape[1]));
  std::vector<int64_t> expected = {p.inputShape[0], p.filterShape[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    __int128 span = __int128(p.inputShape[2 + i]) + p.padding[2 * i] +
                    p.padding[2 * i + 1] -
                    __int128(p.dilation[i]) * (p.filterShape[2 + i] - 1) - 1;
    if (span < 0)
      return Status::error("the dilated filter " + list(p.filterShape) +
                           " is larger than the padded input " +
                           list(p.inputShape));
    // At most (3 (2^63 - 1) - 1) / 1 + 1: past int64 only by padding.
    __int128 size = span / p.strides[i] + 1;
    if (size > INT64_MAX)
      return Status::error("the padded input " + list(p.inputShape) +
                           " with padding " + list(p.padding) +
                           " makes an output dimension past 2^63 - 1");
    expected[2 + i] = int64_t(size);
  }
  if (expected != p.outputShape)
    return Status::error("output shape must be " + list(expected) +
                         ", but is " + list(p.outputShape));
  return Status::ok();
}

const char *pkgLibraryKindName(LibraryKind kind) {
  switch (kind) {
  case LibraryKind::Gemm: return "gemm";
  case LibraryKind::Conv2D: return "conv2d";
  case LibraryKind::Conv2DInputGrad: return "conv2d_input_grad";
  case LibraryKind::Conv2DFilterGrad: return "conv2d_filter_grad";
  case LibraryKind::Attention: return "attention";
  case LibraryKind::AttentionGrad: return "attention_grad";
  }
  return "unknown";
}

const char *pkgThunkKindName(const LoadedPackage &p, size_t index) {
  const PackageThunk &t = p.thunks[index];
  switch (t.kind) {
  case ThunkKind::KernelLaunch:
    return "kernel";
  case ThunkKind::LibraryCall:
    return pkgLibraryKindName(t.library);
  case ThunkKind::Copy:
    return "copy";
  case ThunkKind::Collective:
    return pkgCollectiveKindName(t.collective.kind);
  }
  return "unknown";
}

std::string pkgDescribeThunk(const LoadedPackage &p, size_t index) {
  const PackageThunk &t = p.thunks[index];
  if (t.kind == ThunkKind::KernelLaunch && t.kernel < p.kernels.size()) {
    const PackageKernel &k = p.kernels[t.kernel];
    return "kernel '" + k.name + "', " + k.entryPoint;
  }
  if (t.kind == ThunkKind::LibraryCall && t.library == LibraryKind::Gemm)
    return "gemm m=" + std::to_string(t.gemm.m) +
           " n=" + std::to_string(t.gemm.n) + " k=" + std::to_string(t.gemm.k) +
           " batch=" + std::to_string(t.gemm.batch);
  return pkgThunkKindName(p, index);
}

const char *pkgGemmEpilogueName(PkgGemmEpilogue epilogue) {
  switch (epilogue) {
  case PkgGemmEpilogue::None: return "none";
  case PkgGemmEpilogue::Bias: return "bias";
  case PkgGemmEpilogue::Relu: return "relu";
  case PkgGemmEpilogue::BiasRelu: return "bias_relu";
  case PkgGemmEpilogue::Gelu: return "gelu";
  case PkgGemmEpilogue::BiasGelu: return "bias_gelu";
  case PkgGemmEpilogue::BiasGradient: return "bias_gradient";
  case PkgGemmEpilogue::Residual: return "residual";
  case PkgGemmEpilogue::BiasResidual: return "bias_residual";
  case PkgGemmEpilogue::GeluAux: return "gelu_aux";
  case PkgGemmEpilogue::BiasGeluAux: return "bias_gelu_aux";
  case PkgGemmEpilogue::DGelu: return "dgelu";
  }
  return "unknown";
}

const char *pkgCollectiveKindName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce: return "all_reduce";
  case CollectiveKind::ReduceScatter: return "reduce_scatter";
  case CollectiveKind::AllGather: return "all_gather";
  case CollectiveKind::Broadcast: return "collective_broadcast";
  case CollectiveKind::Send: return "send";
  case CollectiveKind::Recv: return "recv";
  }
  return "unknown";
}

const char *attentionLayoutName(AttentionLayout layout) {
  switch (layout) {
  case AttentionLayout::BHTD: return "bhtd";
  case AttentionLayout::PackedBTHD: return "packed_bthd";
  }
  return "unknown";
}

PkgGemmEpilogueBuffers pkgGemmEpilogueBuffers(PkgGemmEpilogue e) {
  PkgGemmEpilogueBuffers b;
  b.bias = e == PkgGemmEpilogue::Bias || e == PkgGemmEpilogue::BiasRelu ||
           e == PkgGemmEpilogue::BiasGelu ||
           e == PkgGemmEpilogue::BiasResidual ||
           e == PkgGemmEpilogue::BiasGeluAux;
  b.c = e == PkgGemmEpilogue::Residual || e == PkgGemmEpilogue::BiasResidual;
  b.biasGradient = e == PkgGemmEpilogue::BiasGradient;
  b.aux = e == PkgGemmEpilogue::GeluAux || e == PkgGemmEpilogue::BiasGeluAux;
  b.auxInput = e == PkgGemmEpilogue::DGelu;
  return b;
}

Status checkPackage(const LoadedPackage &p) {
  std::ostringstream os;
  if (p.majorVersion != kPackageMajorVersion ||
      p.minorVersion > kPackageMinorVersion) {
    os << "package version " << p.majorVersion << "." << p.minorVersion
       << " is not supported: this reader reads " << kPackageMajorVersion << "."
       << kPackageMinorVersion << " (same major, minor at most "
       << kPackageMinorVersion << ")";
    return fail(os);
  }
  if (Status s = checkEnum("target", "kind", raw(p.target.kind), kMaxTarget);
      !s.isOk())
    return s;
  if (p.arenaAlignment == 0 || (p.arenaAlignment & (p.arenaAlignment - 1))) {
    os << "arena: alignment " << p.arenaAlignment << " is not a power of two";
    return fail(os);
  }

  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const PackageBuffer &b = p.buffers[i];
    std::string where = "buffer " + std::to_string(i);
    if (Status s = checkEnum(where, "dtype", raw(b.dtype), kMaxDType);
        !s.isOk())
      return s;
    if (Status s = checkEnum(where, "role", raw(b.role), kMaxRole); !s.isOk())
      return s;
    if (Status s = checkShapeAndSize(where, b.dtype, b.shape, b.size);
        !s.isOk())
      return s;
    // Kernels load and store vectors (16 bytes on a GPU) from a buffer's
    // start, and the arena's base has the arena's alignment: a misaligned
    // offset is a fault on a GPU (misaligned address), so it is refused.
    if (b.offset % p.arenaAlignment) {
      os << where << ": offset " << b.offset << " is not a multiple of the "
         << "arena's alignment (" << p.arenaAlignment << " bytes)";
      return fail(os);
    }
    uint64_t end;
    if (__builtin_add_overflow(b.offset, b.size, &end) || end > p.arenaSize) {
      os << where << ": offset " << b.offset << " + size " << b.size
         << " exceeds the arena of " << p.arenaSize << " bytes";
      return fail(os);
    }
    for (auto [field, value] :
         {std::pair<const char *, int32_t>{"aliases", b.aliases},
          {"updates", b.updates}}) {
      if (value < -1 ||
          (value >= 0 && static_cast<size_t>(value) >= p.inputs.size())) {
        os << where << ": " << field << " input " << value
           << ", but the signature has " << p.inputs.size() << " inputs";
        return fail(os);
      }
    }
  }

  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const PackageKernel &k = p.kernels[i];
    std::string where = "kernel " + std::to_string(i);
    if (Status s = checkEnum(where, "kind", raw(k.kind), kMaxKernelKind);
        !s.isOk())
      return s;
    if (k.entryPoint.empty()) {
      os << where << " (\"" << k.name << "\"): entry point is empty";
      return fail(os);
    }
    static const char *axes[] = {"x", "y", "z"};
    for (int d = 0; d < 3; ++d) {
      if (k.block[d] == 0 || k.grid[d] == 0) {
        os << where << ": " << (k.block[d] == 0 ? "block" : "grid") << " "
           << axes[d] << " is 0, expected >= 1";
        return fail(os);
      }
    }
    for (size_t c = 0; c < k.cubins.size(); ++c) {
      const std::vector<uint32_t> &archs = p.target.smArchs;
      if (std::find(archs.begin(), archs.end(), k.cubins[c].arch) ==
          archs.end()) {
        os << where << ": cubin " << c << " is for sm_" << k.cubins[c].arch
           << ", which the target's architectures (";
        for (size_t a = 0; a < archs.size(); ++a)
          os << (a ? ", " : "") << "sm_" << archs[a];
        os << ") do not list";
        return fail(os);
      }
    }
  }

  for (size_t i = 0; i < p.thunks.size(); ++i)
    if (Status s = checkThunk(p, i, p.thunks[i]); !s.isOk())
      return s;

  for (size_t i = 0; i < p.parameterInits.size(); ++i) {
    const ParameterInit &init = p.parameterInits[i];
    std::string where = "parameter init " + std::to_string(i);
    if (Status s = checkEnum(where, "kind", raw(init.kind), kMaxInitKind);
        !s.isOk())
      return s;
    if (Status s = checkBufferId(where, init.buffer, p.buffers.size());
        !s.isOk())
      return s;
    if (Status s = checkFinite(where, "value", init.value); !s.isOk())
      return s;
    if (Status s = checkFinite(where, "scale", init.scale); !s.isOk())
      return s;
    if (init.hasData && init.data.size() != p.buffers[init.buffer].size) {
      os << where << ": data has " << init.data.size() << " bytes, but buffer "
         << init.buffer << " has " << p.buffers[init.buffer].size;
      return fail(os);
    }
  }

  if (Status s = checkSignature(p, p.inputs, "input"); !s.isOk())
    return s;
  if (Status s = checkSignature(p, p.outputs, "output"); !s.isOk())
    return s;
  // An output that updates an input is copied over it after a step.
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const PackageBuffer &from = p.buffers[p.outputs[i].buffer];
    if (from.updates < 0)
      continue;
    const PackageBuffer &to = p.buffers[p.inputs[from.updates].buffer];
    if (from.dtype != to.dtype || from.shape != to.shape) {
      os << "output " << i << " (\"" << p.outputs[i].name << "\") updates input "
         << from.updates << " (\"" << p.inputs[from.updates].name
         << "\"), but their dtypes or shapes differ";
      return fail(os);
    }
  }

  if (Status s = checkEnum("metadata", "strategy", raw(p.metadata.strategy),
                           kMaxStrategy);
      !s.isOk())
    return s;
  if (p.metadata.worldSize == 0) {
    os << "metadata: world size is 0, expected >= 1";
    return fail(os);
  }
  // A shard layout names an input of its shard's size, and its slots tile
  // the unpadded bucket.
  for (const ShardLayout &l : p.metadata.shards) {
    const SignatureEntry *input = nullptr;
    for (const SignatureEntry &e : p.inputs)
      if (e.name == l.name)
        input = &e;
    if (l.worldSize == 0 || l.length < 1 || !input ||
        input->shape != std::vector<int64_t>{l.shardLength()}) {
      os << "metadata: shard layout '" << l.name << "' (" << l.length
         << " elements over " << l.worldSize
         << " ranks) needs an input of that name with shape ["
         << (l.worldSize ? l.shardLength() : 0) << "]";
      return fail(os);
    }
    int64_t next = 0;
    for (const ShardSlot &slot : l.slots) {
      int64_t n = 1;
      for (int64_t d : slot.shape)
        n *= d;
      if (slot.offset != next || n < 0) {
        os << "metadata: shard layout '" << l.name << "': slot '" << slot.name
           << "' starts at " << slot.offset << ", expected " << next;
        return fail(os);
      }
      next += n;
    }
    if (next != l.length) {
      os << "metadata: shard layout '" << l.name << "': its slots hold " << next
         << " elements, expected " << l.length;
      return fail(os);
    }
  }
  return Status::ok();
}

std::vector<PkgUpdateCopy> pkgUpdateCopies(const LoadedPackage &p) {
  std::vector<PkgUpdateCopy> copies;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    uint32_t from = p.outputs[i].buffer;
    const PackageBuffer &b = p.buffers[from];
    if (b.updates < 0)
      continue;
    uint32_t to = p.inputs[b.updates].buffer;
    if (to == from || p.buffers[to].offset == b.offset)
      continue;
    copies.push_back({static_cast<uint32_t>(i), from, to, b.size});
  }
  return copies;
}

namespace {

// The Verifier checks a vector's length word for 4-byte alignment only, so
// in a corrupted file a vector of 8-byte elements may sit at an address that
// is not a multiple of 8: copy the bytes rather than load through a
// misaligned pointer. FlatBuffers is little-endian, as is every host the
// runtime supports.
#if !FLATBUFFERS_LITTLEENDIAN
#error                                                                         \
    "the package loader copies vectors bytewise and needs a little-endian host"
#endif
template <typename T, typename V> std::vector<T> copyVector(const V *v) {
  std::vector<T> out;
  if (v && v->size()) {
    out.resize(v->size());
    static_assert(sizeof(typename V::return_type) == sizeof(T));
    std::memcpy(out.data(), v->Data(), v->size() * sizeof(T));
  }
  return out;
}

std::string copyString(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

std::vector<std::string> copyStrings(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>> *v) {
  std::vector<std::string> out;
  if (v)
    for (const flatbuffers::String *s : *v)
      out.push_back(copyString(s));
  return out;
}

template <typename E, typename F> E castEnum(F value) {
  return static_cast<E>(static_cast<uint8_t>(value));
}

std::array<uint32_t, 3> copyDim3(const pkg::Dim3 *d) {
  if (!d)
    return {1, 1, 1};
  return {d->x(), d->y(), d->z()};
}

SignatureEntry copyEntry(const pkg::SignatureEntry *e) {
  SignatureEntry out;
  out.name = copyString(e->name());
  out.role = castEnum<PkgRole>(e->role());
  out.dtype = castEnum<PkgDType>(e->dtype());
  out.shape = copyVector<int64_t>(e->shape());
  out.buffer = e->buffer();
  out.copyOf = e->copy_of();
  out.indexBound = e->index_bound();
  return out;
}

LoadedPackage copyOut(const pkg::Package *fb) {
  LoadedPackage p;
  p.majorVersion = fb->version()->major_version();
  p.minorVersion = fb->version()->minor_version();
  if (const pkg::Target *t = fb->target()) {
    p.target.kind = castEnum<TargetKind>(t->kind());
    p.target.smArchs = copyVector<uint32_t>(t->sm_archs());
    p.target.triple = copyString(t->triple());
    p.target.cpuFeatures = copyString(t->cpu_features());
  }
  if (const pkg::Arena *a = fb->arena()) {
    p.arenaSize = a->size();
    p.arenaAlignment = a->alignment();
  }
  if (fb->buffers())
    for (const pkg::Buffer *b : *fb->buffers()) {
      PackageBuffer out;
      out.name = copyString(b->name());
      out.dtype = castEnum<PkgDType>(b->dtype());
      out.shape = copyVector<int64_t>(b->shape());
      out.offset = b->offset();
      out.size = b->size();
      out.role = castEnum<PkgRole>(b->role());
      out.aliases = b->aliases();
      out.updates = b->updates();
      p.buffers.push_back(std::move(out));
    }
  if (fb->kernels())
    for (const pkg::Kernel *k : *fb->kernels()) {
      PackageKernel out;
      out.kind = castEnum<KernelKind>(k->kind());
      out.name = copyString(k->name());
      out.entryPoint = copyString(k->entry_point());
      out.source = copyString(k->source());
      out.ptx = copyString(k->ptx());
      if (k->cubins())
        for (const pkg::CubinImage *c : *k->cubins())
          out.cubins.push_back({c->arch(), copyVector<uint8_t>(c->image())});
      out.object = copyVector<uint8_t>(k->object());
      out.block = copyDim3(k->block());
      out.grid = copyDim3(k->grid());
      out.sharedMemoryBytes = k->shared_memory_bytes();
      out.sourceNodes = copyStrings(k->source_nodes());
      out.serialSteps = k->serial_steps();
      out.serialThreads = k->serial_threads();
      out.readBytes = k->read_bytes();
      out.programmaticLaunch = k->programmatic_launch();
      p.kernels.push_back(std::move(out));
    }
  if (fb->thunks())
    for (const pkg::Thunk *t : *fb->thunks()) {
      PackageThunk out;
      out.kind = castEnum<ThunkKind>(t->kind());
      out.kernel = t->kernel();
      out.library = castEnum<LibraryKind>(t->library());
      if (const pkg::GemmParams *g = t->gemm()) {
        out.hasGemm = true;
        out.gemm = {g->m(),
                    g->n(),
                    g->k(),
                    g->batch(),
                    g->transpose_lhs(),
                    g->transpose_rhs(),
                    g->alpha(),
                    g->beta(),
                    castEnum<PkgGemmEpilogue>(g->epilogue())};
      }
      if (const pkg::ConvParams *c = t->conv()) {
        out.hasConv = true;
        out.conv.inputShape = copyVector<int64_t>(c->input_shape());
        out.conv.filterShape = copyVector<int64_t>(c->filter_shape());
        out.conv.outputShape = copyVector<int64_t>(c->output_shape());
        out.conv.strides = copyVector<int64_t>(c->strides());
        out.conv.padding = copyVector<int64_t>(c->padding());
        out.conv.dilation = copyVector<int64_t>(c->dilation());
        out.conv.groups = c->groups();
      }
      if (const pkg::AttentionParams *a = t->attention()) {
        out.hasAttention = true;
        out.attention = {a->batch(),    a->heads(),     a->q_len(),
                         a->kv_len(),   a->head_dim(),  a->value_dim(),
                         a->scale(),    a->causal(),
                         castEnum<AttentionLayout>(a->layout())};
      }
      if (const pkg::CollectiveParams *c = t->collective()) {
        out.hasCollective = true;
        out.collective.kind = castEnum<CollectiveKind>(c->kind());
        out.collective.reduction = castEnum<PkgReduceKind>(c->reduction());
        out.collective.dimension = c->dimension();
        out.collective.root = c->root();
        out.collective.peer = c->peer();
        out.collective.channel = c->channel();
        out.collective.groups = copyVector<int64_t>(c->groups());
        out.collective.groupsShape = copyVector<int64_t>(c->groups_shape());
      }
      out.operands = copyVector<uint32_t>(t->operands());
      out.results = copyVector<uint32_t>(t->results());
      p.thunks.push_back(std::move(out));
    }
  if (fb->parameter_inits())
    for (const pkg::ParameterInit *i : *fb->parameter_inits()) {
      ParameterInit out;
      out.buffer = i->buffer();
      out.kind = castEnum<PkgInitKind>(i->kind());
      out.value = i->value();
      out.scale = i->scale();
      out.seed = i->seed();
      out.hasData = i->data() != nullptr;
      out.data = copyVector<uint8_t>(i->data());
      p.parameterInits.push_back(std::move(out));
    }
  if (const pkg::Signature *s = fb->signature()) {
    if (s->inputs())
      for (const pkg::SignatureEntry *e : *s->inputs())
        p.inputs.push_back(copyEntry(e));
    if (s->outputs())
      for (const pkg::SignatureEntry *e : *s->outputs())
        p.outputs.push_back(copyEntry(e));
  }
  if (const pkg::Metadata *m = fb->metadata()) {
    p.metadata.modelName = copyString(m->model_name());
    p.metadata.strategy = castEnum<Strategy>(m->strategy());
    p.metadata.worldSize = m->world_size();
    p.metadata.compileFlags = copyStrings(m->compile_flags());
    p.metadata.graphHash = copyVector<uint8_t>(m->graph_hash());
    if (m->shards())
      for (const pkg::ShardLayout *l : *m->shards()) {
        ShardLayout layout;
        layout.name = copyString(l->name());
        layout.length = l->length();
        layout.worldSize = l->world_size();
        if (l->slots())
          for (const pkg::ShardSlot *s : *l->slots()) {
            ShardSlot slot;
            slot.name = copyString(s->name());
            slot.offset = s->offset();
            slot.shape = copyVector<int64_t>(s->shape());
            if (const pkg::ParameterInit *i = s->init()) {
              slot.init.kind = castEnum<PkgInitKind>(i->kind());
              slot.init.value = i->value();
              slot.init.scale = i->scale();
              slot.init.seed = i->seed();
            }
            layout.slots.push_back(std::move(slot));
          }
        p.metadata.shards.push_back(std::move(layout));
      }
  }
  return p;
}

} // namespace

std::vector<size_t> pkgParameterCopiesOf(const LoadedPackage &p,
                                         size_t parameter) {
  std::vector<size_t> copies;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (p.inputs[i].role == PkgRole::ParameterCopy &&
        p.inputs[i].copyOf == static_cast<int32_t>(parameter))
      copies.push_back(i);
  return copies;
}

void pkgFillParameterCopy(const LoadedPackage &p, size_t copy,
                          const void *parameter, void *out) {
  const SignatureEntry &to = p.inputs[copy];
  PkgDType from = p.inputs[to.copyOf].dtype;
  int64_t n = 1;
  for (int64_t d : to.shape)
    n *= d;
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (from) {
    case PkgDType::F64: v = static_cast<float>(static_cast<const double *>(parameter)[i]); break;
    case PkgDType::F32: v = static_cast<const float *>(parameter)[i]; break;
    case PkgDType::F16: v = f16ToFloat(static_cast<const uint16_t *>(parameter)[i]); break;
    case PkgDType::BF16: v = bf16ToFloat(static_cast<const uint16_t *>(parameter)[i]); break;
    default: break; // not a float: checkPackage refuses the package
    }
    switch (to.dtype) {
    case PkgDType::F64: static_cast<double *>(out)[i] = v; break;
    case PkgDType::F32: static_cast<float *>(out)[i] = v; break;
    case PkgDType::F16: static_cast<uint16_t *>(out)[i] = floatToF16(v); break;
    case PkgDType::BF16: static_cast<uint16_t *>(out)[i] = floatToBf16(v); break;
    default: break;
    }
  }
}

StatusOr<LoadedPackage> loadPackageFromBytes(const uint8_t *data, size_t size) {
  // A FlatBuffer starts with the root offset, then the file identifier.
  if (!data || size < 8) {
    std::ostringstream os;
    os << "not a Kiln package: " << size
       << " bytes is too short to hold a FlatBuffers header (8 bytes)";
    return fail(os);
  }
  if (!pkg::PackageBufferHasIdentifier(data)) {
    std::string found(reinterpret_cast<const char *>(data) + 4, 4);
    for (char &c : found)
      if (c < 0x20 || c > 0x7e)
        c = '?';
    std::ostringstream os;
    os << "not a Kiln package: file identifier is '" << found << "', expected '"
       << pkg::PackageIdentifier() << "'";
    return fail(os);
  }
  // The Verifier checks alignment relative to the buffer's start; copy a
  // buffer that does not start on an 8-byte boundary so that relative and
  // absolute alignment agree.
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((size + 7) / 8);
    std::memcpy(aligned.data(), data, size);
    data = reinterpret_cast<const uint8_t *>(aligned.data());
  }
  flatbuffers::Verifier verifier(data, size);
  if (!verifier.VerifyBuffer<pkg::Package>(nullptr))
    return Status::error("malformed package: the FlatBuffers verifier "
                         "rejected it (truncated or corrupt)");
  LoadedPackage p = copyOut(pkg::GetPackage(data));
  if (Status s = checkPackage(p); !s.isOk())
    return s;
  return p;
}

StatusOr<LoadedPackage> loadPackage(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error(path + ": cannot open for reading");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad())
    return Status::error(path + ": read failed");
  StatusOr<LoadedPackage> p = loadPackageFromBytes(bytes.data(), bytes.size());
  if (!p.isOk())
    return Status::error(path + ": " + p.status().message());
  return p;
}

} // namespace kiln::runtime
