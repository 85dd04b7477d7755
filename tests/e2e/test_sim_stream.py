"""The simulator's stream as SGLang sends it, over real HTTP on 127.0.0.1: a chunk per decode step
at --speed 1, --stream-interval and sampling_params.stream_interval, chat's role event with the
first output, and the wire log's arrival stamp (docs/field-notes.md, SGLang notes 6.1, 6.2)."""

from __future__ import annotations


import httpx

from helpers.simproc import start_sim
from helpers.sim_stream import outputs_at, stream_generate


def test_stream_interval_flag_and_per_request():
    with start_sim("--profile", "nvfp4-nospec", "--startup-s", "0.3", "--stream-interval", "8", speed=1) as sim:
        objs = stream_generate(sim.url, 64)
        # one token a pass: outputs at L = 1, 9, 17, ..., 57 and the finish at 64
        assert outputs_at(objs) == [1, 9, 17, 25, 33, 41, 49, 57, 64]
        assert httpx.get(sim.url + "/server_info").json()["stream_interval"] == 8
        # a request's own stream_interval overrides the flag
        objs = stream_generate(sim.url, 20, interval=3)
        assert outputs_at(objs) == [1, 4, 7, 10, 13, 16, 19, 20]
    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", "--startup-s", "0.3", speed=1) as sim:
        # speculative: the rule applies to the length after each verify pass; passes that jump
        # over the residue send nothing
        objs = stream_generate(sim.url, 200, interval=4)
        counts = outputs_at(objs)
        assert counts[0] == 1 and counts[-1] == 200
        assert all(n % 4 == 1 for n in counts[1:-1]), counts
        steps = objs[-1]["meta_info"]["spec_verify_ct"]
        assert len(objs) < (steps + 1) / 2   # far fewer chunks than passes
