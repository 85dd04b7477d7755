"""The session folder: samples.csv, requests.csv, levels.csv (appended, flushed per row) and
session.json (rewritten atomically on every update).

A value that is not known is an empty cell. Booleans are 1/0. A user mark is a samples.csv row
with an empty `arm`, the `ts` and the `marker` label (readers skip rows without an arm), and
is also listed under "markers" in session.json.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit, urlunsplit

from specmon import __version__
from specmon.model import (GPU_COLUMNS, LEVEL_COLUMNS, REQUEST_COLUMNS, SAMPLE_COLUMNS, GpuSnapshot, LevelResult,
                           RequestRecord, Sample)


def default_out_dir(base: str | Path = "specmon-sessions") -> Path:
    return Path(base) / datetime.now().strftime("%Y%m%d-%H%M%S")


def public_url(url: str) -> str:
    """The URL without user:password, so credentials embedded in a URL are never written."""
    u = urlsplit(url)
    if u.username is None and u.password is None:
        return url
    host = u.hostname or ""
    if u.port:
        host = f"{host}:{u.port}"
    return urlunsplit((u.scheme, host, u.path, u.query, u.fragment))


def _cell(v: Any, col: str) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if v != v:  # NaN is "unknown" too
            return ""
        if col in ("ts", "t_start", "t_scheduled", "t_end"):  # epoch seconds: keep ms
            return f"{v:.3f}"
        return f"{v:.6g}"
    return str(v)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


class _CsvFile:
    def __init__(self, path: Path, columns: Sequence[str]):
        self.columns = list(columns)
        new = not path.exists() or path.stat().st_size == 0
        self._f = open(path, "a", newline="", encoding="utf-8")
        self._w = csv.writer(self._f)
        if new:
            self._w.writerow(self.columns)
            self._f.flush()

    def write(self, values: dict[str, Any]) -> None:
        self._w.writerow([_cell(values.get(c), c) for c in self.columns])
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class Recorder:
    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._samples = _CsvFile(self.out_dir / "samples.csv", SAMPLE_COLUMNS)
        self._requests = _CsvFile(self.out_dir / "requests.csv", REQUEST_COLUMNS)
        self._levels = _CsvFile(self.out_dir / "levels.csv", LEVEL_COLUMNS)
        self._gpus = _CsvFile(self.out_dir / "gpus.csv", GPU_COLUMNS)
        now = time.time()
        self._session: dict[str, Any] = {
            "start_time": _iso(now),
            "start_ts": now,
            "end_time": None,
            "specmon_version": __version__,
            "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                     "python": platform.python_version()},
            "arms": [],
            "ramp_plan": None,
            "markers": [],
            "exit_reason": None,
        }
        self.closed = False
        self._write_session()

    # ---- rows ------------------------------------------------------------------------------
    def write_sample(self, s: Sample, marker: Optional[str] = None) -> None:
        if self.closed:
            return
        row = vars(s).copy()
        row["marker"] = marker
        self._samples.write(row)

    def write_marker(self, label: str, ts: Optional[float] = None) -> None:
        """A mark is the operator's: it is kept even after close (the TUI still shows a finished
        session and takes marks on it), appended to samples.csv and session.json's markers."""
        ts = time.time() if ts is None else ts
        if self.closed:
            late = _CsvFile(self.out_dir / "samples.csv", SAMPLE_COLUMNS)
            late.write({"ts": ts, "marker": label})
            late.close()
        else:
            self._samples.write({"ts": ts, "marker": label})
        self._session["markers"].append({"ts": ts, "label": label})
        self._write_session()

    def write_gpus(self, snap: GpuSnapshot, ts: Optional[float] = None) -> None:
        """Every GPU of this tick (stamped with the tick's ts, so replay pairs them with its
        samples); a host without NVML gets one row saying why."""
        if self.closed:
            return
        ts = snap.ts if ts is None else ts
        if not snap.available:
            self._gpus.write({"ts": ts, "available": False, "reason": snap.reason})
            return
        for g in snap.gpus:
            row = vars(g).copy()
            row["gpu"] = g.index
            # Empty cell: the driver refused the list; "-": it listed no process.
            row["processes"] = None if g.processes is None else ";".join(
                f"{p.pid}:{'' if p.used_bytes is None else p.used_bytes}" for p in g.processes) or "-"
            row.update(ts=ts, available=True)
            self._gpus.write(row)

    def write_request(self, r: RequestRecord) -> None:
        if not self.closed:
            self._requests.write(vars(r))

    def write_level(self, r: LevelResult) -> None:
        if not self.closed:
            self._levels.write(vars(r))

    # ---- session.json ----------------------------------------------------------------------
    def update_session(self, **fields: Any) -> None:
        if "arms" in fields and fields["arms"] is not None:
            fields["arms"] = [self._clean_arm(a) for a in fields["arms"]]
        self._session.update(fields)
        self._write_session()

    @staticmethod
    def _clean_arm(arm: Any) -> Any:
        if isinstance(arm, dict):
            arm = {k: v for k, v in arm.items() if "api_key" != k and k != "key"}
            if isinstance(arm.get("url"), str):
                arm["url"] = public_url(arm["url"])
        return arm

    @property
    def session(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._session))

    def _write_session(self) -> None:
        path = self.out_dir / "session.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self._session, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def close(self, exit_reason: str) -> None:
        if self.closed:
            return
        now = time.time()
        self._session["end_time"] = _iso(now)
        self._session["end_ts"] = now
        self._session["exit_reason"] = exit_reason
        self._write_session()
        for f in (self._samples, self._requests, self._levels, self._gpus):
            f.close()
        self.closed = True
