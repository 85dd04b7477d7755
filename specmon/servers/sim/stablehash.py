"""Hashes that are the same in every process, for everything `--seed` must reproduce.

Python's built-in hash() of a str (and of a tuple holding one) is salted per process
(PYTHONHASHSEED), so two runs with the same --seed drew different lengths, token ids and
acceptance from it. These helpers hash a canonical encoding instead.
"""

from __future__ import annotations

import hashlib

MASK64 = (1 << 64) - 1
GOLDEN64 = 0x9E3779B97F4A7C15   # 2^64 / golden ratio: the usual stride between counter-based draws


def stable_hash(*parts) -> int:
    """A 64-bit hash of `parts` (str, int, float, bytes, bool, None and tuples of them), the same
    in every process and on every platform: blake2b over their repr()."""
    data = repr(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def mix64(x: int) -> int:
    """A well-spread 64-bit value from any integer (the splitmix64 finaliser). Cheap enough to call
    once per generated token: draw i of a stream is mix64(stream_seed + i * GOLDEN64)."""
    x = (x + GOLDEN64) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def draw(stream_seed: int, i: int) -> int:
    """Draw number i (0, 1, ...) of the stream `stream_seed`: a 64-bit integer."""
    return mix64((stream_seed + i * GOLDEN64) & MASK64)


def uniform(stream_seed: int, i: int) -> float:
    """Draw number i of the stream as a float in [0, 1)."""
    return (draw(stream_seed, i) >> 11) * (1.0 / (1 << 53))
