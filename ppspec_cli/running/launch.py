"""Resolved profile -> the exact vLLM launch: argv and environment per node, plus the plan file the
in-engine plugin reads. Pure translation (no process is started here), so `serve --dry-run` prints
precisely what `serve` runs, on a machine with neither vLLM nor GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio, shellout
from ppspec_cli.planning.engine_options import _flag_name, _opt, engine_args, launch_refusals
from ppspec_cli.planning.profile import Profile
from ppspec_cli.planning.resolve import Resolved, needed_behaviours
from ppspec_cli.running.planfile import PLAN_FORMAT


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
                {
                    "node_rank": n.node_rank,
                    "role": n.role,
                    "argv": n.argv,
                    "env": n.env,
                    "env_refs": n.env_refs,
                    "shell": n.shell_line(),
                }
                for n in self.nodes
            ],
        }


#: Environment variable naming the engine executable to run instead of `vllm` (tests point it at a
#: fake engine; also a way to use a wrapper script). Shown in `serve --dry-run` like any argv.
ENV_VLLM_EXECUTABLE = "PPSPEC_VLLM_EXECUTABLE"


def vllm_executable() -> str:
    """$PPSPEC_VLLM_EXECUTABLE when set; else `vllm` next to this interpreter (the venv ppspec runs
    in), else on PATH, else the `bin/vllm` beside an importable vllm package (the layout of
    `pip install --target DIR`). When vLLM imports but no command is found, that is an error of
    its own: "install vLLM" would send the user the wrong way."""
    from ppspec_cli.io.settings import settings

    override = settings().vllm_executable
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
    """A `demo:` model's directory (built by `serve` at start: build_demo_models), else `ref`."""
    if ref.startswith("demo:"):
        from ppspec_cli import demo

        return demo.demo_model_path(ref)
    return ref


def build_demo_models(p: Profile, progress: Callable[[str], None]) -> None:
    """Build the profile's `demo:` models the launch names (once; cached): the one place a run builds
    weights. check, plan, --predict, the dry run and the exports read their description instead."""
    from ppspec_cli import demo

    for ref in (p.target.model, p.drafter.model if p.drafter else None):
        if ref and demo.is_demo_ref(ref):
            demo.ensure_demo_model(ref, progress=progress)


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
    from ppspec_cli.io.cache import owned_dir

    return owned_dir("runs") / profile_name


def node_run_dir(profile_name: str, node_rank: int, job: str | None = None) -> Path:
    """The default run directory of node `node_rank` of a multi-node profile on this host: homes are
    usually shared between a cluster's nodes (NFS), so each host and node rank (and SLURM job) gets
    its own, and the nodes' locks and plan files never collide."""
    import re

    from ppspec_cli.io.netinfo import host_name

    leaf = f"{host_name()}-node{node_rank}"
    return default_run_dir(profile_name) / (
        f"slurm-{re.sub(r'[^A-Za-z0-9_.-]', '_', job)[:64] or 'job'}-{leaf}" if job else leaf
    )


def build_launch(r: Resolved, *, run_dir: Path | None = None, resolve_demo: bool = True) -> LaunchSpec:
    """Translate a resolved profile into per-node launches. The preflight's verdict decides whether
    it starts (prepare); this builds what a dry run and an export show even for a refused profile,
    and raises PpspecError only where no launch can be built (UNBUILDABLE: a secret, a non-option key).

    Without `run_dir`, a multi-node profile gives every node its own run directory on this host
    (node_run_dir: host name and node rank in the path), and the spec's own run directory is
    node 0's (serve without --node-rank runs node 0). With `run_dir`, every node uses that one."""
    t = r.profile.topology
    if run_dir is None and t.nodes > 1:
        per_node = [_build(r, node_run_dir(r.profile.name, i), resolve_demo) for i in range(t.nodes)]
        spec = per_node[0]
        spec.nodes = [s.nodes[i] for i, s in enumerate(per_node)]
        return spec
    return _build(r, run_dir or default_run_dir(r.profile.name), resolve_demo)


def _build(r: Resolved, run_dir: Path, resolve_demo: bool) -> LaunchSpec:
    """One node set's launch, from the profile alone: the argv shared by every engine node, each
    node's own part, the environment, and the plan file the in-engine plugin reads."""
    p = r.profile
    _refuse_unbuildable(p)
    plan_file = run_dir / "plan.json"
    target_ref = _engine_ref(p.target.model, r.target, resolve_demo)
    base = [vllm_executable(), "serve", target_ref]
    drafter = _drafter_launch(r, run_dir, resolve_demo)
    common = _shared_engine_args(p, drafter.config)
    extra = _pass_through_args(r)
    env, env_refs = _environment(r, plan_file), _env_refs(p)
    nodes = []
    for rank in range(p.topology.nodes):
        role = "worker" if rank > 0 else "head"
        argv = _node_argv(p, rank, role, base + common, extra)
        nodes.append(NodeLaunch(rank, role, argv, dict(env), dict(env_refs)))
    overlay = r.plan.overlay if r.plan is not None else None
    return LaunchSpec(
        nodes,
        _server_url(p.server.host, p.server.port),
        run_dir,
        plan_file,
        _plan_data(r, run_dir),
        overlay,
        drafter.overlay_dir,
        drafter.source,
    )


