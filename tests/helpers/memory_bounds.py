"""What the memory-bound tests share across tiers: a session's CSV read back as rows."""

from __future__ import annotations

import csv


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
