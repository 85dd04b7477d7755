"""SPECMON_TEXTUAL_PUBLIC turns specmon's reaches into Textual's internals off, all or part by part
(specmon/tui/textual_private.py): the panes then are plain Textual widgets. The screens drawn both
ways are held equal by the snapshot tests, run once with the variable and once without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json
from specmon.tui import textual_private as tp
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.base import text
from specmon.tui.widgets.fleet import FleetTable
names = [c.__name__ for c in ArmPanel.__mro__ + FleetTable.__mro__]
print(json.dumps({"fast": tp.FAST, "public": sorted(tp.PUBLIC), "mro": names,
                  "text": text("a b").plain}))
"""


def probe(value):
    env = {k: v for k, v in os.environ.items() if k != "SPECMON_TEXTUAL_PUBLIC"}
    if value is not None:
        env["SPECMON_TEXTUAL_PUBLIC"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=str(REPO), env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("value, public", [
    (None, []), ("", []), ("0", []),
    ("1", ["repaint", "rows", "styles", "table"]), ("all", ["repaint", "rows", "styles", "table"]),
    ("rows, repaint", ["repaint", "rows"]), ("styles,nonsense", ["styles"]),
])
def test_switch_turns_off_the_parts_named(value, public):
    got = probe(value)
    assert got["public"] == public
    assert got["fast"] is (not public)
    # the classes that override Textual's private methods are in the panel's bases only when on
    assert ("ComposedRows" in got["mro"]) is ("rows" not in public)
    assert ("KeptComponentStyles" in got["mro"]) is ("styles" not in public)
    assert ("KeptTableLines" in got["mro"]) is ("table" not in public)
    assert got["text"] == "a b"
