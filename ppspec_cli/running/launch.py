"""Resolved profile -> the exact vLLM launch: argv and environment per node, plus the plan file the
in-engine plugin reads. Pure translation (no process is started, nothing is read here): the
`vllm` command, the runs directory and the host name come from the run's facts, the `engine:`
options from the one reader (Resolved.options), so `serve --dry-run` prints precisely what `serve`
runs, on a machine with neither vLLM nor GPUs. Linear in the nodes: the argv every node shares is
built once, then each node's own part.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import safeio, shellout
from ppspec_cli.planning.engine_options import EngineOptions
from ppspec_cli.planning.placement import node_run_dir
from ppspec_cli.planning.profile import Profile
from ppspec_cli.planning.resolve import Resolved
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
        """The launch for machines: each node's argv and env (what it adds to the caller's), once.
        The copy-pasteable shell line is the text dry run's (it holds the env again: at a schema's
        4096 nodes it doubled the JSON past 64 MiB, the attack suite's costs/nodes-at-max)."""
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
                }
                for n in self.nodes
            ],
        }


@dataclass(frozen=True)
class Site:
    """Where a launch runs, from the run's facts: the `vllm` command, ppspec's runs directory, the
    host name (multi-node run directories are named by host and node rank)."""

    executable: str
    run_root: Path
    host: str


def _engine_ref(ref: str, ck: Any) -> str:
    """The model reference the engine gets. A local checkpoint (a `demo:` model's built directory
    included) is passed as the absolute path `check` read (relative paths resolve against the
    profile's directory, as in `check`, not the engine's working directory); hub ids pass
    unchanged; a reference starting with `-` never reaches argv as an option."""
    if ck is not None and getattr(ck, "source", None) == "local" and getattr(ck, "location", None):
        return os.path.abspath(ck.location)
    return os.path.abspath(ref) if ref.startswith("-") else ref


def build_launch(r: Resolved, site: Site, *, run_dir: Path | None = None) -> LaunchSpec:
    """Translate a resolved profile into per-node launches. The verdict decides whether it starts;
    this builds what a dry run and an export show even for a refused profile (where no launch can
    be built, a secret or a key that is no option, the act refuses first: operation/outcome.py).

    `run_dir` (else the placement's): every node uses that one. Without either, a multi-node
    profile gives every node its own run directory on this host (node_run_dir: host name and node
    rank in the path), and the spec's own run directory is node 0's (serve without --node-rank
    runs node 0)."""
    p = r.profile
    t = p.topology
    rd = run_dir or r.placement.run_dir
    if rd is not None:
        dirs = [rd] * t.nodes
    elif t.nodes > 1:
        dirs = [node_run_dir(site.run_root, site.host, p.name, i) for i in range(t.nodes)]
    else:
        dirs = [site.run_root / p.name]
    head, tail = _shared_engine_args(p)
    base = [site.executable, "serve", _engine_ref(p.target.model, r.target), *head]
    extra = _pass_through_args(r)
    env_refs = _env_refs(p)
    base_env = _environment(r)
    nodes = []
    for rank, node_dir in enumerate(dirs):
        role = "worker" if rank > 0 else "head"
        engine_argv = base + _speculative_args(_drafter_launch(r, node_dir)) + tail
        env = {"PPSPEC_PLAN_FILE": str(node_dir / "plan.json"), **base_env}
        nodes.append(NodeLaunch(rank, role, _node_argv(p, rank, role, engine_argv, extra), env, dict(env_refs)))
    drafter = _drafter_launch(r, dirs[0])
    overlay = r.plan.overlay if r.plan is not None else None
    return LaunchSpec(
        nodes,
        _server_url(p.server.host, p.server.port),
        dirs[0],
        dirs[0] / "plan.json",
        _plan_data(r, dirs[0]),
        overlay,
        drafter.overlay_dir,
        drafter.source,
    )


def _server_url(host: str, port: int) -> str:
    """The URL clients reach the head's server at (a wildcard bind is reached on loopback)."""
    url_host = f"[{host}]" if ":" in host else host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else url_host}:{port}"


@dataclass
class _DrafterLaunch:
    config: dict[str, Any] | None  # the --speculative-config value; None without a drafter
    overlay_dir: Path | None  # where the config overlay is built (the engine loads the drafter from there)
    source: str | None  # the drafter dir/id the overlay is made from


