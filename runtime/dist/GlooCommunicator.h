//===- GlooCommunicator.h - the Gloo communicator's extra entry ----*- C++ -*-===//
//
// createGlooCommunicator (Communicator.h) starts rank 0's store server on
// MASTER_PORT itself. Tests that run several ranks in one process start the
// server first on an ephemeral port and hand it to rank 0 here, so that no
// port has to be guessed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_GLOOCOMMUNICATOR_H
#define KILN_RUNTIME_DIST_GLOOCOMMUNICATOR_H

#include "runtime/dist/Communicator.h"
#include "runtime/dist/TcpStore.h"

namespace kiln::runtime::dist {

// As createGlooCommunicator; rank 0 takes ownership of |server| (already
// listening at env.masterPort) instead of starting one. Other ranks pass
// null.
StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const DistEnv &env, const CommOptions &options,
                       std::unique_ptr<TcpStoreServer> server);

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_GLOOCOMMUNICATOR_H
