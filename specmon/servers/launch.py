"""Launch mode: start the servers a layout describes, watch them start, restart them, stop them.

Each launched arm is one `python -m sglang.launch_server ...` (or the layout's replacement, e.g.
the simulator) started from an argv list, in its own process group (SGLang forks scheduler and
detokenizer processes; killing the group is the only way to be sure none survives), with both
output streams merged into `<session>/logs/<arm>.log`. A reader thread per arm copies every line to
that file as it comes (so a busy UI never blocks the server on a full pipe), folds the scheduler
lines into a LogState (the log source, usable without --enable-metrics) and reports startup phases.

Readiness = SGLang's ready line or /health answering 200, within the arm's startup timeout. A
server that dies (during startup or later) marks its arm failed with the cause read from its last
lines; the other arms carry on. stop() terminates every group (TERM, then KILL after a grace
period).

A layout's `gateway:` (SGLang's model gateway, smg) is one more supervised process: started
once its workers are ready (smg must reach them to register them) with their URLs, ready when its
/workers lists every one of them healthy, stopped with the rest. It never reaches past this
machine unless its env says so (HF_ENDPOINT on a closed loopback port, HF_HUB_OFFLINE=1), and a
simulated worker behind it with no model_path gets an empty local model folder (the gateway loads
a worker's tokenizer from its model path: a local folder is never looked up online).

A server's credentials (the value of its api_key/admin_api_key flags, a --api-key given in its
command, the key in its api_key_env variable) are replaced by *** in everything the supervisor
writes or emits: the log file and its command-line header, LogLine events, failure causes.

No server outlives specmon, however specmon ends:
  - a clean end, an exception, SIGINT: stop() from the session's `finally`, and an atexit hook
    for a Supervisor nobody stopped;
  - SIGTERM/SIGHUP with no handler installed by the front end (their default action would end
    specmon without running any Python): the Supervisor installs one that stops every group,
    then lets the signal end the process as it would have;
  - kill -9 (nothing runs in specmon): two things outside it. (1) Each server's leader is
    started with PR_SET_PDEATHSIG=SIGTERM, so the kernel signals it when specmon dies; SGLang's
    scheduler and detokenizer set the same on themselves (SIGKILL when the launcher dies), but
    a wrapper's other children (`bash -c '... &'`) would not be reached. (2) A small reaper
    process (own session, stdlib only) holds the read end of a pipe only specmon writes to;
    specmon tells it which groups are live; when the pipe reaches EOF (the kernel closes it when
    specmon dies, whatever killed it) it TERMs, then KILLs, every group still registered. What
    neither survives: the reaper itself killed along with specmon (e.g. `kill -9` of both, or the
    OOM killer picking it), and a server that leaves its process group on purpose.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import httpx

from specmon.errors import ServerError
from specmon.model import ArmPhase, ArmSpec, Event, LogLine, Sample
from specmon.servers.layout import ArmLayout, Layout, LaunchSpec, expand_env, is_sim_command
from specmon.sources import logparse as lp

Emit = Callable[[Event], None]

TAIL_LINES = 40  # kept per arm for the failure message
LOG_LINES_PER_S = 25  # LogLine events per arm per second; the file always gets every line


# Ports specmon picks for launched servers come from below the kernel's ephemeral range when it
# leaves room: a port from bind(0) is one the kernel hands out again, to the next bind(0) or to an
# outgoing connection's local end, in the seconds between the pick and the server's own bind.
AUTO_PORTS = (20000, 32768)


def ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] | set[int] = frozenset()) -> int:
    """A port nothing listens on and not in avoid: a random one in AUTO_PORTS outside the ephemeral
    range, or the kernel's pick where that range covers AUTO_PORTS."""
    lo, hi = AUTO_PORTS
    elo, ehi = ephemeral_range()
    room = [(lo, min(hi, elo)), (max(lo, ehi + 1), hi)]
    room = [(a, b) for a, b in room if b - a >= 100]
    rng = random.Random()
    for _ in range(50):
        if room:
            a, b = rng.choice(room)
            port = rng.randrange(a, b)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        if port not in avoid and port_free(host, port):
            return port
    raise ServerError(f"no free TCP port found on {host}")


