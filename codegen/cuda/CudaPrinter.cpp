//===- CudaPrinter.cpp - the CUDA C++ text of a kernel module -------------===//
//
// The prelude every generated kernel starts with, and the printer of
// buildCudaKernelModule's MLIR (arith, math, scf.for/if/execute_region,
// memref loads and stores, the kiln.* intrinsic calls) as CUDA C++ (see
// CudaEmitter.h; ops outside that subset are refused with a diagnostic
// naming them).
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaPrinter.h"

#include "codegen/cuda/CudaEmitter.h"
#include "ir/HostTensor.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cinttypes>
#include <cstring>

using namespace mlir;

namespace kiln {

const char *const kCudaPrelude = R"cuda(
#ifndef KILN_CUDA_PRELUDE
#define KILN_CUDA_PRELUDE
// Kiln CUDA kernel prelude: element types, NaN-propagating min/max, vector
// accesses and warp/block reductions used by the generated kernels.
#ifndef KILN_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
typedef long long kiln_index;
static __device__ __forceinline__ float kiln_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float kiln_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ __half kiln_f16_bits(unsigned short bits) {
  __half_raw r; r.x = bits; return __half(r);
}
static __device__ __forceinline__ __nv_bfloat16 kiln_bf16_bits(unsigned short bits) {
  __nv_bfloat16_raw r; r.x = bits; return __nv_bfloat16(r);
}
static __device__ __forceinline__ float kiln_bits_f32(unsigned bits) { return __int_as_float((int)bits); }
static __device__ __forceinline__ double kiln_bits_f64(unsigned long long bits) { return __longlong_as_double((long long)bits); }
static __device__ __forceinline__ float kiln_maximumf(float a, float b) { return a != a ? a : b != b ? b : fmaxf(a, b); }
static __device__ __forceinline__ float kiln_minimumf(float a, float b) { return a != a ? a : b != b ? b : fminf(a, b); }
static __device__ __forceinline__ double kiln_maximumf(double a, double b) { return a != a ? a : b != b ? b : fmax(a, b); }
static __device__ __forceinline__ double kiln_minimumf(double a, double b) { return a != a ? a : b != b ? b : fmin(a, b); }
template <class T, int N> struct alignas(sizeof(T) * N) kiln_vec { T v[N]; };
// The vector loads and stores (kiln.vload, kiln.vstore) go through p as a
// kiln_vec of N. A GPU faults on an address not aligned to the vector's
// size; the emulation (codegen/cuda/CudaEmulation.h) refuses it with a
// message, where x86 would load it.
template <int N, class T> static __device__ __forceinline__ kiln_vec<T, N> *kiln_vec_at(T *p) {
#ifdef KILN_CUDA_EMULATION
  kiln_emulation_aligned(p, sizeof(kiln_vec<T, N>), "vector", "store");
#endif
  return reinterpret_cast<kiln_vec<T, N> *>(p);
}
template <int N, class T> static __device__ __forceinline__ const kiln_vec<T, N> *kiln_vec_at(const T *p) {
#ifdef KILN_CUDA_EMULATION
  kiln_emulation_aligned(p, sizeof(kiln_vec<T, N>), "vector", "load");
#endif
  return reinterpret_cast<const kiln_vec<T, N> *>(p);
}
struct kiln_sum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct kiln_prod { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct kiln_max {
  __device__ float operator()(float a, float b) const { return kiln_maximumf(a, b); }
  __device__ double operator()(double a, double b) const { return kiln_maximumf(a, b); }
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};
struct kiln_min {
  __device__ float operator()(float a, float b) const { return kiln_minimumf(a, b); }
  __device__ double operator()(double a, double b) const { return kiln_minimumf(a, b); }
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};
// Every lane of the warp gets op over the warp's values (butterfly: each
// pair computes the same commutative result, so all lanes agree bitwise).
template <class T, class Op> static __device__ __forceinline__ T kiln_warp_allreduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// Every thread of the block gets op over the block's values: warps reduce,
// then every thread combines the warps' results in warp order.
template <class T, class Op> static __device__ T kiln_block_allreduce(T v, Op op) {
  __shared__ T partial[32];
  v = kiln_warp_allreduce(v, op);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0)
    partial[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = partial[0];
  for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w)
    r = op(r, partial[w]);
  return r;
}
// N values reduced over the block, each exactly as kiln_block_allreduce
// reduces it, behind one pair of barriers.
template <class T, int N> struct kiln_tuple { T v[N]; };
template <class T, int N, class Op> static __device__ kiln_tuple<T, N> kiln_block_allreduce_n(kiln_tuple<T, N> t, Op op) {
  __shared__ T partial[N][32];
#pragma unroll
  for (int i = 0; i < N; ++i)
    t.v[i] = kiln_warp_allreduce(t.v[i], op);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      partial[i][threadIdx.x >> 5] = t.v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    t.v[i] = partial[i][0];
    for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w)
      t.v[i] = op(t.v[i], partial[i][w]);
  }
  return t;
}
// The row cache (CudaEmitter.h): the block copies a row of n elements
// from global memory into its dynamic shared memory, 16-byte vectors when
// both ends are 16-byte aligned, then the rest element by element. The
// barrier before lets the block's threads finish reading the previous
// row; the one after makes every column visible to every thread.
template <class T> static __device__ void kiln_stage_row(T *dst, const T *src, kiln_index n) {
  constexpr int V = 16 / sizeof(T);
  __syncthreads();
  kiln_index done = 0;
  if (V > 1 && reinterpret_cast<unsigned long long>(src) % 16 == 0 &&
      reinterpret_cast<unsigned long long>(dst) % 16 == 0) {
    done = n / V * V;
#pragma unroll 4
    for (kiln_index i = (kiln_index)threadIdx.x * V; i < done; i += (kiln_index)blockDim.x * V)
      *reinterpret_cast<kiln_vec<T, V> *>(dst + i) = *reinterpret_cast<const kiln_vec<T, V> *>(src + i);
  }
  for (kiln_index i = done + threadIdx.x; i < n; i += blockDim.x)
    dst[i] = src[i];
  __syncthreads();
}
// Scatter rows (CudaEmitter.h): the block lists, in kiln_scatter_list and
// in increasing order, the positions p in [begin, begin + blockDim.x *
// KILN_SCATTER_PER_THREAD) below n whose index idx[p] names |row|, and
// every thread gets their count. Each thread tests KILN_SCATTER_PER_THREAD
// consecutive positions; a warp scan of the hit counts and the warps'
// totals (in warp order) give each hit its slot. The barrier before lets
// the block finish reading the previous chunk's list; the one after
// publishes this one.
#define KILN_SCATTER_PER_THREAD 8
#define KILN_SCATTER_LIST (256 * KILN_SCATTER_PER_THREAD)
template <class I>
static __device__ __forceinline__ kiln_index kiln_scatter_collect(const I *idx, kiln_index begin, kiln_index n,
                                                  kiln_index row, unsigned *list) {
  __shared__ unsigned warp_hits[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const kiln_index first = begin + (kiln_index)threadIdx.x * KILN_SCATTER_PER_THREAD;
  unsigned mine = 0, hits = 0;
  for (int j = 0; j < KILN_SCATTER_PER_THREAD; ++j)
    if (first + j < n && (kiln_index)idx[first + j] == row) {
      mine |= 1u << j;
      ++hits;
    }
  unsigned scan = hits;
  for (unsigned d = 1; d < 32; d <<= 1) {
    unsigned other = __shfl_up_sync(0xffffffffu, scan, d);
    if (lane >= d)
      scan += other;
  }
  __syncthreads();
  if (lane == 31u)
    warp_hits[warp] = scan;
  __syncthreads();
  unsigned slot = scan - hits, total = 0;
  for (unsigned w = 0; w < (blockDim.x + 31u) / 32u; ++w) {
    slot += w < warp ? warp_hits[w] : 0u;
    total += warp_hits[w];
  }
  for (int j = 0; j < KILN_SCATTER_PER_THREAD; ++j)
    if (mine >> j & 1u)
      list[slot++] = (unsigned)(first + j);
  __syncthreads();
  return (kiln_index)total;
}
#endif // KILN_CUDA_PRELUDE
)cuda";

