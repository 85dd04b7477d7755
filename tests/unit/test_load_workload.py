"""Workload: seeded exact-length prompts and dataset files (good, bad, filtered)."""

import hashlib
import json
import subprocess
import sys
import tracemalloc

import pytest

from specmon.errors import UsageError
from specmon.load.workload import Workload, load_dataset, random_ids


def test_input_ids_are_exact_reproducible_and_distinct():
    w1, w2 = Workload(input_len=1024, seed=42), Workload(input_len=1024, seed=42)
    p = w1.prompt(3)
    assert p.text is None and len(p.input_ids) == 1024
    assert p.input_ids == w2.prompt(3).input_ids           # same seed, same prompt, any run
    assert p.input_ids != w1.prompt(4).input_ids           # a new prompt per request (no radix hits)
    assert Workload(input_len=1024, seed=43).prompt(3).input_ids != p.input_ids
    assert all(1 <= t < 4000 for t in p.input_ids)          # below the tiny model's 4,097 vocab
    assert p.payload() == {"input_ids": p.input_ids}
    # pinned: the generator must not drift between releases (recorded sessions refer to seeds)
    assert random_ids(1, 0, 5) == random_ids(1, 0, 5)


# sha256 over json.dumps(input_ids) of prompts 0..count-1, recorded from the implementation that
# kept prompts as lists of ints (before the compact cache): storage must not change one id.
IDS_DIGESTS = {
    (42, 1024, 8): "05c4a8f7e7a4c74f78f75dda803c3f40d2b1d9ebfd8843b83558f6c19b2cd924",
    (7, 8800, 4): "6322372a7b6e468dc071ab89c6a63f4ae7117f7b73c8dd040576837c6714d8fc",
    (1, 1, 3): "44eeae840e0094dcebb0e779a060b179ffe25a017485b9844436873c67079fdb",
}


@pytest.mark.parametrize("seed,input_len,count", list(IDS_DIGESTS))
def test_input_ids_are_the_recorded_ones_first_and_from_the_cache(seed, input_len, count):
    w = Workload(input_len=input_len, seed=seed)
    for _ in range(2):  # generated, then served from the cache
        h = hashlib.sha256()
        for i in range(count):
            ids = w.prompt(i).payload()["input_ids"]
            assert type(ids) is list and all(type(t) is int for t in ids)  # what json.dumps sends
            h.update(json.dumps(ids).encode())
        assert h.hexdigest() == IDS_DIGESTS[(seed, input_len, count)]
    # A prompt the cache has no room for is the same prompt, made again from the seed.
    tight = Workload(input_len=input_len, seed=seed, cache_bytes=0)
    assert [tight.prompt(i).input_ids for i in range(count)] == [w.prompt(i).input_ids for i in range(count)]
    assert tight.cached_bytes == 0


def test_a_prompt_is_kept_until_every_arm_took_it():
    w = Workload(input_len=1000, seed=3)
    first = w.prompt(0)  # one arm (the default): nothing is kept
    assert w.cached_bytes == 0 and not w._cache
    w.sharers = 3
    sent = [w.prompt(1).input_ids for _ in range(3)]
    assert sent[0] is sent[1] is sent[2]  # the other arms' takes cost nothing
    assert not w._cache and w.cached_bytes == 0  # the third arm took it: dropped
    assert w.prompt(0).input_ids == first.input_ids


def test_the_prompt_cache_is_bounded_by_bytes_oldest_first_out():
    cap = 1 << 20
    w = Workload(input_len=10_000, seed=3, cache_bytes=cap)
    w.sharers = 2
    made = [w.prompt(i).input_ids for i in range(100)]  # one arm runs 100 prompts ahead
    assert 0 < w.cached_bytes <= cap
    assert 10 <= len(w._cache) <= 14  # 1 MiB / 80 KB of references: the cap, not a count, decides
    assert min(w._cache) == 100 - len(w._cache)  # the newest stay
    # the arm behind gets the same prompts, made again or taken from the cache
    assert [w.prompt(i).input_ids for i in range(100)] == made
    assert not w._cache and w.cached_bytes == 0


def test_prompt_ids_are_shared_int_objects():
    """What a request holds while in flight, traced: 8 bytes a token id (a reference to one of
    the pool's ints), not a fresh Python int of 28 bytes more."""
    w = Workload(input_len=8800, seed=42)
    held = [w.prompt(0)]  # warm anything allocated once (the id pool)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1, 101):
            held.append(w.prompt(i))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / (100 * 8800) < 10  # bytes per id of the 100 prompts held (8 and the list's spare room)
    w2 = Workload(input_len=8800, seed=42, shared_prefix_len=4000, prefix_groups=2)
    p = w2.prompt(5)
    assert p.input_ids[:4000] == w2.prefix_ids(w2.group(5)) and len(p.input_ids) == 8800


