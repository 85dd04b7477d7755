"""SGLang's per-request speculative counts: read by the load client from a real sim's streams
(native /generate, C reader and Python reader alike) and from its OpenAI answers, and summed per
level into levels.csv's accept_rate / accept_hist."""

import json
import os
import subprocess
import sys

import httpx
import pytest

from helpers.simproc import start_sim
from specmon.sources.spec_counts import hist_text, openai_spec_details, parse_hist_text, spec_counts
from helpers.ramps import run_ramp

# Sends 3 requests one after another and prints each request's requests.csv counts: the sim's
# --seed makes the n-th request's acceptance the same in every run.
_CLIENT = r"""
import asyncio, json, sys, time
from specmon.load import native
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.workload import Workload

async def main(url):
    c = GenerateClient(url, max_concurrency=1)
    w = Workload(input_len=64, seed=5)
    rows = []
    for i in range(3):
        o = RequestOutcome(request_id=f"r{i}", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
        o = await c.generate(w.prompt(i), 48, o)
        r = o.record("a", 0, 1, 1.0, True)
        rows.append({"status": o.status, "meta": o.final_meta, "verify": r.spec_verify_ct,
                     "acc": r.spec_accepted_drafts, "prop": r.spec_proposed_drafts, "hist": r.spec_accept_hist})
    await c.aclose()
    return rows

print(json.dumps({"native": native.fastread is not None, "rows": asyncio.run(main(sys.argv[1]))}))
"""


def _run_client(native: str) -> dict:
    with start_sim("--profile", "fp8-mtp", "--seed", "11", speed=50) as sim:
        got = subprocess.run([sys.executable, "-c", _CLIENT, sim.url], capture_output=True, text=True,
                             env=dict(os.environ, SPECMON_NATIVE=native), timeout=120)
        info = httpx.get(sim.url + "/get_server_info", timeout=10).json()
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout)
    out["k"] = info["speculative_num_draft_tokens"]
    return out


def test_native_stream_counts_are_sglangs_own_with_and_without_the_c_reader():
    c_path, py_path = _run_client("1"), _run_client("0")
    assert py_path["native"] is False
    for row in c_path["rows"]:
        assert row["status"] == "ok"
        hist = parse_hist_text(row["hist"])
        # The row holds exactly what the final meta_info said, under whichever names it used.
        sc = spec_counts(row["meta"])
        assert (row["acc"], row["prop"]) == (sc.accepted, sc.proposed)
        assert hist == {k: n for k, n in enumerate(sc.hist) if n}
        # ... and those agree with each other as SGLang defines them: one histogram entry per verify
        # step, k accepted drafts each, proposed = steps x (draft tokens - 1).
        assert sum(hist.values()) == row["verify"] > 0
        assert sum(k * n for k, n in hist.items()) == row["acc"]
        assert row["prop"] == row["verify"] * (c_path["k"] - 1)
        assert 0 < row["acc"] < row["prop"]
    strip = [{k: v for k, v in r.items() if k != "meta"} for r in c_path["rows"]]
    assert strip == [{k: v for k, v in r.items() if k != "meta"} for r in py_path["rows"]]


