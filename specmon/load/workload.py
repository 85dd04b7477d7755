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
line is a UsageError (exit 2). Each record is kept as a conversation too (its user turns in
order, and for ShareGPT the recorded replies), for multi-turn runs.

Shared prefixes (`shared_prefix_len` L, `prefix_groups` G, `zipf` S): the first L of a prompt's
`input_len` ids are the system prompt of its group, one of G seeded id runs; the group of
conversation n is drawn (seeded, per n) with Zipf weights 1 / rank^S (S = 1 when not given; 0 is
uniform), so the same prompt index has the same group on every arm and run. The rest of the
prompt (input_len - L ids) is the prompt's own, as without sharing.

Multi-turn conversations (`turns` T > 1, `Conversation`): turn 1 is prompt n as above; turn k
resends the whole history, turn k-1's prompt plus the server's reply (its output_ids when the
answer carries them, else seeded ids of the reply's length), then a new user message of
input_len - L ids. With input_ids every turn's length is exact: input_len + (k-1) x (reply +
input_len - L). Dataset conversations are text: the history is turn k-1's text, the reply text
(the server's, else the recorded one) and "\n\n" before the next user turn; a conversation
with fewer user turns than T ends with its last one.
"""

from __future__ import annotations

import json
import random
import sys
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from specmon.errors import UsageError
from specmon.bounds import check_tokens

from specmon.load.native import fastread as _fastread  # None where it is not built

DEFAULT_ID_LIMIT = 4000
# Prompts are not kept for the run: each arm asks for prompt i once, so a prompt is held only
# until every arm of the ramp has taken it (`Workload.sharers`), in at most this many bytes;
# past the cap the oldest go first, and an arm that fell that far behind makes its prompt again
# from the seed (the same ids, only the CPU is spent twice). One arm keeps nothing. A kept prompt
# is the very list the first arm sent (8 bytes an id: the ids are shared int objects, below), so
# the other arms' takes cost nothing; 8 MiB holds about 120 prompts of 8.8K ids, 1,000 of 1K.
PROMPT_CACHE_BYTES = 8 << 20


@lru_cache(maxsize=8)
def _id_pool(id_limit: int) -> list[int]:
    """The ids 1 .. id_limit - 1, one int object each, shared by every prompt: a list of ids
    then holds 8-byte references (a fresh int above 256 is another 28 bytes an id, 250 KB for an
    8.8K prompt, for as long as its request is in flight)."""
    return list(range(1, id_limit))


def _draw_ids(rng: random.Random, n: int, id_limit: int) -> list[int]:
    # choices() over the shared objects picks the same values as over range(1, id_limit)
    if _fastread is not None and n > 0:  # the same picks from the same words, in C
        return _fastread.choices(rng.getrandbits(64 * n).to_bytes(8 * n, "little"), _id_pool(id_limit))
    return rng.choices(_id_pool(id_limit), k=n)


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
    return _draw_ids(rng, n, id_limit)  # choices: 4x cheaper than n randrange calls


def load_tokenizer(path: str):
    """A local tokenizer (never downloaded): transformers when installed, else the tokenizers
    package on the folder's tokenizer.json (load/localtok.py)."""
    from specmon.load.localtok import load_tokenizer as load

    return load(path)


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
class DatasetConversation:
    """One record as a conversation: its user turns in order, and the reply recorded after each
    (ShareGPT; None where the file has none)."""

    users: list[str]
    replies: list[Optional[str]]


@dataclass
class Dataset:
    path: str
    prompts: list[str]  # the first user turn of each record (a single-turn run sends these)
    skipped: list[str] = field(default_factory=list)  # "FILE:LINE: why" per skipped line
    categories: set[str] = field(default_factory=set)
    conversations: list[DatasetConversation] = field(default_factory=list)  # aligned with prompts


_USER_ROLES = ("human", "user")
_REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bard", "model")


def _conversation_of(obj: Any, category: Optional[str]) -> Union[DatasetConversation, None, tuple[str, str]]:
    """One record as a conversation; ("skip", why) for a bad record; None when filtered out."""
    if not isinstance(obj, dict):
        return ("skip", "expected a JSON object")
    if "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
            return ("skip", "'turns' must be a non-empty list of strings")
        if category is not None and obj.get("category") != category:
            return None
        users = [t for t in turns if isinstance(t, str) and t]  # a later odd turn is left out, not the record
        return DatasetConversation(users, [None] * len(users))
    if "prompt" in obj:
        p = obj["prompt"]
        if not isinstance(p, str) or not p:
            return ("skip", "'prompt' must be a non-empty string")
        return DatasetConversation([p], [None])
    if "conversations" in obj:
        conv = obj["conversations"]
        users: list[str] = []
        replies: list[Optional[str]] = []
        if isinstance(conv, list):
            for turn in conv:
                if not isinstance(turn, dict) or not isinstance(turn.get("value"), str) or not turn["value"]:
                    continue
                if turn.get("from") in _USER_ROLES:
                    users.append(turn["value"])
                    replies.append(None)
                elif turn.get("from") in _REPLY_ROLES and users and replies[-1] is None:
                    replies[-1] = turn["value"]
        if users:
            return DatasetConversation(users, replies)
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
        got = _conversation_of(obj, category)
        if got is None:
            continue
        if isinstance(got, tuple):
            ds.skipped.append(f"{path}:{where} {lineno}: {got[1]}" if whole is not None else f"{path}:{lineno}: {got[1]}")
            continue
        ds.prompts.append(got.users[0])
        ds.conversations.append(got)
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
                 id_limit: int = DEFAULT_ID_LIMIT, cache_bytes: int = PROMPT_CACHE_BYTES,
                 shared_prefix_len: Optional[int] = None, prefix_groups: int = 1, zipf: Optional[float] = None,
                 turns: int = 1):
        try:
            check_tokens(input_len)  # the plan's bound: a prompt is built as a list of input_len ids
        except ValueError as e:
            raise UsageError(f"--input-len: {e}") from None
        if category is not None and dataset is None:
            raise UsageError("--category: needs --dataset FILE (a SPEED-Bench JSONL)")
        if shared_prefix_len is not None:
            # The plan checks these with the flags' words; a Workload built by hand gets them too.
            if dataset is not None or tokenizer is not None:
                raise UsageError("--shared-prefix-len: shared prefixes are built as input_ids "
                                 "(not with --dataset or --tokenizer)")
            if not 1 <= shared_prefix_len < input_len:
                raise UsageError(f"--shared-prefix-len: expected fewer tokens than --input-len {input_len}, "
                                 f"got {shared_prefix_len}")
        self.input_len = input_len
        self.seed = seed
        self.id_limit = id_limit
        self.shared_prefix_len = shared_prefix_len
        self.prefix_groups = prefix_groups if shared_prefix_len is not None else 1
        self.zipf = (1.0 if zipf is None else zipf) if shared_prefix_len is not None else None
        self.turns = turns
        # Cumulative Zipf weights of the groups (rank 1 the most popular).
        self._group_cdf = list(accumulate(1.0 / (k ** self.zipf) for k in range(1, self.prefix_groups + 1))) \
            if shared_prefix_len is not None else []
        self.dataset = load_dataset(dataset, category) if dataset else None
        self.tokenizer = load_tokenizer(tokenizer) if tokenizer else None
        # How many arms ask for each prompt (the ramp sets it): a prompt is kept until they all
        # have. Prompt index -> [its ids (a list of shared ints) or its text, takes left];
        # `cached_bytes` of `cache_bytes` used, oldest first out.
        self.sharers = 1
        self._cache: OrderedDict[int, list] = OrderedDict()
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self._newest = -1  # the highest prompt index made yet (one made again is not kept again)
        # The shared-prefix groups' system prompts (group -> ids): every prompt of a group starts
        # with one for the whole run, so these stay (within cache_bytes of their own).
        self._prefixes: dict[int, list[int]] = {}
        self._prefix_bytes = 0

    @classmethod
    def from_plan(cls, plan: Any) -> "Workload":
        """The workload a RampPlan describes (its prompt fields)."""
        return cls(input_len=plan.input_len, seed=plan.seed, tokenizer=plan.tokenizer, dataset=plan.dataset,
                   category=plan.category, shared_prefix_len=plan.shared_prefix_len,
                   prefix_groups=plan.prefix_groups, zipf=plan.zipf, turns=plan.turns)

    @property
    def skipped(self) -> list[str]:
        return self.dataset.skipped if self.dataset else []

    def describe(self) -> dict[str, Any]:
        if self.dataset:
            out = {"kind": "dataset", "path": self.dataset.path, "prompts": len(self.dataset.prompts),
                   "skipped_lines": len(self.dataset.skipped), "seed": self.seed}
        else:
            out = {"kind": "text" if self.tokenizer else "input_ids", "input_len": self.input_len, "seed": self.seed}
        if self.shared_prefix_len is not None:
            out.update(shared_prefix_len=self.shared_prefix_len, prefix_groups=self.prefix_groups, zipf=self.zipf)
        if self.turns > 1:
            out["turns"] = self.turns
        return out

    # ---- shared prefixes ------------------------------------------------------------------------
    def group(self, index: int) -> Optional[int]:
        """The shared-prefix group of prompt (conversation) `index`: seeded, Zipf-weighted; None
        without shared prefixes."""
        if not self._group_cdf:
            return None
        u = random.Random(f"specmon-group/{self.seed}/{index}").random() * self._group_cdf[-1]
        return min(bisect_right(self._group_cdf, u), self.prefix_groups - 1)

    def prefix_ids(self, group: int) -> list[int]:
        """The system prompt of `group`: shared_prefix_len seeded ids (the same on every arm)."""
        kept = self._prefixes.get(group)
        if kept is not None:
            return kept  # read only: a prompt is this plus its own ids, a new list
        ids = _draw_ids(random.Random(f"specmon-prefix/{self.seed}/{group}"), self.shared_prefix_len, self.id_limit)
        size = sys.getsizeof(ids)
        if self._prefix_bytes + size <= self.cache_bytes:
            self._prefixes[group] = ids
            self._prefix_bytes += size
        return ids

    @property
    def own_len(self) -> int:
        """Ids of a prompt that are its own: input_len less the shared prefix (a user message)."""
        return self.input_len - (self.shared_prefix_len or 0)

    # ---- prompts --------------------------------------------------------------------------------
    def prompt(self, index: int) -> Prompt:
        if self.dataset:
            # Seeded shuffle order over the dataset, cycling when the ramp needs more prompts
            # (the dataset holds the texts: nothing to cache).
            return Prompt(text=self.dataset.prompts[self._record(index)])
        kept = self._take(index)
        if kept is None:
            if self.shared_prefix_len is not None:
                kept = (self.prefix_ids(self.group(index))
                        + random_ids(self.seed, index, self.own_len, self.id_limit))
            elif self.tokenizer is not None:
                kept = exact_text(self.tokenizer, self.seed, index, self.input_len, self.id_limit)
            else:
                kept = random_ids(self.seed, index, self.input_len, self.id_limit)
            if index > self._newest:  # the first arm to get here: held for the others
                self._newest = index
                self._keep(index, kept)
        # A kept list goes to every arm as it is: callers read a prompt, never change it.
        return Prompt(text=kept) if isinstance(kept, str) else Prompt(input_ids=kept)

    def conversation(self, index: int) -> "Conversation":
        """Conversation number `index` (its first turn is prompt `index`), for `turns` turns."""
        return Conversation(self, index)

    def _take(self, index: int) -> Union[list, str, None]:
        """Prompt `index` if kept; dropped once the last arm that needs it has taken it."""
        entry = self._cache.get(index)
        if entry is None:
            return None
        entry[1] -= 1
        if entry[1] <= 0:
            del self._cache[index]
            self.cached_bytes -= entry[2]
        return entry[0]

    def _keep(self, index: int, kept: Union[list, str]) -> None:
        """Hold a prompt just made for the other arms (if there are any): the oldest kept go
        first when the bytes would pass the cap (an arm that far behind makes its own)."""
        if self.sharers <= 1:
            return
        size = sys.getsizeof(kept)  # the list's references; its ints are the shared pool's
        if size > self.cache_bytes:
            return
        while self._cache and self.cached_bytes + size > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self.cached_bytes -= old[2]
        self._cache[index] = [kept, self.sharers - 1, size]
        self.cached_bytes += size

    def _record(self, index: int) -> int:
        order = self._order()
        return order[index % len(order)]

    def _order(self) -> list[int]:
        if not hasattr(self, "_order_cache"):
            idx = list(range(len(self.dataset.prompts)))
            random.Random(self.seed).shuffle(idx)
            self._order_cache = idx
        return self._order_cache