def test_jsonl_prompts_with_a_bad_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello"}\nnot json\n\n{"prompt": ""}\n{"prompt": "world"}\n')
    ds = load_dataset(str(f))
    assert ds.prompts == ["hello", "world"]
    assert len(ds.skipped) == 2
    assert ds.skipped[0].startswith(f"{f}:2:") and "not valid JSON" in ds.skipped[0]
    assert ds.skipped[1].startswith(f"{f}:4:")


def test_sharegpt_json(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}]},
        {"conversations": [{"from": "gpt", "value": "only an answer"}]},
        {"conversations": [{"from": "human", "value": "q2"}]},
    ]))
    ds = load_dataset(str(f))
    assert ds.prompts == ["q1", "q2"]
    assert len(ds.skipped) == 1 and "item 2" in ds.skipped[0]


def test_speed_bench_category_filter(tmp_path):
    f = tmp_path / "speed.jsonl"
    rows = [{"category": "low_entropy", "turns": ["def f(x):"]},
            {"category": "high_entropy", "turns": ["write a poem"]},
            {"category": "low_entropy", "turns": []}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ds = load_dataset(str(f), "low_entropy")
    assert ds.prompts == ["def f(x):"] and len(ds.skipped) == 1
    with pytest.raises(UsageError, match="category 'mixed'.*high_entropy, low_entropy"):
        load_dataset(str(f), "mixed")
    w = Workload(dataset=str(f), category="high_entropy", seed=1)
    assert w.prompt(0).text == "write a poem" and w.prompt(5).text == "write a poem"


def test_unusable_files_are_usage_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("garbage\n{\"x\": 1}\n")
    with pytest.raises(UsageError, match="empty.jsonl: no usable prompt"):
        load_dataset(str(empty))
    with pytest.raises(UsageError, match="file not found"):
        load_dataset(str(tmp_path / "missing.jsonl"))
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"prompt": "x"}\n')
    with pytest.raises(UsageError, match="no SPEED-Bench rows"):
        load_dataset(str(plain), "low_entropy")
    with pytest.raises(UsageError, match="--category"):
        Workload(category="low_entropy")


def test_tokenizer_path_must_be_a_directory(tmp_path):
    with pytest.raises(UsageError, match="--tokenizer"):
        Workload(tokenizer=str(tmp_path / "nope"))


def test_text_prompts_have_the_exact_token_count():
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from helpers.realsglang import TINY_MODEL

    if not TINY_MODEL.exists():
        pytest.skip(f"no local tokenizer at {TINY_MODEL}")
    path = str(TINY_MODEL)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    w = Workload(input_len=300, seed=5, tokenizer=path)
    for i in range(3):
        assert len(tok(w.prompt(i).text)["input_ids"]) == 300