def named_ports(flags: dict) -> set[int]:
    """The ports a server's flags name (port, disaggregation_bootstrap_port, metrics ports...): kept
    out of the automatic picks, so no two servers of a layout get the same one."""
    return {v for k, v in flags.items() if k.endswith("port") and isinstance(v, int) and not isinstance(v, bool)}


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (SO_REUSEADDR: a TIME_WAIT leftover does not count,
    as it does not stop uvicorn, which sets the same option)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


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


def kill_group(pgid: int, grace_s: float = 10.0, leader: Optional[subprocess.Popen] = None) -> None:
    """TERM the process group, wait up to grace_s for all of it to go, then KILL what is left.
    `leader` (our child) is reaped while waiting: an unreaped zombie would still count as alive."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- servers die with specmon --------------------------------------------------------------

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _pdeathsig_preexec(sig: int = signal.SIGTERM) -> Optional[Callable[[], None]]:
    """A preexec_fn asking the kernel to send `sig` to the child when its parent dies (Linux only;
    None elsewhere). The kernel's "parent" is the forking THREAD: call it from a thread that lives
    as long as the process (the main thread: asyncio.run and Textual both run their loop there);
    from another thread the servers would be killed when that thread ends, so there it is None.
    libc is resolved here, in the parent: the child only makes the one call, then checks that the
    parent did not die between fork and prctl (the signal would then never come)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(111)

    return preexec


# The reaper: stdlib only, no site (start to exit ~30 ms here). Lines on stdin: "+PGID" (a live
# group) and "-PGID" (stopped). EOF, i.e. specmon is gone without having stopped them: TERM every
# group left, KILL what is still there after the grace period.
_REAPER_SRC = r"""
import os, signal, sys, time
for s in (signal.SIGHUP, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
grace = float(sys.argv[1])
groups = set()
for line in iter(sys.stdin.buffer.readline, b""):
    line = line.strip()
    if line[:1] in (b"+", b"-") and line[1:].isdigit():
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
def alive(g):
    try:
        os.killpg(g, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
left = set()
for g in groups:
    try:
        os.killpg(g, signal.SIGTERM)
        left.add(g)
    except (ProcessLookupError, PermissionError):
        pass
end = time.monotonic() + grace
while left and time.monotonic() < end:
    left = {g for g in left if alive(g)}
    time.sleep(0.05)
for g in left:
    try:
        os.killpg(g, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
"""


