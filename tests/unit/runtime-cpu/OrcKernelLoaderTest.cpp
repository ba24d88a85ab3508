//===- OrcKernelLoaderTest.cpp - runtime/cpu/jit/OrcKernelLoader ----------===//
//
// Kernels the CPU code generator produces (optimizedKernelIR of a fusion,
// written as bitcode, or compiled here to an object file) loaded through
// the ORC loader and run part by part, against the reference interpreter;
// several kernels in one loader (each defines kiln_kernel); libm calls
// resolved from the process; each error naming its kernel; and the disk
// cache of compiled kernels (hits, misses, damaged files, turned off).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/jit/OrcKernelLoader.h"

#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/cuda/ScopedEnv.h"
#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

namespace kiln::runtime::cpu {
namespace {

using ::testing::HasSubstr;

// Elementwise with libm calls (tanh, log1p, erf go to libm; exp is an
// intrinsic).
const char *kElementwise = R"mlir(
  func.func @main(%a: tensor<37x64xf32>, %b: tensor<64xf32>) -> tensor<37x64xf32> {
    %r = kiln.fusion loop (%a, %b) : (tensor<37x64xf32>, tensor<64xf32>) -> tensor<37x64xf32> {
    ^bb0(%x: tensor<37x64xf32>, %y: tensor<64xf32>):
      %yb = kiln.broadcast_in_dim %y, dims = [1] : tensor<64xf32> -> tensor<37x64xf32>
      %m = kiln.mul %x, %yb : tensor<37x64xf32>
      %t = kiln.tanh %m : tensor<37x64xf32>
      %n = kiln.abs %x : tensor<37x64xf32>
      %l = kiln.log1p %n : tensor<37x64xf32>
      %e = kiln.erf %yb : tensor<37x64xf32>
      %x1 = kiln.exp %e : tensor<37x64xf32>
      %s = kiln.add %t, %l : tensor<37x64xf32>
      %u = kiln.add %s, %x1 : tensor<37x64xf32>
      kiln.yield %u : tensor<37x64xf32>
    }
    return %r : tensor<37x64xf32>
  })mlir";

// A row reduction with two results (a different buffer count).
const char *kReduction = R"mlir(
  func.func @main(%a: tensor<29x50xf32>) -> (tensor<29xf32>, tensor<29x50xf32>) {
    %r:2 = kiln.fusion multi_output (%a) : (tensor<29x50xf32>) -> (tensor<29xf32>, tensor<29x50xf32>) {
    ^bb0(%x: tensor<29x50xf32>):
      %s = kiln.reduce sum %x, dims = [1] : tensor<29x50xf32> -> tensor<29xf32>
      %n = kiln.neg %x : tensor<29x50xf32>
      kiln.yield %s, %n : tensor<29xf32>, tensor<29x50xf32>
    }
    return %r#0, %r#1 : tensor<29xf32>, tensor<29x50xf32>
  })mlir";

