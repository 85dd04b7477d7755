"""Per-request speculative counts as SGLang returns them, under every name it has used (the load
client reads them from its own requests, analysis sums them per level).

Native /generate puts them in the final event's meta_info; the OpenAI endpoints put the same
figures in the response's `sglext.spec_tokens_details` when the request asked for them with
`return_spec_tokens_details` (0.5.23; one object, or a list of them when n > 1). Names:
- accepted drafts: `spec_num_correct_drafts` (0.5.23), `spec_accept_token_num` (0.5.10)
- proposed drafts: `spec_num_proposed_drafts` (0.5.23), `spec_draft_token_num` (0.5.10); SGLang
  counts them as verify steps x (draft tokens per step - 1)
- histogram: `spec_correct_drafts_histogram` (0.5.23), `spec_accept_histogram` (0.5.10): a list
  whose index k is the number of drafts a verify step accepted (the step then emitted k + 1
  tokens, the bonus token included) and whose value is how many of the request's steps did so.
A server without speculation sends none of them: every field is then None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accept_token_num")
PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_draft_token_num")
HIST_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


@dataclass(frozen=True)
class SpecCounts:
    accepted: Optional[int] = None
    proposed: Optional[int] = None
    hist: Optional[tuple[int, ...]] = None  # index: drafts accepted in a verify step


def _count(meta: dict[str, Any], keys: Iterable[str]) -> Optional[int]:
    for k in keys:
        v = meta.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def spec_counts(meta: Optional[dict[str, Any]]) -> SpecCounts:
    """The counts of one request's final meta_info (or of an OpenAI spec_tokens_details)."""
    if not meta:
        return SpecCounts()
    hist = None
    for k in HIST_KEYS:
        h = meta.get(k)
        if isinstance(h, list) and h and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in h):
            hist = tuple(h)
            break
    return SpecCounts(_count(meta, ACCEPTED_KEYS), _count(meta, PROPOSED_KEYS), hist)


def openai_spec_details(body: Any) -> Optional[dict[str, Any]]:
    """The spec_tokens_details of an OpenAI completion/chat response or stream chunk (the first
    choice's when n > 1), None when it carries none."""
    ext = body.get("sglext") if isinstance(body, dict) else None
    d = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    if isinstance(d, list):
        d = d[0] if d else None
    return d if isinstance(d, dict) else None


def merge_hist(into: dict[int, int], hist: Optional[tuple[int, ...]]) -> None:
    for k, n in enumerate(hist or ()):
        if n:
            into[k] = into.get(k, 0) + n


def hist_text(hist: dict[int, int]) -> Optional[str]:
    """`k:count` pairs, `;`-separated, k ascending (levels.csv accept_hist); None when empty."""
    return ";".join(f"{k}:{hist[k]}" for k in sorted(hist)) or None


def parse_hist_text(text: Optional[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in (text or "").split(";"):
        k, sep, n = part.partition(":")
        if sep and k.strip().isdigit() and n.strip().isdigit():
            out[int(k)] = int(n)
    return out
