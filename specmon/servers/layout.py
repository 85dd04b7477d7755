"""Layout files: which servers a session has (launched or attached), the ramp, the panes.

A layout is checked completely before anything starts. A bad file is refused with ONE line that
names the file, the key and what was expected, e.g.
``layouts/x.yaml: arms[1].launch.port: expected an integer, got 'abc'`` (UsageError, exit 2).
Combinations SGLang itself would reject at startup, where they are cheap to see from the flags,
come back as warnings so the operator reads them before waiting minutes for a crash.

Schema (every key optional unless marked):

    name: str                       # shown in the title; default: the file name
    description: str
    command: [str, ...]             # replaces `python -m sglang.launch_server` for every launched arm
                                    # (e.g. [python, -m, specmon.servers.sim]); env SPECMON_SGLANG_COMMAND
                                    # does the same for layouts that do not set it
                                    # `${VAR}` in a command part or a flag value is the environment
                                    # variable VAR (e.g. [${SPECMON_SGLANG_VENV}/bin/python, ...]); an
                                    # unset one is refused before anything starts
    startup_timeout_s: float        # per arm, default 900
    interval_s: float               # seconds between scrapes, default 1
    arms:                           # required, at least one
      - name: str                   # required; letters, digits, . _ -
        api_key_env: str            # env var holding the server's API key (the key itself never goes here)
        attach: URL                 # either this ...
        launch:                     # ... or this
          flags: {flag: value}      # SGLang launch_server flags; `model_path: x` -> `--model-path x`;
                                    # true -> bare flag; false/null -> left out; a list -> repeated values
          env: {VAR: value}         # e.g. SGLANG_ENABLE_SPEC_V2: 1
          gpus: [int, ...]          # -> CUDA_VISIBLE_DEVICES (left as inherited when absent)
          port: int                 # default: a free port; --host/--port are always set by specmon
          host: str                 # default 127.0.0.1
          command: [str, ...]       # per-arm replacement of the server command
          startup_timeout_s: float
    ramp:                           # absent: watch only; validated as specmon.plan.RampPlan
      levels: [int, ...]            # closed-loop levels; or rates: [float, ...] (open loop, req/s)
      input_len, output_len, seed, dataset, category, tokenizer,
      level_duration_s | requests_per_level, settle_s, restart_between_levels, flush_cache, timeout_s,
      slo_ttft_s, slo_tpot_s        # optional SLOs (seconds): SLO attainment and goodput knees
      shared_prefix_len, prefix_groups, zipf, turns, think_time_s   # the workload's shape
      arrival, burstiness, max_concurrency                          # with rates
      search, attainment, max_level                                 # the SLO search (with an SLO)
                                    # (the bounds of each key are in specmon/plan.py)
    panes: [str, ...]               # which panes show (specmon/panes.py), default all
    gateway:                        # absent: no gateway; else SGLang's model gateway (smg) in front of
                                    # arms, started once they are up, supervised and stopped like them
      name: str                     # default gateway; its log is logs/<name>.log
      workers: [str, ...]           # the arms behind it (launched or attached), default every launched arm;
                                    # an arm with flags.disaggregation_mode prefill|decode makes it a PD gateway
      policy: str                   # --policy (random, round_robin, cache_aware, power_of_two, manual)
      port: int                     # default: a free port; host: str, default 127.0.0.1
      metrics_port: int             # its Prometheus metrics (--prometheus-port), default: a free port
      command: [str, ...]           # default: the smg next to specmon's Python, else smg on PATH, then `launch`
      flags: {flag: value}          # more `smg launch` flags (not host, port, worker_urls, prefill, decode,
                                    # pd_disaggregation, prometheus_host, prometheus_port: specmon sets those)
      env: {VAR: value}             # it never reaches past this machine unless env sets HF_ENDPOINT: a
                                    # closed loopback port otherwise, and HF_HUB_OFFLINE=1
      startup_timeout_s: float      # until it lists every worker healthy, default 120
                                    # With a gateway the ramp goes through it (one arm, the fleet) and
                                    # its workers are watched as its fleet (specmon ramp GATEWAY does the same).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path
from typing import Any, Optional

import yaml

from specmon.errors import UsageError
from specmon.model import ArmSpec
from specmon.panes import PANES
from specmon.bounds import MIN_INTERVAL_S
from specmon.plan import MAX_INTERVAL_S, MAX_SECONDS, RampPlan, plan_from
from specmon.urls import normalize_url
from specmon.validation import Checked, Invalid, field, where as place

SGLANG_COMMAND = ["python", "-m", "sglang.launch_server"]
COMMAND_ENV = "SPECMON_SGLANG_COMMAND"

# Choices of SGLang 0.5.10's launch_server (docs/field-notes.md, SGLang notes 5); a wrong one is an
# argparse error that costs a full Python+torch import to discover.
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
QUANTIZATIONS = (
    "awq", "fp8", "mxfp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
    "modelopt_fp8", "modelopt_fp4", "modelopt_mixed", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq",
    "w4afp8", "mxfp4", "auto-round", "compressed-tensors", "modelslim", "quark_int4fp8_moe",
)
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FLAG = re.compile(r"^[a-z][a-z0-9_-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCALAR = (str, int, float, bool)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def env_refs(value: Any) -> list[str]:
    """Names of the `${VAR}` references in a string (none in other values)."""
    return _ENV_REF.findall(value) if isinstance(value, str) else []


def expand_env(value: Any, env: Optional[dict[str, str]] = None) -> Any:
    """`${VAR}` -> the variable's value (a layout names machine-specific paths this way, so a shipped
    file need not hard-code them). Non-strings pass through; unset variables stay as written."""
    if not isinstance(value, str):
        return value
    env = os.environ if env is None else env
    return _ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value)


# Flags specmon sets itself on a launched server: flag -> where the layout says it instead.
SERVER_OWN_FLAGS = {"host": "launch.host", "port": "launch.port"}
GATEWAY_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
# smg launch flags specmon sets itself for a launched gateway ("": derived from gateway.workers)
GATEWAY_OWN_FLAGS = {"host": "gateway.host", "port": "gateway.port", "prometheus_port": "gateway.metrics_port",
                     "worker_urls": "", "prefill": "", "decode": "", "pd_disaggregation": "", "prometheus_host": ""}
PD_ROLES = ("prefill", "decode")
PORT = {"ge": 1, "le": 65535}
TIMEOUT = {"gt": 0, "le": MAX_SECONDS}


# ---- each field's own check, after its type (ValueError: what was expected) -----------------

def flag_names(flags: dict[str, Any], *, example: str, own: dict[str, str], dicts_ok: bool) -> dict[str, Any]:
    """A layout's `flags:` mapping with names as the program's argparse spells them (`--mem-fraction`
    -> mem_fraction); a flag specmon sets itself (`own`: flag -> the layout key to use, or "" when
    it is derived from another key) is refused."""
    out = {}
    for key, value in flags.items():
        if not isinstance(key, str) or not _FLAG.match(key.lstrip("-")):
            raise ValueError(f"expected flag names like {example}, got {key!r}")
        name = key.lstrip("-").replace("-", "_")
        if name in own:
            instead = f": use {own[name]} instead of a flag" if own[name] else " from gateway.workers"
            raise ValueError(f"{name!r} is set by specmon{instead}")
        if not _flag_value_ok(value) or (isinstance(value, dict) and not dicts_ok):
            raise ValueError(f"{key}: expected a string, number, true/false or a list of those, got {value!r}")
        out[name] = value
    return out


def _flag_value_ok(value: Any) -> bool:
    if value is None or isinstance(value, _SCALAR):
        return True
    if isinstance(value, list):
        return all(isinstance(v, _SCALAR) and not isinstance(v, bool) for v in value)
    return isinstance(value, dict)  # e.g. json_model_override_args: passed as JSON text


def _server_flags(flags: dict[str, Any]) -> dict[str, Any]:
    return flag_names(flags, example="model_path or mem-fraction-static", own=SERVER_OWN_FLAGS, dicts_ok=True)


def _gateway_flags(flags: dict[str, Any]) -> dict[str, Any]:
    return flag_names(flags, example="health_check_interval_secs", own=GATEWAY_OWN_FLAGS, dicts_ok=False)


def _env(env: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(f"expected environment variable names, got {key!r}")
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, (int, float, str)):
            value = str(value)
        else:
            raise ValueError(f"{key}: expected a string or number, got {value!r}")
        out[key] = value
    return out


def _gpus(gpus: list[int]) -> list[int]:
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise ValueError(f"expected a non-empty list of distinct GPU indices >= 0, got {gpus!r}")
    return gpus


def _command(command: list[str]) -> list[str]:
    if not command or not all(command):
        raise ValueError("expected a non-empty list of program and arguments, e.g. [python, -m, specmon.servers.sim]")
    return command


def _name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"expected a name of letters, digits, '.', '_' or '-' (used in file names), got {name!r}")
    return name


def _key_env(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"expected the NAME of an environment variable, got {name!r}")
    return name


def _policy(policy: str) -> str:
    if policy not in GATEWAY_POLICIES:
        raise ValueError(f"expected one of {', '.join(GATEWAY_POLICIES)}, got {policy!r}")
    return policy


def _ramp(ramp: Any) -> Optional[RampPlan]:
    """The plan validates itself (plan.py); its error keeps where in `ramp:` it is."""
    return ramp if ramp is None or isinstance(ramp, RampPlan) else plan_from(ramp)


def _arms(arms: list[ArmLayout]) -> list[ArmLayout]:
    if not arms:
        raise ValueError("expected at least one arm")
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"expected distinct arm names, {dup[0]!r} appears twice")
    ports = [a.launch.port for a in arms if a.launch and a.launch.port]
    dup_ports = sorted({p for p in ports if ports.count(p) > 1})
    if dup_ports:
        raise ValueError(f"expected distinct launch ports, {dup_ports[0]} appears twice")
    return arms


def _panes(panes: list[str]) -> list[str]:
    for p in panes:
        if p not in PANES:
            raise ValueError(f"expected pane names from {', '.join(PANES)}, got {p!r}")
    return panes


# ---- the sections (validation.Checked: read in field order, unknown keys refused) ------------

@dataclasses.dataclass(kw_only=True)
class LaunchSpec(Checked):
    flags: dict[str, Any] = field(factory=dict, check=_server_flags)
    env: dict[str, Any] = field(factory=dict, check=_env)
    gpus: Optional[list[int]] = field(None, check=_gpus)
    port: Optional[int] = field(None, **PORT)
    host: str = "127.0.0.1"
    command: Optional[list[str]] = field(None, check=_command)
    startup_timeout_s: Optional[float] = field(None, **TIMEOUT)

    def flag(self, name: str) -> Any:
        return self.flags.get(name)


@dataclasses.dataclass(kw_only=True)
class ArmLayout(Checked):
    name: str = field(check=_name)
    attach: Optional[str] = field(None, check=normalize_url)  # ValueError: what was expected
    launch: Optional[LaunchSpec] = None
    api_key_env: Optional[str] = field(None, check=_key_env)

    def rules(self) -> None:
        if (self.attach is None) == (self.launch is None):
            raise ValueError("expected exactly one of 'launch:' (start a server) or 'attach:' (a URL)")


@dataclasses.dataclass(kw_only=True)
class GatewayLayout(Checked):
    name: str = field("gateway", check=_name)
    workers: Optional[list[str]] = None
    policy: Optional[str] = field(None, check=_policy)
    port: Optional[int] = field(None, **PORT)
    metrics_port: Optional[int] = field(None, **PORT)
    host: str = "127.0.0.1"
    command: Optional[list[str]] = field(None, check=_command)
    flags: dict[str, Any] = field(factory=dict, check=_gateway_flags)
    env: dict[str, Any] = field(factory=dict, check=_env)
    startup_timeout_s: float = field(120.0, **TIMEOUT)


@dataclasses.dataclass(kw_only=True)
class Layout(Checked):
    name: Optional[str] = None
    description: Optional[str] = None
    command: Optional[list[str]] = field(None, check=_command)
    startup_timeout_s: float = field(900.0, **TIMEOUT)
    interval_s: float = field(1.0, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)
    arms: list[ArmLayout] = field(check=_arms)
    ramp: Optional[RampPlan] = field(None, check=_ramp, plain=True)
    panes: Optional[list[str]] = field(None, check=_panes)
    gateway: Optional[GatewayLayout] = None
    # Where the file was read from (set by load_layout; relative dataset paths resolve against it).
    # A layout may still write it, as it could before (then load_layout sets it anyway).
    source: Optional[str] = field(None, hidden=True)
    # ----------------------------------------------------------------------------------------

    @property
    def launched(self) -> list[ArmLayout]:
        return [a for a in self.arms if a.launch is not None]

    def gateway_workers(self) -> list[ArmLayout]:
        """The arms behind the gateway, in layout order ([] without a gateway)."""
        if self.gateway is None:
            return []
        names = self.gateway.workers
        return [a for a in self.arms if (a.name in names if names is not None else a.launch is not None)]

    @staticmethod
    def role_of(arm: ArmLayout) -> str:
        """regular | prefill | decode: a launched arm's disaggregation_mode flag (attached: regular)."""
        mode = str(arm.launch.flags.get("disaggregation_mode") or "") if arm.launch else ""
        return mode if mode in PD_ROLES else "regular"

    def server_command(self, arm: ArmLayout, env: Optional[dict[str, str]] = None) -> list[str]:
        """Program and leading arguments for a launched arm (before the flags)."""
        assert arm.launch is not None
        if arm.launch.command:
            return [expand_env(part, env) for part in arm.launch.command]
        if self.command:
            return [expand_env(part, env) for part in self.command]
        text = (os.environ if env is None else env).get(COMMAND_ENV)
        if text:
            return shlex.split(text)
        return list(SGLANG_COMMAND)

    def attached_specs(self) -> list[ArmSpec]:
        return [ArmSpec(name=a.name, url=a.attach, api_key_env=a.api_key_env) for a in self.arms if a.attach]

    def plan(self) -> Optional[RampPlan]:
        """The ramp plan (a copy), its dataset path resolved against the layout file's folder."""
        if self.ramp is None:
            return None
        dataset = self.ramp.dataset
        if dataset and self.source and not Path(dataset).is_absolute():
            candidate = Path(self.source).parent / dataset
            if candidate.exists():
                dataset = str(candidate)
        return dataclasses.replace(self.ramp, dataset=dataset)


