"""An API key given to a launched server (`api_key: ${VAR}` in a layout, or `--api-key` in its
command) never reaches anything specmon writes: the session folder, its output, its events."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from specmon.sources import logparse as lp
from helpers.launch import files_with

KEY = "sk-specmon-test-7f3a9c2e"
KEY2 = "second-key-51b0"

# A stand-in for SGLang's start-up echo: SGLang 0.5.10 logs `server_args=ServerArgs(...)` with
# api_key in clear text; this prints its own --api-key the same way, then the ready line.
ECHO = ("import sys, time; a = sys.argv; k = a[a.index('--api-key') + 1]; "
        "print(f'[2026-12-01 08:00:00] server_args=ServerArgs(model_path=m, api_key={k!r}, port={a[-1]})', flush=True); "
        f"print({lp.READY_TEXT!r}, flush=True); time.sleep(600)")


@pytest.mark.timeout(240)
def test_launch_writes_no_key_anywhere(tmp_path):
    """A sim arm started with `api_key: ${SPECMON_TEST_KEY}` (the ramp's requests carry the key, so
    the server really required it) and an arm that echoes its key as SGLang does; then every file
    of the session folder, and specmon's output, are searched for either key."""
    (tmp_path / "x.yaml").write_text(textwrap.dedent(f"""
        command: [python, -m, specmon.servers.sim]
        startup_timeout_s: 60
        interval_s: 0.2
        arms:
          - name: keyed
            launch: {{flags: {{profile: fp8-mtp, speed: 50, enable_metrics: true, api_key: "${{SPECMON_TEST_KEY}}"}}}}
          - name: echo
            launch:
              command: [python, -c, "{ECHO}", --api-key, "${{SPECMON_TEST_KEY2}}"]
        ramp: {{levels: [2], input_len: 200, output_len: 32, level_duration_s: 3, settle_s: 0}}  # wall s for echo
        """))
    env = dict(os.environ, SPECMON_TEST_KEY=KEY, SPECMON_TEST_KEY2=KEY2)
    r = subprocess.run([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stderr[-2000:]
    session = tmp_path / "s"
    keyed_log = (session / "logs" / "keyed.log").read_text()
    echo_log = (session / "logs" / "echo.log").read_text()
    # what would have carried the keys is there, redacted
    assert "--api-key '***'" in keyed_log.splitlines()[0]
    assert "server_args=ServerArgs(model_path=m, api_key='***'" in echo_log
    assert "--api-key '***'" in echo_log.splitlines()[0]
    # the keyed server was asked with the key (derived from ${SPECMON_TEST_KEY}): its level has answers
    import csv

    with open(session / "levels.csv", newline="") as f:
        keyed_level = next(row for row in csv.DictReader(f) if row["arm"] == "keyed")
    assert int(keyed_level["ok"]) > 0 and keyed_level["failed"] == "0", keyed_level
    meta = json.loads((session / "session.json").read_text())
    keyed = next(a for a in meta["arms"] if a["name"] == "keyed")
    assert keyed["api_key_env"] == "SPECMON_TEST_KEY" and keyed["version"]  # /server_info answered with the key
    for key in (KEY, KEY2):
        assert files_with(session, key) == []
        assert key not in r.stdout and key not in r.stderr
