#!/usr/bin/env python3
"""Writes damaged graph files for the malformed-file tests.

  mangle.py truncate IN OUT N     first N bytes of IN
  mangle.py identifier IN OUT ID  IN with bytes 4..7 (the file identifier) set to ID
  mangle.py random OUT SEED SIZE  SIZE random bytes (seeded, so the test is stable)
  mangle.py random-kiln OUT SEED SIZE  as random, with the KILN identifier
"""
import random
import sys


def main(argv):
    mode = argv[1]
    if mode == "truncate":
        data = open(argv[2], "rb").read()[: int(argv[4])]
        out = argv[3]
    elif mode == "identifier":
        data = bytearray(open(argv[2], "rb").read())
        data[4:8] = argv[4].encode("ascii")[:4].ljust(4, b"\0")
        out = argv[3]
    elif mode in ("random", "random-kiln"):
        rng = random.Random(int(argv[3]))
        data = bytearray(rng.randrange(256) for _ in range(int(argv[4])))
        if mode == "random-kiln":
            data[4:8] = b"KILN"
        out = argv[2]
    else:
        sys.exit("mangle.py: unknown mode " + mode)
    with open(out, "wb") as f:
        f.write(bytes(data))


if __name__ == "__main__":
    main(sys.argv)
