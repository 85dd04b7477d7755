"""`specmon report SESSION_DIR [SESSION_DIR ...] [--format md|png|html] [--price-per-gpu-hour X] [--at 29,46,63] [--out DIR]`

md: the report on stdout and in OUT/report.md; png: the figures in OUT (paths printed);
html: OUT/report.html with the tables and the figures embedded. OUT defaults to the first
session folder's report/ subfolder.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specmon.errors import UsageError


def run(args) -> int:
    from specmon.report.data import load_sessions
    from specmon.report.frontier import default_targets
    from specmon.report.markdown import render_md
    from specmon.report.tables import build_report

    # --price-per-gpu-hour and --at are finite and positive: checked as they are parsed (cli.py)
    sessions, arms = load_sessions([Path(p) for p in args.sessions])
    out = Path(args.out) if args.out else sessions[0].path / "report"
    report = build_report(sessions, arms, args.at, args.price_per_gpu_hour)
    at = list(args.at) if args.at else default_targets(arms)
    _mkdir(out)

    if args.format == "md":
        text = render_md(report)
        sys.stdout.write(text)
        path = out / "report.md"
        _write(path, text)
        print(f"wrote {path}", file=sys.stderr)
        return 0

    from specmon.report.plots import write_figures

    figures = write_figures(arms, at, out)
    if args.format == "png":
        for p in figures:
            print(p)
        return 0
    from specmon.report.html import render_html

    path = out / "report.html"
    _write(path, render_html(report, figures))
    print(path)
    return 0


def _mkdir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{out}: cannot create the output folder ({e.strerror}); give a writable --out DIR")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{path}: cannot write ({e.strerror}); give a writable --out DIR")