StringRef cudaIntrinsicName(StringRef symbol) {
  return symbol.rsplit('.').first;
}

namespace {

class Printer {
public:
  explicit Printer(llvm::raw_ostream &os, std::string prefix)
      : os_(os), prefix_(std::move(prefix)) {}

  LogicalResult printModule(ModuleOp module, StringRef name) {
    for (auto global : module.getOps<memref::GlobalOp>())
      if (failed(printGlobal(global)))
        return failure();
    auto func = module.lookupSymbol<func::FuncOp>(kCudaKernelFunc);
    std::string params;
    std::vector<std::string> casts;
    unsigned numArgs = func.getNumArguments();
    unsigned numInputs = numArgs - numOutputs_;
    for (unsigned i = 0; i < numArgs; ++i) {
      auto type = cast<MemRefType>(func.getArgument(i).getType());
      std::string elem = cType(type.getElementType());
      if (elem.empty())
        return func.emitError() << "CUDA: unsupported element type "
                                << type.getElementType();
      std::string argName = i < numInputs ? "in" + std::to_string(i)
                                          : "out" + std::to_string(i - numInputs);
      names_[func.getArgument(i)] = argName;
      std::string qualified = (i < numInputs ? "const " : "") + elem + " *";
      params += (i ? ", " : "") + qualified + argName;
      casts.push_back("(" + qualified + ")buffers[" + std::to_string(i) + "]");
    }
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << blockThreads_
        << ") " << name << "(" << params << ") {\n";
    indent_ = 1;
    // Programmatic dependent launch (CudaKernelSource::programmaticLaunch):
    // launched with programmatic stream serialization, the kernel's blocks
    // may start before the previous kernel on the stream has finished, so
    // it waits for that kernel's results before touching global memory;
    // then the next kernel may start its blocks (they wait the same way).
    os_ << "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n";
    line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
    line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
    os_ << "#endif\n";
    if (dynamicSharedBytes_) {
      // The row cache (CudaEmitter.h); the emulation gives each block its
      // own array of the launch's size.
      line("// " + std::to_string(dynamicSharedBytes_) +
           " bytes of dynamic shared memory: the row cache");
      os_ << "#ifndef KILN_CUDA_EMULATION\n";
      line("extern __shared__ __align__(16) unsigned char kiln_shared[];");
      os_ << "#else\n";
      line("unsigned char *const kiln_shared = kiln_emulation_dynamic_shared();");
      os_ << "#endif\n";
    }
    bool scatterRows = llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp f) {
      return cudaIntrinsicName(f.getSymName()) == "kiln.scatter_collect";
    });
    if (scatterRows)
      line("__shared__ unsigned kiln_scatter_list[KILN_SCATTER_LIST];");
    if (failed(printBlock(func.getBody().front())))
      return failure();
    os_ << "}\n";
    os_ << "#ifdef KILN_CUDA_EMULATION\nextern \"C\" void " << name
        << "_host(void **buffers, unsigned grid, unsigned block) {\n"
        << "  (void)buffers;\n  kiln_emulate(grid, block, [&] { " << name << "(";
    for (size_t i = 0; i < casts.size(); ++i)
      os_ << (i ? ", " : "") << casts[i];
    os_ << "); }";
    if (dynamicSharedBytes_)
      os_ << ", " << dynamicSharedBytes_ << "u";
    os_ << ");\n}\n#endif\n";
    return success();
  }

  void setNumOutputs(unsigned n) { numOutputs_ = n; }
  void setDynamicSharedBytes(uint32_t n) { dynamicSharedBytes_ = n; }
  void setBlockThreads(unsigned n) { blockThreads_ = n; }

