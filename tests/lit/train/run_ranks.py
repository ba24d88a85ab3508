"""Runs one command as N ranks of a job on this host, as a launcher would:
each process gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port), and writes its stdout
to PREFIX.R and its stderr to PREFIX.R.err. Exits with the first non-zero
exit status (printing that rank's stderr) or 0 when every rank succeeded;
every other rank that failed gets a line with its status too (a signal by
name), so a rank that died without a word still shows. Every rank is
killed after TIMEOUT seconds (default 300).

usage: run_ranks.py N PREFIX [--timeout=S] -- COMMAND..."""
import os
import signal
import socket
import subprocess
import sys

n = int(sys.argv[1])
prefix = sys.argv[2]
rest = sys.argv[3:]
timeout = 300.0
while rest and rest[0] != "--":
    if rest[0].startswith("--timeout="):
        timeout = float(rest[0].split("=", 1)[1])
    else:
        sys.exit("run_ranks.py: unknown option " + rest[0])
    rest = rest[1:]
if not rest or rest[0] != "--" or len(rest) < 2:
    sys.exit(__doc__)
command = rest[1:]

with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]

procs = []
for r in range(n):
    env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
               LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    out = open("%s.%d" % (prefix, r), "w")
    err = open("%s.%d.err" % (prefix, r), "w")
    procs.append((subprocess.Popen(command, env=env, stdout=out, stderr=err),
                  out, err))
status = 0
for r, (p, out, err) in enumerate(procs):
    try:
        code = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        for q, _, _ in procs:
            q.kill()
        code = p.wait()
        sys.stderr.write("run_ranks.py: rank %d timed out\n" % r)
    out.close()
    err.close()
    if code != 0 and status == 0:
        status = code if code > 0 else 1
        sys.stderr.write("run_ranks.py: rank %d exited with %d:\n" % (r, code))
        sys.stderr.write(open("%s.%d.err" % (prefix, r)).read())
    elif code != 0:
        what = "%d" % code
        if code < 0:
            what += " (%s)" % signal.Signals(-code).name
        sys.stderr.write("run_ranks.py: rank %d also exited with %s\n" % (r, what))
sys.exit(status)