class OrcKernelLoaderTest : public ::testing::Test {
protected:
  OrcKernelLoaderTest() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
    auto loader = createOrcKernelLoader();
    EXPECT_TRUE(loader.isOk()) << loader.status().message();
    if (loader.isOk())
      this->loader = std::move(loader.value());
  }

  // Parses |text| and returns its one fusion (null on failure).
  FusionOp parseFusion(const char *text) {
    modules.push_back(mlir::parseSourceString<mlir::ModuleOp>(text, &context));
    FusionOp fusion;
    if (modules.back())
      modules.back()->walk([&](FusionOp f) { fusion = f; });
    return fusion;
  }

  // The fusion's optimized LLVM module, as the package builder makes it.
  std::unique_ptr<llvm::Module> kernelIR(FusionOp fusion) {
    auto ir = optimizedKernelIR(fusion, llvmContext);
    EXPECT_TRUE(mlir::succeeded(ir)) << diagnostics;
    return mlir::succeeded(ir) ? std::move(*ir) : nullptr;
  }

  PackageKernel bitcodeKernel(const std::string &name, llvm::Module &module) {
    PackageKernel kernel;
    kernel.kind = KernelKind::LlvmBitcode;
    kernel.name = name;
    kernel.entryPoint = "kiln_kernel";
    llvm::SmallVector<char, 0> bitcode;
    llvm::raw_svector_ostream os(bitcode);
    llvm::WriteBitcodeToFile(module, os);
    kernel.object.assign(bitcode.begin(), bitcode.end());
    return kernel;
  }

  // kElementwise's and kReduction's fusions and their bitcode kernels
  // ("elementwise", "reduction"); false (with a test failure) when one
  // does not build.
  bool bothKernels(FusionOp &elementwise, FusionOp &reduction,
                   PackageKernel &k0, PackageKernel &k1) {
    elementwise = parseFusion(kElementwise);
    reduction = parseFusion(kReduction);
    EXPECT_TRUE(elementwise && reduction) << diagnostics;
    if (!elementwise || !reduction)
      return false;
    auto ir0 = kernelIR(elementwise), ir1 = kernelIR(reduction);
    if (!ir0 || !ir1)
      return false;
    k0 = bitcodeKernel("elementwise", *ir0);
    k1 = bitcodeKernel("reduction", *ir1);
    return true;
  }

  // Runs |fn| over |parts| parts on random inputs and compares every result
  // with the interpreter's; "" or the first mismatch.
  std::string check(FusionOp fusion, KernelFn fn, int64_t parts,
                    uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-2, 2);
    std::vector<HostTensor> inputs;
    std::vector<std::vector<float>> storage;
    for (mlir::Value input : fusion.getInputs()) {
      auto type = mlir::cast<mlir::RankedTensorType>(input.getType());
      HostTensor t(DType::f32, type.getShape());
      std::vector<float> raw(t.size());
      for (int64_t i = 0; i < t.size(); ++i)
        t[i] = raw[i] = dist(rng);
      inputs.push_back(t);
      storage.push_back(raw);
    }
    llvm::SmallVector<HostTensor> expected;
    Interpreter interpreter;
    if (mlir::failed(interpreter.evaluate(fusion, inputs, expected)))
      return "the interpreter failed: " + diagnostics;
    std::vector<void *> buffers;
    for (auto &raw : storage)
      buffers.push_back(raw.data());
    std::vector<std::vector<float>> outputs;
    for (const HostTensor &e : expected)
      outputs.emplace_back(e.size(), NAN);
    for (auto &raw : outputs)
      buffers.push_back(raw.data());
    // Parts in reverse order: each computes its share alone.
    for (int64_t part = parts - 1; part >= 0; --part)
      fn(buffers.data(), part, parts);
    for (size_t r = 0; r < expected.size(); ++r)
      for (int64_t i = 0; i < expected[r].size(); ++i) {
        double e = expected[r][i], a = outputs[r][i];
        if (!(std::fabs(a - e) <= 1e-5 * (1 + std::fabs(e))))
          return "result " + std::to_string(r) + " element " +
                 std::to_string(i) + ": expected " + std::to_string(e) +
                 ", found " + std::to_string(a) + " (" +
                 std::to_string(parts) + " parts)";
      }
    return "";
  }

  std::string loadError(const PackageKernel &kernel, size_t index) {
    auto fn = loader->load(kernel, index);
    return fn.isOk() ? "(loaded)" : fn.status().message();
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  llvm::LLVMContext llvmContext;
  std::unique_ptr<KernelLoader> loader;
};

TEST_F(OrcKernelLoaderTest, BitcodeKernelsRunInAnyNumberOfParts) {
  ASSERT_TRUE(loader);
  FusionOp elementwise, reduction;
  PackageKernel k0, k1;
  ASSERT_TRUE(bothKernels(elementwise, reduction, k0, k1));
  // Both kernels define kiln_kernel; each loads into its own JITDylib.
  auto fn0 = loader->load(k0, 0);
  ASSERT_TRUE(fn0.isOk()) << fn0.status().message();
  auto fn1 = loader->load(k1, 1);
  ASSERT_TRUE(fn1.isOk()) << fn1.status().message();
  EXPECT_NE(fn0.value(), fn1.value());
  for (int64_t parts : {1, 2, 3, 7, 40}) {
    EXPECT_EQ(check(elementwise, fn0.value(), parts, 10 + parts), "");
    EXPECT_EQ(check(reduction, fn1.value(), parts, 20 + parts), "");
  }
}

