"""An arm's command line and environment, and the credentials in them: which they are (secrets_of),
*** in their place in whatever is written (redact), and the variable a launched arm's key is in."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Optional

from specmon.servers.layout import ArmLayout, Layout, expand_env


def flag_args(flags: dict) -> list[str]:
    """SGLang flags from a layout mapping: `model_path: x` -> `--model-path x`, true -> bare flag,
    false/None -> left out, a list -> the flag then each value, a mapping -> JSON text."""
    out: list[str] = []
    for name, value in flags.items():
        opt = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(opt)
        elif isinstance(value, list):
            out += [opt] + [str(v) for v in value]
        elif isinstance(value, dict):
            out += [opt, json.dumps(value)]
        else:
            out += [opt, str(value)]
    return out


def build_argv(layout: Layout, arm: ArmLayout, port: int, env: Optional[dict[str, str]] = None) -> list[str]:
    assert arm.launch is not None
    command = layout.server_command(arm, env)
    # `python` in a layout means the interpreter specmon runs in, so the same venv serves.
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    flags = {k: expand_env(v, env) for k, v in arm.launch.flags.items()}
    return command + flag_args(flags) + ["--host", arm.launch.host, "--port", str(port)]


def build_env(arm: ArmLayout, base: Optional[dict[str, str]] = None) -> dict[str, str]:
    assert arm.launch is not None
    env = dict(os.environ if base is None else base)
    env.update(arm.launch.env)
    if arm.launch.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in arm.launch.gpus)
    env.setdefault("PYTHONUNBUFFERED", "1")  # log lines as they happen, not when a buffer fills
    return env


SECRET_FLAGS = ("api_key", "admin_api_key")  # SGLang flags whose value is a credential
REDACTED = "***"


def secrets_of(arm: ArmLayout, argv: list[str], env: dict[str, str]) -> list[str]:
    """The credentials a launched arm carries (never to be written): the expanded value of its
    api_key/admin_api_key flags, any value given to --api-key/--admin-api-key in the command line
    (a layout's `command:` may carry one), and the key in its api_key_env variable. Longest first,
    so a key that contains another is replaced whole."""
    found: set[str] = set()
    opts = {"--" + f.replace("_", "-") for f in SECRET_FLAGS}
    for i, part in enumerate(argv):
        if part in opts and i + 1 < len(argv):
            found.add(argv[i + 1])
        elif "=" in part and part.split("=", 1)[0] in opts:
            found.add(part.split("=", 1)[1])
    if arm.launch is not None:
        for name in SECRET_FLAGS:
            value = arm.launch.flags.get(name)
            if value not in (None, True, False):
                found.add(str(expand_env(value, env)))
    if arm.api_key_env and env.get(arm.api_key_env):
        found.add(env[arm.api_key_env])
    # as a server may print them: repr() (SGLang's server_args line) and JSON escape some characters
    for key in list(found):
        found |= {repr(key)[1:-1], json.dumps(key)[1:-1]}
    return sorted((x for x in found if x), key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def key_env_of(arm: ArmLayout) -> Optional[str]:
    """The variable holding a launched arm's key: api_key_env, else the `${VAR}` that its api_key
    flag is made of (then the scrapes and the load send the key the server was started with)."""
    if arm.api_key_env or arm.launch is None:
        return arm.api_key_env
    m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", str(arm.launch.flags.get("api_key") or ""))
    return m.group(1) if m else None


def _cmdline(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(x) for x in argv)
