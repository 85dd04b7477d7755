"""What the commands share, so that no command module imports another one:

- the servers named on the command line (`arms_from_args`: URLs, `--name NAME=URL`, the key's
  environment variable), checked before anything starts;
- the consent a ramp needs before it sends load to another machine (`require_loopback_or_yes`);
- the workload, read before any server starts or any request is sent (`load_workload`);
- running a session through the TUI or headless (`run_front_end`), and its exit code read from
  its own end events (`SessionOutcome`: SessionEnded's cause, RampFinished's denied and gone):
  128 + N after a signal, 1 when its folder took no more rows, 3 when no server ever answered;
  after a ramp also 2 when a server refused the credentials (401/403) and 3 when a server
  stopped answering and was still gone at the end of the ramp;
- running a layout: launch its servers, ramp them, watch, stop them (`run_layout`);
- the Prometheus exporter `--metrics-port` asks for, listening before anything else starts
  (`start_metrics`), as the session's extra consumer.

Heavy parts (the session, the ramp, the TUI) are imported where they are used.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence
from urllib.parse import urlsplit

from specmon.errors import ServerError, UsageError
from specmon.model import ArmSpec, Event, RampFinished, SessionEnded
from specmon.session.folder import public_url
from specmon.session.source import SessionSource
from specmon.urls import is_loopback, normalize_url

if TYPE_CHECKING:
    from specmon.exporter import Exporter
    from specmon.load import Workload
    from specmon.plan import RampPlan
    from specmon.servers.layout import Layout
    from specmon.session.live import LiveSession
    from specmon.session.ramp import RampDriver

# Bad dataset lines named one by one on stderr before the count (the rest only counted).
_SKIPPED_SHOWN = 5
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # as a layout's api_key_env


# --------------------------------------------------------------------------------------------
# Servers from the command line


def check_url(url: str, what: str) -> str:
    """The base URL of `url`, or a UsageError `WHAT: expected ...`."""
    try:
        return normalize_url(url)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None


def _default_name(url: str, taken: set[str]) -> str:
    u = urlsplit(url)
    name = f"{u.hostname}:{u.port}" if u.port else (u.hostname or url)
    if u.hostname in ("127.0.0.1", "localhost") and u.port:
        name = f":{u.port}"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}#{i}", i + 1
    return name


def arms_from_args(urls: Sequence[str], names: Sequence[str], api_key_env: Optional[str]) -> list[ArmSpec]:
    if api_key_env is not None and not _ENV_NAME.match(api_key_env):
        raise UsageError(f"--api-key-env {api_key_env!r}: expected the NAME of an environment variable")
    if api_key_env is not None and not os.environ.get(api_key_env):
        raise UsageError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set or empty")
    arms: list[ArmSpec] = []
    taken: set[str] = set()
    for item in names:
        if "=" not in item:
            raise UsageError(f"--name {item!r}: expected NAME=URL")
        name, url = item.split("=", 1)
        name = name.strip()
        if not name:
            raise UsageError(f"--name {item!r}: the name is empty (expected NAME=URL)")
        if not name.isprintable():
            raise UsageError(f"--name {item!r}: expected a name of printable characters")
        if name in taken:
            raise UsageError(f"--name {item!r}: the name {name!r} is used twice")
        arms.append(ArmSpec(name=name, url=check_url(url, f"--name {name}"), api_key_env=api_key_env))
        taken.add(name)
    for url in urls:
        norm = check_url(url, "URL")
        name = _default_name(norm, taken)
        arms.append(ArmSpec(name=name, url=norm, api_key_env=api_key_env))
        taken.add(name)
    if not arms:
        raise UsageError("expected at least one server URL (or --name NAME=URL)")
    return arms


def require_loopback_or_yes(arms: Sequence[ArmSpec], yes: bool) -> None:
    """A ramp sends generation load: to a server that is not on this machine (by address: the
    name is never resolved) only with --yes. Checked before any connection is made."""
    if yes:
        return
    remote = [a for a in arms if not is_loopback(a.url)]
    if remote:
        urls = ", ".join(public_url(a.url) for a in remote)
        raise UsageError(f"{urls}: not a loopback address and a ramp sends generation load to it; "
                         "pass --yes to send it anyway")


def gateway_key_var(name: Optional[str]) -> Optional[str]:
    """--gateway-key-env VAR: the variable must hold the key now (its value is read, never kept)."""
    if name is None:
        return None
    if not os.environ.get(name):
        raise UsageError(f"--gateway-key-env {name}: the variable is not set (expected the gateway's admin key in it)")
    return name


def gateway_fleets(arms: list[ArmSpec], *, discover: bool = True, metrics_url: Optional[str] = None,
                   timeout_s: float = 3.0, strict: bool = True,
                   key_env: Optional[str] = None) -> tuple[list[ArmSpec], list]:
    """The arms that are SGLang servers, and a GatewayFleet for each URL that is a gateway (its
    GET /workers answers a worker registry): its workers are watched, not the gateway. A URL
    that answers as neither is exit 2, in one line (strict=False: it stays an arm); one that does not answer stays an arm (the session retries
    it). discover=False (--no-discover): every URL is a server, as it was. GETs only
    (sources/gateway/probe.py)."""
    if not discover:
        if metrics_url is not None:
            raise UsageError("--gateway-metrics: not with --no-discover (no gateway is looked for)")
        return arms, []
    import asyncio

    from specmon.sources.gateway import GatewayFleet, probe

    if metrics_url is not None:
        try:
            u = urlsplit(metrics_url.strip())
            ok = u.scheme in ("http", "https") and bool(u.hostname) and u.port != 0
        except ValueError:
            ok = False
        if not ok or not metrics_url.isprintable():
            raise UsageError(f"--gateway-metrics: expected a URL like http://127.0.0.1:29000, got {metrics_url!r}")

    async def probe_all():
        return await asyncio.gather(*(probe(a.url, api_key=os.environ.get(a.api_key_env) if a.api_key_env else None,
                                            admin_key=os.environ.get(key_env) if key_env else None,
                                            timeout_s=timeout_s) for a in arms))

    found = asyncio.run(probe_all()) if arms else []
    kept, gateways = [], []
    for arm, p in zip(arms, found):
        if p.kind == "neither" and strict:
            raise UsageError(f"{public_url(arm.url)}: neither an SGLang server nor a gateway ({p.reason})")
        if p.kind == "gateway" and "admin key" in p.reason:
            raise UsageError(f"{public_url(arm.url)}: a gateway whose {p.reason}; "
                             + ("pass --gateway-key-env VAR" if key_env is None else f"check ${key_env}"))
        (gateways if p.kind == "gateway" else kept).append(arm)
    if metrics_url is not None and len(gateways) != 1:
        raise UsageError(f"--gateway-metrics: {'no URL is a gateway' if not gateways else 'more than one gateway'}"
                         " (it names the metrics of one gateway)")
    fleets = []
    for arm in gateways:
        fleets.append(GatewayFleet(arm.url, name=f"gateway {arm.name}", api_key_env=arm.api_key_env,
                                   admin_key_env=key_env, metrics_url=metrics_url, timeout_s=timeout_s))
        print(f"specmon: {public_url(arm.url)} is a gateway: watching the workers it lists",
              file=sys.stderr, flush=True)
    return kept, fleets


# --------------------------------------------------------------------------------------------
# The workload


def load_workload(plan: RampPlan) -> "Workload":
    """The plan's prompts, read now: a bad dataset is exit 2 before anything starts or is sent.
    Bad lines are named on stderr (the first few) and counted."""
    from specmon.load import Workload

    workload = Workload.from_plan(plan)
    skipped = workload.skipped
    for warning in skipped[:_SKIPPED_SHOWN]:
        print(f"specmon: warning: skipped {warning}", file=sys.stderr)
    if skipped:
        print(f"specmon: warning: {len(skipped)} bad line(s) skipped in {plan.dataset}", file=sys.stderr)
    return workload


def ramp_driver(arms: Sequence[ArmSpec], plan: RampPlan, workload: "Workload", trace: Any = None) -> "RampDriver":
    from specmon.session.ramp import RampDriver

    return RampDriver(arms, plan, workload=workload, trace=trace)


# --------------------------------------------------------------------------------------------
# The Prometheus exporter (--metrics-port)


def start_metrics(port: Optional[int], host: str = "127.0.0.1") -> list["Exporter"]:
    """The session's extra consumers: [] without --metrics-port, else the exporter, already
    listening (a port in use, an address not on this machine: UsageError, exit 2, before anything
    else starts). It stops on SessionEnded, and at the latest when specmon exits."""
    if port is None:
        return []
    from specmon.exporter import Exporter

    exporter = Exporter()
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        exporter.start(port, host)
    except socket.gaierror as e:
        raise UsageError(f"--metrics-host {host}: cannot listen there ({e.strerror or e})") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--metrics-port {port}: {where} is already in use") from None
        raise UsageError(f"--metrics-port {port}: cannot listen on {where} ({e.strerror or e})") from None
    atexit.register(exporter.stop)
    print(f"specmon: Prometheus metrics at {exporter.url}", file=sys.stderr, flush=True)
    return [exporter]


# --------------------------------------------------------------------------------------------
# A fleet through Prometheus (--prometheus URL [--selector S])


def prometheus_fleets(url: Optional[str], selector: Optional[str], interval_s: float) -> list:
    """[] without --prometheus; else the fleet source, after one reading that found workers:
    a bad URL or selector, or a selector that matches nothing, is exit 2; Prometheus not
    answering is exit 3. Says on stderr what was found, and that knees need 1 s resolution."""
    if url is None:
        if selector is not None:
            raise UsageError("--selector: only with --prometheus URL")
        return []
    import asyncio

    from specmon.sources.promfleet import (
        KNEE_NOTE, PrometheusFleet, PromQueryError, first_reading, prometheus_base, selector_matchers,
    )

    for flag, check, value in (("--prometheus", prometheus_base, url), ("--selector", selector_matchers, selector)):
        try:
            check(value)
        except ValueError as e:
            raise UsageError(f"{flag}: {e}") from None
    fleet = PrometheusFleet(url, selector, interval_s)
    try:
        reading = asyncio.run(first_reading(url, selector, interval_s))
    except PromQueryError as e:
        if e.kind == "bad_query":
            raise UsageError(f"--selector {fleet.selector}: Prometheus refused it ({e.message})") from None
        raise ServerError(f"Prometheus at {public_url(fleet.url)}: {e.describe()}") from None
    if not reading.workers:
        raise UsageError(f"--selector {fleet.selector}: matches no SGLang series at {public_url(fleet.url)} "
                         "(looked for sglang:num_running_reqs and sglang_num_running_reqs)")
    every = reading.status.scrape_interval_s
    print(f"specmon: {len(reading.workers)} worker(s) through Prometheus at {public_url(fleet.url)}"
          f"{f', scraped every {every:g} s' if every else ''}; {KNEE_NOTE}", file=sys.stderr, flush=True)
    return [fleet]


# --------------------------------------------------------------------------------------------
# Front end


def run_front_end(live: SessionSource, *, headless: bool, title: str, duration_s: Optional[float] = None,
                  ramp: Optional["RampDriver"] = None) -> str:
    """Runs `live` (a LiveSession or a ReplaySource) to its end; returns the exit reason.
    Headless with a ramp, the whole per-level table is printed once more at the end."""
    if not headless:
        from specmon.tui.app import run_tui  # lazy: the data core never imports Textual

        return run_tui(live, title=title)
    from specmon.headless import run_headless

    reason = run_headless(live, duration_s)
    results = ramp.fleet.table(ramp.results) if ramp is not None else []  # arms' rows, then any gateway's workers
    if results:
        from specmon.analysis.table import format_level_table

        print(format_level_table(results))
    return reason


# A session ended by a signal exits as the shell reports a process the signal ended (128 + N):
# a script or a supervisor sees it was stopped, not that it finished. `q`, --duration and a ramp
# that ran its course exit 0.
SIGNAL_EXIT = {"interrupted": 130, "terminated": 143, "hangup": 129}


def signal_exit(reason: object) -> int:
    """A replay's exit code: 128 + N when a signal ended it (its stream's SessionEnded is the
    recorded session's, not the replay's own end), else 0."""
    return SIGNAL_EXIT.get(reason, 0) if isinstance(reason, str) else 0


class SessionOutcome:
    """How a live session ended, read from its own event stream (one more consumer): the ramp's
    RampFinished and the session's SessionEnded. Exit codes are decided from these events alone."""

    def __init__(self) -> None:
        self.ramp: Optional[RampFinished] = None
        self.ended: Optional[SessionEnded] = None

    @classmethod
    def of(cls, live: "LiveSession") -> "SessionOutcome":
        """An outcome that `live` sends its events to (called before the session runs)."""
        outcome = cls()
        live.consumers.append(outcome)
        return outcome

    def __call__(self, e: Event) -> None:
        if type(e) is RampFinished:
            self.ramp = e
        elif type(e) is SessionEnded:
            self.ended = e

    @property
    def cause(self) -> Optional[str]:
        return self.ended.cause if self.ended is not None else None

    def exit_code(self) -> int:
        """0, or 128 + N when a signal ended the session; exit 1 (one line on stderr) when its
        folder took no more rows."""
        if self.cause == "recording failed":
            print(f"specmon: error: {self.ended.reason}", file=sys.stderr)
            raise SystemExit(1)
        return SIGNAL_EXIT.get(self.cause or "", 0)

    def require_an_answer(self, arms: Sequence[ArmSpec]) -> None:
        """Exit 3 when not one server answered during the whole session, naming each and why.
        After a ramp: exit 2 when a server answered 401/403 (bad or missing credentials are bad
        input), else exit 3 when a server was gone at the end of the ramp or when requests were
        sent and not one succeeded."""
        ramp = self.ramp
        if ramp is not None and ramp.denied:
            raise UsageError("; ".join(f"{name}: {why}" for name, why in ramp.denied.items()))
        never = self.ended.never_answered if self.ended is not None else []
        if never and len(never) == len(arms):
            names = "; ".join(f"{n.arm} ({n.url}): {n.reason}" for n in never)
            raise ServerError(f"no server answered: {names}")
        if ramp is not None and ramp.gone:
            raise ServerError("; ".join(f"{name}: {why}" for name, why in ramp.gone.items())
                              + " (still gone when the ramp ended)")
        if ramp is not None and ramp.never_succeeded is not None:
            raise ServerError(ramp.never_succeeded)  # the server was reached but served nothing