def test_openai_answers_carry_the_counts_when_asked():
    with start_sim("--profile", "fp8-mtp", "--seed", "4", speed=50) as sim:
        k = httpx.get(sim.url + "/get_server_info", timeout=10).json()["speculative_num_draft_tokens"]
        body = {"model": "m", "prompt": "hello there", "max_tokens": 40, "ignore_eos": True}
        plain = httpx.post(sim.url + "/v1/completions", json=body, timeout=30).json()
        assert "sglext" not in plain and openai_spec_details(plain) is None  # not asked: not sent
        whole = httpx.post(sim.url + "/v1/completions", json={**body, "return_spec_tokens_details": True},
                           timeout=30).json()
        events = []
        with httpx.stream("POST", sim.url + "/v1/completions", timeout=30,
                          json={**body, "stream": True, "return_spec_tokens_details": True,
                                "stream_options": {"include_usage": True}}) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
    for d in (openai_spec_details(whole), openai_spec_details(events[-2])):
        sc = spec_counts(d)
        assert sum(sc.hist) == d["spec_verify_ct"] > 0
        assert sum(i * n for i, n in enumerate(sc.hist)) == sc.accepted
        assert sc.proposed == d["spec_verify_ct"] * (k - 1)
        assert abs(d["spec_accept_rate"] - sc.accepted / sc.proposed) < 1e-9
        assert abs(d["spec_accept_length"] - 40 / d["spec_verify_ct"]) < 1e-9
    # The stream: text chunks, then the response-level sglext event, then usage.
    assert events[-2]["choices"] == [] and "usage" in events[-1] and events[-1]["usage"]["completion_tokens"] == 40
    assert all("sglext" not in e for e in events[:-2])


def test_levels_sum_the_recorded_requests_counts(tmp_path):
    """levels.csv accept_rate / accept_hist are the sums of the level's in-window ok rows of
    requests.csv, worked out here from those rows alone."""
    from helpers.records import rows
    from specmon.model import RampPlan

    plan = RampPlan(levels=[1, 3], input_len=128, output_len=40, level_duration_s=None, requests_per_level=6,
                    settle_s=0.0)
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        _, _, reason = run_ramp(sim.url, plan, tmp_path)
    assert reason == "ramp done"
    reqs, levels = rows(tmp_path / "requests.csv"), rows(tmp_path / "levels.csv")
    assert len(levels) == 2
    scale = json.loads((tmp_path / "session.json").read_text())["time_scale"]["sim"]
    for lv in levels:
        # The level's statistics window: after its settle, up to when it stopped sending (the
        # request sent last, as the level ended, is outside it).
        t0 = float(lv["window_start"])
        t1 = t0 + float(lv["window_s"]) / scale
        mine = [r for r in reqs if r["level"] == lv["level"] and r["status"] == "ok" and t0 <= float(r["t_start"]) < t1]
        assert mine and all(r["spec_accepted_drafts"] and r["spec_proposed_drafts"] for r in mine)
        acc = sum(int(r["spec_accepted_drafts"]) for r in mine)
        prop = sum(int(r["spec_proposed_drafts"]) for r in mine)
        hist: dict[int, int] = {}
        for r in mine:
            for k, n in parse_hist_text(r["spec_accept_hist"]).items():
                hist[k] = hist.get(k, 0) + n
        assert float(lv["accept_rate"]) == pytest.approx(acc / prop, rel=1e-5)  # the CSV keeps 6 digits
        assert lv["accept_hist"] == hist_text(hist)
        # one histogram entry per verify step: the level's steps, and its accept length from them
        steps = sum(hist.values())
        assert steps == sum(int(r["spec_verify_ct"]) for r in mine)
        out = sum(int(r["output_tokens"]) for r in mine)
        assert float(lv["accept_length"]) == pytest.approx(out / steps, rel=1e-5)


def test_hist_text_by_hand():
    h: dict[int, int] = {}
    for req in ([1, 0, 2], [0, 3], None, [0, 0, 0, 4]):
        from specmon.sources.spec_counts import merge_hist
        merge_hist(h, tuple(req) if req else None)
    assert hist_text(h) == "0:1;1:3;2:2;3:4"
    assert parse_hist_text("0:1;1:3;2:2;3:4") == h
    assert hist_text({}) is None
    # 0.5.10's names read the same as 0.5.23's; a bool or a negative count is no count
    assert spec_counts({"spec_accept_token_num": 6, "spec_draft_token_num": 9, "spec_accept_histogram": [0, 0, 3]}) \
        == spec_counts({"spec_num_correct_drafts": 6, "spec_num_proposed_drafts": 9,
                        "spec_correct_drafts_histogram": [0, 0, 3]})
    assert spec_counts({"spec_num_correct_drafts": True, "spec_num_proposed_drafts": -1}).accepted is None
