"""An API key given to a launched server (`api_key: ${VAR}` in a layout, or `--api-key` in its
command) never reaches anything specmon writes: the session folder, its output, its events."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specmon.errors import ServerError
from specmon.model import ArmPhase, LogLine
from specmon.servers.launch import Supervisor, redact, secrets_of
from specmon.servers.layout import parse_layout
from specmon.sources import logparse as lp

KEY = "sk-specmon-test-7f3a9c2e"
KEY2 = "second-key-51b0"

# A stand-in for SGLang's start-up echo: SGLang 0.5.10 logs `server_args=ServerArgs(...)` with
# api_key in clear text; this prints its own --api-key the same way, then the ready line.
ECHO = ("import sys, time; a = sys.argv; k = a[a.index('--api-key') + 1]; "
        "print(f'[2026-12-01 08:00:00] server_args=ServerArgs(model_path=m, api_key={k!r}, port={a[-1]})', flush=True); "
        f"print({lp.READY_TEXT!r}, flush=True); time.sleep(600)")


def files_with(folder: Path, needle: str) -> list[str]:
    hits = []
    for p in folder.rglob("*"):
        if p.is_file() and needle.encode() in p.read_bytes():
            hits.append(str(p.relative_to(folder)))
    return hits


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


async def test_key_stays_out_of_events_and_failure_causes(tmp_path):
    """A server that dies printing its key: the LogLine events, the failure cause and the
    ServerError all show *** instead."""
    died = ("import sys; a = sys.argv; k = a[a.index('--admin-api-key') + 1]; "
            "print(f'server_args=ServerArgs(admin_api_key={k!r})', flush=True); "
            "print(f'ValueError: bad admin key {k}', flush=True); sys.exit(1)")
    layout = parse_layout(textwrap.dedent(f"""
        arms:
          - name: a
            launch:
              command: [python, -c, "{died}"]
              flags: {{admin_api_key: "${{ADMIN_KEY}}"}}
        """), "t.yaml", env={"ADMIN_KEY": KEY})[0]
    events = []
    sup = Supervisor(layout, tmp_path, env=dict(os.environ, ADMIN_KEY=KEY))
    try:
        with pytest.raises(ServerError) as err:
            await sup.start(events.append)
    finally:
        sup.stop()
    assert KEY not in str(err.value)
    assert sup.failed()["a"] == "ValueError: bad admin key ***"
    lines = [e.line for e in events if isinstance(e, LogLine)]
    assert "server_args=ServerArgs(admin_api_key='***')" in lines
    assert not [e for e in events if KEY in (getattr(e, "line", "") or "") or KEY in (getattr(e, "detail", "") or "")]
    assert any(isinstance(e, ArmPhase) and e.phase == "failed" for e in events)
    assert files_with(tmp_path, KEY) == []


def test_secrets_of_an_arm():
    layout = parse_layout(textwrap.dedent("""
        arms:
          - name: a
            api_key_env: CLIENT_KEY
            launch:
              command: [srv, --api-key=inline-key, --admin-api-key, admin-key]
              flags: {api_key: "${K}"}
        """), "t.yaml", env={"K": "flag-key"})[0]
    arm = layout.arms[0]
    env = {"K": "flag-key", "CLIENT_KEY": "client-key"}
    argv = ["srv", "--api-key=inline-key", "--admin-api-key", "admin-key", "--api-key", "flag-key"]
    found = secrets_of(arm, argv, env)
    assert set(found) == {"inline-key", "admin-key", "flag-key", "client-key"}
    assert redact("x --api-key=inline-key y admin-key", found) == "x --api-key=*** y ***"
    # as SGLang's server_args line prints it: repr() doubles a backslash
    key = "back\\slash"
    assert redact(f"api_key={key!r}", secrets_of(arm, ["srv"], {"K": key})) == "api_key='***'"
    # a key containing another is replaced whole, not left half visible
    assert redact("abcdef", ["abc", "abcdef"]) == "***" and redact("abcdef", secrets_of(arm, ["srv"], {"K": "abcdef"})) == "***"
