"""The simulator's stream as SGLang sends it, over real HTTP on 127.0.0.1: a chunk per decode step
at --speed 1, --stream-interval and sampling_params.stream_interval, chat's role event with the
first output, and the wire log's arrival stamp (docs/field-notes.md, SGLang notes 6.1, 6.2)."""

from __future__ import annotations

import json
import socket
import threading
import time


from helpers.simproc import start_sim
from helpers.sim_stream import outputs_at, stream_generate


def test_a_chunk_per_decode_step_at_speed_1():
    """256 tokens with MTP (about 2.65 a verify pass): SGLang sends one chunk per pass, ~97 in all
    (the old simulator coalesced into 50 ms lumps: ~60 at this batch size)."""
    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", "--startup-s", "0.3", speed=1) as sim:
        objs = stream_generate(sim.url, 256)
    final = objs[-1]["meta_info"]
    steps = final["spec_verify_ct"]
    assert final["completion_tokens"] == 256
    assert outputs_at(objs)[0] == 1                      # the prefill's token alone
    # one chunk for the first token + one per verify pass
    assert len(objs) == steps + 1, (len(objs), steps)
    assert 256 / 3.2 < len(objs) < 256 / 2.2             # close to 256 / accept_len
    gains = [b - a for a, b in zip(outputs_at(objs), outputs_at(objs)[1:])]
    assert all(1 <= g <= 4 for g in gains)               # MTP: at most num_draft_tokens per pass


def test_a_chunk_per_token_without_speculation():
    with start_sim("--profile", "nvfp4-nospec", "--startup-s", "0.3", speed=1) as sim:
        objs = stream_generate(sim.url, 64)
    assert outputs_at(objs) == list(range(1, 65))


def test_stream_interval_rejects_zero():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "specmon", "sim", "--stream-interval", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--stream-interval" in r.stderr and "Traceback" not in r.stderr


def test_high_speed_coalesces_at_most_speed_steps_per_chunk():
    """The documented rule: at --speed S a chunk holds up to floor(S) decode steps."""
    with start_sim("--enable-metrics", "--profile", "nvfp4-nospec", "--startup-s", "0.3", speed=10) as sim:
        objs = stream_generate(sim.url, 201)
    counts = outputs_at(objs)
    assert counts[0] == 1 and counts[-1] == 201
    gains = [b - a for a, b in zip(counts, counts[1:])]
    assert max(gains) <= 10
    assert gains[:-1] == [10] * (len(gains) - 1), gains  # one token a pass, 10 passes a chunk


def chat_events(url: str, stream_options=None) -> tuple[list[tuple[float, dict]], float]:
    """(arrival time, event) per SSE event of a streamed chat completion, read off a raw socket
    so the time is when the bytes came, and the time the request was written."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"messages": [{"role": "user", "content": "x " * 3000}], "max_tokens": 8,
                       "stream": True, **({"stream_options": stream_options} if stream_options else {})}).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    t_sent = time.time()
    buf, out = b"", []
    while True:
        data = s.recv(65536)
        if not data:
            break
        now = time.time()
        buf += data
        while b"\n\n" in buf:
            i = buf.index(b"\n\n")
            ev, buf = buf[:i], buf[i + 2:]
            j = ev.find(b"data: ")
            if j >= 0 and ev[j + 6:j + 7] == b"{":
                out.append((now, json.loads(ev[j + 6:])))
    s.close()
    return out, t_sent


def test_chat_role_event_comes_with_the_first_output():
    """SGLang sends delta {role: assistant, content: ""} when the first output is ready, right
    before its content: a client's first byte is the first token's, not the admission's. A
    3000-word prompt on the FP8 profile takes a prefill pass of tens of ms at speed 1."""
    with start_sim("--profile", "fp8-mtp", "--startup-s", "0.3", speed=1) as sim:
        events, t_sent = chat_events(sim.url)
    deltas = [e["choices"][0]["delta"] for _, e in events if e["choices"]]
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] == ""
    assert deltas[1]["role"] is None and deltas[1]["content"]   # the first token's text
    assert all(d["role"] is None for d in deltas[1:])
    t_role, t_first_content = events[0][0], events[1][0]
    assert t_first_content - t_role < 0.005                      # together, one write
    prefill = t_first_content - t_sent
    assert prefill > 0.02, prefill                               # a real prefill before the first token
    assert t_role - t_sent > 0.9 * prefill                       # the role did not come at admission
    assert events[-1][1]["choices"][0]["finish_reason"] == "length"


def test_wire_log_arrival_precedes_the_apps_handling_under_a_burst(tmp_path):
    """A burst of requests at once: the event loop reads all their bytes, then runs the app for
    each in turn, so the later ones wait there. t_arrival (the loop read the bytes) must be the
    earlier stamp, and show that wait; t_in (the app started) is what the wire log had before."""
    wl = tmp_path / "wire.jsonl"
    n = 60
    with start_sim("--profile", "nvfp4-mtp", "--startup-s", "0.3", "--wire-log", str(wl), speed=1) as sim:
        host, port = "127.0.0.1", sim.port
        body = json.dumps({"input_ids": list(range(1, 4001)), "stream": True,
                           "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}).encode()
        req = (b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\n"
               b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        socks = [socket.create_connection((host, port)) for _ in range(n)]
        time.sleep(0.3)                      # every connection accepted and idle
        t0 = time.time()
        for s in socks:
            s.sendall(req)
        sent = time.time()

        def drain(s):
            while s.recv(65536):
                pass
            s.close()

        ts = [threading.Thread(target=drain, args=(s,)) for s in socks]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
    rows = [json.loads(l) for l in wl.read_text().splitlines()]
    rows = [w for w in rows if w["t_in"] >= t0 - 0.001]
    assert len(rows) == n and all(w["status"] == 200 for w in rows)
    for w in rows:
        assert t0 - 0.001 <= w["t_arrival"] <= w["t_in"] < w["t_first_body"]
    assert all(w["t_arrival"] <= sent + 0.5 for w in rows)
    waits = sorted(w["t_in"] - w["t_arrival"] for w in rows)
    # the last requests the app took up waited behind the others' JSON parsing and prefills
    assert waits[-1] > 0.01, waits
    assert waits[-1] - waits[0] > 0.005, waits
