"""Secrets never written: an API key from the environment and a password in a URL appear in no
output file, log, screenshot, stdout or stderr of attach and ramp (the simulator with --api-key;
one arm up, one refused so that its reasons are written too)."""

from __future__ import annotations

from pathlib import Path

from helpers.simproc import free_port
from helpers.secrets import every_text

PASSWORD = "hunter2-secret"


async def test_the_tui_and_its_screenshot_show_no_url_password(tmp_path):
    from specmon.model import ArmSpec
    from specmon.session.live import LiveSession
    from specmon.tui.app import SpecmonApp

    dead = free_port()
    arms = [ArmSpec(name="down", url=f"http://admin:{PASSWORD}@127.0.0.1:{dead}")]
    live = LiveSession(arms, interval=0.3, out_dir=tmp_path / "s")
    app = SpecmonApp(live, "t")
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(100):
            if app.state.arm("down").last is not None:
                break
            await pilot.pause(0.05)
        assert app.state.arm("down").last is not None
        shot = app.save_screenshot(filename="shot.svg", path=str(tmp_path / "s"))
        await pilot.press("q")
    text = every_text(tmp_path / "s")
    assert Path(shot).exists() and "refused" in Path(shot).read_text()
    assert PASSWORD not in text
