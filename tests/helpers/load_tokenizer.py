"""What the tokenizer tests share across tiers: a small BPE tokenizer.json built here, and
`specmon` run in an environment where `transformers` cannot be imported."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.simproc import REPO


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
