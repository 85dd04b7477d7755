"""Command line: argument parsing only. Each command's work lives in specmon/commands/<name>.py,
what the commands share in specmon/wiring.py, the ramp plan and its bounds in specmon/plan.py
(the argument types below use its checks, so a flag and its layout key follow one rule).

Exit codes (contract): 0 ok; 2 bad usage or bad input (one line naming the problem);
3 a server could not be reached or started.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence

from specmon import __version__
from specmon.errors import ServerError, UsageError
from specmon.sources.pace import MAX_GETS_PER_S
from specmon.bounds import (
    ARRIVALS, MAX_BURSTINESS, MAX_LEVEL, MAX_PREFIX_GROUPS, MAX_RATE, MAX_TURNS, check_category, check_count,
    check_interval, check_levels, check_positive, check_rates, check_seconds, check_seed, check_share, check_tokens,
)

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_SERVER = 3


def one_line(text: str) -> str:
    """The message as one printable line: a newline or control character from the user's own
    input (an argument, a file name) is shown escaped, never as a line break."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


class Parser(argparse.ArgumentParser):
    """argparse with the contract's error: one line naming the problem, exit 2 (no usage block).
    No abbreviations: `--headles` is a typo to refuse, not `--headless` (and a flag added later
    would silently change what an abbreviation meant)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, one_line(f"{self.prog}: error: {message} (see {self.prog} --help)") + "\n")


# Argument types: parse the text, then the plan's own check (specmon/plan.py), so a flag follows
# the same rule as the layout key it stands for, in the same words.


def _int(text: str) -> int:
    """An integer; `1e4` is read as 10000 (a whole number written as a float)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None
    if not f.is_integer():
        raise ValueError(f"expected an integer, got {text!r}")
    return int(f)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def _int_list(text: str) -> list[int]:
    parts = text.split(",")
    if any(not x.strip() for x in parts):  # `4,,8` or `8,`: a typo, not a shorter list
        raise ValueError(f"expected comma-separated integers like 10,20,40 (no empty entries), got {text!r}")
    try:
        return [_int(x) for x in parts]
    except ValueError:
        raise ValueError(f"expected comma-separated integers like 10,20,40, got {text!r}") from None


