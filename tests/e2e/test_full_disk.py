"""A disk that fills up mid-session: specmon stops cleanly with one line (exit 1), and no file of
the session folder ends in a torn row. The disk is a tiny tmpfs mounted in a private mount
namespace (`unshare -rm`), so nothing else on the machine is touched."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest

from helpers.simproc import REPO, start_sim


def mount_ns_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return p.returncode == 0


@pytest.mark.skipif(not mount_ns_available(), reason="unshare -rm with a tmpfs mount is not allowed here")
def test_a_full_disk_stops_the_session_cleanly_without_torn_rows(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", speed=50) as sim:
        script = (f"mount -t tmpfs -o size=96k tmpfs {disk} && "
                  f"{sys.executable} -m specmon attach {sim.url} --headless --duration 60 --interval 0.1 "
                  f"--out {disk}/s; echo rc=$?; "
                  f"mkdir -p {tmp_path}/copy && cp -r {disk}/s {tmp_path}/copy/")
        p = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=str(REPO), capture_output=True, text=True,
                           timeout=120)
    out = p.stdout + p.stderr
    assert "rc=1" in p.stdout, out[-3000:]
    assert "Traceback" not in out
    errors = [line for line in p.stderr.splitlines() if line.startswith("specmon: error:")]
    assert len(errors) == 1 and "recording failed" in errors[0] and "cannot write" in errors[0]
    folder = tmp_path / "copy" / "s"
    for name in ("samples.csv", "gpus.csv", "requests.csv", "levels.csv"):
        data = (folder / name).read_bytes()
        assert data.endswith(b"\n"), name  # whole rows only
        rows = list(csv.reader(data.decode().splitlines()))
        assert len({len(r) for r in rows}) == 1, name  # every row has every column
    lines = (folder / "events.jsonl").read_text().splitlines()
    for line in lines:
        json.loads(line)  # every event line whole
    assert len(lines) > 10


@pytest.mark.skipif(not mount_ns_available(), reason="unshare -rm with a tmpfs mount is not allowed here")
@pytest.mark.parametrize("command", [["attach", "http://127.0.0.1:9", "--headless", "--duration", "2"],
                                     ["ramp", "http://127.0.0.1:9", "--levels", "2", "--headless"]])
def test_a_disk_already_full_at_start_is_one_line_and_exit_2(tmp_path, command):
    disk = tmp_path / "disk"
    disk.mkdir()
    # fill the 8k disk (head stops when it is full), then start specmon recording onto it
    script = (f"mount -t tmpfs -o size=8k tmpfs {disk} && (head -c 65536 /dev/zero > {disk}/fill 2>/dev/null; true) && "
              f"{sys.executable} -m specmon {' '.join(command)} --out {disk}/s; echo rc=$?")
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=str(REPO), capture_output=True, text=True,
                       timeout=120)
    assert "rc=2" in p.stdout, p.stdout + p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--out {disk}/s" in lines[0] and "No space left" in lines[0], p.stderr[-3000:]
