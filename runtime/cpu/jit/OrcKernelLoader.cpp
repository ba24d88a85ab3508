//===- OrcKernelLoader.cpp - package kernels compiled by LLVM ORC ---------===//
//
// One LLJIT per loader; one JITDylib per loaded kernel
// ("kiln.kernel.<index>.<serial>"),
// each with a generator that resolves undefined symbols against the running
// process. Errors that ORC reports on the side (an unresolved symbol during
// materialization) are gathered and appended to the failing lookup's
// message, so the Status says which symbol was missing in which kernel.
//
// The disk cache (DiskObjectCache) is LLVM's ObjectCache under ORC's IR
// compiler: before it compiles a module it asks for the module's object,
// after it has compiled one it hands the object over. A module is named
// for its load, and the name leads to the kernel's bitcode and the file
// that holds (or will hold) its object.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/jit/OrcKernelLoader.h"

#include "runtime/Files.h"
#include "runtime/ThreadPool.h"
#include "runtime/cpu/jit/Bf16Libcall.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/ObjectCache.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::cpu {
namespace {

std::string describe(const PackageKernel &kernel, size_t index) {
  return "kernel " + std::to_string(index) + " (\"" + kernel.name + "\")";
}

// Prepares kernel bitcode |module| to be compiled for |host| (with the
// JIT's |layout|); "" or why it cannot run here. Bitcode for another
// architecture cannot; bitcode for another x86-64 (or AArch64) CPU can:
// its vector IR is generic, so any CPU-specific function attributes are
// dropped and every kernel is compiled for this host's CPU and features.
std::string retargetToHost(llvm::Module &module, const llvm::Triple &host,
                           const llvm::DataLayout &layout) {
  llvm::Triple triple(module.getTargetTriple());
  if (!triple.getTriple().empty() && triple.getArch() != host.getArch())
    return "its code was compiled for " + triple.getTriple() +
           ", not for this host (" + host.getTriple() +
           "): compile the model on this kind of machine";
  for (llvm::Function &f : module) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    f.removeFnAttr("tune-cpu");
  }
  module.setTargetTriple(host.getTriple());
  module.setDataLayout(layout);
  return "";
}

// The object code of each compiled kernel in $KILN_CACHE_DIR/cpu (see the
// header), one file per kernel: a keyedCacheEntry (runtime/Files.h) whose
// fields are the identity (triple, CPU, features, optimization level, LLVM
// version), the bitcode, the object and the object's FNV-1a. It is read
// back only when the identity and the bitcode equal the module's in full
// and the checksum holds: anything else is a miss, compiled again and the
// file rewritten.
class DiskObjectCache final : public llvm::ObjectCache {
public:
  DiskObjectCache(std::string directory, std::string identity,
                  OrcKernelCacheStats *stats)
      : directory_(std::move(directory)), identity_(std::move(identity)),
        stats_(stats) {}

  // Module |name| is kernel bitcode |bitcode| (until it is compiled).
  void expect(const std::string &name, const std::string &bitcode) {
    std::string path = pathOf(bitcode);
    std::lock_guard<std::mutex> lock(mutex_);
    modules_[name] = {bitcode, std::move(path)};
  }

  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *m) override {
    PendingModule module;
    if (!find(m, module))
      return nullptr;
    std::string object;
    bool ok = read(module.bitcode, object);
    count(ok ? &OrcKernelCacheStats::hits : &OrcKernelCacheStats::misses);
    if (!ok)
      return nullptr;
    forget(m); // compiled from this object: no notifyObjectCompiled follows
    return llvm::MemoryBuffer::getMemBufferCopy(object, m->getModuleIdentifier());
  }

  // Whether the file of |bitcode| holds its object (counts nothing).
  bool has(const std::string &bitcode) {
    std::string object;
    return read(bitcode, object);
  }

  // |bitcode|'s |object|, compiled ahead (OrcKernelLoader::prefetch), now
  // loaded: a miss, written to its file as notifyObjectCompiled would.
  void compiledAhead(const std::string &bitcode, const std::string &object) {
    count(&OrcKernelCacheStats::misses);
    count(&OrcKernelCacheStats::ahead);
    if (writeFileAtomically(pathOf(bitcode),
                            keyedCacheEntry(kMagic, identity_, bitcode, object))
            .isOk())
      count(&OrcKernelCacheStats::written);
  }

  void notifyObjectCompiled(const llvm::Module *m,
                            llvm::MemoryBufferRef object) override {
    PendingModule module;
    if (!find(m, module))
      return;
    forget(m);
    std::string bytes(object.getBufferStart(), object.getBufferSize());
    std::string entry = keyedCacheEntry(kMagic, identity_, module.bitcode, bytes);
    // The cache is an optimization: a file that cannot be written is a
    // miss next time, never an error.
    if (writeFileAtomically(module.path, entry).isOk())
      count(&OrcKernelCacheStats::written);
  }

