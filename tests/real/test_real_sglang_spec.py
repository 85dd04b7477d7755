"""Per-request speculative counts against a real SGLang 0.5.23 running NGRAM on this CPU
(REALSG_CPU_SPEC_OPS=1: ../shared/real-sglang/README.md, Speculative decoding): a two-level
`specmon ramp`, and the acceptance its requests.csv / levels.csv give checked against SGLang's
own figures over the same span: the counters (spec_verify_calls_total, generation_tokens_total)
and the `accept len` / `accept rate` of its Decode lines, logged at every step."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from helpers import realsglang as rs
from specmon.sources import logparse as lp
from specmon.sources.spec_counts import hist_text, parse_hist_text


def _is_0523() -> bool:
    return any(rs.SGLANG_VENV.glob("lib/python*/site-packages/sglang-0.5.23*.dist-info"))


pytestmark = [pytest.mark.real_sglang,
              pytest.mark.skipif(rs.missing() is not None or not _is_0523(),
                                 reason=rs.missing() or "NGRAM on the CPU needs SGLang 0.5.23 (SPECMON_SGLANG_VENV)")]


def _counter(url: str, name: str) -> float:
    """Sum of a counter's series (generation_tokens_total is split by is_streaming)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^sglang:{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_ramp_acceptance_from_requests_is_sglangs_own(tmp_path, monkeypatch):
    monkeypatch.setenv("REALSG_CPU_SPEC_OPS", "1")
    out = tmp_path / "session"
    with rs.start_real(tmp_path / "sglang.log", "--sleep-on-idle", "--speculative-algorithm", "NGRAM",
                       "--decode-log-interval", "1") as server:
        k = httpx.get(server.url + "/get_server_info", timeout=10).json()["speculative_num_draft_tokens"]
        log_from = len(server.log_text().splitlines())
        verify0, gen0 = _counter(server.url, "spec_verify_calls_total"), _counter(server.url, "generation_tokens_total")
        ramp = subprocess.run([sys.executable, "-m", "specmon", "ramp", server.url, "--headless", "--no-discover",
                               "--levels", "1,2", "--requests-per-level", "4", "--input-len", "32",
                               "--output-len", "24", "--settle", "0", "--out", str(out)],
                              capture_output=True, text=True, timeout=180)
        assert ramp.returncode == 0, ramp.stdout[-2000:] + ramp.stderr[-2000:]
        verify1, gen1 = _counter(server.url, "spec_verify_calls_total"), _counter(server.url, "generation_tokens_total")
        decode = [d for d in map(lp.parse_decode, server.log_text().splitlines()[log_from:]) if d is not None]

    reqs, levels = _rows(out / "requests.csv"), _rows(out / "levels.csv")
    assert len(reqs) == 8 and {r["status"] for r in reqs} == {"ok"}
    by_level = {lv: [r for r in reqs if r["level"] == lv] for lv in ("0", "1")}
    for r in reqs:
        hist = parse_hist_text(r["spec_accept_hist"])
        assert sum(hist.values()) == int(r["spec_verify_ct"])  # one entry per verify step
        assert sum(i * n for i, n in hist.items()) == int(r["spec_accepted_drafts"])
        assert int(r["spec_proposed_drafts"]) == int(r["spec_verify_ct"]) * (k - 1)

    # The counters, over the ramp: SGLang counted the same verify steps and tokens as the requests
    # say, so its accept length over the ramp is the requests' to the last digit.
    verify = sum(int(r["spec_verify_ct"]) for r in reqs)
    tokens = sum(int(r["output_tokens"]) for r in reqs)
    assert verify1 - verify0 == verify
    assert gen1 - gen0 == tokens
    print(f"ramp: accept length {tokens / verify:.4f} from requests, "
          f"{(gen1 - gen0) / (verify1 - verify0):.4f} from SGLang's counters")

    # The Decode lines, one per step. Level 0 (C=1) runs one request at a time: its first steps are
    # the level's, one verify each, and each line's accept len is that step's accepted drafts + 1,
    # so their histogram is the level's histogram summed from its requests, exactly.
    n0 = sum(int(r["spec_verify_ct"]) for r in by_level["0"])
    first = decode[:n0]
    assert len(first) == n0 and {d.running for d in first} == {1}
    log_hist: dict[int, int] = {}
    for d in first:
        assert d.accept_length == round(d.accept_length)
        log_hist[int(d.accept_length) - 1] = log_hist.get(int(d.accept_length) - 1, 0) + 1
    req_hist: dict[int, int] = {}
    for r in by_level["0"]:
        for i, n in parse_hist_text(r["spec_accept_hist"]).items():
            req_hist[i] = req_hist.get(i, 0) + n
    assert hist_text(log_hist) == hist_text(req_hist)
    acc0 = sum(int(r["spec_accepted_drafts"]) for r in by_level["0"])
    prop0 = sum(int(r["spec_proposed_drafts"]) for r in by_level["0"])
    log_rate0 = sum(d.accept_rate for d in first) / n0  # each line's rate is rounded to 2 digits
    assert log_rate0 == pytest.approx(acc0 / prop0, abs=0.005)
    print(f"C=1: accept rate {acc0 / prop0:.4f} from requests, {log_rate0:.4f} from the Decode lines; "
          f"histogram {hist_text(req_hist)}")

    # Level 1 (C=2): a line covers the batch's step; accept len x batch is the tokens its verify
    # accepted, bonus included (accepted drafts + one per step: drafts accepted past
    # max_new_tokens count there, though the answer drops them).
    rest = decode[n0:]
    tok_log = sum(d.accept_length * d.running for d in rest)
    steps1 = sum(int(r["spec_verify_ct"]) for r in by_level["1"])
    tok1 = sum(int(r["spec_accepted_drafts"]) for r in by_level["1"]) + steps1
    assert tok_log == pytest.approx(tok1, abs=0.01 * len(rest))
    print(f"C=2: accepted tokens per verify step {tok1 / steps1:.4f} from requests "
          f"({tok1} over {steps1} steps), {tok_log:.1f} tokens from the Decode lines")

    # levels.csv: the level's in-window requests (its statistics window) summed.
    scale = json.loads((out / "session.json").read_text())["time_scale"]
    assert set(scale.values()) == {1.0}
    for lv in levels:
        t0 = float(lv["window_start"])
        t1 = t0 + float(lv["window_s"])
        mine = [r for r in by_level[lv["level"]] if t0 <= float(r["t_start"]) < t1]
        acc = sum(int(r["spec_accepted_drafts"]) for r in mine)
        prop = sum(int(r["spec_proposed_drafts"]) for r in mine)
        assert float(lv["accept_rate"]) == pytest.approx(acc / prop, rel=1e-5)
        h: dict[int, int] = {}
        for r in mine:
            for i, n in parse_hist_text(r["spec_accept_hist"]).items():
                h[i] = h.get(i, 0) + n
        assert lv["accept_hist"] == hist_text(h)
