//===- Nvtx.h - NVTX ranges for Nsight Systems ------------------*- C++ -*-===//
//
// Kiln's ranges in the NVTX domain "kiln", which Nsight Systems (nsys
// profile) shows on each thread's row beside the CUDA calls and kernels, as
// PyTorch's emit_nvtx and XLA's thunk annotations do: kiln train's batches,
// steps, evals and checkpoints, and each thunk a runtime runs one by one (a
// step launched as a CUDA Graph is one range; its kernels carry their own
// names). Through NVTX 3's header-only API from the CUDA toolkit: with no
// tool attached (no NVTX_INJECTION64_PATH) a range costs an indirect call
// that returns at once. Built without the toolkit's headers, these do
// nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_METRICS_NVTX_H
#define KILN_RUNTIME_METRICS_NVTX_H

#include <string>

namespace kiln::runtime::nvtx {

// A message registered in the domain once (nvtxDomainRegisterStringA), for
// a range pushed every step; a tool that registers none gets the text.
struct Message {
  const void *handle = nullptr;
  std::string text;
};
Message registerMessage(const std::string &text);

// Pushes a range on the calling thread; pop ends the innermost.
void push(const Message &message);
void push(const std::string &text);
void pop();

// A range for the life of the object.
class Range {
public:
  explicit Range(const Message &message) { push(message); }
  explicit Range(const std::string &text) { push(text); }
  ~Range() { pop(); }
  Range(const Range &) = delete;
  Range &operator=(const Range &) = delete;
};

} // namespace kiln::runtime::nvtx

#endif // KILN_RUNTIME_METRICS_NVTX_H