private:
  static constexpr const char *kMagic = "kiln-cpu-object 1\n";

  std::string pathOf(const std::string &bitcode) const {
    return directory_ + "/" + fnv1aHex(identity_ + "\n" + bitcode) + ".o";
  }

  // The object its file holds for |bitcode|: false unless the identity and
  // the bitcode equal this key in full and the checksum holds.
  bool read(const std::string &bitcode, std::string &object) const {
    return readKeyedCacheEntry(pathOf(bitcode), kMagic, identity_, bitcode,
                               object);
  }

  // A module expected, not yet compiled.
  struct PendingModule {
    std::string bitcode;
    std::string path; // its file
  };

  bool find(const llvm::Module *m, PendingModule &module) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = modules_.find(m->getModuleIdentifier());
    if (it == modules_.end())
      return false;
    module = it->second;
    return true;
  }

  // Module |m| is compiled: its bitcode is no longer needed.
  void forget(const llvm::Module *m) {
    std::lock_guard<std::mutex> lock(mutex_);
    modules_.erase(m->getModuleIdentifier());
  }

  void count(size_t OrcKernelCacheStats::*counter) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_)
      ++(stats_->*counter);
  }

  std::string directory_;
  std::string identity_;
  OrcKernelCacheStats *stats_;
  std::mutex mutex_; // guards modules_ and *stats_
  std::map<std::string, PendingModule> modules_;
};

