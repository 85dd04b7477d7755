"""One parsed scrape of SGLang's /metrics, indexed by metric name without the `sglang` prefix.

SGLang exposes `sglang:<name>` for a plain GET but `sglang_<name>` on sample lines when the
client negotiates OpenMetrics with underscore escaping, while HELP/TYPE keep the colon
(docs/field-notes.md, SGLang notes 0.1 and 0.8). prometheus_client's text parser then files those samples
under `unknown` families, so we never trust family names or types: every *sample* is
normalised on its own, and `sglang:x` and `sglang_x` both land under `x`.

Odd values never crash a reading: NaN or +-Inf reads as unknown (None), a histogram with a
bucket that is not a histogram bucket (`le="abc"`, a count that is NaN, negative or goes down)
reads as no histogram, and a body the parser cannot read raises MetricsParseError (a
ValueError), the only exception `MetricsSnapshot.parse` lets out.

Rank selection (1.2, 1.7 of the reference): scheduler gauges carry `tp_rank`/`pp_rank`, and
with `--enable-metrics-for-all-schedulers` (or TP=2 for a few series) several ranks write the
*same* quantity. Summing them would double count, so we read the series of rank 0. Labels that
cut a quantity into parts instead (SGLang 0.5.23's `is_streaming`, `engine_type`:
sglang_names.SPLIT_LABELS) are summed over: a value or histogram is all its parts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from specmon.sources.sglang_names import SPLIT_LABELS


_PREFIXES = ("sglang:", "sglang_")
# What the (pure Python, ~35 us a line) parser is handed at most (the plain lines' fast path is
# bounded the same). SGLang's own /metrics keeps a
# few hundred lines of the series we read and tens of KiB; a body far past these would hold
# the event loop (and every other arm) for seconds, so it is refused as malformed instead.
MAX_PARSED_LINES = 10_000
MAX_PARSED_CHARS = 2 * 2**20
# Labels that name a copy of the same quantity written by another rank: pick "0".
_RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "dp_rank", "attn_tp_rank")


def bare_name(sample_name: str) -> str:
    for p in _PREFIXES:
        if sample_name.startswith(p):
            return sample_name[len(p):]
    return sample_name


class MetricsParseError(ValueError):
    """A /metrics body that cannot be read (bad syntax, or more than the parser is given)."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets of one histogram series: [(upper bound, cumulative count)], sorted."""

    buckets: tuple[tuple[float, float], ...]
    sum: Optional[float]
    count: Optional[float]


