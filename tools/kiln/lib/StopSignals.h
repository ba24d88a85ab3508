//===- StopSignals.h - SIGTERM and SIGINT stop a run ------------*- C++ -*-===//
//
// A cluster that preempts a job (SLURM, Kubernetes) sends SIGTERM and kills
// it a grace period later; Ctrl-C sends SIGINT. While a run of one process
// trains, either stops it after the step in progress, which then writes
// its checkpoint, as TensorFlow's PreemptionCheckpointHandler, Orbax's
// preemption sync point and PyTorch Lightning's SIGTERM handling do; the
// exit status is 128 + the signal's number, as if the signal had ended it.
// The handler only records the signal and restores the default action, so
// a second signal ends the process at once.
//
// The replicas of a mirrored run stop after the same step: the first that
// sees the signal after its step k sets the stop at k + 1 (a replica cannot
// finish k + 1 before every replica has entered its collectives, so none
// has passed it), and every replica stops after that step. Ranks of
// several processes (kiln launch) keep the default actions: they would
// need a collective each step to agree on one.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_STOPSIGNALS_H
#define KILN_TOOLS_KILN_LIB_STOPSIGNALS_H

#include <cstdint>

namespace kiln::cli {

class StopSignals {
public:
  // Installs the handlers for the process's first user (and clears what an
  // earlier run recorded); |install| false (several processes) does
  // nothing.
  explicit StopSignals(bool install);
  // The last user puts back the handlers that were there before.
  ~StopSignals();
  StopSignals(const StopSignals &) = delete;
  StopSignals &operator=(const StopSignals &) = delete;

  // After a replica of |replicas| finished step |step|: the signal that
  // stops it now (SIGTERM, SIGINT), or 0 to go on.
  int stopAfter(int64_t step, int replicas);

private:
  bool installed_ = false;
};

// "SIGTERM", "SIGINT" or "signal N".
const char *stopSignalName(int signo);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_STOPSIGNALS_H