class OrcKernelLoader final : public KernelLoader {
public:
  OrcKernelLoader(std::unique_ptr<DiskObjectCache> cache,
                  std::unique_ptr<llvm::orc::LLJIT> jit,
                  llvm::orc::JITTargetMachineBuilder machine)
      : cache_(std::move(cache)), jit_(std::move(jit)),
        machine_(std::move(machine)) {
    jit_->getExecutionSession().setErrorReporter([this](llvm::Error error) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!sideErrors_.empty())
        sideErrors_ += "; ";
      sideErrors_ += llvm::toString(std::move(error));
    });
  }

  StatusOr<KernelFn> load(const PackageKernel &kernel, size_t index) override {
    std::lock_guard<std::mutex> loading(loadMutex_);
    std::string where = describe(kernel, index);
    auto fail = [&](const std::string &message) -> StatusOr<KernelFn> {
      return Status::error(where + ": " + message);
    };
    if (kernel.kind != KernelKind::LlvmBitcode &&
        kernel.kind != KernelKind::CpuObject)
      return fail("not CPU code (expected LLVM bitcode or a CPU object)");
    if (kernel.object.empty())
      return fail("its code is empty");

    // Unique per load: Executables of one package (a training and an eval
    // step, say) may share a loader and load the same kernel indices.
    auto dylib = jit_->createJITDylib("kiln.kernel." + std::to_string(index) +
                                      "." + std::to_string(loads_++));
    if (!dylib)
      return fail("cannot create its JITDylib: " +
                  llvm::toString(dylib.takeError()));
    llvm::orc::JITDylib &jd = *dylib;
    char prefix = jit_->getDataLayout().getGlobalPrefix();
    auto process =
        llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
    if (!process)
      return fail("cannot search the process's symbols: " +
                  llvm::toString(process.takeError()));
    jd.addGenerator(std::move(*process));
    llvm::orc::MangleAndInterner intern(jit_->getExecutionSession(),
                                        jit_->getDataLayout());
    if (llvm::Error error =
            jd.define(llvm::orc::absoluteSymbols(bf16Libcalls(intern))))
      return fail("cannot define __truncsfbf2: " +
                  llvm::toString(std::move(error)));

    llvm::StringRef bytes(reinterpret_cast<const char *>(kernel.object.data()),
                          kernel.object.size());
    if (kernel.kind == KernelKind::LlvmBitcode) {
      auto context = std::make_unique<llvm::LLVMContext>();
      auto module = llvm::parseBitcodeFile(
          llvm::MemoryBufferRef(bytes, kernel.name), *context);
      if (!module)
        return fail("bad LLVM bitcode: " + llvm::toString(module.takeError()));
      llvm::Function *entry = (*module)->getFunction(kernel.entryPoint);
      if (!entry || entry->isDeclaration())
        return fail("its bitcode defines no function @" + kernel.entryPoint +
                    " (the entry point)");
      std::string problem = retargetToHost(
          **module, llvm::Triple(jit_->getTargetTriple()), jit_->getDataLayout());
      if (!problem.empty())
        return fail(problem);
      auto ahead = prefetched_.find(bytes.str());
      if (ahead != prefetched_.end()) {
        // Compiled by prefetch() from this bitcode: link its object.
        if (cache_)
          cache_->compiledAhead(ahead->first, ahead->second);
        auto buffer =
            llvm::MemoryBuffer::getMemBufferCopy(ahead->second, jd.getName());
        prefetched_.erase(ahead);
        if (llvm::Error error = jit_->addObjectFile(jd, std::move(buffer)))
          return fail("cannot add its object code: " +
                      llvm::toString(std::move(error)));
      } else {
        if (cache_) {
          std::string name = jd.getName();
          (*module)->setModuleIdentifier(name);
          cache_->expect(name, bytes.str());
        }
        llvm::orc::ThreadSafeModule tsm(std::move(*module), std::move(context));
        if (llvm::Error error = jit_->addIRModule(jd, std::move(tsm)))
          return fail("cannot add its module: " +
                      llvm::toString(std::move(error)));
      }
    } else {
      auto buffer = llvm::MemoryBuffer::getMemBufferCopy(bytes, kernel.name);
      if (llvm::Error error = jit_->addObjectFile(jd, std::move(buffer)))
        return fail("cannot add its object code: " +
                    llvm::toString(std::move(error)));
    }

    {
      std::lock_guard<std::mutex> lock(mutex_);
      sideErrors_.clear();
    }
    auto address = jit_->lookup(jd, kernel.entryPoint);
    if (!address) {
      std::string message = llvm::toString(address.takeError());
      std::lock_guard<std::mutex> lock(mutex_);
      if (!sideErrors_.empty())
        message += " (" + sideErrors_ + ")";
      return fail("cannot compile or find entry point " + kernel.entryPoint +
                  ": " + message);
    }
    return address->toPtr<KernelFn>();
  }

  // Compiles the bitcode kernels that are neither compiled ahead already nor
  // in the disk cache, side by side on threads (each in an LLVMContext and
  // with a TargetMachine of its own, as the JIT would: -O3 code generation
  // for this host); load() links their objects. A kernel that fails here is
  // left to load(), which reports it.
  void prefetch(const std::vector<const PackageKernel *> &kernels) override {
    std::lock_guard<std::mutex> loading(loadMutex_);
    std::vector<std::string> todo;
    for (const PackageKernel *k : kernels) {
      if (k->kind != KernelKind::LlvmBitcode || k->object.empty())
        continue;
      std::string bitcode(reinterpret_cast<const char *>(k->object.data()),
                          k->object.size());
      if (prefetched_.count(bitcode) || (cache_ && cache_->has(bitcode)))
        continue;
      todo.push_back(std::move(bitcode));
    }
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    if (todo.size() < 2 || threads < 2)
      return; // nothing to overlap: load() compiles as it goes
    llvm::Triple host(jit_->getTargetTriple());
    llvm::DataLayout layout = jit_->getDataLayout();
    std::vector<std::string> objects(todo.size());
    ThreadPool pool(static_cast<int>(std::min<size_t>(threads, todo.size())));
    pool.parallelFor(static_cast<int64_t>(todo.size()), [&](int64_t i) {
      objects[i] = compileAhead(todo[i], host, layout);
    });
    for (size_t i = 0; i < todo.size(); ++i)
      if (!objects[i].empty())
        prefetched_[todo[i]] = std::move(objects[i]);
  }

