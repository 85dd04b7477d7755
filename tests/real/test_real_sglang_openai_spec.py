"""The OpenAI endpoints' per-request speculative counts (`return_spec_tokens_details`, 0.5.23's
protocol.py, answered in `sglext.spec_tokens_details`) against a real SGLang 0.5.23 running NGRAM
on this CPU (REALSG_CPU_SPEC_OPS=1), read by specmon's parser and checked against SGLang's own
counters over each request; then the simulator asked the same way must answer in the same place
with the same fields. The ramp itself sends native /generate (its meta_info carries the counts
without asking): these are the figures an OpenAI-endpoint client of SGLang gets."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from helpers import realsglang as rs
from helpers.simproc import start_sim
from specmon.sources.spec_counts import openai_spec_details, spec_counts


def _is_0523() -> bool:
    return any(rs.SGLANG_VENV.glob("lib/python*/site-packages/sglang-0.5.23*.dist-info"))


pytestmark = [pytest.mark.real_sglang,
              pytest.mark.skipif(rs.missing() is not None or not _is_0523(),
                                 reason=rs.missing() or "NGRAM on the CPU needs SGLang 0.5.23 (SPECMON_SGLANG_VENV)")]

# the tiny model's words are t0 ... t4095; a repeating prompt gives NGRAM matches to draft from
PROMPT = " ".join(f"t{5 + i % 7}" for i in range(40))


def _verify_calls(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(r"^sglang:spec_verify_calls_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def _body(chat: bool, stream: bool, ask: bool) -> dict:
    b: dict = {"model": "m", "max_tokens": 24, "temperature": 0, "stream": stream}
    if chat:
        b["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        b["prompt"] = PROMPT
    if ask:
        b["return_spec_tokens_details"] = True
    return b


def _ask(url: str, chat: bool, stream: bool, ask: bool = True) -> tuple[dict | None, dict]:
    """(the spec_tokens_details specmon reads, the shape of where they came: the carrying
    object's keys, whether its choices were empty, its place counted from the stream's end)."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = httpx.post(url + path, json=_body(chat, stream, ask), timeout=120)
    assert r.status_code == 200, r.text[:500]
    if not stream:
        body = r.json()
        return openai_spec_details(body), {"keys": sorted(body), "place": 0}
    events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: ") and x != "data: [DONE]"]
    carrying = [(i, e) for i, e in enumerate(events) if openai_spec_details(e) is not None]
    if not carrying:
        return None, {}
    assert len(carrying) == 1, [e for _, e in carrying]
    i, e = carrying[0]
    return openai_spec_details(e), {"keys": sorted(e), "empty_choices": e.get("choices") == [],
                                    "place": len(events) - i}


CASES = [(False, False), (False, True), (True, False), (True, True)]  # (chat, stream)


def test_openai_spec_details_from_a_real_ngram_server_and_the_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv("REALSG_CPU_SPEC_OPS", "1")
    real: dict = {}
    with rs.start_real(tmp_path / "sglang.log", "--speculative-algorithm", "NGRAM") as server:
        k = httpx.get(server.url + "/get_server_info", timeout=10).json()["speculative_num_draft_tokens"]
        for chat, stream in CASES:
            v0 = _verify_calls(server.url)
            details, shape = _ask(server.url, chat, stream)
            steps = _verify_calls(server.url) - v0
            assert details is not None, (chat, stream)
            c = spec_counts(details)
            hist = c.hist or ()
            # SGLang's counter saw exactly the verify steps the response reports
            assert details["spec_verify_ct"] == steps > 0
            assert sum(hist) == steps and sum(i * n for i, n in enumerate(hist)) == c.accepted
            assert c.proposed == steps * (k - 1) and 0 <= c.accepted <= c.proposed
            real[(chat, stream)] = (sorted(details), shape)
        # not asked, not answered: the field is what switches the details on
        assert _ask(server.url, False, False, ask=False)[0] is None
        assert _ask(server.url, True, True, ask=False)[0] is None
    print({f"chat={c} stream={s}": v[1] for (c, s), v in real.items()})

    with start_sim("--profile", "nvfp4-mtp", log_dir=tmp_path) as sim:
        for chat, stream in CASES:
            details, shape = _ask(sim.url, chat, stream)
            assert details is not None, (chat, stream)
            c = spec_counts(details)
            assert c.accepted is not None and c.proposed and c.hist and sum(c.hist) == details["spec_verify_ct"]
            assert (sorted(details), shape) == real[(chat, stream)], (chat, stream)
        assert _ask(sim.url, False, False, ask=False)[0] is None
