"""`specmon report`: tables checked against the recorded CSVs, matched interactivity on a session
written by the real SessionWriter with known levels, cost and power formulas, figures, HTML, bad input.

Expected numbers are computed here from the CSV files (csv module) or by hand, not by the report's
own helpers.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from helpers.simproc import REPO
from specmon.errors import UsageError
from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, KneeCalled, LaunchContext, LevelFinished, LevelResult, PredictedKnee, RampPlan,
    RampStarted, Sample, SamplesTick, SessionEnded, SessionStarted,
)
from specmon.report.compare import drafter_comparisons, groups
from specmon.report.data import load_sessions
from specmon.report.frontier import cost_per_million, matched, tok_s_per_mw
from specmon.analysis.knee import power_knee
from specmon.report.markdown import render_md
from specmon.report.tables import build_report
from specmon.session.folder import SessionWriter
from helpers.report import specmon

DATA = REPO / "tests" / "data"
SESSIONS = [DATA / "session_sim_3arm", DATA / "session_demo_2arm", DATA / "session_sim_1arm"]


def md_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Every markdown table under a '### title' (or, untitled, its '## section') heading: title -> rows
    as header->cell dicts."""
    out: dict[str, list[dict[str, str]]] = {}
    lines = text.splitlines()
    title = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("### ") or line.startswith("## "):
            title = line.split(" ", 1)[1]
        elif line.startswith("| ") and title is not None and title not in out:
            headers = [c.strip() for c in line.strip("|").split(" | ")]
            rows = []
            i += 2  # skip the |---| line
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i][1:-1].split(" | ")]
                rows.append(dict(zip(headers, cells)))
                i += 1
            out[title] = rows
            continue
        i += 1
    return out


def report_md(paths, at=None, price=None) -> str:
    sessions, arms = load_sessions([Path(p) for p in paths])
    return render_md(build_report(sessions, arms, at, price))


def fmt(cell: str, f: str) -> str:
    if cell == "":
        return ""
    v = float(cell)
    return {"1": f"{v:.1f}", "3": f"{v:.3f}", "2": f"{v:.2f}", "ms": f"{v * 1000:.2f}", "pct": f"{v * 100:.1f}"}[f]