# --------------------------------------------------------------------------------------------
# A layout, end to end (launch and demo)


def run_layout(layout: "Layout", *, out: Optional[str], headless: bool, interval: Optional[float], title: str,
               metrics_port: Optional[int] = None, metrics_host: str = "127.0.0.1",
               gateway_key_env: Optional[str] = None, intro: Optional[str] = None) -> int:
    """Start the layout's servers, ramp them if it has a ramp, watch, record; stop every launched
    server at the end, whatever happened. With metrics_port, the exporter listens first. `intro`
    (the demo's length and how to leave) goes to stderr once every input check has passed."""
    from specmon.servers.launch import Supervisor
    from specmon.session.folder import default_out_dir

    plan = layout.plan()
    workload = load_workload(plan) if plan is not None else None
    consumers = start_metrics(metrics_port, metrics_host)
    out_dir = Path(out) if out else default_out_dir()
    supervisor = Supervisor(layout, out_dir, gateway_key_env=gateway_key_var(gateway_key_env))
    if intro:
        print(intro, file=sys.stderr, flush=True)
    try:
        return _run_layout(layout, supervisor, plan, workload, out_dir, headless, interval, title, consumers)
    finally:
        supervisor.stop()  # every launched process group, whatever happened above
        for exporter in consumers:
            exporter.stop()


