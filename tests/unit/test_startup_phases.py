"""Start-up seconds by phase from a server's own log lines, for both SGLang releases: 0.5.23 prints
one `Engine startup timings (s):` line, 0.5.10 only the `elapsed` of single phases. The recorded
real logs in tests/data are the input; launch mode puts the result in ArmInfo.startup_s where
/server_info has no startup_time (tests/e2e/test_launch_startup_phases.py)."""

import re
from pathlib import Path

import pytest

from specmon.sources import logparse as lp

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def fed(lines) -> lp.LogState:
    st = lp.LogState()
    for line in lines:
        st.feed(line.rstrip("\n"))
    return st


def elapsed_in(text: str, head: str) -> float:
    """The seconds a recorded log line starting with `head` says, read independently of logparse."""
    m = re.search(re.escape(head) + r".*?elapsed=([\d.]+) s", text)
    assert m, head
    return float(m.group(1))


@pytest.mark.parametrize("path", ["sglang-versions/0.5.10/startup.log", "sglang_real_startup.log"])
def test_0510_log_gives_weight_load_and_distributed_init(path):
    text = (DATA / path).read_text()
    assert "Engine startup timings" not in text  # 0.5.10 has no timings line
    st = fed(text.splitlines())
    assert st.startup_s == {"init_distributed": elapsed_in(text, "Init torch distributed ends."),
                            "load_weight": elapsed_in(text, "Load weight end.")}
    assert st.startup_s["load_weight"] > 0


def test_0523_log_gives_its_timings_line_whole():
    text = (DATA / "sglang-versions/0.5.23/startup.log").read_text()
    line = next(x for x in text.splitlines() if "Engine startup timings (s):" in x)
    st = fed(text.splitlines())
    assert st.startup_s == lp.startup_timings(line)
    # the timings line covers every phase: the elapsed lines printed beside it add nothing
    assert set(st.startup_s) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph", "tokenizer_e2e"}
    assert st.startup_s["tokenizer_e2e"] == 43.79 and st.startup_s["load_weight"] == elapsed_in(text, "Load weight end.")


# A GPU server of 0.5.10 with TP 2 and EAGLE: each rank prints its phases (model_runner.py and
# eagle_worker.py print `Capture ... graph end. Time elapsed: S s`); the CPU fixture captures none.
GPU_0510 = """\
[2026-01-10 09:00:01 TP0] Init torch distributed ends. elapsed=1.52 s, mem usage=0.09 GB
[2026-01-10 09:00:01 TP1] Init torch distributed ends. elapsed=1.61 s, mem usage=0.09 GB
[2026-01-10 09:00:40 TP0] Load weight end. elapsed=38.20 s, type=LlamaForCausalLM, avail mem=40.10 GB, mem usage=35.00 GB.
[2026-01-10 09:00:41 TP1] Load weight end. elapsed=39.00 s, type=LlamaForCausalLM, avail mem=40.10 GB, mem usage=35.00 GB.
[2026-01-10 09:00:42 TP0] KV Cache is allocated. #tokens: 400000, K size: 12.00 GB, V size: 12.00 GB
[2026-01-10 09:00:42 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=14.00 GB
[2026-01-10 09:01:00 TP0] Capture cuda graph end. Time elapsed: 17.50 s. mem usage=0.80 GB. avail mem=13.20 GB.
[2026-01-10 09:01:00 TP1] Capture cuda graph end. Time elapsed: 18.00 s. mem usage=0.80 GB. avail mem=13.20 GB.
[2026-01-10 09:01:09 TP0] Capture draft cuda graph end. Time elapsed: 8.25 s. mem usage=0.30 GB. avail mem=12.90 GB.
[2026-01-10 09:01:12 TP0] Capture draft extend cuda graph end. Time elapsed: 2.75 s. mem usage=0.10 GB. avail mem=12.80 GB.
[2026-01-10 09:01:15] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
"""


def test_0510_gpu_log_sums_graph_captures_of_the_first_rank():
    st = fed(GPU_0510.splitlines())
    assert st.startup_s == {"init_distributed": 1.52, "load_weight": 38.20, "cuda_graph": 17.50 + 8.25 + 2.75}


def test_a_restarted_log_state_starts_empty_and_other_lines_add_nothing():
    assert lp.LogState().startup_s is None
    st = fed(["[2026-01-10 09:00:42] Memory pool end. avail mem=20.66 GB",
              "[2026-01-10 09:00:42 TP1] Load weight end. elapsed=3.00 s, type=X, avail mem=1.00 GB, mem usage=1.00 GB."])
    assert st.startup_s is None
    assert lp.startup_elapsed("[2026-01-10 09:00:42] Capture piecewise CUDA graph end. Time elapsed: 4.00 s. "
                              "mem usage=0.1 GB") == ("cuda_graph", 4.0)
