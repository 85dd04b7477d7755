"""Record tests/data/session_gateway_fleet: a real session through the REAL SGLang Model Gateway.

    .venv/bin/python tests/snapshot_apps/record_gateway_fleet.py [OUT_DIR]

`specmon ramp GATEWAY --headless` (levels 6, 12, 24, 48, 64; 8,800 tokens in, 1,024 out; 150
simulated seconds a level) through smg (round robin) with three simulated workers at first:
w-fp8 (the fp8-mtp profile), w-dp2 (the same with two DP ranks) and w-small (a 60,000-token KV
pool). When the third level starts, four more join through the gateway's own API (POST /workers):
w-nvfp4 (nvfp4-mtp) and w-fp8-b, -c, -d (fp8-mtp). Each worker is a simulator process of its own
(several servers in one process share one core: they would fall behind their speed under load
and hold more of the closed loop's streams than their share, a harness artefact). Every
simulator runs at speed 20 with --enable-metrics and an empty local model folder; the gateway gets
HF_ENDPOINT on a closed loopback port. Workers are named by port (host:port), as attach names
them; the script prints which port is which.

The recording is then cut to its first 60 s of recorded time (events.jsonl, samples.csv, gpus.csv,
requests.csv, levels.csv: what happened after the cut is left out, and a SessionEnded closes the
event log there); session.json keeps the ramp's summary as recorded.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.gatewayproc import start_gateway  # noqa: E402
from helpers.simproc import start_sim  # noqa: E402

from specmon.model import SessionEnded  # noqa: E402
from specmon.session.codec import encode_event  # noqa: E402

KEEP_S = 60.0
SPEED = 20.0


def post(url: str, body: dict) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def trim(folder: Path, keep_s: float) -> None:
    """Cut the folder at `keep_s` recorded seconds after its first event."""
    log = folder / "events.jsonl"
    lines = log.read_text().splitlines()
    t0 = json.loads(lines[0])["ts"]
    cut = t0 + keep_s
    kept = [ln for ln in lines if json.loads(ln)["ts"] <= cut]
    if len(kept) < len(lines):
        last = json.loads(kept[-1])["ts"]
        kept.append(encode_event(SessionEnded(reason=f"recording cut at {keep_s:g} s", ts=last)))
    log.write_text("\n".join(kept) + "\n")
    finished = {json.loads(ln)["level"] for ln in kept if json.loads(ln)["type"] == "LevelFinished"}
    for name, col in (("samples.csv", "ts"), ("gpus.csv", "ts"), ("requests.csv", "t_start"),
                      ("levels.csv", None)):
        path = folder / name
        if not path.exists():
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header, rows = reader.fieldnames, list(reader)
        if col is None:
            rows = [r for r in rows if int(r["level"]) in finished]
        else:
            rows = [r for r in rows if r[col] and float(r[col]) <= cut]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    shutil.rmtree(folder / "logs", ignore_errors=True)


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests" / "data" / "session_gateway_fleet"
    if out.exists():
        shutil.rmtree(out)
    model = Path(tempfile.mkdtemp(prefix="specmon-model-"))
    common = ("--enable-metrics", "--model-path", str(model), "--served-model-name", "qwen3.8-27b")
    with ExitStack() as stack:
        first = {
            "w-fp8": stack.enter_context(start_sim(*common, "--profile", "fp8-mtp", speed=SPEED)),
            "w-dp2": stack.enter_context(start_sim(*common, "--profile", "fp8-mtp", "--dp-size", "2", speed=SPEED)),
            "w-small": stack.enter_context(start_sim(*common, "--profile", "fp8-mtp", "--max-total-tokens", "60000",
                                                     speed=SPEED)),
        }
        later = {"w-nvfp4": stack.enter_context(start_sim(*common, "--profile", "nvfp4-mtp", speed=SPEED)),
                 **{f"w-fp8-{x}": stack.enter_context(start_sim(*common, "--profile", "fp8-mtp", speed=SPEED))
                    for x in "bcd"}}
        joiners = [s.url for s in later.values()]
        for name, s in {**first, **later}.items():
            print(f"{name}: {s.url}", flush=True)
        gw = stack.enter_context(start_gateway("--worker-urls", *(s.url for s in first.values()),
                                               "--policy", "round_robin", workers=3))
        cmd = [sys.executable, "-m", "specmon", "ramp", gw.url, "--levels", "6,12,24,48,64", "--headless",
               "--interval", "1", "--level-duration", "150", "--settle", "30", "--input-len", "8800",
               "--output-len", "1024", "--seed", "42", "--gateway-metrics", gw.metrics_url, "--out", str(out)]
        proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        joined = False
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line[:2].isdigit() or line[2:3] != ":":  # not the per-tick lines (HH:MM:SS ...)
                print(line, end="", flush=True)
            if not joined and line.startswith("level 3/"):
                for url in joiners:
                    post(gw.url + "/workers", {"url": url})
                joined = True
                print(f"-- {len(joiners)} workers posted to the gateway", flush=True)
        proc.wait()
        if proc.returncode != 0:
            print(f"specmon ramp exited {proc.returncode}", file=sys.stderr)
            return 1
    trim(out, KEEP_S)
    print(f"recorded in {out}: " + ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(out.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
