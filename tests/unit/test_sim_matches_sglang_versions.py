"""The simulator speaks each SGLang release it claims, judged by what the real servers sent.

tests/data/sglang-versions/<version>/ holds what a real SGLang (0.5.23, 0.5.10.post1) answered
(see record.py there). One simulator per release (`specmon sim --sglang-version V`) gets a
similar load: a non-streamed request, streamed ones, a queue; then its names and shapes are
diffed against the recording, values aside:

- /metrics: every family the real server had, with its type and label names;
- /server_info: the key set at the top, of internal_states[0] and its memory_usage;
- /v1/loads: the key structure (nested dicts, the first entry of lists);
- /generate: the meta_info keys of a non-streamed answer;
- the log: the field names of the lines specmon reads, parsed by specmon's log parser.

A real name the simulator lacks fails the test unless it is listed below with the reason; so does
a name the simulator serves that the release does not have (unless listed, with why).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.sources import logparse
from helpers.simproc import start_sim

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang-versions"
# --sglang-version spelling -> recording folder
VERSIONS = {"0.5.23": "0.5.23", "0.5.10.post1": "0.5.10"}

# Families a real server exports only once something happened that the recorded load did not
# cause (the simulator serves them when it happens, under SGLang's names).
CONDITIONAL_FAMILIES = {
    "sglang:cached_tokens": "exists from the first prefix-cache hit (the recordings had none)",
    "sglang:inter_token_latency_seconds": "exists once a stream got a second chunk (0.5.10's scrape had none yet)",
    "sglang:num_retracted_requests": "from the first retraction",
    "sglang:num_retracted_input_tokens": "from the first retraction",
    "sglang:num_retracted_output_tokens": "from the first retraction",
    "sglang:evicted_tokens": "from the first prefix-cache eviction",
    "sglang:eviction_duration_seconds": "from the first prefix-cache eviction",
    "sglang:num_aborted_requests": "from the first abort",
}

# /server_info keys the simulator adds (its own markers, not SGLang's).
SIM_SERVER_INFO_EXTRA = {"sim_speed", "sim_profile"}
# Real keys the simulator lacks, with why. Empty: it has them all.
SIM_SERVER_INFO_LACKS: dict[str, str] = {}
# internal_states[0]: 0.5.10's avg_spec_accept_length appears with speculative decoding only.
SIM_INTERNAL_EXTRA = {"avg_spec_accept_length"}


def families(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, label names), from a Prometheus text page (bucket bounds left out)."""
    out = {}
    for f in text_string_to_metric_families(text):
        labels: set[str] = set()
        for s in f.samples:
            labels |= set(s.labels)
        if f.type == "histogram":
            labels.discard("le")
        out[f.name] = (f.type, tuple(sorted(labels)))
    return out