private:
  static std::string cType(Type type) {
    if (type.isF32())
      return "float";
    if (type.isF64())
      return "double";
    if (type.isF16())
      return "__half";
    if (type.isBF16())
      return "__nv_bfloat16";
    if (type.isIndex())
      return "kiln_index";
    if (type.isInteger(1))
      return "bool";
    if (type.isInteger(8))
      return "signed char";
    if (type.isInteger(16))
      return "short";
    if (type.isInteger(32))
      return "int";
    if (type.isInteger(64))
      return "long long";
    return "";
  }
  static bool isHalf(Type type) { return type.isF16() || type.isBF16(); }
  static std::string unsignedType(Type type) {
    if (type.isInteger(1))
      return "bool";
    if (type.isInteger(8))
      return "unsigned char";
    if (type.isInteger(16))
      return "unsigned short";
    if (type.isInteger(32))
      return "unsigned";
    return "unsigned long long";
  }

  void line(const std::string &text) {
    for (unsigned i = 0; i < indent_; ++i)
      os_ << "  ";
    os_ << text << "\n";
  }

  std::string fresh() { return "v" + std::to_string(next_++); }

  // The value's expression; f16/bf16 values as f32 when |asF32|.
  std::string ref(Value v, bool asF32 = false) {
    std::string name = names_.lookup(v);
    if (asF32 && isHalf(v.getType()))
      return "kiln_f32(" + name + ")";
    return name;
  }

  // Declares |result| = |expr| (an f32 expression when the result is
  // f16/bf16 and |fromF32|).
  void define(Value result, const std::string &expr, bool fromF32 = false) {
    std::string name = fresh();
    names_[result] = name;
    Type type = result.getType();
    std::string value = expr;
    if (fromF32 && isHalf(type))
      value = std::string(type.isF16() ? "__float2half_rn" : "__float2bfloat16_rn") +
              "(" + expr + ")";
    line("const " + cType(type) + " " + name + " = " + value + ";");
  }

  std::string floatLiteral(Type type, const llvm::APFloat &value) {
    uint64_t bits = value.bitcastToAPInt().getZExtValue();
    if (type.isF16() || type.isBF16())
      return std::string(type.isF16() ? "kiln_f16_bits" : "kiln_bf16_bits") +
             "(0x" + llvm::utohexstr(bits) + ")";
    if (!value.isFinite())
      return type.isF64() ? "kiln_bits_f64(0x" + llvm::utohexstr(bits) + "ull)"
                          : "kiln_bits_f32(0x" + llvm::utohexstr(bits) + "u)";
    char buffer[64];
    if (type.isF64())
      std::snprintf(buffer, sizeof buffer, "%a", value.convertToDouble());
    else
      std::snprintf(buffer, sizeof buffer, "%af", double(value.convertToFloat()));
    return buffer;
  }

  std::string intLiteral(Type type, const llvm::APInt &value) {
    if (type.isInteger(1))
      return value.isZero() ? "false" : "true";
    int64_t v = value.getSExtValue();
    if (v == INT64_MIN)
      return "(-9223372036854775807LL - 1)";
    return "(" + cType(type) + ")" + std::to_string(v) + "LL";
  }

  LogicalResult printGlobal(memref::GlobalOp global) {
    auto type = global.getType();
    Type element = type.getElementType();
    auto value = dyn_cast_or_null<DenseElementsAttr>(global.getInitialValueAttr());
    if (!value)
      return global.emitError() << "CUDA: expected a dense constant";
    std::string name = prefix_ + global.getSymName().str();
    globals_[global.getSymName()] = name;
    std::string elementType = isHalf(element) ? "unsigned short" : cType(element);
    std::string text = "static __device__ const " + elementType + " " + name +
                       "[" + std::to_string(std::max<int64_t>(type.getNumElements(), 1)) +
                       "] = {";
    int64_t n = type.getNumElements();
    for (int64_t i = 0; i < n; ++i) {
      if (i)
        text += ", ";
      if (isa<FloatType>(element)) {
        llvm::APFloat v = value.getValues<llvm::APFloat>()[value.isSplat() ? 0 : i];
        if (isHalf(element))
          text += "0x" + llvm::utohexstr(v.bitcastToAPInt().getZExtValue());
        else
          text += floatLiteral(element, v);
      } else {
        text += intLiteral(element, value.getValues<llvm::APInt>()[value.isSplat() ? 0 : i]);
      }
    }
    os_ << text << "};\n";
    return success();
  }

  std::string linear(Value memref, ValueRange indices) {
    auto type = cast<MemRefType>(memref.getType());
    if (indices.empty())
      return "0";
    std::string expr = ref(indices[0]);
    for (size_t i = 1; i < indices.size(); ++i)
      expr = "(" + expr + ") * " + std::to_string(type.getDimSize(i)) + " + " +
             ref(indices[i]);
    return expr;
  }

  LogicalResult printBlock(Block &block) {
    for (Operation &op : block)
      if (failed(printOp(&op)))
        return failure();
    return success();
  }

  LogicalResult printRegionBody(Region &region) {
    ++indent_;
    LogicalResult result = printBlock(region.front());
    --indent_;
    return result;
  }

  LogicalResult printOp(Operation *op);
  LogicalResult printArith(Operation *op, bool &handled);
  LogicalResult printMath(Operation *op, bool &handled);
  LogicalResult printCall(func::CallOp call);

  llvm::raw_ostream &os_;
  std::string prefix_;
  unsigned indent_ = 0, next_ = 0, numOutputs_ = 0;
  uint32_t dynamicSharedBytes_ = 0;
  unsigned blockThreads_ = kCudaBlockThreads;
  llvm::DenseMap<Value, std::string> names_;
  llvm::StringMap<std::string> globals_;
  // Variables that scf.yield assigns: per scf op, its result variables.
  llvm::DenseMap<Operation *, SmallVector<std::string>> carried_;
};

