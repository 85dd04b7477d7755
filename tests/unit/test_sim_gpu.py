"""The simulated GPU: what `specmon sim` says the card it simulates holds (GET /specmon/simulated_gpu),
shown for simulated arms only, labelled simulated, through the GPU widgets, recorded in gpus.csv
and replayed the same way; a server that does not say it is the simulator is never asked."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from rich.text import Text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specmon.session.replay import ReplaySource  # noqa: E402
from specmon.tui.app import SpecmonApp  # noqa: E402
from specmon.tui.widgets.arm_panel import ArmPanel  # noqa: E402
from specmon.tui.widgets.gpu_strip import GpuStrip, fit, nvml_state_forms, pack  # noqa: E402
from helpers.sim_gpu import gpu_text, text, wait_for

DATA = Path(__file__).resolve().parents[1] / "data"


# ---------------------------------------------------------------------------------------------
# specmon's side


# ---------------------------------------------------------------------------------------------
# Said once, never cut mid-word


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_no_driver_is_said_once_and_never_cut(tmp_path, size):
    import shutil

    folder = tmp_path / "s"
    shutil.copytree(DATA / "session_sim_3arm", folder)
    app = SpecmonApp(ReplaySource(folder, speed=1e9), title="replay")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.query_one("StatusBar").stopped is not None, what="replay end")
        await pilot.pause(0.2)
        assert not app.state.gpus.available
        screen = app.export_screenshot()
        panels = list(app.query(ArmPanel))
        assert all(p.compact == (size == (80, 24)) for p in panels)
        panes = [gpu_text(p) for p in panels]
        strip = text(app.query_one(GpuStrip))
    # per arm, two whole words (or fewer at 80 columns), never the reason again
    assert panes and all(t.split("\n")[0][7:].strip() in ("no GPU reading", "no reading", "none") for t in panes), panes
    # the why, once: on the GPU line, whole words
    assert strip.count("NVIDIA driver") == 1 and "NVML" in strip
    assert "driver (" not in strip or "(libnvidia-ml.so.1 not found)" in strip
    import html

    shown = html.unescape(re.sub(r"<[^>]+>", "", screen[screen.index("</style>"):])).replace("\xa0", " ")
    assert shown.count("NVIDIA driver") == 1, shown  # on the whole screen: once


def test_fitting_never_cuts_a_word():
    reason = "NVML unavailable: no NVIDIA driver (libnvidia-ml.so.1 not found)"
    forms = [Text(" GPU " + f) for f in nvml_state_forms(reason)]
    words = {w for f in forms for w in f.plain.split()}
    for width in range(1, 90):
        out = fit(forms, width).plain
        assert len(out) <= width
        assert all(w in words or w == "…" for w in out.replace("…", " …").split()), (width, out)
    cells = [[Text(" simulated:")], [Text(" fp8-mtp ██████ 72.8/96G 370W 99%"), Text(" fp8-mtp 72.8/96G 370W")],
             [Text(" nvfp4-mtp ██████ 76.2/96G 35W 0%"), Text(" nvfp4-mtp 76.2/96G 35W")], forms,
             [Text(" host cpu 45% mem 3/8G")]]
    for width in (40, 60, 80, 120, 160):
        lines = pack(cells, width)
        assert all(line.cell_len <= width for line in lines)
        joined = " ".join(line.plain for line in lines)
        assert joined.count("NVIDIA driver") == 1 or "NVML unavailable" in joined
    # at 80 columns the two simulated cards share a line and the rest takes one more
    assert len(pack(cells, 80)) == 2
