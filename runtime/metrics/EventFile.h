//===- EventFile.h - TensorBoard event files ----------------------*- C++ -*-===//
//
// `kiln train --tensorboard-dir=DIR` writes what PyTorch's SummaryWriter and
// Keras's TensorBoard callback write: a TensorBoard event file in DIR,
//
//   events.out.tfevents.<unix seconds>.<host>.<pid>.<n>
//
// a TFRecord file (each record: its length as 8 little-endian bytes, the
// length's masked CRC-32C, the bytes, their masked CRC-32C) of
// tensorflow.Event protocol buffers (tensorboard/compat/proto/event.proto):
// first one with file_version "brain.Event:2", then one per scalar
// (summary.value { tag, simple_value }) and, for a resumed run, a
// session_log { status: START } at the first step it trains, after which
// TensorBoard drops the events of earlier files at that step and later (the
// steps the interrupted run logged past its checkpoint), as SummaryWriter's
// purge_step does. The protocol buffers are encoded by hand: Kiln links no
// protobuf library.
//
// Records are kept in memory until flush(), which appends them to the file;
// a failed write (a full disk) is an error naming the file. No LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_METRICS_EVENTFILE_H
#define KILN_RUNTIME_METRICS_EVENTFILE_H

#include "runtime/Status.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace kiln::runtime {

// CRC-32C (Castagnoli) of |size| bytes at |data|, and TFRecord's mask of
// it: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void *data, size_t size);
uint32_t maskedCrc32c(const void *data, size_t size);

// The encoded tensorflow.Event messages EventFileWriter writes, for tests:
// the file version, one scalar, and a session START.
std::string encodeFileVersionEvent(double wallTime);
std::string encodeScalarEvent(double wallTime, int64_t step,
                              const std::string &tag, float value);
std::string encodeSessionStartEvent(double wallTime, int64_t step);
// |payload| framed as one TFRecord.
std::string tfRecord(const std::string &payload);

class EventFileWriter {
public:
  // Creates |dir| (and its parents) and a new event file in it, which holds
  // the file-version event once this returns.
  static StatusOr<std::unique_ptr<EventFileWriter>> create(const std::string &dir);
  ~EventFileWriter(); // flushes; a failure then is not reported

  const std::string &path() const { return path_; }

  // Queues a scalar |value| of |tag| at |step|.
  void addScalar(const std::string &tag, double value, int64_t step);
  // Queues a session START at |step| (a run resumed from a checkpoint).
  void addSessionStart(int64_t step);
  // Appends the queued records to the file.
  Status flush();

private:
  EventFileWriter(std::string path, std::FILE *file)
      : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE *file_;
  std::string pending_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_METRICS_EVENTFILE_H
