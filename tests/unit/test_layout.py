"""Layout files: the shipped ones load; a bad one is ONE line naming file and key, exit 2, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.errors import UsageError
from specmon.servers.launch import build_argv, build_env, flag_args
from specmon.servers.layout import load_layout, parse_layout, resolve_layout

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["demo", "nvfp4-mtp", "three-drafters", "fp8-vs-nvfp4", "tp8-nextn", "fleet"]

GOOD = """
command: [python, -m, specmon.servers.sim]
arms:
  - name: a
    launch:
      port: 31000
      gpus: [0, 1]
      env: {SGLANG_ENABLE_SPEC_V2: 1}
      flags: {profile: fp8-mtp, mem_fraction_static: 0.85, enable_metrics: true, disable_cuda_graph: false,
              cuda_graph_bs: [1, 2, 4], speculative_algorithm: EAGLE, speculative_eagle_topk: 1}
  - name: b
    attach: http://127.0.0.1:30000/
ramp: {levels: [1, 2], restart_between_levels: true}
"""


def bad(text: str) -> str:
    with pytest.raises(UsageError) as e:
        parse_layout(text, "layouts/x.yaml", env={})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("layouts/x.yaml")
    return msg


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_layouts_load(name):
    layout, warnings = load_layout(name, env={})
    assert layout.arms and layout.ramp is not None
    for arm in layout.launched:
        argv = build_argv(layout, arm, 12345, env={})
        assert argv[-4:] == ["--host", "127.0.0.1", "--port", "12345"]


def test_demo_layout_is_the_field_facts_story():
    layout, _ = load_layout("demo", env={})
    assert [a.name for a in layout.arms] == ["fp8-mtp", "nvfp4-mtp"]
    assert layout.ramp.levels == [10, 14, 16, 18, 20, 22, 24, 26, 30, 40]
    assert [a.launch.flags["profile"] for a in layout.arms] == ["fp8-mtp", "nvfp4-mtp"]


def test_nvfp4_and_tp8_settings():
    a = load_layout("nvfp4-mtp", env={})[0].arms[0].launch
    assert (a.gpus, a.flags["mem_fraction_static"], a.flags["attention_backend"], a.flags["kv_cache_dtype"]) == (
        [0], 0.85, "flashinfer", "fp8_e4m3")
    assert [a.flags[k] for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")] == [3, 1, 4]
    t = load_layout("tp8-nextn", env={})[0].arms[0].launch
    assert t.flags["tp_size"] == 8 and t.env["SGLANG_ENABLE_SPEC_V2"] == "1" and "speculative_eagle_topk" not in t.flags
    assert t.flags["mamba_scheduler_strategy"] == "extra_buffer" and len(t.gpus) == 8


def test_good_layout_argv_and_env():
    layout, warnings = parse_layout(GOOD, "x.yaml", env={})
    a = layout.arms[0]
    argv = build_argv(layout, a, 31000, env={})
    assert argv[0] == sys.executable and argv[1:3] == ["-m", "specmon.servers.sim"]
    assert "--enable-metrics" in argv and "--disable-cuda-graph" not in argv
    i = argv.index("--cuda-graph-bs")
    assert argv[i + 1:i + 4] == ["1", "2", "4"]
    env = build_env(a, {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert layout.attached_specs()[0].url == "http://127.0.0.1:30000"
    # attached arm + restart between levels: said before launch
    assert any("cannot be restarted" in w for w in warnings)
    # topk set with spec v2: warned before launch
    assert any("speculative_eagle_topk" in w and "SGLANG_ENABLE_SPEC_V2" in w for w in warnings)


def test_flag_rendering():
    assert flag_args({"model_path": "m", "enable_metrics": True, "skip": False, "none": None,
                      "json_model_override_args": {"a": 1}}) == [
        "--model-path", "m", "--enable-metrics", "--json-model-override-args", '{"a": 1}']


def test_command_override_from_env():
    text = "arms:\n  - name: a\n    launch: {flags: {profile: fp8-mtp}}\n"
    # without an override the real SGLang command needs a model path
    assert "model_path" in bad(text)
    layout, _ = parse_layout(text, "x.yaml", env={"SPECMON_SGLANG_COMMAND": "python -m specmon.servers.sim"})
    assert build_argv(layout, layout.arms[0], 1, env={"SPECMON_SGLANG_COMMAND": "python -m specmon.servers.sim"})[1:3] == [
        "-m", "specmon.servers.sim"]


@pytest.mark.parametrize("text, expected", [
    ("arms:\n  - name: a\n    launch: {port: abc, flags: {model_path: m}}\n  - name: b\n    launch: {port: abc}\n",
     "layouts/x.yaml: arms[0].launch.port: expected an integer, got 'abc'"),
    ("arms:\n  - name: a\n    attach: http://h:1\n  - name: b\n    launch: {port: x1, flags: {model_path: m}}\n",
     "layouts/x.yaml: arms[1].launch.port: expected an integer, got 'x1'"),
    ("arms: []\n", "layouts/x.yaml: arms: expected at least one arm"),
    ("{}\n", "layouts/x.yaml: arms: required key is missing"),
    ("", "layouts/x.yaml: expected a mapping with 'arms:' at the top level, got an empty file"),
    ("- 1\n", "layouts/x.yaml: expected a mapping with 'arms:' at the top level, got a list"),
    ("arms:\n  - name: a\n    atach: http://h:1\n", "layouts/x.yaml: arms[0].atach: unknown key (expected one of: name, attach, launch, api_key_env)"),
    ("arms:\n  - name: a\n", "layouts/x.yaml: arms[0]: expected exactly one of 'launch:' (start a server) or 'attach:' (a URL)"),
    ("arms:\n  - name: a\n    attach: h:1\n", "layouts/x.yaml: arms[0].attach: expected a URL like http://127.0.0.1:30000, got 'h:1'"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\n  - {name: a, attach: 'http://h:2'}\n",
     "layouts/x.yaml: arms: expected distinct arm names, 'a' appears twice"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\nramp: {levels: [0, 2]}\n",
     "layouts/x.yaml: ramp.levels: expected a non-empty list of positive concurrency levels, got [0, 2]"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\n  - {name: b, attach: 'http://h:2'}\n"
     "ramp: {search: true, slo_ttft_s: 1}\n",
     "layouts/x.yaml: ramp.search: one server at a time (each needs its own levels), the layout has 2 arms"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\nramp: {rates: [1, 2], burstiness: 0.5, arrival: gamma, "
     "turns: 2}\n",
     "layouts/x.yaml: ramp.turns: multi-turn conversations run in closed-loop levels; with rates each arrival is "
     "one request"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\nramp: {levels: [1], restart_between_levels: maybe}\n",
     "layouts/x.yaml: ramp.restart_between_levels: expected true or false, got 'maybe'"),
    ("arms:\n  - {name: a, launch: {flags: {model_path: m, kv_cache_dtype: fp9}}}\n",
     "layouts/x.yaml: arms[0].launch.flags.kv_cache_dtype: expected one of auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1, got 'fp9'"),
    ("arms:\n  - {name: a, launch: {flags: {model_path: m, mem_fraction_static: 1.5}}}\n",
     "layouts/x.yaml: arms[0].launch.flags.mem_fraction_static: expected a number between 0 and 1, got 1.5"),
    ("arms:\n  - {name: a, launch: {flags: {model_path: m, port: 3}}}\n",
     "layouts/x.yaml: arms[0].launch.flags: 'port' is set by specmon: use launch.port instead of a flag"),
    ("arms:\n  - {name: a, launch: {flags: {model_path: m, tp_size: 2}, gpus: [0]}}\n",
     "layouts/x.yaml: arms[0].launch.gpus: tp_size 2 needs 2 GPUs, got [0]"),
    ("arms:\n  - {name: 'a b', attach: 'http://h:1'}\n",
     "layouts/x.yaml: arms[0].name: expected a name of letters, digits, '.', '_' or '-' (used in file names), got 'a b'"),
    ("arms: [\n", "layouts/x.yaml:2:1: invalid YAML: expected the node content, but found '<stream end>'"),
    ("arms:\n  - {name: a, launch: {port: 70000, flags: {model_path: m}}}\n",
     "layouts/x.yaml: arms[0].launch.port: expected a value <= 65535, got 70000"),
    ("arms:\n  - {name: a, attach: 'http://h:1'}\npanes: [kv, nope]\n",
     "layouts/x.yaml: panes: expected pane names from gpu, kv, accept, queue, throughput, ttft, curve, arms, levels, knee, log, got 'nope'"),
])
def test_bad_layouts_one_line(text, expected):
    assert bad(text) == expected


def test_missing_and_named_files(tmp_path):
    with pytest.raises(UsageError, match=r"^nope.yaml: no such layout file \(named layouts: .*demo"):
        resolve_layout("nope.yaml")
    p = tmp_path / "b.yaml"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="expected UTF-8 text"):
        load_layout(p)
    assert resolve_layout("demo").name == "demo.yaml"


def _scalars():
    return st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True),
                     st.text(max_size=8), st.sampled_from(["abc", "http://x:1", "fp9", "EAGLE", "-1"]))


_KEYS = st.sampled_from(["name", "arms", "launch", "attach", "port", "flags", "env", "gpus", "ramp", "levels",
                         "command", "panes", "host", "model_path", "kv_cache_dtype", "x", "speculative_eagle_topk"])
_TREES = st.recursive(_scalars(), lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.dictionaries(_KEYS, _TREES, max_size=5))
def test_hypothesis_structures_never_traceback(tree):
    text = yaml.safe_dump(tree)
    try:
        parse_layout(text, "layouts/h.yaml", env={})
    except UsageError as e:
        assert "\n" not in str(e) and str(e).startswith("layouts/h.yaml")


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_hypothesis_text_never_traceback(text):
    try:
        parse_layout(text, "layouts/h.yaml", env={})
    except UsageError as e:
        assert "\n" not in str(e)


def test_cli_bad_layout_exit_2(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("arms:\n  - name: a\n    launch: {port: abc}\n")
    r = subprocess.run([sys.executable, "-m", "specmon", "launch", str(p), "--headless"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == f"specmon: error: {p}: arms[0].launch.port: expected an integer, got 'abc'"
    assert "Traceback" not in r.stderr and not (tmp_path / "specmon-sessions").exists()


def test_env_references_in_command_and_flags():
    """`${VAR}` names machine-specific paths (the real-SGLang layout's venv and model); an unset one
    is refused before anything starts, naming the key and the variable."""
    text = ('command: ["${VENV}/bin/python", -m, sglang.launch_server]\n'
            "arms:\n  - name: a\n    launch: {flags: {model_path: '${MODELS}/tiny', device: cpu}}\n")
    env = {"VENV": "/opt/sgl", "MODELS": "/data/m"}
    layout, _ = parse_layout(text, "x.yaml", env=env)
    argv = build_argv(layout, layout.arms[0], 7, env=env)
    assert argv[:3] == ["/opt/sgl/bin/python", "-m", "sglang.launch_server"]
    assert argv[3:7] == ["--model-path", "/data/m/tiny", "--device", "cpu"]
    with pytest.raises(UsageError, match=r"^x.yaml: command\[0\]: uses \$\{VENV\}, but the environment variable VENV is not set$"):
        parse_layout(text, "x.yaml", env={"MODELS": "/data/m", "VENV_X": "1"})


def test_real_sglang_layout_needs_its_two_variables():
    real = Path(__file__).resolve().parents[2] / "layouts" / "real-sglang-cpu.yaml"
    env = {"SPECMON_SGLANG_VENV": "/v", "SPECMON_REAL_SGLANG_DIR": "/r"}
    layout, warnings = load_layout(real, env=env)
    argv = build_argv(layout, layout.arms[0], 9, env=env)
    assert argv[:3] == ["/v/bin/python", "-m", "sglang.launch_server"] and "/r/tiny-llama" in argv
    assert build_env(layout.arms[0], {})["SGLANG_USE_CPU_ENGINE"] == "1"
    assert layout.plan().levels == [2, 4, 6, 8, 12]
