//===- Nvrtc.cpp - CUDA C++ to PTX and cubins through NVRTC -----------------===//
//
// See Nvrtc.h. KILN_CUDA_INCLUDE_DIR (set by CMake to the toolkit's include
// directory; $KILN_CUDA_INCLUDE_DIR overrides it at run time) is where
// NVRTC finds cuda_fp16.h and cuda_bf16.h.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/Nvrtc.h"

#include "runtime/Files.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"

#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>

namespace kiln {

namespace {

std::string includeDirectory() {
  if (const char *dir = std::getenv("KILN_CUDA_INCLUDE_DIR"))
    return dir;
#ifdef KILN_CUDA_INCLUDE_DIR
  return KILN_CUDA_INCLUDE_DIR;
#else
  return "/usr/local/cuda/include";
#endif
}

std::vector<std::string> optionsFor(unsigned arch) {
  return {"--gpu-architecture=sm_" + std::to_string(arch), "-std=c++17",
          "--ptxas-options=-v", "-default-device",
          "-I" + includeDirectory()};
}

// The first integer after |marker| on a line of |log| that also holds
// |lineMarker| (or -1).
int numberBefore(llvm::StringRef log, llvm::StringRef suffix) {
  size_t at = log.find(suffix);
  if (at == llvm::StringRef::npos)
    return -1;
  llvm::StringRef head = log.take_front(at).rtrim();
  size_t start = head.find_last_not_of("0123456789");
  llvm::StringRef digits = head.drop_front(start + 1);
  int value;
  if (digits.empty() || digits.getAsInteger(10, value))
    return -1;
  return value;
}

void parsePtxasInfo(CubinResult &cubin) {
  llvm::StringRef log = cubin.log;
  cubin.registers = numberBefore(log, " registers");
  cubin.spillStoreBytes = numberBefore(log, " bytes spill stores");
  cubin.spillLoadBytes = numberBefore(log, " bytes spill loads");
  cubin.stackFrameBytes = numberBefore(log, " bytes stack frame");
}

bool readFile(const std::string &path, std::string &out) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return false;
  out = (*buffer)->getBuffer().str();
  return true;
}

bool compileOne(const std::string &source, const std::string &name,
                unsigned arch, std::string &ptx, CubinResult &cubin,
                std::string &error) {
  nvrtcProgram program;
  nvrtcResult status = nvrtcCreateProgram(&program, source.c_str(),
                                          (name + ".cu").c_str(), 0, nullptr,
                                          nullptr);
  if (status != NVRTC_SUCCESS) {
    error = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(status);
    return false;
  }
  std::vector<std::string> options = optionsFor(arch);
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  status = nvrtcCompileProgram(program, static_cast<int>(argv.size()),
                               argv.data());
  size_t logSize = 0;
  std::string log;
  if (nvrtcGetProgramLogSize(program, &logSize) == NVRTC_SUCCESS && logSize > 1) {
    log.resize(logSize);
    nvrtcGetProgramLog(program, &log[0]);
    log.resize(logSize - 1);
  }
  bool ok = status == NVRTC_SUCCESS;
  if (!ok) {
    error = std::string("nvrtcCompileProgram (sm_") + std::to_string(arch) +
            "): " + nvrtcGetErrorString(status) + "\n" + log;
  } else {
    size_t size = 0;
    nvrtcResult s1 = nvrtcGetPTXSize(program, &size);
    if (s1 == NVRTC_SUCCESS) {
      ptx.resize(size);
      s1 = nvrtcGetPTX(program, &ptx[0]);
      if (!ptx.empty() && ptx.back() == '\0')
        ptx.pop_back();
    }
    nvrtcResult s2 = nvrtcGetCUBINSize(program, &size);
    if (s2 == NVRTC_SUCCESS) {
      cubin.image.resize(size);
      s2 = nvrtcGetCUBIN(program, reinterpret_cast<char *>(cubin.image.data()));
    }
    if (s1 != NVRTC_SUCCESS || s2 != NVRTC_SUCCESS || cubin.image.empty()) {
      error = std::string("nvrtcGetPTX/nvrtcGetCUBIN (sm_") +
              std::to_string(arch) + "): " +
              nvrtcGetErrorString(s1 != NVRTC_SUCCESS ? s1 : s2);
      ok = false;
    }
    cubin.log = log;
  }
  nvrtcDestroyProgram(&program);
  return ok;
}

} // namespace

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string nvrtcCacheDirectory() { return runtime::kilnCacheDirectory("nvrtc"); }

bool compileCudaSource(const std::string &source, const std::string &name,
                       const std::vector<unsigned> &archs, NvrtcResult &result,
                       std::string &error) {
  result = NvrtcResult();
  if (archs.empty()) {
    error = "expected at least one CUDA architecture";
    return false;
  }
  std::string cacheDir = nvrtcCacheDirectory();
  std::string version = nvrtcVersionString();
  unsigned lowest = *std::min_element(archs.begin(), archs.end());
  for (unsigned arch : archs) {
    llvm::SHA256 hash;
    hash.update("kiln-nvrtc-1\n" + version + "\n" + std::to_string(arch) + "\n");
    for (const std::string &o : optionsFor(arch))
      hash.update(o + "\n");
    hash.update(source);
    std::array<uint8_t, 32> digest = hash.final();
    std::string key = llvm::toHex(digest, /*LowerCase=*/true);
    std::string stem;
    if (!cacheDir.empty()) {
      llvm::SmallString<256> path(cacheDir);
      llvm::sys::path::append(path, key);
      stem = std::string(path);
    }
    CubinResult cubin;
    cubin.arch = arch;
    std::string ptx, image;
    if (!stem.empty() && readFile(stem + ".cubin", image) && !image.empty() &&
        readFile(stem + ".ptx", ptx) && readFile(stem + ".log", cubin.log)) {
      cubin.image.assign(image.begin(), image.end());
      cubin.fromCache = true;
    } else {
      if (!compileOne(source, name, arch, ptx, cubin, error))
        return false;
      if (!stem.empty()) {
        // The log last: an entry counts only once all three files exist.
        std::string bytes(cubin.image.begin(), cubin.image.end());
        (void)(runtime::writeFileAtomically(stem + ".ptx", ptx).isOk() &&
               runtime::writeFileAtomically(stem + ".cubin", bytes).isOk() &&
               runtime::writeFileAtomically(stem + ".log", cubin.log).isOk());
      }
    }
    parsePtxasInfo(cubin);
    if (arch == lowest) {
      result.ptx = std::move(ptx);
      result.ptxArch = arch;
    }
    result.cubins.push_back(std::move(cubin));
  }
  return true;
}

bool parseCudaArchs(const std::string &text, std::vector<unsigned> &archs,
                    std::string &error) {
  archs.clear();
  if (text.empty()) {
    archs.push_back(90);
    return true;
  }
  llvm::SmallVector<llvm::StringRef, 4> parts;
  llvm::StringRef(text).split(parts, ',');
  for (llvm::StringRef part : parts) {
    llvm::StringRef digits = part.trim();
    digits.consume_front("sm_");
    unsigned value;
    if (digits.empty() || digits.getAsInteger(10, value) || value < 50 ||
        value > 999) {
      error = "expected an architecture such as sm_90, found '" + part.str() + "'";
      return false;
    }
    if (std::find(archs.begin(), archs.end(), value) == archs.end())
      archs.push_back(value);
  }
  return true;
}

} // namespace kiln
