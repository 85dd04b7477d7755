"""`--tokenizer` without transformers: the `tokenizers` package reads the folder's tokenizer.json,
and whatever is missing is said in one line (exit 2).

The tokenizer is a small byte-level BPE built here with the `tokenizers` library (no download),
with a BOS post-processor like a Llama tokenizer's. Where transformers must be absent, the
subprocess gets a sitecustomize on its PYTHONPATH that makes `import transformers` (and, for the
last test, `import tokenizers`) fail: this blocks a third-party package the way an install
without it would, and touches none of specmon's own code.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


from specmon.errors import UsageError  # noqa: E402
from specmon.load.localtok import load_tokenizer  # noqa: E402
from specmon.load.workload import Workload  # noqa: E402
from helpers.load_tokenizer import _env, _specmon, tok_dir


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
