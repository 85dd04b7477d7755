"""How session values become text and back: CSV cells, and events as JSON lines.

CSV cells: unknown is an empty cell (None and NaN alike), booleans are 1/0, a sample's `ts`
keeps milliseconds, a request's and a level window's epoch stamps microseconds (a request's row
is joined with the server's own stamps, a few milliseconds apart at most), other floats six
significant digits. Parsing a cell goes by the dataclass field's
annotation, so a reader never guesses a column's type.

Events: every Event of specmon.model is written as one JSON object, {"type": "<class name>",
...fields}, with nested dataclasses as objects and floats as Python writes them (repr, exact
round trip). Decoding rebuilds the same dataclasses from the annotations, so a decoded event
compares equal to the one that was written.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from functools import lru_cache
from typing import Any, Callable, Optional, Union

from specmon import model

EPOCH_COLUMNS = ("ts",)  # wall epoch seconds, to the millisecond
# Wall epoch seconds to the microsecond (what time.time() resolves): requests.csv's stamps and
# levels.csv's window_start. Older folders hold milliseconds there; a reader takes either.
EPOCH_US_COLUMNS = ("t_start", "t_scheduled", "t_end", "window_start",
                    "ts_read", "received_ts", "finished_ts")  # (the last three: observed_requests.csv)


# --------------------------------------------------------------------------------------------
# CSV cells


def cell(v: Any, col: str) -> str:
    # The common types first, by exact type (a fleet writes tens of thousands of cells a minute);
    # anything else (a bool, a subclass) goes the general way below.
    t = type(v)
    if t is str:
        return v
    if t is float and v == v and col not in EPOCH_US_COLUMNS and col not in EPOCH_COLUMNS:
        return f"{v:.6g}"
    if t is int:
        return str(v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if v != v:  # NaN is "unknown" too
            return ""
        if col in EPOCH_US_COLUMNS:
            return f"{v:.6f}"
        if col in EPOCH_COLUMNS:
            return f"{v:.3f}"
        return f"{v:.6g}"
    return str(v)


def cell_parser(annotation: str) -> Callable[[str], Any]:
    """A cell parser from the dataclass field's annotation (a string under `from __future__`)."""
    if "bool" in annotation:
        return lambda v: v.strip().lower() in ("1", "true", "yes")
    if "int" in annotation:
        return lambda v: int(float(v))
    if "float" in annotation:
        return float
    return str


class CellError(ValueError):
    def __init__(self, column: str, expected: str, got: str) -> None:
        super().__init__(f"column {column!r}: expected a {expected} value, got {got!r}")


