//===- OrcKernelLoader.cpp - package kernels compiled by LLVM ORC ---------===//
//
// One LLJIT per loader; one JITDylib per loaded kernel
// ("kiln.kernel.<index>.<serial>"),
// each with a generator that resolves undefined symbols against the running
// process. Errors that ORC reports on the side (an unresolved symbol during
// materialization) are gathered and appended to the failing lookup's
// message, so the Status says which symbol was missing in which kernel.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/jit/OrcKernelLoader.h"

#include "runtime/cpu/jit/Bf16Libcall.h"

#include "llvm/Bitcode/BitcodeReader.h"
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

#include <mutex>
#include <string>

namespace kiln::runtime::cpu {
namespace {

std::string describe(const PackageKernel &kernel, size_t index) {
  return "kernel " + std::to_string(index) + " (\"" + kernel.name + "\")";
}

class OrcKernelLoader final : public KernelLoader {
public:
  explicit OrcKernelLoader(std::unique_ptr<llvm::orc::LLJIT> jit)
      : jit_(std::move(jit)) {
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
      // Bitcode for another architecture cannot run here; bitcode for
      // another x86-64 (or AArch64) CPU can: its vector IR is generic, so
      // any CPU-specific function attributes are dropped and the JIT
      // compiles every kernel for this host's CPU and features.
      llvm::Triple triple((*module)->getTargetTriple());
      llvm::Triple host(jit_->getTargetTriple());
      if (!triple.getTriple().empty() && triple.getArch() != host.getArch())
        return fail("its code was compiled for " + triple.getTriple() +
                    ", not for this host (" + host.getTriple() +
                    "): compile the model on this kind of machine");
      for (llvm::Function &f : **module) {
        f.removeFnAttr("target-cpu");
        f.removeFnAttr("target-features");
        f.removeFnAttr("tune-cpu");
      }
      (*module)->setTargetTriple(host.getTriple());
      (*module)->setDataLayout(jit_->getDataLayout());
      llvm::orc::ThreadSafeModule tsm(std::move(*module), std::move(context));
      if (llvm::Error error = jit_->addIRModule(jd, std::move(tsm)))
        return fail("cannot add its module: " +
                    llvm::toString(std::move(error)));
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

private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex loadMutex_; // one load at a time
  uint64_t loads_ = 0;
  std::mutex mutex_; // guards sideErrors_
  std::string sideErrors_;
};

} // namespace

StatusOr<std::unique_ptr<KernelLoader>> createOrcKernelLoader() {
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
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(*machine))
                 .create();
  if (!jit)
    return Status::error("the ORC kernel loader: cannot create the JIT: " +
                         llvm::toString(jit.takeError()));
  return std::unique_ptr<KernelLoader>(
      std::make_unique<OrcKernelLoader>(std::move(*jit)));
}

} // namespace kiln::runtime::cpu
