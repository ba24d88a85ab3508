//===- Launch.cpp - kiln launch: start the ranks of a distributed job -----===//
//
// `kiln launch --nproc-per-node=N [--nnodes=M --node-rank=R --master-addr=A
// --master-port=P] -- CMD ARGS...` starts N copies of CMD on this node, as
// torchrun does: each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK (this node's rank), MASTER_ADDR and MASTER_PORT in its
// environment, which runtime/dist reads (distEnvFromEnvironment).
//
// Each rank runs in its own process group, with stdin from /dev/null and
// its stdout and stderr through pipes; the launcher writes their lines to
// its own stdout and stderr, each prefixed with "[rank R] ". SIGINT,
// SIGTERM and SIGHUP are forwarded to every rank's group. When a rank exits
// with a non-zero status or dies of a signal, the others get SIGTERM and,
// after a grace period, SIGKILL; the launcher then exits 1 naming the rank
// and how it ended. It exits 0 when every rank does.
//
// Everything waits in one poll(2) loop over the output pipes and a
// self-pipe that the signal handlers (SIGCHLD included) write to, so no
// child is waited for without the loop also watching the others.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

extern char **environ;

namespace kiln::cli {

namespace {

constexpr const char *kCommand = "kiln launch";
using Clock = std::chrono::steady_clock;

// The self-pipe the signal handlers write the signal number to.
int signalPipe[2] = {-1, -1};

void onSignal(int signo) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  (void)!write(signalPipe[1], &byte, 1);
  errno = saved;
}

struct Rank {
  int rank = 0, localRank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;       // read ends, -1 once closed
  std::string outLine, errLine; // partial lines
  bool running = false;
  int status = 0; // as waitpid gives it, once !running
};

// The kernel's ephemeral port range, from which bind(0) and connect()
// pick local ports (32768 to 60999 where unreadable).
std::pair<int, int> ephemeralRange() {
  int low = 0, high = 0;
  if (FILE *f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2)
      low = high = 0;
    std::fclose(f);
  }
  if (low < 1 || high < low || high > 65535)
    return {32768, 60999};
  return {low, high};
}

// Whether a TCP socket can bind |address| with |port|.
bool bindable(const addrinfo *address, int port) {
  sockaddr_storage at{};
  std::memcpy(&at, address->ai_addr, address->ai_addrlen);
  if (at.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6 *>(&at)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in *>(&at)->sin_port = htons(port);
  int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC,
                  address->ai_protocol);
  if (fd < 0)
    return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool ok =
      bind(fd, reinterpret_cast<sockaddr *>(&at), address->ai_addrlen) == 0;
  close(fd);
  return ok;
}

// A free TCP port on |host| for rank 0's store, or 29500. The launcher
// only chooses it; rank 0 listens on it later. A port from the ephemeral
// range (bind to port 0) could meanwhile become the local port of any
// outgoing connection on the machine (Gloo's mesh, another job's), and
// rank 0's listen would then fail; so the port is drawn at random below
// that range (above it where there is no room below), where only
// listeners bind, and checked free by binding it; with no room on either
// side, the port bind(0) gives.
int freePort(const std::string &host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo *found = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &found) != 0 || !found)
    return 29500;
  // Candidates: [low, high), at least 1000 ports outside the range.
  auto [ephemeralLow, ephemeralHigh] = ephemeralRange();
  int low = 0, high = 0;
  if (ephemeralLow - 1025 >= 1000) {
    low = std::max(1025, std::min(20000, ephemeralLow - 1000));
    high = ephemeralLow;
  } else if (65535 - ephemeralHigh >= 1000) {
    low = ephemeralHigh + 1;
    high = 65536;
  }
  int port = 29500;
  std::random_device device;
  std::mt19937 rng(device());
  for (int attempt = 0; high > low && attempt < 64; ++attempt) {
    int candidate = std::uniform_int_distribution<int>(low, high - 1)(rng);
    if (bindable(found, candidate)) {
      port = candidate;
      freeaddrinfo(found);
      return port;
    }
  }
  int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC,
                  found->ai_protocol);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &len) == 0)
    port = bound.ss_family == AF_INET6
               ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
               : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  if (fd >= 0)
    close(fd);
  freeaddrinfo(found);
  return port;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char *name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (SIG") + name + ")" : std::string());
  }
  return "ended with status " + std::to_string(status);
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