class _Reaper:
    """The process that stops this Supervisor's groups if specmon dies without doing it."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.proc: Optional[subprocess.Popen] = None
        # Reentrant: the SIGTERM/SIGHUP fallback handler may run stop() on the main thread while it
        # is inside _send. Writes are os.write of one short line (atomic on a pipe), not a buffered
        # file, for the same reason.
        self.lock = threading.RLock()

    def _send(self, text: str) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                try:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-S", "-E", "-c", _REAPER_SRC, f"{self.grace_s:g}"],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True, close_fds=True,  # terminal signals never reach it
                    )
                except OSError:
                    self.proc = None
                    return
            try:
                assert self.proc.stdin is not None
                os.write(self.proc.stdin.fileno(), text.encode())
            except (OSError, ValueError):
                pass

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def remove(self, pgid: int) -> None:
        if self.proc is not None:
            self._send(f"-{pgid}\n")

    def close(self) -> None:
        """EOF with no group left: the reaper exits at once."""
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class LaunchedArm:
    layout: ArmLayout
    spec: ArmSpec
    port: int
    log_path: Path
    startup_timeout_s: float
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)  # replaced by *** in all the supervisor writes
    proc: Optional[subprocess.Popen] = None
    state: lp.LogState = field(default_factory=lp.LogState)
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    phase: str = lp.PHASE_STARTING
    cause: Optional[str] = None
    ready: bool = False
    ready_line_seen: bool = False
    fatal: Optional[str] = None  # a line said this start cannot succeed (e.g. its port taken): the cause
    starts: int = 0
    stopping: bool = False
    extra_argv: list[str] = field(default_factory=list)  # after the flags (a gateway's workers, a sim's model folder)
    extra_secrets: list[str] = field(default_factory=list)  # credentials the supervisor itself put in argv
    note: Optional[str] = None  # a line for the log after its pid (the gateway: which smg binary, its version)
    ready_check: Optional[Callable] = None  # async (client, url) -> bool; default GET /health is 200
    ready_detail: str = "/health 200"
    reader: Optional[threading.Thread] = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.layout.name

    @property
    def failed(self) -> bool:
        return self.phase == lp.PHASE_FAILED


# Supervisors that may have servers running (held strongly: one that is garbage collected
# without stop() must still have its servers stopped at exit).
_LIVE: "set[Supervisor]" = set()
_FATAL_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@atexit.register
def _stop_all_at_exit() -> None:
    for sup in list(_LIVE):
        sup.stop(grace_s=3.0)


def _on_fatal_signal(signum: int, frame) -> None:
    """SIGTERM/SIGHUP that no front end handles: stop every server, then end as the signal would."""
    _stop_all_at_exit()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_fatal_handlers() -> None:
    """Only where the signal would otherwise end the process without running any Python (SIG_DFL);
    a front end's own handler (headless: "terminated", "hangup") stays in charge."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _FATAL_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_fatal_signal)
        except (ValueError, OSError):
            pass


def _remove_fatal_handlers() -> None:
    if _LIVE or threading.current_thread() is not threading.main_thread():
        return
    for sig in _FATAL_SIGNALS:
        try:
            if signal.getsignal(sig) is _on_fatal_signal:
                signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


