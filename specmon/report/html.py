"""One self-contained report.html: the tables, and the figures embedded as base64 PNGs."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Sequence

from specmon.report.tables import Report, Table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; margin: 0.5em 0; border: 1px solid #eee; }
.note { color: #555; font-size: 0.85em; margin: 0; }
"""


def table_html(t: Table) -> str:
    parts = []
    if t.title:
        parts.append(f"<h3>{escape(t.title)}</h3>")
    parts.append("<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in t.headers) + "</tr></thead><tbody>")
    for r in t.rows:
        parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>")
    parts.append("</tbody></table>")
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
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{escape(report.title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
