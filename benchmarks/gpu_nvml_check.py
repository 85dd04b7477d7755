"""Check specmon's NVML readings against nvidia-smi on a real NVIDIA host.

Run on the GPU host (it needs torch there to hold known allocations):

    python benchmarks/gpu_nvml_check.py --out DIR [--alloc-gib 10,40] [--gpus 0,1]

For each phase (nothing held, then each allocation size) a holder process per GPU allocates a
known amount (GPU i holds size / (i + 1) GiB, so the rows differ), then nvidia-smi is queried,
specmon's NvmlReader reads, and nvidia-smi is queried again; specmon's figure is compared with
the mean of the two nvidia-smi figures that bracket it. Memory must agree within 1%.

Writes DIR/nvml-fixture.json: specmon's fixture format (readings, loadable by
specmon.sources.nvml.load_fixture) plus, per phase, the raw nvidia-smi CSV, the comparison and
what the driver refused. Prints one line per GPU per phase and exits 1 if memory disagrees.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specmon.sources.nvml import FIXTURE_FORMAT, NvmlReader, snapshot_to_dict  # noqa: E402

MIB = 1024 * 1024
GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu"
HOLDER = r"""
import sys, time, torch
i, n = int(sys.argv[1]), int(sys.argv[2])
x = torch.empty(n, dtype=torch.uint8, device=f"cuda:{i}")
x.fill_(1)
torch.cuda.synchronize(i)
print("ready", flush=True)
sys.stdin.read()
"""


def smi_gpus() -> tuple[str, dict[int, dict]]:
    raw = subprocess.run(["nvidia-smi", f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in raw.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        rows[int(f[0])] = {"uuid": f[1], "name": f[2], "mem_used_mib": _num(f[3]), "mem_total_mib": _num(f[4]),
                           "util_pct": _num(f[5]), "power_w": _num(f[6]), "temp_c": _num(f[7])}
    return raw, rows


def smi_apps() -> tuple[str, list[dict]]:
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    apps = []
    for line in p.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 3:
            apps.append({"pid": int(f[0]), "gpu_uuid": f[1], "used_mib": _num(f[2])})
    return p.stdout + p.stderr, apps


def _num(s: str):
    try:
        return float(s)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def hold(gpu: int, gib: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(gpu), str(int(gib * 1024**3))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"holder on GPU {gpu} failed to allocate {gib} GiB")
    return p


def pct(a, b):
    if a is None or b is None or b == 0:
        return None
    return 100.0 * (a - b) / b


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--alloc-gib", default="10,40")
    ap.add_argument("--gpus", default=None, help="GPU indices to load (default: all)")
    ap.add_argument("--settle", type=float, default=2.0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    reader = NvmlReader()
    first = reader.read()
    if not first.available:
        print(f"NVML: {first.reason}")
        return 2
    gpus = [int(x) for x in a.gpus.split(",")] if a.gpus else [g.index for g in first.gpus]
    sizes = [0.0] + [float(x) for x in a.alloc_gib.split(",")]
    phases, readings, ok = [], [], True
    for size in sizes:
        holders = {}
        try:
            for i in gpus:
                if size:
                    holders[i] = hold(i, size / (i + 1))
            time.sleep(a.settle)
            raw1, smi1 = smi_gpus()
            snap = reader.read()
            raw2, smi2 = smi_gpus()
            raw_apps, apps = smi_apps()
        finally:
            held_pids = {i: p.pid for i, p in holders.items()}
            for p in holders.values():
                p.stdin.close()
                p.wait(timeout=30)
        readings.append(snap)
        cmp_rows, refused = [], []
        for g in snap.gpus:
            s1, s2 = smi1.get(g.index, {}), smi2.get(g.index, {})
            smi_used = _mean(s1.get("mem_used_mib"), s2.get("mem_used_mib"))
            smi_total = s1.get("mem_total_mib")
            used_mib = g.mem_used_bytes / MIB if g.mem_used_bytes is not None else None
            total_mib = g.mem_total_bytes / MIB if g.mem_total_bytes is not None else None
            d_total = pct(total_mib, smi_total)
            # 1% of the card's memory: the tolerance (a relative error on a near-zero
            # idle reading would be meaningless).
            used_ok = used_mib is not None and smi_used is not None and abs(used_mib - smi_used) <= 0.01 * smi_total
            total_ok = d_total is not None and abs(d_total) <= 1.0
            ok &= used_ok and total_ok
            for fld in ("mem_used_bytes", "mem_total_bytes", "util_pct", "power_w", "temp_c"):
                if getattr(g, fld) is None:
                    refused.append(f"GPU {g.index} {fld}")
            if g.processes is None:
                refused.append(f"GPU {g.index} processes")
            procs = {p.pid: p.used_bytes for p in (g.processes or [])}
            holder_pid = held_pids.get(g.index)
            smi_holder = [x for x in apps if x["pid"] == holder_pid]
            cmp_rows.append({
                "gpu": g.index, "alloc_gib": size / (g.index + 1) if size and g.index in gpus else 0.0,
                "specmon_used_mib": used_mib, "smi_used_mib": smi_used, "used_diff_pct_of_total":
                    None if used_mib is None or smi_used is None else 100.0 * (used_mib - smi_used) / smi_total,
                "specmon_total_mib": total_mib, "smi_total_mib": smi_total, "total_diff_pct": d_total,
                "specmon_util_pct": g.util_pct, "smi_util_pct": _mean(s1.get("util_pct"), s2.get("util_pct")),
                "specmon_power_w": g.power_w, "smi_power_w": _mean(s1.get("power_w"), s2.get("power_w")),
                "specmon_temp_c": g.temp_c, "smi_temp_c": s1.get("temp_c"),
                "holder_pid": holder_pid,
                "specmon_holder_mib": (procs.get(holder_pid) / MIB) if procs.get(holder_pid) is not None else None,
                "smi_holder_mib": smi_holder[0]["used_mib"] if smi_holder else None,
                "specmon_processes": [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes} for p in (g.processes or [])],
                "memory_ok": bool(used_ok and total_ok),
            })
            r = cmp_rows[-1]
            print(f"phase {size:>5.1f} GiB  GPU {g.index}: used specmon {_f(used_mib)} MiB vs nvidia-smi {_f(smi_used)} MiB "
                  f"({_f(r['used_diff_pct_of_total'], 3)}% of total), total {_f(total_mib)} vs {_f(smi_total)}, "
                  f"util {_f(g.util_pct)} vs {_f(r['smi_util_pct'])} %, power {_f(g.power_w)} vs {_f(r['smi_power_w'])} W, "
                  f"holder {_f(r['specmon_holder_mib'])} vs {_f(r['smi_holder_mib'])} MiB -> {'OK' if r['memory_ok'] else 'MISMATCH'}")
        phases.append({"alloc_gib": size, "gpus_loaded": gpus, "nvidia_smi_before": raw1, "nvidia_smi_after": raw2,
                       "nvidia_smi_apps": raw_apps, "comparison": cmp_rows, "refused": refused})
    reader.close()
    doc = {"format": FIXTURE_FORMAT, "host": socket.gethostname(), "taken": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "driver_version": first.driver_version, "readings": [snapshot_to_dict(r) for r in readings], "phases": phases,
           "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES",)}}
    (out / "nvml-fixture.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("memory agrees within 1% on every GPU and phase" if ok else "MEMORY MISMATCH")
    return 0 if ok else 1


def _mean(a, b):
    vals = [v for v in (a, b) if v is not None]
    return sum(vals) / len(vals) if vals else None


def _f(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


if __name__ == "__main__":
    sys.exit(main())