#: The refusals a launch cannot even be built with: a secret would be written into the argv, the
#: environment and launch.json (and an export's script); a key that is no option name is no flag.
#: The other engine-option refusals build a launch that `serve` never starts: the verdict refuses
#: them once (preflight), and a dry run or export shows that launch next to the refusal.
UNBUILDABLE = frozenset({"engine-secret-option", "env-secret", "engine-bad-option-name"})


def _refuse_unbuildable(p: Profile) -> None:
    """Defensive, for any caller: `serve`, `check` and `export` have reported these in the verdict
    (engine_options.launch_refusals); here only the message, where and fix, not the code again."""
    for f in launch_refusals(p.engine, p.env, None, None, None):
        if f.code in UNBUILDABLE:
            raise PpspecError(f"{f.message}: ppspec builds no launch with it", where=f.field, fix=f.hint, exit_code=1)


def _server_url(host: str, port: int) -> str:
    """The URL clients reach the head's server at (a wildcard bind is reached on loopback)."""
    url_host = f"[{host}]" if ":" in host else host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else url_host}:{port}"


@dataclass
class _DrafterLaunch:
    config: dict[str, Any] | None  # the --speculative-config value; None without a drafter
    overlay_dir: Path | None  # where the config overlay is built (the engine loads the drafter from there)
    source: str | None  # the drafter dir/id the overlay is made from


def _drafter_launch(r: Resolved, run_dir: Path, resolve_demo: bool) -> _DrafterLaunch:
    """The speculative config. When the plan overlays drafter config keys, the engine loads the
    drafter from the overlay directory (built at serve time from `source`), not from its own."""
    d = r.profile.drafter
    if d is None:
        return _DrafterLaunch(None, None, None)
    overlay = r.plan.overlay if r.plan is not None else None
    config: dict[str, Any] = {"method": d.method, "num_speculative_tokens": d.num_speculative_tokens}
    overlay_dir = source = None
    if d.model:
        source = _engine_ref(d.model, r.drafter, resolve_demo)
        if overlay:
            overlay_dir = run_dir / "drafter-overlay"
            config["model"] = str(overlay_dir)
        else:
            config["model"] = source
            if d.revision:
                config["revision"] = d.revision
    if d.tensor_parallel is not None:
        config["draft_tensor_parallel_size"] = d.tensor_parallel
    if d.schedule is not None:  # dynamic speculative decoding (vLLM 0.32+): batch-size ranges -> k
        config["num_speculative_tokens_per_batch_size"] = [list(e) for e in d.schedule]
    return _DrafterLaunch(config, overlay_dir, source)


def _shared_engine_args(p: Profile, speculative_config: dict[str, Any] | None) -> list[str]:
    """The engine options ppspec derives from the profile, the same on every node."""
    t = p.topology
    args: list[str] = []
    if p.target.revision:
        args += _opt("--revision", p.target.revision)
    if p.dtype:
        args += _opt("--dtype", p.dtype)
    if p.trust_remote_code:
        args += ["--trust-remote-code"]
    args += ["--tensor-parallel-size", str(t.tensor_parallel), "--pipeline-parallel-size", str(t.pipeline_parallel)]
    if t.data_parallel > 1:
        args += ["--data-parallel-size", str(t.data_parallel)]
    if speculative_config is not None:
        args += ["--speculative-config", json.dumps(speculative_config, separators=(",", ":"), sort_keys=True)]
    if p.launch.executor == "ray" or t.nodes > 1:
        args += ["--distributed-executor-backend", p.launch.executor]
    return args


def _pass_through_args(r: Resolved) -> list[str]:
    """The profile's `engine:` keys, last on every engine argv; plus, on CPU with PP, an eager
    compilation config unless the profile chose one (or enforce-eager) itself."""
    p = r.profile
    args = engine_args(p.engine)
    if r.platform == "cpu" and p.topology.pipeline_parallel > 1:
        if not any(_flag_name(k) in ("compilation-config", "enforce-eager") for k in p.engine):
            # With enforce-eager the CPU worker skips warm-up and PP stage buffers are never allocated.
            args += [
                "--compilation-config",
                json.dumps({"mode": 2, "backend": "eager"}, separators=(",", ":"), sort_keys=True),
            ]
    return args


def _environment(r: Resolved, plan_file: Path) -> dict[str, str]:
    """What ppspec sets in every node's environment; the profile's own `env:` wins."""
    p, t = r.profile, r.profile.topology
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
    env.update(p.env)
    return env


