//===- CudaRules.h - what CUDA refuses, checked on any table ------*- C++ -*-===//
//
// Scenarios for the fake CUDA table (FakeCudaApi.h, which claims to refuse
// what CUDA refuses) and for the real one on a GPU (CudaGpuTest), so that a
// GPU run checks the fake's claims, error codes included.
//
// Capture: in a capture begun as the runtime begins it
// (cudaStreamCaptureModeThreadLocal), the call a CaptureRule names fails
// with CUDA's code, the capture is invalidated (later work on its stream
// fails, cudaStreamEndCapture returns no graph), and the stream works
// again once the capture has ended. With "nothing" forbidden, what the
// rules allow (waiting on an event of the capture, work and a
// synchronization on a stream outside it, an allocation on another
// thread) leaves a graph that replays.
//
// Launch shapes: the grids and blocks every CUDA device refuses
// (CUDA_ERROR_INVALID_VALUE).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_CUDARULES_H
#define KILN_TESTS_UNIT_CUDA_CUDARULES_H

#include "runtime/cuda/CudaApi.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::cuda::testing {

struct CaptureRule {
  const char *forbidden; // the CudaApi call's CUDA name, or "nothing"
  const char *code;      // its error, "" for "nothing"
};

// Every rule FakeCudaApi models, and the capture that breaks none.
inline std::vector<CaptureRule> captureRules() {
  return {{"cudaMalloc", "cudaErrorStreamCaptureUnsupported (900)"},
          {"cudaMallocHost", "cudaErrorStreamCaptureUnsupported (900)"},
          {"cudaFree", "cudaErrorStreamCaptureUnsupported (900)"},
          {"cudaFreeHost", "cudaErrorStreamCaptureUnsupported (900)"},
          {"cudaStreamSynchronize", "cudaErrorStreamCaptureUnsupported (900)"},
          {"cudaEventSynchronize", "cudaErrorCapturedEvent (907)"},
          {"cudaEventElapsedTime", "cudaErrorCapturedEvent (907)"},
          {"cudaStreamWaitEvent", "cudaErrorStreamCaptureIsolation (905)"},
          {"nothing", ""}};
}

