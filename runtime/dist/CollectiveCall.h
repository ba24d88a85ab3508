//===- CollectiveCall.h - what every communicator checks and says -*- C++ -*-===//
//
// The bookkeeping around a collective that the communicators share, so that
// Gloo's (GlooCommunicator.cpp), the in-process one (LocalCommunicator.cpp)
// and NCCL's describe a collective, check its arguments and bound its wait
// the same way: the description that heads its errors ("all_reduce sum of
// 12 f32"), the checks made before meeting the other ranks (the count, the
// reduction of the dtype, the root), CommOptions' timeout, the fault
// injection variables of the tests (KILN_DIST_KILL_AT, KILN_DIST_FAIL_AT)
// and how elapsed time is printed. Header-only, like Reduce.h.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_COLLECTIVECALL_H
#define KILN_RUNTIME_DIST_COLLECTIVECALL_H

#include "runtime/Status.h"
#include "runtime/dist/Communicator.h"
#include "runtime/dist/Reduce.h"
#include "runtime/package/Package.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string>

namespace kiln::runtime::dist {

// The descriptions of the collectives in errors.
inline std::string describeAllReduce(int64_t count, PkgDType dtype,
                                     PkgReduceKind op) {
  return std::string("all_reduce ") + reduceName(op) + " of " +
         std::to_string(count) + " " + pkgDTypeName(dtype);
}
inline std::string describeReduceScatter(int64_t countPerRank, PkgDType dtype,
                                         PkgReduceKind op) {
  return std::string("reduce_scatter ") + reduceName(op) + " of " +
         std::to_string(countPerRank) + " " + pkgDTypeName(dtype) +
         " per rank";
}
inline std::string describeAllGather(int64_t countPerRank, PkgDType dtype) {
  return "all_gather of " + std::to_string(countPerRank) + " " +
         pkgDTypeName(dtype) + " per rank";
}
inline std::string describeBroadcast(int64_t count, PkgDType dtype, int root) {
  return "broadcast of " + std::to_string(count) + " " + pkgDTypeName(dtype) +
         " from rank " + std::to_string(root);
}

// The checks before meeting the other ranks; errors start with |what|.
inline Status checkCount(const std::string &what, int64_t count) {
  if (count < 0)
    return Status::error(what + ": negative element count " +
                         std::to_string(count));
  return Status::ok();
}
// Sets |fn| to the element-wise reduction of |dtype| (Reduce.h), or fails.
inline Status checkReduction(const std::string &what, PkgDType dtype,
                             PkgReduceKind op, ReduceFn &fn) {
  fn = reduceFunction(dtype, op);
  if (!fn)
    return Status::error(what + ": not supported for this dtype");
  return Status::ok();
}
inline Status checkRoot(const std::string &what, int root, int worldSize) {
  if (root < 0 || root >= worldSize)
    return Status::error(what + ": the root is not a rank of the world size " +
                         std::to_string(worldSize));
  return Status::ok();
}

// CommOptions::timeoutSeconds in whole milliseconds (rounded up), or an
// error when it is not a positive number of seconds.
inline StatusOr<std::chrono::milliseconds>
collectiveTimeout(const CommOptions &options) {
  if (!(options.timeoutSeconds > 0) || options.timeoutSeconds > 1e7)
    return Status::error("collective timeout " +
                         std::to_string(options.timeoutSeconds) +
                         " s: expected a positive number of seconds");
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(options.timeoutSeconds * 1000)));
}

// Fault injection for tests: |variable| set to RANK:N names collective N of
// rank RANK. Returns N when RANK is |rank|, else 0 (collectives count from
// 1).
inline uint64_t faultInjectionPoint(const char *variable, int rank) {
  if (const char *value = std::getenv(variable)) {
    int r = -1;
    unsigned long long seq = 0;
    if (std::sscanf(value, "%d:%llu", &r, &seq) == 2 && r == rank)
      return seq;
  }
  return 0;
}

// An elapsed time or a timeout in errors: "1.5 s" (three digits).
inline std::string formatSeconds(std::chrono::steady_clock::duration d) {
  std::ostringstream os;
  os << std::setprecision(3)
     << std::chrono::duration_cast<std::chrono::milliseconds>(d).count() /
            1000.0
     << " s";
  return os.str();
}

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_COLLECTIVECALL_H
