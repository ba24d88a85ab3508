//===- Nvtx.cpp - NVTX ranges for Nsight Systems --------------------------===//

#include "runtime/metrics/Nvtx.h"

#ifdef KILN_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace kiln::runtime::nvtx {

#ifdef KILN_HAVE_NVTX
namespace {

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("kiln");
  return d;
}

nvtxEventAttributes_t attributes() {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  return a;
}

} // namespace

Message registerMessage(const std::string &text) {
  return {nvtxDomainRegisterStringA(domain(), text.c_str()), text};
}

void push(const Message &message) {
  if (!message.handle)
    return push(message.text);
  nvtxEventAttributes_t a = attributes();
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered =
      static_cast<nvtxStringHandle_t>(const_cast<void *>(message.handle));
  nvtxDomainRangePushEx(domain(), &a);
}

void push(const std::string &text) {
  nvtxEventAttributes_t a = attributes();
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = text.c_str();
  nvtxDomainRangePushEx(domain(), &a);
}

void pop() { nvtxDomainRangePop(domain()); }
#else
Message registerMessage(const std::string &text) { return {nullptr, text}; }
void push(const Message &) {}
void push(const std::string &) {}
void pop() {}
#endif

} // namespace kiln::runtime::nvtx