class MetricsSnapshot:
    """The samples of one /metrics body, by bare name. `ts` is the wall time of the scrape."""

    def __init__(self, series: dict[str, list[tuple[dict[str, str], float]]], ts: float):
        self._series = series
        self.ts = ts
        # histogram() answers, by (name, match): a snapshot never changes, and a scrape's window
        # asks the same two snapshots for the same histograms once per percentile and mean
        self._histograms: dict[tuple, Optional[Histogram]] = {}
        self._values: dict[tuple, Optional[float]] = {}  # value() answers, the same way

    @classmethod
    def parse(cls, text: str, ts: float, only: Optional[frozenset[str]] = None) -> "MetricsSnapshot":
        """Parse a /metrics body. `only`: bare names to keep (histograms by base name); lines of
        other metrics are dropped before the (slow, pure Python) parser sees them, which makes
        a busy server's 46 KiB body several times cheaper to read.

        Raises MetricsParseError, and nothing else, for a body that cannot be read."""
        if only is not None:
            series = filtered_series(text, only)
            if series is not None:
                return cls(series, ts)
        text = _keep_lines(text, only)
        # The kept sample lines (no HELP/TYPE left: families play no part) in the plain form SGLang
        # writes are read by one regular expression, about 5x faster; anything else goes to the
        # full parser, so the answer (or the error) is the parser's (tests/unit/test_sources_fuzz.py).
        series = fast_series(text) if only is not None else None
        return cls(series if series is not None else slow_series(text), ts)

    def names(self) -> set[str]:
        return set(self._series)

    def has(self, name: str) -> bool:
        return name in self._series

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return list(self._series.get(name, ()))

    def value(self, name: str, **match: str) -> Optional[float]:
        """The value of `name` for rank 0 among series whose labels include `match`; None if absent."""
        key = (name, *match.items()) if match else name
        try:
            return self._values[key]
        except KeyError:
            v = self._values[key] = self._value(name, match)
            return v

    def _value(self, name: str, match: dict[str, str]) -> Optional[float]:
        rows = self._series.get(name, ())
        if match:
            rows = [(lab, v) for lab, v in rows if _matches(lab, match)]
        picked = _pick_rank0(rows) if len(rows) > 1 else rows
        if not picked:
            return None
        # Several series left after rank selection differ by a label we do not split on
        # (e.g. per-priority copies carry a non-empty `priority`): prefer the unlabelled total.
        plain = [(lab, v) for lab, v in picked if not lab.get("priority")] or picked
        # Series that differ only by a label that cuts the quantity into parts (0.5.23's
        # is_streaming, engine_type: sglang_names.SPLIT_LABELS) are its parts: their sum.
        first = _without_split(plain[0][0])
        v = finite_sum([x for lab, x in plain if _without_split(lab) == first]) if len(plain) > 1 else plain[0][1]
        # NaN or +-Inf: no quantity read from /metrics is infinite, so it is not known.
        return v if v is not None and math.isfinite(v) else None

    def dp_total(self, name: str, **match: str) -> Optional[float]:
        """`name` summed over its data-parallel ranks (each rank's series as `value` picks it: tp,
        pp ranks 0); a series without dp_rank is `value`. None when a rank's value is unknown.
        A worker's counters (tokens decoded, prefilled) are its ranks' together."""
        ranks = {lab.get("dp_rank") for lab, _ in self._series.get(name, ()) if _matches(lab, match)}
        ranks.discard(None)
        if len(ranks) <= 1:
            return self.value(name, **match)
        total = 0.0
        for rank in ranks:
            v = self.value(name, **{**match, "dp_rank": rank})
            if v is None:
                return None
            total += v
        return total

    def histogram(self, name: str, **match: str) -> Optional[Histogram]:
        """The rank-0 series of histogram `name` (buckets from `<name>_bucket`)."""
        key = (name, tuple(sorted(match.items())))
        if key not in self._histograms:
            self._histograms[key] = self._histogram(name, match)
        return self._histograms[key]

    def _histogram(self, name: str, match: dict[str, str]) -> Optional[Histogram]:
        rows = self._series.get(name + "_bucket", ())
        if match:
            rows = [(lab, v) for lab, v in rows if _matches(lab, match)]
        rows = _pick_rank0(rows)
        rows = [(lab, v) for lab, v in rows if not lab.get("priority")] or rows
        if not rows:
            return None
        # Keep the label set (minus `le`) of the first row: other label sets would be other
        # series, except those that differ only by a SPLIT_LABELS label: parts of the same
        # histogram (0.5.23's is_streaming), whose buckets add up.
        key = _bucket_key(rows[0][0])[3]
        parts: dict[tuple, list[tuple[float, float]]] = {}
        for lab, v in rows:
            k, bound, _, free = _bucket_key(lab)
            if bound is not None and free == key:
                parts.setdefault(k, []).append((bound, v))
        layouts = {tuple(sorted(b for b, _ in p)) for p in parts.values()}
        if len(layouts) > 1:
            return None  # parts with other buckets cannot be added: unknown, never a made-up percentile
        summed: dict[float, float] = {}
        for p in parts.values():
            for bound, v in p:
                summed[bound] = summed.get(bound, 0.0) + v
        buckets = sorted(summed.items())
        if not _valid_buckets(buckets):
            return None  # not a histogram we can read: unknown, never a made-up percentile
        count = self._same_series(name + "_count", set(parts))
        return Histogram(
            buckets=tuple(buckets),
            sum=self._same_series(name + "_sum", set(parts)),
            count=count if count is None or count >= 0 else None,
        )

    def _same_series(self, name: str, keys: set) -> Optional[float]:
        """The sum of `name` over the series whose label sets are `keys` (a histogram's parts);
        None when one is missing or not finite."""
        got = [v for lab, v in self._series.get(name, ()) if _bucket_key(lab)[0] in keys]
        if len(got) != len(keys):
            return None
        return finite_sum(got)


