"""One self-contained report.html: the tables, and the figures embedded as base64 PNGs (so the
file opens alone, from file:// or as a mail attachment, with nothing beside it).

Layout: a table wider than the window scrolls inside its own box instead of pushing the page
sideways (the per-level tables have 20 columns: at 800 px the page itself overflowed and cut
every row); columns of figures are right-aligned to line up, columns of words left-aligned. tests/unit/test_report_browser.py
opens the file in headless Chromium and checks both."""

from __future__ import annotations

import base64
import re
from html import escape
from pathlib import Path
from typing import Sequence

from specmon.report.tables import Report, Table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child, .t { text-align: left; }
td:first-child { white-space: nowrap; }
.wide { overflow-x: auto; max-width: 100%; }
img { max-width: 100%; margin: 0.5em 0; border: 1px solid #eee; }
.note { color: #555; font-size: 0.85em; margin: 0; }
"""


# A cell that reads as a figure: a number, maybe signed, with a unit or a % after it ("20x", "96.1").
_FIGURE = re.compile(r"[-+]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*(%|x|s|ms|W|GB|GiB|MiB)?")


def _text_columns(t: Table) -> set[int]:
    """Columns holding words (any cell that is not a figure): left-aligned, header and cells."""
    return {i for r in t.rows for i, c in enumerate(r) if c.strip() and not _FIGURE.fullmatch(c.strip())}


def _cell(tag: str, text: str, words: bool) -> str:
    return f'<{tag} class="t">{escape(text)}</{tag}>' if words else f"<{tag}>{escape(text)}</{tag}>"


def table_html(t: Table) -> str:
    parts = []
    if t.title:
        parts.append(f"<h3>{escape(t.title)}</h3>")
    words = _text_columns(t)
    head = "".join(_cell("th", h, i in words) for i, h in enumerate(t.headers))
    parts.append(f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>')
    for r in t.rows:
        parts.append("<tr>" + "".join(_cell("td", c, i in words) for i, c in enumerate(r)) + "</tr>")
    parts.append("</tbody></table></div>")
    parts += [f'<p class="note">{escape(n)}</p>' for n in t.notes]
    return "\n".join(parts)


def render_html(report: Report, figures: Sequence[Path]) -> str:
    body = [f"<h1>{escape(report.title)}</h1>"]
    for s in report.sections:
        body.append(f"<h2>{escape(s.title)}</h2>")
        if s.lines:
            body.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in s.lines) + "</ul>")
        body += [table_html(t) for t in s.tables]
    if figures:
        body.append("<h2>Figures</h2>")
        for p in figures:
            data = base64.b64encode(Path(p).read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{escape(Path(p).stem)}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{escape(Path(p).stem)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(report.title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