def _float_list(text: str) -> list[float]:
    try:
        return [_float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


def _typed(parse: Callable[[str], Any], check: Callable[[Any], Any], name: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return check(parse(text))
        except ValueError as e:  # argparse reports an ArgumentTypeError's text as it is
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = name
    return convert


_levels = _typed(_int_list, check_levels, "levels")
_tokens = _typed(_int, check_tokens, "tokens")
_count = _typed(_int, check_count, "count")
_seed = _typed(_int, check_seed, "seed")
_category = _typed(str, check_category, "category")
_seconds = _typed(_float, check_seconds, "seconds")
_seconds_or_zero = _typed(_float, lambda s: check_seconds(s, zero_ok=True), "seconds")
_interval = _typed(_float, check_interval, "seconds")
_speed = _typed(_float, lambda x: check_positive(x, most=1e6), "speed")
_positive = _typed(_float, check_positive, "number")
_positives = _typed(_float_list, lambda xs: [check_positive(x) for x in xs], "numbers")
_rates = _typed(_float_list, check_rates, "rates")
_burstiness = _typed(_float, lambda x: check_positive(x, most=MAX_BURSTINESS), "burstiness")
_cap = _typed(_int, lambda n: check_count(n, MAX_LEVEL), "count")
_groups = _typed(_int, lambda n: check_count(n, MAX_PREFIX_GROUPS), "count")
_turns = _typed(_int, lambda n: check_count(n, MAX_TURNS), "count")
_share = _typed(_float, check_share, "share")
_max_level = _typed(_float, lambda x: check_positive(x, most=max(MAX_LEVEL, MAX_RATE)), "level")


def _check_port(n: int) -> int:
    if not 1 <= n <= 65535:
        raise ValueError(f"expected a port 1-65535, got {n}")
    return n


def _check_host(text: str) -> str:
    if not text.strip() or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError(f"expected a host name or address to listen on, got {text!r}")
    return text


def _rotate(text: str) -> Any:
    from specmon.session.segments import check_rotate
    return check_rotate(text)


def _retain(text: str) -> Any:
    from specmon.session.segments import parse_age_or_size
    return parse_age_or_size(text)


_rotate_t = _typed(str, _rotate, "age or size")
_retain_t = _typed(str, _retain, "age or size")
_port = _typed(_int, _check_port, "port")
_host = _typed(str, _check_host, "host")


# One wording for a flag that several commands take.
OUT_HELP = "session folder to record into (default ./specmon-sessions/<date-time>/)"
HEADLESS_HELP = "no TUI: one line per tick and the per-level table on stdout (the same CSVs are written)"
NAME_HELP = "a server under a name of your choice (repeatable); the name labels its panel and its CSV rows"
API_KEY_HELP = "environment variable that holds the servers' API key (sent as a bearer token, never written)"
INTERVAL_HELP = (f"seconds between scrapes (default 1; at least 0.1); whatever the interval and however many arms "
                 f"watch it, one server is sent at most {MAX_GETS_PER_S} requests a second (GETs of /metrics, "
                 f"/server_info, /v1/loads together; a scrape past that waits)")
GATEWAY_KEY_HELP = ("environment variable holding the gateway's admin key (smg 1.x asks it on /workers and "
                    "/get_loads); sent as the bearer there, never written")
URLS_HELP = "SGLang server (or gateway) base URL, e.g. http://127.0.0.1:30000"


def _add_metrics_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=_port, default=None, metavar="N",
                   help="serve Prometheus metrics at http://HOST:N/metrics while the session runs (off by default)")
    p.add_argument("--metrics-host", type=_host, default="127.0.0.1", metavar="HOST",
                   help="address the --metrics-port server listens on (default 127.0.0.1)")


def _add_prometheus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="a fleet of SGLang workers as a Prometheus server sees them (read-only GETs)")
    p.add_argument("--selector", default=None, metavar="'{...}'",
                   help="label matchers picking the fleet's series, e.g. '{job=\"sglang\"}' (default: every SGLang series)")


def _add_slo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slo-ttft", type=_seconds, default=None, metavar="S",
                   help="TTFT SLO in seconds: per-level attainment, SLO and goodput knees (session.json)")
    p.add_argument("--slo-tpot", type=_seconds, default=None, metavar="S",
                   help="TPOT SLO in seconds (time per output token after the first)")