def _env_refs(p: Profile) -> dict[str, str]:
    """Variables copied from the caller's environment by name (secrets: never written out)."""
    return {"VLLM_API_KEY": p.server.api_key_env} if p.server.api_key_env else {}


def _node_argv(p: Profile, rank: int, role: str, engine_argv: list[str], extra: list[str]) -> list[str]:
    """Node `rank`'s command. Multi-node mp: every node runs `vllm serve` with the rendezvous flags
    (workers headless). Ray: worker nodes only join the head's Ray cluster. Only the head serves."""
    t, launch = p.topology, p.launch
    if launch.executor == "ray" and role == "worker":
        return ["ray", "start", "--address", f"{launch.master_addr or 'HEAD_ADDR'}:6379"]
    argv = list(engine_argv)
    if t.nodes > 1 and launch.executor == "mp":
        argv += [
            "--nnodes",
            str(t.nodes),
            "--node-rank",
            str(rank),
            *_opt("--master-addr", launch.master_addr or "MASTER_ADDR"),
            "--master-port",
            str(launch.master_port),
        ]
        if role == "worker":
            argv += ["--headless"]
    if role == "head":
        argv += [
            *_opt("--host", p.server.host),
            "--port",
            str(p.server.port),
            *_opt("--served-model-name", p.server.served_model_name or p.name),
        ]
    return argv + extra


def _plan_data(r: Resolved, run_dir: Path) -> dict[str, Any]:
    """The plan file's content: the plan and what the in-engine plugin expects to find."""
    p, t, plan = r.profile, r.profile.topology, r.plan
    return {
        "format": PLAN_FORMAT,
        "profile": p.name,
        "pack": None if r.pack is None else r.pack.name,
        "plan": None if plan is None else plan.to_json(),
        "expect": {
            "pp": t.pipeline_parallel,
            "tp": t.tensor_parallel,
            "partition": None if plan is None else list(plan.partition),
            "taps": None if plan is None else list(plan.taps),
            "method": p.drafter.method if p.drafter else None,
            "draft_layer_start": (plan.draft_layer_ids[0] if plan is not None and plan.draft_layer_ids else None),
            "platform": r.platform,
            "needs": needed_behaviours(r),
        },
        "status_dir": str(run_dir / "plugin-status"),
    }


def materialize_overlay(
    spec: LaunchSpec, revision: str | None = None, rd: Any = None, cancelled: Callable[[], bool] | None = None
) -> None:
    """Build the drafter overlay: a directory that links every drafter file except config.json,
    which carries the overlay keys. The original checkpoint is never modified. `rd`: the run
    directory held by descriptor (serve.rundir.RunDir): the overlay is then built relative to it."""
    if spec.overlay is None or spec.overlay_dir is None or spec.drafter_source is None:
        return
    src = Path(os.path.expanduser(spec.drafter_source))
    if not src.is_dir():
        from ppspec_cli.checkpoint.reader import download_snapshot

        src = download_snapshot(spec.drafter_source, revision, cancelled)  # DownloadCancelled when cancelled() says so
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
        raise PpspecError(
            "the drafter's config.json is not a JSON object",
            where=str(src / "config.json"),
            fix="restore it from the drafter repository",
            exit_code=1,
        )
    cfg.update(spec.overlay)
    out = spec.overlay_dir
    cfg_text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    note = f"Generated by ppspec: {src}/config.json with {sorted(spec.overlay)} overridden.\n"
    if rd is not None and out.parent == rd.path:
        rd.rmtree(out.name)  # a link there is unlinked, never followed
        try:
            with rd.mkdir(out.name) as d:
                for f in src.iterdir():
                    if f.name != "config.json":
                        safeio.symlink(f.resolve(), f.name, dir_fd=d.fd)
                d.write_text("config.json", cfg_text, what="the drafter overlay's config.json")
                d.write_text("PPSPEC_OVERLAY.txt", note, what="the drafter overlay's note")
        except OSError as e:
            raise PpspecError(
                f"cannot build the drafter overlay: {e.strerror or e}",
                where=str(out),
                fix="check that the run directory is writable (--run-dir)",
                exit_code=1,
            ) from None
        return
    try:
        safeio.remove_tree(out, what="the previous drafter overlay")  # a link there is unlinked, never followed
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name == "config.json":
                continue
            safeio.symlink(f.resolve(), out / f.name)
        safeio.write_text(out / "config.json", cfg_text, what="the drafter overlay's config.json")
        safeio.write_text(out / "PPSPEC_OVERLAY.txt", note, what="the drafter overlay's note")
    except OSError as e:
        raise PpspecError(
            f"cannot build the drafter overlay: {e.strerror or e}",
            where=str(out),
            fix="check that the run directory is writable (--run-dir)",
            exit_code=1,
        ) from None
