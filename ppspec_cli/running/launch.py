"""Resolved profile -> the exact vLLM launch: argv and environment per node, plus the plan file the
in-engine plugin reads. Pure translation (no process is started here), so `serve --dry-run` prints
precisely what `serve` runs, on a machine with neither vLLM nor GPUs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ppspec_cli.io import safeio, shellout
from ppspec_cli.io.redact import is_secret_name
from ppspec_cli.errors import PpspecError
from ppspec_cli.planning.resolve import Resolved
from ppspec_cli.planning.rules import Finding

PLAN_FORMAT = "ppspec-plan/1"

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


@dataclass
class NodeLaunch:
    node_rank: int
    role: str  # "head" | "worker"
    argv: list[str]
    env: dict[str, str]  # what ppspec sets on top of the caller's environment
    env_refs: dict[str, str] = field(default_factory=dict)  # VAR -> name of the caller's variable it copies (secrets)

    def shell_line(self) -> str:
        """Copy-pasteable `VAR=value ... cmd args` (secrets by reference, never by value)."""
        return shellout.command(self.argv, self.env, self.env_refs)


@dataclass
class LaunchSpec:
    nodes: list[NodeLaunch]
    url: str
    run_dir: Path
    plan_file: Path
    plan_data: dict[str, Any]
    overlay: dict[str, Any] | None  # drafter config keys to overlay; dir built at serve time
    overlay_dir: Path | None
    drafter_source: str | None  # the drafter dir/id the overlay is made from

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "run_dir": str(self.run_dir),
            "plan_file": str(self.plan_file),
            "overlay": self.overlay,
            "overlay_dir": None if self.overlay_dir is None else str(self.overlay_dir),
            "nodes": [
                {"node_rank": n.node_rank, "role": n.role, "argv": n.argv, "env": n.env, "env_refs": n.env_refs, "shell": n.shell_line()}
                for n in self.nodes
            ],
        }


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


#: Environment variable naming the engine executable to run instead of `vllm` (tests point it at a
#: fake engine; also a way to use a wrapper script). Shown in `serve --dry-run` like any argv.
ENV_VLLM_EXECUTABLE = "PPSPEC_VLLM_EXECUTABLE"


def vllm_executable() -> str:
    """$PPSPEC_VLLM_EXECUTABLE when set; else `vllm` next to this interpreter (the venv ppspec runs
    in), else on PATH, else the `bin/vllm` beside an importable vllm package (the layout of
    `pip install --target DIR`). When vLLM imports but no command is found, that is an error of
    its own: "install vLLM" would send the user the wrong way."""
    override = os.environ.get(ENV_VLLM_EXECUTABLE)
    if override:
        return override
    cand = Path(sys.executable).parent / "vllm"
    if cand.exists():
        return str(cand)
    found = shutil.which("vllm")
    if found:
        return found
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "vllm"  # not installed: starting it fails with serve's "install vLLM" message
    pkg_root = Path(spec.origin).resolve().parent.parent
    beside = pkg_root / "bin" / "vllm"
    if beside.exists():
        return str(beside)
    raise PpspecError(
        f"the `vllm` command is not on PATH, although the vllm package imports (from {pkg_root})",
        where="vllm",
        fix=f"put the folder holding the `vllm` script on PATH, or set {ENV_VLLM_EXECUTABLE} to it",
        exit_code=1,
    )


def _local_ref(ref: str) -> str:
    if ref.startswith("demo:"):
        from ppspec_cli import demo

        return demo.resolve_model_ref(ref)
    return ref


def _engine_ref(ref: str, ck: Any, resolve_demo: bool) -> str:
    """The model reference the engine gets. A local checkpoint is passed as the absolute path
    `check` read (relative paths resolve against the profile's directory, as in `check`, not the
    engine's working directory); hub ids pass unchanged; a reference starting with `-` never reaches
    argv as an option."""
    if ref.startswith("demo:"):
        return _local_ref(ref) if resolve_demo else ref
    if ck is not None and getattr(ck, "source", None) == "local" and getattr(ck, "location", None):
        return os.path.abspath(ck.location)
    return os.path.abspath(ref) if ref.startswith("-") else ref


def default_run_dir(profile_name: str) -> Path:
    base = Path(os.environ.get("PPSPEC_CACHE") or Path.home() / ".cache" / "ppspec")
    return base / "runs" / profile_name


def build_launch(r: Resolved, *, run_dir: Path | None = None, resolve_demo: bool = True) -> LaunchSpec:
    """Translate a resolved profile into per-node launches. Raises PpspecError when the profile
    cannot be launched as written (rules have normally reported this already)."""
    p = r.profile
    t = p.topology
    refused = launch_refusals(p.engine, p.env, p.server.api_key_env, None)
    if refused:  # `serve` has refused already (they are `check` errors); a caller of this function must too
        f = refused[0]
        raise PpspecError(f"{f.message} [{f.code}]", where=f.field, fix=f.hint, exit_code=1)
    run_dir = run_dir or default_run_dir(p.name)
    plan_file = run_dir / "plan.json"
    host, port = p.server.host, p.server.port
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else url_host}:{port}"
    target_ref = _engine_ref(p.target.model, r.target, resolve_demo)
    base = [vllm_executable(), "serve", target_ref]
    common: list[str] = []
    if p.target.revision:
        common += _opt("--revision", p.target.revision)
    if p.dtype:
        common += _opt("--dtype", p.dtype)
    if p.trust_remote_code:
        common += ["--trust-remote-code"]
    common += ["--tensor-parallel-size", str(t.tensor_parallel), "--pipeline-parallel-size", str(t.pipeline_parallel)]
    if t.data_parallel > 1:
        common += ["--data-parallel-size", str(t.data_parallel)]
    overlay = r.plan.overlay if r.plan is not None else None
    overlay_dir = None
    drafter_source = None
    if p.drafter is not None:
        d = p.drafter
        spec: dict[str, Any] = {"method": d.method, "num_speculative_tokens": d.num_speculative_tokens}
        if d.model:
            drafter_source = _engine_ref(d.model, r.drafter, resolve_demo)
            if overlay:
                overlay_dir = run_dir / "drafter-overlay"
                spec["model"] = str(overlay_dir)
            else:
                spec["model"] = drafter_source
                if d.revision:
                    spec["revision"] = d.revision
        if d.tensor_parallel is not None:
            spec["draft_tensor_parallel_size"] = d.tensor_parallel
        common += ["--speculative-config", json.dumps(spec, separators=(",", ":"), sort_keys=True)]
    if p.launch.executor == "ray" or t.nodes > 1:
        common += ["--distributed-executor-backend", p.launch.executor]
    extra = engine_args(p.engine)

    env: dict[str, str] = {"PPSPEC_PLAN_FILE": str(plan_file)}
    if t.layer_partition:
        env["VLLM_PP_LAYER_PARTITION"] = ",".join(str(x) for x in t.layer_partition)
    if r.platform in ("cuda", "rocm") and p.drafter is not None:
        # Only Model Runner V2 relays taps over PP; make a fallback to V1 an error, not a silent switch.
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    if r.platform == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # else vLLM reserves most of RAM for KV cache
        if t.pipeline_parallel > 1:
            env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
            if not any(_flag_name(k) in ("compilation-config", "enforce-eager") for k in p.engine):
                # With enforce-eager the CPU worker skips warm-up and PP stage buffers are never allocated.
                extra += ["--compilation-config", json.dumps({"mode": 2, "backend": "eager"}, separators=(",", ":"), sort_keys=True)]
    env.update(p.env)  # the profile's own settings win
    env_refs: dict[str, str] = {}
    if p.server.api_key_env:
        env_refs["VLLM_API_KEY"] = p.server.api_key_env

    nodes: list[NodeLaunch] = []
    for rank in range(t.nodes):
        argv = list(base) + list(common)
        role = "head"
        if t.nodes > 1 and p.launch.executor == "mp":
            argv += ["--nnodes", str(t.nodes), "--node-rank", str(rank), *_opt("--master-addr", p.launch.master_addr or "MASTER_ADDR"), "--master-port", str(p.launch.master_port)]
            if rank > 0:
                argv += ["--headless"]
                role = "worker"
        elif t.nodes > 1 and rank > 0:
            role = "worker"  # ray: worker nodes join the Ray cluster; only the head runs vllm serve
        if role == "head":
            argv += [*_opt("--host", host), "--port", str(port), *_opt("--served-model-name", p.server.served_model_name or p.name)]
        argv += extra
        if p.launch.executor == "ray" and role == "worker":
            argv = ["ray", "start", "--address", f"{p.launch.master_addr or 'HEAD_ADDR'}:6379"]
        nodes.append(NodeLaunch(rank, role, argv, dict(env), dict(env_refs)))

    plan_data = {
        "format": PLAN_FORMAT,
        "profile": p.name,
        "pack": None if r.pack is None else r.pack.name,
        "plan": None if r.plan is None else r.plan.to_json(),
        "expect": {
            "pp": t.pipeline_parallel,
            "tp": t.tensor_parallel,
            "partition": None if r.plan is None else list(r.plan.partition),
            "taps": None if r.plan is None else list(r.plan.taps),
            "method": p.drafter.method if p.drafter else None,
            "draft_layer_start": (r.plan.draft_layer_ids[0] if r.plan is not None and r.plan.draft_layer_ids else None),
            "platform": r.platform,
        },
        "status_dir": str(run_dir / "plugin-status"),
    }
    return LaunchSpec(nodes, url, run_dir, plan_file, plan_data, overlay, overlay_dir, drafter_source)


def materialize_overlay(spec: LaunchSpec, revision: str | None = None) -> None:
    """Build the drafter overlay: a directory that links every drafter file except config.json,
    which carries the overlay keys. The original checkpoint is never modified."""
    if spec.overlay is None or spec.overlay_dir is None or spec.drafter_source is None:
        return
    src = Path(os.path.expanduser(spec.drafter_source))
    if not src.is_dir():
        from ppspec_cli.checkpoint.reader import download_snapshot

        src = download_snapshot(spec.drafter_source, revision)
    try:
        cfg = safeio.read_json(src / "config.json", limit=8 << 20, what="drafter config.json", exit_code=1)
    except PpspecError as e:
        raise PpspecError(
            f"cannot read the drafter's config.json to build its config overlay: {e.what}",
            where=str(src / "config.json"),
            fix="the engine loads config.json: get the drafter's complete config.json into that directory",
            exit_code=1,
        ) from None
    if not isinstance(cfg, dict):
        raise PpspecError("the drafter's config.json is not a JSON object", where=str(src / "config.json"), fix="restore it from the drafter repository", exit_code=1)
    cfg.update(spec.overlay)
    out = spec.overlay_dir
    try:
        if out.is_symlink() or out.is_file():
            out.unlink()
        elif out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name == "config.json":
                continue
            (out / f.name).symlink_to(f.resolve())
        (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (out / "PPSPEC_OVERLAY.txt").write_text(
            f"Generated by ppspec: {src}/config.json with {sorted(spec.overlay)} overridden.\n", encoding="utf-8"
        )
    except OSError as e:
        raise PpspecError(f"cannot build the drafter overlay: {e.strerror or e}", where=str(out), fix="check that the run directory is writable (--run-dir)", exit_code=1) from None
