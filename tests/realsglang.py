"""Where the real SGLang server (CPU engine) lives, for the `real_sglang` test tier (issue 7).

`../shared/real-sglang/setup.sh VENV` builds a venv with SGLang 0.5.10.post1 and `serve.sh VENV
PORT [flags]` starts it on 127.0.0.1 with a tiny random-weight model. `.ci/run` builds the venv
once into a cache folder outside the repo and exports its path. Tests marked real_sglang skip
(with the reason) when either is missing.

  SPECMON_SGLANG_VENV       the venv (default: ~/.cache/specmon/sglvenv, else /work/sglvenv)
  SPECMON_REAL_SGLANG_DIR   the folder holding serve.sh and tiny-llama/ (default: ../shared/real-sglang)
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first_existing(*paths: Path) -> Path:
    for p in paths:
        if p.exists():
            return p
    return paths[0]


SGLANG_VENV = Path(os.environ["SPECMON_SGLANG_VENV"]) if os.environ.get("SPECMON_SGLANG_VENV") else _first_existing(
    Path.home() / ".cache" / "specmon" / "sglvenv", Path("/work/sglvenv"))
REAL_DIR = Path(os.environ.get("SPECMON_REAL_SGLANG_DIR") or (REPO.parent / "shared" / "real-sglang"))
SERVE_SH = REAL_DIR / "serve.sh"
TINY_MODEL = REAL_DIR / "tiny-llama"
SGLANG_PYTHON = SGLANG_VENV / "bin" / "python"


def missing() -> str | None:
    """Why the real tier cannot run here, or None when it can."""
    if not SERVE_SH.exists():
        return f"real SGLang scripts not found at {REAL_DIR} (set SPECMON_REAL_SGLANG_DIR)"
    if not SGLANG_PYTHON.exists():
        return f"real SGLang venv not found at {SGLANG_VENV} (build it with {REAL_DIR}/setup.sh; set SPECMON_SGLANG_VENV)"
    return None
