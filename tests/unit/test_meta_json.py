"""session.json's text: MetaJson writes what json.dumps(meta, indent=2, default=str) writes, write
after write, while parts of the meta change (their cached text must never outlive a change)."""

import json
import random
from pathlib import Path

from specmon.session.folder import MetaJson


def _same(mj: MetaJson, meta: dict) -> None:
    assert mj.dumps(meta) == json.dumps(meta, indent=2, default=str)


def test_empty_and_flat():
    mj = MetaJson()
    _same(mj, {})
    _same(mj, {"a": 1, "b": None, "c": "x\ny \"q\"", "d": 1.5, "e": True})
    _same(mj, {"a": [], "b": {}, "c": [[]], "d": {"x": {}}})


def test_a_change_that_equals_the_old_value_still_shows():
    # 1 == 1.0 == True in Python, and each is written differently
    mj = MetaJson()
    for v in (1, 1.0, True, [1], [1.0], [True], {"k": 1}, {"k": True}, {"k": 1.0}):
        _same(mj, {"knees": v, "arms": [{"name": "a"}]})


def test_odd_values_go_through_default():
    mj = MetaJson()
    _same(mj, {"path": Path("/tmp/x"), "nested": {"p": Path("/y")}, "nan": float("nan")})


def test_random_edits_write_after_write():
    rng = random.Random(7)

    def value(depth: int):
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind == 0:
            return rng.choice([0, 1, -3, 10**20])
        if kind == 1:
            return rng.choice([0.0, 1.0, 2.5, -1e-9, float("inf")])
        if kind == 2:
            return rng.choice([True, False, None])
        if kind == 3:
            return rng.choice(["", "a", "ü", "line\nbreak", "tab\t"])
        if kind == 4:
            return rng.choice([1, 1.0, True])
        if kind == 5:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice("abcdef"): value(depth + 1) for _ in range(rng.randrange(4))}

    mj = MetaJson()
    meta = {k: value(0) for k in "abcdefgh"}
    for _ in range(400):
        _same(mj, meta)
        meta = dict(meta)
        for _ in range(rng.randrange(3)):
            meta[rng.choice("abcdefghij")] = value(0)
        if rng.random() < 0.1 and meta:
            del meta[rng.choice(list(meta))]
