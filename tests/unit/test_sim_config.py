"""The simulator's own command-line knobs: --gpu-flops-scale makes a slower card (decode turns
compute-bound at a small batch), and a value outside (0, 1] is one clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.simproc import REPO
from specmon.errors import UsageError
from specmon.servers.sim.config import parse, resolve
from specmon.servers.sim.physics import Physics


def _physics(*argv: str) -> Physics:
    return Physics(resolve(parse(["--profile", "fp8-nospec", *argv])).profile)


def test_a_slower_card_goes_flat_at_a_small_batch():
    full, slow = _physics(), _physics("--gpu-flops-scale", "0.03")

    def tok_s(ph: Physics, batch: int) -> float:
        return batch / ph.decode_time(batch, batch * 640)

    # the full card more than doubles from 12 to 32 running; the slow one gains under 20%
    assert tok_s(full, 32) > 2.0 * tok_s(full, 12)
    assert tok_s(slow, 32) < 1.2 * tok_s(slow, 12)
    # the same memory-bound single stream, the same pool and cap: only compute moved
    assert tok_s(slow, 1) == pytest.approx(tok_s(full, 1), rel=0.05)
    assert (slow.max_total_tokens, slow.max_running_requests) == (full.max_total_tokens, full.max_running_requests)


@pytest.mark.parametrize("value", ["0", "1.5", "-1"])
def test_a_scale_outside_0_1_is_refused(value):
    with pytest.raises(UsageError, match="--gpu-flops-scale must be above 0 and at most 1"):
        resolve(parse(["--gpu-flops-scale", value]))


def test_the_refusal_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "-m", "specmon", "sim", "--gpu-flops-scale", "0", "--port", "1"],
                       cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--gpu-flops-scale" in p.stderr and "Traceback" not in p.stderr
