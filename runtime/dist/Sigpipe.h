//===- Sigpipe.h - writes to dead peers fail with EPIPE, not SIGPIPE -----===//
//
// A write(2) to a socket whose peer is gone raises SIGPIPE in the writing
// thread. Gloo writes to its sockets with writev(2), without MSG_NOSIGNAL,
// both in the thread that runs a collective and in its device's event-loop
// thread. What SIGPIPE then does belongs to the program: by default it
// kills the process without a word; `kiln` runs under llvm::InitLLVM, whose
// handler exits with 74 (EX_IOERR), meant for a closed stdout pipe, just
// as silently. Either way a survivor of a dead rank would vanish instead
// of naming the rank (tests/lit/train/rank-killed.test caught this about
// once in ten runs under load).
//
// ScopedSigpipeBlock blocks SIGPIPE in the calling thread for its scope,
// so such a write fails with EPIPE (which Gloo reports as an error naming
// the pair); a SIGPIPE raised meanwhile is consumed before the old mask is
// restored. Threads started inside the scope inherit the block for good
// (Gloo's event loop). The process's handler and other threads (stdout
// writes) are left as they are.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_SIGPIPE_H
#define KILN_RUNTIME_DIST_SIGPIPE_H

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace kiln::runtime::dist {

class ScopedSigpipeBlock {
public:
  ScopedSigpipeBlock() {
    sigset_t pipe = pipeSet();
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    wasBlocked_ = sigismember(&old_, SIGPIPE) == 1;
  }
  ~ScopedSigpipeBlock() {
    if (wasBlocked_)
      return; // the caller's own block: its pending signals are its own
    sigset_t pipe = pipeSet(), pending;
    const timespec now = {0, 0};
    while (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1 &&
           sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock &) = delete;
  ScopedSigpipeBlock &operator=(const ScopedSigpipeBlock &) = delete;

private:
  static sigset_t pipeSet() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    return s;
  }
  sigset_t old_;
  bool wasBlocked_ = false;
};

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_SIGPIPE_H