# column in the report -> (levels.csv column, format)
EXPECTED_COLUMNS = {
    "achieved C": ("achieved_concurrency", "1"), "out tok/s": ("output_tok_s", "1"),
    "per-user tok/s": ("per_user_tok_s", "1"), "TTFT p50 s": ("ttft_p50_s", "3"), "TTFT p90 s": ("ttft_p90_s", "3"),
    "TTFT p99 s": ("ttft_p99_s", "3"), "TPOT p50 ms": ("tpot_p50_s", "ms"), "ITL p50 ms": ("itl_p50_s", "ms"),
    "ITL p99 ms": ("itl_p99_s", "ms"), "accept len": ("accept_length", "2"), "queue p50 s": ("queue_time_p50_s", "3"),
    "KV max %": ("kv_usage_max", "pct"),
}


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.name)
def test_level_tables_hold_the_recorded_numbers(session):
    tables = md_tables(report_md([session]))
    with open(session / "levels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        got = [r for r in tables[row["arm"]] if r["C"] == row["offered_concurrency"]]
        assert len(got) == 1, (row["arm"], row["offered_concurrency"])
        cells = got[0]
        for col, (src, f) in EXPECTED_COLUMNS.items():
            assert cells[col] == fmt(row[src], f), (row["arm"], row["offered_concurrency"], col)
        assert cells["ok"] == row["ok"] and cells["failed"] == row["failed"]
        assert cells["valid"] == ("yes" if row["valid"] == "1" else "no")
        assert cells["knee"] == row["knee"]


def test_empty_csv_cells_stay_empty():
    # session_sim_1arm's arm has no GPU (no NVML in the recording): the power cell must be empty,
    # not 0; an unknown accept length in the no-speculation arm of the 3-arm session likewise.
    tables = md_tables(report_md([DATA / "session_sim_1arm"]))
    assert all(r["GPU power W"] == "" for r in tables["fp8-mtp"])
    with open(DATA / "session_sim_3arm" / "levels.csv", newline="") as f:
        nospec = [r for r in csv.DictReader(f) if r["arm"] == "fp8-nospec"]
    tables = md_tables(report_md([DATA / "session_sim_3arm"]))
    for row in nospec:
        cell = next(r for r in tables["fp8-nospec"] if r["C"] == row["offered_concurrency"])["accept len"]
        assert cell == ("" if row["accept_length"] == "" else f"{float(row['accept_length']):.2f}")
    assert any(r["accept_length"] == "" for r in nospec), "fixture should hold an unknown accept length"


def test_session_header_names_the_arms_and_their_server_args():
    text = report_md([DATA / "session_sim_3arm"])
    arms = {r["arm"]: r for r in md_tables(text)["Arms"]}
    assert set(arms) == {"fp8-mtp", "nvfp4-mtp", "fp8-nospec"}
    assert arms["fp8-mtp"]["spec algorithm"] == "EAGLE" and arms["fp8-mtp"]["steps"] == "3"
    assert arms["fp8-mtp"]["draft tokens"] == "4" and arms["fp8-mtp"]["KV dtype"] == "fp8_e4m3"
    assert arms["nvfp4-mtp"]["KV pool tok"] == "211563" and arms["nvfp4-mtp"]["request cap"] == "56"
    assert arms["fp8-nospec"]["spec algorithm"] == ""
    assert "specmon version: 0.1.0" in text and "host: vm" in text


# --------------------------------------------------------------------------------------------
# A session written by the real SessionWriter with known levels


def write_session(path: Path, arm_levels: dict[str, list[tuple]], gpus: dict[str, list[int]] | None = None,
                  server_args: dict[str, dict] | None = None, lengths: tuple[int, int] = (100, 10)) -> Path:
    """arm_levels: arm -> [(C, achieved, out tok/s, per-user tok/s, ttft p50, power W or None), ...]."""
    w = SessionWriter(path)
    layout = {"arms": [{"name": a, "launch": {"gpus": g}} for a, g in (gpus or {}).items()]}
    w(SessionStarted(mode="launch", arms=[ArmSpec(name=a, url="http://127.0.0.1:1") for a in arm_levels],
                     launch=LaunchContext(layout=layout, layout_file=None, logs_dir=None)))
    for a in arm_levels:
        w(ArmInfoUpdated(arm=a, info=ArmInfo(model="m", quantization="fp8", kv_cache_dtype="fp8_e4m3",
                                             mem_fraction_static=0.85, tp_size=1, **(server_args or {}).get(a, {}))))
        pk = PredictedKnee(concurrency=17.8, detail="KV pool test")
        w(KneeCalled(arm=a, definition="predicted", concurrency=17.8, detail=pk.detail, predicted=pk))
    w(RampStarted(plan=RampPlan(levels=[lv[0] for lv in next(iter(arm_levels.values()))], input_len=lengths[0],
                                output_len=lengths[1]), time_scale={}, workload={}))
    t = 1000.0
    for arm, levels in arm_levels.items():
        for i, (c, ach, x, u, ttft, power) in enumerate(levels):
            for k in range(3):
                w(SamplesTick(samples=[Sample(ts=t, arm=arm, up=True, gpu_power_w=power, level=i, offered_concurrency=c)],
                              ts=t))
                t += 1
            w(LevelFinished(level=i, results=[LevelResult(arm=arm, level=i, offered_concurrency=c,
                                                          achieved_concurrency=ach, output_tok_s=x, per_user_tok_s=u,
                                                          ttft_p50_s=ttft, ok=10)]))
    w(SessionEnded(reason="done"))
    return path


KNOWN = [(10, 9.0, 1000.0, 100.0, 1.0, 400.0), (20, 18.0, 1600.0, 80.0, 2.0, 500.0), (40, 36.0, 2000.0, 50.0, 8.0, None)]


def test_matched_interactivity_interpolates_between_levels(tmp_path):
    write_session(tmp_path / "s", {"a": KNOWN}, gpus={"a": [0, 1]})
    _, arms = load_sessions([tmp_path / "s"])
    (arm,) = arms
    assert arm.gpus == 2
    # u=90 is halfway between C=10 (u 100) and C=20 (u 80)
    p = matched(arm, 90)
    assert p.output_tok_s == pytest.approx(1300.0)
    assert p.offered_concurrency == pytest.approx(15.0)
    assert p.achieved_concurrency == pytest.approx(13.5)
    assert p.power_w == pytest.approx(450.0)
    assert p.tok_s_per_gpu == pytest.approx(650.0)
    assert p.tok_s_per_mw == pytest.approx(1300.0 / 450.0 * 1e6)
    # u=60: two thirds of the way from C=20 (u 80) to C=40 (u 50); C=40 has no power reading
    p = matched(arm, 60)
    assert p.output_tok_s == pytest.approx(1600 + 400 * 2 / 3)
    assert p.offered_concurrency == pytest.approx(20 + 20 * 2 / 3)
    assert p.power_w is None and p.tok_s_per_mw is None
    # exactly on a level
    assert matched(arm, 80).output_tok_s == pytest.approx(1600.0)
    # out of range: never extrapolated
    assert matched(arm, 120) is None and matched(arm, 40) is None

    text = report_md([tmp_path / "s"], at=[90, 60, 120], price=2.0)
    rows = {r["per-user tok/s"]: r for r in md_tables(text)["Matched interactivity (same per-user tok/s)"]}
    r90 = rows["90"]
    assert [r90[c] for c in ("arm", "out tok/s", "tok/s/GPU", "GPUs", "C reached", "achieved C", "$ / M tok",
                             "GPU power W", "tok/s per MW")] == [
        "a", "1300.0", "650.0", "2", "15.0", "13.5", f"{2.0 * 2 / (1300 * 3600) * 1e6:.3f}", "450",
        f"{1300 / 450 * 1e6:,.0f}"]
    assert rows["60"]["GPU power W"] == "" and rows["60"]["tok/s per MW"] == ""
    assert rows["120"]["out tok/s"] == "" and rows["120"]["note"] == "out of measured range"


def test_matched_takes_the_best_crossing_on_a_curve_that_doubles_back(tmp_path):
    # per-user 60 is crossed twice: C 10->20 (1000->1400 at f=0.5: 1200) and C 20->40 (1400->800, f=0.5: 1100)
    levels = [(10, 10.0, 1000.0, 70.0, 1.0, None), (20, 20.0, 1400.0, 50.0, 1.0, None),
              (40, 40.0, 800.0, 70.0, 1.0, None)]
    write_session(tmp_path / "s", {"a": levels})
    _, (arm,) = load_sessions([tmp_path / "s"])
    assert matched(arm, 60).output_tok_s == pytest.approx(1200.0)
    assert arm.gpus == 1


def test_cost_per_million_tokens_formula():
    # $2/GPU-hour at 1000 tok/s: 3.6M tokens an hour -> $0.5556 per M tokens; two GPUs cost twice
    assert cost_per_million(2.0, 1000.0) == pytest.approx(2.0 / 3.6)
    assert cost_per_million(2.0, 1000.0, gpus=2) == pytest.approx(4.0 / 3.6)
    # docs/field-notes.md B: 1372 tok/s/GPU at $0.088/M implies ~$0.435/GPU-hour; 974 tok/s at that price -> ~$0.124
    price = 0.088 * 1372 * 3600 / 1e6
    assert cost_per_million(price, 974.0) == pytest.approx(0.124, abs=0.001)
    assert cost_per_million(None, 1000.0) is None and cost_per_million(2.0, None) is None
    assert cost_per_million(2.0, 0.0) is None
    assert tok_s_per_mw(1000.0, 500.0) == pytest.approx(2e6) and tok_s_per_mw(1000.0, None) is None


def test_knees_power_and_predicted(tmp_path):
    # X/TTFT p50: 1000, 800, 250 -> argmax at C=10, falls twice after it: confirmed
    write_session(tmp_path / "s", {"a": KNOWN})
    sessions, arms = load_sessions([tmp_path / "s"])
    k = power_knee(arms[0].levels)
    assert (k.concurrency, k.power, k.confirmed) == (10, pytest.approx(1000.0), True)
    (row,) = md_tables(render_md(build_report(sessions, arms, None, None)))["Knees"]
    assert row["power knee (X/TTFT p50)"] == "10 (confirmed)" and row["predicted (KV/cap)"] == "17.8"
    # eta: (1600-1000)/10/100 = 0.6, (2000-1600)/20/100 = 0.2: both above 0.15, no plateau; c_90: 2000*0.9=1800 -> C=40
    assert row["plateau (D1)"] == "" and row["c_90"] == "40"


def test_repeat_runs_show_mean_and_spread_and_call_noise(tmp_path):
    nospec = {"speculative_algorithm": None}
    mtp = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}
    def levels(x):
        return [(10, 10.0, x, x / 10, 1.0, None)]
    # run 1 and run 2 of the same two arms; mtp's range 1040-1060 overlaps nospec's 1000-1050 at C=10
    for name, xs in (("r1", (1000.0, 1040.0)), ("r2", (1050.0, 1060.0))):
        write_session(tmp_path / name, {"nospec": levels(xs[0]), "mtp": levels(xs[1])},
                      server_args={"nospec": nospec, "mtp": mtp})
    sessions, arms = load_sessions([tmp_path / "r1", tmp_path / "r2"])
    assert [a.key for a in arms] == ["r1/nospec", "r1/mtp", "r2/nospec", "r2/mtp"]
    text = render_md(build_report(sessions, arms, None, None))
    tables = md_tables(text)
    rep = tables["nospec (2 runs: r1, r2)"][0]
    assert rep["runs"] == "2" and rep["out tok/s"] == "1025.0 (1000.0–1050.0)"
    (comp,) = drafter_comparisons(groups(arms))
    assert (comp.base, comp.other, comp.base_reason) == ("nospec", "mtp", "no speculation")
    (row,) = comp.rows
    assert row.ratio == pytest.approx(1050.0 / 1025.0)
    assert row.verdict == "no difference beyond noise"
    drafter = tables["mtp vs nospec (baseline: no speculation)"][0]
    assert drafter["ratio"] == f"{1050 / 1025:.3f}" and drafter["verdict"] == "no difference beyond noise"


