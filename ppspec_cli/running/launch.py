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
from typing import Any

from ppspec_cli.io import safeio, shellout
from ppspec_cli.errors import PpspecError
from ppspec_cli.planning.resolve import Resolved, needed_behaviours
from ppspec_cli.planning.engine_options import _flag_name, _opt, engine_args, launch_refusals
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
                {"node_rank": n.node_rank, "role": n.role, "argv": n.argv, "env": n.env, "env_refs": n.env_refs, "shell": n.shell_line()}
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


def node_run_dir(profile_name: str, node_rank: int, job: str | None = None) -> Path:
    """The default run directory of node `node_rank` of a multi-node profile on this host: homes are
    usually shared between a cluster's nodes (NFS), so each host and node rank (and SLURM job) gets
    its own, and the nodes' locks and plan files never collide."""
    import re

    from ppspec_cli.io.netinfo import host_name

    leaf = f"{host_name()}-node{node_rank}"
    return default_run_dir(profile_name) / (f"slurm-{re.sub(r'[^A-Za-z0-9_.-]', '_', job)[:64] or 'job'}-{leaf}" if job else leaf)


def build_launch(r: Resolved, *, run_dir: Path | None = None, resolve_demo: bool = True) -> LaunchSpec:
    """Translate a resolved profile into per-node launches. Raises PpspecError when the profile
    cannot be launched as written (rules have normally reported this already).

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


def _build(r: Resolved, run_dir: Path, resolve_demo: bool) -> LaunchSpec:  # noqa: C901, PLR0912, PLR0915 (a limit to bring it under)
    p = r.profile
    t = p.topology
    refused = launch_refusals(p.engine, p.env, p.server.api_key_env, None, p.trust.model_dump())
    if refused:  # `serve` has refused already (they are `check` errors); a caller of this function must too
        f = refused[0]
        raise PpspecError(f"{f.message} [{f.code}]", where=f.field, fix=f.hint, exit_code=1)
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
            "needs": needed_behaviours(r),
        },
        "status_dir": str(run_dir / "plugin-status"),
    }
    return LaunchSpec(nodes, url, run_dir, plan_file, plan_data, overlay, overlay_dir, drafter_source)


def materialize_overlay(spec: LaunchSpec, revision: str | None = None, rd: Any = None) -> None:
    """Build the drafter overlay: a directory that links every drafter file except config.json,
    which carries the overlay keys. The original checkpoint is never modified. `rd`: the run
    directory held by descriptor (serve.rundir.RunDir): the overlay is then built relative to it."""
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
    cfg_text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    note = f"Generated by ppspec: {src}/config.json with {sorted(spec.overlay)} overridden.\n"
    if rd is not None and out.parent == rd.path:
        rd.rmtree(out.name)  # a link there is unlinked, never followed
        try:
            with rd.mkdir(out.name) as d:
                for f in src.iterdir():
                    if f.name != "config.json":
                        os.symlink(f.resolve(), f.name, dir_fd=d.fd)
                d.write_text("config.json", cfg_text, what="the drafter overlay's config.json")
                d.write_text("PPSPEC_OVERLAY.txt", note, what="the drafter overlay's note")
        except OSError as e:
            raise PpspecError(f"cannot build the drafter overlay: {e.strerror or e}", where=str(out), fix="check that the run directory is writable (--run-dir)", exit_code=1) from None
        return
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
        safeio.write_text(out / "config.json", cfg_text, what="the drafter overlay's config.json")
        safeio.write_text(out / "PPSPEC_OVERLAY.txt", note, what="the drafter overlay's note")
    except OSError as e:
        raise PpspecError(f"cannot build the drafter overlay: {e.strerror or e}", where=str(out), fix="check that the run directory is writable (--run-dir)", exit_code=1) from None
