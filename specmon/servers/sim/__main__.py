"""`python -m specmon.servers.sim [flags]`: the simulator started like `python -m sglang.launch_server`."""

import sys

from specmon.servers.sim.main import run

raise SystemExit(run(sys.argv[1:]))
