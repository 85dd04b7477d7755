"""Rotated session folders (session/segments.py): the growing files closed into gzip segments,
read back in order as if never rotated, and --retain deleting only the oldest closed ones."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specmon.model import ArmInfoUpdated, SamplesTick, SessionStarted
from specmon.session import segments
from specmon.session.folder import EVENTS_FILE, SessionWriter
from specmon.session.recorded import load_session
from specmon.session.replay import ReplaySource, read_event_log
from specmon.session.segments import Rotation, parse_age_or_size, retain

DATA = Path(__file__).resolve().parent.parent / "data"
FIXTURE = DATA / "session_gateway_fleet"  # a recorded fleet session: 44 ticks of 4 workers


def _record(folder: Path, rotation: Rotation | None) -> list:
    events = read_event_log(FIXTURE / EVENTS_FILE)
    w = SessionWriter(folder, rotation=rotation)
    for e in events:
        w(e)
    w.close()
    assert w.error is None
    return events


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_size_rotated_compressed_folder_replays_exactly_as_an_unrotated_one(tmp_path):
    events = _record(tmp_path / "plain", None)
    _record(tmp_path / "rot", Rotation(every_s=None, max_bytes=16384))
    names = _names(tmp_path / "rot")
    closed = [n for n in names if n.startswith("events.0")]
    assert len(closed) >= 5, names
    # closed segments compressed (no plain copy left), the open ones plain
    assert all(n.endswith(".gz") for n in names if ".0000" in n), names
    assert {"events.jsonl", "samples.csv", "gpus.csv"} <= set(names)
    assert all(f"samples.{n[7:13]}.csv.gz" in names and f"gpus.{n[7:13]}.csv.gz" in names for n in closed)
    assert not any(n.endswith(".tmp") for n in names)
    # each segment stands alone: a CSV header, a format line carrying the start
    seg2 = gzip.open(tmp_path / "rot" / segments.segment_name("samples.csv", 2, True), "rt").readline()
    assert seg2.startswith("ts,arm,up,")
    head = gzip.open(tmp_path / "rot" / segments.segment_name(EVENTS_FILE, 2, True), "rt").readline()
    assert head.startswith('{"type":"EventLog","format":2,"segment":2,"carry":[{"type":"SessionStarted"')

    # the event log, the CSVs and the replay read the same as the unrotated folder
    assert read_event_log(tmp_path / "rot" / EVENTS_FILE) == events == read_event_log(tmp_path / "plain" / EVENTS_FILE)
    a, b = load_session(tmp_path / "plain"), load_session(tmp_path / "rot")
    assert a.samples == b.samples and a.gpus == b.gpus and a.markers == b.markers and len(a.samples) > 100
    assert ReplaySource(tmp_path / "rot", speed=1e9).events == ReplaySource(tmp_path / "plain", speed=1e9).events


def test_a_closed_segment_not_yet_compressed_is_read_and_the_gz_preferred_only_when_complete(tmp_path):
    """A kill -9 during compression leaves the plain segment (and maybe a .gz.tmp): read as is."""
    events = _record(tmp_path / "rot", Rotation(every_s=None, max_bytes=16384))
    folder = tmp_path / "rot"
    gz = folder / segments.segment_name(EVENTS_FILE, 1, True)
    plain = folder / segments.segment_name(EVENTS_FILE, 1)
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    gz.unlink()
    (folder / (plain.name + ".gz.tmp")).write_bytes(b"\x1f\x8b torn")
    assert read_event_log(folder / EVENTS_FILE) == events


def test_retention_by_size_deletes_only_the_oldest_closed_segments_and_replay_starts_from_what_is_left(tmp_path):
    folder = tmp_path / "rot"
    events = _record(folder, Rotation(every_s=None, max_bytes=16384))
    before = segments.closed_segments(folder, EVENTS_FILE)
    open_bytes = {n: (folder / n).stat().st_size for n in ("events.jsonl", "samples.csv", "gpus.csv")}
    total = sum(p.stat().st_size for p in folder.iterdir())
    budget = total - 1  # one byte too many: exactly the oldest segment goes
    assert retain(folder, Rotation(retain_bytes=budget)) == [min(before)]
    after = segments.closed_segments(folder, EVENTS_FILE)
    assert list(after) == list(before)[1:]
    assert {n: (folder / n).stat().st_size for n in open_bytes} == open_bytes  # the open segment untouched
    # a budget for the newest closed segment and the open files: every older one goes
    newest = max(after)
    older = sum(p.stat().st_size for name in segments.ROTATED_FILES
                for n, p in segments.closed_segments(folder, name).items() if n != newest)
    total = sum(p.stat().st_size for p in folder.iterdir())
    retain(folder, Rotation(retain_bytes=total - older))
    assert list(segments.closed_segments(folder, EVENTS_FILE)) == [newest]
    # what is left replays: the start and the arms' info come from the oldest segment's carry
    left = read_event_log(folder / EVENTS_FILE)
    assert isinstance(left[0], SessionStarted) and left[0] == events[0]
    assert any(isinstance(e, ArmInfoUpdated) for e in left)
    ticks = [e for e in left if isinstance(e, SamplesTick)]
    assert ticks and ticks == [e for e in events if isinstance(e, SamplesTick)][-len(ticks):]
    assert len(load_session(folder).samples) == sum(len(t.samples) for t in ticks)
    # a tiny budget deletes every closed segment but never the open files
    retain(folder, Rotation(retain_bytes=1))
    assert segments.closed_segments(folder, EVENTS_FILE) == {} and segments.closed_segments(folder, "samples.csv") == {}
    assert {n: (folder / n).stat().st_size for n in open_bytes} == open_bytes
    assert isinstance(read_event_log(folder / EVENTS_FILE)[0], SessionStarted)


def test_retention_by_age_deletes_closed_segments_older_than_the_age_only(tmp_path):
    folder = tmp_path / "rot"
    _record(folder, Rotation(every_s=None, max_bytes=16384))
    closed = segments.closed_segments(folder, EVENTS_FILE)
    now = time.time()
    old = list(closed)[:2]
    for name in segments.ROTATED_FILES:  # the first two segments last written 8 days ago
        for n, p in segments.closed_segments(folder, name).items():
            if n in old:
                os.utime(p, (now - 8 * 86400, now - 8 * 86400))
    os.utime(folder / EVENTS_FILE, (now - 30 * 86400, now - 30 * 86400))  # the open file is never deleted
    assert retain(folder, Rotation(retain_s=7 * 86400), now=now) == old
    assert list(segments.closed_segments(folder, EVENTS_FILE)) == list(closed)[2:]
    assert (folder / EVENTS_FILE).exists()


def test_a_writer_rotates_by_age(tmp_path):
    events = read_event_log(FIXTURE / EVENTS_FILE)
    w = SessionWriter(tmp_path / "s", rotation=Rotation(every_s=1.0))
    ticks = 0
    for e in events:
        w(e)
        if isinstance(e, SamplesTick):
            ticks += 1
            if ticks in (5, 20):
                time.sleep(1.05)  # the open segment is now a second old: the next tick closes it
    w.close()
    assert list(segments.closed_segments(tmp_path / "s", EVENTS_FILE)) == [1, 2]
    assert read_event_log(tmp_path / "s" / EVENTS_FILE) == events


@pytest.mark.parametrize("text,want", [("7d", (7 * 86400, None)), ("90m", (5400, None)), ("1h", (3600, None)),
                                       ("20G", (None, 20 * 1024 ** 3)), ("100MB", (None, 100 * 1024 ** 2)),
                                       ("512KiB", (None, 512 * 1024))])
def test_ages_and_sizes(text, want):
    assert parse_age_or_size(text) == want


@pytest.mark.parametrize("flag,value", [("--retain", "7x"), ("--retain", "-1d"), ("--retain", "0s"),
                                        ("--retain", "nan"), ("--retain", "20"), ("--rotate", "0.1s"),
                                        ("--rotate", "10B")])
def test_a_bad_retain_or_rotate_value_is_one_line_and_exit_2(flag, value):
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", "http://127.0.0.1:9", flag, value],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in p.stderr, p.stderr
