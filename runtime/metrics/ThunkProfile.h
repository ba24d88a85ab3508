//===- ThunkProfile.h - per-thunk times, as CSV or a trace ------*- C++ -*-===//
//
// What `kiln train --profile` and `kiln-cuda-run --profile` write: each
// thunk of a step with its kind and description (pkgThunkKindName,
// pkgDescribeThunk), its time over the profiled steps, and where it sat in
// the last of them. A path ending in .json gets a Chrome trace (the Trace
// Event Format that chrome://tracing and Perfetto open, as torch.profiler's
// export_chrome_trace writes): one complete event per thunk at the time it
// started after the step's start and for as long as it ran, collectives on
// a row of their own, each event's args holding the thunk's index, calls
// and mean time. Any other path gets CSV: thunk,ms,calls,kind,what with the
// milliseconds per step. readThunkProfile reads either back (kiln inspect
// --roofline --measured), and kiln-cuda-run's older two-column CSV.
//
// kiln train's trace also has the host's side of the step on a row of its
// own (HostSpan: waiting for the batch, then the step's call from staging
// the batch to reading the loss), the thunks placed where the runtime began
// the step inside that call.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_METRICS_THUNKPROFILE_H
#define KILN_RUNTIME_METRICS_THUNKPROFILE_H

#include "runtime/Status.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

// One thunk over the profiled steps.
struct ThunkTime {
  std::string kind; // pkgThunkKindName: kernel, gemm, all_reduce, ...
  std::string what; // pkgDescribeThunk: "kernel 'fusion7', kiln_fusion7"
  double ms = 0;    // over all its calls
  uint64_t calls = 0;
  // In the last profiled step: when it started after the step's start, and
  // how long it took.
  double lastStartMs = 0, lastMs = 0;

  double msPerStep() const { return calls ? ms / double(calls) : 0.0; }
};

// A runtime's per-thunk profile as ThunkTimes of |package|'s thunks;
// |times|(entry, row) sets the row's ms, lastStartMs and lastMs.
template <typename Entry, typename Times>
std::vector<ThunkTime> thunkTimes(const LoadedPackage &package,
                                  const std::vector<Entry> &profile,
                                  Times times) {
  std::vector<ThunkTime> out;
  for (size_t i = 0; i < profile.size() && i < package.thunks.size(); ++i) {
    ThunkTime row{pkgThunkKindName(package, i), pkgDescribeThunk(package, i)};
    row.calls = profile[i].calls;
    times(profile[i], row);
    out.push_back(std::move(row));
  }
  return out;
}

// A span of the host's work in the trace (kiln train: "batch", "step N"),
// from the start of the traced step's iteration.
struct HostSpan {
  std::string name;
  double startMs = 0, ms = 0;
};

// Whether |path| gets a trace (it ends in .json) rather than CSV.
bool isThunkTracePath(const std::string &path);

// |rows| as CSV, or as a trace of the last profiled step titled |title|:
// |host| on a row of its own, the thunks' starts |thunksAtMs| after the
// start of the host's first span (where the runtime began the step).
std::string thunkProfileCsv(const std::vector<ThunkTime> &rows);
std::string thunkProfileTrace(const std::vector<ThunkTime> &rows,
                              const std::string &title,
                              const std::vector<HostSpan> &host = {},
                              double thunksAtMs = 0);

// The (thunk, milliseconds per step) pairs of a profile in either format.
// Errors say where: "line 2 ('0,fast'): expected THUNK,MILLISECONDS", or
// what the trace lacks.
StatusOr<std::vector<std::pair<size_t, double>>>
readThunkProfile(const std::string &text);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_METRICS_THUNKPROFILE_H
