"""The one reader of a profile's `engine:` options and `env:` entries: which flags ppspec manages,
which it refuses (and why), how an option becomes a `vllm serve` flag, and (where vLLM is
importable) what the installed `vllm serve` parser knows. `check` reports these findings and
`serve` refuses on them: one rule set, used by planning.rules and running.launch alike."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ppspec_cli.errors import PpspecError
from ppspec_cli.findings import Finding
from ppspec_cli.io import safeio
from ppspec_cli.io.redact import is_secret_name

#: Flags ppspec derives from the profile; setting them again under `engine:` would contradict it.
MANAGED_FLAGS = {
    "tensor-parallel-size": "topology.tensor_parallel",
    "pipeline-parallel-size": "topology.pipeline_parallel",
    "data-parallel-size": "topology.data_parallel",
    "speculative-config": "drafter",
    "host": "server.host",
    "port": "server.port",
    "api-key": "server.api_key_env",
    "served-model-name": "server.served_model_name",
    "trust-remote-code": "trust_remote_code",
    "revision": "target.revision",
    "dtype": "dtype",
    "nnodes": "topology.nodes",
    "node-rank": "--node-rank",
    "master-addr": "launch.master_addr",
    "master-port": "launch.master_port",
    "headless": "--node-rank",
    "distributed-executor-backend": "launch.executor",
    "model": "target.model",
}
_SHORT = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}
#: `vllm serve --config FILE` reads options from a file, where ppspec could not see the managed ones.
_REFUSED_FLAGS = {"config": "put each engine option under `engine:` in the profile"}
#: An `engine:` key: a long flag name (letters, digits, `-`, `_`; `.` for vLLM's nested `--x.y` form).
_FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
#: Environment variables that carry the plan into the engine: set by ppspec from the profile, never
#: by hand (in `env:` or in the shell that runs `ppspec serve`), or they silently override the plan.
PLAN_ENV = ("VLLM_PP_LAYER_PARTITION", "VLLM_USE_V2_MODEL_RUNNER")
#: Config keys that set a model's depth (its layer count, its MTP layer count): `hf-overrides` that
#: change one make the engine build another model than the one ppspec planned.
DEPTH_KEYS = frozenset({"num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"})

#: Every refusal of the engine options and the environment a profile asks for, by finding code.
#: One rule set (`launch_refusals`): `check` reports each as an error and `serve` refuses on it.
REFUSALS: dict[str, str] = {
    "engine-bad-option-name": "an `engine:` key that is not a vLLM option name",
    "engine-managed-option": "an `engine:` option ppspec derives from the profile, in any spelling vLLM takes as the same "
    "(`_` or `-`, a leading `--`, the `-tp`/`-pp`/`-dp` short forms, a `no-` form, an unambiguous prefix, a dotted part)",
    "engine-refused-option": "an `engine:` option ppspec does not support (`config`: options ppspec cannot see)",
    "engine-overrides-depth": "`engine: hf-overrides` that change the model's layer count",
    "engine-unknown-option": "an `engine:` option the installed vLLM does not know (needs vLLM's parser: `serve` and `check --probes`)",
    "env-secret": "a secret-looking name under `env:` (secrets come from the caller's environment)",
    "engine-secret-option": "a secret-looking option under `engine:` (it would be on the engine's command line and in launch.json)",
    "env-overrides-plan": "VLLM_PP_LAYER_PARTITION / VLLM_USE_V2_MODEL_RUNNER set by hand (`env:` or the caller's environment), or PPSPEC_* under `env:`",
    "env-plugins-skip-ppspec": "VLLM_PLUGINS set without `ppspec`: the plugin would not run and the engine would serve unpatched",
    "api-key-env-unset": "server.api_key_env names a variable that is not set in this environment "
    "(a warning in `check`, which may run where the key is not exported)",
}


def _opt(flag: str, value: str) -> list[str]:
    """`--flag value`, or `--flag=value` when the value starts with `-`: argparse would otherwise read
    such a value as another option (a value of `--trust-remote-code` must stay a value)."""
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def _flag_name(k: str) -> str:
    """An `engine:` key as the long option vLLM reads: `_` and `-` are the same, a leading `--` (or
    `-`) is dropped, the short forms `tp`/`pp`/`dp` are their long options."""
    k = k.strip().lstrip("-").replace("_", "-")
    return _SHORT.get(k, k)


def _managed_by(base: str) -> str | None:
    """The profile field that owns option `base`, if ppspec derives it: the option itself, its
    `no-` form, or an unambiguous prefix of it (argparse expands those)."""
    for name in (base, base[3:] if base.startswith("no-") else None):
        if name in MANAGED_FLAGS:
            return MANAGED_FLAGS[name]
    owners = {MANAGED_FLAGS[m] for m in MANAGED_FLAGS if m.startswith(base)}
    return owners.pop() if base and len(owners) == 1 else None


def _depth_keys(v: Any, depth: int = 0) -> list[str]:
    """The DEPTH_KEYS an hf-overrides value sets, at any nesting (a JSON string is read as JSON)."""
    if isinstance(v, str):
        try:
            v = safeio.parse_json(v, what="hf-overrides")
        except PpspecError:
            return []
    if depth > 8 or not isinstance(v, dict):
        return []
    found = [k for k in v if k in DEPTH_KEYS]
    for sub in v.values():
        found += _depth_keys(sub, depth + 1)
    return found


def _refusal(code: str, field: str, message: str, fix: str) -> Finding:
    assert code in REFUSALS, code  # every refusal is registered (the check == serve test reads REFUSALS)
    return Finding(code, "warning" if code == "api-key-env-unset" else "error", field, message, fix)


def serve_refuses(f: Finding) -> bool:
    """Whether `serve` refuses on a finding: every error, and every launch refusal (REFUSALS)."""
    return f.severity == "error" or f.code in REFUSALS


def launch_refusals(engine: Mapping[str, Any], env: Mapping[str, str], api_key_env: str | None, environ: Mapping[str, str] | None) -> list[Finding]:
    """Everything `serve` refuses about the engine options, the profile's `env:` and the caller's
    environment (`environ`; None: not looked at), as error findings. `check` reports these and
    `serve` refuses on them: one rule set. (`engine-unknown-option` needs vLLM: `unknown_engine_options`.)"""
    out: list[Finding] = []
    for k in engine:
        key = str(k)
        name = _flag_name(key)
        fld = f"engine.{key[:80]}"
        if not _FLAG_NAME.match(name):
            out.append(_refusal("engine-bad-option-name", "engine", f"engine key {key[:80]!r} is not an option name",
                                "use vLLM's long option names without `--` (letters, digits, `-`) and the value as the YAML value, e.g. `max-model-len: 4096`"))
            continue
        base = name.split(".", 1)[0]  # `speculative-config.method` sets part of a managed flag
        owner = _managed_by(base)
        if is_secret_name(key):
            out.append(_refusal("engine-secret-option", fld, f"engine.{key} is a secret written into the profile (it would be on the engine's command line and in launch.json)",
                                "remove it; export the secret in the shell that runs `ppspec serve` (HF_TOKEN for the hub, server.api_key_env for the API key): vLLM reads them from its environment"))
        elif owner is not None:
            out.append(_refusal("engine-managed-option", fld, f"engine.{key} sets a flag ppspec derives from the profile ({owner})", f"set `{owner}` instead and remove engine.{key}"))
        elif base in _REFUSED_FLAGS:
            out.append(_refusal("engine-refused-option", fld, f"engine.{key} is not supported by ppspec", _REFUSED_FLAGS[base]))
        elif base == "hf-overrides":
            keys = _depth_keys(engine[k])
            if keys:
                out.append(_refusal("engine-overrides-depth", fld, f"engine.{key} sets {sorted(set(keys))}: the engine would build a model of another depth than the one checked and planned",
                                    "point target.model at a checkpoint whose config.json has that depth (ppspec plans from the checkpoint)"))
    for k in sorted(env):
        if is_secret_name(k):
            out.append(_refusal("env-secret", f"env.{k}", f"env.{k} looks like a secret written into the profile",
                                "remove it from the profile and export it in the shell that runs `ppspec serve` (the engine inherits that environment); "
                                "for the server's API key set server.api_key_env to the variable's name"))
        elif k in PLAN_ENV or k.startswith("PPSPEC_"):
            out.append(_refusal("env-overrides-plan", f"env.{k}", f"env.{k} would override what ppspec sets from the plan",
                                "remove it: ppspec sets it from topology (layer_partition, pipeline_parallel) and the platform"))
    for k in PLAN_ENV if environ is not None else ():
        if k in environ:
            out.append(_refusal("env-overrides-plan", f"environment.{k}", f"{k} is set in this environment: the engine would inherit it where the plan does not set it",
                                f"unset {k} in the shell that runs ppspec; set topology.layer_partition in the profile instead"))
    for where, val in (("env.VLLM_PLUGINS", env.get("VLLM_PLUGINS")), ("environment.VLLM_PLUGINS", None if environ is None else environ.get("VLLM_PLUGINS"))):
        if val is not None and "ppspec" not in [x.strip() for x in val.split(",")]:
            out.append(_refusal("env-plugins-skip-ppspec", where, f"VLLM_PLUGINS={val[:80]!r} leaves out ppspec: its plugin would not run in the engine, which would serve without the plan's checks and patches",
                                "add ppspec to VLLM_PLUGINS (comma-separated) or unset it"))
    if api_key_env and environ is not None and api_key_env not in environ:
        out.append(_refusal("api-key-env-unset", "server.api_key_env", f"environment variable {api_key_env} (server.api_key_env) is not set here: `serve` refuses to start without it", f"export {api_key_env}=... before `ppspec serve`"))
    return out


def engine_args(engine: dict[str, Any]) -> list[str]:
    """Pass-through `engine:` keys as vLLM long flags (refused keys: see launch_refusals). Booleans
    become bare flags (`--x` / `--no-x`); mappings and lists become JSON, as `vllm serve --config` does."""
    out: list[str] = []
    for k, v in engine.items():
        name = _flag_name(str(k))
        if v is None:
            continue
        if isinstance(v, bool):
            out.append(f"--{name}" if v else f"--no-{name}")
        elif isinstance(v, (dict, list)):
            out += [f"--{name}", json.dumps(v, separators=(",", ":"), sort_keys=True)]
        else:
            out += _opt(f"--{name}", str(v))
    return out


def vllm_serve_parser():
    """The installed vLLM's `vllm serve` argument parser, or None when vLLM is not importable here."""
    import importlib

    # vLLM moved the serve parser: launchers.cli_args (0.32+), openai.cli_args (0.30-0.31)
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(mod).make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            return make_arg_parser(FlexibleArgumentParser())
        except Exception:  # noqa: BLE001 - vLLM not importable here, or not this version's layout
            continue
    return None


