"""Launch mode: start the servers a layout describes, watch them start, restart them, stop them.

Each launched arm is one `python -m sglang.launch_server ...` (or the layout's replacement, e.g.
the simulator) started from an argv list, in its own process group (SGLang forks scheduler and
detokenizer processes; killing the group is the only way to be sure none survives), with both
output streams merged into `<session>/logs/<arm>.log`. A reader thread per arm copies every line to
that file as it comes (so a busy UI never blocks the server on a full pipe), folds the scheduler
lines into a LogState (the log source, usable without --enable-metrics) and reports startup phases.

Readiness = SGLang's ready line or /health answering 200, within the arm's startup timeout. A
server that dies (during startup or later) marks its arm failed with the cause read from its last
lines; the other arms carry on. stop() terminates every group (TERM, then KILL after a grace
period).

A layout's `gateway:` (SGLang's model gateway, smg) is one more supervised process: started
once its workers are ready (smg must reach them to register them) with their URLs, ready when its
/workers lists every one of them healthy, stopped with the rest. It never reaches past this
machine unless its env says so (HF_ENDPOINT on a closed loopback port, HF_HUB_OFFLINE=1), and a
simulated worker behind it with no model_path gets an empty local model folder (the gateway loads
a worker's tokenizer from its model path: a local folder is never looked up online).

A server's credentials (the value of its api_key/admin_api_key flags, a --api-key given in its
command, the key in its api_key_env variable) are replaced by *** in everything the supervisor
writes or emits: the log file and its command-line header, LogLine events, failure causes.

No server outlives specmon, however specmon ends: processes.py says how.

One module per idea: ports.py (which port each server gets), argv.py (an arm's command line and
environment, its credentials and their redaction), processes.py (process groups, and the guards
that stop them when specmon dies), gateway.py (the smg command, its version, the readiness
checks), supervisor.py (LaunchedArm, Supervisor).
"""

from specmon.servers.launch.argv import (REDACTED, SECRET_FLAGS, build_argv, build_env, flag_args, key_env_of, redact,
                                         secrets_of)
from specmon.servers.launch.gateway import smg_version
from specmon.servers.launch.ports import AUTO_PORTS, ephemeral_range, free_port, named_ports, port_free
from specmon.servers.launch.processes import kill_group
from specmon.servers.launch.supervisor import LOG_LINES_PER_S, TAIL_LINES, Emit, LaunchedArm, Supervisor

__all__ = [
    "AUTO_PORTS", "LOG_LINES_PER_S", "REDACTED", "SECRET_FLAGS", "TAIL_LINES", "Emit", "LaunchedArm", "Supervisor",
    "build_argv", "build_env", "ephemeral_range", "flag_args", "free_port", "key_env_of", "kill_group",
    "named_ports", "port_free", "redact", "secrets_of", "smg_version",
]
