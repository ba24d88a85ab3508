#!/usr/bin/env python3
"""A rank for launch-two-hosts.test: rank 0 listens at MASTER_ADDR:MASTER_PORT
and waits for WORLD_SIZE - 1 peers to send their RANK; each other rank
connects (retrying while rank 0 starts) and sends it. Prints what it saw."""
import os
import socket
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:
    server = socket.create_server(addr)
    server.settimeout(30)
    seen = []
    for _ in range(world - 1):
        conn, peer = server.accept()
        seen.append(conn.recv(64).decode() + "@" + peer[0])
        conn.close()
    print("rank 0 on %s heard %s" % (addr[0], " ".join(sorted(seen))), flush=True)
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(addr, timeout=5) as conn:
                conn.sendall(str(rank).encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # rank 0 not listening yet
    print("rank %d of %d sent" % (rank, world), flush=True)
