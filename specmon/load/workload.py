"""What the ramp sends: prompts of an exact token count, or prompts read from a dataset file.

Synthetic prompts are seeded and reproducible: prompt i of seed s is the same on every run and
for every arm, so two arms are compared on identical input.
- With a local tokenizer directory (`--tokenizer`), prompts are text whose tokenization (with
  the special tokens the server adds, e.g. BOS) is exactly `input_len` tokens.
- Without one, prompts are `input_ids` sent to /generate: nothing needs a tokenizer and the
  length is exact by construction. Ids are drawn from [1, id_limit); the default limit 4000 is
  below every real vocabulary (the tiny test model has 4,097 entries).
Dataset prompts are sent as text; their realised length is whatever the server counts (the
client records `meta_info.prompt_tokens`, never a guess).

Dataset formats (README "Workload files"):
- JSONL of `{"prompt": "..."}`;
- ShareGPT JSON: a list of `{"conversations": [{"from": "human", "value": "..."}, ...]}` (the
  first human turn is the prompt; JSONL with one such object per line is read too);
- SPEED-Bench JSONL: `{"category": "low_entropy", "turns": ["...", ...]}` (first turn).
A bad line is counted and skipped with a warning naming file and line; a file with no usable
line is a UsageError (exit 2).
"""

from __future__ import annotations

import json
import random
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from specmon.errors import UsageError
from specmon.plan import check_tokens

DEFAULT_ID_LIMIT = 4000
# Synthetic prompts kept for reuse (every arm sends prompt i: it is built once), in at most this
# many bytes. Ids are kept as int32, 4 bytes each (a list holds a 36-byte Python int per id):
# 64 MiB keeps about 1,900 prompts of 8.8K tokens, 128 of 128K, 16 of 1M. A prompt past the cap
# is made again from the seed when asked for: the same ids, only the CPU is spent twice.
PROMPT_CACHE_BYTES = 64 << 20


@dataclass(frozen=True)
class Prompt:
    text: Optional[str] = None
    input_ids: Optional[list[int]] = None

    def payload(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids} if self.input_ids is not None else {"text": self.text}


# --------------------------------------------------------------------------------------------
# Synthetic prompts


def random_ids(seed: int, index: int, n: int, id_limit: int = DEFAULT_ID_LIMIT) -> list[int]:
    """n token ids for prompt `index` of `seed`, reproducible across runs and Python versions."""
    rng = random.Random(seed * 1_000_003 + index)
    return rng.choices(range(1, id_limit), k=n)  # 4x cheaper than n randrange calls


def load_tokenizer(path: str):
    """A local Hugging Face tokenizer (never downloaded). transformers is optional: import lazily."""
    if not Path(path).is_dir():
        raise UsageError(f"--tokenizer {path}: expected a local tokenizer directory")
    try:
        from transformers import AutoTokenizer  # heavy and optional: only when asked for
    except ImportError:
        raise UsageError(f"--tokenizer {path}: needs the 'transformers' package (pip install transformers), "
                         "or leave --tokenizer out to send input_ids")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # a broken directory is bad input, not a crash
        raise UsageError(f"--tokenizer {path}: could not load a tokenizer ({type(e).__name__}: {e})")


_STABLE: dict[int, list[int]] = {}


def stable_ids(tokenizer, limit: int) -> list[int]:
    """Ids that survive decode -> encode unchanged between two neighbours (cached per tokenizer).

    Many ids do not: byte pieces, ids whose text re-tokenizes as two pieces, specials. Drawing
    only from the stable ones makes the length exact in one pass for most tokenizers.
    """
    key = id(tokenizer)
    if key not in _STABLE:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        probe = None
        ok: list[int] = []
        for i in range(1, limit):
            if i in special:
                continue
            if probe is None:
                probe = i
            seq = [probe, i, probe]
            if tokenizer(tokenizer.decode(seq, skip_special_tokens=True), add_special_tokens=False)["input_ids"] == seq:
                ok.append(i)
        _STABLE[key] = ok or list(range(1, limit))
    return _STABLE[key]


