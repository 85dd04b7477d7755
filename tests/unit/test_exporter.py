"""specmon as a Prometheus exporter (specmon/exporter.py, `--metrics-port`).

- unit: events fed to an Exporter, its own registry read back through generate_latest: names,
  labels, values, histogram buckets, and unknown values (None, NaN) never exported as 0;
- the command line: bad ports and hosts, a port in use (one line, exit 2, nothing started);
- end to end: `specmon ramp`, `attach` and `demo` headless against the simulator, /metrics
  scraped over HTTP while they run;
- a real Prometheus server (Debian's `prometheus`) scraping specmon during a ramp, queried
  through its HTTP API.
"""

from __future__ import annotations

import ast
import socket
import subprocess
import sys

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from helpers.simproc import REPO, free_port
from specmon.exporter import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Exporter
from specmon.model import (
    ArmSpec, KneeCalled, LevelStarted, RampFinished, RequestFinished, RequestRecord, Sample, SamplesTick,
    SessionEnded, SessionStarted,
)
from helpers.exporter import get_text, listening, scrape, specmon_cmd, value

# --------------------------------------------------------------------------------------------
# helpers


def families(exporter: Exporter) -> dict:
    """The registry's exposition text, parsed back: name -> family."""
    text = generate_latest(exporter.registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def series(exporter: Exporter, sample_name: str) -> dict[tuple, float]:
    """Every series of one sample name: sorted label items -> value."""
    out = {}
    for fam in families(exporter).values():
        for s in fam.samples:
            if s.name == sample_name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out




def record(arm="a", level=0, c=4, status="ok", **kw) -> RequestFinished:
    return RequestFinished(record=RequestRecord(arm=arm, level=level, offered_concurrency=c, request_id="r",
                                                t_scheduled=0.0, t_start=0.0, status=status, **kw))


def started(*arms: str) -> SessionStarted:
    return SessionStarted(mode="ramp", arms=[ArmSpec(name=a, url="http://127.0.0.1:1") for a in arms])




def run_specmon(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(specmon_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def one_line_exit_2(p: subprocess.CompletedProcess, *needles: str) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]








# --------------------------------------------------------------------------------------------
# unit: events in, registry out


def test_ramp_events_become_metrics_with_arm_level_and_definition_labels():
    ex = Exporter()
    ex(started("fp8", "nvfp4"))
    ex(LevelStarted(level=2, offered_concurrency=16, planned_s=60.0, levels_total=4))
    assert value(ex, "specmon_offered_concurrency", arm="fp8") == 16
    assert value(ex, "specmon_offered_concurrency", arm="nvfp4") == 16
    assert value(ex, "specmon_ramp_level", arm="nvfp4") == 2

    ex(SamplesTick(samples=[
        Sample(ts=1.0, arm="fp8", up=True, running_reqs=12, queued_reqs=4, kv_usage=0.83, gen_tok_s=812.5,
               accept_length=2.6, scrape_s=0.012, offered_concurrency=16, level=2),
        Sample(ts=1.0, arm="nvfp4", up=False, state="refused", reason="connection refused", scrape_s=0.002,
               offered_concurrency=16, level=2),
    ]))
    assert value(ex, "specmon_arm_up", arm="fp8") == 1
    assert value(ex, "specmon_arm_up", arm="nvfp4") == 0
    assert value(ex, "specmon_scrape_seconds", arm="fp8") == pytest.approx(0.012)
    assert value(ex, "specmon_server_running_requests", arm="fp8") == 12
    assert value(ex, "specmon_server_queued_requests", arm="fp8") == 4
    assert value(ex, "specmon_server_kv_usage_ratio", arm="fp8") == pytest.approx(0.83)
    assert value(ex, "specmon_server_gen_tokens_per_second", arm="fp8") == pytest.approx(812.5)
    assert value(ex, "specmon_server_accept_length", arm="fp8") == pytest.approx(2.6)
    # the arm that is down: up 0, and none of its server gauges (unknown, not 0)
    for name in ("specmon_server_running_requests", "specmon_server_queued_requests",
                 "specmon_server_kv_usage_ratio", "specmon_server_gen_tokens_per_second",
                 "specmon_server_accept_length"):
        assert set(series(ex, name)) == {(("arm", "fp8"),)}, name

    ex(record("fp8", 2, 16, ttft_s=0.3, itl_mean_s=0.012, tpot_s=0.011, e2e_s=3.1))
    ex(record("fp8", 2, 16, ttft_s=1.5, itl_mean_s=0.04, tpot_s=0.035, e2e_s=9.0))
    ex(record("fp8", 2, 16, status="timeout", ttft_s=0.2, e2e_s=600.0))  # counted, its times not observed
    ex(record("nvfp4", 2, 16, status="error", error="ConnectError"))
    assert value(ex, "specmon_requests_total", arm="fp8", level="2", status="ok") == 2
    assert value(ex, "specmon_requests_total", arm="fp8", level="2", status="timeout") == 1
    assert value(ex, "specmon_requests_total", arm="nvfp4", level="2", status="error") == 1
    assert value(ex, "specmon_ttft_seconds_count", arm="fp8", level="2") == 2
    assert value(ex, "specmon_ttft_seconds_sum", arm="fp8", level="2") == pytest.approx(1.8)
    assert value(ex, "specmon_ttft_seconds_bucket", arm="fp8", level="2", le="0.25") == 0
    assert value(ex, "specmon_ttft_seconds_bucket", arm="fp8", level="2", le="0.5") == 1
    assert value(ex, "specmon_ttft_seconds_bucket", arm="fp8", level="2", le="2.5") == 2
    assert value(ex, "specmon_itl_mean_seconds_bucket", arm="fp8", level="2", le="0.015") == 1
    assert value(ex, "specmon_tpot_seconds_sum", arm="fp8", level="2") == pytest.approx(0.046)
    assert value(ex, "specmon_e2e_seconds_bucket", arm="fp8", level="2", le="5.0") == 1
    assert value(ex, "specmon_e2e_seconds_bucket", arm="fp8", level="2", le="10.0") == 2
    assert value(ex, "specmon_e2e_seconds_bucket", arm="fp8", level="2", le="+Inf") == 2
    assert series(ex, "specmon_ttft_seconds_count") == {(("arm", "fp8"), ("level", "2")): 2.0}  # no failed arm's

    ex(KneeCalled(arm="fp8", definition="predicted", concurrency=18.0, detail="KV pool"))
    ex(KneeCalled(arm="fp8", definition="plateau", concurrency=16.0, detail="", resolved=True))
    ex(KneeCalled(arm="nvfp4", definition="queueing", concurrency=None, detail="no answer"))
    assert series(ex, "specmon_knee_concurrency") == {
        (("arm", "fp8"), ("definition", "predicted")): 18.0,
        (("arm", "fp8"), ("definition", "plateau")): 16.0,
    }

    fams = families(ex)
    assert fams["specmon_ttft_seconds"].type == "histogram"
    assert fams["specmon_requests"].type == "counter"
    assert fams["specmon_knee_concurrency"].type == "gauge"
    assert "MEAN" in fams["specmon_itl_mean_seconds"].documentation
    assert all(name.startswith("specmon_") for name in fams)


def test_unknown_values_are_never_exported_as_zero():
    ex = Exporter()
    ex(started("a"))
    ex(SamplesTick(samples=[Sample(ts=1.0, arm="a", up=True, running_reqs=3, queued_reqs=0, kv_usage=0.5,
                                   gen_tok_s=100.0, accept_length=None, scrape_s=0.01)]))
    # known 0 is exported as 0; accept_length None (no speculation) and offered None (no ramp) are not
    assert value(ex, "specmon_server_queued_requests", arm="a") == 0
    assert value(ex, "specmon_server_accept_length", arm="a") is None
    assert value(ex, "specmon_offered_concurrency", arm="a") is None
    assert value(ex, "specmon_ramp_level", arm="a") is None
    text = generate_latest(ex.registry).decode()
    assert "specmon_server_accept_length{" not in text and "specmon_offered_concurrency{" not in text

    # a value known, then unknown (None, NaN, inf): the series goes away
    ex(SamplesTick(samples=[Sample(ts=2.0, arm="a", up=True, running_reqs=None, queued_reqs=None,
                                   kv_usage=float("nan"), gen_tok_s=float("inf"), scrape_s=None)]))
    for name in ("specmon_server_running_requests", "specmon_server_queued_requests",
                 "specmon_server_kv_usage_ratio", "specmon_server_gen_tokens_per_second", "specmon_scrape_seconds"):
        assert value(ex, name, arm="a") is None, name
    assert value(ex, "specmon_arm_up", arm="a") == 1
    text = generate_latest(ex.registry).decode()
    assert "NaN" not in text and "Inf" not in text.replace('le="+Inf"', "")

    # a request with unknown (or NaN) times: counted, no histogram observation
    ex(record("a", 0, ttft_s=None, itl_mean_s=float("nan"), tpot_s=None, e2e_s=None))
    assert value(ex, "specmon_requests_total", arm="a", level="0", status="ok") == 1
    for name in ("specmon_ttft_seconds", "specmon_itl_mean_seconds", "specmon_tpot_seconds", "specmon_e2e_seconds"):
        assert value(ex, name + "_count", arm="a", level="0") is None, name

    # a knee called, then found unknown: removed
    ex(KneeCalled(arm="a", definition="plateau", concurrency=8.0, detail=""))
    ex(KneeCalled(arm="a", definition="plateau", concurrency=float("nan"), detail=""))
    assert series(ex, "specmon_knee_concurrency") == {}


def test_level_follows_the_ramp_and_goes_unset_when_it_ends():
    ex = Exporter()
    ex(started("a", "b"))
    seen = []
    for i, c in enumerate((2, 4, 8)):
        ex(LevelStarted(level=i, offered_concurrency=c, planned_s=None, levels_total=3))
        ex(SamplesTick(samples=[Sample(ts=float(i), arm=arm, up=True, offered_concurrency=c, level=i)
                                for arm in ("a", "b")]))
        seen.append((value(ex, "specmon_offered_concurrency", arm="b"), value(ex, "specmon_ramp_level", arm="a")))
    assert seen == [(2, 0), (4, 1), (8, 2)]
    ex(RampFinished(reason="done"))
    assert series(ex, "specmon_offered_concurrency") == {} and series(ex, "specmon_ramp_level") == {}
    # the watching that follows the ramp: samples without a level keep them unset
    ex(SamplesTick(samples=[Sample(ts=9.0, arm="a", up=True, offered_concurrency=None, level=None)]))
    assert series(ex, "specmon_offered_concurrency") == {}


def test_a_rate_level_offers_no_concurrency():
    """An open-loop level (--rates) after a concurrency level: its cap (0) is not exported as the
    concurrency offered; the level index still is."""
    ex = Exporter()
    ex(started("a"))
    ex(LevelStarted(level=0, offered_concurrency=4, planned_s=None, levels_total=2))
    assert value(ex, "specmon_offered_concurrency", arm="a") == 4
    ex(LevelStarted(level=1, offered_concurrency=0, planned_s=None, levels_total=2, offered_rate=2.5))
    assert series(ex, "specmon_offered_concurrency") == {} and value(ex, "specmon_ramp_level", arm="a") == 1


def test_buckets_suit_llm_serving():
    assert TTFT_BUCKETS[0] <= 0.01 and TTFT_BUCKETS[-1] >= 60
    assert ITL_BUCKETS[0] <= 0.001 and ITL_BUCKETS[-1] >= 0.5
    assert E2E_BUCKETS[-1] >= 300
    for b in (TTFT_BUCKETS, ITL_BUCKETS, E2E_BUCKETS):
        assert list(b) == sorted(set(b))
    ex = Exporter()
    ex(record("a", 0, ttft_s=0.05, itl_mean_s=0.01, tpot_s=0.01, e2e_s=2.0))
    les = {dict(k)["le"] for k in series(ex, "specmon_ttft_seconds_bucket")}
    assert les == {str(float(b)) for b in TTFT_BUCKETS} | {"+Inf"}


def test_own_registry_served_over_http_and_stopped_on_session_ended():
    ex = Exporter()
    port = ex.start(0)  # any free port
    assert ex.url == f"http://127.0.0.1:{port}/metrics"
    try:
        ex(started("a"))
        ex(SamplesTick(samples=[Sample(ts=1.0, arm="a", up=True, running_reqs=5, scrape_s=0.02)]))
        got = scrape(ex.url)
        assert got is not None
        assert got["specmon_server_running_requests"] == {(("arm", "a"),): 5.0}
        assert got["specmon_arm_up"] == {(("arm", "a"),): 1.0}
        # the global registry is not touched
        assert REGISTRY.get_sample_value("specmon_arm_up", {"arm": "a"}) is None
        assert "specmon_" not in generate_latest(REGISTRY).decode()
        # a second exporter in the same process has its own registry (no duplicate-name error)
        other = Exporter()
        assert value(other, "specmon_arm_up", arm="a") is None
    finally:
        ex(SessionEnded(reason="done"))
    assert not ex.serving and not listening(port)
    assert get_text(f"http://127.0.0.1:{port}/metrics", timeout=1) is None
    ex.stop()  # idempotent
    # a port already in use is an OSError from start (the command line turns it into exit 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            Exporter().start(s.getsockname()[1])


def test_exporter_imports_only_the_model_and_prometheus_client():
    tree = ast.parse((REPO / "specmon" / "exporter.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    ours = {m for m in imported if m.split(".")[0] == "specmon"}
    assert ours == {"specmon.model"}, ours
    assert not {m for m in imported if m.split(".")[0] in ("textual", "rich")}
    code = ("import sys, specmon.exporter\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual' or m.startswith('specmon.tui'))\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


# --------------------------------------------------------------------------------------------
# the command line

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port here
COMMANDS = [["attach", DEAD, "--headless"], ["ramp", DEAD, "--levels", "2", "--headless"],
            ["launch", "demo", "--headless"], ["demo", "--headless"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("port", ["0", "65536", "-1", "http", "80.5"])
def test_bad_metrics_port_is_one_line_exit_2(tmp_path, command, port):
    out = tmp_path / "s"
    one_line_exit_2(run_specmon(*command, "--metrics-port", port, "--out", out), "--metrics-port", port)
    assert not out.exists()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_metrics_port_in_use_is_one_line_exit_2_before_anything_starts(tmp_path, command):
    out = tmp_path / "s"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_specmon(*command, "--metrics-port", port, "--out", out)
    one_line_exit_2(p, f"--metrics-port {port}", f"127.0.0.1:{port} is already in use")
    assert not out.exists()  # no session folder, no server launched, no request sent


def test_metrics_host_not_on_this_machine_is_one_line_exit_2(tmp_path):
    out = tmp_path / "s"
    # TEST-NET-1: never an address of this machine, so binding fails (nothing is sent anywhere)
    p = run_specmon("attach", DEAD, "--headless", "--metrics-port", free_port(), "--metrics-host", "192.0.2.1",
                    "--out", out)
    one_line_exit_2(p, "192.0.2.1", "cannot listen")
    assert not out.exists()
    one_line_exit_2(run_specmon("attach", DEAD, "--metrics-host", "", "--metrics-port", "9100"), "--metrics-host")


# --------------------------------------------------------------------------------------------
# end to end against the simulator




