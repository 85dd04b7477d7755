"""Every option and positional of every command says what it is for in its --help.

The parsers are walked as argparse built them (specmon's, and `specmon sim`'s own, which mirrors
SGLang's launch flags), so a flag added later without help text fails here by name.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from specmon.cli import build_parser
from specmon.servers.sim.config import build_parser as build_sim_parser


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    found = [("specmon sim", build_sim_parser())]
    todo = [("specmon", build_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {cmd}", sub) for cmd, sub in action.choices.items()]
    return found


def _commands() -> set[str]:
    return {name for name, _ in _parsers()}


def test_the_walk_reaches_every_command():
    # The walk itself could silently find nothing: it must see each command the CLI dispatches.
    assert {"specmon demo", "specmon attach", "specmon launch", "specmon ramp", "specmon sim",
            "specmon report", "specmon replay"} <= _commands()


@pytest.mark.parametrize("name,parser", _parsers(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_argument_has_help(name, parser):
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        text = action.help
        if text is argparse.SUPPRESS:
            continue  # deliberately hidden: none today, allowed on purpose only
        if not (text or "").strip():
            missing.append("/".join(action.option_strings) or action.dest)
    assert not missing, f"{name}: no help text for {', '.join(missing)}"


def test_subcommands_have_a_one_line_summary():
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {c.dest: c.help for c in sub._choices_actions}
    assert set(summaries) == set(sub.choices)
    assert all(h and h.strip() for h in summaries.values()), summaries


def test_ramp_help_names_what_the_issue_found_bare():
    # The flags `specmon ramp --help` listed without a word, through the real entry point.
    out = subprocess.run([sys.executable, "-m", "specmon", "ramp", "--help"], capture_output=True, text=True,
                         timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert out.returncode == 0, out.stderr
    lines = {ln.split()[0]: ln for ln in out.stdout.splitlines() if ln.strip().startswith("--")}
    for flag in ("--name", "--api-key-env", "--interval", "--headless", "--out"):
        words = lines[flag].split()
        assert len(words) > 3, lines[flag]  # the flag, its metavar and then some words of help


def test_sim_help_goes_through_the_simulators_parser():
    out = subprocess.run([sys.executable, "-m", "specmon", "sim", "--help"], capture_output=True, text=True,
                         timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert out.returncode == 0, out.stderr
    assert "--speculative-algorithm" in out.stdout and "--fault-crash-after" in out.stdout