std::string cmpfExpr(arith::CmpFPredicate p, const std::string &a,
                     const std::string &b) {
  using P = arith::CmpFPredicate;
  std::string unord = "(" + a + " != " + a + " || " + b + " != " + b + ")";
  switch (p) {
  case P::AlwaysFalse: return "false";
  case P::AlwaysTrue: return "true";
  case P::OEQ: return "(" + a + " == " + b + ")";
  case P::OGT: return "(" + a + " > " + b + ")";
  case P::OGE: return "(" + a + " >= " + b + ")";
  case P::OLT: return "(" + a + " < " + b + ")";
  case P::OLE: return "(" + a + " <= " + b + ")";
  case P::ONE: return "(" + a + " < " + b + " || " + a + " > " + b + ")";
  case P::ORD: return "!" + unord;
  case P::UEQ: return "!(" + a + " < " + b + " || " + a + " > " + b + ")";
  case P::UGT: return "!(" + a + " <= " + b + ")";
  case P::UGE: return "!(" + a + " < " + b + ")";
  case P::ULT: return "!(" + a + " >= " + b + ")";
  case P::ULE: return "!(" + a + " > " + b + ")";
  case P::UNE: return "(" + a + " != " + b + ")";
  case P::UNO: return unord;
  }
  return "false";
}