def _run_layout(layout, supervisor, plan, workload, out_dir, headless, interval, title, consumers) -> int:
    from specmon.model import LaunchContext
    from specmon.session.live import LiveSession

    arms = supervisor.arms
    # With a gateway the ramp loads it (its workers get their load through it) and its workers are
    # watched as its fleet, under the layout's names.
    ramp = ramp_driver(supervisor.ramp_arms, plan, workload) if plan is not None else None
    fleets = []
    if supervisor.gateway is not None:
        from specmon.sources.gateway import GatewayFleet

        fleets.append(GatewayFleet(supervisor.gateway.spec.url, name=supervisor.fleet_name,
                                   metrics_url=supervisor.gateway_metrics_url,
                                   admin_key_env=supervisor.gateway_key_env,
                                   names={a.url: a.name for a in arms if a.fleet == supervisor.fleet_name}))
    context = LaunchContext(layout=_without_keys(layout.as_dict()),
                            layout_file=layout.source, logs_dir=str(supervisor.log_dir),
                            gateway=supervisor.gateway_binary)
    live = LiveSession(
        arms, interval=interval or layout.interval_s, out_dir=out_dir,
        isl=plan.input_len if plan else 1024, osl=plan.output_len if plan else 256,
        ramp=ramp, supervisor=supervisor, gpu_indices=supervisor.gpu_indices(), mode="launch", launch=context,
        panes=layout.panes, consumers=consumers, fleets=fleets,
    )
    outcome = SessionOutcome.of(live)
    reason = run_front_end(live, headless=headless, ramp=ramp, title=title)
    code = outcome.exit_code()
    failed = supervisor.failed()
    for name, cause in failed.items():
        print(f"specmon: arm {name!r} failed: {cause} (log: {supervisor.log_dir / (name + '.log')})", file=sys.stderr)
    if (supervisor.launched and len([n for n in failed if n in supervisor.launched]) == len(supervisor.launched)
            and not layout.attached_specs()):
        raise ServerError("every launched server failed: " + "; ".join(f"{n}: {c}" for n, c in failed.items()))
    if outcome.cause == "error":
        print(f"specmon: {reason}", file=sys.stderr)
        return 1
    return code


SECRET_KEYS = ("api_key", "admin_api_key", "api-key", "admin-api-key")


def _without_keys(obj: Any) -> Any:
    """A layout as session.json keeps it: a key written literally into the layout becomes ***."""
    if isinstance(obj, dict):
        return {k: ("***" if k in SECRET_KEYS and v else _without_keys(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_keys(v) for v in obj]
    return obj
