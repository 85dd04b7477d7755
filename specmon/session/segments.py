"""Rotated files of a session folder: naming, reading in order, compressing and retention.

A long attach writes events.jsonl, samples.csv and gpus.csv every tick. With rotation on
(`attach --rotate`), the writer closes the three together at a tick boundary (hourly by default,
or when they reach a size) and renames them to their segment's name, `samples.000001.csv`; the
plain name always holds the open segment, so a reader that knows nothing of segments still sees
the newest rows, and a kill -9 loses nothing (the open segment is appended and flushed as
before). A closed segment is then compressed in a worker thread: written to `NAME.gz.tmp`,
synced, renamed to `NAME.gz`, and only then is the plain file removed, so at every instant one
complete copy exists (a reader prefers the plain file while both are there).

Each segment stands alone: a CSV segment starts with its header, an events segment with its
format line and a full tick, and it carries the session's start and each arm's newest server
info (`carry`), which a reader uses only when the segment is the first one left (retention
deleted the ones before it).

`--retain` (an age like 7d or a size like 20G) deletes the oldest closed segments, all files of a
segment together, never the open one.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Optional

ROTATED_FILES = ("events.jsonl", "samples.csv", "gpus.csv")  # the files that grow every tick
SEGMENT_DIGITS = 6
MIN_ROTATE_S = 1.0
MIN_ROTATE_BYTES = 4096


@dataclass(frozen=True)
class Rotation:
    """When the growing files are closed into a segment, and which closed segments are kept."""

    every_s: Optional[float] = 3600.0  # age of the open segment
    max_bytes: Optional[int] = None  # the open segment's files together
    retain_s: Optional[float] = None  # delete closed segments last written longer ago than this
    retain_bytes: Optional[int] = None  # delete the oldest closed segments while the folder is larger


# --------------------------------------------------------------------------------------------
# Flag values: an age (30s, 90m, 1h, 7d, 2w) or a size (512K, 100M, 20G, 1T; powers of 1024)

_AGE = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
_VALUE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_age_or_size(text: str) -> tuple[Optional[float], Optional[int]]:
    """(seconds, None) for an age, (None, bytes) for a size; ValueError with one line otherwise.
    Lower-case "m" alone is minutes; "M", "MB" and "MiB" are mebibytes."""
    m = _VALUE.match(text or "")
    unit = m.group(2) if m else ""
    size_unit = re.sub(r"(?i)i?b$", "", unit).lower() if unit not in _AGE else None
    if m is None or not (unit in _AGE or size_unit in _SIZE or (unit and size_unit == "")):
        raise ValueError(f"expected an age (30s, 90m, 1h, 7d, 2w) or a size (512K, 100M, 20G, 1T), got {text!r}")
    n = float(m.group(1))
    if not math.isfinite(n) or n <= 0:
        raise ValueError(f"expected a positive age or size, got {text!r}")
    if unit in _AGE:
        secs = n * _AGE[unit]
        if secs > 100 * 365 * 86400:
            raise ValueError(f"expected an age up to 100 years, got {text!r}")
        return secs, None
    size = n * _SIZE.get(size_unit or "", 1)
    if size > 2 ** 62:
        raise ValueError(f"expected a size up to 4 EiB, got {text!r}")
    return None, int(size)


def check_rotate(text: str) -> tuple[Optional[float], Optional[int]]:
    age, size = parse_age_or_size(text)
    if age is not None and age < MIN_ROTATE_S:
        raise ValueError(f"expected at least {MIN_ROTATE_S:g} s between rotations, got {text!r}")
    if size is not None and size < MIN_ROTATE_BYTES:
        raise ValueError(f"expected segments of at least {MIN_ROTATE_BYTES} bytes, got {text!r}")
    return age, size


# --------------------------------------------------------------------------------------------
# Names


def segment_name(name: str, n: int, compressed: bool = False) -> str:
    stem, ext = name.rsplit(".", 1)
    return f"{stem}.{n:0{SEGMENT_DIGITS}d}.{ext}" + (".gz" if compressed else "")


def _pattern(name: str) -> re.Pattern:
    stem, ext = name.rsplit(".", 1)
    return re.compile(rf"^{re.escape(stem)}\.(\d{{{SEGMENT_DIGITS},}})\.{re.escape(ext)}(\.gz)?$")


def closed_segments(folder: Path, name: str) -> dict[int, Path]:
    """Segment number -> its file: the plain one while it is there (compression not finished),
    else the .gz."""
    pat = _pattern(name)
    found: dict[int, Path] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return {}
    for entry in entries:
        m = pat.match(entry.name)
        if m is None:
            continue
        n = int(m.group(1))
        if n not in found or not m.group(2):  # plain wins
            found[n] = Path(entry.path)
    return dict(sorted(found.items()))


def segment_paths(path: Path) -> list[Path]:
    """Every segment of the file at `path` (a folder's samples.csv, events.jsonl...), oldest
    first: its closed segments, then the open file when it exists."""
    path = Path(path)
    out = list(closed_segments(path.parent, path.name).values())
    if path.exists():
        out.append(path)
    return out


def has_segments(path: Path) -> bool:
    return bool(segment_paths(path))


def open_text(path: Path) -> IO[str]:
    """A segment as text, whether compressed or not (csv wants newline='')."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def next_segment(folder: Path) -> int:
    """The number the next closed segment gets (a folder written to again continues its count)."""
    return 1 + max((n for name in ROTATED_FILES for n in closed_segments(folder, name)), default=0)


# --------------------------------------------------------------------------------------------
# Closed segments: compressed and retained, in one worker thread


class SegmentKeeper:
    """Compresses each closed segment, then applies the retention, off the writer's thread (an
    hour of a 64-worker fleet is ~70 MB: seconds of gzip). `wait()` finishes what is queued."""

    def __init__(self, folder: Path, rotation: Rotation, on_error: Callable[[str], None]):
        self.folder = Path(folder)
        self.rotation = rotation
        self._on_error = on_error
        self._lock = threading.Condition()
        self._queue: list[int] = []
        self._busy = False
        self._running = False  # a worker thread will look at the queue again (set and cleared under the lock)

    def closed(self, n: int) -> None:
        with self._lock:
            self._queue.append(n)
            if not self._running:  # not is_alive(): a thread that found the queue empty may still be exiting
                self._running = True
                threading.Thread(target=self._run, name="specmon-segments", daemon=True).start()

    def wait(self, timeout: Optional[float] = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._lock.wait(left)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    self._lock.notify_all()
                    return
                n = self._queue.pop(0)
                self._busy = True
            try:
                for name in ROTATED_FILES:
                    plain = self.folder / segment_name(name, n)
                    if plain.exists():
                        compress(plain)
                retain(self.folder, self.rotation)
            except OSError as e:
                self._on_error(f"{self.folder}: cannot compress or retain segment {n} ({e.strerror or e})")
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()


def compress(plain: Path) -> Path:
    """plain -> plain.gz; the plain file is removed only once the .gz is complete and synced."""
    gz = plain.with_name(plain.name + ".gz")
    tmp = plain.with_name(plain.name + ".gz.tmp")
    try:
        with open(plain, "rb") as src, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename=plain.name, mode="wb", fileobj=raw, compresslevel=6, mtime=0) as out:
                shutil.copyfileobj(src, out, 1 << 20)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, gz)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    plain.unlink()
    return gz


