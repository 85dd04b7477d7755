"""`--tokenizer` without transformers: the `tokenizers` package reads the folder's tokenizer.json,
and whatever is missing is said in one line (exit 2).

The tokenizer is a small byte-level BPE built here with the `tokenizers` library (no download),
with a BOS post-processor like a Llama tokenizer's. Where transformers must be absent, the
subprocess gets a sitecustomize on its PYTHONPATH that makes `import transformers` (and, for the
last test, `import tokenizers`) fail: this blocks a third-party package the way an install
without it would, and touches none of specmon's own code.
"""

from __future__ import annotations

import csv


from helpers.simproc import start_sim
from helpers.load_tokenizer import _env, _specmon, tok_dir


def test_ramp_with_tokenizer_and_no_transformers_sends_exact_text(tok_dir, tmp_path):
    """End to end: the simulator counts text with the same tokenizer.json (--model-path), so the
    server's prompt_tokens in requests.csv says whether the text was the length asked for."""
    out = tmp_path / "session"
    with start_sim("--model-path", str(tok_dir), "--enable-metrics", speed=50) as sim:
        p = _specmon(["ramp", sim.url, "--levels", "2", "--requests-per-level", "4", "--settle", "0",
                      "--input-len", "96", "--output-len", "8", "--tokenizer", tok_dir, "--headless",
                      "--out", out], env=_env(tmp_path, "transformers"))
    assert p.returncode == 0, p.stderr[-2000:]
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert len(rows) >= 4
    assert {r["status"] for r in rows} == {"ok"}, rows[0]
    assert {int(r["prompt_tokens"]) for r in rows} == {96}
