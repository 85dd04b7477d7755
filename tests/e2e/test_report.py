"""`specmon report`: tables checked against the recorded CSVs, matched interactivity on a session
written by the real SessionWriter with known levels, cost and power formulas, figures, HTML, bad input.

Expected numbers are computed here from the CSV files (csv module) or by hand, not by the report's
own helpers.
"""

from __future__ import annotations

import csv
from pathlib import Path


from helpers.simproc import REPO
from helpers.report import specmon

DATA = REPO / "tests" / "data"


# --------------------------------------------------------------------------------------------
# The command line


def test_cli_png_and_html(tmp_path):
    p = specmon(DATA / "session_demo_2arm", "--format", "png", "--at", "35,45", "--out", tmp_path / "png")
    assert p.returncode == 0, p.stderr
    paths = [Path(x) for x in p.stdout.split()]
    names = {x.stem for x in paths}
    assert names == {"throughput_vs_concurrency", "ttft_vs_concurrency", "per_user_vs_concurrency", "frontier",
                     "accept_length_vs_concurrency"}
    for x in paths:
        data = x.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, x

    p = specmon(DATA / "session_demo_2arm", "--format", "html", "--out", tmp_path / "html")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "html" / "report.html").read_text()
    assert p.stdout.strip() == str(tmp_path / "html" / "report.html")
    assert html.count("data:image/png;base64,") == 5
    assert "<th>TTFT p99 s</th>" in html and "Matched interactivity" in html
    with open(DATA / "session_demo_2arm" / "levels.csv", newline="") as f:
        first = next(csv.DictReader(f))
    assert f"<td>{float(first['output_tok_s']):.1f}</td>" in html


def _bad(tmp_path, name, files: dict[str, bytes | str]) -> Path:
    d = tmp_path / name
    d.mkdir()
    for fname, content in files.items():
        (d / fname).write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


def _garble(levels_csv: str) -> str:
    """The first row's output_tok_s replaced by a word."""
    lines = levels_csv.splitlines(keepends=True)
    col = lines[0].rstrip("\r\n").split(",").index("output_tok_s")
    cells = lines[1].rstrip("\r\n").split(",")
    assert cells[col], "the recording must have a throughput on its first row"
    cells[col] = "lots"
    lines[1] = ",".join(cells) + "\n"
    return "".join(lines)


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    good = DATA / "session_sim_1arm"
    meta = (good / "session.json").read_text()
    levels = (good / "levels.csv").read_text()
    cases = {
        "missing": (tmp_path / "nope", "nope"),
        "not a session": (_bad(tmp_path, "empty", {"notes.txt": "hi"}), "session.json"),
        "no levels": (_bad(tmp_path, "nolevels", {"session.json": meta, "samples.csv": (good / "samples.csv").read_text()}),
                      "levels.csv"),
        "garbled value": (_bad(tmp_path, "garbled", {"session.json": meta, "levels.csv": _garble(levels)}),
                          "levels.csv:2"),
        "binary": (_bad(tmp_path, "binary", {"session.json": meta, "levels.csv": b"\xff\xfe\x00garbage\x81"}),
                   "levels.csv"),
        "wrong columns": (_bad(tmp_path, "columns", {"session.json": meta, "levels.csv": "a,b\n1,2\n"}), "levels.csv"),
        "bad json": (_bad(tmp_path, "json", {"session.json": "{not json", "levels.csv": levels}), "session.json"),
    }
    for what, (folder, named) in cases.items():
        p = specmon(folder, "--out", tmp_path / "out")
        assert p.returncode == 2, (what, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0], (what, p.stderr)
        assert "Traceback" not in p.stderr