def retain(folder: Path, rotation: Rotation, now: Optional[float] = None) -> list[int]:
    """Deletes the oldest closed segments that are past `retain_s`, or while the folder holds more
    than `retain_bytes`; the open files are never touched. Returns the numbers deleted."""
    if rotation.retain_s is None and rotation.retain_bytes is None:
        return []
    now = time.time() if now is None else now
    by_n: dict[int, list[Path]] = {}
    for name in ROTATED_FILES:
        for n, p in closed_segments(folder, name).items():
            by_n.setdefault(n, []).append(p)
            # a plain copy and its .gz (compression under way) go together
            other = p.with_name(p.name[:-3]) if p.name.endswith(".gz") else p.with_name(p.name + ".gz")
            if other.exists():
                by_n[n].append(other)
    total = sum(_size(p) for p in Path(folder).iterdir() if p.is_file())
    deleted = []
    for n in sorted(by_n):
        files = by_n[n]
        newest = max((_mtime(p) for p in files), default=now)
        too_old = rotation.retain_s is not None and now - newest > rotation.retain_s
        too_big = rotation.retain_bytes is not None and total > rotation.retain_bytes
        if not (too_old or too_big):
            break  # oldest first: a younger segment is kept while an older one is
        for p in files:
            total -= _size(p)
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        deleted.append(n)
    return deleted


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def iter_lines(path: Path) -> Iterator[tuple[Path, list[str]]]:
    """(segment, its lines) for each segment of `path`, oldest first."""
    for seg in segment_paths(path):
        with open_text(seg) as f:
            yield seg, f.read().split("\n")
