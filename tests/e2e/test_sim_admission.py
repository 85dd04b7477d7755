"""The simulator admits as SGLang's PrefillAdder does (both releases): a waiting request needs room
for its prompt and all of its max_new_tokens beside the output room kept for the running ones
(0.5.23 keeps all of it for requests that ignore EOS). The real 0.5.23 with a 1,024-token pool
ran 5 requests of 128 + 48 tokens and queued the rest; the simulator ran more when it scaled the
newcomer's output, and 0.5.23's running ones', by new_token_ratio."""

from __future__ import annotations

import random
import re
import threading
import time

import httpx
import pytest

from helpers.simproc import start_sim

POOL, PROMPT, OUTPUT, SENT = 1024, 128, 48, 8


def _most_running(version: str) -> int:
    rng = random.Random(7)
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", "--max-total-tokens", str(POOL),
                   "--sglang-version", version, "--startup-s", "0", speed=0.5) as sim:
        def one() -> None:
            ids = [rng.randrange(1000, 30000) for _ in range(PROMPT)]  # no shared prefix
            httpx.post(sim.url + "/generate", json={"input_ids": ids, "sampling_params": {
                "max_new_tokens": OUTPUT, "ignore_eos": True}}, timeout=60).raise_for_status()

        threads = [threading.Thread(target=one) for _ in range(SENT)]
        for t in threads:
            t.start()
        most = 0
        with httpx.Client(timeout=5) as c:
            while any(t.is_alive() for t in threads):
                m = re.search(r"^sglang:num_running_reqs\{[^}]*\} (\S+)$", c.get(sim.url + "/metrics").text, re.M)
                most = max(most, int(float(m.group(1))) if m else 0)
                time.sleep(0.02)
        for t in threads:
            t.join()
    return most


@pytest.mark.parametrize("version,running", [("0.5.23", 5), ("0.5.10", 6)])
def test_a_request_waits_without_room_for_its_whole_output(version, running):
    # 0.5.23: (r + 1) x 176 > 1,024 from r = 5, so five run and three wait. 0.5.10 keeps only
    # new_token_ratio (0.7 at first) of the running ones' output: 5 x (128 + 34) leaves 214, and a
    # sixth (176) fits
    assert _most_running(version) == running