def test_drafter_comparison_on_the_recorded_three_arm_session():
    with open(DATA / "session_sim_3arm" / "levels.csv", newline="") as f:
        x = {(r["arm"], r["offered_concurrency"]): float(r["output_tok_s"]) for r in csv.DictReader(f)}
    tables = md_tables(report_md([DATA / "session_sim_3arm"]))
    rows = tables["fp8-mtp vs fp8-nospec (baseline: no speculation)"]
    assert [r["C"] for r in rows] == ["4", "8", "16", "32"]
    for r in rows:
        assert r["ratio"] == f"{x[('fp8-mtp', r['C'])] / x[('fp8-nospec', r['C'])]:.3f}"
        assert r["verdict"] == "single run: spread unknown"
    # nvfp4-mtp differs in weights, not only in drafter: no comparison for it
    assert not any("nvfp4-mtp vs" in t for t in tables)


# --------------------------------------------------------------------------------------------
# The command line


def test_cli_md_prints_and_writes_report_md(tmp_path):
    p = specmon(DATA / "session_sim_3arm", DATA / "session_demo_2arm", "--at", "30,40",
                "--price-per-gpu-hour", "2.5", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    assert "### session_demo_2arm/nvfp4-mtp" in p.stdout and "### session_sim_3arm/fp8-nospec" in p.stdout
    assert (tmp_path / "report.md").read_text() == p.stdout
    assert str(tmp_path / "report.md") in p.stderr


def test_load_sessions_refuses_a_folder_without_levels(tmp_path):
    w = SessionWriter(tmp_path / "s")
    w(SamplesTick(samples=[Sample(ts=1.0, arm="a", up=True)], ts=1.0))
    w(SessionEnded(reason="done"))
    with pytest.raises(UsageError, match="levels.csv: no level rows"):
        load_sessions([tmp_path / "s"])


def test_same_name_with_different_settings_is_two_configurations(tmp_path):
    # docs/field-notes.md C: one arm name, MTP on in one session and off in the other
    write_session(tmp_path / "mtp", {"tp8": [(4, 4.0, 541.9, 135.5, 0.5, None)]},
                  server_args={"tp8": {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3}})
    write_session(tmp_path / "off", {"tp8": [(4, 4.0, 542.2, 135.6, 0.5, None)]})
    sessions, arms = load_sessions([tmp_path / "mtp", tmp_path / "off"])
    gs = groups(arms)
    assert sorted(g.name for g in gs) == ["tp8 [mtp]", "tp8 [off]"]
    (comp,) = drafter_comparisons(gs)
    assert (comp.base, comp.other) == ("tp8 [off]", "tp8 [mtp]")
    assert comp.rows[0].ratio == pytest.approx(541.9 / 542.2)
    assert "Repeat runs" not in render_md(build_report(sessions, arms, None, None))


def test_knees_slo_and_goodput_and_a_plateau_within_the_noise(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "snapshot_apps"))
    import make_session

    # worked by hand in make_session.write_knees: C_SLO 20, goodput peak 20 (unconfirmed), power 10 (confirmed),
    # plateau 10 confirmed at the third level, within the noise
    text = report_md([make_session.write_knees(tmp_path / "k")])
    (row,) = md_tables(text)["Knees"]
    assert row["plateau (D1)"] == "10 (confirmed at level 3, within the noise)"
    assert row["power knee (X/TTFT p50)"] == "10 (confirmed)"
    assert row["SLO knee (C_SLO)"] == "20" and row["goodput knee"] == "20 (not confirmed)"
    assert "- a: SLO (TTFT<=2 s, TPOT<=30 ms) met up to C=20, goodput peak C=20 (1,040 good tok/s) (not confirmed)" in text
    # no SLO given: no SLO columns
    write_session(tmp_path / "s", {"a": KNOWN})
    (row,) = md_tables(report_md([tmp_path / "s"]))["Knees"]
    assert "SLO knee (C_SLO)" not in row and "goodput knee" not in row


