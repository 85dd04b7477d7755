"""The one ramp plan model (specmon/plan.py): the command line, a layout's `ramp:` and the demo's
overrides build the same validated RampPlan, with the same bounds, each error in its caller's words.
Also: the URL rules (specmon/urls.py) and the commands' layering."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import pytest

from specmon.cli import build_parser
from specmon.commands.demo import apply_overrides
from specmon.commands.ramp import plan_from_args
from specmon.errors import UsageError
from specmon.load.workload import Workload, load_dataset
from specmon.model import RampPlan
from specmon.plan import MAX_LEVEL, MAX_TOKENS, build_plan
from specmon.servers.layout import load_layout, parse_layout
from specmon.urls import is_loopback, normalize_url
from specmon.wiring import arms_from_args

REPO = Path(__file__).resolve().parents[2]
ARM = "arms:\n  - {name: a, attach: 'http://127.0.0.1:1'}\n"


def layout_plan(ramp: str) -> RampPlan:
    layout, _ = parse_layout(ARM + f"ramp: {ramp}\n", "x.yaml", env={})
    return layout.plan()


def layout_error(ramp: str) -> str:
    with pytest.raises(UsageError) as e:
        parse_layout(ARM + f"ramp: {ramp}\n", "x.yaml", env={})
    return str(e.value)


def cli_plan(*args: str) -> RampPlan:
    return plan_from_args(build_parser().parse_args(["ramp", "http://127.0.0.1:1", *args]))


def test_cli_and_layout_build_the_same_plan():
    from_cli = cli_plan("--levels", "2,4,8", "--input-len", "512", "--output-len", "64", "--requests-per-level", "20",
                        "--settle", "0", "--seed", "7", "--flush-cache", "--slo-ttft", "2", "--slo-tpot", "0.05")
    from_yaml = layout_plan("{levels: [2, 4, 8], input_len: 512, output_len: 64, requests_per_level: 20, settle_s: 0,"
                            " seed: 7, flush_cache: true, slo_ttft_s: 2, slo_tpot_s: 0.05}")
    assert from_cli == from_yaml
    assert (from_cli.level_duration_s, from_cli.requests_per_level) == (None, 20)
    # defaults alike too: neither length given is 60 s levels
    assert cli_plan("--levels", "3") == layout_plan("{levels: [3]}") == RampPlan(levels=[3])
    assert RampPlan(levels=[3]).level_duration_s == 60.0


@pytest.mark.parametrize("ramp, message", [
    ("{levels: [100000000]}", f"x.yaml: ramp.levels: expected concurrency levels of at most {MAX_LEVEL:,} streams "
                              "per arm, got 100000000"),
    ("{levels: [1], input_len: 1.0e+11}", f"x.yaml: ramp.input_len: expected a token count from 1 to {MAX_TOKENS:,}, "
                                          "got 100000000000"),
    ("{levels: [1], output_len: 0}", f"x.yaml: ramp.output_len: expected a token count from 1 to {MAX_TOKENS:,}, got 0"),
    ("{levels: [1], input_len: true}", "x.yaml: ramp.input_len: expected a number, got True"),
    ("{levels: [1], level_duration_s: .nan}", "x.yaml: ramp.level_duration_s: expected a finite number of seconds > 0 "
                                              "and at most 2,592,000, got nan"),
    ("{levels: [1], timeout_s: .inf}", "x.yaml: ramp.timeout_s: expected a finite number of seconds > 0 and at most "
                                       "2,592,000, got inf"),
    ("{levels: [1], settle_s: -1}", "x.yaml: ramp.settle_s: expected a finite number of seconds >= 0 and at most "
                                    "2,592,000, got -1.0"),
    ("{levels: [1], slo_ttft_s: 0}", "x.yaml: ramp.slo_ttft_s: expected a finite number of seconds > 0 and at most "
                                     "2,592,000, got 0.0"),
    ("{levels: [1], level_duration_s: 5, requests_per_level: 3}",
     "x.yaml: ramp.requests_per_level: expected level_duration_s or requests_per_level, not both"),
    ("{levels: [1], category: mixed}", "x.yaml: ramp.category: needs a dataset to keep the category from "
                                       "(a SPEED-Bench JSONL)"),
    ("{levels: [1], dataset: d.jsonl, category: fun}", "x.yaml: ramp.category: expected low_entropy, mixed or "
                                                       "high_entropy, got 'fun'"),
    ("{levels: [1], levelz: 2}", "x.yaml: ramp.levelz: unknown key (expected one of: levels, input_len, output_len, "
                                 "level_duration_s, requests_per_level, settle_s, seed, dataset, category, tokenizer, "
                                 "flush_cache, restart_between_levels, timeout_s, slo_ttft_s, slo_tpot_s, shared_prefix_len, "
                                 "prefix_groups, zipf, turns, think_time_s, rates, arrival, burstiness, max_concurrency, "
                                 "search, attainment, max_level, trace, trace_speed)"),
    ("{input_len: 5}", "x.yaml: ramp.levels: no levels given: expected levels (e.g. 8,16,32), rates (open loop) or search"),
    ("nope", "x.yaml: ramp: expected a mapping, got 'nope'"),
    ("{levels: [1, x]}", "x.yaml: ramp.levels[1]: expected an integer, got 'x'"),
])
def test_layout_ramp_errors_name_file_and_key(ramp, message):
    assert layout_error(ramp) == message


def test_cli_errors_name_the_flag(capsys):
    for args, needle in ((["--levels", "0"], "argument --levels: expected a non-empty list of positive"),
                         (["--levels", "2", "--input-len", "2000000"], "argument --input-len: expected a token count"),
                         (["--levels", "2", "--seed", "1e30"], "argument --seed: expected an integer seed"),
                         (["--levels", "2", "--level-duration", "nan"], "argument --level-duration: expected a finite")):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["ramp", "http://127.0.0.1:1", *args])
        err = capsys.readouterr().err
        assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    # a rule across flags: from the plan itself, still naming the flag
    with pytest.raises(UsageError, match=r"^--category: needs a dataset"):
        cli_plan("--levels", "2", "--category", "mixed")


def test_demo_overrides_are_validated_with_the_plan():
    layout, _ = load_layout("demo", env={})
    before = layout.ramp
    apply_overrides(layout, levels=[2, 3], level_duration=8.0, slo_ttft=1.5)
    plan = layout.plan()
    assert (plan.levels, plan.level_duration_s, plan.requests_per_level, plan.slo_ttft_s) == ([2, 3], 8.0, None, 1.5)
    assert plan.settle_s == min(before.settle_s, 2.0)
    assert before.levels != [2, 3]  # a new plan, the loaded one untouched
    for kwargs, flag in ((dict(level_duration=math.nan), "--level-duration"), (dict(levels=[0]), "--levels"),
                         (dict(levels=[MAX_LEVEL + 1]), "--levels"), (dict(slo_tpot=math.inf), "--slo-tpot"),
                         (dict(level_duration=-1.0), "--level-duration")):
        layout, _ = load_layout("demo", env={})
        with pytest.raises(UsageError, match=rf"^{flag}: expected"):
            apply_overrides(layout, **kwargs)


def test_a_plan_cannot_be_edited_past_its_bounds():
    plan = RampPlan(levels=[1, 2], requests_per_level=4)
    with pytest.raises(ValueError):
        plan.input_len = 0
    with pytest.raises(ValueError):
        plan.levels = [10**9]
    with pytest.raises(ValueError):
        dataclasses.replace(plan, settle_s=math.nan)
    plan.input_len = 77
    assert dataclasses.asdict(plan)["input_len"] == 77  # still a dataclass to session/


def test_build_plan_labels():
    with pytest.raises(UsageError, match=r"^x.yaml: ramp.output_len: expected a token count"):
        build_plan({"levels": [1], "output_len": -3}, label=lambda loc: "x.yaml: ramp." + ".".join(map(str, loc)))


def test_workload_refuses_a_length_past_the_bound():
    with pytest.raises(UsageError, match=r"^--input-len: expected a token count from 1 to 1,000,000, got 10000000000$"):
        Workload(input_len=10**10)
    w = Workload(input_len=MAX_TOKENS, seed=1)
    assert len(w.prompt(0).input_ids) == MAX_TOKENS
    w.prompt(1)
    assert len(w._cache) <= 16  # long prompts are not all kept


def test_deep_and_huge_dataset_lines_are_skipped_and_counted(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "one"}\n' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n" + "9" * 5000 + "\n"
                 + "[" * 100_000 + "\n" + '{"prompt": "two"}\n')
    ds = load_dataset(str(f))
    assert ds.prompts == ["one", "two"]
    assert [s.split(": ", 1)[0] for s in ds.skipped] == [f"{f}:2", f"{f}:3", f"{f}:4"]
    assert "nested too deeply" in ds.skipped[0] and "nested too deeply" in ds.skipped[2]


def test_dataset_path_that_cannot_be_stat_ed(tmp_path):
    with pytest.raises(UsageError, match="cannot use this path"):
        load_dataset(str(tmp_path / ("x" * 5000)))


# --------------------------------------------------------------------------------------------
# URLs


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:30000/", "http://127.0.0.1:30000"),
    ("https://[::1]:8443", "https://[::1]:8443"),
    (" http://gpu-host:30000 ", "http://gpu-host:30000"),
])
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize("url, words", [
    ("http://[::1", "expected a URL like"), ("http://h:99999", "port from 1 to 65535"), ("http://h:0", "port"),
    ("http://h:", "port"), ("http://h:x", "port"), ("h:1", "expected a URL like"), ("ftp://h:1", "expected a URL"),
    ("http://h:1/v1", "no path"), ("http://h:1?x=1", "no path"), ("http://a b:1", "expected a URL"),
    ("http://[zz]:1", "expected a URL"), ("", "expected a URL"),
])
def test_bad_urls(url, words):
    with pytest.raises(ValueError, match=words):
        normalize_url(url)


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:1", True), ("http://127.200.3.4:1", True), ("http://localhost:1", True),
    ("http://LocalHost.:1", True), ("http://[::1]:1", True), ("http://[::ffff:127.0.0.1]:1", True),
    ("http://192.0.2.1:1", False), ("http://0.0.0.0:1", False), ("http://10.0.0.1:1", False),
    ("http://gpu-host:1", False), ("http://localhost.example.com:1", False), ("http://[::2]:1", False),
    ("http://128.0.0.1:1", False), ("http://[::1", False),
])
def test_is_loopback(url, local):
    assert is_loopback(url) is local


def test_layout_attach_uses_the_same_url_rules():
    layout, _ = parse_layout("arms:\n  - {name: a, attach: 'http://[::1]:30000/'}\n", "x.yaml", env={})
    assert layout.attached_specs()[0].url == "http://[::1]:30000"
    assert arms_from_args(["http://[::1]:30000/"], [], None)[0].url == "http://[::1]:30000"
    for url in ("http://h:99999", "http://[::1", "http://h:1/v1"):
        with pytest.raises(UsageError, match=r"^x.yaml: arms\[0\].attach: expected"):
            parse_layout(f"arms:\n  - {{name: a, attach: '{url}'}}\n", "x.yaml", env={})


# --------------------------------------------------------------------------------------------
# Layering


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_command_module_imports_another():
    commands = REPO / "specmon" / "commands"
    for path in sorted(commands.glob("*.py")):
        others = {m for m in _imports(path) if m.startswith("specmon.commands") and m != "specmon.commands"}
        assert not others, f"{path.name} imports {sorted(others)}: shared wiring belongs in specmon/wiring.py"


def test_layouts_and_plan_do_not_reach_the_front_end():
    for rel in ("specmon/servers/layout.py", "specmon/plan.py", "specmon/urls.py"):
        bad = {m for m in _imports(REPO / rel) if m.startswith(("specmon.wiring", "specmon.commands", "specmon.tui"))}
        assert not bad, (rel, bad)


def test_names_and_key_variables_from_the_command_line_are_one_line():
    for names, key, words in ((["a\nb=http://127.0.0.1:1"], None, "printable"),
                              ([], "A\nB", "NAME of an environment variable"),
                              ([], "1BAD", "NAME of an environment variable")):
        with pytest.raises(UsageError, match=words) as e:
            arms_from_args(["http://127.0.0.1:1"], names, key)
        assert "\n" not in str(e.value)


def test_a_layout_with_a_plan_dumps_it_as_its_fields():
    # launch mode records the layout (wiring.run_layout): the plan is a plain dataclass there
    layout, _ = parse_layout(ARM + "ramp: {levels: [2, 4], requests_per_level: 8}\n", "x.yaml", env={})
    dumped = layout.as_dict()
    assert "source" not in dumped
    assert dumped["ramp"] == dataclasses.asdict(layout.plan())
    assert dumped["ramp"]["levels"] == [2, 4] and dumped["ramp"]["level_duration_s"] is None