def is_sim_command(command: list[str]) -> bool:
    """True when the command starts specmon's simulator (which understands --profile/--speed)."""
    text = " ".join(command)
    return "specmon.servers.sim" in text or bool(re.search(r"\bspecmon\b.*\bsim\b", text))


# --------------------------------------------------------------------------------------------
# Loading and checking


def layouts_dirs() -> list[Path]:
    """Where named layouts (`demo`, `nvfp4-mtp`, ...) are looked up: the installed package's copy,
    then the repository's layouts/ next to the package (an editable install from a clone)."""
    pkg = Path(__file__).resolve().parent.parent
    return [d for d in (pkg / "layouts", pkg.parent / "layouts") if d.is_dir()]


def resolve_layout(name_or_path: str | os.PathLike) -> Path:
    path = Path(name_or_path)
    if path.exists():
        return path
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.name
    if path.parent == Path("."):
        for d in layouts_dirs():
            candidate = d / f"{stem}.yaml"
            if candidate.exists():
                return candidate
    known = sorted({p.stem for d in layouts_dirs() for p in d.glob("*.yaml")})
    raise UsageError(f"{name_or_path}: no such layout file (named layouts: {', '.join(known) or 'none found'})")


def load_layout(name_or_path: str | os.PathLike, env: Optional[dict[str, str]] = None) -> tuple[Layout, list[str]]:
    """Read and check a layout; returns it with warnings. Raises UsageError with one line."""
    path = resolve_layout(name_or_path)
    label = str(name_or_path) if Path(name_or_path).exists() else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{label}: expected UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"{label}: cannot read: {e.strerror or e}") from None
    return parse_layout(text, label, env=env)


