"""`specmon report SESSION_DIR [SESSION_DIR ...] [--format md|png|html] [--price-per-gpu-hour X] [--at 29,46,63] [--out DIR]`

md: the report on stdout and in OUT/report.md; png: the figures in OUT (paths printed);
html: OUT/report.html with the tables and the figures embedded. OUT defaults to
./specmon-reports/<date-time>/ (a new folder beside ./specmon-sessions/): a report never writes
into a session folder it reads unless --out names one. Where it wrote is printed (stderr for md,
whose report goes to stdout).
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

    from specmon.report.observed import observed_only, observed_section
    from specmon.report.tables import Report
    from specmon.session.folder import read_meta

    # Folders with observed knees and no ramp level (an attach, a Prometheus history): their
    # observed knees and curves only. Any other folder: the ramp report, with them added.
    paths = [Path(p) for p in args.sessions]
    metas = [(p, read_meta(p)) if p.is_dir() and (p / "session.json").exists() else (p, None) for p in paths]
    if all(m is not None and observed_only(p, m) for p, m in metas):
        sections = [observed_section(p.resolve().name, m) for p, m in metas]  # type: ignore[arg-type]
        report = Report("specmon report: " + ", ".join(p.resolve().name for p in paths),
                        [s for s in sections if s is not None])
        sessions, arms = [], []
    else:
        # --price-per-gpu-hour and --at are finite and positive: checked as they are parsed (cli.py)
        sessions, arms = load_sessions(paths)
        report = build_report(sessions, arms, args.at, args.price_per_gpu_hour)
        report.sections += [s for s in (observed_section(p.resolve().name, m) for p, m in metas if m is not None)
                            if s is not None]
    out = Path(args.out) if args.out else default_report_dir()
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

    figures = write_figures(arms, at, out) if arms else []
    if args.format == "png":
        for p in figures:
            print(p)
        print(f"wrote {len(figures)} figures in {out}", file=sys.stderr)
        return 0
    from specmon.report.html import render_html

    path = out / "report.html"
    _write(path, render_html(report, figures))
    print(path)
    return 0


def default_report_dir() -> Path:
    """./specmon-reports/<date-time>/, a second later when that folder exists already."""
    from specmon.session.folder import default_out_dir

    out = default_out_dir("specmon-reports")
    while out.exists():  # two reports in one second: never mix their files
        import time

        time.sleep(1.0)
        out = default_out_dir("specmon-reports")
    return out


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