_SUFFIXES = ("_bucket", "_sum", "_count")

Series = dict[str, list[tuple[dict[str, str], float]]]


def slow_series(text: str) -> Series:
    """Every sample of an exposition text by bare name, read by prometheus_client's parser."""
    # Imported here: only bodies the fast paths cannot read come this way, and prometheus_client
    # (with http.server behind it) is ~50 ms of every start-up otherwise.
    from prometheus_client.parser import text_string_to_metric_families

    series: Series = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                series.setdefault(bare_name(s.name), []).append((dict(s.labels), float(s.value)))
    except Exception as e:  # the third-party parser raises ValueError, IndexError and friends
        raise MetricsParseError(f"{type(e).__name__}: {str(e)[:80]}") from e
    return series


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR = r'[a-zA-Z][a-zA-Z0-9_]*="[^"\\\n]*"'
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN"
_PLAIN_LINE = re.compile(rf"({_NAME})(?:\{{((?:{_PAIR}(?:,{_PAIR})*)?)\}})? ({_NUMBER})")
_LABEL = re.compile(r'([a-zA-Z][a-zA-Z0-9_]*)="([^"]*)"')


# Characters str.splitlines() breaks a line at besides "\n": a body holding any of them is read
# the long way (_keep_lines), which splits exactly as the parser is handed lines.
_ODD_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
_NUMBER_RE = re.compile(_NUMBER)
_HEAD = re.compile(rf"({_NAME})(?:\{{((?:{_PAIR}(?:,{_PAIR})*)?)\}})?")
_NO_LABELS: dict[str, str] = {}


