"""Record what specmon reads from one real SGLang release into a fixture folder.

Re-record (each takes about a minute; the venvs come from ../shared/real-sglang/setup.sh):

    .venv/bin/python tests/data/sglang-versions/record.py ~/.cache/specmon/sglvenv-0.5.23 tests/data/sglang-versions/0.5.23
    .venv/bin/python tests/data/sglang-versions/record.py ~/.cache/specmon/sglvenv-0.5.10 tests/data/sglang-versions/0.5.10

It starts the server with ../shared/real-sglang/serve.sh (CPU engine, tiny random-weight model,
--sleep-on-idle) on a free loopback port and writes, unedited:

  model_info.json, server_info.json   GET /model_info, /server_info once ready
  metrics_idle.prom, v1_loads_idle.json  GET /metrics, /v1/loads before any request
  generate.json                       one non-streamed POST /generate (meta_info included)
  metrics.prom, v1_loads.json         GET /metrics, /v1/loads while STREAMS streamed requests run
                                      (so running/queued/KV gauges and histograms are non-zero)
  generate_stream.txt                 the raw SSE body of one streamed POST /generate
  startup.log                         the server's log from launch through ready and the load's
                                      Prefill/Decode batch lines
  version.txt                         sglang.__version__ of the venv

The load is sized to the default 8,192-token KV pool so some requests queue: STREAMS requests of
PROMPT_WORDS prompt words and MAX_NEW output tokens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

STREAMS = 12
PROMPT_WORDS = 900
MAX_NEW = 200
REAL_DIR = Path(os.environ.get("SPECMON_REAL_SGLANG_DIR") or Path(__file__).resolve().parents[4] / "shared" / "real-sglang")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def post(url: str, body: dict, timeout: float = 300) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def prompt(seed: int, words: int) -> str:
    # the tiny model's tokenizer: whitespace words t0..t4095; a per-request seed avoids prefix-cache hits
    return " ".join(f"t{(seed * 7919 + i * 31) % 4096}" for i in range(words))


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: record.py VENV OUT_DIR", file=sys.stderr)
        return 2
    venv, out = Path(sys.argv[1]).expanduser(), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sglang; print(sglang.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (out / "version.txt").write_text(version + "\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = out / "startup.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(["bash", str(REAL_DIR / "serve.sh"), str(venv), str(port), "--sleep-on-idle"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited {proc.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"server not ready in 300 s; see {log_path}")
            try:
                if get(base + "/health") is not None:
                    break
            except OSError:
                time.sleep(0.5)
        (out / "model_info.json").write_bytes(get(base + "/model_info"))
        (out / "server_info.json").write_bytes(get(base + "/server_info"))
        (out / "metrics_idle.prom").write_bytes(get(base + "/metrics"))
        (out / "v1_loads_idle.json").write_bytes(get(base + "/v1/loads"))
        (out / "generate.json").write_bytes(post(base + "/generate", {
            "text": prompt(1, 64), "sampling_params": {"max_new_tokens": 32, "temperature": 0}}))

        def one(i: int) -> None:
            post(base + "/generate", {"text": prompt(100 + i, PROMPT_WORDS), "stream": True,
                                      "sampling_params": {"max_new_tokens": MAX_NEW, "ignore_eos": True}})

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(STREAMS)]
        for t in threads:
            t.start()
        # wait until some requests decode while others queue (the pool holds about 7 of them)
        busy_deadline = time.monotonic() + 120
        page = b""
        while time.monotonic() < busy_deadline:
            time.sleep(1.0)
            page = get(base + "/metrics")
            running = [ln for ln in page.decode().splitlines() if ln.startswith("sglang:num_running_reqs")]
            queued = [ln for ln in page.decode().splitlines() if ln.startswith("sglang:num_queue_reqs")]
            ttft = [ln for ln in page.decode().splitlines() if ln.startswith("sglang:time_to_first_token_seconds_count")]
            if (running and float(running[0].split()[-1]) > 0 and queued and float(queued[0].split()[-1]) > 0
                    and ttft and sum(float(x.split()[-1]) for x in ttft) > 1):
                break
        (out / "metrics.prom").write_bytes(page)
        (out / "v1_loads.json").write_bytes(get(base + "/v1/loads"))
        for t in threads:
            t.join(600)
        with urllib.request.urlopen(urllib.request.Request(
                base + "/generate", data=json.dumps({"text": prompt(2, 32), "stream": True,
                                                     "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode(),
                headers={"Content-Type": "application/json"}), timeout=60) as r:
            (out / "generate_stream.txt").write_bytes(r.read())
        time.sleep(1.0)  # the last batch lines reach the log
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
    # keep the log through the load, not SGLang's shutdown chatter after SIGTERM
    text = log_path.read_text(errors="replace")
    last = max(text.rfind("Decode batch"), text.rfind("Prefill batch"))
    if last >= 0:
        end = text.find("\n", last)
        log_path.write_text(text[: end + 1 if end >= 0 else len(text)])
    print(f"recorded SGLang {version} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
