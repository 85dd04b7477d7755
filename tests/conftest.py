"""The test tiers are folders, and a test's folder alone gives its marker, so a test moves tier
only by moving file:

- tests/unit: the fast tier, what `pytest -q` runs (testpaths in pyproject.toml); a few minutes on
  2 cores.
- tests/e2e: marked `slow`: end-to-end runs of several seconds each on 2 cores (the real smg
  gateway, a real Prometheus, kill -9 and signal trials, namespaces, ramps of several levels
  against simulators, fuzzing that starts processes). .ci/run's second tier.
- tests/real: marked `real_sglang` (a file may say `bench_client` instead): against a real SGLang
  server on the CPU; .ci/run's third tier.

A test in tests/unit that grows past a few seconds belongs in tests/e2e. Shared code is in
tests/helpers (imported as `helpers.<module>`: tests/ is on sys.path because the tier folders
are packages under it).
"""

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
_SLOW = _HERE / "e2e"
_REAL = _HERE / "real"


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = Path(item.path).resolve().parent
        if folder == _SLOW:
            item.add_marker(pytest.mark.slow)
        elif folder == _REAL and item.get_closest_marker("bench_client") is None:
            item.add_marker(pytest.mark.real_sglang)
