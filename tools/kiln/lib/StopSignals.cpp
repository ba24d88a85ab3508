//===- StopSignals.cpp - SIGTERM and SIGINT stop a run between steps -----===//

#include "tools/kiln/lib/StopSignals.h"

#include <signal.h>

#include <atomic>
#include <limits>
#include <mutex>

namespace kiln::cli {
namespace {

static_assert(std::atomic<int>::is_always_lock_free,
              "the handler stores to an atomic int");
std::atomic<int> received{0};
std::atomic<int64_t> stopStep{std::numeric_limits<int64_t>::max()};

std::mutex users;
int userCount = 0;
struct sigaction previousTerm, previousInt;

extern "C" void onStopSignal(int signo) { received.store(signo); }

} // namespace

StopSignals::StopSignals(bool install) {
  if (!install)
    return;
  std::lock_guard<std::mutex> lock(users);
  installed_ = true;
  if (userCount++ > 0)
    return;
  received = 0;
  stopStep = std::numeric_limits<int64_t>::max();
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  // The default action again after the first: a second signal ends the
  // process at once.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGTERM, &action, &previousTerm);
  sigaction(SIGINT, &action, &previousInt);
}

StopSignals::~StopSignals() {
  if (!installed_)
    return;
  std::lock_guard<std::mutex> lock(users);
  if (--userCount > 0)
    return;
  sigaction(SIGTERM, &previousTerm, nullptr);
  sigaction(SIGINT, &previousInt, nullptr);
}

int StopSignals::stopAfter(int64_t step, int replicas) {
  if (!installed_)
    return 0;
  int signo = received.load();
  if (!signo)
    return 0;
  int64_t none = std::numeric_limits<int64_t>::max();
  stopStep.compare_exchange_strong(none, replicas > 1 ? step + 1 : step);
  return step >= stopStep.load() ? signo : 0;
}

const char *stopSignalName(int signo) {
  switch (signo) {
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  default:
    return "a signal";
  }
}

} // namespace kiln::cli
