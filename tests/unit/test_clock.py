"""specmon.clock: a session's stamps keep their true intervals when the system clock steps.

The end-to-end test steps this process's system clock (time.time) by +30 s in the middle of a
ramp's first level against a real `specmon sim` process, as NTP stepping a drifted VM clock
would, and reads what the session recorded.
"""

import time

from specmon import clock
from specmon.model import ArmSpec
from specmon.session.live import LiveSession

STEP_S = 30.0


def test_wall_reads_the_system_clock_until_it_steps():
    # Read again first: the host may have stepped its clock since the last reading (a CI VM's
    # clock moved 130 ms against the monotonic one during a run), which this test is not about.
    clock.anchor()
    before, a, after = time.time(), clock.wall(), time.time()
    assert before - 0.01 <= a <= after + 0.01
    p = time.perf_counter()
    assert abs(clock.wall_of(p) - clock.wall()) < 0.01
    stamps = [clock.wall() for _ in range(1000)]
    assert stamps == sorted(stamps)


def test_a_new_session_reads_the_system_clock_again(tmp_path, monkeypatch):
    clock.anchor()  # as above: a step of the host's own clock before this test is not this test's
    system = time.time
    monkeypatch.setattr(time, "time", lambda: system() + STEP_S)  # stepped before the session
    try:
        assert abs(clock.wall() - system()) < 0.01  # stamps go on from the reading they had
        LiveSession([ArmSpec(name="sim", url="http://127.0.0.1:9")], out_dir=tmp_path)
        assert abs(clock.wall() - time.time()) < 0.01  # the session's stamps start from the new one
    finally:
        monkeypatch.undo()
        clock.anchor()
