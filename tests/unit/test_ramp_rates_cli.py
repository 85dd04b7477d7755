"""`specmon ramp URL --rates ... --arrival gamma --burstiness K --max-concurrency N --headless` as a
user runs it against a real `specmon sim`, then `specmon report` on its folder; and --search with
two servers refused before anything is sent."""

import subprocess
import sys

from helpers.simproc import REPO, free_port


def test_search_is_one_server_at_a_time(tmp_path):
    a, b = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    p = subprocess.run([sys.executable, "-m", "specmon", "ramp", a, b, "--slo-ttft", "1", "--search", "--headless",
                        "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert p.returncode == 2 and "--search: one server at a time" in p.stderr, p.stderr
    assert not (tmp_path / "s" / "requests.csv").exists()