TURN_SEPARATOR = "\n\n"  # between a reply and the next user turn, in text conversations


class Conversation:
    """One multi-turn conversation of a Workload: `next_prompt()` for each turn, `reply(...)` with
    what the server answered in between. Held by one stream; the history is the stream's own."""

    def __init__(self, workload: Workload, index: int):
        self.workload = workload
        self.index = index
        self.group = workload.group(index)
        self.sent = 0  # turns sent so far
        self._record: Optional[DatasetConversation] = None
        if workload.dataset is not None:
            self._record = workload.dataset.conversations[workload._record(index)]
            self.turns = min(workload.turns, len(self._record.users))
        else:
            self.turns = workload.turns
        self._ids: Optional[list[int]] = None  # the last prompt sent and its reply, as ids
        self._text: Optional[str] = None
        self._ended = False

    @property
    def done(self) -> bool:
        return self._ended or self.sent >= self.turns

    def next_prompt(self) -> Optional[Prompt]:
        """The next turn's prompt (the history and a new user message); None when done."""
        if self.done:
            return None
        w, k = self.workload, self.sent
        if k == 0:
            p = w.prompt(self.index)
        elif self._record is not None:
            p = Prompt(text=self._text + TURN_SEPARATOR + self._record.users[k])
        elif w.tokenizer is not None:
            message = exact_text(w.tokenizer, w.seed, _turn_key(self.index, k), w.own_len, w.id_limit)
            p = Prompt(text=self._text + TURN_SEPARATOR + message)
        else:
            message = _draw_ids(random.Random(f"specmon-turn/{w.seed}/{self.index}/{k}"), w.own_len, w.id_limit)
            p = Prompt(input_ids=self._ids + message)
        self.sent += 1
        if p.input_ids is not None:
            self._ids, self._text = list(p.input_ids), None
        else:
            self._ids, self._text = None, p.text
        return p

    def reply(self, ok: bool, output_ids: Optional[Sequence[int]] = None, text: Optional[str] = None,
              tokens: Optional[int] = None) -> None:
        """What the server answered to the last turn. A failed turn ends the conversation (its
        history is not what a user would resend); so does a reply of unknown length."""
        if self.done:
            return
        if not ok:
            self._ended = True
            return
        w, k = self.workload, self.sent
        if self._ids is not None:
            if output_ids is not None and (tokens is None or len(output_ids) == tokens):
                ids = [int(t) for t in output_ids]
            elif tokens:
                ids = _draw_ids(random.Random(f"specmon-reply/{w.seed}/{self.index}/{k}"), tokens, w.id_limit)
            else:
                self._ended = True
                return
            self._ids = self._ids + ids
        else:
            said = text if text is not None else (self._record.replies[k - 1] if self._record is not None else None)
            if said is None:
                self._ended = True
                return
            self._text = self._text + said


def _turn_key(index: int, turn: int) -> int:
    """A prompt index for turn `turn` of conversation `index` (text prompts), apart from every
    first-turn index a run reaches."""
    return -(index * 1_000 + turn)


# --------------------------------------------------------------------------------------------
# Open-loop arrivals


def arrival_times(kind: str, rate: float, seed: int, level: int, burstiness: float = 1.0):
    """Seeded arrival offsets (seconds of the arm's time from the level's start) of requests
    offered at `rate` per second, without end: "poisson" (exponential gaps), "constant" (1/rate),
    "gamma" (gaps Gamma(shape=burstiness, scale=1/(rate x burstiness)): the mean gap is 1/rate;
    burstiness 1 is Poisson, below 1 burstier, above 1 more even). The same seed and level give
    the same times on every arm and run."""
    rng = random.Random(f"specmon-arrivals/{seed}/{level}")
    t = 0.0
    while True:
        if kind == "constant":
            gap = 1.0 / rate
        elif kind == "gamma":
            gap = rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        else:
            gap = rng.expovariate(rate)
        t += gap
        yield t
