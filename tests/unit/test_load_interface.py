"""The load generator's boundary (specmon/load/__init__.py): its names resolve to the package's
own objects, lazily (attach never loads the client), and a level's client figures come out of
the load loop typed (LoadLoop.level_stats)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import specmon.load
from helpers.simproc import REPO
from specmon.load import native
from specmon.load.loop import LoadLoop
from specmon.model import LoadClientStats, PacerStats


def test_every_name_of_the_package_is_its_modules_object():
    for name in specmon.load.__all__:
        obj = getattr(specmon.load, name)
        assert obj.__module__.startswith("specmon.load."), (name, obj.__module__)
    with pytest.raises(AttributeError):
        specmon.load.Pacer  # inside the package, not offered


def test_attach_and_the_command_line_load_no_client():
    code = ("import sys\n"
            "import specmon.load, specmon.cli, specmon.commands.attach\n"
            "print(sorted(m for m in sys.modules if m.startswith('specmon.load.')))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


def test_a_levels_client_figures_come_out_typed():
    load = LoadLoop(name="test-level-stats")
    try:
        meter = load.begin_level()

        async def busy() -> None:
            t = time.thread_time()
            while time.thread_time() - t < 0.03:
                pass

        load.call(busy(), timeout=10)
        stats = load.level_stats(meter, level=3, offered_concurrency=8, tokens=1500)
        assert type(stats) is LoadClientStats and stats.pacer is None  # not paced: no pacer figures
        assert (stats.level, stats.offered_concurrency, stats.tokens, stats.reader) == (3, 8, 1500, native.READER)
        assert stats.client_cpu_s >= 0.025
        # both come from one CPU reading; client_cpu_s is rounded to the ms (up to 0.5 ms off it)
        assert stats.cpu_ms_per_1k_tokens == pytest.approx(stats.client_cpu_s / 1500 * 1e6, abs=0.0005 / 1500 * 1e6 + 0.001)
        load.pace(True)
        time.sleep(0.05)
        paced = load.level_stats(load.begin_level(), level=4, offered_concurrency=64, tokens=0)
        assert paced.cpu_ms_per_1k_tokens is None  # no tokens: no share of them
        assert paced.pacer == PacerStats(pauses=0, pause_ms=0.0, chunk_gap_ms=None)  # nothing read yet
    finally:
        load.stop()