LogicalResult Printer::printArith(Operation *op, bool &handled) {
  handled = true;
  auto binary = [&](const char *symbol) {
    bool isFloat = isa<FloatType>(op->getResult(0).getType());
    define(op->getResult(0),
           ref(op->getOperand(0), isFloat) + " " + symbol + " " +
               ref(op->getOperand(1), isFloat),
           isFloat);
  };
  auto unsignedBinary = [&](const char *symbol) {
    Type t = op->getResult(0).getType();
    std::string u = unsignedType(t);
    define(op->getResult(0), "(" + cType(t) + ")((" + u + ")" +
                                 ref(op->getOperand(0)) + " " + symbol + " (" +
                                 u + ")" + ref(op->getOperand(1)) + ")");
  };
  auto call2 = [&](const std::string &fn) {
    bool isFloat = isa<FloatType>(op->getResult(0).getType());
    define(op->getResult(0),
           fn + "(" + ref(op->getOperand(0), isFloat) + ", " +
               ref(op->getOperand(1), isFloat) + ")",
           isFloat);
  };
  auto ternary = [&](const char *cmp) {
    std::string a = ref(op->getOperand(0)), b = ref(op->getOperand(1));
    define(op->getResult(0), "(" + a + " " + cmp + " " + b + " ? " + a + " : " + b + ")");
  };
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    Type type = c.getType();
    if (auto f = dyn_cast<FloatAttr>(c.getValue()))
      names_[c.getResult()] = floatLiteral(type, f.getValue());
    else if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      names_[c.getResult()] =
          type.isIndex() ? "(kiln_index)" + std::to_string(i.getInt()) + "LL"
                         : intLiteral(type, i.getValue());
    else
      return op->emitError() << "CUDA: unsupported constant " << c.getValue();
    return success();
  }
  // Integer sums, differences, products and left shifts wrap (arith's
  // integers are two's complement: an i32 kiln.add past 2^31, a kiln.reduce
  // prod's i64 accumulator); C++'s signed arithmetic would be undefined
  // there, so they are computed unsigned and converted back (modular: C++20
  // defines it, and NVRTC's C++17 implements it so). Index arithmetic
  // (addresses) never wraps and stays signed.
  if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::ShLIOp>(op) &&
      isa<IntegerType>(op->getResult(0).getType())) {
    unsignedBinary(isa<arith::AddIOp>(op)   ? "+"
                   : isa<arith::SubIOp>(op) ? "-"
                   : isa<arith::MulIOp>(op) ? "*"
                                            : "<<");
    return success();
  }
  if (isa<arith::AddFOp, arith::AddIOp>(op)) {
    binary("+");
    return success();
  }
  if (isa<arith::SubFOp, arith::SubIOp>(op)) {
    binary("-");
    return success();
  }
  if (isa<arith::MulFOp, arith::MulIOp>(op)) { binary("*"); return success(); }
  if (isa<arith::DivFOp, arith::DivSIOp>(op)) { binary("/"); return success(); }
  if (isa<arith::RemSIOp>(op)) { binary("%"); return success(); }
  if (isa<arith::AndIOp>(op)) { binary("&"); return success(); }
  if (isa<arith::OrIOp>(op)) { binary("|"); return success(); }
  if (isa<arith::XOrIOp>(op)) { binary("^"); return success(); }
  if (isa<arith::ShLIOp>(op)) { binary("<<"); return success(); }
  if (isa<arith::ShRSIOp>(op)) { binary(">>"); return success(); }
  if (isa<arith::DivUIOp>(op)) { unsignedBinary("/"); return success(); }
  if (isa<arith::RemUIOp>(op)) { unsignedBinary("%"); return success(); }
  if (isa<arith::ShRUIOp>(op)) { unsignedBinary(">>"); return success(); }
  if (isa<arith::RemFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmod" : "fmodf");
    return success();
  }
  if (isa<arith::MaximumFOp>(op)) { call2("kiln_maximumf"); return success(); }
  if (isa<arith::MinimumFOp>(op)) { call2("kiln_minimumf"); return success(); }
  if (isa<arith::MaxNumFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmax" : "fmaxf");
    return success();
  }
  if (isa<arith::MinNumFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmin" : "fminf");
    return success();
  }
  if (isa<arith::MaxSIOp>(op)) { ternary(">"); return success(); }
  if (isa<arith::MinSIOp>(op)) { ternary("<"); return success(); }
  if (auto neg = dyn_cast<arith::NegFOp>(op)) {
    define(neg.getResult(), "-" + ref(neg.getOperand(), true), true);
    return success();
  }
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    define(cmp.getResult(), cmpfExpr(cmp.getPredicate(), ref(cmp.getLhs(), true),
                                     ref(cmp.getRhs(), true)));
    return success();
  }
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    using P = arith::CmpIPredicate;
    std::string a = ref(cmp.getLhs()), b = ref(cmp.getRhs());
    std::string u = "(" + unsignedType(cmp.getLhs().getType()) + ")";
    std::string expr;
    switch (cmp.getPredicate()) {
    case P::eq: expr = a + " == " + b; break;
    case P::ne: expr = a + " != " + b; break;
    case P::slt: expr = a + " < " + b; break;
    case P::sle: expr = a + " <= " + b; break;
    case P::sgt: expr = a + " > " + b; break;
    case P::sge: expr = a + " >= " + b; break;
    case P::ult: expr = u + a + " < " + u + b; break;
    case P::ule: expr = u + a + " <= " + u + b; break;
    case P::ugt: expr = u + a + " > " + u + b; break;
    case P::uge: expr = u + a + " >= " + u + b; break;
    }
    define(cmp.getResult(), "(" + expr + ")");
    return success();
  }
  if (auto select = dyn_cast<arith::SelectOp>(op)) {
    define(select.getResult(), ref(select.getCondition()) + " ? " +
                                   ref(select.getTrueValue()) + " : " +
                                   ref(select.getFalseValue()));
    return success();
  }
  if (auto ext = dyn_cast<arith::ExtFOp>(op)) {
    Type to = ext.getType();
    define(ext.getResult(), "(" + cType(to) + ")" + ref(ext.getIn(), true));
    return success();
  }
  if (auto trunc = dyn_cast<arith::TruncFOp>(op)) {
    Type from = trunc.getIn().getType(), to = trunc.getType();
    std::string in = ref(trunc.getIn(), true);
    if (to.isF32())
      define(trunc.getResult(), "(float)" + in);
    else if (from.isF64())
      define(trunc.getResult(), std::string(to.isF16() ? "__double2half" : "__double2bfloat16") +
                                    "(" + in + ")");
    else
      define(trunc.getResult(), in, /*fromF32=*/true);
    return success();
  }
  if (isa<arith::SIToFPOp, arith::UIToFPOp>(op)) {
    Value in = op->getOperand(0);
    Type to = op->getResult(0).getType();
    std::string src = isa<arith::UIToFPOp>(op)
                          ? "(" + unsignedType(in.getType()) + ")" + ref(in)
                          : ref(in);
    if (isHalf(to))
      define(op->getResult(0), "(float)" + src, true);
    else
      define(op->getResult(0), "(" + cType(to) + ")" + src);
    return success();
  }
  if (isa<arith::FPToSIOp, arith::FPToUIOp>(op)) {
    Type to = op->getResult(0).getType();
    std::string cast = isa<arith::FPToUIOp>(op) ? unsignedType(to) : cType(to);
    define(op->getResult(0),
           "(" + cType(to) + ")(" + cast + ")" + ref(op->getOperand(0), true));
    return success();
  }
  if (isa<arith::ExtSIOp, arith::TruncIOp, arith::IndexCastOp>(op)) {
    Type to = op->getResult(0).getType();
    if (to.isInteger(1))
      define(op->getResult(0), "(bool)(" + ref(op->getOperand(0)) + " & 1)");
    else
      define(op->getResult(0), "(" + cType(to) + ")" + ref(op->getOperand(0)));
    return success();
  }
  if (auto mul = dyn_cast<arith::MulUIExtendedOp>(op)) {
    // The 64-bit product of two unsigned 32-bit words as its low and high
    // words (kiln.dropout's Philox rounds): no signed overflow.
    if (!mul.getLhs().getType().isInteger(32))
      return op->emitError() << "CUDA: mului_extended of "
                             << mul.getLhs().getType() << " (expected i32)";
    std::string a = "(unsigned)" + ref(mul.getLhs()), b = "(unsigned)" + ref(mul.getRhs());
    define(mul.getLow(), "(" + cType(mul.getLow().getType()) + ")(" + a + " * " + b + ")");
    define(mul.getHigh(),
           "(" + cType(mul.getHigh().getType()) + ")__umulhi(" + a + ", " + b + ")");
    return success();
  }
  if (isa<arith::ExtUIOp, arith::IndexCastUIOp>(op)) {
    Value in = op->getOperand(0);
    define(op->getResult(0), "(" + cType(op->getResult(0).getType()) + ")(" +
                                 unsignedType(in.getType()) + ")" + ref(in));
    return success();
  }
  if (auto bitcast = dyn_cast<arith::BitcastOp>(op)) {
    Type to = bitcast.getType();
    std::string name = fresh();
    names_[bitcast.getResult()] = name;
    line(cType(to) + " " + name + ";");
    line("memcpy(&" + name + ", &" + ref(bitcast.getIn()) + ", sizeof " + name + ");");
    return success();
  }
  handled = false;
  return success();
}

