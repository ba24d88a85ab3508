//===- CudaDevice.cpp - CUDA device discovery through cudart ---------------===//
//
// See CudaDevice.h. cudart's C entry points are declared here with their
// documented signatures (cudaError_t is an int enum; device attributes are
// the cudaDeviceAttr values 16, 75 and 76), so no CUDA header is needed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaDevice.h"

#include "runtime/DynamicLibrary.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::runtime::cuda {

namespace {

using kiln::runtime::DynamicLibrary;

using GetCount = int (*)(int *);
using GetAttribute = int (*)(int *, int, int);
using GetVersion = int (*)(int *);
using ErrorText = const char *(*)(int);
using GetProperties = int (*)(void *, int);

constexpr int kAttrMultiprocessors = 16;
constexpr int kAttrMajor = 75;
constexpr int kAttrMinor = 76;
constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;

struct Cudart {
  DynamicLibrary library;
  GetCount getDeviceCount = nullptr;
  GetAttribute getAttribute = nullptr;
  GetVersion runtimeVersion = nullptr, driverVersion = nullptr;
  ErrorText errorName = nullptr, errorString = nullptr;
  GetProperties getProperties = nullptr;
};

const Cudart &cudart() {
  static Cudart lib;
  static std::once_flag once;
  std::call_once(once, [] {
    lib.library = openCudaLibrary("libcudart", "KILN_CUDART");
    auto symbol = [&](const char *name) { return lib.library.symbol(name); };
    lib.getDeviceCount = reinterpret_cast<GetCount>(symbol("cudaGetDeviceCount"));
    lib.getAttribute =
        reinterpret_cast<GetAttribute>(symbol("cudaDeviceGetAttribute"));
    lib.runtimeVersion =
        reinterpret_cast<GetVersion>(symbol("cudaRuntimeGetVersion"));
    lib.driverVersion = reinterpret_cast<GetVersion>(symbol("cudaDriverGetVersion"));
    lib.errorName = reinterpret_cast<ErrorText>(symbol("cudaGetErrorName"));
    lib.errorString = reinterpret_cast<ErrorText>(symbol("cudaGetErrorString"));
    // cudaDeviceProp starts with char name[256] in every CUDA version.
    void *props = symbol("cudaGetDeviceProperties_v2");
    if (!props)
      props = symbol("cudaGetDeviceProperties");
    lib.getProperties = reinterpret_cast<GetProperties>(props);
  });
  return lib;
}

std::string describeError(const Cudart &lib, const char *call, int code) {
  std::string text = std::string(call) + " failed: ";
  text += lib.errorName ? lib.errorName(code) : "error";
  text += " (" + std::to_string(code) + ")";
  if (lib.errorString)
    text += ": " + std::string(lib.errorString(code));
  return text;
}

} // namespace

StatusOr<CudaRuntimeInfo> discoverCudaDevices() {
  const Cudart &lib = cudart();
  if (!lib.library.handle)
    return Status::error("no CUDA runtime library found: " +
                         describeLoadFailure(lib.library, "KILN_CUDART"));
  if (!lib.getDeviceCount || !lib.getAttribute)
    return Status::error(lib.library.path +
                         ": expected cudaGetDeviceCount and "
                         "cudaDeviceGetAttribute, found neither or one");
  CudaRuntimeInfo info;
  info.library = lib.library.path;
  if (lib.runtimeVersion)
    lib.runtimeVersion(&info.runtimeVersion);
  if (lib.driverVersion)
    lib.driverVersion(&info.driverVersion);
  int count = 0;
  if (int code = lib.getDeviceCount(&count))
    return Status::error(describeError(lib, "cudaGetDeviceCount", code));
  for (int i = 0; i < count; ++i) {
    CudaDeviceInfo device;
    device.index = i;
    if (int code = lib.getAttribute(&device.multiprocessors,
                                    kAttrMultiprocessors, i))
      return Status::error(describeError(lib, "cudaDeviceGetAttribute", code));
    lib.getAttribute(&device.major, kAttrMajor, i);
    lib.getAttribute(&device.minor, kAttrMinor, i);
    lib.getAttribute(&device.maxSharedMemoryPerBlockOptin,
                     kAttrMaxSharedMemoryPerBlockOptin, i);
    if (lib.getProperties) {
      // Generously larger than any cudaDeviceProp.
      std::vector<char> props(64 * 1024, 0);
      if (lib.getProperties(props.data(), i) == 0)
        device.name.assign(props.data(), strnlen(props.data(), 256));
    }
    info.devices.push_back(std::move(device));
  }
  return info;
}

std::string describeCudaDevices() {
  StatusOr<CudaRuntimeInfo> info = discoverCudaDevices();
  if (!info.isOk())
    return "CUDA: no device (" + info.status().message() + ")";
  const CudaRuntimeInfo &r = info.value();
  if (r.devices.empty())
    return "CUDA: no device (" + r.library + " sees none)";
  std::string text = "CUDA: " + std::to_string(r.devices.size()) + " device(s):";
  for (const CudaDeviceInfo &d : r.devices)
    text += " " + std::to_string(d.index) + ": " +
            (d.name.empty() ? "unnamed" : d.name) + " (sm_" +
            std::to_string(d.smArch()) + ", " + std::to_string(d.multiprocessors) +
            " SMs)";
  return text;
}

} // namespace kiln::runtime::cuda