def exact_text(tokenizer, seed: int, index: int, n: int, id_limit: int = DEFAULT_ID_LIMIT) -> str:
    """Text whose tokenization (special tokens included, as the server tokenizes) is n tokens.

    Random stable ids are decoded to text; if re-tokenizing still merges or splits across id
    boundaries, a few rounds of trimming or padding converge.
    """
    special = len(tokenizer("", add_special_tokens=True)["input_ids"])
    want = max(n - special, 1)
    limit = min(id_limit, getattr(tokenizer, "vocab_size", id_limit) or id_limit)
    pool = stable_ids(tokenizer, limit)
    rng = random.Random(seed * 1_000_003 + index)
    ids = [pool[rng.randrange(len(pool))] for _ in range(want)]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    for _ in range(8):
        got = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(got) == want:
            return text
        got = got[:want] + [pool[rng.randrange(len(pool))] for _ in range(want - len(got))]
        text = tokenizer.decode(got, skip_special_tokens=True)
    return text  # close enough; the realised count is recorded from meta_info anyway


# --------------------------------------------------------------------------------------------
# Dataset files


@dataclass
class Dataset:
    path: str
    prompts: list[str]
    skipped: list[str] = field(default_factory=list)  # "FILE:LINE: why" per skipped line
    categories: set[str] = field(default_factory=set)


def _prompt_of(obj: Any, category: Optional[str]) -> Union[str, None, tuple[str, str]]:
    """The prompt text of one record; ("skip", why) for a bad record; None when filtered out."""
    if not isinstance(obj, dict):
        return ("skip", "expected a JSON object")
    if "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
            return ("skip", "'turns' must be a non-empty list of strings")
        if category is not None and obj.get("category") != category:
            return None
        return turns[0]
    if "prompt" in obj:
        p = obj["prompt"]
        if not isinstance(p, str) or not p:
            return ("skip", "'prompt' must be a non-empty string")
        return p
    if "conversations" in obj:
        conv = obj["conversations"]
        if isinstance(conv, list):
            for turn in conv:
                if isinstance(turn, dict) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str) and turn["value"]:
                    return turn["value"]
        return ("skip", "'conversations' has no human turn with a 'value'")
    return ("skip", "expected a 'prompt', 'turns' or 'conversations' key")


def load_dataset(path: str, category: Optional[str] = None) -> Dataset:
    p = Path(path)
    try:
        found = p.is_file()
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        raise UsageError(f"--dataset {path}: cannot use this path ({e})") from None
    if not found:
        raise UsageError(f"--dataset {path}: file not found")
    try:
        raw = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--dataset {path}: cannot read as UTF-8 text ({e})")
    ds = Dataset(path=str(p), prompts=[])
    records: list[tuple[int, Any]] = []
    stripped = raw.lstrip()
    whole = None
    if stripped.startswith("["):
        try:
            whole = json.loads(raw)
        except json.JSONDecodeError as e:
            raise UsageError(f"--dataset {path}: a JSON array that does not parse (line {e.lineno}: {e.msg})")
        except RecursionError:
            raise UsageError(f"--dataset {path}: a JSON array nested too deeply to read") from None
        except ValueError as e:  # e.g. an integer of more digits than Python converts
            raise UsageError(f"--dataset {path}: a JSON array that does not parse ({e})") from None
        # One record per array element; "line" in warnings is the element's 1-based index.
        records = [(i + 1, obj) for i, obj in enumerate(whole)]
    else:
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((lineno, json.loads(line)))
            except json.JSONDecodeError as e:
                ds.skipped.append(f"{path}:{lineno}: not valid JSON ({e.msg})")
            except RecursionError:
                ds.skipped.append(f"{path}:{lineno}: JSON nested too deeply")
            except ValueError as e:  # e.g. an integer of more digits than Python converts
                ds.skipped.append(f"{path}:{lineno}: not valid JSON ({e})")
    where = "item" if whole is not None else "line"
    has_turns = False
    for lineno, obj in records:
        if isinstance(obj, dict) and "turns" in obj:
            has_turns = True
            if isinstance(obj.get("category"), str):
                ds.categories.add(obj["category"])
        got = _prompt_of(obj, category)
        if got is None:
            continue
        if isinstance(got, tuple):
            ds.skipped.append(f"{path}:{where} {lineno}: {got[1]}" if whole is not None else f"{path}:{lineno}: {got[1]}")
            continue
        ds.prompts.append(got)
    if category is not None and not has_turns:
        raise UsageError(f"--category {category}: {path} has no SPEED-Bench rows (objects with 'category' and 'turns')")
    if not ds.prompts:
        if category is not None and ds.categories:
            raise UsageError(f"--dataset {path}: no usable line with category {category!r} "
                             f"(categories found: {', '.join(sorted(ds.categories))})")
        raise UsageError(f"--dataset {path}: no usable prompt ({len(ds.skipped)} bad {where}s; expected "
                         "JSONL of {\"prompt\": ...}, ShareGPT JSON, or SPEED-Bench JSONL)")
    return ds