class PlainLines:
    """The reader of sample lines in the plain form `name{k="v",...} value` that SGLang and smg
    write (no escapes, no timestamp, no spaces but the one before the value, label names starting
    with a letter, each once): what prometheus_client's parser reads from them, several times
    faster. Anything else is left to that parser (slow_series), so the answer or the error is
    always the parser's (tests/unit/test_sources_fuzz.py).

    Its caches are why it is an object: a server writes the same `name{labels}` scrape after
    scrape, so each is read once and its labels kept as one dict, shared by every snapshot that
    holds it (snapshots never change their labels); a collector's window holds 30 scrapes, so
    this is most of a snapshot's memory (75 KiB of SGLang's body each, unshared). Every cache is
    bounded: emptied when full."""

    LABEL_SETS_MAX = 200_000
    HEADS_MAX = 100_000
    PATTERNS_MAX = 64

    def __init__(self) -> None:
        self._label_sets: dict[str, dict[str, str]] = {}  # the labels' text -> their dict
        # a sample line's head (`name{labels}`) -> (bare name, labels), None when it is not plain
        self._heads: dict[str, Optional[tuple[str, dict[str, str]]]] = {}
        self._keep_patterns: dict[frozenset, re.Pattern] = {}

    def fast_series(self, text: str) -> Optional[Series]:
        """slow_series for sample lines (no comments) all in the plain form; None when any line is
        not (then the full parser reads it)."""
        series: Series = {}
        label_sets = self._label_sets
        for line in text.split("\n"):
            if not line:
                continue
            m = _PLAIN_LINE.fullmatch(line)
            if m is None:
                return None
            name, body, value = m.groups()
            if len(value) > 300:
                return None  # the parser reads an integer as int first: one past a float's range is its error
            labels = label_sets.get(body) if body else _NO_LABELS
            if labels is None:
                pairs = _LABEL.findall(body)
                labels = dict(pairs)
                if len(labels) != len(pairs):
                    return None  # a label named twice: the parser's call
                if len(label_sets) >= self.LABEL_SETS_MAX:
                    label_sets.clear()
                label_sets[body] = labels
            series.setdefault(bare_name(name), []).append((labels, float(value)))
        return series

    def plain_sample(self, line: str) -> Optional[tuple[str, dict[str, str], float]]:
        """(bare name, labels, value) of one sample line in the plain form, its name{labels} read
        once; None for any other line. The labels are shared: never change them."""
        head, sep, value = line.rpartition(" ")
        try:
            read = self._heads[head]
        except KeyError:
            read = self._remember_head(head)
        if read is None or not sep or len(value) > 300 or _NUMBER_RE.fullmatch(value) is None:
            return None
        return read[0], read[1], float(value)

    def filtered_series(self, text: str, only: frozenset[str]) -> Optional[Series]:
        """What _keep_lines then fast_series read from `text`, in about a fifth of the time: the
        kept lines are found by one regular expression, and each line's `name{labels}` is read
        once (a server writes the same ones scrape after scrape), its value on every scrape. None
        when the long way must answer: odd line breaks, a kept line not in the plain form, more
        than the parser is given (its error is then _keep_lines')."""
        if not only or any(c in text for c in _ODD_BREAKS):
            return None
        lines = self._keep_pattern(only).findall("\n" + text + "\n")
        if len(lines) > MAX_PARSED_LINES or sum(map(len, lines)) + len(lines) > MAX_PARSED_CHARS:
            return None
        heads = self._heads
        number = _NUMBER_RE.fullmatch
        series: Series = {}
        for line in lines:
            head, sep, value = line.rpartition(" ")
            try:
                read = heads[head]  # the lookup inline: it answers nearly every line of every scrape
            except KeyError:
                read = self._remember_head(head)
            if read is None or not sep or len(value) > 300 or number(value) is None:
                return None
            name, labels = read
            rows = series.get(name)
            if rows is None:
                rows = series[name] = []
            rows.append((labels, float(value)))
        return series

    def _keep_pattern(self, only: frozenset[str]) -> re.Pattern:
        """The sample lines of `only`, as _keep_lines picks them, found by one regular expression
        over the whole body ("\n" before each line; the name is up to the first "{" or space; a
        prefixed name is only ever its bare name, as bare_name strips one prefix)."""
        p = self._keep_patterns.get(only)
        if p is None:
            alt = "|".join(re.escape(n) for n in sorted(only, key=len, reverse=True))
            p = re.compile(rf"\n((?:sglang[:_](?:{alt})|(?!sglang[:_])(?:{alt}))(?:_bucket|_sum|_count)?(?=[{{ \n])[^\n]*)")
            if len(self._keep_patterns) < self.PATTERNS_MAX:
                self._keep_patterns[only] = p
        return p

    def _remember_head(self, head: str) -> Optional[tuple[str, dict[str, str]]]:
        """The (bare name, labels) of a head not seen yet, kept in the bounded cache."""
        read = _plain_head(head)
        if len(self._heads) >= self.HEADS_MAX:
            self._heads.clear()
        self._heads[head] = read
        return read


def _plain_head(head: str) -> Optional[tuple[str, dict[str, str]]]:
    m = _HEAD.fullmatch(head)
    if m is None:
        return None
    name, body = m.groups()
    if not body:
        return bare_name(name), _NO_LABELS
    pairs = _LABEL.findall(body)
    labels = dict(pairs)
    if len(labels) != len(pairs):
        return None  # a label named twice: the parser's call
    return bare_name(name), labels


# The process's reader: every collector's lines land in the same bounded caches (a fleet's
# workers share the label sets they have in common).
PLAIN = PlainLines()
fast_series = PLAIN.fast_series
plain_sample = PLAIN.plain_sample
filtered_series = PLAIN.filtered_series


