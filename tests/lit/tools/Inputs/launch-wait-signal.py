#!/usr/bin/env python3
"""A rank for launch-signals.test: blocks SIGINT and SIGTERM, says it is
ready, waits for one of them and reports which (then exits 0)."""
import os
import signal

wanted = {signal.SIGINT, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
print("ready", flush=True)
got = signal.sigwait(wanted)
print("rank %s got %s" % (os.environ["RANK"], signal.Signals(got).name), flush=True)
