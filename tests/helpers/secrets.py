"""What the no-secrets-on-disk tests share across tiers: every text file a session wrote."""

from __future__ import annotations

from pathlib import Path


def every_text(folder: Path) -> str:
    out = []
    for p in folder.rglob("*"):
        if p.is_file():
            out.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)