def _keep_lines(text: str, only: Optional[frozenset[str]]) -> str:
    """The text the parser is given: the sample lines of `only`, or (only=None) the body as it
    is. MetricsParseError when that is more than MAX_PARSED_LINES or MAX_PARSED_CHARS."""
    if only is None:
        if text.count("\n") > MAX_PARSED_LINES or len(text) > MAX_PARSED_CHARS:
            raise MetricsParseError(f"more than {MAX_PARSED_LINES:,} lines or {MAX_PARSED_CHARS // 2**20} MiB")
        return text
    kept = []
    chars = 0
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue  # HELP/TYPE: we read samples one by one, families do not matter
        name = bare_name(line.split("{", 1)[0].split(" ", 1)[0])
        if name not in only:
            for suf in _SUFFIXES:
                if name.endswith(suf) and name[: -len(suf)] in only:
                    break
            else:
                continue
        kept.append(line)
        chars += len(line) + 1
        if len(kept) > MAX_PARSED_LINES:
            raise MetricsParseError(f"more than {MAX_PARSED_LINES:,} lines of the series read")
        if chars > MAX_PARSED_CHARS:
            raise MetricsParseError(f"more than {MAX_PARSED_CHARS // 2**20} MiB of the series read")
    kept.append("")
    return "\n".join(kept)


def finite_sum(values: list[float]) -> Optional[float]:
    """The exact sum of values, None when it is not a finite number: a value is NaN or infinite
    (math.fsum raises for +Inf and -Inf together) or the sum overflows (fsum raises for that too)."""
    try:
        total = math.fsum(values)
    except (ValueError, OverflowError):
        return None
    return total if math.isfinite(total) else None


def _without_split(labels: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in SPLIT_LABELS))


def _split_free(key: tuple) -> tuple:
    """A sorted label tuple without SPLIT_LABELS."""
    return tuple(kv for kv in key if kv[0] not in SPLIT_LABELS)


def _matches(labels: dict[str, str], match: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in match.items())


def _pick_rank0(rows: list[tuple[dict[str, str], float]]) -> list[tuple[dict[str, str], float]]:
    if len(rows) < 2:
        return rows
    for lab, _ in rows:
        if not _bucket_key(lab)[2]:
            break
    else:
        return rows  # every row is rank 0's (or has no rank): nothing to pick
    for label in _RANK_LABELS:
        for lab, _ in rows:
            if label in lab:
                zero = [(lab, v) for lab, v in rows if lab.get(label) in ("0", None)]
                if zero:
                    rows = zero
                break
    return rows


# label set (its items, in order) -> (the set without `le`, sorted; le's bound or None without le;
# whether every rank label it has is "0"; the set without `le` and SPLIT_LABELS): a histogram's
# rows are read once per scrape and per window base, their label sets every time
_BUCKET_KEYS: dict[tuple, tuple[tuple, Optional[float], bool, tuple]] = {}
_BUCKET_KEYS_MAX = 50_000


def _bucket_key(labels: dict[str, str]) -> tuple[tuple, Optional[float], bool, tuple]:
    items = tuple(labels.items())
    try:
        return _BUCKET_KEYS[items]
    except KeyError:
        pass
    le = labels.get("le")
    key = _key_without(labels, "le")
    got = (key, _le(le) if le is not None else None, all(labels.get(k) in ("0", None) for k in _RANK_LABELS),
           _split_free(key))
    if len(_BUCKET_KEYS) >= _BUCKET_KEYS_MAX:
        _BUCKET_KEYS.clear()
    _BUCKET_KEYS[items] = got
    return got


def _key_without(labels: dict[str, str], drop: str) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def _le(text: str) -> float:
    """A bucket's upper bound; NaN when `le` is not one (NaN never passes _valid_buckets)."""
    try:
        bound = float(text)  # "+Inf" included
    except ValueError:
        return math.nan
    return math.nan if bound == -math.inf else bound


def _valid_buckets(buckets: list[tuple[float, float]]) -> bool:
    """Distinct real bounds (or +Inf) with finite, non-negative counts that never go down."""
    prev_bound, prev_count = -math.inf, 0.0
    for bound, count in buckets:
        if math.isnan(bound) or bound <= prev_bound or not math.isfinite(count) or count < prev_count:
            return False
        prev_bound, prev_count = bound, count
    return True


def first_present(snapshot: MetricsSnapshot, names: Iterable[str], **match: str) -> Optional[float]:
    for n in names:
        v = snapshot.value(n, **match)
        if v is not None:
            return v
    return None