def unknown_engine_options(engine: Mapping[str, Any]) -> list[Finding]:
    """`engine-unknown-option` for each `engine:` key the installed vLLM's `serve` parser does not
    know ([] if vLLM is absent). Imports vLLM's parser (seconds): `serve` and `check --probes`."""
    return [
        _refusal("engine-unknown-option", f"engine.{str(k)[:80]}", f"the installed vLLM does not know the engine option {str(k)[:80]!r}",
                 "check the name against `vllm serve --help` (long option names without --)")
        for k in check_engine_flags(engine)
    ]


def check_engine_flags(engine: Mapping[str, Any]) -> list[str]:
    """Names under `engine:` that the installed vLLM's `serve` parser does not know ([] if vLLM absent).
    Exact names only: argparse would also take an unambiguous prefix (`trust-remote`), which could
    set a flag ppspec manages."""
    if not engine:
        return []
    parser = vllm_serve_parser()
    if parser is None:
        return []
    known = set()
    for a in parser._actions:  # noqa: SLF001 - argparse keeps its actions here
        for s in a.option_strings:
            if s.startswith("--"):
                known.add(s[2:])
                if s.startswith("--no-"):
                    known.add(s[5:])
    return [k for k in engine if _flag_name(str(k)).split(".", 1)[0] not in known]  # `x.y` sets part of --x