def parse_layout(text: str, label: str = "<layout>", env: Optional[dict[str, str]] = None) -> tuple[Layout, list[str]]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"{label}{where}: invalid YAML: {problem}") from None
    except (ValueError, TypeError, RecursionError) as e:  # e.g. a key that cannot be hashed
        raise UsageError(f"{label}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{label}: expected a mapping with 'arms:' at the top level, got {_kind(data)}")
    try:
        layout = Layout.read(data)
    except Invalid as e:
        raise UsageError(f"{label}: {place(e.loc) or '(top level)'}: {e.text}") from None
    except RecursionError:
        raise UsageError(f"{label}: nested too deeply") from None
    layout.source = label
    if layout.name is None:
        layout.name = Path(label).stem
    errors, warnings = check_combinations(layout, env=env)
    if errors:
        raise UsageError(f"{label}: {errors[0]}")
    return layout, [f"{label}: {w}" for w in warnings]


def check_combinations(layout: Layout, env: Optional[dict[str, str]] = None) -> tuple[list[str], list[str]]:
    """Errors and warnings for flag combinations SGLang rejects or regrets at startup."""
    errors: list[str] = []
    warnings: list[str] = []
    gpus_seen: dict[int, str] = {}
    for i, arm in enumerate(layout.arms):
        where = f"arms[{i}].launch"
        if arm.launch is None:
            if layout.ramp and layout.ramp.restart_between_levels:
                warnings.append(f"arms[{i}]: attached arm {arm.name!r} cannot be restarted between levels")
            continue
        flags = arm.launch.flags
        environ = os.environ if env is None else env
        raw_command = arm.launch.command or layout.command or []
        refs = [(f"command[{j}]" if not arm.launch.command else f"{where}.command[{j}]", name)
                for j, part in enumerate(raw_command) for name in env_refs(part)]
        refs += [(f"{where}.flags.{k}", name) for k, v in flags.items() for name in env_refs(v)]
        for key, name in refs:
            if name not in environ and name not in arm.launch.env:
                errors.append(f"{key}: uses ${{{name}}}, but the environment variable {name} is not set")
        command = layout.server_command(arm, env)
        sim = is_sim_command(command)
        # SGLang's own entry points need --model-path; wrappers and the simulator may not.
        sglang = any(part == "sglang.launch_server" or part.rsplit("/", 1)[-1] == "sglang" for part in command)
        if sglang and not flags.get("model_path") and not flags.get("model"):
            errors.append(f"{where}.flags.model_path: expected the model to serve (a local dir or HF id)")
        _choice(errors, f"{where}.flags.kv_cache_dtype", flags.get("kv_cache_dtype"), KV_CACHE_DTYPES)
        _choice(errors, f"{where}.flags.speculative_algorithm", flags.get("speculative_algorithm"), SPEC_ALGORITHMS)
        _choice(errors, f"{where}.flags.quantization", flags.get("quantization"), QUANTIZATIONS)
        _choice(errors, f"{where}.flags.attention_backend", flags.get("attention_backend"), ATTENTION_BACKENDS)
        mem = flags.get("mem_fraction_static")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 < mem < 1):
            errors.append(f"{where}.flags.mem_fraction_static: expected a number between 0 and 1, got {mem!r}")
        for key in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                    "max_running_requests", "max_total_tokens", "tp_size", "tensor_parallel_size",
                    "dp_size", "decode_log_interval", "chunked_prefill_size"):
            v = flags.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                errors.append(f"{where}.flags.{key}: expected a positive integer, got {v!r}")
        algo = str(flags.get("speculative_algorithm") or "").upper()
        spec_v2 = arm.launch.env.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes", "on")
        topk = flags.get("speculative_eagle_topk")
        if spec_v2 and algo in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE") and topk is not None:
            if isinstance(topk, int) and topk > 1:
                warnings.append(f"{where}.flags.speculative_eagle_topk: {topk} with SGLANG_ENABLE_SPEC_V2=1: "
                                "SGLang will refuse to start ('Spec v2 currently only supports topk = 1'); leave it unset")
            else:
                warnings.append(f"{where}.flags.speculative_eagle_topk: set with SGLANG_ENABLE_SPEC_V2=1; "
                                "operators found it must be left unset with spec v2")
        # EAGLE on a model with MTP heads drafts with the model itself; EAGLE3 and STANDALONE never do.
        if algo in ("EAGLE3", "STANDALONE") and not sim and not flags.get("speculative_draft_model_path"):
            warnings.append(f"{where}.flags.speculative_draft_model_path: not set; {algo} needs a draft model")
        tp = flags.get("tp_size") or flags.get("tensor_parallel_size") or 1
        gpus = arm.launch.gpus
        if gpus is not None and isinstance(tp, int) and len(gpus) < tp:
            errors.append(f"{where}.gpus: tp_size {tp} needs {tp} GPUs, got {gpus!r}")
        for g in gpus or []:
            if g in gpus_seen:
                warnings.append(f"{where}.gpus: GPU {g} is also given to arm {gpus_seen[g]!r}; "
                                "two servers on one GPU compete for its memory")
            gpus_seen.setdefault(g, arm.name)
    _check_gateway(layout, errors)
    ramp_arms = 1 if layout.gateway is not None else len(layout.arms)  # a gateway is ramped as one arm
    if layout.ramp is not None and layout.ramp.search and ramp_arms > 1:
        errors.append(f"ramp.search: one server at a time (each needs its own levels), the layout has {ramp_arms} arms")
    return errors, warnings