// Writes every complete line of |pending| (plus |more|) to |fd| with the
// rank's prefix; keeps the rest. At |eof| a partial line is ended.
void emitLines(int fd, const std::string &prefix, std::string &pending,
               const char *more, size_t size, bool eof) {
  pending.append(more, size);
  size_t start = 0;
  std::string out;
  for (;;) {
    size_t nl = pending.find('\n', start);
    if (nl == std::string::npos)
      break;
    out += prefix;
    out.append(pending, start, nl + 1 - start);
    start = nl + 1;
  }
  pending.erase(0, start);
  if (eof && !pending.empty()) {
    out += prefix + pending + "\n";
    pending.clear();
  }
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    done += n;
  }
}

// Starts |command| as rank |r| with |env| added to this environment.
bool spawn(Rank &r, const std::vector<std::string> &command,
           const std::vector<std::string> &env, std::string &error) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  // Everything the child needs, built before fork.
  std::vector<std::string> envStrings;
  for (char **e = environ; *e; ++e) {
    std::string entry = *e;
    bool replaced = false;
    for (const std::string &mine : env)
      if (entry.compare(0, mine.find('=') + 1, mine, 0, mine.find('=') + 1) == 0)
        replaced = true;
    if (!replaced)
      envStrings.push_back(entry);
  }
  envStrings.insert(envStrings.end(), env.begin(), env.end());
  std::vector<char *> envp, argv;
  for (std::string &s : envStrings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = command;
  for (std::string &s : args)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string execError =
      std::string(kCommand) + ": cannot run '" + command[0] + "': ";

  pid_t pid = fork();
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    // Own process group: signals reach the rank's children too. A launcher
    // that dies (even by SIGKILL) takes its ranks with it.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE})
      signal(sig, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvpe(argv[0], argv.data(), envp.data());
    std::string message = execError + std::strerror(errno) + "\n";
    (void)!write(2, message.data(), message.size());
    _exit(127);
  }
  setpgid(pid, pid); // also here, so a signal sent at once finds the group
  close(out[1]);
  close(err[1]);
  r.pid = pid;
  r.out = out[0];
  r.err = err[0];
  r.running = true;
  return true;
}

void signalAll(std::vector<Rank> &ranks, int sig) {
  for (Rank &r : ranks)
    if (r.running)
      kill(-r.pid, sig);
}

} // namespace