class Supervisor:
    """Starts, watches, restarts and stops the launched arms of a layout (attached arms pass through)."""

    def __init__(self, layout: Layout, out_dir: Path, *, grace_s: float = 10.0,
                 env: Optional[dict[str, str]] = None, gateway_key_env: Optional[str] = None):
        self.layout = layout
        self.out_dir = Path(out_dir)
        self.grace_s = grace_s
        self.base_env = dict(os.environ if env is None else env)
        self.log_dir = self.out_dir / "logs"
        self._emit: Emit = lambda e: None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._watchers: dict[str, asyncio.Task] = {}
        self._stopped = False
        self._reaper = _Reaper(grace_s=min(grace_s, 5.0))
        self.launched: dict[str, LaunchedArm] = {}
        # Every port the layout names first, then the automatic picks around them.
        taken: set[int] = set()
        for arm in layout.launched:
            assert arm.launch is not None
            taken |= named_ports(arm.launch.flags) | {arm.launch.port} - {None}
        if layout.gateway is not None:
            taken |= named_ports(layout.gateway.flags) | {layout.gateway.port, layout.gateway.metrics_port} - {None}
        for arm in layout.launched:
            assert arm.launch is not None
            port = arm.launch.port or free_port(arm.launch.host, avoid=taken)
            taken.add(port)
            url = f"http://{arm.launch.host}:{port}"
            self.launched[arm.name] = LaunchedArm(
                layout=arm, spec=ArmSpec(name=arm.name, url=url, api_key_env=key_env_of(arm), launched=True),
                port=port, log_path=self.log_dir / f"{arm.name}.log",
                startup_timeout_s=arm.launch.startup_timeout_s or layout.startup_timeout_s,
            )
        self.gateway: Optional[LaunchedArm] = None
        self.gateway_metrics_url: Optional[str] = None
        # the variable holding the admin key the launched gateway asks on its worker routes
        self.gateway_key_env = gateway_key_env
        self.gateway_binary: Optional[dict[str, str]] = None  # {"binary", "version"}: which smg ran
        self._behind: list[str] = []  # the arms behind the gateway
        if layout.gateway is not None:
            self._plan_gateway(layout, taken)

    # ---- what LiveSession and the commands use ----------------------------------------------
    @property
    def arms(self) -> list[ArmSpec]:
        """Every arm of the layout in layout order: launched ones at their chosen URL."""
        out = []
        for arm in self.layout.arms:
            if arm.name in self.launched:
                out.append(self.launched[arm.name].spec)
            else:
                behind = self.gateway is not None and arm.name in self._behind
                out.append(ArmSpec(name=arm.name, url=arm.attach or "", api_key_env=arm.api_key_env,
                                   fleet=self.fleet_name if behind else None,
                                   role=self.layout.role_of(arm) if behind else None))
        return out

    # ---- the gateway -----------------------------------------------------------------------------
    @property
    def fleet_name(self) -> Optional[str]:
        """The name its workers' fleet goes by (ArmSpec.fleet, the TUI's header)."""
        return f"gateway {self.gateway.name}" if self.gateway is not None else None

    @property
    def ramp_arms(self) -> list[ArmSpec]:
        """What the ramp loads: the gateway (its workers get their load through it) and every arm
        that is not behind it."""
        if self.gateway is None:
            return self.arms
        return [self.gateway.spec] + [a for a in self.arms if a.name not in self._behind]

    def _plan_gateway(self, layout: Layout, taken: set[int]) -> None:
        g = layout.gateway
        assert g is not None
        self._behind = [a.name for a in layout.gateway_workers()]
        port = g.port or free_port(g.host, avoid=taken)
        taken.add(port)
        mport = g.metrics_port or free_port(g.host, avoid=taken)
        taken.add(mport)
        flags = {"policy": g.policy, "worker_startup_check_interval": 1, "shutdown_grace_period_secs": 5,
                 **g.flags, "prometheus_host": g.host, "prometheus_port": mport}
        env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1", **g.env}
        command = g.command or _smg_command()
        self.gateway_binary = {"binary": command[0], "version": smg_version(command[0], env={**self.base_env, **env})}
        if re.match(r"smg [1-9]", self.gateway_binary["version"]) and "load_monitor_interval" not in g.flags:
            # smg 1.x reads its workers' loads every 10 s by default: the figures it stands in with
            # for a worker specmon cannot reach (smg_engine_*, /get_loads) would be that old
            flags["load_monitor_interval"] = 1
        spec = LaunchSpec(flags=flags, env=env, host=g.host, port=port, command=command,
                          startup_timeout_s=g.startup_timeout_s)
        arm = ArmLayout(name=g.name, launch=spec)
        self.gateway = LaunchedArm(
            layout=arm, spec=ArmSpec(name=g.name, url=f"http://{g.host}:{port}", launched=True),
            port=port, log_path=self.log_dir / f"{g.name}.log", startup_timeout_s=g.startup_timeout_s)
        self.gateway_metrics_url = f"http://{g.host}:{mport}/metrics"
        for name in self._behind:
            a = self.launched.get(name)
            if a is None:
                continue
            a.spec.fleet, a.spec.role = self.fleet_name, layout.role_of(a.layout)
            if is_sim_command(layout.server_command(a.layout, self.base_env)) and not (
                    a.layout.launch.flags.get("model_path") or a.layout.launch.flags.get("model")):
                a.extra_argv = ["--model-path", str(self.log_dir / "sim-model")]

    def _gateway_argv(self) -> Optional[list[str]]:
        """The worker arguments of `smg launch`: the URLs of the workers that are up (--worker-urls,
        or --pd-disaggregation --prefill URL [BOOTSTRAP_PORT] ... --decode URL ...); None when none is."""
        up = [a for a in self.arms if a.name in self._behind
              and (a.name not in self.launched or self.launched[a.name].ready)]
        if not up:
            return None
        roles = {a.name: a.role for a in up}
        if not {"prefill", "decode"} & set(roles.values()):
            return ["--worker-urls", *(a.url for a in up)]
        out = ["--pd-disaggregation"]
        for a in up:
            if a.role == "prefill":
                arm = next(x for x in self.layout.arms if x.name == a.name)
                boot = arm.launch.flags.get("disaggregation_bootstrap_port") if arm.launch else None
                out += ["--prefill", a.url] + ([str(boot)] if boot else [])
        for a in up:
            if a.role == "decode":
                out += ["--decode", a.url]
        return out

    async def _start_gateway(self) -> None:
        g = self.gateway
        assert g is not None
        workers = self._gateway_argv()
        if workers is None:
            self._fail(g, "no worker behind it came up: " + "; ".join(
                f"{n}: {self.launched[n].cause or 'failed'}" for n in self._behind if n in self.launched))
            return
        key = self.base_env.get(self.gateway_key_env) if self.gateway_key_env else None
        # smg takes its control-plane keys on the command line only: the key is in its argv (the
        # log's command line and every line it prints have it as ***), never in a file of ours
        g.extra_argv = workers + (["--control-plane-api-keys", f"specmon:specmon:admin:{key}"] if key else [])
        g.extra_secrets = [key] if key else []
        expected = {a.url for a in self.arms if a.name in self._behind and a.url in workers}
        g.ready_check = lambda client, url: _gateway_lists(client, url, expected, key)
        g.ready_detail = f"/workers lists its {len(expected)} worker{'s' if len(expected) != 1 else ''} healthy"
        ran = self.gateway_binary or {}
        g.note = f"gateway: {ran.get('binary')} ({ran.get('version')})"
        self._post(LogLine(arm=g.name, line=f"[specmon] {g.note}"))
        await self._start_arm(g)

    def gpu_indices(self) -> dict[str, list[int]]:
        return {a.name: list(a.launch.gpus) for a in self.layout.launched if a.launch and a.launch.gpus is not None}

    def failed(self) -> dict[str, str]:
        out = {n: a.cause or "failed" for n, a in self.launched.items() if a.failed}
        if self.gateway is not None and self.gateway.failed:
            out[self.gateway.name] = self.gateway.cause or "failed"
        return out

    def startup_phases(self, arm: str) -> Optional[dict[str, float]]:
        """The launched arm's start-up seconds by phase as its log printed them (0.5.23's timings
        line, 0.5.10's elapsed lines); None for an arm not launched here or before any such line.
        For an ArmInfo whose /server_info has no startup_time (0.5.10)."""
        a = self.launched.get(arm)
        if a is None:
            return None
        with a.lock:
            return a.state.startup_s

    def fill_from_log(self, s: Sample) -> Sample:
        """Fill what a scrape left unknown from the arm's log lines (works without --enable-metrics);
        mark a dead arm failed with its cause."""
        a = self.launched.get(s.arm)
        if a is None:
            return s
        if a.failed:
            s.up, s.state, s.reason = False, "failed", a.cause
            return s
        if not a.ready and not s.up:
            s.state, s.reason = "starting", a.phase
            return s
        with a.lock:
            if a.state.lines_parsed == 0 and a.state.kv_capacity_tokens is None:
                return s
            log = a.state.sample(s.arm, s.ts)
        filled = False
        for name in ("running_reqs", "queued_reqs", "kv_used_tokens", "kv_capacity_tokens", "kv_usage",
                     "gen_tok_s", "accept_length", "accept_rate", "spec_enabled"):
            if getattr(s, name) is None and getattr(log, name) is not None:
                setattr(s, name, getattr(log, name))
                filled = True
        if filled and s.source is None:
            s.source = "log"
        return s

    async def start(self, emit: Emit) -> None:
        """Start every launched arm and wait for each to be ready or failed. ServerError when none
        of the launched arms came up (and no arm is attached)."""
        self._emit = emit
        self._loop = asyncio.get_running_loop()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _install_fatal_handlers()
        await asyncio.gather(*(self._start_arm(a) for a in self.launched.values()))
        if self.launched and all(a.failed for a in self.launched.values()) and not self.layout.attached_specs():
            raise ServerError("; ".join(self._failure_line(a) for a in self.launched.values()))
        if self.gateway is not None and not self._stopped:
            (self.log_dir / "sim-model").mkdir(exist_ok=True)
            await self._start_gateway()  # after its workers: it registers them as it starts
            if self.gateway.failed:
                raise ServerError(self._failure_line(self.gateway))

    async def restart(self, emit: Optional[Emit] = None) -> None:
        """Stop and start every launched arm (a cold server for the next level), failed ones too."""
        if emit is not None:
            self._emit = emit
        arms = list(self.launched.values())
        for a in arms:
            a.ready = False
            self._set_phase(a, lp.PHASE_RESTARTING)
        await asyncio.gather(*(asyncio.to_thread(self._stop_arm, a) for a in arms))
        await asyncio.gather(*(self._start_arm(a) for a in arms))

    def stop(self, grace_s: Optional[float] = None) -> None:
        """Terminate every launched process group (TERM, then KILL after the grace period). Idempotent."""
        self._stopped = True
        for task in self._watchers.values():
            task.cancel()
        arms = [a for a in [*self.launched.values(), self.gateway] if a is not None and a.proc is not None]
        threads = [threading.Thread(target=self._stop_arm, args=(a, grace_s), daemon=True) for a in arms]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._reaper.close()
        _LIVE.discard(self)
        _remove_fatal_handlers()

    # ---- one arm -------------------------------------------------------------------------------
    async def _start_arm(self, a: LaunchedArm) -> None:
        a.starts += 1
        a.ready = a.ready_line_seen = a.stopping = False
        a.cause = a.fatal = None
        a.state = lp.LogState()
        a.tail.clear()
        host = a.layout.launch.host  # type: ignore[union-attr]
        # The URL stays the same across restarts (the ramp's clients hold it): give a just-killed
        # server a moment to let go of the port.
        for _ in range(20 if a.starts > 1 else 1):
            if port_free(host, a.port):
                break
            await asyncio.sleep(0.25)
        else:
            self._fail(a, f"port in use: {host}:{a.port} is already taken (by another server, or a dead one's leftover)")
            return
        a.env = build_env(a.layout, self.base_env)
        base = build_argv(self.layout, a.layout, a.port, a.env)
        a.argv = base + a.extra_argv
        a.secrets = sorted(set(secrets_of(a.layout, a.argv, a.env)) | set(a.extra_secrets), key=len, reverse=True)
        self._set_phase(a, lp.PHASE_STARTING, " ".join(base[-2:]))
        try:
            log = open(a.log_path, "ab", buffering=0)
            shown = _cmdline([redact(x, a.secrets) for x in a.argv])  # before quoting changes how a key looks
            header = f"----- specmon: start #{a.starts} at {time.strftime('%Y-%m-%d %H:%M:%S')}: {shown}\n"
            log.write(header.encode())
            _LIVE.add(self)
            a.proc = subprocess.Popen(
                a.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=a.env, start_new_session=True, close_fds=True, preexec_fn=_pdeathsig_preexec(),
            )
        except OSError as e:
            self._fail(a, redact(f"cannot start {a.argv[0]!r}: {e.strerror or e}", a.secrets))
            return
        self._reaper.add(a.proc.pid)
        a.spec.pid = a.proc.pid
        # Before the reader starts, so it is the line after the header: which group to look for.
        log.write(f"----- specmon: pid {a.proc.pid} (its own process group {a.proc.pid})\n".encode())
        if a.note:
            log.write(f"----- specmon: {a.note}\n".encode())
        a.reader = threading.Thread(target=self._read_output, args=(a, a.proc, log), name=f"log-{a.name}", daemon=True)
        a.reader.start()
        await self._wait_ready(a, a.proc)
        if a.ready and not self._stopped:
            self._watchers[a.name] = asyncio.create_task(self._watch(a, a.proc))

    async def _wait_ready(self, a: LaunchedArm, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + a.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while not self._stopped:
                if proc.poll() is not None:
                    await self._died(a, proc, during="startup")
                    return
                if a.fatal is not None:
                    # SGLang would hang on (minutes, for a taken port) before it exits: stop it now.
                    await self._died(a, proc, during="startup")
                    return
                if a.ready_line_seen or await (a.ready_check or _health_ok)(client, a.spec.url):
                    a.ready = True
                    detail = None if a.ready_line_seen else a.ready_detail
                    self._set_phase(a, lp.PHASE_READY, detail)
                    return
                if time.monotonic() > deadline:
                    last_phase = a.phase
                    await asyncio.to_thread(self._stop_arm, a)
                    self._fail(a, f"not ready within {a.startup_timeout_s:g} s (no ready line, /health not 200; "
                                  f"last phase: {last_phase})")
                    return
                await asyncio.sleep(0.25)

    async def _watch(self, a: LaunchedArm, proc: subprocess.Popen) -> None:
        """After readiness: notice the server dying (mid-ramp crash) and fail this arm only."""
        try:
            while proc.poll() is None:
                await asyncio.sleep(0.25)
            if not a.stopping and not self._stopped:
                await self._died(a, proc, during="serving")
        except asyncio.CancelledError:
            pass

    async def _died(self, a: LaunchedArm, proc: subprocess.Popen, during: str) -> None:
        # Its children (scheduler, detokenizer) may outlive the leader: take the group down too.
        await asyncio.to_thread(kill_group, proc.pid, 2.0, proc)
        if not _group_alive(proc.pid):
            self._reaper.remove(proc.pid)
        if a.reader is not None:
            await asyncio.to_thread(a.reader.join, 2.0)
        with a.lock:
            tail = list(a.tail)
        cause = a.fatal or lp.failure_cause(tail) or f"exited with code {proc.returncode} during {during}"
        self._fail(a, cause)

    def _stop_arm(self, a: LaunchedArm, grace_s: Optional[float] = None) -> None:
        a.stopping = True
        watcher = self._watchers.pop(a.name, None)
        if watcher is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(watcher.cancel)
        proc = a.proc
        if proc is None:
            return
        if proc.poll() is None or _group_alive(proc.pid):
            kill_group(proc.pid, self.grace_s if grace_s is None else grace_s, proc)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not _group_alive(proc.pid):
            self._reaper.remove(proc.pid)
        if a.reader is not None:
            a.reader.join(timeout=2)
        if not a.failed:
            a.phase = lp.PHASE_STOPPED

    def _read_output(self, a: LaunchedArm, proc: subprocess.Popen, log) -> None:
        """Reader thread: every line to the log file; scheduler lines into the LogState; phases and
        (rate-limited) LogLine events to the loop."""
        window_start, shown, hidden = time.monotonic(), 0, 0
        secrets = [x.encode() for x in a.secrets]
        try:
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, b""):
                # SGLang prints its server_args (api_key included) at start-up: the key never
                # reaches the file, the tail (failure causes) or the LogLine events.
                for secret in secrets:
                    raw = raw.replace(secret, REDACTED.encode())
                log.write(raw)
                # progress bars redraw with \r: the last redraw is the line
                line = raw.decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1]
                with a.lock:
                    a.tail.append(line)
                    a.state.feed(line)
                if not a.ready and proc is a.proc:
                    bound = lp.bind_error(line)
                    if bound is not None and bound[1] == a.port:  # our port, not some other socket's
                        a.fatal = lp.bind_error_cause(*bound)
                phase = lp.parse_phase(line)
                if phase is not None and proc is a.proc:
                    if phase[0] == lp.PHASE_READY:
                        a.ready_line_seen = True  # _wait_ready announces it
                    elif not a.ready:
                        self._set_phase(a, *phase)
                now = time.monotonic()
                if now - window_start >= 1.0:
                    if hidden:
                        self._post(LogLine(arm=a.name, line=f"[specmon] {hidden} lines not shown; all are in {a.log_path}"))
                    window_start, shown, hidden = now, 0, 0
                if shown < LOG_LINES_PER_S:
                    shown += 1
                    self._post(LogLine(arm=a.name, line=line))
                else:
                    hidden += 1
        except (OSError, ValueError):
            pass
        finally:
            log.close()
            if proc.stdout is not None:
                proc.stdout.close()

    # ---- events --------------------------------------------------------------------------------
    def _set_phase(self, a: LaunchedArm, phase: str, detail: Optional[str] = None) -> None:
        a.phase = phase
        self._post(ArmPhase(arm=a.name, phase=phase, detail=detail))

    def _fail(self, a: LaunchedArm, cause: str) -> None:
        a.cause = cause
        a.ready = False
        a.phase = lp.PHASE_FAILED
        self._post(ArmPhase(arm=a.name, phase=lp.PHASE_FAILED, detail=cause))

    def _failure_line(self, a: LaunchedArm) -> str:
        tail = [t for t in a.tail if t.strip()][-3:]
        where = f" (log {a.log_path})" if a.proc is not None else ""
        last = f"; last lines: {' | '.join(t.strip()[:160] for t in tail)}" if tail else ""
        return f"arm {a.name!r} ({a.spec.url}) failed: {a.cause}{where}{last}"

    def _post(self, event: Event) -> None:
        """Emit from any thread: events reach the front end on the session's loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if _running_loop() is loop:
                self._emit(event)
            else:
                loop.call_soon_threadsafe(self._emit, event)
        except RuntimeError:
            pass  # the loop is closing


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _gateway_lists(client: httpx.AsyncClient, url: str, expected: set[str], key: Optional[str] = None) -> bool:
    """A gateway is ready when its registry (GET /workers) lists every expected worker healthy."""
    try:
        r = await client.get(url + "/workers", headers={"Authorization": f"Bearer {key}"} if key else None)
        listed = r.json().get("workers", []) if r.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    healthy = {str(w.get("url", "")).rstrip("/").split("@")[0] for w in listed
               if isinstance(w, dict) and w.get("is_healthy")}
    return expected <= healthy


def _smg_command() -> list[str]:
    """`smg launch`: the first smg on PATH (an operator's newer gateway wins), else the one installed
    beside this Python (the dev extra's smg), else the bare name (its start fails with the cause)."""
    import shutil

    here = Path(sys.executable).parent / "smg"
    found = shutil.which("smg")
    return [str(Path(found).resolve()) if found else (str(here) if here.is_file() else "smg"), "launch"]


def smg_version(binary: str, env: Optional[dict[str, str]] = None) -> str:
    """What `smg --version` says (`smg 1.13.0`; sglang-router: `sgl-model-gateway 0.3.2`), or why not."""
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, env=env,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    lines = (p.stdout or p.stderr or "").strip().splitlines()
    return lines[0][:120] if p.returncode == 0 and lines else f"unknown (--version exited {p.returncode})"


async def _health_ok(client: httpx.AsyncClient, url: str) -> bool:
    try:
        r = await client.get(url + "/health")
        return r.status_code == 200
    except httpx.HTTPError:
        return False


def _cmdline(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(x) for x in argv)