def from_row(cls: type, row: dict[str, Optional[str]]) -> Any:
    """A dataclass from a CSV row; an empty or missing cell leaves the field's default (None)."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        raw = row.get(f.name)
        if raw is None:
            continue
        text = raw.strip()
        if text == "":
            continue
        try:
            value = cell_parser(str(f.type))(text)
        except ValueError:
            raise CellError(f.name, str(f.type), text) from None
        if isinstance(value, float) and not math.isfinite(value):
            continue  # an infinite cell is not a measurement
        kwargs[f.name] = value
    return cls(**kwargs)


# --------------------------------------------------------------------------------------------
# Events as JSON


def event_types() -> dict[str, type]:
    return {name: cls for name, cls in vars(model).items()
            if isinstance(cls, type) and issubclass(cls, model.Event) and cls is not model.Event}


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    # model.py imports the plan's model only when asked (it is slow to import): its name is
    # given here for the events whose annotations say RampPlan.
    return typing.get_type_hints(cls, localns={"RampPlan": model.RampPlan})


_PLAIN = frozenset({str, int, float, bool, type(None)})
# Dataclasses whose JSON is not their fields one by one: their own to_plain / from_plain keep the
# shape their figures had as plain dicts (a level's load-client figures: "http_<status>" keys, a
# "pacer" key only on a paced level), so session.json reads the same as it did.
_SHAPED: frozenset[type] = frozenset({model.LoadClientStats, model.ArmBackoff})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # a dataclass's field names, read once per class


def to_plain(v: Any) -> Any:
    """JSON-ready value: dataclasses become objects (their fields only), tuples lists."""
    t = type(v)
    if t in _PLAIN:
        return v
    names = _FIELD_NAMES.get(t)
    if names is None and dataclasses.is_dataclass(v) and not isinstance(v, type):
        if t in _SHAPED:
            return v.to_plain()
        names = _FIELD_NAMES[t] = tuple(f.name for f in dataclasses.fields(v))
    if names is not None:
        # Scalars in place, without a call each: a tick of 64 samples is ~3,000 fields.
        out = {}
        for name in names:
            x = getattr(v, name)
            out[name] = x if type(x) in _PLAIN else to_plain(x)
        return out
    if isinstance(v, dict):
        return {str(k): to_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_plain(x) for x in v]
    return v


def encode_event(e: model.Event) -> str:
    obj = {"type": type(e).__name__, **to_plain(e)}
    return json.dumps(obj, separators=(",", ":"), default=str)


class EventDecodeError(ValueError):
    pass


def decode_event(line: str, types_by_name: Optional[dict[str, type]] = None) -> model.Event:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        raise EventDecodeError(f"not a JSON object ({e})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise EventDecodeError("expected a JSON object with a 'type'")
    cls = (types_by_name or event_types()).get(obj.pop("type"))
    if cls is None:
        raise EventDecodeError("unknown event type")
    return build(cls, obj)


def build(tp: Any, v: Any) -> Any:
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return build(args[0], v) if len(args) == 1 else v
    if origin in (list, tuple):
        if not isinstance(v, list):
            raise TypeError(f"expected a list, got {type(v).__name__}")
        (arg,) = typing.get_args(tp)[:1] or (Any,)
        return [build(arg, x) for x in v]
    if origin is dict:
        if not isinstance(v, dict):
            raise TypeError(f"expected an object, got {type(v).__name__}")
        args = typing.get_args(tp)
        arg = args[1] if len(args) == 2 else Any
        return {k: build(arg, x) for k, x in v.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in _SHAPED:
            return tp.from_plain(v)
        if not isinstance(v, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(v).__name__}")
        hints = _hints(tp)
        kwargs = {f.name: build(hints.get(f.name, Any), v[f.name]) for f in dataclasses.fields(tp)
                  if f.init and f.name in v}
        return tp(**kwargs)
    if tp is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


# --------------------------------------------------------------------------------------------
# The event log's compact ticks (events.jsonl format 2)
#
# A tick's samples are also in samples.csv, and an attached fleet's tick barely changes from one
# second to the next: written in full, a 64-worker tick was ~80 KB a second, 90% of the folder.
# So a tick is written in full once (the first after the writer starts, then one an hour, so a
# reader never depends on a long chain), and otherwise as its changes from the tick before it:
#   {"type":"SamplesTick","ts":T,"d":PATCH}
# PATCH mirrors the tick's JSON: for an object, {key: PATCH} for the keys that changed; for a
# list, {"<index>": PATCH, "n": new length when it changed, or "#": each item's place in the list
# before, -1 for a new one, when items moved}; a replaced value is [value] and a removed key []. A sample whose ts is the tick's own carries no ts. The writer starts each run
# with a {"type":"EventLog","format":2} line, which resets the reader; a log without one
# (format 1, written before) has every tick in full, and is read the same way.

LOG_FORMAT = 2
KEYFRAME_TICKS = 3600  # a full tick at least this often


class _Same:
    pass


_SAME = _Same()  # "no change" in a diff, distinct from any JSON value
_GONE = _Same()  # a key the patch removes


def _diff(a: Any, b: Any, mem: Optional[dict] = None) -> Any:
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        out: dict[str, Any] = {}
        for k, v in b.items():
            if k in a:
                d = _diff(a[k], v, mem)
                if d is not _SAME:
                    out[k] = d
            else:
                out[k] = [v]
        for k in a:
            if k not in b:
                out[k] = []
        return out or _SAME
    if ta is list and tb is list:
        keys = _keys(a, b)
        refs = None if keys is None else _refs(a, b, keys, mem)
        if refs is None:  # by position: item i is item i's change, items past the old end new
            out = {} if len(a) == len(b) else {"n": len(b)}
            base = a
        else:  # items found by their key wherever they moved (_refs says how "#" reads)
            out = {"#": refs}
            base = [_base(a, j, k, mem) for j, k in zip(refs, keys[1])]
        for i, v in enumerate(b):
            d = _diff(base[i], v, mem) if i < len(base) and base[i] is not _GONE else [v]
            if d is not _SAME:
                out[str(i)] = d
        if keys is not None:
            _remember(a, b, keys, mem)
        return out or _SAME
    # Same type and value only: 1, 1.0 and True are equal in Python but not in the JSON read back.
    if ta is tb and a == b:
        return _SAME
    return [b]


# What names an item of a list of objects (a sample's arm, a card's arm and index, a worker's
# url, a rank): a fleet's lists lose and regain items from tick to tick (a late scrape, a card
# read every few ticks), and by position every item after a gap would be written again.
_ITEM_KEYS = ("arm", "index", "url", "worker", "dp_rank")


def _item_key(x: Any) -> Optional[tuple]:
    if type(x) is not dict:
        return None
    key = tuple(x.get(k) for k in _ITEM_KEYS)
    return key if any(v is not None for v in key) else None


def _keys(a: list, b: list) -> Optional[tuple[list, list]]:
    """Both lists' item keys, when every item of both has its own; else None (by position)."""
    if not a or not b:
        return None
    ka = [_item_key(x) for x in a]
    kb = [_item_key(x) for x in b]
    if None in ka or None in kb or len(set(ka)) < len(ka) or len(set(kb)) < len(kb):
        return None
    return ka, kb