// Runs |rule| on |api| (device already set). Returns what
// cudaStreamEndCapture said, for a caller that knows more of its table.
inline std::string checkCaptureRule(CudaApi &api, const CaptureRule &rule) {
  std::string what = rule.forbidden;
  std::string ended;
  void *dev = nullptr, *side = nullptr, *pinned = nullptr, *elsewhere = nullptr;
  void *more = nullptr; // what a forbidden allocation made after all
  CudaStream s = nullptr, other = nullptr;
  CudaEvent outside = nullptr, inside = nullptr;
  auto cleanUp = [&] {
    for (void *p : {dev, side, elsewhere, what == "cudaMalloc" ? more : nullptr})
      if (p)
        (void)api.free(p);
    for (void *p : {pinned, what == "cudaMallocHost" ? more : nullptr})
      if (p)
        (void)api.freeHost(p);
    for (CudaEvent e : {outside, inside})
      if (e)
        (void)api.eventDestroy(e);
    for (CudaStream st : {s, other})
      if (st)
        (void)api.streamDestroy(st);
  };
  auto run = [&] {
    ASSERT_TRUE(api.malloc(&dev, 256).isOk());
    ASSERT_TRUE(api.malloc(&side, 256).isOk());
    ASSERT_TRUE(api.mallocHost(&pinned, 256).isOk());
    ASSERT_TRUE(api.streamCreate(&s).isOk());
    ASSERT_TRUE(api.streamCreate(&other).isOk());
    ASSERT_TRUE(api.eventCreate(&outside).isOk());
    ASSERT_TRUE(api.eventCreate(&inside).isOk());
    ASSERT_TRUE(api.memsetAsync(dev, 0, 256, s).isOk());
    ASSERT_TRUE(api.streamSynchronize(s).isOk());
    ASSERT_TRUE(api.eventRecord(outside, other).isOk());
    ASSERT_TRUE(api.streamSynchronize(other).isOk());
    ASSERT_TRUE(api.streamBeginCapture(s).isOk());
    ASSERT_TRUE(api.memsetAsync(dev, 3, 256, s).isOk());
    ASSERT_TRUE(api.eventRecord(inside, s).isOk());
    // Allowed: waiting on an event of the capture, work and a
    // synchronization on a stream outside it, an allocation on another
    // thread (a thread-local capture checks only its own).
    EXPECT_TRUE(api.streamWaitEvent(s, inside).isOk());
    EXPECT_TRUE(api.memsetAsync(side, 1, 256, other).isOk());
    EXPECT_TRUE(api.streamSynchronize(other).isOk());
    Status there;
    std::thread([&] { there = api.malloc(&elsewhere, 64); }).join();
    EXPECT_TRUE(there.isOk()) << there.message();
    Status refused;
    float ms = 0;
    if (what == "cudaMalloc")
      refused = api.malloc(&more, 64);
    else if (what == "cudaMallocHost")
      refused = api.mallocHost(&more, 64);
    else if (what == "cudaFree")
      refused = api.free(elsewhere);
    else if (what == "cudaFreeHost")
      refused = api.freeHost(pinned);
    else if (what == "cudaStreamSynchronize")
      refused = api.streamSynchronize(s);
    else if (what == "cudaEventSynchronize")
      refused = api.eventSynchronize(inside);
    else if (what == "cudaEventElapsedTime")
      refused = api.eventElapsedMs(&ms, outside, inside);
    else if (what == "cudaStreamWaitEvent")
      refused = api.streamWaitEvent(s, outside);
    else
      ASSERT_EQ(what, "nothing");
    // A free that succeeded after all must not be repeated.
    if (refused.isOk() && what == "cudaFree")
      elsewhere = nullptr;
    if (refused.isOk() && what == "cudaFreeHost")
      pinned = nullptr;
    CudaGraph graph = nullptr;
    Status end;
    if (what != "nothing") {
      EXPECT_FALSE(refused.isOk()) << what << " was not refused";
      EXPECT_EQ(refused.message().find(what + " failed: " + rule.code), 0u)
          << refused.message();
      Status later = api.memsetAsync(dev, 4, 256, s);
      EXPECT_NE(later.message().find("cudaErrorStreamCaptureInvalidated (901)"),
                std::string::npos)
          << later.message();
      end = api.streamEndCapture(s, &graph);
      ended = end.message();
      EXPECT_EQ(ended.find("cudaStreamEndCapture failed: "
                           "cudaErrorStreamCaptureInvalidated (901)"),
                0u)
          << ended;
      EXPECT_EQ(graph, nullptr);
      if (graph)
        (void)api.graphDestroy(graph);
    } else {
      end = api.streamEndCapture(s, &graph);
      ASSERT_TRUE(end.isOk()) << end.message();
      ASSERT_NE(graph, nullptr);
      CudaGraphExec exec = nullptr;
      ASSERT_TRUE(api.graphInstantiate(&exec, graph).isOk());
      // Captured, not run: the device bytes are still 0.
      ASSERT_TRUE(api.memcpyAsync(pinned, dev, 256, CopyKind::DeviceToHost, s)
                      .isOk());
      ASSERT_TRUE(api.streamSynchronize(s).isOk());
      EXPECT_EQ(static_cast<unsigned char *>(pinned)[0], 0);
      ASSERT_TRUE(api.graphLaunch(exec, s).isOk());
      ASSERT_TRUE(api.memcpyAsync(pinned, dev, 256, CopyKind::DeviceToHost, s)
                      .isOk());
      ASSERT_TRUE(api.streamSynchronize(s).isOk());
      EXPECT_EQ(static_cast<unsigned char *>(pinned)[255], 3);
      (void)api.graphExecDestroy(exec);
      (void)api.graphDestroy(graph);
    }
    // Out of capture mode either way: the stream's work runs again.
    if (!pinned)
      return;
    EXPECT_TRUE(api.memsetAsync(dev, 5, 256, s).isOk());
    EXPECT_TRUE(
        api.memcpyAsync(pinned, dev, 256, CopyKind::DeviceToHost, s).isOk());
    EXPECT_TRUE(api.streamSynchronize(s).isOk());
    EXPECT_EQ(static_cast<unsigned char *>(pinned)[0], 5);
  };
  run();
  cleanUp();
  return ended;
}

struct LaunchShape {
  std::array<uint32_t, 3> grid, block;
  std::string text() const {
    return "grid (" + std::to_string(grid[0]) + ", " + std::to_string(grid[1]) +
           ", " + std::to_string(grid[2]) + "), block (" +
           std::to_string(block[0]) + ", " + std::to_string(block[1]) + ", " +
           std::to_string(block[2]) + ")";
  }
};

// Over 1024 threads a block (or 64 in z), over 2^31 - 1 blocks in x or
// 65535 in y or z, a dimension 0: every CUDA device refuses these
// launches with CUDA_ERROR_INVALID_VALUE.
inline std::vector<LaunchShape> refusedLaunchShapes() {
  return {{{1, 1, 1}, {1025, 1, 1}},  {{1, 1, 1}, {32, 32, 2}},
          {{1, 1, 1}, {1, 1, 65}},    {{1, 1, 1}, {0, 1, 1}},
          {{0, 1, 1}, {32, 1, 1}},    {{0x80000000u, 1, 1}, {32, 1, 1}},
          {{1, 65536, 1}, {32, 1, 1}}, {{1, 1, 65536}, {32, 1, 1}}};
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_CUDARULES_H
