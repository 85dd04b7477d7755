"""The load client's compiled part (_fastread.c), or None where it is not here.

setup.py builds it at install where a C compiler is (Linux only); without it the client and the
workload do the same work in Python. SPECMON_NATIVE=0 leaves it out, to compare the two."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Optional

fastread: Optional[ModuleType]
try:
    from specmon.load import _fastread as fastread
except ImportError:  # not built here
    fastread = None
if os.environ.get("SPECMON_NATIVE", "1") == "0":
    fastread = None

# Which reader the load client reads with (each level's load_client figures say it): "C" where
# _fastread is built and not left out, else "Python".
READER = "C" if fastread is not None else "Python"