TEST_F(OrcKernelLoaderTest, ObjectCodeKernels) {
  ASSERT_TRUE(loader);
  FusionOp elementwise = parseFusion(kElementwise);
  ASSERT_TRUE(elementwise) << diagnostics;
  auto ir = kernelIR(elementwise);
  ASSERT_TRUE(ir);
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  ASSERT_TRUE(!!builder) << llvm::toString(builder.takeError());
  auto machine = builder->createTargetMachine();
  ASSERT_TRUE(!!machine) << llvm::toString(machine.takeError());
  ir->setDataLayout((*machine)->createDataLayout());
  auto object = llvm::orc::SimpleCompiler(**machine)(*ir);
  ASSERT_TRUE(!!object) << llvm::toString(object.takeError());
  PackageKernel kernel;
  kernel.kind = KernelKind::CpuObject;
  kernel.name = "elementwise.o";
  kernel.entryPoint = "kiln_kernel";
  kernel.object.assign((*object)->getBufferStart(), (*object)->getBufferEnd());
  auto fn = loader->load(kernel, 5);
  ASSERT_TRUE(fn.isOk()) << fn.status().message();
  EXPECT_EQ(check(elementwise, fn.value(), 3, 99), "");
}

TEST_F(OrcKernelLoaderTest, ErrorsNameTheKernel) {
  ASSERT_TRUE(loader);
  PackageKernel junk;
  junk.kind = KernelKind::LlvmBitcode;
  junk.name = "junk";
  junk.entryPoint = "kiln_kernel";
  junk.object = {'B', 'C', 0xc0, 0xde, 1, 2, 3};
  EXPECT_THAT(loadError(junk, 2),
              HasSubstr("kernel 2 (\"junk\"): bad LLVM bitcode"));

  junk.object.clear();
  EXPECT_THAT(loadError(junk, 3),
              HasSubstr("kernel 3 (\"junk\"): its code is empty"));

  junk.kind = KernelKind::CpuObject;
  junk.object = {1, 2, 3, 4};
  EXPECT_THAT(loadError(junk, 4),
              HasSubstr("kernel 4 (\"junk\"): cannot add its object code"));

  junk.kind = KernelKind::Cuda;
  EXPECT_THAT(loadError(junk, 6), HasSubstr("kernel 6 (\"junk\"): not CPU code"));

  FusionOp elementwise = parseFusion(kElementwise);
  ASSERT_TRUE(elementwise) << diagnostics;
  auto ir = kernelIR(elementwise);
  ASSERT_TRUE(ir);
  PackageKernel wrongEntry = bitcodeKernel("wrong-entry", *ir);
  wrongEntry.entryPoint = "no_such_function";
  EXPECT_THAT(loadError(wrongEntry, 7),
              HasSubstr("kernel 7 (\"wrong-entry\"): its bitcode defines no "
                        "function @no_such_function"));

  // A kernel that calls a function nobody defines fails at its lookup.
  llvm::LLVMContext ctx;
  llvm::Module m("undefined", ctx);
  auto *voidTy = llvm::Type::getVoidTy(ctx);
  auto *ptrTy = llvm::PointerType::get(ctx, 0);
  auto *i64Ty = llvm::Type::getInt64Ty(ctx);
  auto *entryTy = llvm::FunctionType::get(voidTy, {ptrTy, i64Ty, i64Ty}, false);
  auto *missingTy = llvm::FunctionType::get(voidTy, {}, false);
  auto *entry = llvm::Function::Create(entryTy, llvm::Function::ExternalLinkage,
                                       "kiln_kernel", m);
  auto missing = m.getOrInsertFunction("kiln_no_such_symbol_anywhere", missingTy);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", entry));
  b.CreateCall(missing);
  b.CreateRetVoid();
  EXPECT_THAT(loadError(bitcodeKernel("undefined", m), 8),
              HasSubstr("kernel 8 (\"undefined\"): cannot compile or find "
                        "entry point kiln_kernel"));
  EXPECT_THAT(loadError(bitcodeKernel("undefined", m), 9),
              HasSubstr("kiln_no_such_symbol_anywhere"));
}