def _add_ramp_options(p: argparse.ArgumentParser, levels_required: bool) -> None:
    p.add_argument("--levels", type=_levels, required=levels_required, metavar="C,C,...",
                   help="offered concurrency levels, e.g. 10,20,40,80,150")
    p.add_argument("--input-len", type=_tokens, default=None, metavar="N", help="prompt tokens per request (default 1024)")
    p.add_argument("--output-len", type=_tokens, default=None, metavar="N", help="output tokens per request, ignore_eos (default 256)")
    p.add_argument("--dataset", default=None, metavar="FILE", help="JSONL prompts, ShareGPT JSON or SPEED-Bench JSONL")
    p.add_argument("--category", type=_category, default=None, metavar="NAME", help="SPEED-Bench category to keep, e.g. low_entropy")
    p.add_argument("--tokenizer", default=None, metavar="DIR", help="local tokenizer folder or its tokenizer.json: prompts are sent as text of exactly --input-len "
                        "tokens (read with transformers, else the tokenizers package); without it input_ids are sent")
    p.add_argument("--seed", type=_seed, default=None, metavar="N",
                   help="seed of the synthetic prompts and arrival times: the same seed sends the same load (default 42)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--level-duration", type=_seconds, default=None, metavar="S", help="seconds per level (default 60)")
    g.add_argument("--requests-per-level", type=_count, default=None, metavar="N",
                   help="end a level after N requests per arm finished (instead of --level-duration)")
    p.add_argument("--settle", type=_seconds_or_zero, default=None, metavar="S",
                   help="seconds at the start of a level left out of its statistics (default 5)")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before each level (a prefix cache an earlier run filled reads as a fast server)")
    w = p.add_argument_group("workload shape")
    w.add_argument("--shared-prefix-len", type=_tokens, default=None, metavar="L",
                   help="the first L of each prompt's --input-len tokens are a system prompt shared by its group")
    w.add_argument("--prefix-groups", type=_groups, default=None, metavar="G",
                   help="how many different system prompts (default 1)")
    w.add_argument("--zipf", type=_float, default=None, metavar="S",
                   help="group popularity Zipf exponent (default 1; 0 = uniform)")
    w.add_argument("--turns", type=_turns, default=None, metavar="T",
                   help="multi-turn conversations: each turn resends the history plus a new user message")
    w.add_argument("--think-time", type=_seconds_or_zero, default=None, metavar="S",
                   help="seconds a stream waits between two turns (the arm's seconds)")
    o = p.add_argument_group("open-loop rate levels")
    o.add_argument("--rates", type=_rates, default=None, metavar="R,R,...",
                   help="request rates per arm (req/s), one level each, instead of --levels")
    o.add_argument("--arrival", choices=ARRIVALS, default=None, help="arrival process (default poisson)")
    o.add_argument("--burstiness", type=_burstiness, default=None, metavar="K",
                   help="with --arrival gamma: its shape (1 = Poisson, < 1 burstier)")
    o.add_argument("--max-concurrency", type=_cap, default=None, metavar="N",
                   help="at most N requests in flight per arm (the rest wait, counted in the backlog)")
    s = p.add_argument_group("SLO search")
    s.add_argument("--search", action="store_true",
                   help="find the highest level meeting --slo-ttft/--slo-tpot (doubling, then bisection)")
    s.add_argument("--attainment", type=_share, default=None, metavar="A",
                   help="the share of requests that must meet the SLOs, as a Wilson lower 95%% bound (default 0.9)")
    s.add_argument("--max-level", type=_max_level, default=None, metavar="N",
                   help="the highest concurrency (or rate) the search tries")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="specmon", description="Watch SGLang servers serve; ramp them; find the knee.")
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="simulated FP8 vs NVFP4 servers, ramped, in the TUI (no GPU needed)")
    p.add_argument("--headless", action="store_true", help=HEADLESS_HELP)
    p.add_argument("--out", default=None, metavar="DIR", help=OUT_HELP)
    p.add_argument("--levels", type=_levels, default=None, metavar="C,C,...",
                   help="offered concurrency levels instead of the layout's, e.g. 4,8,16")
    p.add_argument("--speed", type=_speed, default=None, metavar="X", help="simulated seconds per wall second")
    p.add_argument("--level-duration", type=_seconds, default=None, metavar="S", help="simulated seconds per level")
    p.add_argument("--layout", default=None, metavar="NAME|FILE", help="layout file (default layouts/demo.yaml)")
    p.add_argument("--fleet", action="store_true",
                   help="layouts/fleet.yaml: the real smg gateway in front of four simulated workers, ramped through it")
    p.add_argument("--prefix", action="store_true",
                   help="layouts/prefix-cache.yaml: shared system prompts on a server with its prefix cache and one without")
    _add_slo_options(p)
    _add_metrics_options(p)

    p = sub.add_parser("attach", help="watch running servers (read-only)")
    p.add_argument("urls", nargs="*", metavar="URL", help=URLS_HELP)
    p.add_argument("--name", action="append", default=[], metavar="NAME=URL", help=NAME_HELP)
    p.add_argument("--api-key-env", default=None, metavar="VAR", help=API_KEY_HELP)
    p.add_argument("--interval", type=_interval, default=1.0, metavar="S", help=INTERVAL_HELP)
    p.add_argument("--out", default=None, metavar="DIR", help=OUT_HELP)
    p.add_argument("--headless", action="store_true", help=HEADLESS_HELP + "; with --duration S to stop")
    p.add_argument("--duration", type=_seconds, default=None, metavar="S", help="stop after S seconds")
    p.add_argument("--isl", type=_tokens, default=1024, metavar="N", help="assumed input tokens per request, for the predicted knee")
    p.add_argument("--osl", type=_tokens, default=256, metavar="N", help="assumed output tokens per request, for the predicted knee")
    p.add_argument("--no-discover", "--workers-only", dest="no_discover", action="store_true",
                   help="take every URL as one SGLang server (do not look for a gateway and its workers)")
    p.add_argument("--gateway-metrics", default=None, metavar="URL",
                   help="the gateway's own Prometheus metrics (smg --prometheus-port), e.g. http://HOST:29000")
    p.add_argument("--gateway-key-env", default=None, metavar="VAR", help=GATEWAY_KEY_HELP)
    p.add_argument("--request-metrics-dir", action="append", default=[], metavar="[NAME=]DIR",
                   help="the folder a server on this host writes with --export-metrics-to-file-dir: each finished "
                        "request's TTFT, queue time and lengths, read (never written) as the files grow; NAME=DIR "
                        "when several servers are watched")
    p.add_argument("--rotate", type=_rotate_t, default=(3600.0, None), metavar="AGE|SIZE",
                   help="close events.jsonl, samples.csv and gpus.csv into a gzip-compressed segment this often "
                        "(e.g. 1h, the default) or at this size (e.g. 256M); the open segment stays plain and flushed; "
                        "replay reads the segments in order")
    p.add_argument("--retain", type=_retain_t, default=None, metavar="AGE|SIZE",
                   help="delete the oldest closed segments once older than AGE (e.g. 7d) or while the folder is "
                        "larger than SIZE (e.g. 20G); the open segment is never deleted (default: keep all)")
    _add_metrics_options(p)
    _add_prometheus_options(p)

    p = sub.add_parser("launch", help="start servers from a layout file, ramp, watch")
    p.add_argument("layout", metavar="LAYOUT.yaml",
                   help="layout file, or the name of one in layouts/ (e.g. demo): its arms, their flags, the ramp")
    p.add_argument("--out", default=None, metavar="DIR", help=OUT_HELP + "; the servers' logs go to DIR/logs/")
    p.add_argument("--headless", action="store_true", help=HEADLESS_HELP)
    p.add_argument("--interval", type=_interval, default=None, metavar="S",
                   help="seconds between scrapes (default: the layout's interval_s, else 1; at least 0.1)")
    p.add_argument("--gateway-key-env", default=None, metavar="VAR",
                   help=GATEWAY_KEY_HELP + "; the launched gateway is started with it as its admin key")
    _add_metrics_options(p)

    p = sub.add_parser("ramp", help="drive a concurrency ramp against running servers")
    p.add_argument("urls", nargs="*", metavar="URL", help=URLS_HELP + " (each is one arm of the ramp)")
    p.add_argument("--name", action="append", default=[], metavar="NAME=URL", help=NAME_HELP)
    p.add_argument("--api-key-env", default=None, metavar="VAR", help=API_KEY_HELP)
    p.add_argument("--interval", type=_interval, default=1.0, metavar="S", help=INTERVAL_HELP)
    p.add_argument("--headless", action="store_true", help=HEADLESS_HELP)
    p.add_argument("--out", default=None, metavar="DIR", help=OUT_HELP)
    p.add_argument("--yes", action="store_true",
                   help="send the load even to a server that is not on this machine (not a loopback address)")
    p.add_argument("--no-discover", dest="no_discover", action="store_true",
                   help="take every URL as one SGLang server (a gateway's workers are not watched)")
    p.add_argument("--gateway-metrics", default=None, metavar="URL",
                   help="the gateway's own Prometheus metrics (smg --prometheus-port), e.g. http://HOST:29000")
    p.add_argument("--gateway-key-env", default=None, metavar="VAR", help=GATEWAY_KEY_HELP)
    _add_ramp_options(p, levels_required=False)  # or --rates, or --search: the plan says which is missing
    p.add_argument("--trace", default=None, metavar="FILE|diurnal[:PEAK_RPS[:PERIOD_S]]",
                   help="replay a trace as one open-loop level: each request at its recorded arrival with its recorded "
                        "lengths (specmon JSONL, Mooncake JSONL, Azure or BurstGPT CSV; docs/workloads.md), or a "
                        "built-in diurnal day compressed into PERIOD_S (default 2 req/s peak, 600 s)")
    p.add_argument("--trace-speed", type=_speed, default=None, metavar="X",
                   help="with --trace: arrival times divided by X (2 replays the trace twice as fast)")
    _add_slo_options(p)
    _add_metrics_options(p)

    p = sub.add_parser("sim", help="a simulated SGLang server on 127.0.0.1 (SGLang's API, metrics and logs)",
                       add_help=False)
    p.add_argument("sim_args", nargs=argparse.REMAINDER, metavar="...",
                   help="SGLang's launch flags and the simulator's own: specmon sim --help lists them")

    p = sub.add_parser("report", help="plots and tables from recorded sessions")
    p.add_argument("sessions", nargs="+", metavar="SESSION_DIR",
                   help="recorded session folders; two or more are compared (repeats of one setting: mean and spread)")
    p.add_argument("--format", choices=["md", "png", "html"], default="md",
                   help="md: tables on stdout and in report.md; png: the figures; html: report.html, tables and "
                        "figures in one file (default md)")
    p.add_argument("--price-per-gpu-hour", type=_positive, default=None, metavar="X",
                   help="price of one GPU for an hour: adds cost per million output tokens to the tables")
    p.add_argument("--at", type=_positives, default=None, metavar="X,X,...",
                   help="per-user tok/s points for matched-interactivity tables")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="folder for report.md, the figures, report.html (default ./specmon-reports/<date-time>/; "
                        "never a session folder unless named here)")

    p = sub.add_parser("replay", help="play a recorded session through the TUI (or a past window of a Prometheus fleet)")
    p.add_argument("session", nargs="?", default=None, metavar="SESSION_DIR", help="a recorded session folder")
    p.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                   help="recorded seconds played per wall second (default 1)")
    p.add_argument("--headless", action="store_true",
                   help="no TUI: the recorded ticks and the per-level table on stdout")
    _add_prometheus_options(p)
    p.add_argument("--from", dest="time_from", default=None, metavar="T",
                   help="with --prometheus: start of the window (RFC 3339, unix seconds, or -1h)")
    p.add_argument("--to", dest="time_to", default=None, metavar="T", help="with --prometheus: end (default now)")
    p.add_argument("--step", type=_interval, default=None, metavar="S",
                   help="with --prometheus: seconds between rows (default the scrape interval)")
    p.add_argument("--out", default=None, help="with --prometheus: the session folder to write")
    return parser


