"""SGLang's per-request export files, read while the server writes them (`specmon attach URL
--request-metrics-dir DIR`).

A server started with `--export-metrics-to-file --export-metrics-to-file-dir DIR` appends one
JSON object per finished request (health checks left out) to `DIR/sglang-request-metrics-
YYYYMMDD_HH.log`, a new file every hour of its local time (SGLang 0.5.23,
srt/observability/request_metrics_exporter.py). The object is the request's final meta_info
(`id`, `prompt_tokens`, `completion_tokens`, `cached_tokens`, `queue_time`,
`first_token_latency`, `e2e_latency`, `request_received_ts`, `request_finished_ts`,
`finish_reason`, `num_retractions`, and with speculative decoding `spec_verify_ct`,
`spec_num_correct_drafts`, `spec_num_proposed_drafts`, `spec_accept_length`) plus
`request_parameters` (the request's own fields as a JSON string: prompt text and ids, which are
never kept here).

The reader never gets in the server's way: it opens each file read-only, takes no lock, reads
from the offset it reached last time (at most READ_CAP bytes a poll, the rest next time) and
consumes only whole lines: a last line the server is still writing stays for the next poll.
Rotation is a new file name: each poll lists the folder and reads every file past its offset in
name order (the hour suffix sorts by time); a file that shrank was replaced and is read from its
start. By default the files' contents before the session are skipped (`from_start=False`: the
session is about traffic from now on).

`RequestMetricsSource` turns the lines into ObservedRequest records (model.py) for one arm;
analysis/request_windows.py adds an ObservedWindow of their aggregates every window (count, TTFT
and queue-time percentiles, mean lengths, acceptance): the events the live session emits.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from specmon import clock
from specmon.errors import UsageError
from specmon.model import ObservedRequest, ObservedRequestsRead

FILE_PATTERN = re.compile(r"^sglang-request-metrics-\d{8}_\d{2}\.log$")
READ_CAP = 4 << 20  # bytes read from the files per poll at most (a burst is read over a few ticks)
MAX_LINE = 16 << 20  # a "line" longer than this without a newline is not a record: skipped whole


@dataclass
class _FileState:
    offset: int = 0
    ino: Optional[int] = None


def _num(d: dict, key: str) -> Optional[float]:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _int(d: dict, key: str) -> Optional[int]:
    v = _num(d, key)
    return None if v is None or v < 0 else int(v)


def _finish(v: Any) -> Optional[str]:
    if isinstance(v, dict):
        return str(v.get("type")) if v.get("type") is not None else None
    return None if v is None else str(v)[:60]


def parse_record(obj: Any, arm: str, ts_read: float, file: Optional[str] = None) -> Optional[ObservedRequest]:
    """One exported line's object as a typed record; None when it is not a request's meta_info."""
    if not isinstance(obj, dict) or ("prompt_tokens" not in obj and "completion_tokens" not in obj):
        return None
    rid = obj.get("id")
    return ObservedRequest(
        arm=arm, ts_read=ts_read, rid=None if rid is None else str(rid)[:200],
        received_ts=_num(obj, "request_received_ts"), finished_ts=_num(obj, "request_finished_ts"),
        ttft_s=_num(obj, "first_token_latency"), queue_s=_num(obj, "queue_time"), e2e_s=_num(obj, "e2e_latency"),
        prompt_tokens=_int(obj, "prompt_tokens"), output_tokens=_int(obj, "completion_tokens"),
        cached_tokens=_int(obj, "cached_tokens"), spec_verify_ct=_int(obj, "spec_verify_ct"),
        spec_accepted_drafts=_int(obj, "spec_num_correct_drafts"),
        spec_proposed_drafts=_int(obj, "spec_num_proposed_drafts"),
        spec_accept_length=_num(obj, "spec_accept_length"), retractions=_int(obj, "num_retractions"),
        finish_reason=_finish(obj.get("finish_reason")), file=file)


class ExportFileTail:
    """The whole lines appended to a folder's export files since the last read (see above)."""

    def __init__(self, directory: str | Path, *, from_start: bool = False, read_cap: int = READ_CAP):
        self.dir = Path(directory)
        self.read_cap = read_cap
        self._files: dict[str, _FileState] = {}
        self.bad_lines = 0  # lines too long to be a record, over the whole session
        if not from_start:
            for name in self._names():
                try:
                    st = os.stat(self.dir / name)
                except OSError:
                    continue
                self._files[name] = _FileState(st.st_size, st.st_ino)

    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.dir) if FILE_PATTERN.match(n))
        except OSError:
            return []  # the folder is not there (yet): the server makes it when it starts

    def read(self) -> list[tuple[str, bytes]]:
        """(file name, one whole line without its newline) for each line appended since the last read."""
        out: list[tuple[str, bytes]] = []
        budget = self.read_cap
        for name in self._names():
            if budget <= 0:
                break
            state = self._files.setdefault(name, _FileState())
            try:
                # O_NONBLOCK: a FIFO or a stalled network mount put there is never waited on
                fd = os.open(self.dir / name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if state.ino is not None and st.st_ino != state.ino or st.st_size < state.offset:
                    state.offset = 0  # replaced or truncated: a new file under the old name
                state.ino = st.st_ino
                if st.st_size <= state.offset:
                    continue
                os.lseek(fd, state.offset, os.SEEK_SET)
                chunk = os.read(fd, min(budget, st.st_size - state.offset))
            except OSError:
                continue
            finally:
                os.close(fd)
            budget -= len(chunk)
            end = chunk.rfind(b"\n")
            if end < 0:
                if len(chunk) >= MAX_LINE:  # no newline in this much: not a line a server wrote
                    state.offset += len(chunk)
                    self.bad_lines += 1
                continue  # a line still being written: next time
            for line in chunk[:end].split(b"\n"):
                if line.strip():
                    out.append((name, line))
            state.offset += end + 1
        return out


class RequestMetricsSource:
    """One arm's export folder: poll() is what was appended since the last poll, as one
    ObservedRequestsRead (None when nothing was); analysis/request_windows.py makes the windows."""

    def __init__(self, arm: str, directory: str | Path, *, from_start: bool = False):
        self.arm = arm
        self.dir = Path(directory)
        self.tail = ExportFileTail(directory, from_start=from_start)
        self.total = 0  # records read over the session
        self.bad_lines = 0

    def poll(self, now: Optional[float] = None) -> Optional[ObservedRequestsRead]:
        now = clock.wall() if now is None else now
        records: list[ObservedRequest] = []
        bad = self.tail.bad_lines
        self.tail.bad_lines = 0
        for name, line in self.tail.read():
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                bad += 1
                continue
            rec = parse_record(obj, self.arm, now, name)
            if rec is None:
                bad += 1
            else:
                records.append(rec)
        if not records and not bad:
            return None
        self.total += len(records)
        self.bad_lines += bad
        return ObservedRequestsRead(arm=self.arm, records=records, bad_lines=bad, ts=now)


def sources_from_args(values: Sequence[str], arm_names: Sequence[str]) -> list[RequestMetricsSource]:
    """`--request-metrics-dir DIR` (the one arm) or `NAME=DIR` (that arm), each a folder on this
    host; UsageError (exit 2) for a folder that is not one or a name that is no arm."""
    out: list[RequestMetricsSource] = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or (name not in arm_names and Path(v).exists()):
            name, path = "", v
        if not arm_names:
            raise UsageError(f"--request-metrics-dir {v}: needs the URL of the server that writes it (attach URL ...)")
        if not name:
            if len(arm_names) != 1:
                raise UsageError(f"--request-metrics-dir {v}: {len(arm_names)} servers are watched; "
                                 "say whose folder it is: NAME=DIR")
            name = arm_names[0]
        elif name not in arm_names:
            raise UsageError(f"--request-metrics-dir {v}: no server is named {name!r} "
                             f"(names: {', '.join(arm_names)})")
        p = Path(path)
        if not p.is_dir():
            raise UsageError(f"--request-metrics-dir {path}: not a folder (the server's "
                             "--export-metrics-to-file-dir, on this host)")
        if not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"--request-metrics-dir {path}: cannot read this folder (permissions)")
        out.append(RequestMetricsSource(name, p))
    return out