// Bitcode optimized for another CPU of this architecture runs (its
// CPU-specific attributes are dropped: the JIT compiles for this host);
// bitcode for another architecture is refused by name.
TEST_F(OrcKernelLoaderTest, KernelsAreCompiledForThisHost) {
  ASSERT_TRUE(loader);
  FusionOp elementwise = parseFusion(kElementwise);
  ASSERT_TRUE(elementwise) << diagnostics;
  auto ir = kernelIR(elementwise);
  ASSERT_TRUE(ir);
  for (llvm::Function &f : *ir)
    if (!f.isDeclaration()) {
      f.addFnAttr("target-cpu", "x86-64");
      f.addFnAttr("target-features", "+sse2,-avx,-avx2,-avx512f");
    }
  auto fn = loader->load(bitcodeKernel("generic-cpu", *ir), 10);
  ASSERT_TRUE(fn.isOk()) << fn.status().message();
  EXPECT_EQ(check(elementwise, fn.value(), 2, 7), "");

  llvm::Triple host(llvm::sys::getProcessTriple());
  ir->setTargetTriple(host.getArch() == llvm::Triple::aarch64
                          ? "x86_64-unknown-linux-gnu"
                          : "aarch64-unknown-linux-gnu");
  EXPECT_THAT(loadError(bitcodeKernel("foreign", *ir), 11),
              HasSubstr("kernel 11 (\"foreign\"): its code was compiled for"));
}

// Every file in |dir|.
std::vector<std::filesystem::path> filesIn(const std::string &dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto &entry : std::filesystem::directory_iterator(dir, error))
    files.push_back(entry.path());
  return files;
}