LogicalResult Printer::printMath(Operation *op, bool &handled) {
  handled = true;
  Type type = op->getResult(0).getType();
  bool f64 = type.isF64();
  auto unary = [&](const std::string &fn) {
    define(op->getResult(0),
           fn + (f64 ? "" : "f") + "(" + ref(op->getOperand(0), true) + ")", true);
  };
  auto binary = [&](const std::string &fn) {
    define(op->getResult(0),
           fn + (f64 ? "" : "f") + "(" + ref(op->getOperand(0), true) + ", " +
               ref(op->getOperand(1), true) + ")",
           true);
  };
  if (isa<math::ExpOp>(op)) unary("exp");
  else if (isa<math::Exp2Op>(op)) unary("exp2");
  else if (isa<math::ExpM1Op>(op)) unary("expm1");
  else if (isa<math::LogOp>(op)) unary("log");
  else if (isa<math::Log1pOp>(op)) unary("log1p");
  else if (isa<math::Log2Op>(op)) unary("log2");
  else if (isa<math::Log10Op>(op)) unary("log10");
  else if (isa<math::SqrtOp>(op)) unary("sqrt");
  else if (isa<math::RsqrtOp>(op)) unary("rsqrt");
  else if (isa<math::TanhOp>(op)) unary("tanh");
  else if (isa<math::ErfOp>(op)) unary("erf");
  else if (isa<math::SinOp>(op)) unary("sin");
  else if (isa<math::CosOp>(op)) unary("cos");
  else if (isa<math::TanOp>(op)) unary("tan");
  else if (isa<math::AtanOp>(op)) unary("atan");
  else if (isa<math::AbsFOp>(op)) unary("fabs");
  else if (isa<math::FloorOp>(op)) unary("floor");
  else if (isa<math::CeilOp>(op)) unary("ceil");
  else if (isa<math::RoundOp>(op)) unary("round");
  else if (isa<math::RoundEvenOp>(op)) unary("rint");
  else if (isa<math::TruncOp>(op)) unary("trunc");
  else if (isa<math::PowFOp>(op)) binary("pow");
  else if (isa<math::Atan2Op>(op)) binary("atan2");
  else if (isa<math::CopySignOp>(op)) binary("copysign");
  else if (auto abs = dyn_cast<math::AbsIOp>(op)) {
    std::string a = ref(abs.getOperand());
    define(abs.getResult(), "(" + a + " < 0 ? -" + a + " : " + a + ")");
  } else
    handled = false;
  return success();
}