def entry() -> NoReturn:
    """The `specmon` command (and `python -m specmon`): main(), then out of the process."""
    exit_now(main())


def exit_now(rc: int) -> NoReturn:
    """End the process with rc once its work is done: the atexit hooks run (launch's servers are
    stopped there) and stdout/stderr are flushed, then the process ends without the interpreter's
    teardown. Why: that teardown frees every object one by one and collects them all again, ~60 ms
    of CPU after a 1,000-stream ramp (3 % of the whole run's); the operating system frees the
    memory at once. Threads still running end with the process, as daemon threads do; the
    commands have stopped their own by the time main returns."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that left, or a stream already closed
            pass
    os._exit(rc)


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is caught below
    except BrokenPipeError:
        # `specmon ... | head`: the reader left. Python's documented way out: point stdout at
        # devnull so the interpreter's own flush at exit cannot fail again, and exit quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1


def _main(argv: Optional[Sequence[str]]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `specmon sim` owns its flags (they mirror SGLang's launch_server).
    if argv and argv[0] == "sim":
        from specmon.commands import sim

        return _guard(lambda: sim.run(argv[1:]))
    if argv and argv[0] == "replay":  # `--from -1h`: a value that starts with "-" is still the value
        argv = [f"{a}={argv[i + 1]}" if a in ("--from", "--to") and i + 1 < len(argv) else a
                for i, a in enumerate(argv) if not (i and argv[i - 1] in ("--from", "--to"))]
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_BAD_INPUT
    import importlib

    module = importlib.import_module(f"specmon.commands.{args.command}")
    return _guard(lambda: module.run(args))


def _guard(fn) -> int:
    try:
        rc = fn()
    except UsageError as e:
        print(one_line(f"specmon: error: {e}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServerError as e:
        print(f"specmon: error: {e}", file=sys.stderr)  # may carry a server's log tail, lines and all
        return EXIT_SERVER
    except KeyboardInterrupt:
        return 130
    return EXIT_OK if rc is None else int(rc)
