//===- FakeNvtx.cpp - an NVTX tool that writes down the ranges ------------===//
//
// What Nsight Systems is to NVTX, for tests: an injection library
// (NVTX_INJECTION64_PATH) that takes the domain calls NVTX 3's header-only
// API makes and appends one line per call to the file FAKE_NVTX_LOG:
//
//   T push DOMAIN: MESSAGE
//   T pop DOMAIN
//
// T numbers the threads in the order of their first range. Registered
// strings are written as their text.
//
//===----------------------------------------------------------------------===//

#define NVTX_NO_IMPL // a tool: the types, not the calls
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex mutex;
std::map<std::thread::id, int> threads;

// Domains and registered strings live as long as the process, reachable
// from |kept| (never freed: NVTX may use a handle until the end, and
// LeakSanitizer does not count what a global still reaches).
struct Domain {
  std::string name;
};
struct Registered {
  std::string text;
};
std::vector<void *> *kept = new std::vector<void *>;

template <typename T> T *keep(T *p) {
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(p);
  return p;
}

void write(const std::string &line) {
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, added] = threads.try_emplace(std::this_thread::get_id(),
                                         static_cast<int>(threads.size()));
  const char *path = std::getenv("FAKE_NVTX_LOG");
  if (!path)
    return;
  if (FILE *f = std::fopen(path, "a")) {
    std::fprintf(f, "%d %s\n", it->second, line.c_str());
    std::fclose(f);
  }
}

const char *name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<Domain *>(d)->name.c_str() : "(default)";
}

nvtxDomainHandle_t NVTX_API domainCreate(const char *n) {
  return reinterpret_cast<nvtxDomainHandle_t>(keep(new Domain{n ? n : ""}));
}

nvtxStringHandle_t NVTX_API registerString(nvtxDomainHandle_t, const char *s) {
  return reinterpret_cast<nvtxStringHandle_t>(keep(new Registered{s ? s : ""}));
}

int NVTX_API pushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  std::string message;
  if (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii)
    message = a->message.ascii;
  else if (a && a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
    message = reinterpret_cast<Registered *>(a->message.registered)->text;
  write(std::string("push ") + name(d) + ": " + message);
  return 0;
}

int NVTX_API pop(nvtxDomainHandle_t d) {
  write(std::string("pop ") + name(d));
  return 0;
}

} // namespace

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getTable) {
  auto *callbacks = static_cast<const NvtxExportTableCallbacks *>(
      getTable(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size < NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] =
      reinterpret_cast<NvtxFunctionPointer>(domainCreate);
  *table[NVTX_CBID_CORE2_DomainRegisterStringA] =
      reinterpret_cast<NvtxFunctionPointer>(registerString);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] =
      reinterpret_cast<NvtxFunctionPointer>(pushEx);
  *table[NVTX_CBID_CORE2_DomainRangePop] =
      reinterpret_cast<NvtxFunctionPointer>(pop);
  return 1;
}
