"""Play a recorded session folder back as the Events the live session emitted.

`ReplaySource(dir, speed)` is a source.SessionSource like the LiveSession, so the TUI and the
headless printer play it unchanged (Dolphie's record/replay through the same panels).

A folder replays exactly the events that were emitted, in their order, from its event log
(events.jsonl): replay is the inverse of recording. A folder recorded before the event log has
only its CSVs; its events are rebuilt by the converter in legacy.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

from specmon.errors import UsageError
from specmon.model import ArmSpec, Event, LevelStarted, Marker, SessionStarted
from specmon.session import codec, segments
from specmon.session.folder import EVENTS_FILE
from specmon.session.legacy import events_of
from specmon.session.source import Emit

# --------------------------------------------------------------------------------------------
# Reading the folder

def read_event_log(path: Path) -> list[Event]:
    """events.jsonl back into events: its rotated segments first, oldest first, compressed or not
    (segments.py), then the open file. A torn last line (the process was killed mid-write) is
    dropped; any other bad line is one clear error naming the file and line. When retention
    deleted the first segments, the session's start and arms' server info come from what the
    oldest one left carries."""
    decoder = codec.EventLogDecoder(codec.event_types())  # format 1 (every tick in full) or 2 (changes)
    events: list[Event] = []
    first = True
    for seg, lines in segments.iter_lines(Path(path)):
        last = len(lines) - 1
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                e = decoder.decode(line)
                if e is not None:
                    events.append(e)
                elif first and decoder.carried and not any(isinstance(x, SessionStarted) for x in events):
                    events.extend(decoder.carried)
            except (codec.EventDecodeError, TypeError, KeyError, ValueError) as e:
                if i == last:
                    break  # no newline yet: the line was being written when the recording stopped
                raise UsageError(f"{seg}:{i + 1}: expected a specmon event ({e})") from None
            first = False
    return events


# --------------------------------------------------------------------------------------------
# Playing it


class ReplaySource:
    """A recorded session with the LiveSession's `run(emit, stop)`; space pauses, n skips a level."""

    def __init__(self, session_dir: Path | str, speed: float = 1.0) -> None:
        if speed <= 0:
            raise UsageError(f"--speed: expected a positive number, got {speed}")
        folder = Path(session_dir)
        log = folder / EVENTS_FILE
        if segments.has_segments(log) and (folder / "session.json").exists():
            self.events = read_event_log(log)
            started = next((e for e in self.events if isinstance(e, SessionStarted)), None)
            self.arms: list[ArmSpec] = list(started.arms) if started is not None else []
        else:
            self.events = events_of(folder)
            started = next((e for e in self.events if isinstance(e, SessionStarted)), None)
            self.arms = list(started.arms) if started is not None else []
        if not self.events:
            raise UsageError(f"{folder}: no events recorded; nothing to replay")
        self.speed = speed
        self.out_dir: Optional[Path] = folder
        self.mode_label = f"replay ×{speed:g}"
        self.stop_cause: Optional[str] = None
        self._emit: Emit = lambda e: None
        self._resume = asyncio.Event()
        self._resume.set()
        self._skip = False
        self._now = self.events[0].ts if self.events else 0.0  # recorded time of the last event played

    def mark(self, label: str) -> None:
        """Shown, not written: a replay never modifies the recording. Stamped with the recording's clock."""
        self._emit(Marker(label=label, ts=self._now))

    def pause_ramp(self) -> bool:
        self._resume.clear()
        return True

    def resume_ramp(self) -> bool:
        self._resume.set()
        return True

    def skip_level(self) -> bool:
        self._skip = True
        self._resume.set()
        return True

    async def run(self, emit: Emit, stop: asyncio.Event) -> str:
        self._emit = emit
        loop = asyncio.get_running_loop()
        if not self.events:
            return "empty recording"
        t0 = self.events[0].ts
        offset = 0.0  # recorded seconds skipped by pauses and level skips
        start = loop.time()
        for i, ev in enumerate(self.events):
            if self._skip and not isinstance(ev, LevelStarted):
                self._now = ev.ts
                emit(ev)  # fast-forward to the next level's start
                continue
            if self._skip:
                self._skip = False
                offset = (ev.ts - t0) - (loop.time() - start) * self.speed
            delay = ((ev.ts - t0) - offset) / self.speed - (loop.time() - start)
            if delay > 0 and await _wait(stop, delay):
                return "stopped"
            if not self._resume.is_set():
                paused_at = loop.time()
                waiter = asyncio.ensure_future(self._resume.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                if stop.is_set():
                    return "stopped"
                offset -= (loop.time() - paused_at) * self.speed
                if self._skip:
                    if not isinstance(ev, LevelStarted):
                        emit(ev)
                        continue
                    self._skip = False
                    offset = (ev.ts - t0) - (loop.time() - start) * self.speed
            if stop.is_set():
                return "stopped"
            self._now = ev.ts
            emit(ev)
        return "replay finished"


async def _wait(stop: asyncio.Event, delay: float) -> bool:
    """Sleep `delay` seconds unless `stop` is set first; True when stopped."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=delay)
        return True
    except asyncio.TimeoutError:
        return False
