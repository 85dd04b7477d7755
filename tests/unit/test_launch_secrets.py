"""An API key given to a launched server (`api_key: ${VAR}` in a layout, or `--api-key` in its
command) never reaches anything specmon writes: the session folder, its output, its events."""

import os
import textwrap

import pytest

from specmon.errors import ServerError
from specmon.model import ArmPhase, LogLine
from specmon.servers.launch import Supervisor, redact, secrets_of
from specmon.servers.layout import parse_layout
from helpers.launch import files_with

KEY = "sk-specmon-test-7f3a9c2e"


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
