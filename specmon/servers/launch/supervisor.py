"""The Supervisor: starts the launched arms of a layout (and its gateway), watches them start and
serve, restarts and stops them. LaunchedArm: one launched server and what is known of it."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import httpx

from specmon.errors import ServerError
from specmon.model import ArmPhase, ArmSpec, Event, LogLine, Sample
from specmon.servers.launch.argv import REDACTED, _cmdline, build_argv, build_env, key_env_of, redact, secrets_of
from specmon.servers.launch.gateway import _gateway_lists, _health_ok, _smg_command, smg_version
from specmon.servers.launch.ports import free_port, named_ports, port_free
from specmon.servers.launch.processes import (_LIVE, _group_alive, _install_fatal_handlers, _pdeathsig_preexec,
                                              _Reaper, _remove_fatal_handlers, kill_group)
from specmon.servers.layout import ArmLayout, Layout, LaunchSpec, is_sim_command
from specmon.sources import logparse as lp


Emit = Callable[[Event], None]

TAIL_LINES = 40  # kept per arm for the failure message
LOG_LINES_PER_S = 25  # LogLine events per arm per second; the file always gets every line


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
