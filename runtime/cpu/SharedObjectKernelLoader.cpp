//===- SharedObjectKernelLoader.cpp - kernels compiled ahead of time ------===//

#include "runtime/cpu/SharedObjectKernelLoader.h"

#include "runtime/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace kiln::runtime::cpu {
namespace {

bool writeAll(int fd, const std::string &bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

class SharedObjectKernelLoader : public KernelLoader {
public:
  SharedObjectKernelLoader(void *handle, std::string what)
      : handle_(handle), what_(std::move(what)) {}
  ~SharedObjectKernelLoader() override { dlclose(handle_); }

  StatusOr<KernelFn> load(const PackageKernel &kernel, size_t index) override {
    std::string symbol = packedKernelSymbol(kernel);
    void *address = dlsym(handle_, symbol.c_str());
    if (!address)
      return Status::error("kernel " + std::to_string(index) + " (\"" +
                           kernel.name + "\"): " + what_ + " has no " + symbol +
                           ": the trainer's kernels are not this package's");
    return reinterpret_cast<KernelFn>(address);
  }

private:
  void *handle_;
  std::string what_;
};

} // namespace

std::string packedKernelSymbol(const PackageKernel &kernel) {
  std::string code(kernel.object.begin(), kernel.object.end());
  return "kiln_aot_" + fnv1aHex(kernel.entryPoint + '\0' + code) + "_" +
         std::to_string(code.size());
}

StatusOr<std::unique_ptr<KernelLoader>>
createSharedObjectKernelLoader(const std::string &image, const std::string &what) {
  std::string path;
  int fd = -1;
#ifdef MFD_CLOEXEC
  fd = memfd_create("kiln-kernels", MFD_CLOEXEC);
  if (fd >= 0)
    path = "/proc/self/fd/" + std::to_string(fd);
#endif
  std::string temporary;
  if (fd < 0) {
    const char *dir = std::getenv("TMPDIR");
    temporary = std::string(dir && *dir ? dir : "/tmp") + "/kiln-kernels-XXXXXX";
    fd = mkstemp(temporary.data());
    if (fd < 0)
      return Status::error("cannot write " + what + " to " + temporary + ": " +
                           std::strerror(errno));
    path = temporary;
  }
  bool written = writeAll(fd, image);
  int writeErrno = errno;
  void *handle = written ? dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  std::string dlError = handle || !written ? "" : dlerror();
  ::close(fd);
  if (!temporary.empty())
    ::unlink(temporary.c_str());
  if (!written)
    return Status::error("cannot write " + what + ": " + std::strerror(writeErrno));
  if (!handle)
    return Status::error("cannot load " + what + ": " + dlError);
  return std::unique_ptr<KernelLoader>(
      std::make_unique<SharedObjectKernelLoader>(handle, what));
}

} // namespace kiln::runtime::cpu