def test_ramp_cli_bad_dataset_exits_2_before_sending(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    # port 9 (discard) is never an SGLang server: exit 2 proves the file was read first
    p = subprocess.run([sys.executable, "-m", "specmon", "ramp", "http://127.0.0.1:9", "--levels", "2",
                        "--dataset", str(bad), "--headless", "--out", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "bad.jsonl" in p.stderr and "no usable prompt" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------
# Shared prefixes and multi-turn conversations


def test_shared_prefixes_are_exact_seeded_and_zipf_popular():
    from collections import Counter

    w = Workload(input_len=600, seed=9, shared_prefix_len=400, prefix_groups=8, zipf=1.2)
    prompts = [w.prompt(i) for i in range(2000)]
    assert {len(p.input_ids) for p in prompts} == {600}           # the whole prompt, exact
    groups = [w.group(i) for i in range(2000)]
    for p, g in zip(prompts, groups):
        assert p.input_ids[:400] == w.prefix_ids(g)                # its group's system prompt first
    assert len({tuple(w.prefix_ids(g)) for g in range(8)}) == 8    # eight different system prompts
    assert len({tuple(p.input_ids[400:]) for p in prompts}) == 2000  # and every request its own question
    counts = Counter(groups)
    # Zipf(1.2) over 8 ranks: rank k takes k^-1.2 / H, H = 2.333: 42.9 %, 18.7 %, ..., rank 8 3.5 %
    share = [counts[g] / 2000 for g in range(8)]
    assert share[0] == pytest.approx(0.429, abs=0.03) and share[1] == pytest.approx(0.187, abs=0.025)
    assert share[0] > share[1] > share[3] > share[7] > 0
    # reproducible: another Workload of the same seed sends the same prompts (any arm, any run)
    again = Workload(input_len=600, seed=9, shared_prefix_len=400, prefix_groups=8, zipf=1.2)
    assert [again.prompt(i).input_ids for i in (0, 7, 1999)] == [prompts[i].input_ids for i in (0, 7, 1999)]
    assert Workload(input_len=600, seed=10, shared_prefix_len=400, prefix_groups=8).prefix_ids(0) != w.prefix_ids(0)
    uniform = Counter(Workload(input_len=600, seed=9, shared_prefix_len=400, prefix_groups=4, zipf=0).group(i)
                      for i in range(4000))
    assert all(abs(uniform[g] / 4000 - 0.25) < 0.03 for g in range(4))


def test_shared_prefix_bounds_are_usage_errors():
    with pytest.raises(UsageError, match="--shared-prefix-len: expected fewer tokens than --input-len 100"):
        Workload(input_len=100, shared_prefix_len=100)
    with pytest.raises(UsageError, match="--shared-prefix-len: shared prefixes are built as input_ids"):
        Workload(input_len=100, shared_prefix_len=10, tokenizer="/nonexistent")


def test_turns_resend_the_history_with_the_servers_reply():
    w = Workload(input_len=300, seed=3, shared_prefix_len=200, prefix_groups=2, turns=3)
    conv = w.conversation(5)
    first = conv.next_prompt().input_ids
    assert first == w.prompt(5).input_ids and len(first) == 300
    reply = list(range(5000, 5040))                   # what the server answered: 40 tokens
    conv.reply(True, output_ids=reply, tokens=40)
    second = conv.next_prompt().input_ids
    assert second[:340] == first + reply and len(second) == 300 + 40 + 100   # history + a new 100-id message
    conv.reply(True, output_ids=None, tokens=40)      # no output_ids in the answer: seeded stand-ins
    third = conv.next_prompt().input_ids
    assert third[:440] == second and len(third) == 440 + 40 + 100
    assert conv.next_prompt() is None and conv.done   # three turns, then the conversation is over
    # the same conversation on another arm sends the same messages around its own replies
    other = Workload(input_len=300, seed=3, shared_prefix_len=200, prefix_groups=2, turns=3).conversation(5)
    assert other.next_prompt().input_ids == first
    other.reply(True, output_ids=list(range(7000, 7040)), tokens=40)
    assert other.next_prompt().input_ids[340:] == second[340:]
    # a failed turn ends its conversation (the history is not what a user would resend)
    failed = w.conversation(6)
    failed.next_prompt()
    failed.reply(False)
    assert failed.done and failed.next_prompt() is None


def test_dataset_conversations_stay_conversations(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "q1"},
                           {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"},
                           {"from": "gpt", "value": "a2"}, {"from": "human", "value": "q3"}]},
    ]))
    ds = load_dataset(str(f))
    assert ds.prompts == ["q1"]                                    # single-turn runs: as before
    assert ds.conversations[0].users == ["q1", "q2", "q3"] and ds.conversations[0].replies == ["a1", "a2", None]
    w = Workload(dataset=str(f), turns=5)
    conv = w.conversation(0)
    assert conv.turns == 3                                         # the record has three user turns
    assert conv.next_prompt().text == "q1"
    conv.reply(True, text=" the server's own answer")
    assert conv.next_prompt().text == "q1 the server's own answer\n\nq2"
    conv.reply(True, text=None)                                    # no text came back: the recorded reply
    assert conv.next_prompt().text == "q1 the server's own answer\n\nq2a2\n\nq3"
    assert conv.next_prompt() is None
    speed = tmp_path / "speed.jsonl"
    speed.write_text(json.dumps({"category": "mixed", "turns": ["t1", "t2"]}) + "\n")
    assert load_dataset(str(speed)).conversations[0].users == ["t1", "t2"]


def test_workload_from_plan_carries_the_shape():
    from specmon.plan import RampPlan

    plan = RampPlan(levels=[2], input_len=512, shared_prefix_len=256, prefix_groups=4, zipf=0.5, turns=2)
    w = Workload.from_plan(plan)
    assert (w.shared_prefix_len, w.prefix_groups, w.zipf, w.turns) == (256, 4, 0.5, 2)
    assert w.describe() == {"kind": "input_ids", "input_len": 512, "seed": 42, "shared_prefix_len": 256,
                            "prefix_groups": 4, "zipf": 0.5, "turns": 2}


def test_arrival_times_are_seeded_with_the_asked_rate_and_burstiness():
    from itertools import islice
    from statistics import mean, pstdev

    from specmon.load.workload import arrival_times

    def gaps(kind, burstiness=1.0, seed=1, level=0, n=4000):
        ts = list(islice(arrival_times(kind, 4.0, seed, level, burstiness), n))
        return [b - a for a, b in zip([0.0] + ts, ts)]

    const = gaps("constant")
    assert const[0] == 0.25 and max(const) - min(const) < 1e-9
    for kind, burst, cv in (("poisson", 1.0, 1.0), ("gamma", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)):
        g = gaps(kind, burst)
        assert mean(g) == pytest.approx(0.25, rel=0.08)                  # 4 requests per second
        assert pstdev(g) / mean(g) == pytest.approx(cv, rel=0.12)        # CV = 1 / sqrt(shape)
    assert gaps("poisson") == gaps("poisson")                           # every arm, every run
    assert gaps("poisson", level=1) != gaps("poisson") and gaps("poisson", seed=2) != gaps("poisson")