# "#" holds, for each new item, where its base is: j >= 0 the item at place j of the list
# before; -1 none (a new item, written whole); -2 - j the last item of place j's key whose
# `state` was other than the one at j (a worker that flips between `up` and a late or down
# reading is written as its changes from its last reading of the same state, not the other).
def _refs(a: list, b: list, keys: tuple[list, list], mem: Optional[dict]) -> Optional[list[int]]:
    ka, kb = keys
    where = {k: i for i, k in enumerate(ka)}
    refs = []
    for k, v in zip(kb, b):
        j = where.get(k, -1)
        if j >= 0 and mem is not None:
            old, alt = a[j], mem.get(k)
            if (alt is not None and type(v) is dict and old.get("state") != v.get("state")
                    and alt.get("state") == v.get("state")):
                j = -2 - j
        refs.append(j)
    if refs == list(range(len(b))):
        return None  # the same items in the same places, maybe with more at the end
    return refs


def _base(a: list, j: int, key: Any, mem: Optional[dict]) -> Any:
    if j >= 0:
        return a[j]
    if j == -1:
        return _GONE
    return (mem or {}).get(key, _GONE)


def _remember(a: list, b: list, keys: tuple[list, list], mem: Optional[dict]) -> None:
    """Each item whose state changed: its reading before, the base for its next flip back."""
    if mem is None:
        return
    old_by_key = dict(zip(keys[0], a))
    for k, v in zip(keys[1], b):
        old = old_by_key.get(k)
        if old is not None and old.get("state") != v.get("state"):
            mem[k] = old


def _patch(a: Any, p: Any, mem: Optional[dict] = None) -> Any:
    if type(p) is list:
        if len(p) > 1:
            raise EventDecodeError("a replaced value is [value]")
        return p[0] if p else _GONE
    if type(p) is not dict:
        raise EventDecodeError("a change is an object or a [value]")
    if type(a) is dict:
        out = dict(a)  # copy on write: the tick before keeps its values
        for k, d in p.items():
            v = _patch(a.get(k), d, mem)
            if v is _GONE:
                out.pop(k, None)
            else:
                out[k] = v
        return out
    if type(a) is list:
        if "#" in p:
            refs = p["#"]
            if type(refs) is not list or any(type(j) is not int or not -1 - len(a) <= j < len(a) for j in refs):
                raise EventDecodeError("a list's '#' names places in the list before")
            lst = []
            for j in refs:
                if j >= 0:
                    lst.append(a[j])
                elif j == -1:
                    lst.append(None)
                else:
                    alt = (mem or {}).get(_item_key(a[-2 - j]))
                    if alt is None:
                        raise EventDecodeError("a change from an earlier reading that was not read")
                    lst.append(alt)
        else:
            n = p.get("n", len(a))
            if type(n) is not int or n < 0:
                raise EventDecodeError("a list's new length is a number")
            lst = list(a[:n]) + [None] * (n - len(a))
        base = list(lst)
        for k, d in p.items():
            if k in ("n", "#"):
                continue
            try:
                i = int(k)
            except ValueError:
                raise EventDecodeError(f"a list's change names item {k!r}") from None
            if not 0 <= i < len(lst):
                raise EventDecodeError(f"a change to item {i} of a list of {len(lst)}")
            lst[i] = _patch(base[i], d, mem)
        keys = _keys(a, lst)
        if keys is not None:
            _remember(a, lst, keys, mem)
        return lst
    raise EventDecodeError("a change to a value that is neither an object nor a list")


