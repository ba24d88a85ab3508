"""Philox-4x32-10 in NumPy and kiln.dropout's mask recipe, for the checks.

Written from Salmon et al. (SC'11) / Random123, separately from the C++ in
ir/reference/Philox.h, and checked here against Random123's known-answer
vectors before any test uses it.
"""

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
MASK = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)


def philox4x32_10(ctr, key):
    """|ctr|: four uint64 arrays of 32-bit words; |key|: two words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & MASK for c in ctr)
    k0, k1 = (np.uint64(k) & MASK for k in key)
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> S32) ^ c1 ^ k0, p1 & MASK, (p0 >> S32) ^ c3 ^ k1, p0 & MASK)
    return c0, c1, c2, c3


KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

for _ctr, _key, _want in KNOWN_ANSWERS:
    _got = tuple(int(w) for w in philox4x32_10(_ctr, _key))
    assert _got == _want, "NumPy Philox-4x32-10 fails a known answer: %r" % (_got,)


def dropout_uniform(seed, counter, size):
    """u(seed, counter, i) for i in [0, size), as kiln.dropout defines it."""
    s = seed & 0xFFFFFFFFFFFFFFFF
    n = counter & 0xFFFFFFFFFFFFFFFF
    i = np.arange(size, dtype=np.uint64)
    word = philox4x32_10((np.full(size, n & 0xFFFFFFFF, dtype=np.uint64),
                          np.full(size, n >> 32, dtype=np.uint64),
                          i & MASK, i >> S32),
                         (s & 0xFFFFFFFF, s >> 32))[0]
    return (word >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