private:
  // |bitcode| as object code for |host|, prepared as load() prepares a
  // module; "" when anything fails.
  std::string compileAhead(const std::string &bitcode, const llvm::Triple &host,
                           const llvm::DataLayout &layout) const {
    llvm::LLVMContext context;
    auto module = llvm::parseBitcodeFile(
        llvm::MemoryBufferRef(bitcode, "prefetch"), context);
    if (!module) {
      llvm::consumeError(module.takeError());
      return "";
    }
    if (!retargetToHost(**module, host, layout).empty())
      return "";
    llvm::orc::JITTargetMachineBuilder target = machine_; // one per thread
    auto machine = target.createTargetMachine();
    if (!machine) {
      llvm::consumeError(machine.takeError());
      return "";
    }
    llvm::orc::SimpleCompiler compile(**machine);
    auto object = compile(**module);
    if (!object) {
      llvm::consumeError(object.takeError());
      return "";
    }
    return (*object)->getBuffer().str();
  }

  std::unique_ptr<DiskObjectCache> cache_; // outlives jit_, which uses it
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  llvm::orc::JITTargetMachineBuilder machine_; // the JIT's target
  // Objects compiled by prefetch(), by bitcode, until loaded.
  std::map<std::string, std::string> prefetched_;
  std::mutex loadMutex_; // one load at a time
  uint64_t loads_ = 0;
  std::mutex mutex_; // guards sideErrors_
  std::string sideErrors_;
};

} // namespace

StatusOr<std::unique_ptr<KernelLoader>>
createOrcKernelLoader(OrcKernelCacheStats *stats) {
  static std::once_flag once;
  static bool ready = false;
  std::call_once(once, [] {
    ready = !llvm::InitializeNativeTarget() &&
            !llvm::InitializeNativeTargetAsmPrinter();
  });
  if (!ready)
    return Status::error("the ORC kernel loader: LLVM has no target for this "
                         "host CPU");
  auto machine = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!machine)
    return Status::error("the ORC kernel loader: cannot describe the host "
                         "CPU: " + llvm::toString(machine.takeError()));
  machine->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  std::unique_ptr<DiskObjectCache> cache;
  std::string directory = kilnCacheDirectory("cpu");
  if (stats)
    stats->directory = directory;
  if (!directory.empty()) {
    // Everything the object code depends on besides the bitcode.
    std::string identity = "triple=" + machine->getTargetTriple().str() +
                           " cpu=" + machine->getCPU() +
                           " features=" + machine->getFeatures().getString() +
                           " opt=3 llvm=" LLVM_VERSION_STRING;
    cache = std::make_unique<DiskObjectCache>(directory, identity, stats);
  }
  llvm::orc::JITTargetMachineBuilder target = *machine;
  llvm::orc::LLJITBuilder builder;
  builder.setJITTargetMachineBuilder(std::move(*machine));
  if (cache) {
    DiskObjectCache *objects = cache.get();
    builder.setCompileFunctionCreator(
        [objects](llvm::orc::JITTargetMachineBuilder target)
            -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
          auto tm = target.createTargetMachine();
          if (!tm)
            return tm.takeError();
          return std::make_unique<llvm::orc::TMOwningSimpleCompiler>(
              std::move(*tm), objects);
        });
  }
  auto jit = builder.create();
  if (!jit)
    return Status::error("the ORC kernel loader: cannot create the JIT: " +
                         llvm::toString(jit.takeError()));
  return std::unique_ptr<KernelLoader>(
      std::make_unique<OrcKernelLoader>(std::move(cache), std::move(*jit),
                                        std::move(target)));
}

} // namespace kiln::runtime::cpu