def _check_gateway(layout: Layout, errors: list[str]) -> None:
    """The gateway section against the rest of the layout: its workers are arms, PD roles pair up,
    its ports and name are its own, no restarts between levels."""
    g = layout.gateway
    if g is None:
        return
    names = [a.name for a in layout.arms]
    if g.name in names:
        errors.append(f"gateway.name: {g.name!r} is also an arm's name (their log files would clash)")
    if g.workers is not None:
        if not g.workers:
            errors.append("gateway.workers: expected the names of the arms behind the gateway, got []")
        for w in g.workers:
            if w not in names:
                errors.append(f"gateway.workers: {w!r} is not an arm of this layout (arms: {', '.join(names)})")
        if len(set(g.workers)) != len(g.workers):
            errors.append("gateway.workers: an arm is named twice")
    elif not layout.launched:
        errors.append("gateway.workers: no arm is launched; name the attached arms behind the gateway")
    taken = [p for p in (g.port, g.metrics_port) if p]
    ports = [a.launch.port for a in layout.launched if a.launch and a.launch.port]
    if len(set(taken)) != len(taken) or set(taken) & set(ports):
        errors.append("gateway.port, gateway.metrics_port: expected ports distinct from each other and from the "
                      "arms' launch ports")
    roles = {layout.role_of(a) for a in layout.gateway_workers()}
    pd = roles & set(PD_ROLES)
    if pd and "regular" in roles:
        errors.append("gateway.workers: prefill or decode workers beside regular ones (a gateway routes one way)")
    elif pd and len(pd) == 1:
        errors.append(f"gateway.workers: a PD gateway needs prefill and decode workers, found only {pd.pop()}")
    if layout.ramp is not None and layout.ramp.restart_between_levels:
        errors.append("ramp.restart_between_levels: not with a gateway (its workers would drop out of its "
                      "registry mid-ramp)")


def _choice(errors: list[str], where: str, value: Any, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        errors.append(f"{where}: expected one of {', '.join(choices)}, got {value!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "an empty file"
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__)
