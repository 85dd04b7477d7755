"""Hypothesis: thousands of mutated layouts (starting from the shipped files in layouts/) and of
command lines (parser + plan validation, in-process: nothing is started or contacted). The only
way out for bad input is a one-line UsageError or argparse's SystemExit(2); a layout that is
accepted must work for everything downstream (plan, URLs, argv, session.json dump)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import math
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.cli import build_parser
from specmon.commands.demo import apply_overrides
from specmon.commands.ramp import plan_from_args
from specmon.errors import UsageError
from specmon.model import RampPlan
from specmon.plan import MAX_LEVEL, MAX_LEVEL_COUNT, MAX_SECONDS, MAX_TOKENS
from specmon.servers.launch import build_argv, build_env
from specmon.servers.layout import load_layout, parse_layout
from specmon.urls import normalize_url
from specmon.wiring import arms_from_args, require_loopback_or_yes

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "layouts").glob("*.yaml"))}
TREES = {name: yaml.safe_load(text) for name, text in LAYOUTS.items()}
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's when built with it: faster
ENV = {"SPECMON_SGLANG_VENV": "/opt/venv", "SPECMON_REAL_SGLANG_DIR": "/opt/real"}
LABEL = "layouts/fuzz.yaml"
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NASTY_TEXT = ["http://[::1", "http://127.0.0.1:99999", "http://h:0", "http://h:", "http://h:1/x", "h:1", "1e11",
              "nan", "inf", "-inf", "${UNSET_VAR}", "${SPECMON_SGLANG_VENV}", "-1", "", "0", " ", "\x00", "EAGLE",
              "fp8_e4m3", "low_entropy", "a b", "é", "1,2", "http://192.0.2.1:30000", "..", "/", "True",
              "two\nlines", "a=http://127.0.0.1:1\n", "\r", "\u2028"]


# Strategies are built once: building one per draw costs more than the whole check.
SCALARS = st.one_of(
        st.none(), st.booleans(), st.integers(-5, 70_000), st.integers(-(2**80), 2**80),
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e11, 1e8, 100_001, 0.5, -0.0, 2.0**63]),
        st.text(max_size=12), st.sampled_from(NASTY_TEXT),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["x", "levels", "port", "attach", "flags"]), inner, max_size=3)), max_leaves=8)
NAMES = st.sampled_from(sorted(TREES))
OPS = st.sampled_from(["replace", "replace", "replace", "delete", "add_key", "wrap", "duplicate"])
KEYS = st.sampled_from(["bogus", "levels", "attach", "port", "ramp", "interval_s", "input_len"])
INSERTS = st.one_of(st.text(max_size=6), st.sampled_from(
    ["\n", ": ", "- ", "[", "{", "}", "]", "'", '"', "&a", "*a", "!!python/object:os.system", "99999",
     "1e11", ".nan", ".inf", "\t", "~", "<<: *a", "http://[::1"]))


def _paths(node, prefix=()):
    """Every place in a parsed YAML tree: the keys and indices that lead to it."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(tree, path, op, value, key):
    if not path:
        return value if op == "replace" else tree
    parent = tree
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if op == "replace":
        parent[last] = value
    elif op == "delete":
        del parent[last]
    elif op == "add_key" and isinstance(parent[last], dict):
        parent[last][key] = value
    elif op == "wrap":
        parent[last] = [parent[last]]
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    return tree


@st.composite
def mutated_trees(draw):
    tree = copy.deepcopy(TREES[draw(NAMES)])
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(tree))
        path = paths[draw(st.integers(0, len(paths) - 1))]
        tree = _mutate(tree, path, draw(OPS), draw(VALUES), draw(KEYS))
    return yaml.dump(tree, Dumper=_DUMPER, allow_unicode=True, sort_keys=False)


@st.composite
def mutated_texts(draw):
    text = LAYOUTS[draw(NAMES)]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 40)))
        text = text[:i] + draw(INSERTS) + text[j:]
    return text


def check_layout(text: str) -> None:
    try:
        layout, warnings = parse_layout(text, LABEL, env=ENV)
    except UsageError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(LABEL), msg
        return
    # Accepted: everything after loading must work on it.
    assert all(isinstance(w, str) and "\n" not in w for w in warnings)
    plan = layout.plan()
    if plan is not None:
        assert RampPlan(**dataclasses.asdict(plan)) == plan
        assert 1 <= len(plan.levels) <= MAX_LEVEL_COUNT and max(plan.levels) <= MAX_LEVEL
        assert 1 <= plan.input_len <= MAX_TOKENS and 1 <= plan.output_len <= MAX_TOKENS
        for s in (plan.level_duration_s, plan.timeout_s, plan.slo_ttft_s, plan.slo_tpot_s, plan.settle_s):
            assert s is None or (math.isfinite(s) and 0 <= s <= MAX_SECONDS)
    assert math.isfinite(layout.interval_s) and math.isfinite(layout.startup_timeout_s)
    for spec in layout.attached_specs():
        assert normalize_url(spec.url) == spec.url and 1 <= (urlsplit(spec.url).port or 80) <= 65535
    for arm in layout.launched:
        argv = build_argv(layout, arm, 12345, env=ENV)
        assert all(isinstance(a, str) for a in argv)
        build_env(arm, {"PATH": "/bin"})
    json.dumps(layout.as_dict())


