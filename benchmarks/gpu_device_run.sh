#!/usr/bin/env bash
# One device run: NVML vs nvidia-smi under known allocations, then
# `specmon attach --headless` against a simulated server while GPU memory is held, with
# nvidia-smi logging every second beside it. Usage: gpu_device_run.sh OUTDIR [GPUS]
# (GPUS e.g. 0 or 0,1). Expects specmon importable (PYTHONPATH) and torch on the host.
set -uo pipefail
out=${1:?OUTDIR}; gpus=${2:-0}
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 benchmarks/gpu_nvml_check.py --out "$out" --alloc-gib 10,40 --gpus "$gpus" 2>&1 | tee "$out/check.log"
python3 -m specmon sim --port 30111 --profile h200-fp8-mtp --enable-metrics --speed 10 > /tmp/sim.log 2>&1 &
sim=$!
# Hold 20 GiB on each loaded GPU for the attach window.
python3 - "$gpus" <<'PY' &
import sys, time, torch
xs = [torch.ones(20 * 2**30, dtype=torch.uint8, device=f"cuda:{int(i)}") for i in sys.argv[1].split(",")]
torch.cuda.synchronize(); time.sleep(14)
PY
holder=$!
nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total,power.draw --format=csv,noheader,nounits -lms 500 > "$out/smi-during-attach.csv" &
smi=$!
sleep 5
python3 -m specmon attach http://127.0.0.1:30111 --headless --duration 6 --out /tmp/attach 2>&1 | tee "$out/attach.log"
kill $smi $sim 2>/dev/null; wait $holder
cp /tmp/attach/gpus.csv "$out/attach-gpus.csv"; cp /tmp/attach/samples.csv "$out/attach-samples.csv"