def key_paths(obj, prefix: str = "") -> set[str]:
    """Every key path of a JSON value: dicts by key, lists by their first element as []."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            out |= key_paths(v, p)
    elif isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        out |= key_paths(obj[0], prefix + "[]")
    return out


_FIELD = re.compile(r"(#?[a-z][\w\-() /]*?)(?::|=)\s*[\w{.\-]")


def fields(line: str, marker: str) -> list[str]:
    """The field names after `marker` in a log line ("#new-seq", "token usage", ...), with the
    device word of "cuda graph"/"cpu graph" and "available_*_mem" made neutral."""
    body = line.split(marker, 1)[1]
    body = re.sub(r"\b(?:cuda|cpu|npu) graph", "graph", body)
    body = re.sub(r"available_(?:gpu|cpu)_mem", "available_mem", body)
    return [k.strip() for k in _FIELD.findall(body)]


LOG_LINES = ["Prefill batch", "Decode batch", "KV Cache is allocated.", "Load weight begin.", "Load weight end.",
             "max_total_num_tokens=", "Engine startup timings (s):", "Init parallel begin.", "Init parallel ends.",
             "Init torch distributed begin.", "Init torch distributed ends."]


def first_line(text: str, marker: str):
    for line in text.splitlines():
        if marker in line and line.startswith("["):
            return line
    return None


def _generate(url: str, n_words: int, max_new: int, stream: bool) -> dict | str:
    body = {"text": " ".join(f"w{i % 97}" for i in range(n_words)), "stream": stream,
            "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True, "temperature": 0}}
    with httpx.Client(timeout=60) as c:
        if stream:
            with c.stream("POST", url + "/generate", json=body) as r:
                return "".join(r.iter_text())
        return c.post(url + "/generate", json=body).json()


@pytest.fixture(scope="module", params=list(VERSIONS))
def observed(request):
    version = request.param
    real = DATA / VERSIONS[version]
    # A pool of 8,192 tokens as the recordings had, so requests of 1,000 tokens queue as there.
    with start_sim("--sglang-version", version, "--enable-metrics", "--profile", "fp8-nospec",
                   "--max-total-tokens", "8192", "--decode-log-interval", "10", speed=16) as sim:
        got = {"generate": _generate(sim.url, 80, 32, False), "stream": _generate(sim.url, 80, 32, True)}
        threads = [threading.Thread(target=_generate, args=(sim.url, 1000, 300, True)) for _ in range(10)]
        for t in threads:
            t.start()
        with httpx.Client(timeout=30) as c:
            # While the streams run: the queue and the pool are busy, as in the recordings.
            deadline = time.monotonic() + 30

            def load_over() -> bool:
                return time.monotonic() > deadline or not any(t.is_alive() for t in threads)

            while True:
                loads = c.get(sim.url + "/v1/loads").json()
                if loads["loads"][0]["num_waiting_reqs"] > 0 or load_over():
                    break
                time.sleep(0.05)
            got["v1_loads"] = loads
            # The pool gauges move at the scheduler's reports (as SGLang's): wait for one with
            # the batch in the pool.
            while True:
                got["metrics_busy"] = c.get(sim.url + "/metrics").text
                if load_over() or re.search(r"^sglang:num_used_tokens\{[^}]*\} [1-9]",
                                                            got["metrics_busy"], re.M):
                    break
                time.sleep(0.05)
            for t in threads:
                t.join(60)
            got["metrics"] = c.get(sim.url + "/metrics").text
            if VERSIONS[version] == "0.5.23":
                # Idle after the load: the next report shows the finished prompts in the cache.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    got["metrics_idle"] = c.get(sim.url + "/metrics").text
                    if re.search(r"^sglang:kv_evictable_tokens\{[^}]*\} [1-9]", got["metrics_idle"], re.M) and \
                            re.search(r"^sglang:kv_used_tokens\{[^}]*\} 0\.0$", got["metrics_idle"], re.M):
                        break
                    time.sleep(0.1)
            got["server_info"] = c.get(sim.url + "/server_info").json()
            got["model_info"] = c.get(sim.url + "/model_info").json()
            got["get_load_status"] = c.get(sim.url + "/get_load").status_code
        got["log"] = sim.log_text()
    yield version, real, got


def test_metric_families_match(observed):
    version, real, got = observed
    want = families((real / "metrics.prom").read_text())
    have = families(got["metrics"])
    lacking = sorted(set(want) - set(have))
    assert not lacking, f"{version}: the simulator lacks real families {lacking}"
    extra = sorted(n for n in set(have) - set(want) if n not in CONDITIONAL_FAMILIES)
    assert not extra, f"{version}: the simulator serves families the release does not have: {extra}"
    wrong = {n: (have[n], want[n]) for n in want if have[n] != want[n]}
    assert not wrong, f"{version}: type or label names differ (sim, real): {wrong}"
    # The other release's own names are absent (the two sets really differ, both ways).
    other = families((DATA / [v for v in VERSIONS.values() if v != VERSIONS[version]][0] / "metrics.prom").read_text())
    only_other = set(other) - set(want) - set(CONDITIONAL_FAMILIES)
    assert only_other and not (only_other & set(have))


def test_pool_series_come_from_the_pool(observed):
    """0.5.23's KV gauges are the scheduler's pool: used + available + evictable = the pool."""
    version, _, got = observed
    if VERSIONS[version] != "0.5.23":
        pytest.skip("0.5.10 has no kv_*_tokens series")
    def values(text):
        return {s.name + (f"[{s.labels['mode']}]" if "mode" in s.labels else ""): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    busy, idle = values(got["metrics_busy"]), values(got["metrics_idle"])
    for vals in (busy, idle):
        assert vals["sglang:kv_used_tokens"] == vals["sglang:num_used_tokens"]
        assert vals["sglang:kv_used_tokens"] + vals["sglang:kv_available_tokens"] + vals["sglang:kv_evictable_tokens"] \
            == pytest.approx(8192, abs=1)
        assert vals["sglang:num_pages"] == 8192 and vals["sglang:page_size"] == 1
    # After the load nothing runs and the finished requests' tokens are the cache's, evictable.
    assert idle["sglang:kv_used_tokens"] == 0 and idle["sglang:kv_evictable_tokens"] > 1000
    assert idle["sglang:scheduler_idle_seconds_total"] > 0
    prompts = sum(s.value for f in text_string_to_metric_families(got["metrics_idle"]) for s in f.samples
                  if s.name == "sglang:prompt_tokens_total")
    # Every request's prompt once (the warm-up's too, which the request counters leave out).
    assert prompts > 5000 and prompts <= idle["sglang:prefill_effective_tokens_total[input]"] <= prompts + 64
    assert idle["sglang:prefill_effective_tokens_total[device_hit]"] > 0  # they share a prefix


def test_server_info_keys_match(observed):
    version, real, got = observed
    want = json.loads((real / "server_info.json").read_text())
    have = got["server_info"]
    lacking = set(want) - set(have) - set(SIM_SERVER_INFO_LACKS)
    assert not lacking, f"{version}: /server_info lacks {sorted(lacking)}"
    extra = set(have) - set(want) - SIM_SERVER_INFO_EXTRA
    assert not extra, f"{version}: /server_info has keys the release does not: {sorted(extra)}"
    wi, hi = want["internal_states"][0], have["internal_states"][0]
    assert set(wi) - set(hi) == set(), f"{version}: internal_states[0] lacks {sorted(set(wi) - set(hi))}"
    assert set(hi) - set(wi) - SIM_INTERNAL_EXTRA == set(), \
        f"{version}: internal_states[0] extra {sorted(set(hi) - set(wi))}"
    assert key_paths(hi["memory_usage"]) == key_paths(wi["memory_usage"])
    assert have["version"] == want["version"]


def test_v1_loads_and_model_info_shapes_match(observed):
    version, real, got = observed
    want = key_paths(json.loads((real / "v1_loads.json").read_text()))
    have = key_paths(got["v1_loads"])
    assert want - have == set(), f"{version}: /v1/loads lacks {sorted(want - have)}"
    assert have - want == set(), f"{version}: /v1/loads has {sorted(have - want)}"
    mi_want = set(json.loads((real / "model_info.json").read_text()))
    assert set(got["model_info"]) == mi_want
    # /get_load: gone (404) in 0.5.23, served by 0.5.10.
    assert (got["get_load_status"] == 404) == (VERSIONS[version] == "0.5.23")


def test_generate_meta_info_keys_match(observed):
    version, real, got = observed
    want = set(json.loads((real / "generate.json").read_text())["meta_info"])
    have = set(got["generate"]["meta_info"])
    assert want - have == set(), f"{version}: meta_info lacks {sorted(want - have)}"
    assert have - want == set(), f"{version}: meta_info has {sorted(have - want)}"


def stream_metas(text: str) -> list[dict]:
    return [json.loads(part[6:])["meta_info"] for part in text.split("\n\n")
            if part.startswith("data: ") and part[6:].strip() != "[DONE]"]


def test_stream_meta_info_keys_match(observed):
    """First, middle and last chunk of a streamed /generate carry the release's keys."""
    version, real, got = observed
    want, have = stream_metas((real / "generate_stream.txt").read_text()), stream_metas(got["stream"])
    assert len(want) >= 3 and len(have) >= 3
    for name, w, h in (("first", want[0], have[0]), ("middle", want[len(want) // 2], have[len(have) // 2]),
                       ("last", want[-1], have[-1])):
        assert set(h) == set(w), f"{version} {name} chunk: sim lacks {sorted(set(w) - set(h))}, " \
                                 f"has extra {sorted(set(h) - set(w))}"


def test_log_line_shapes_match(observed):
    version, real, got = observed
    want_log, have_log = (real / "startup.log").read_text(errors="replace"), got["log"]
    for marker in LOG_LINES:
        w, h = first_line(want_log, marker), first_line(have_log, marker)
        assert (w is None) == (h is None), f"{version}: {marker!r} in the real log: {w is not None}, sim: {h is not None}"
        if w is not None:
            assert fields(h, marker) == fields(w, marker), f"{version}: {marker!r}\n real: {w}\n sim:  {h}"
            pw, ph = logparse.parse_phase(w), logparse.parse_phase(h)
            assert (pw and pw[0]) == (ph and ph[0]), f"{version}: {marker!r} phase real {pw}, sim {ph}"
    # specmon's parser reads the simulator's batch lines as it reads the real ones.
    for marker, parse in (("Prefill batch", logparse.parse_prefill), ("Decode batch", logparse.parse_decode)):
        w, h = first_line(want_log, marker), first_line(have_log, marker)
        assert parse(w) is not None and parse(h) is not None, marker
    w, h = first_line(want_log, "KV Cache is allocated."), first_line(have_log, "KV Cache is allocated.")
    if logparse.kv_pool_tokens(w) is not None:  # the reader knows this release's line
        assert logparse.kv_pool_tokens(h) == 8192
    # server_args: a dict in 0.5.23, ServerArgs(...) in 0.5.10.
    form = "server_args={" if VERSIONS[version] == "0.5.23" else "server_args=ServerArgs("
    assert form in want_log and form in have_log
    assert ("'sglang serve' is the recommended" in want_log) == ("'sglang serve' is the recommended" in have_log)
    assert logparse.READY_TEXT in have_log


def test_unknown_version_is_one_line_exit_2():
    p = subprocess.run([sys.executable, "-m", "specmon", "sim", "--sglang-version", "0.4.9"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sglang-version" in lines[0] and "0.5.23" in lines[0], p.stderr