def test_same_named_arms_with_different_workloads_are_not_repeats(tmp_path):
    # An 8,800/1,024-token session and a 2,048/256-token one: never averaged together at C=10.
    def levels(x):
        return [(10, 10.0, x, x / 10, 1.0, None)]
    write_session(tmp_path / "long", {"fp8": levels(1000.0)}, lengths=(8800, 1024))
    write_session(tmp_path / "short", {"fp8": levels(3000.0)}, lengths=(2048, 256))
    write_session(tmp_path / "long2", {"fp8": levels(1010.0)}, lengths=(8800, 1024))
    _, arms = load_sessions([tmp_path / "long", tmp_path / "short", tmp_path / "long2"])
    gs = groups(arms)
    assert sorted(len(g.runs) for g in gs) == [1, 2]
    (pair,) = [g for g in gs if len(g.runs) == 2]
    assert {r.session for r in pair.runs} == {"long", "long2"}


def test_cli_never_writes_into_an_input_folder_by_default(tmp_path):
    """`specmon report A B` without --out: a new ./specmon-reports/<date-time>/ in the working
    folder, said on stderr; A and B are left exactly as they were."""
    import shutil

    a, b = tmp_path / "A", tmp_path / "B"
    shutil.copytree(DATA / "session_demo_2arm", a)
    shutil.copytree(DATA / "session_sim_3arm", b)
    before = {p: p.read_bytes() for d in (a, b) for p in d.rglob("*") if p.is_file()}
    work = tmp_path / "work"
    work.mkdir()
    p = specmon(a, b, cwd=work)
    assert p.returncode == 0, p.stderr
    after = {p: p.read_bytes() for d in (a, b) for p in d.rglob("*") if p.is_file()}
    assert after == before  # nothing written, nothing changed in either session folder
    (written,) = (work / "specmon-reports").iterdir()
    assert (written / "report.md").read_text() == p.stdout
    assert str(Path("specmon-reports") / written.name / "report.md") in p.stderr
