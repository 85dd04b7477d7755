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
import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.simproc import REPO, start_sim

tokenizers = pytest.importorskip("tokenizers")

from specmon.errors import UsageError  # noqa: E402
from specmon.load.localtok import load_tokenizer  # noqa: E402
from specmon.load.workload import Workload  # noqa: E402

BLOCKER = '''
import os, sys

_BLOCKED = set(os.environ.get("SPECMON_TEST_BLOCK_IMPORTS", "").split(","))


class _Absent:
    """A third-party package that is not installed, as far as this interpreter can tell."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
'''


def build_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    rng = random.Random(0)
    words = ["server", "queue", "token", "prefill", "decode", "cache", "batch", "graph", "memory", "kernel",
             "stream", "draft", "verify", "accept", "ramp", "knee"]
    corpus = [" ".join(rng.choice(words) + rng.choice(["", "s", "ed", "ing"]) for _ in range(30))
              for _ in range(300)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "tiny-bpe")


def _env(tmp_path: Path, blocked: str) -> dict:
    site = tmp_path / "site-block"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), SPECMON_TEST_BLOCK_IMPORTS=blocked)


def _specmon(args, env, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO))


def test_the_blocker_really_hides_transformers(tmp_path):
    # Otherwise every test below could pass on a machine with transformers installed for nothing.
    env = _env(tmp_path, "transformers")
    p = subprocess.run([sys.executable, "-c", "import transformers"], capture_output=True, text=True, env=env)
    assert p.returncode != 0 and "No module named 'transformers'" in p.stderr
    p = subprocess.run([sys.executable, "-c", "import tokenizers"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr


def test_text_prompts_from_a_tokenizer_json_are_exact(tok_dir):
    # The tokenizer.json named itself: always the tokenizers package, whatever else is installed.
    tok = load_tokenizer(str(tok_dir / "tokenizer.json"))
    assert tok.all_special_ids == [0, 1] and tok.vocab_size == 400
    w = Workload(input_len=64, seed=3, tokenizer=str(tok_dir / "tokenizer.json"))
    texts = [w.prompt(i).text for i in range(5)]
    assert len(set(texts)) == 5
    assert [len(tok(t)["input_ids"]) for t in texts] == [64] * 5  # BOS included, as the server counts
    assert all(tok(t)["input_ids"][0] == 0 for t in texts)
    if importlib.util.find_spec("transformers") is None:  # the folder goes the same way here
        assert Workload(input_len=64, seed=3, tokenizer=str(tok_dir)).prompt(2).text == texts[2]


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


def test_a_folder_without_tokenizer_json_says_what_to_install(tmp_path):
    folder = tmp_path / "sentencepiece-only"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(b"\x00")
    p = _specmon(["ramp", "http://127.0.0.1:9", "--levels", "2", "--tokenizer", folder, "--headless",
                  "--out", tmp_path / "s"], env=_env(tmp_path, "transformers"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(folder) in lines[0] and "no tokenizer.json" in lines[0] and "pip install transformers" in lines[0]


def test_neither_package_says_how_to_get_one(tok_dir, tmp_path):
    p = _specmon(["ramp", "http://127.0.0.1:9", "--levels", "2", "--tokenizer", tok_dir, "--headless",
                  "--out", tmp_path / "s"], env=_env(tmp_path, "transformers,tokenizers"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "pip install tokenizers" in lines[0] and "leave --tokenizer out" in lines[0]
    assert "Traceback" not in p.stderr


def test_a_broken_tokenizer_json_is_bad_input(tmp_path):
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json")
    with pytest.raises(UsageError, match="could not read tokenizer.json"):
        load_tokenizer(str(bad / "tokenizer.json"))
    with pytest.raises(UsageError, match="expected a local tokenizer folder"):
        load_tokenizer(str(tmp_path / "missing"))
