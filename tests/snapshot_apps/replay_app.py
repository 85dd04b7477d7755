"""Entry app for snapshot tests: a recorded session folder replayed instantly and deterministically.

SPECMON_SNAPSHOT_SESSION names the folder under tests/data/. The whole recording is applied
before the first frame is compared (run_before waits for the replay to end), toasts are off
and the status bar shows the folder relative to the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp

DATA = Path(__file__).resolve().parent.parent / "data"


class SnapshotApp(SpecmonApp):
    def notify(self, *args, **kwargs) -> None:  # toasts time out: not part of a fixed frame
        return None


def make_app(name: str) -> SnapshotApp:
    source = ReplaySource(DATA / name, speed=1e9)
    source.out_dir = Path("tests/data") / name
    return SnapshotApp(source, title=f"replay {name}")


app = make_app(os.environ.get("SPECMON_SNAPSHOT_SESSION", "session_sim_3arm"))

if __name__ == "__main__":
    app.run()