std::string readAll(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::filesystem::path &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A kernel compiled once is read back from $KILN_CACHE_DIR/cpu by the next
// loader (another process, in real use) and runs the same; another kernel
// gets a file of its own; a damaged or truncated file, one whose sizes do
// not add up, or one written for another key, is compiled again and
// rewritten; KILN_CACHE_DIR=off keeps nothing.
TEST_F(OrcKernelLoaderTest, CompiledKernelsAreKeptOnDisk) {
  char pattern[] = "/tmp/kiln-orc-cache-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  std::string root = pattern;
  FusionOp elementwise, reduction;
  PackageKernel k0, k1;
  ASSERT_TRUE(bothKernels(elementwise, reduction, k0, k1));

  // Loads |kernel| (fusion |fusion|) in a fresh loader and checks it runs;
  // the loader's stats.
  auto loadFresh = [&](const PackageKernel &kernel, FusionOp fusion) {
    OrcKernelCacheStats stats;
    auto fresh = createOrcKernelLoader(&stats);
    EXPECT_TRUE(fresh.isOk()) << fresh.status().message();
    if (!fresh.isOk())
      return stats;
    auto fn = fresh.value()->load(kernel, 0);
    EXPECT_TRUE(fn.isOk()) << fn.status().message();
    if (fn.isOk())
      EXPECT_EQ(check(fusion, fn.value(), 3, 42), "");
    return stats;
  };
  auto expectStats = [](const OrcKernelCacheStats &s, size_t hits,
                        size_t misses, size_t written, const char *what) {
    EXPECT_EQ(s.hits, hits) << what;
    EXPECT_EQ(s.misses, misses) << what;
    EXPECT_EQ(s.written, written) << what;
  };

  {
    kiln::runtime::cuda::testing::ScopedEnv env("KILN_CACHE_DIR", root);
    std::string dir = root + "/cpu";
    OrcKernelCacheStats first = loadFresh(k0, elementwise);
    EXPECT_EQ(first.directory, dir);
    expectStats(first, 0, 1, 1, "first load");
    std::vector<std::filesystem::path> files = filesIn(dir);
    ASSERT_EQ(files.size(), 1u);
    std::string good = readAll(files[0]);
    EXPECT_EQ(good.rfind("kiln-cpu-object 1\n", 0), 0u);
    EXPECT_NE(good.find("llvm=" LLVM_VERSION_STRING), std::string::npos);

    expectStats(loadFresh(k0, elementwise), 1, 0, 0, "second load");
    expectStats(loadFresh(k1, reduction), 0, 1, 1, "another kernel");
    EXPECT_EQ(filesIn(dir).size(), 2u);

    // The object's field: after the magic line, the identity's and the
    // bitcode's fields (each an 8-byte little-endian length, then bytes).
    auto lengthAt = [&](size_t at) {
      uint64_t n = 0;
      for (int i = 0; i < 8; ++i)
        n |= uint64_t(static_cast<unsigned char>(good[at + i])) << (8 * i);
      return n;
    };
    size_t object = std::strlen("kiln-cpu-object 1\n");
    object += 8 + lengthAt(object); // the identity
    object += 8 + lengthAt(object); // the bitcode
    ASSERT_LT(object + 8, good.size());
    uint64_t objectBytes = lengthAt(object);
    ASSERT_GT(objectBytes, 0u);
    // The object's last byte flipped: its checksum fails.
    std::string bad = good;
    bad[object + 8 + objectBytes - 1] ^= 0x5a;
    writeAll(files[0], bad);
    expectStats(loadFresh(k0, elementwise), 0, 1, 1, "damaged object");
    EXPECT_EQ(readAll(files[0]), good);
    // Cut short, then empty.
    writeAll(files[0], good.substr(0, good.size() / 2));
    expectStats(loadFresh(k0, elementwise), 0, 1, 1, "truncated");
    writeAll(files[0], "");
    expectStats(loadFresh(k0, elementwise), 0, 1, 1, "empty");
    // An object length that runs past the end of the file (read as a miss
    // before anything is allocated for it).
    std::string sized = good;
    sized[object + 4] = char(0x7f);
    writeAll(files[0], sized);
    expectStats(loadFresh(k0, elementwise), 0, 1, 1, "object size");
    // Another key under this file's name (another optimization level).
    std::string other = good;
    size_t at = other.find(" opt=3 ");
    ASSERT_NE(at, std::string::npos);
    other[at + 5] = '2';
    writeAll(files[0], other);
    expectStats(loadFresh(k0, elementwise), 0, 1, 1, "another key");
    expectStats(loadFresh(k0, elementwise), 1, 0, 0, "rewritten");
  }
  {
    kiln::runtime::cuda::testing::ScopedEnv env("KILN_CACHE_DIR", "off");
    OrcKernelCacheStats off = loadFresh(k0, elementwise);
    EXPECT_EQ(off.directory, "");
    expectStats(off, 0, 0, 0, "off");
  }
  std::error_code error;
  std::filesystem::remove_all(root, error);
}

// prefetch() compiles the kernels that are not on disk side by side before
// the loads, which then link those objects (and write their files): the
// kernels run as their fusions compute, the stats count them as misses
// compiled ahead, and the next loader reads them from the disk. A kernel
// prefetch cannot compile (bad bitcode) is load()'s to report, as before.
TEST_F(OrcKernelLoaderTest, PrefetchedKernelsCompileAheadAndRunTheSame) {
  char pattern[] = "/tmp/kiln-orc-prefetch-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  std::string root = pattern;
  kiln::runtime::cuda::testing::ScopedEnv env("KILN_CACHE_DIR", root);
  FusionOp elementwise, reduction;
  PackageKernel k0, k1;
  ASSERT_TRUE(bothKernels(elementwise, reduction, k0, k1));
  PackageKernel bad = k0;
  bad.name = "bad";
  bad.object.assign({'n', 'o', 't', ' ', 'b', 'c'});
  // On one hardware thread there is nothing to overlap: load() compiles.
  size_t expectAhead = std::thread::hardware_concurrency() >= 2 ? 2 : 0;
  for (int round = 0; round < 2; ++round) {
    OrcKernelCacheStats stats;
    auto fresh = createOrcKernelLoader(&stats);
    ASSERT_TRUE(fresh.isOk()) << fresh.status().message();
    KernelLoader &l = *fresh.value();
    l.prefetch({&k0, &bad, &k1});
    auto fn0 = l.load(k0, 0);
    auto fn1 = l.load(k1, 1);
    ASSERT_TRUE(fn0.isOk()) << fn0.status().message();
    ASSERT_TRUE(fn1.isOk()) << fn1.status().message();
    EXPECT_EQ(check(elementwise, fn0.value(), 3, 7), "");
    EXPECT_EQ(check(reduction, fn1.value(), 2, 8), "");
    auto broken = l.load(bad, 2);
    ASSERT_FALSE(broken.isOk());
    EXPECT_NE(broken.status().message().find("kernel 2 (\"bad\"): bad LLVM bitcode"),
              std::string::npos)
        << broken.status().message();
    if (round == 0) {
      EXPECT_EQ(stats.ahead, expectAhead);
      EXPECT_EQ(stats.misses, 2u);
      EXPECT_EQ(stats.written, 2u);
      EXPECT_EQ(stats.hits, 0u);
      EXPECT_EQ(filesIn(root + "/cpu").size(), 2u);
    } else {
      // Both on disk now: nothing compiled ahead, both read back.
      EXPECT_EQ(stats.ahead, 0u);
      EXPECT_EQ(stats.hits, 2u);
      EXPECT_EQ(stats.misses, 0u);
    }
  }
  std::error_code error;
  std::filesystem::remove_all(root, error);
}

} // namespace
} // namespace kiln::runtime::cpu
