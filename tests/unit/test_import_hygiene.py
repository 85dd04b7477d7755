"""The data core never imports Textual or the TUI (checked at run time and by import-linter), and the
layers contract of pyproject.toml holds (docs/architecture.md draws it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers.simproc import REPO

CORE = ["specmon.model", "specmon.sources", "specmon.sources.prom", "specmon.sources.derive",
        "specmon.sources.sglang", "specmon.sources.nvml", "specmon.sources.host", "specmon.analysis.predict",
        "specmon.sources.serverinfo", "specmon.load", "specmon.analysis", "specmon.session",
        "specmon.session.folder", "specmon.session.live", "specmon.session.ramp", "specmon.servers", "specmon.headless",
        "specmon.commands.attach", "specmon.report", "specmon.commands.report"]


def test_core_imports_leave_textual_out():
    code = ("import importlib, pkgutil, sys\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "for pkg in ('specmon.sources', 'specmon.load', 'specmon.analysis', 'specmon.session', 'specmon.servers',\n"
            "            'specmon.report'):\n"
            "    p = importlib.import_module(pkg)\n"
            "    for info in pkgutil.walk_packages(p.__path__, pkg + '.'):\n"
            "        if not info.name.endswith('__main__'):\n"
            "            importlib.import_module(info.name)\n"
            "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.') or m.startswith('specmon.tui'))\n"
            "print(bad)\n"
            "sys.exit(1 if bad else 0)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_import_linter_contract_holds():
    exe = Path(sys.executable).parent / "lint-imports"
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    p = subprocess.run(cmd, cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # the Textual contract, the layers, the load package's names, the standalone simulator, independent commands
    assert "5 kept, 0 broken" in p.stdout


def _imports_no_pydantic(code: str) -> None:
    # pydantic's import was ~0.1 s of CPU at every start, a twentieth of a whole 1,000-stream
    # ramp's: the plan and layouts validate themselves (validation.py)
    code = "import sys\n" + code + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n"
    p = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


def test_a_ramp_from_the_command_line_leaves_pydantic_out():
    _imports_no_pydantic("from specmon.cli import build_parser\n"
                         "from specmon.commands.ramp import plan_from_args\n"
                         "import specmon.headless, specmon.session.live, specmon.session.ramp, specmon.wiring\n"
                         "plan = plan_from_args(build_parser().parse_args(['ramp', 'http://127.0.0.1:1', '--levels', '2,4']))\n"
                         "assert plan.levels == [2, 4], plan\n")


def test_a_launch_reading_its_layout_leaves_pydantic_out():
    # what `specmon launch` and `specmon demo` import before anything starts, and the layout they read
    _imports_no_pydantic("import specmon.commands.launch, specmon.commands.demo, specmon.servers.launch.supervisor\n"
                         "from specmon.servers.layout import load_layout\n"
                         "layout, _ = load_layout('layouts/demo.yaml')\n"
                         "assert layout.ramp is not None and len(layout.arms) == 2, layout\n"
                         "layout.as_dict()\n")