int runLaunch(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs) {
  // Flags before "--", the command after it.
  llvm::ArrayRef<std::string> flagArgs = args, command;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--") {
      flagArgs = args.take_front(i);
      command = args.drop_front(i + 1);
      break;
    }

  std::string nprocText = "1", nnodesText = "1", nodeRankText = "0",
              masterAddr = "127.0.0.1", masterPortText, graceText = "5";
  FlagParser parser(
      kCommand, "[OPTIONS] -- COMMAND [ARGS...]",
      "Starts the ranks of a distributed job on this node, as torchrun does: "
      "--nproc-per-node copies of COMMAND, each with RANK, WORLD_SIZE, "
      "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT "
      "set (kiln train reads them). Their output is prefixed with "
      "'[rank R] '; SIGINT, SIGTERM and SIGHUP are forwarded to them. When a "
      "rank fails, the others are stopped (SIGTERM, then SIGKILL after the "
      "grace period) and kiln launch exits 1 naming it; it exits 0 when "
      "every rank succeeds.");
  parser.addValue("nproc-per-node", &nprocText, "N",
                  "ranks to start on this node (default 1)");
  parser.addValue("nnodes", &nnodesText, "M", "nodes in the job (default 1)");
  parser.addValue("node-rank", &nodeRankText, "R",
                  "this node's index, 0..M-1 (default 0); its ranks are "
                  "R*N .. R*N+N-1");
  parser.addValue("master-addr", &masterAddr, "HOST",
                  "where rank 0 serves the rendezvous store (default "
                  "127.0.0.1; with --nnodes > 1, an address of node 0 the "
                  "others reach)");
  parser.addValue("master-port", &masterPortText, "PORT",
                  "the store's TCP port (default: a free port with one node, "
                  "29500 with several)");
  parser.addValue("grace-seconds", &graceText, "S",
                  "after SIGTERM, how long a rank may take to exit before "
                  "SIGKILL (default 5)");
  parser.setEpilogue("Example:\n"
                     "  kiln launch --nproc-per-node=2 -- kiln train "
                     "model.kiln --strategy=data-parallel\n");
  if (std::optional<int> exit = parser.parseOrExit(flagArgs, outs, errs))
    return *exit;
  if (command.empty()) {
    printError(errs, kCommand,
               flagArgs.size() == args.size()
                   ? "missing '-- COMMAND [ARGS...]' (the program each rank runs)"
                   : "missing COMMAND after '--'");
    parser.printUsage(errs);
    return kExitUsage;
  }
  auto nproc = parseInteger(kCommand, "nproc-per-node", nprocText, 1, errs);
  auto nnodes = parseInteger(kCommand, "nnodes", nnodesText, 1, errs);
  auto nodeRank = parseInteger(kCommand, "node-rank", nodeRankText, 0, errs);
  if (!nproc || !nnodes || !nodeRank)
    return kExitError;
  auto grace = parsePositiveReal(kCommand, "grace-seconds", graceText, errs);
  if (!grace)
    return kExitError;
  if (*nodeRank >= *nnodes) {
    printError(errs, kCommand,
               "--node-rank=" + nodeRankText + ": expected 0.." +
                   std::to_string(*nnodes - 1) + " for --nnodes=" + nnodesText);
    return kExitError;
  }
  if (*nproc > 4096 || *nnodes > (1 << 20)) {
    printError(errs, kCommand, "--nproc-per-node or --nnodes is too large");
    return kExitError;
  }
  if (masterAddr.empty()) {
    printError(errs, kCommand, "--master-addr is empty");
    return kExitError;
  }
  int masterPort;
  if (!masterPortText.empty()) {
    auto p = parseInteger(kCommand, "master-port", masterPortText, 1, errs);
    if (!p)
      return kExitError;
    if (*p > 65535) {
      printError(errs, kCommand,
                 "--master-port=" + masterPortText + ": expected 1..65535");
      return kExitError;
    }
    masterPort = static_cast<int>(*p);
  } else {
    masterPort = *nnodes == 1 ? freePort(masterAddr) : 29500;
  }
  outs.flush();
  errs.flush();

  if (pipe2(signalPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    printError(errs, kCommand, llvm::Twine("pipe: ") + std::strerror(errno));
    return kExitError;
  }
  struct sigaction action {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  struct sigaction previous[4];
  const int handled[4] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  for (int i = 0; i < 4; ++i)
    sigaction(handled[i], &action, &previous[i]);

  int world = static_cast<int>(*nproc * *nnodes);
  std::vector<Rank> ranks(*nproc);
  std::vector<std::string> commandWords(command.begin(), command.end());
  std::string spawnError;
  for (int i = 0; i < *nproc; ++i) {
    Rank &r = ranks[i];
    r.localRank = i;
    r.rank = static_cast<int>(*nodeRank * *nproc + i);
    std::vector<std::string> env = {
        "RANK=" + std::to_string(r.rank),
        "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(i),
        "LOCAL_WORLD_SIZE=" + std::to_string(*nproc),
        "GROUP_RANK=" + std::to_string(*nodeRank),
        "MASTER_ADDR=" + masterAddr,
        "MASTER_PORT=" + std::to_string(masterPort),
    };
    if (!spawn(r, commandWords, env, spawnError))
      break;
  }

  // The first rank to fail (its index), or the signal that stopped us.
  std::optional<size_t> firstFailure;
  int receivedSignal = 0;
  std::optional<Clock::time_point> killAt;
  if (!spawnError.empty()) {
    signalAll(ranks, SIGTERM);
    killAt = Clock::now() + std::chrono::milliseconds(
                                static_cast<int64_t>(*grace * 1000));
  }
  // Output still open after every rank ended (a grandchild holding the
  // pipes) is read for at most the grace period.
  std::optional<Clock::time_point> drainUntil;

  for (;;) {
    bool anyRunning = false, anyOpen = false;
    for (const Rank &r : ranks) {
      anyRunning |= r.running;
      anyOpen |= r.out >= 0 || r.err >= 0;
    }
    if (!anyRunning && !drainUntil)
      drainUntil = Clock::now() + std::chrono::milliseconds(
                                      static_cast<int64_t>(*grace * 1000));
    if (!anyRunning && (!anyOpen || Clock::now() >= *drainUntil))
      break;

    std::vector<pollfd> fds;
    fds.push_back({signalPipe[0], POLLIN, 0});
    for (const Rank &r : ranks) {
      if (r.out >= 0)
        fds.push_back({r.out, POLLIN, 0});
      if (r.err >= 0)
        fds.push_back({r.err, POLLIN, 0});
    }
    int timeout = -1;
    auto until = [&](Clock::time_point t) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    t - Clock::now())
                    .count() +
                1;
      int v = static_cast<int>(std::max<int64_t>(ms, 0));
      timeout = timeout < 0 ? v : std::min(timeout, v);
    };
    if (killAt)
      until(*killAt);
    if (!anyRunning && drainUntil)
      until(*drainUntil);
    int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR)
      break;

    // Signals: forward INT/TERM/HUP; CHLD just wakes us.
    unsigned char sigs[64];
    ssize_t got;
    while ((got = read(signalPipe[0], sigs, sizeof(sigs))) > 0)
      for (ssize_t i = 0; i < got; ++i)
        if (sigs[i] != SIGCHLD) {
          if (!receivedSignal)
            receivedSignal = sigs[i];
          signalAll(ranks, sigs[i]);
          if (!killAt)
            killAt = Clock::now() + std::chrono::milliseconds(
                                        static_cast<int64_t>(*grace * 1000));
        }

    // Output.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents)
        continue;
      for (Rank &r : ranks) {
        bool isOut = r.out == fds[i].fd, isErr = r.err == fds[i].fd;
        if (!isOut && !isErr)
          continue;
        char buffer[65536];
        ssize_t size = read(fds[i].fd, buffer, sizeof(buffer));
        if (size < 0 && errno == EINTR)
          break;
        std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
        bool eof = size <= 0;
        emitLines(isOut ? 1 : 2, prefix, isOut ? r.outLine : r.errLine, buffer,
                  size > 0 ? size : 0, eof);
        if (eof) {
          close(fds[i].fd);
          (isOut ? r.out : r.err) = -1;
        }
        break;
      }
    }

    // Exits.
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank &r = ranks[i];
      if (!r.running)
        continue;
      int status = 0;
      pid_t done = waitpid(r.pid, &status, WNOHANG);
      if (done != r.pid)
        continue;
      r.running = false;
      r.status = status;
      if (failed(status) && !firstFailure && !receivedSignal) {
        firstFailure = i;
        signalAll(ranks, SIGTERM);
        killAt = Clock::now() + std::chrono::milliseconds(
                                    static_cast<int64_t>(*grace * 1000));
      }
    }
    if (killAt && Clock::now() >= *killAt) {
      signalAll(ranks, SIGKILL);
      killAt.reset();
    }
  }
  // Ranks whose groups still hold the pipes after the drain: stop them.
  for (Rank &r : ranks) {
    if (r.out >= 0 || r.err >= 0)
      kill(-r.pid, SIGKILL);
    for (int *fd : {&r.out, &r.err})
      if (*fd >= 0) {
        close(*fd);
        *fd = -1;
      }
  }
  for (int i = 0; i < 4; ++i)
    sigaction(handled[i], &previous[i], nullptr);
  close(signalPipe[0]);
  close(signalPipe[1]);
  signalPipe[0] = signalPipe[1] = -1;

  if (!spawnError.empty()) {
    printError(errs, kCommand, "cannot start the ranks: " + spawnError);
    return kExitError;
  }
  if (firstFailure) {
    const Rank &r = ranks[*firstFailure];
    std::string others;
    for (const Rank &o : ranks)
      if (&o != &r && WIFSIGNALED(o.status))
        others += (others.empty() ? "" : ", ") + std::to_string(o.rank);
    printError(errs, kCommand,
               "rank " + std::to_string(r.rank) + " (local rank " +
                   std::to_string(r.localRank) + ", pid " +
                   std::to_string(r.pid) + ") " + describeStatus(r.status) +
                   (others.empty() ? std::string()
                                   : "; stopped rank(s) " + others));
    return kExitError;
  }
  if (receivedSignal) {
    const char *name = sigabbrev_np(receivedSignal);
    printError(errs, kCommand,
               llvm::Twine("stopped by signal SIG") + (name ? name : "?") +
                   "; forwarded to every rank");
    return 128 + receivedSignal;
  }
  return kExitOk;
}

} // namespace kiln::cli