def _drafter_launch(r: Resolved, run_dir: Path) -> _DrafterLaunch:
    """The speculative config. When the plan overlays drafter config keys, the engine loads the
    drafter from the overlay directory (built at serve time from `source`), not from its own."""
    d = r.profile.drafter
    if d is None:
        return _DrafterLaunch(None, None, None)
    overlay = r.plan.overlay if r.plan is not None else None
    config: dict[str, Any] = {"method": d.method, "num_speculative_tokens": d.num_speculative_tokens}
    overlay_dir = source = None
    if d.model:
        source = _engine_ref(d.model, r.drafter)
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


def _opt(flag: str, value: str) -> list[str]:
    """`--flag value`, or `--flag=value` when the value starts with `-`: argparse would otherwise read
    such a value as another option (a value of `--trust-remote-code` must stay a value)."""
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def _shared_engine_args(p: Profile) -> tuple[list[str], list[str]]:
    """The engine options ppspec derives from the profile, the same on every node: those before the
    speculative config and those after it."""
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
    tail = ["--distributed-executor-backend", p.launch.executor] if p.launch.executor == "ray" or t.nodes > 1 else []
    return args, tail


def _speculative_args(d: _DrafterLaunch) -> list[str]:
    """`--speculative-config` (its drafter may live in the node's own run directory: the overlay)."""
    if d.config is None:
        return []
    return ["--speculative-config", json.dumps(d.config, separators=(",", ":"), sort_keys=True)]


def engine_args(options: EngineOptions) -> list[str]:
    """Pass-through `engine:` keys as vLLM long flags (refused keys: see launch_refusals). Booleans
    become bare flags (`--x` / `--no-x`); mappings and lists become JSON, as `vllm serve --config` does."""
    out: list[str] = []
    for e in options.entries:
        opt, v = e.option, e.value
        if v is None:
            continue
        if isinstance(v, bool) and not opt.subkeys:  # `no-x: true` is --no-x, `no-x: false` is --x
            on = v != opt.negated
            out.append(f"--{opt.flag}" if on else f"--no-{opt.flag}")
        elif isinstance(v, (dict, list)):
            out += [f"--{opt.argv_name}", json.dumps(v, separators=(",", ":"), sort_keys=True)]
        else:
            out += _opt(f"--{opt.argv_name}", str(v))
    return out


def _pass_through_args(r: Resolved) -> list[str]:
    """The profile's `engine:` keys, last on every engine argv; plus, on CPU with PP, an eager
    compilation config unless the profile chose one (or enforce-eager) itself."""
    p = r.profile
    args = engine_args(r.options)
    if r.platform == "cpu" and p.topology.pipeline_parallel > 1:
        if not any(e.option.argv_name in ("compilation-config", "enforce-eager") for e in r.options.entries):
            # With enforce-eager the CPU worker skips warm-up and PP stage buffers are never allocated.
            args += [
                "--compilation-config",
                json.dumps({"mode": 2, "backend": "eager"}, separators=(",", ":"), sort_keys=True),
            ]
    return args


def _environment(r: Resolved) -> dict[str, str]:
    """What ppspec sets in every node's environment (the plan file's path aside: it is the node's);
    the profile's own `env:` wins."""
    p, t = r.profile, r.profile.topology
    env: dict[str, str] = {}
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
            "needs": list(r.needs),
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
        cfg = safeio.read_json(src / "config.json", limit=8 << 20, what="drafter config.json", exit_code=EXIT_REFUSED)
    except PpspecError as e:
        raise PpspecError(
            f"cannot read the drafter's config.json to build its config overlay: {e.what}",
            where=str(src / "config.json"),
            fix="the engine loads config.json: get the drafter's complete config.json into that directory",
            exit_code=EXIT_REFUSED,
        ) from None
    if not isinstance(cfg, dict):
        raise PpspecError(
            "the drafter's config.json is not a JSON object",
            where=str(src / "config.json"),
            fix="restore it from the drafter repository",
            exit_code=EXIT_REFUSED,
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
                exit_code=EXIT_REFUSED,
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
            exit_code=EXIT_REFUSED,
        ) from None