LogicalResult Printer::printCall(func::CallOp call) {
  StringRef name = cudaIntrinsicName(call.getCallee());
  auto defineIndex = [&](const std::string &expr) {
    define(call.getResult(0), expr);
    return success();
  };
  if (name == "kiln.thread")
    return defineIndex("(kiln_index)blockIdx.x * blockDim.x + threadIdx.x");
  if (name == "kiln.threads")
    return defineIndex("(kiln_index)gridDim.x * blockDim.x");
  if (name == "kiln.warp")
    return defineIndex("((kiln_index)blockIdx.x * blockDim.x + threadIdx.x) / 32");
  if (name == "kiln.warps")
    return defineIndex("(kiln_index)gridDim.x * (blockDim.x / 32)");
  if (name == "kiln.lane")
    return defineIndex("(kiln_index)(threadIdx.x & 31u)");
  if (name == "kiln.block")
    return defineIndex("(kiln_index)blockIdx.x");
  if (name == "kiln.blocks")
    return defineIndex("(kiln_index)gridDim.x");
  if (name == "kiln.tid")
    return defineIndex("(kiln_index)threadIdx.x");
  if (name == "kiln.block_threads")
    return defineIndex("(kiln_index)blockDim.x");
  if (name.starts_with("kiln.allreduce_n.")) {
    auto [scope, kind] =
        name.drop_front(strlen("kiln.allreduce_n.")).split('.');
    std::string tuple = "kiln_tuple<" + cType(call.getResult(0).getType()) +
                        ", " + std::to_string(call.getNumResults()) + ">";
    std::string operands;
    for (Value v : call.getOperands())
      operands += (operands.empty() ? "" : ", ") + ref(v);
    std::string all = fresh();
    line("const " + tuple + " " + all + " = kiln_" + scope.str() +
         "_allreduce_n(" + tuple + "{{" + operands + "}}, kiln_" +
         kind.str() + "());");
    for (auto [i, result] : llvm::enumerate(call.getResults()))
      names_[result] = all + ".v[" + std::to_string(i) + "]";
    return success();
  }
  if (name.starts_with("kiln.allreduce.")) {
    auto [scope, kind] = name.drop_front(strlen("kiln.allreduce.")).split('.');
    define(call.getResult(0), "kiln_" + scope.str() + "_allreduce(" +
                                  ref(call.getOperand(0)) + ", kiln_" +
                                  kind.str() + "())");
    return success();
  }
  if (name == "kiln.scatter_chunk")
    return defineIndex("(kiln_index)blockDim.x * KILN_SCATTER_PER_THREAD");
  if (name == "kiln.scatter_collect")
    // Barriers inside: every thread of the block calls it.
    return defineIndex("kiln_scatter_collect(" + ref(call.getOperand(0)) + ", " +
                       ref(call.getOperand(1)) + ", " + ref(call.getOperand(2)) +
                       ", " + ref(call.getOperand(3)) + ", kiln_scatter_list)");
  if (name == "kiln.scatter_match")
    return defineIndex("(kiln_index)kiln_scatter_list[" +
                       ref(call.getOperand(0)) + "]");
  if (name == "kiln.shared_row") {
    // A row-cache slot: a typed pointer into the dynamic shared memory.
    Type element = cast<MemRefType>(call.getResult(0).getType()).getElementType();
    std::string slot = fresh();
    names_[call.getResult(0)] = slot;
    line(cType(element) + " *const " + slot + " = reinterpret_cast<" +
         cType(element) + " *>(kiln_shared + " + ref(call.getOperand(0)) + ");");
    return success();
  }
  if (name == "kiln.stage_row") {
    // The row cache's staging (barriers inside: every thread calls it).
    line("kiln_stage_row(" + ref(call.getOperand(0)) + ", " +
         ref(call.getOperand(1)) + " + " + ref(call.getOperand(2)) + ", " +
         ref(call.getOperand(3)) + ");");
    return success();
  }
  if (name == "kiln.vload") {
    Value memref = call.getOperand(0);
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    std::string vec = "kiln_vec<" + cType(element) + ", " +
                      std::to_string(call.getNumResults()) + ">";
    std::string name = fresh();
    line("const " + vec + " " + name + " = *kiln_vec_at<" +
         std::to_string(call.getNumResults()) + ">(" + ref(memref) + " + " +
         ref(call.getOperand(1)) + ");");
    for (unsigned k = 0; k < call.getNumResults(); ++k)
      names_[call.getResult(k)] = name + ".v[" + std::to_string(k) + "]";
    return success();
  }
  if (name == "kiln.vstore") {
    Value memref = call.getOperand(0);
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    unsigned width = call.getNumOperands() - 2;
    std::string vec = "kiln_vec<" + cType(element) + ", " + std::to_string(width) + ">";
    std::string name = fresh();
    line("{");
    ++indent_;
    line(vec + " " + name + ";");
    for (unsigned k = 0; k < width; ++k)
      line(name + ".v[" + std::to_string(k) + "] = " + ref(call.getOperand(2 + k)) + ";");
    line("*kiln_vec_at<" + std::to_string(width) + ">(" + ref(memref) + " + " +
         ref(call.getOperand(1)) + ") = " + name + ";");
    --indent_;
    line("}");
    return success();
  }
  return call.emitError() << "CUDA: unknown intrinsic " << call.getCallee();
}

