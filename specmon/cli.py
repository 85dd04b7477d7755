"""Command line: argument parsing only. Each command's work lives in specmon/commands/<name>.py.

Exit codes (contract): 0 ok; 2 bad usage or bad input (one line naming the problem);
3 a server could not be reached or started.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from specmon import __version__
from specmon.errors import ServerError, UsageError

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_SERVER = 3


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--levels: expected comma-separated integers like 10,20,40, got {text!r}")
    if not levels or any(c <= 0 for c in levels):
        raise argparse.ArgumentTypeError(f"--levels: expected positive integers, got {text!r}")
    return levels


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _add_slo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slo-ttft", type=_positive_float, default=None, metavar="S",
                   help="TTFT SLO in seconds: per-level attainment, SLO and goodput knees (session.json)")
    p.add_argument("--slo-tpot", type=_positive_float, default=None, metavar="S",
                   help="TPOT SLO in seconds (time per output token after the first)")


def _add_ramp_options(p: argparse.ArgumentParser, levels_required: bool) -> None:
    p.add_argument("--levels", type=_levels, required=levels_required,
                   help="offered concurrency levels, e.g. 10,20,40,80,150")
    p.add_argument("--input-len", type=int, default=None, help="prompt tokens per request (default 1024)")
    p.add_argument("--output-len", type=int, default=None, help="output tokens per request, ignore_eos (default 256)")
    p.add_argument("--dataset", default=None, help="JSONL prompts, ShareGPT JSON or SPEED-Bench JSONL")
    p.add_argument("--category", default=None, help="SPEED-Bench category to keep, e.g. low_entropy")
    p.add_argument("--tokenizer", default=None, help="local tokenizer directory (sends text); without it input_ids are sent")
    p.add_argument("--seed", type=int, default=None)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--level-duration", type=_positive_float, default=None, help="seconds per level")
    g.add_argument("--requests-per-level", type=int, default=None)
    p.add_argument("--settle", type=float, default=None, help="seconds at the start of a level left out of its statistics")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache between levels")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmon", description="Watch SGLang servers serve; ramp them; find the knee.")
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="simulated FP8 vs NVFP4 servers, ramped, in the TUI (no GPU needed)")
    p.add_argument("--headless", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--levels", type=_levels, default=None)
    p.add_argument("--speed", type=_positive_float, default=None, help="simulated seconds per wall second")
    p.add_argument("--level-duration", type=_positive_float, default=None, help="simulated seconds per level")
    p.add_argument("--layout", default=None, help="layout file (default layouts/demo.yaml)")
    _add_slo_options(p)

    p = sub.add_parser("attach", help="watch running servers (read-only)")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--name", action="append", default=[], metavar="NAME=URL")
    p.add_argument("--api-key-env", default=None, metavar="VAR", help="environment variable that holds the API key")
    p.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between scrapes (default 1)")
    p.add_argument("--out", default=None)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--duration", type=_positive_float, default=None, help="stop after S seconds")
    p.add_argument("--isl", type=int, default=1024, help="assumed input tokens per request, for the predicted knee")
    p.add_argument("--osl", type=int, default=256, help="assumed output tokens per request, for the predicted knee")

    p = sub.add_parser("launch", help="start servers from a layout file, ramp, watch")
    p.add_argument("layout", metavar="LAYOUT.yaml")
    p.add_argument("--out", default=None)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--interval", type=_positive_float, default=None,
                   help="seconds between scrapes (default: the layout's interval_s, else 1)")

    p = sub.add_parser("ramp", help="drive a concurrency ramp against running servers")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--name", action="append", default=[], metavar="NAME=URL")
    p.add_argument("--api-key-env", default=None, metavar="VAR")
    p.add_argument("--interval", type=_positive_float, default=1.0)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--out", default=None)
    _add_ramp_options(p, levels_required=True)
    _add_slo_options(p)

    p = sub.add_parser("sim", help="a simulated SGLang server on 127.0.0.1 (SGLang's API, metrics and logs)",
                       add_help=False)
    p.add_argument("sim_args", nargs=argparse.REMAINDER)

    p = sub.add_parser("report", help="plots and tables from recorded sessions")
    p.add_argument("sessions", nargs="+", metavar="SESSION_DIR")
    p.add_argument("--format", choices=["md", "png", "html"], default="md")
    p.add_argument("--price-per-gpu-hour", type=float, default=None)
    p.add_argument("--at", type=_floats, default=None, help="per-user tok/s points for matched-interactivity tables")
    p.add_argument("--out", default=None)

    p = sub.add_parser("replay", help="play a recorded session through the TUI")
    p.add_argument("session", metavar="SESSION_DIR")
    p.add_argument("--speed", type=_positive_float, default=1.0)
    p.add_argument("--headless", action="store_true")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `specmon sim` owns its flags (they mirror SGLang's launch_server).
    if argv and argv[0] == "sim":
        from specmon.commands import sim

        return _guard(lambda: sim.run(argv[1:]))
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
        print(f"specmon: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServerError as e:
        print(f"specmon: error: {e}", file=sys.stderr)
        return EXIT_SERVER
    except KeyboardInterrupt:
        return 130
    return EXIT_OK if rc is None else int(rc)