@settings(FUZZ, max_examples=1000)
@given(text=mutated_trees())
def test_mutated_layout_trees_never_traceback(text):
    check_layout(text)


@settings(FUZZ, max_examples=1000)
@given(text=mutated_texts())
def test_mutated_layout_texts_never_traceback(text):
    check_layout(text)


# --------------------------------------------------------------------------------------------
# Command lines

FLAGS = {
    "ramp": ["--levels", "--input-len", "--output-len", "--dataset", "--category", "--tokenizer", "--seed",
             "--level-duration", "--requests-per-level", "--settle", "--flush-cache", "--slo-ttft", "--slo-tpot",
             "--interval", "--name", "--api-key-env", "--yes", "--headless", "--out"],
    "attach": ["--name", "--api-key-env", "--interval", "--duration", "--isl", "--osl", "--headless", "--out"],
    "demo": ["--levels", "--speed", "--level-duration", "--slo-ttft", "--slo-tpot", "--headless", "--out"],
    "launch": ["--interval", "--headless", "--out"],
    "report": ["--format", "--price-per-gpu-hour", "--at", "--out"],
    "replay": ["--speed", "--headless"],
}
NUMBERS = ["0", "1", "-1", "2", "1e4", "1e11", "1e400", "nan", "inf", "-inf", "0.5", "100000", "100001",
           "100000000", "12345678901234567890", "1_000", "0x10", "１２", " 3 ", "", "2,4,8", "1,,2", ",", "4,0",
           "3.0", "1e-300", "2592000", "2592001", "3600.5"]
URLS = ["http://127.0.0.1:9", "http://[::1", "http://[::1]:9", "http://localhost:1", "http://192.0.2.1:1",
        "http://h:99999", "h:1", "a=http://127.0.0.1:1", "=http://127.0.0.1:1", "x=", "a=http://[::1", "PATH"]


def _not_help(token: str) -> bool:
    head = token.split("=", 1)[0]
    return not (head.startswith("-h") or (len(head) >= 3 and ("--help".startswith(head) or "--version".startswith(head))))


COMMANDS = st.sampled_from(sorted(FLAGS))
FLAG_OF = {c: st.sampled_from(f) for c, f in FLAGS.items()}
KINDS = st.sampled_from(["flag+value", "flag+value", "flag=value", "flag", "value", "junk"])
ARG_VALUES = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(URLS), st.sampled_from(NASTY_TEXT),
                       st.text(max_size=10))
JUNK = st.sampled_from(["--levelz", "--input", "-x", "--", "-", "--yes=1", "--settle="])


@st.composite
def command_lines(draw):
    command = draw(COMMANDS)
    tokens = [command]
    for _ in range(draw(st.integers(0, 8))):
        kind, flag, value = draw(KINDS), draw(FLAG_OF[command]), draw(ARG_VALUES)
        if kind == "flag+value":
            tokens += [flag, value]
        elif kind == "flag=value":
            tokens.append(f"{flag}={value}")
        elif kind == "flag":
            tokens.append(flag)
        elif kind == "value":
            tokens.append(value)
        else:
            tokens.append(draw(JUNK))
    return [t for t in tokens if _not_help(t)]


DEMO, _ = load_layout("demo", env={})
PARSER = build_parser()


def check_command_line(argv: list[str]) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = PARSER.parse_args(argv)
    except SystemExit as e:
        assert e.code == 2, (argv, e.code)
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        assert err.getvalue().startswith("specmon"), err.getvalue()
        return
    try:
        if args.command == "ramp":
            arms = arms_from_args(args.urls, args.name, args.api_key_env)
            plan = plan_from_args(args)
            assert max(plan.levels) <= MAX_LEVEL and plan.input_len <= MAX_TOKENS
            require_loopback_or_yes(arms, args.yes)
        elif args.command == "attach":
            arms_from_args(args.urls, args.name, args.api_key_env)
            assert math.isfinite(args.interval) and (args.duration is None or math.isfinite(args.duration))
        elif args.command == "demo":
            layout = copy.deepcopy(DEMO)
            apply_overrides(layout, levels=args.levels, speed=args.speed, level_duration=args.level_duration,
                            slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot)
            plan = layout.plan()
            assert math.isfinite(plan.level_duration_s) and max(plan.levels) <= MAX_LEVEL
        elif args.command in ("report", "replay"):
            for x in [args.speed] if args.command == "replay" else [args.price_per_gpu_hour, *(args.at or [])]:
                assert x is None or (math.isfinite(x) and x > 0)
    except UsageError as e:
        assert "\n" not in str(e), str(e)


@settings(FUZZ, max_examples=2000)
@given(argv=command_lines())
def test_command_lines_never_traceback(argv):
    check_command_line(argv)
