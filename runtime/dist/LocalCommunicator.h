//===- LocalCommunicator.h - ranks that are threads of one process -*- C++ -*-===//
//
// The communicator of --strategy=mirrored (tf.distribute.MirroredStrategy):
// N ranks in one process, one per device instance, each driven by its own
// thread, exchanging data through shared memory instead of sockets.
//
// Results are bit for bit those of the Gloo communicator
// (createGlooCommunicator) on the same inputs: all-reduce combines each
// element in the order of Gloo's ring (the buffer cut into the ring's
// segments; segment group j ends on rank j as x_j + (x_{j+1} + (... +
// x_{j-1})), ranks modulo N), reduce-scatter in rank order, mean divided
// afterwards, f16/bf16 combined in f32 with one rounding per combine
// (runtime/dist/Reduce.h). The work of a collective is shared out: rank r
// reduces (or copies) its part into a shared buffer, and every rank copies
// the result out once all parts are done.
//
// Nothing blocks without a bound: a rank waits at most
// CommOptions::timeoutSeconds for the others to reach a collective, then
// fails naming the ranks that did not (and their last collective). A rank
// whose communicator is destroyed has left: the others fail at once when
// they wait for it, naming it. Ranks that issue different collectives (kind,
// count, dtype, reduction or root) fail with both descriptions. A failed
// collective leaves the group failed: every later call on any rank returns
// an error. KILN_DIST_FAIL_AT=R:N makes rank R's collective number N fail
// without meeting the others (fault injection for tests).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_LOCALCOMMUNICATOR_H
#define KILN_RUNTIME_DIST_LOCALCOMMUNICATOR_H

#include "runtime/dist/Communicator.h"

#include <memory>
#include <vector>

namespace kiln::runtime::dist {

// |worldSize| communicators sharing one group; element r is rank r's. Each
// must be used by one thread at a time; the ranks' threads run their
// collectives concurrently. Errors: a world size below 1, a timeout that is
// not a positive number of seconds.
StatusOr<std::vector<std::unique_ptr<Communicator>>>
createLocalCommunicators(int worldSize, const CommOptions &options);

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_LOCALCOMMUNICATOR_H