def _tick_state(plain: dict[str, Any], ts: Any) -> dict[str, Any]:
    """A tick's JSON as diffs compare it: without its ts, and each sample's ts left out when it
    is the tick's (it changes every tick)."""
    state = {k: v for k, v in plain.items() if k not in ("type", "ts")}
    samples = state.get("samples")
    if type(samples) is list:
        state["samples"] = [{k: v for k, v in s.items() if k != "ts"}
                            if type(s) is dict and s.get("ts") == ts and type(s.get("ts")) is type(ts) else s
                            for s in samples]
    return state


# Events that repeat with few changes, written as their changes from the one before of the
# same type: each tick, and the observed knees (every arm's curve, said every few seconds).
DELTA_TYPES = ("SamplesTick", "ObservedKneesUpdated")


class EventLogEncoder:
    """Events into events.jsonl lines, ticks as their changes (above). One per writer."""

    def __init__(self) -> None:
        self._prev: dict[str, dict[str, Any]] = {}
        self._mem: dict[str, dict] = {}  # per type: each keyed item's last reading of another state
        self._since_full: dict[str, int] = {}
        self._started = False

    def header(self, **extra: Any) -> str:
        """The format line now (a rotated segment's first line, with what it carries), not
        before the first tick."""
        self._started = True
        return json.dumps({"type": "EventLog", "format": LOG_FORMAT, **extra}, separators=(",", ":"), default=str)

    def encode(self, e: model.Event) -> str:
        kind = type(e).__name__
        if kind not in DELTA_TYPES:
            return encode_event(e)
        state = _tick_state(to_plain(e), e.ts)
        head = ""
        if not self._started:
            self._started = True
            head = json.dumps({"type": "EventLog", "format": LOG_FORMAT}, separators=(",", ":")) + "\n"
        prev = self._prev.get(kind)
        if prev is None or self._since_full.get(kind, 0) >= KEYFRAME_TICKS:
            line = encode_event(e)
            self._since_full[kind] = 0
        else:
            d = _diff(prev, state, self._mem.setdefault(kind, {}))
            line = json.dumps({"type": kind, "ts": e.ts, "d": {} if d is _SAME else d},
                              separators=(",", ":"), default=str)
        self._prev[kind] = state
        self._since_full[kind] = self._since_full.get(kind, 0) + 1
        return head + line


class EventLogDecoder:
    """events.jsonl lines back into events, in order (format 1 or 2); `decode` gives None for
    the format line."""

    def __init__(self, types_by_name: Optional[dict[str, type]] = None) -> None:
        self._types = types_by_name or event_types()
        self._prev: dict[str, dict[str, Any]] = {}
        self._mem: dict[str, dict] = {}
        # A rotated segment's format line carries the session's start and each arm's server info
        # (segments.py): here after reading it, for a reader that starts at that segment.
        self.carried: list[model.Event] = []

    def decode(self, line: str) -> Optional[model.Event]:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise EventDecodeError(f"not a JSON object ({e})") from None
        if not isinstance(obj, dict):
            raise EventDecodeError("expected a JSON object with a 'type'")
        kind = obj.get("type")
        if kind == "EventLog":
            fmt = obj.get("format")
            if type(fmt) is not int or fmt > LOG_FORMAT:
                raise EventDecodeError(f"event log format {fmt!r}; this specmon reads up to {LOG_FORMAT}")
            self._prev, self._mem = {}, {}
            carry = obj.get("carry") or []
            if type(carry) is not list or any(type(x) is not dict for x in carry):
                raise EventDecodeError("a segment's 'carry' is a list of events")
            self.carried = [_decode_obj(dict(x), self._types) for x in carry]
            return None
        if kind not in DELTA_TYPES:
            return _decode_obj(obj, self._types)
        ts = obj.get("ts")
        if "d" in obj:
            prev = self._prev.get(kind)
            if prev is None:
                raise EventDecodeError(f"a {kind}'s changes with no full {kind} before them")
            state = _patch(prev, obj["d"], self._mem.setdefault(kind, {}))
        else:
            state = _tick_state(obj, ts)
        self._prev[kind] = state
        full = dict(state)
        if type(full.get("samples")) is list:
            full["samples"] = [{"ts": ts, **s} if type(s) is dict and "ts" not in s else s for s in full["samples"]]
        full["ts"] = ts
        return build(self._types[kind], full)


def _decode_obj(obj: dict[str, Any], types_by_name: dict[str, type]) -> model.Event:
    if not isinstance(obj.get("type"), str):
        raise EventDecodeError("expected a JSON object with a 'type'")
    cls = types_by_name.get(obj.pop("type"))
    if cls is None:
        raise EventDecodeError("unknown event type")
    return build(cls, obj)
