"""The report as GitHub-flavoured markdown (stdout and report.md)."""

from __future__ import annotations

from specmon.report.tables import Report, Table


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> list[str]:
    out = []
    if t.title:
        out += [f"### {t.title}", ""]
    out.append("| " + " | ".join(_escape(h) for h in t.headers) + " |")
    out.append("|" + "|".join("---" for _ in t.headers) + "|")
    for r in t.rows:
        out.append("| " + " | ".join(_escape(c) for c in r) + " |")
    if t.notes:
        out.append("")
        out += [f"- {n}" for n in t.notes]
    out.append("")
    return out


def render_md(report: Report) -> str:
    out = [f"# {report.title}", ""]
    for s in report.sections:
        out += [f"## {s.title}", ""]
        if s.lines:
            out += [f"- {line}" for line in s.lines] + [""]
        for t in s.tables:
            out += table_md(t)
    return "\n".join(out).rstrip() + "\n"