LogicalResult Printer::printOp(Operation *op) {
  bool handled = false;
  if (op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    if (failed(printArith(op, handled)))
      return failure();
    if (handled)
      return success();
  }
  if (op->getDialect() && op->getDialect()->getNamespace() == "math") {
    if (failed(printMath(op, handled)))
      return failure();
    if (handled)
      return success();
  }
  if (auto load = dyn_cast<memref::LoadOp>(op)) {
    std::string expr = ref(load.getMemRef()) + "[" +
                       linear(load.getMemRef(), load.getIndices()) + "]";
    Type element = load.getType();
    if (load.getMemRef().getDefiningOp<memref::GetGlobalOp>() && isHalf(element))
      expr = std::string(element.isF16() ? "kiln_f16_bits" : "kiln_bf16_bits") +
             "(" + expr + ")";
    define(load.getResult(), expr);
    return success();
  }
  if (auto store = dyn_cast<memref::StoreOp>(op)) {
    line(ref(store.getMemRef()) + "[" +
         linear(store.getMemRef(), store.getIndices()) +
         "] = " + ref(store.getValueToStore()) + ";");
    return success();
  }
  if (auto get = dyn_cast<memref::GetGlobalOp>(op)) {
    names_[get.getResult()] = globals_.lookup(get.getName());
    return success();
  }
  if (auto call = dyn_cast<func::CallOp>(op))
    return printCall(call);
  if (isa<func::ReturnOp>(op))
    return success();
  if (auto loop = dyn_cast<scf::ForOp>(op)) {
    SmallVector<std::string> vars;
    for (auto [init, arg, result] : llvm::zip(loop.getInitArgs(),
                                              loop.getRegionIterArgs(),
                                              loop.getResults())) {
      std::string var = fresh();
      line(cType(arg.getType()) + " " + var + " = " + ref(init) + ";");
      names_[arg] = var;
      names_[result] = var;
      vars.push_back(var);
    }
    carried_[op] = vars;
    std::string iv = fresh();
    names_[loop.getInductionVar()] = iv;
    line("for (kiln_index " + iv + " = " + ref(loop.getLowerBound()) + "; " + iv +
         " < " + ref(loop.getUpperBound()) + "; " + iv + " += " +
         ref(loop.getStep()) + ") {");
    if (failed(printRegionBody(loop.getRegion())))
      return failure();
    line("}");
    return success();
  }
  if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
    SmallVector<std::string> vars;
    for (Value result : ifOp.getResults()) {
      std::string var = fresh();
      line(cType(result.getType()) + " " + var + ";");
      names_[result] = var;
      vars.push_back(var);
    }
    carried_[op] = vars;
    line("if (" + ref(ifOp.getCondition()) + ") {");
    if (failed(printRegionBody(ifOp.getThenRegion())))
      return failure();
    if (!ifOp.getElseRegion().empty()) {
      line("} else {");
      if (failed(printRegionBody(ifOp.getElseRegion())))
        return failure();
    }
    line("}");
    return success();
  }
  if (auto region = dyn_cast<scf::ExecuteRegionOp>(op)) {
    if (region.getNumResults() != 0)
      return op->emitError() << "CUDA: expected an scf.execute_region without results";
    line("{");
    if (failed(printRegionBody(region.getRegion())))
      return failure();
    line("}");
    return success();
  }
  if (auto yield = dyn_cast<scf::YieldOp>(op)) {
    SmallVector<std::string> &vars = carried_[op->getParentOp()];
    // Through temporaries: a yielded value may read another carried one.
    SmallVector<std::string> temps;
    for (Value v : yield.getOperands()) {
      std::string t = fresh();
      line("const " + cType(v.getType()) + " " + t + " = " + ref(v) + ";");
      temps.push_back(t);
    }
    for (size_t i = 0; i < temps.size(); ++i)
      line(vars[i] + " = " + temps[i] + ";");
    return success();
  }
  return op->emitError() << "CUDA: the source printer does not support this op";
}

} // namespace

LogicalResult printCudaKernel(ModuleOp module, StringRef name,
                              unsigned numOutputs, uint32_t dynamicSharedBytes,
                              unsigned blockThreads, llvm::raw_ostream &os) {
  Printer printer(os, name.str() + "_");
  printer.setNumOutputs(numOutputs);
  printer.setDynamicSharedBytes(dynamicSharedBytes);
  printer.setBlockThreads(blockThreads);
  return printer.printModule(module, name);
}

} // namespace kiln
