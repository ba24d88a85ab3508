//===- FreePort.h - a loopback port for a test's rendezvous -----*- C++ -*-===//
//
// The NCCL tests (runtime-dist and cuda) start their ranks' TCP store on a
// port nothing listens on now: one bound to port 0 on the loopback, then
// released.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_RUNTIME_DIST_FREEPORT_H
#define KILN_TESTS_UNIT_RUNTIME_DIST_FREEPORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kiln::runtime::testing {

inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

} // namespace kiln::runtime::testing

#endif // KILN_TESTS_UNIT_RUNTIME_DIST_FREEPORT_H