# --------------------------------------------------------------------------------------------


class Workload:
    """Prompt number i, for any arm: the same sequence everywhere, reproducible from the seed."""

    def __init__(self, *, input_len: int = 1024, seed: int = 42, tokenizer: Optional[str] = None,
                 dataset: Optional[str] = None, category: Optional[str] = None,
                 id_limit: int = DEFAULT_ID_LIMIT, cache_bytes: int = PROMPT_CACHE_BYTES):
        try:
            check_tokens(input_len)  # the plan's bound: a prompt is built as a list of input_len ids
        except ValueError as e:
            raise UsageError(f"--input-len: {e}") from None
        if category is not None and dataset is None:
            raise UsageError("--category: needs --dataset FILE (a SPEED-Bench JSONL)")
        self.input_len = input_len
        self.seed = seed
        self.id_limit = id_limit
        self.dataset = load_dataset(dataset, category) if dataset else None
        self.tokenizer = load_tokenizer(tokenizer) if tokenizer else None
        # Prompt index -> its ids (int32 array) or its text; `cached_bytes` of `cache_bytes` used.
        self._cache: dict[int, Union[array, str]] = {}
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0

    @property
    def skipped(self) -> list[str]:
        return self.dataset.skipped if self.dataset else []

    def describe(self) -> dict[str, Any]:
        if self.dataset:
            return {"kind": "dataset", "path": self.dataset.path, "prompts": len(self.dataset.prompts),
                    "skipped_lines": len(self.dataset.skipped), "seed": self.seed}
        return {"kind": "text" if self.tokenizer else "input_ids", "input_len": self.input_len, "seed": self.seed}

    def prompt(self, index: int) -> Prompt:
        if self.dataset:
            # Seeded shuffle order over the dataset, cycling when the ramp needs more prompts
            # (the dataset holds the texts: nothing to cache).
            order = self._order()
            return Prompt(text=self.dataset.prompts[order[index % len(order)]])
        kept = self._cache.get(index)
        if kept is not None:
            return Prompt(text=kept) if isinstance(kept, str) else Prompt(input_ids=kept.tolist())
        if self.tokenizer is not None:
            text = exact_text(self.tokenizer, self.seed, index, self.input_len, self.id_limit)
            p, keep = Prompt(text=text), text
        else:
            ids = random_ids(self.seed, index, self.input_len, self.id_limit)
            p, keep = Prompt(input_ids=ids), array("i", ids)
        size = sys.getsizeof(keep)
        if self.cached_bytes + size <= self.cache_bytes:
            self._cache[index] = keep
            self.cached_bytes += size
        return p

    def _order(self) -> list[int]:
        if not hasattr(self, "_order_cache"):
            idx = list(range(len(self.dataset.prompts)))
            random.Random(self.seed).shuffle(idx)
            self._order_cache = idx
        return self._order_cache
