"""Attack cases of round 4 (issue 42), generated per mechanism like cases.py and cases3.py: a
stranger's profile cannot take down a login node (costs), bench's results cannot be mixed or
destroyed (bench-out, bench-records), the untrusted environment is what a variable moves
(env-moves), every number at the boundary is finite and in range (numbers), the installed-engine
scan and its cache are untrusted input (engine-scan), no traceback or wrong exit (exits), exports
a cluster takes (exports-cluster), the ready marker and endpoints (ready), and one option reader
for every rule (option-reader).

Each case returns None when the mechanism holds, else what went wrong; a case that raises is
reported as a crash (it never takes the others down). test_round4.py breaks each guard and shows
its cases fail then.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

Case = tuple[str, str, str, Callable[[], "str | None"]]

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fixtures" / "models"
ARCHSCAN = REPO / "tests" / "fixtures" / "archscan"


def _guard(fn: Callable[[], str | None]) -> Callable[[], str | None]:
    def run() -> str | None:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a crash is this case's problem, never the suite's
            return f"crashed: {type(e).__name__}: {str(e)[:160]}"

    return run


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A private directory with its own PPSPEC_CACHE (mode 0700, as io/cache wants it)."""
    with tempfile.TemporaryDirectory(prefix="ppspec-attack4-") as td:
        d = Path(td)
        os.chmod(d, 0o700)
        (d / "cache").mkdir(mode=0o700)
        with env(PPSPEC_CACHE=str(d / "cache")):
            yield d


def _ppspec(*args: str, cwd: Path | None = None):
    from tests import inprocess

    return inprocess.run(*args, cwd=cwd)


def _clean_exit(r, want: int | tuple[int, ...]) -> str | None:
    want = (want,) if isinstance(want, int) else want
    if "Traceback" in r.stderr or "unexpected" in r.stderr:
        return f"traceback / unexpected error: {r.stderr.strip()[-200:]}"
    if r.returncode not in want:
        return f"exit {r.returncode} (want {want}): {(r.stderr or r.stdout).strip()[-200:]}"
    return None


PROFILE = """\
name: {name}
target: {{model: ./t}}
drafter: {{method: eagle3, model: ./d, num_speculative_tokens: 3}}
topology: {{tensor_parallel: 1, pipeline_parallel: {pp}, data_parallel: {dp}, nodes: {nodes}, gpus_per_node: {gpn}}}
launch: {{master_addr: 10.0.0.1}}
platform: cuda
engine_version: 0.32.0
{extra}"""


def local_profile(
    d: Path, *, name: str = "p", pp: int = 1, dp: int = 1, nodes: int = 1, gpn: int | None = None, extra: str = ""
) -> Path:
    """A profile over local copies of real configs (Llama-3.1-8B, its EAGLE3 drafter): no hub, no weights."""
    import shutil

    for src, dst in (("meta-llama__Llama-3.1-8B-Instruct", "t"), ("yuhuili__EAGLE3-LLaMA3.1-Instruct-8B", "d")):
        if not (d / dst).exists():
            shutil.copytree(MODELS / src, d / dst)
    p = d / f"{name}.yaml"
    gpn = gpn if gpn is not None else max(1, pp * dp // nodes)
    p.write_text(PROFILE.format(name=name, pp=pp, dp=dp, nodes=nodes, gpn=gpn, extra=extra))
    return p


# -- costs (class 1): shapes never build weights; every command's cost bounded in the profile's sizes


def _no_build_case(command: tuple[str, ...], ref: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.demo import factory

        built: list[str] = []

        def refuse(name, **_kw):
            built.append(name)
            raise RuntimeError(f"built demo model {name}")

        with workdir() as d, patched(factory, "ensure_demo_model", refuse):
            prof = d / "demo.yaml"
            prof.write_text(
                f"name: demo\ntarget: {{model: {ref}}}\nplatform: cpu\ndtype: float32\n"
                "topology: {tensor_parallel: 1, pipeline_parallel: 1}\n"
            )
            args = [a.replace("PROFILE", str(prof)) for a in command]
            r = _ppspec(*args, cwd=d)
            left = [p.name for p in (d / "cache").rglob("*.safetensors")]
        if built or left:
            return f"built weights ({built or left})"
        return _clean_exit(r, (0, 1))

    return run


def _calls(fn: Callable[[], object]) -> int:
    """Python function calls `fn` makes (deterministic: no wall time). Run once before, so caches
    and imports are warm."""
    fn()
    count = [0]

    def prof(_frame, event, _arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def _superlinear(costs: list[int]) -> str | None:
    """Costs at sizes n, 2n, 4n: linear growth has equal second differences (d2 = 2 d1); what a
    term in n**2 adds shows as d2 - 2 d1 > 0, growing with n. Tolerates 5% (sorting, dict growth)."""
    d1, d2 = costs[1] - costs[0], costs[2] - costs[1]
    excess = d2 - 2 * d1
    if excess > max(0.05 * d1, 2000):
        return f"grows faster than linearly: {costs} Python calls ({excess} beyond linear)"
    return None


def _growth_case(dim: str, sizes: tuple[int, int, int], command: tuple[str, ...]) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        costs = []
        with workdir() as d:
            for n in sizes:
                kw = {"nodes": {"dp": n, "nodes": n, "gpn": 1}, "pp": {"pp": n, "gpn": n}}.get(dim, {})
                if dim == "pp":
                    cfg = json.loads((MODELS / "meta-llama__Llama-3.1-8B-Instruct" / "config.json").read_text())
                    cfg["num_hidden_layers"] = 4 * sizes[-1]
                    local_profile(d)  # the copies
                    (d / "t" / "config.json").write_text(json.dumps(cfg))
                    (d / "t" / "model.safetensors.index.json").unlink(missing_ok=True)
                prof = local_profile(d, name=f"g{n}", **kw)
                args = [
                    a.replace("PROFILE", str(prof)).replace("LEVELS", ",".join(map(str, range(1, n + 1))))
                    for a in command
                ]
                results = []

                def once(args=args, results=results) -> None:
                    results.append(_ppspec(*args, cwd=d))

                costs.append(_calls(once))
                bad = _clean_exit(results[-1], (0, 1))
                if bad:
                    return f"n={n}: {bad}"
        return _superlinear(costs)

    return run


def _nodes_at_max_case(command: tuple[str, ...]) -> Callable[[], str | None]:
    """The schema's maximum (4096 nodes) with an environment of 100 entries: bounded output. Run only
    when growth in nodes is linear (else it would take minutes and gigabytes)."""

    @_guard
    def run() -> str | None:
        first = _growth_case("nodes", (32, 64, 128), ("serve", "PROFILE", "--dry-run", "--json", "--offline"))()
        if first:
            return f"not run at the maximum: {first}"
        envs = "".join(f"  V{i}: {'x' * 100}\n" for i in range(100))
        with workdir() as d:
            prof = local_profile(d, pp=4, dp=1024, nodes=4096, gpn=1, extra="env:\n" + envs)
            r = _ppspec(*[a.replace("PROFILE", str(prof)) for a in command], cwd=d)
            bad = _clean_exit(r, (0, 1))
            if bad:
                return bad
            if len(r.stdout) > 64 << 20:
                return f"{len(r.stdout) >> 20} MiB of output for a {prof.stat().st_size >> 10} KiB profile"
        return None

    return run


def _predict_at_max_case() -> Callable[[], str | None]:
    """--predict at its maxima: every allowed concurrency level count and every k (0..64), PP 1024."""

    @_guard
    def run() -> str | None:
        from ppspec_cli.commands import predict_render

        n_levels = getattr(predict_render, "MAX_LEVELS", 4096)
        levels = ",".join(str(c) for c in range(1, n_levels + 1))
        ks = ",".join(str(k) for k in range(0, 65))
        with workdir() as d:
            prof = local_profile(d)
            r = _ppspec(
                "plan", str(prof), "--offline", "--json", "--predict", "--concurrency", levels,
                "--num-speculative-tokens", ks, cwd=d,
            )  # fmt: skip
            bad = _clean_exit(r, (0, 1, 2))
            if bad:
                return bad
            if len(r.stdout) > 16 << 20:
                return f"{len(r.stdout) >> 20} MiB of --json for one profile"
        return None

    return run


def _pp_at_max_case(command: tuple[str, ...]) -> Callable[[], str | None]:
    """pipeline_parallel at its maximum (1024 stages of a 4096-layer config, 16 nodes of 64): bounded output."""

    @_guard
    def run() -> str | None:
        with workdir() as d:
            local_profile(d)
            cfg = json.loads((MODELS / "meta-llama__Llama-3.1-8B-Instruct" / "config.json").read_text())
            cfg["num_hidden_layers"] = 4096
            (d / "t" / "config.json").write_text(json.dumps(cfg))
            (d / "t" / "model.safetensors.index.json").unlink(missing_ok=True)
            prof = local_profile(d, name="max", pp=1024, nodes=16, gpn=64)
            r = _ppspec(*[a.replace("PROFILE", str(prof)) for a in command], cwd=d)
            bad = _clean_exit(r, (0, 1))
            if bad:
                return bad
            if len(r.stdout) > 16 << 20:
                return f"{len(r.stdout) >> 20} MiB of output for 1024 stages"
        return None

    return run


def cost_cases() -> Iterator[Case]:
    for ref in ("demo:tiny-llama-relay", "demo:tiny-llama-relay-eagle3", "demo:tiny-llama"):
        for cmd in (
            ("check", "PROFILE", "--offline"),
            ("plan", "PROFILE", "--offline", "--json"),
            ("serve", "PROFILE", "--dry-run", "--offline"),
            ("export", "slurm", "PROFILE", "--offline", "-o", "/dev/null"),
        ):
            yield ("costs", "demo-no-weights", f"{ref} {cmd[0]}", _no_build_case(cmd, ref))
    for cmd in (
        ("serve", "PROFILE", "--dry-run", "--json", "--offline"),
        ("export", "slurm", "PROFILE", "--offline", "-o", "/dev/null"),
    ):
        yield ("costs", "nodes", f"{cmd[0]} {cmd[1]}", _growth_case("nodes", (64, 128, 256), cmd))
    for cmd in (
        ("plan", "PROFILE", "--offline", "--json"),
        ("check", "PROFILE", "--offline", "--json"),
        ("serve", "PROFILE", "--dry-run", "--json", "--offline"),
    ):
        yield ("costs", "pp", f"{cmd[0]}", _growth_case("pp", (16, 32, 64), cmd))  # one node: gpus_per_node <= 64
    yield (
        "costs",
        "levels",
        "plan --predict --concurrency",
        _growth_case(
            "levels", (16, 32, 64), ("plan", "PROFILE", "--offline", "--json", "--predict", "--concurrency", "LEVELS")
        ),
    )
    yield (
        "costs",
        "nodes-at-max",
        "serve --dry-run --json",
        _nodes_at_max_case(("serve", "PROFILE", "--dry-run", "--json", "--offline")),
    )
    yield ("costs", "levels-at-max", "plan --predict", _predict_at_max_case())
    for cmd in (("plan", "PROFILE", "--offline", "--json"), ("plan", "PROFILE", "--offline", "--json", "--predict")):
        yield ("costs", "pp-at-max", " ".join(cmd[2:]), _pp_at_max_case(cmd))


# -- bench's --out (class 2): owned, locked, walked by descriptor


def _claim(path: Path):
    from ppspec_cli.verify.bench import session

    return session.state_dir(str(path), "p")


def _release(out) -> None:
    close = getattr(out, "close", None)
    if close:
        close()


def _out_case(kind: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError

        if kind == "other-owner" and os.geteuid() != 0:
            return None  # chown needs root; CI runs as root
        with workdir() as d:
            victim = d / "victim"
            (victim / "baseline").mkdir(parents=True)
            (victim / "baseline" / "precious.txt").write_text("keep me")
            out = d / "shared" / "out"
            out.mkdir(parents=True)
            expect_refused = True
            if kind == "arms-link":  # another user planted `arms` -> a directory of the victim's
                (out / "arms").symlink_to(victim)
                expect_refused = False  # claimed; the arm is cleared without following the link
            elif kind == "out-link":
                out.rmdir()
                out.symlink_to(victim)
            elif kind == "world-writable":
                os.chmod(out, 0o777)
            elif kind == "group-writable":
                os.chmod(out, 0o775)
            elif kind == "other-owner":
                os.chown(out, 65534, 65534)
            elif kind == "a-file":
                out.rmdir()
                out.write_text("x")
            if kind == "arms-link":
                return _bench_through_link(d, out, victim)
            try:
                held = _claim(out)
            except PpspecError as e:
                gone = not (victim / "baseline" / "precious.txt").exists()
                if gone:
                    return "deleted the victim's file"
                if not expect_refused:
                    return f"refused ({e.what[:80]})"
                return (
                    None
                    if str(out) in e.what and "Traceback" not in e.what
                    else f"refused without naming it: {e.what[:80]}"
                )
            _release(held)
            return f"claimed a --out that is {kind}" if expect_refused else None

    return run


def _bench_through_link(d: Path, out: Path, victim: Path) -> str | None:
    """`ppspec bench --out OUT` (a fresh run: it clears its arms first) with `OUT/arms` a link another
    user planted: the victim's files stay (the measurement itself is stubbed)."""
    from ppspec_cli.commands import bench
    from ppspec_cli.errors import PpspecError

    prof = local_profile(d)
    opts = bench.Options(
        concurrency="1", out=str(out), endpoint="http://127.0.0.1:1", baseline_endpoint="http://127.0.0.1:2", repeat=1
    )
    import io

    quiet = (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()))
    with patched(bench, "_measure", lambda b: 0), quiet[0], quiet[1]:
        try:
            bench.run(str(prof), opts)
        except PpspecError:
            pass  # refusing is fine; following the link is not
    if not (victim / "baseline" / "precious.txt").exists():
        return "deleted the victim's files through the planted `arms` link"
    return None


def _lock_case() -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError

        with workdir() as d:
            first = _claim(d / "out")
            try:
                try:
                    second = _claim(d / "out")
                except PpspecError as e:
                    return (
                        None if str(os.getpid()) in e.what or "another" in e.what else f"refused oddly: {e.what[:80]}"
                    )
                _release(second)
                return "a second bench claimed the --out the first one holds (it would delete the first one's arms)"
            finally:
                _release(first)

    return run


def bench_out_cases() -> Iterator[Case]:
    for kind in ("arms-link", "out-link", "world-writable", "group-writable", "other-owner", "a-file"):
        yield ("bench-out", "claim", kind, _out_case(kind))
    yield ("bench-out", "lock", "second bench", _lock_case())
    yield ("bench-out", "lock", "second bench again", _lock_case())
    yield ("bench-out", "lock", "third", _lock_case())
    yield ("bench-out", "lock", "fourth", _lock_case())


# -- bench's records (class 2): every record carries the identity it is valid for

SETTINGS = {
    "concurrency": [1, 4],
    "num_prompts": 8,
    "prompts_per_level": {"1": 8, "4": 16},
    "max_tokens": 16,
    "input_len": 32,
    "seed": 0,
    "repeat": 2,
    "parity_prompts": 8,
    "parity_source_prompts": 8,
}


def _level(arm: str, c: int, r: int, k: int | None, **kw) -> dict:
    return {
        "arm": arm,
        "concurrency": c,
        "repeat": r,
        "speculation": k is not None,
        "num_speculative_tokens": k,
        "num_prompts": SETTINGS["prompts_per_level"][str(c)],
        "max_tokens": 16,
        "input_len": 32,
        "seed": 0,
        "completed": 8,
        "output_tokens_per_s": 100.0,
        "profile_digest": "d1",
        **kw,
    }


def _record_identity_case(label: str, file: str, doc: dict) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.verify.bench.results import Arm
        from ppspec_cli.verify.bench.session import Session

        arms = [Arm("baseline", False, None), Arm("spec-k3", True, 3)]
        ident = {
            "run_id": "r",
            "host": "h",
            "ppspec_version": "1",
            "vllm_version": "v",
            "served": True,
            "profile_digest": "d1",
        }
        with workdir() as d:
            b = Session("p.yaml", None, arms, SETTINGS, d, ident)
            arm_dir = d / "arms" / file.split("/")[0]
            arm_dir.mkdir(parents=True)
            (arm_dir / file.split("/")[1]).write_text(json.dumps(doc))
            try:
                b.check_kept(allow_mixed=True)
                for arm in arms:
                    b.todo(arm)
                b.grid()
            except PpspecError as e:
                return (
                    None
                    if e.exit_code == 2 and file.split("/")[1] in e.what
                    else f"refused oddly (exit {e.exit_code}): {e.what[:80]}"
                )
            return f"kept a record of {label} as this run's"

    return run


def bench_record_cases() -> Iterator[Case]:
    wrong = {
        "another profile": ("baseline/c1-r0.json", _level("baseline", 1, 0, None, profile_digest="other")),
        "no profile named": (
            "baseline/c1-r0.json",
            {k: v for k, v in _level("baseline", 1, 0, None).items() if k != "profile_digest"},
        ),
        "another arm": ("baseline/c1-r0.json", _level("spec-k3", 1, 0, 3)),
        "another concurrency": ("baseline/c1-r0.json", _level("baseline", 4, 0, None)),
        "another repeat": ("baseline/c1-r0.json", _level("baseline", 1, 1, None)),
        "another k": ("spec-k3/c1-r0.json", _level("spec-k3", 1, 0, 5)),
        "speculation flipped": ("spec-k3/c1-r0.json", {**_level("spec-k3", 1, 0, 3), "speculation": False}),
        "a string repeat": ("baseline/c1-r0.json", _level("baseline", 1, "0", None)),
        "a float repeat": ("baseline/c1-r0.json", _level("baseline", 1, 0.5, None)),
        "a huge repeat": ("baseline/c1-r0.json", _level("baseline", 1, 10**30, None)),
        "parity of another arm": ("spec-k3/parity.json", {"arm": "baseline", "profile_digest": "d1", "outputs": []}),
        "parity of another profile": ("spec-k3/parity.json", {"arm": "spec-k3", "profile_digest": "x", "outputs": []}),
    }
    for label, (file, doc) in wrong.items():
        yield ("bench-records", "identity", label, _record_identity_case(label, file, doc))


# -- the untrusted environment (class 3): defined by what a variable moves


def _env_case(name: str, value: str, flagged: bool) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.planning.engine_options import launch_refusals

        got = {f.code for f in launch_refusals({}, {name: value}, {"env": []})}
        if flagged and "env-untrusted-entry" not in got:
            return f"env.{name}={value!r} moves what the engine loads, not flagged"
        if not flagged and "env-untrusted-entry" in got:
            return f"env.{name}={value!r} is ordinary tuning, flagged"
        return None

    return run


def env_cases() -> Iterator[Case]:
    for n in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TMPDIR", "TMP", "USER", "LOGNAME"):
        yield ("env-moves", "roots", n, _env_case(n, "/srv/someone-else", True))
        yield ("env-moves", "roots", f"{n.lower()} (any case)", _env_case(n.lower(), "/srv/x", True))
    for n in ("CUDA_CACHE_PATH", "TORCH_HOME", "TRITON_HOME", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
              "VLLM_RPC_BASE_PATH", "SOME_NEW_CACHE_DIR", "ANY_CONFIG_FILE", "MODEL_REPO_URL",
              "X_LIBRARY"):  # fmt: skip
        yield ("env-moves", "name-shape", n, _env_case(n, "value", True))
    for v in ("/opt/hooks", "~/.cache/other", "./here", "https://mirror.example/x", "s3://bucket/x", "x:/abs/path"):
        yield ("env-moves", "value-shape", v, _env_case("SOMETHING_NEW", v, True))
    for n, v in (("NCCL_DEBUG", "INFO"), ("OMP_NUM_THREADS", "8"), ("CUDA_VISIBLE_DEVICES", "0,1"),
                 ("VLLM_PLUGINS", "ppspec"), ("NCCL_SOCKET_IFNAME", "^lo,docker"),
                 ("VLLM_ATTENTION_BACKEND", "FLASH_ATTN"), ("VLLM_HOST_IP", "10.0.0.2")):  # fmt: skip
        yield ("env-moves", "ordinary", n, _env_case(n, v, False))


# -- numbers at the boundary (class 5)


_RESOLVED: dict[str, object] = {}


def _resolved():
    """One resolved profile (a local Llama-3.1-8B config with its EAGLE3 drafter, PP 2) for --predict."""
    if "r" not in _RESOLVED:
        from ppspec_cli import operation

        holder = tempfile.TemporaryDirectory(prefix="ppspec-attack4-predict-")  # removed at exit (its finalizer)
        d = Path(holder.name)
        prof = local_profile(d, pp=2)
        _RESOLVED["r"] = operation.run(operation.Operation("plan", str(prof), offline=True)).judgment.resolved
        _RESOLVED["dir"] = holder
    return _RESOLVED["r"]


def _finite_everywhere(doc: object) -> str | None:
    import math

    stack = [(doc, "")]
    while stack:
        x, at = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return f"{at} is {x}"
        if isinstance(x, dict):
            stack.extend((v, f"{at}.{k}") for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(x))
    return None


def _predict_case(
    label: str, opts_kw: dict, files: dict[str, object] | None = None, *, refused: bool = True
) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.commands import predict_render
        from ppspec_cli.errors import PpspecError

        r = _resolved()
        with tempfile.TemporaryDirectory() as td:
            kw = dict(opts_kw)
            for key, content in (files or {}).items():
                p = Path(td) / f"{key}.json"
                p.write_text(content if isinstance(content, str) else json.dumps(content))
                kw[key] = str(p)
            opts = predict_render.PredictOptions(**kw)
            try:
                pred = predict_render.prediction(r, opts)
            except PpspecError as e:
                return None if refused and e.exit_code == 2 else f"exit {e.exit_code}: {e.what[:100]}"
            doc = pred.to_json()
            text = json.dumps(doc)
            if len(text) > 4 << 20:
                return f"{len(text) >> 20} MiB of prediction from {label}"
            bad = _finite_everywhere(doc)
            if bad:
                return f"accepted, and the prediction holds {bad}"
            negative = [
                lv for lv in doc["levels"] if isinstance(lv.get("speedup"), (int, float)) and lv["speedup"] <= 0
            ]
            if negative:
                return f"accepted, and a speed-up is {negative[0]['speedup']}"
            if refused:
                return "accepted"
        return None

    return run


def _bench_like(positions: list) -> dict:
    return {"runs": [{"arm": "spec-k3", "per_position_acceptance": positions}]}


def _shape(pp: int) -> dict:
    """The calibration key of local_profile's model (Llama-3.1-8B, bf16, TP 1) at this PP: an entry
    that matches, so a bad one would be used, not skipped."""
    return {"num_layers": 32, "hidden_size": 4096, "act_bytes": 2, "tp": 1, "pp": pp}


def _calibration(costs: dict, pp: int = 2) -> dict:
    return {"schema": "ppspec-calibration/1", "entries": [{"hardware": "h100", "shape": _shape(pp), "costs": costs}]}


def _no_predict_case(flag: str, value: object) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        with workdir() as d:
            prof = local_profile(d)
            r = _ppspec("plan", str(prof), "--offline", flag, str(value), cwd=d)
        if r.returncode == 2 and flag in r.stderr:
            return None
        return f"{flag} without --predict: exit {r.returncode}, silently dropped"

    return run


def _beside_calibration_case(content: str) -> Callable[[], str | None]:
    """A calibration.json beside the profile is read unasked: whatever it holds, --predict runs (exit
    0/1) and says the file is not used; never a crash."""

    @_guard
    def run() -> str | None:
        with workdir() as d:
            prof = local_profile(d)
            (d / "calibration.json").write_text(content)
            r = _ppspec("plan", str(prof), "--offline", "--predict", "--json", "--hardware", "h100", cwd=d)
            bad = _clean_exit(r, (0, 1))
            if bad:
                return bad
            doc = json.loads(r.stdout)
            cal = doc.get("prediction", {}).get("calibration", {})
            if cal.get("mode") == "calibrated":
                return "used a calibration file that is not valid"
            return _finite_everywhere(doc)

    return run


def number_cases() -> Iterator[Case]:
    hostile = ("nan", "inf", "-inf", "1e-310", "-1", "0", "1e300", "1e999", "x", "")
    for v in hostile:
        yield ("numbers", "--hardware", f"bw={v}", _predict_case("hw", {"hardware": f"h100,bw={v}"}))
        yield ("numbers", "--hardware", f"tflops={v}", _predict_case("hw", {"hardware": f"h100,tflops={v}"}))
        yield ("numbers", "--link", f"bw={v}", _predict_case("link", {"link": f"ib-ndr,bw={v}"}))
        if v not in ("0",):  # a zero latency is a (fast) link
            yield ("numbers", "--link", f"lat={v}", _predict_case("link", {"link": f"ib-ndr,lat={v}"}))
    for k in ("bogus", "BW", "bandwidth", "lat"):
        yield ("numbers", "unknown-override", k, _predict_case("hw", {"hardware": f"h100,{k}=1"}))
    reports = {
        "1e999": '{"runs": [{"per_position_acceptance": [0.5, 1e999]}]}',
        "negative": _bench_like([0.5, -0.2]),
        "above one": _bench_like([1.5, 0.9]),
        "subnormal mixed": _bench_like([5e-324, 2.0]),
        "huge int": '{"per_position_acceptance": [' + "1" * 400 + "]}",
        "2 million positions": _bench_like([0.5] * 2_000_000),
        "65 positions": _bench_like([0.5] * 65),
        "strings": _bench_like(["0.5", "0.4"]),
        "bools": _bench_like([True, False]),
    }
    for label, doc in reports.items():
        yield ("numbers", "acceptance-report", label, _predict_case(label, {}, {"acceptance_from": doc}))

    def cals(pp: int) -> dict[str, object]:
        shape = _shape(pp)
        return {
            "nan text": json.dumps(_calibration({"eff_bw": 0.5}, pp)).replace("0.5", "NaN"),
            "1e999": json.dumps(_calibration({"eff_bw": 0.5}, pp)).replace("0.5", "1e999"),
            "negative overhead": _calibration({"step_overhead_ms": -5.0}, pp),
            "zero efficiency": _calibration({"eff_bw": 0.0}, pp),
            "efficiency 1e6": _calibration({"eff_bw": 1e6}, pp),
            "subnormal efficiency": _calibration({"eff_bw": 5e-324}, pp),
            "string cost": _calibration({"eff_bw": "0.7"}, pp),
            "entries not a list": {"schema": "ppspec-calibration/1", "entries": {"a": 1}},
            "costs not a dict": {
                "schema": "ppspec-calibration/1",
                "entries": [{"hardware": "h100", "shape": shape, "costs": 3}],
            },
        }

    for label, doc in cals(2).items():
        yield ("numbers", "calibration-file", label, _predict_case(label, {"hardware": "h100"}, {"calibration": doc}))
    for label, doc in cals(1).items():
        text = doc if isinstance(doc, str) else json.dumps(doc)
        yield ("numbers", "calibration-beside", label, _beside_calibration_case(text))
    yield ("numbers", "calibration-beside", "not JSON", _beside_calibration_case("{nope"))
    yield ("numbers", "calibration-beside", "deep", _beside_calibration_case("[" * 5000 + "]" * 5000))
    # (--hardware is not among them: without --predict it names the accelerator the memory model judges)
    for flag, value in (("--link", "pcie5"), ("--acceptance-length", "2"), ("--concurrency", "1,2"),
                        ("--num-speculative-tokens", "1"), ("--context-length", "100"),
                        ("--calibration", "x.json")):  # fmt: skip
        yield ("numbers", "without-predict", flag, _no_predict_case(flag, value))


# -- the installed-engine scan and its cache (class 6)


@contextlib.contextmanager
def _fork(d: Path) -> Iterator[Path]:
    """A copy of the fixture's vLLM-shaped tree, installed as a fork (9.9.0+fork: scanned by value)."""
    import shutil

    from ppspec_cli.knowledge import archtable

    root = d / "site"
    shutil.copytree(ARCHSCAN, root)
    with patched(archtable, "installed_source_root", lambda: root):
        yield root


def _pick():
    from ppspec_cli.knowledge import archtable
    from ppspec_cli.knowledge.engine import VllmInstall

    inst = VllmInstall("9.9.0+fork", "vllm", "cuda")
    try:  # the gatherer's step: the installed engine's table, or why its source could not be read
        engine: archtable.ArchTable | Exception | None = archtable.engine_table(inst)
    except Exception as e:  # noqa: BLE001 - what the gatherer keeps for the judge
        engine = e
    return archtable.pick("cuda", inst, "0.33.0", engine)


def _scan_case(label: str, damage: Callable[[Path], None]) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.knowledge import packstatus

        with workdir() as d, _fork(d) as root:
            damage(root)
            t = _pick()
            if t is None:
                return "no table at all (a committed one stands in for an unreadable install)"
            got = packstatus.engine_arch_table(_fake_install())
            if not isinstance(got, dict):
                return f"adapters list's table is {got!r}"
        return None

    return run


def _fake_install():
    from ppspec_cli.knowledge.engine import VllmInstall

    return VllmInstall("9.9.0+fork", "vllm", "cuda")


def _write(rel: str, data: bytes) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        p = root / "vllm" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    return damage


def _sparse(rel: str, size: int) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        p = root / "vllm" / rel
        with open(p, "r+b") as f:
            f.truncate(size)  # sparse: no disk used, but a whole read would take `size` bytes of memory

    return damage


def _fifo(rel: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        p = root / "vllm" / rel
        p.unlink()
        os.mkfifo(p)

    return damage


def _bounded_read_case() -> Callable[[], str | None]:
    """A 512 MiB module is never read whole (the largest real one is 262 KB)."""

    @_guard
    def run() -> str | None:
        from ppspec_cli.io import safeio

        reads: list[int] = []
        orig = safeio.read_bytes

        def spy(path, *, limit, **kw):
            reads.append(limit)
            return orig(path, limit=limit, **kw)

        with workdir() as d, _fork(d) as root, patched(safeio, "read_bytes", spy):
            _sparse("model_executor/models/registry.py", 512 << 20)(root)
            _pick()
        if not reads:
            return "the scan read its source without a bound (not through safeio)"
        if max(reads) >= 512 << 20:
            return f"read with a bound of {max(reads)} bytes"
        return None

    return run


def _cache_case(label: str, entry: str | bytes) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:

        with workdir() as d, _fork(d) as root:
            first = _pick()
            if first is None or first.source != "installed":
                return f"setup: the fork was not scanned ({first})"
            from ppspec_cli.knowledge import installcache

            entries = list(installcache.path("arch", "k").parent.glob("arch-*.json"))
            if len(entries) != 1:
                return f"setup: {len(entries)} cache entries"
            raw = entry.encode() if isinstance(entry, str) else entry
            try:  # a table of the wrong shape under this install's key (knowledge/installcache's entry)
                doc = json.loads(raw)
                raw = json.dumps({"key": json.loads(entries[0].read_text())["key"], "data": doc}).encode()
            except ValueError:
                pass  # a damaged file
            entries[0].write_bytes(raw)
            t = _pick()
            if t is None:
                return "a damaged cache entry dropped the table"
            t.target("TrapForCausalLM", "cuda")
            t.drafter("x", "cuda")
            t.counts  # noqa: B018 - every reader runs on it
            _ = root
        return None

    return run


def _oversized_case() -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.knowledge import archscan, archtable

        scans = [0]
        orig = archscan.scan
        archtable.committed("0.33.0")  # the committed table that stands in, read before the limit shrinks

        def counting(root, *a, **kw):
            scans[0] += 1
            return orig(root, *a, **kw)

        with workdir() as d, _fork(d), patched(archtable, "MAX_TABLE_BYTES", 2000), patched(archscan, "scan", counting):
            for _ in range(3):
                t = _pick()
                if t is None:
                    return "no table"
        return None if scans[0] <= 1 else f"an oversized table was scanned {scans[0]} times in 3 runs"

    return run


def _said_case(damage: Callable[[Path], None]) -> Callable[[], str | None]:
    """`check` on a fork whose source cannot be read says so (vllm-unverified names why the
    committed table stands in): the installed engine's facts are never dropped without a word."""

    @_guard
    def run() -> str | None:
        from ppspec_cli.operation.gather import gather_facts
        from ppspec_cli.operation.operation import Operation
        from ppspec_cli.planning import rules
        from ppspec_cli.planning.resolve import resolve

        with workdir() as d, _fork(d) as root:
            damage(root)
            prof = local_profile(d)
            facts = gather_facts(Operation("check", str(prof), offline=True), install=_fake_install(), environ={})
            r = resolve(facts.profile, facts)
            lines = [f.message for f in rules.engine_version_rule(r)]
        if not any("not used" in ln or "could not be read" in ln for ln in lines):
            return f"check says nothing of the unreadable install: {lines[:1]}"
        return None

    return run


def scan_cases() -> Iterator[Case]:
    deep_parens = b"x = " + b"(" * 5000 + b"1" + b")" * 5000 + b"\n"
    deep_binop = b"x = " + b"1+" * 200_000 + b"1\n"
    deep_lists = b"x = " + b"[" * 3000 + b"]" * 3000 + b"\n"
    for label, damage in (
        ("_version.py not UTF-8", _write("_version.py", b"__version__ = version = '9.9.0\xff\xfe'\n")),
        ("_version.py deep", _write("_version.py", deep_parens)),
        ("_version.py binop chain", _write("_version.py", deep_binop)),
        ("_version.py a FIFO", _fifo("_version.py")),
        ("registry not UTF-8", _write("model_executor/models/registry.py", b"\xff\xfe\x00x = 1\n")),
        ("registry deep", _write("model_executor/models/registry.py", deep_lists)),
        ("registry null bytes", _write("model_executor/models/registry.py", b"x = 1\x00\n")),
        ("registry binop chain", _write("model_executor/models/registry.py", deep_binop)),
        ("registry 512 MiB", _sparse("model_executor/models/registry.py", 512 << 20)),
        ("registry a FIFO", _fifo("model_executor/models/registry.py")),
    ):
        yield ("engine-scan", "source", label, _scan_case(label, damage))
    yield ("engine-scan", "bounded-read", "512 MiB module", _bounded_read_case())
    for label, damage in (
        ("registry a FIFO", _fifo("model_executor/models/registry.py")),
        ("registry binop chain", _write("model_executor/models/registry.py", b"x = " + b"1+" * 200_000 + b"1\n")),
        ("registry missing", lambda root: (root / "vllm" / "model_executor" / "models" / "registry.py").unlink()),
    ):
        yield ("engine-scan", "said", label, _said_case(damage))
    # the release-wide sections present (archtable.RELEASE_SECTIONS), so the entry is not merely stale:
    # only the shape check stands between it and a verdict
    from ppspec_cli.knowledge import archtable

    rel = {k: {} for k in archtable.RELEASE_SECTIONS}
    rel["drafter_rules"] = {k: {} for k in archtable.DRAFTER_RULE_SECTIONS}
    for label, entry in (
        ("targets a string", json.dumps({"schema": 1, "vllm_version": "9.9.0", "origin": "x", "targets": "x", **rel})),
        (
            "platforms a list",
            json.dumps(
                {"schema": 1, "vllm_version": "9.9.0", "origin": "o", "targets": {"A": {"platforms": [1]}}, **rel}
            ),
        ),
        ("version a number", json.dumps({"schema": 1, "vllm_version": 9, "origin": "o", **rel})),
        ("checks a list", json.dumps({"schema": 1, "vllm_version": "9", "origin": "o", "checks": [1], **rel})),
        ("not JSON", "{"),
        ("empty", ""),
        ("binary", b"\xff\x00\xfe"),
    ):
        yield ("engine-scan", "cache-entry", label, _cache_case(label, entry))
    yield ("engine-scan", "oversized", "scanned once", _oversized_case())
    yield ("engine-scan", "oversized", "scanned once again", _oversized_case())


# -- tracebacks and wrong exits (class 7)


def _bigint_case(where: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        big = "9" * 5000
        with workdir() as d:
            extra = {
                "engine": f"engine: {{max-model-len: {big}}}\n",
                "verify": f"verify: {{num_prompts: {big}}}\n",
                "env": f"env: {{X: {big}}}\n",
                "key": f"engine: {{{big}: 1}}\n",
                "negative": f"engine: {{seed: -{big}}}\n",
                "nested": f"engine: {{compilation-config: {{level: {big}}}}}\n",
            }[where]
            prof = local_profile(d, extra=extra)
            r = _ppspec("check", str(prof), "--offline", cwd=d)
        return _clean_exit(r, 2)

    return run


def _subprocess_ppspec(args: list[str], **kw):
    import subprocess

    return subprocess.run(
        [sys.executable, "-P", "-m", "ppspec_cli.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        **kw,
    )


_SHARED_CACHE: list[Path] = []


def _shared_cache() -> Path:
    """One PPSPEC_CACHE (0700) for this process's closed-stdout cases, removed at exit: what they
    attack is an output whose reader went away, not a cold cache's import check of vLLM's modules
    and read of its option names (6-10 s per case, paid once here)."""
    if not _SHARED_CACHE:
        import atexit
        import shutil

        from tests.enginehelpers import seed_option_cache

        d = Path(tempfile.mkdtemp(prefix="ppspec-attack4-cache-"))
        os.chmod(d, 0o700)
        seed_option_cache(d)  # vLLM's option names, as the engine tests' caches hold them (read once a process)
        atexit.register(shutil.rmtree, d, True)
        _SHARED_CACHE.append(d)
    return _SHARED_CACHE[0]


def _closed_stdout_case(how: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        with env(PPSPEC_CACHE=str(_shared_cache())):
            return _closed_stdout(how)

    return run


def _closed_stdout(how: str) -> str | None:
    import subprocess

    if how == "closed":
        cp = subprocess.run(
            [sys.executable, "-P", "-m", "ppspec_cli.cli", "adapters", "list"],
            stdout=None, stderr=subprocess.PIPE, text=True, timeout=300, cwd=REPO,
            pass_fds=(), preexec_fn=lambda: os.close(1),
        )  # fmt: skip
        rc, err = cp.returncode, cp.stderr
    else:  # `| head -1`: the reader goes after one line
        p = subprocess.Popen(
            [sys.executable, "-P", "-m", "ppspec_cli.cli", *how.split()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert p.stdout is not None
        p.stdout.readline()
        p.stdout.close()
        err = p.stderr.read() if p.stderr else ""
        rc = p.wait(timeout=300)
    if "Traceback" in err or "Exception ignored" in err:
        return f"traceback: {err.strip()[-160:]}"
    if rc in (1, 3, 120):
        return f"exit {rc} for an output whose reader went away (1 means a failed check)"
    return None


def _surrogate_case(value: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.io import shellout
        from ppspec_cli.verify.runner import lm_eval_command

        line = lm_eval_command("http://127.0.0.1:8000", value)
        if not line.isprintable() or any(0xD800 <= ord(c) <= 0xDFFF for c in line):
            return f"the follow-up line is not printable: {line[:80]!r}"
        word = shellout.quote(value)
        return None if word.isprintable() else f"quote gave {word!r}"

    return run


def _cli_bound_case(args: tuple[str, ...]) -> Callable[[], str | None]:
    """A bad number on the command line is a usage error before anything starts (a profile whose
    preflight fails stands behind it: accepted, the command would exit 1, never start an engine)."""

    @_guard
    def run() -> str | None:
        with workdir() as d:
            prof = d / "p.yaml"
            prof.write_text("name: p\ntarget: {model: ./missing}\n")
            r = _ppspec(*[a.replace("PROFILE", str(prof)) for a in args], cwd=d)
        return _clean_exit(r, 2)

    return run


def _demo_fail_case(how: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.demo import factory
        from ppspec_cli.demo.common import Spec
        from ppspec_cli.errors import PpspecError

        name = f"attack4-{how}"

        def builder(spec, out: Path) -> None:
            (out / "model.safetensors").write_bytes(b"x" * 1000)
            if how == "full-disk":
                raise OSError(errno.ENOSPC, "No space left on device")
            if how == "safetensors-error":
                raise RuntimeError("Error while serializing: IoError(File too large (os error 27))")
            factory.write_json(out / "config.json", {})

        factory.register_model(name, Spec("target", 0, "attack"), builder, listed=False)
        with workdir() as d:
            demo_dir = d / "cache" / "demo"
            if how == "leftovers":  # a build killed outright left these
                demo_dir.mkdir(mode=0o755)
                for junk in (f".{name}.tmp-abc123", f".{name}.old-xyz"):
                    (demo_dir / junk).mkdir()
                    (demo_dir / junk / "model.safetensors").write_bytes(b"x" * 1000)
            try:
                factory.ensure_demo_model(name)
                if how != "leftovers":
                    return "a failed build reported success"
            except PpspecError as e:
                if how == "leftovers":
                    return f"refused: {e.what[:80]}"
                if e.exit_code != 1 or str(demo_dir) not in e.what + e.where:
                    return f"exit {e.exit_code}, not naming the cache: {e.what[:80]}"
            except Exception as e:  # noqa: BLE001
                return f"{type(e).__name__} escaped: {str(e)[:80]}"
            left = [p.name for p in demo_dir.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
            if left:
                return f"left {left}"
        return None

    return run


def _sigterm_build_case() -> Callable[[], str | None]:
    """SIGTERM during a demo build: the process ends by the signal and leaves no .tmp-* build."""

    @_guard
    def run() -> str | None:
        import signal
        import subprocess
        import time

        code = textwrap.dedent(
            """
            import sys, time
            from pathlib import Path
            from ppspec_cli.demo import factory
            from ppspec_cli.demo.common import Spec
            def builder(spec, out):
                (out / "model.safetensors").write_bytes(b"x" * 100000)
                (out / "started").write_text("1")
                time.sleep(600)
            factory.register_model("attack4-slow", Spec("target", 0, "slow"), builder, listed=False)
            factory.ensure_demo_model("attack4-slow")
            """
        )
        with workdir() as d:
            demo = d / "cache" / "demo"
            p = subprocess.Popen([sys.executable, "-P", "-c", code], cwd=REPO, stderr=subprocess.PIPE, text=True)
            try:
                for _ in range(
                    6000
                ):  # the build is under way once its first file is there (no clock: a bound on polls)
                    if p.poll() is not None or (demo.is_dir() and any(demo.glob(".attack4-slow.tmp-*/started"))):
                        break
                    time.sleep(0.05)
                if p.poll() is not None:
                    return f"setup: the build ended early: {p.stderr.read()[-200:] if p.stderr else ''}"
                p.send_signal(signal.SIGTERM)
                rc = p.wait(timeout=120)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            left = [x.name for x in demo.iterdir()] if demo.is_dir() else []
        if left:
            return f"SIGTERM left {left}"
        if rc != -signal.SIGTERM:
            return f"exit {rc} (want death by SIGTERM, as without a build)"
        return None

    return run


def exit_cases() -> Iterator[Case]:
    for where in ("engine", "verify", "env", "key", "negative", "nested"):
        yield ("exits", "5000-digit-integer", where, _bigint_case(where))
    for how in ("closed", "adapters list", "check profiles/tiny_cpu_demo.yaml --offline", "docs"):
        yield ("exits", "closed-stdout", how, _closed_stdout_case(how))
    for v in ("m\ud800x", "\udfff", "a\udcffb", "ok\ud83d"):
        yield ("exits", "lone-surrogate", repr(v), _surrogate_case(v))
    for args in (
        ("serve", "PROFILE", "--health-timeout", "-5"),
        ("serve", "PROFILE", "--health-timeout", "0"),
        ("serve", "PROFILE", "--health-timeout", "99999999999999999999"),
        ("serve", "PROFILE", "--node-rank", "-1"),
        ("plan", "PROFILE", "--predict", "--context-length", "0"),
    ):
        yield ("exits", "cli-numbers", " ".join(args[2:]), _cli_bound_case(args))
    for how in ("full-disk", "safetensors-error", "leftovers"):
        yield ("exits", "demo-build", how, _demo_fail_case(how))
    yield ("exits", "demo-build", "SIGTERM", _sigterm_build_case())


# -- exports a cluster takes (class 8)


def _slurm_value_case(field: str, value: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.planning.profile import parse_profile

        text = f"name: x\ntarget: {{model: a/b}}\nlaunch:\n  slurm:\n    {field}: {json.dumps(value)}\n"
        try:
            parse_profile(text, "p.yaml")
        except PpspecError as e:
            return None if e.exit_code == 2 else f"exit {e.exit_code}"
        return f"accepted {field} {value!r} (sbatch refuses it at submit)"

    return run


def _k8s_collision_case(names: tuple[str, ...]) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.running.export import k8s_name

        got = {n: k8s_name(n) for n in names}
        if len(set(got.values())) != len(names):
            return f"names collide: {got}"
        for n in got.values():
            if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", n, re.ASCII) or len(n) + len("-api-key") > 63:
                return f"{n!r} is not a DNS-1035 label with room for its suffixes"
        return None

    return run


def _configmap_case(copies: int) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        with workdir() as d:
            prof = local_profile(d)
            big = "y" * 60_000
            text = prof.read_text() + f"description: &big {big[:4000]}\nenv:\n  BASE: &v {big}\n"
            text += "".join(f"  E{i}: *v\n" for i in range(copies))
            prof.write_text(text)
            r = _ppspec(
                "export",
                "k8s",
                str(prof),
                "--image",
                "img:1",
                "--offline",
                "--volume",
                f"models:{d}",
                "-o",
                str(d / "m.yaml"),
                cwd=d,
            )
            size = (60_000 * (copies + 1)) + 4000
            if size <= 1 << 20:
                return _clean_exit(r, (0, 1))
            if r.returncode == 0:
                return f"wrote a ConfigMap of ~{size} bytes (Kubernetes refuses over 1 MiB)"
            return _clean_exit(r, 2)

    return run


def _ascii_locale_case(value: str) -> Callable[[], str | None]:
    """In an ASCII-only locale a printable non-ASCII value cannot be shown as itself: a quoted
    escape would be another value. The word is rebuilt by printf, and holds only ASCII."""

    @_guard
    def run() -> str | None:
        import io

        from ppspec_cli.io import shellout

        ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="backslashreplace")
        with patched(sys, "stdout", ascii_out):
            word = shellout.quote(value)
            line = shellout.command(["vllm", "serve", "--served-model-name", value])
        if not word.isascii() or not line.isascii():
            return f"{word!r} cannot be printed as itself in an ASCII locale"
        if "printf" not in word:
            return f"{word!r} is not rebuilt exactly"
        return None

    return run


def export_cases() -> Iterator[Case]:
    for v in ("１２:００:００", "١٢٠", "12:٠٠", "٢-00:00:00", "1²"):
        yield ("exports-cluster", "slurm-time", repr(v), _slurm_value_case("time", v))
    for v in ("５１２G", "٥١٢G", "512G\u200b", "1²G"):
        yield ("exports-cluster", "slurm-mem", repr(v), _slurm_value_case("mem_per_node", v))
    for names in (("llama.8b", "llama_8b", "llama-8b"), ("Llama", "llama", "LLAMA"), ("8b", "p-8b", "8B"),
                  ("a" * 60, "a" * 61, "a" * 62), ("ü", "ö", "-")):  # fmt: skip
        yield ("exports-cluster", "k8s-names", " / ".join(n[:10] for n in names), _k8s_collision_case(names))
    for copies in (5, 20, 30):
        yield ("exports-cluster", "configmap", f"{copies} aliases of 60 KB", _configmap_case(copies))
    for v in ("modèle", "模型", "naïve\u00a0name", "Ωmega"):
        yield ("exports-cluster", "ascii-locale", v, _ascii_locale_case(v))


# -- the ready marker and bench's endpoints (class 9)


def _endpoint_case(url: str) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.planning.profile import parse_profile
        from ppspec_cli.verify.bench import session

        prof = parse_profile(
            "name: p\ntarget: {model: a/b}\ndrafter: {method: eagle3, model: c/d, num_speculative_tokens: 2}\n"
        )
        try:
            session.arms_for(prof, None, url, "http://127.0.0.1:8001")
        except PpspecError as e:
            return None if e.exit_code == 2 else f"exit {e.exit_code}"
        return f"accepted --endpoint {url} without checking it (every arm resumed: nothing else would)"

    return run


def _ready_case(errno_: int) -> Callable[[], str | None]:
    """The engine answers /health but RUN_DIR/ready cannot be written: serve stops with exit 1
    (a script waiting for the marker would wait forever), never serves on without it."""

    @_guard
    def run() -> str | None:
        from ppspec_cli.running.serve import supervise

        src = Path(supervise.__file__).read_text()
        i = src.find("READY_FILE, spec.url")
        if i < 0:
            return "serve writes no ready marker"
        window = src[i : i + 600]
        if "keeps serving" in window or "ServeResult(" not in window:
            return "serve keeps serving without its ready marker"
        return _ready_runtime(errno_)

    return run


def _ready_runtime(errno_: int) -> str | None:
    """Drive _supervise with a healthy fake engine and a run directory whose writes fail."""
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.running.serve import supervise

    class Proc:
        pid = 0

        def poll(self):
            return None

    class Rd:
        def write_text(self, name, text, *, what):
            raise PpspecError(
                f"cannot write {name}: {os.strerror(errno_)}", where="--run-dir", fix="free space", exit_code=1
            )

    class Spec:
        url = "http://127.0.0.1:1"
        run_dir = Path("/nonexistent/run")
        plan_data: dict = {}

    class Node:
        role = "head"
        node_rank = 0
        argv = ["vllm", "serve", "m"]
        env_refs: dict = {}

    class Shown:
        hidden_warnings = 0
        last_shown = 0.0

        def log(self, _line):
            pass

    class Sigs:
        """No signal for a while, then SIGTERM: a serve that went on without its marker ends here (exit 143)."""

        seen = 0
        name = "SIGTERM"

        @property
        def first(self):
            self.seen += 1
            return None if self.seen < 50 else 15

    with patched(supervise, "health_ok", lambda url: True), patched(supervise, "unconfirmed", lambda d: None):
        engine = supervise._Engine(
            Spec(), Node(), Proc(), Sigs(), None, None, Path("/nonexistent/engine.log"), Shown(), lambda: None, Rd()
        )  # stand-ins with the attributes the supervisor reads
        res = supervise._supervise(engine, supervise.Supervision(health_timeout_s=60.0))
    if res.exit_code != 1:
        return f"serve went on (exit {res.exit_code}) without its ready marker"
    return None


def ready_cases() -> Iterator[Case]:
    for url in ("http://user:secret@127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://127.0.0.1:0", "http://h:99999",
                "http://127.0.0.1:8000/?q=1", "http://:8000"):  # fmt: skip
        yield ("ready", "bench-endpoint", url, _endpoint_case(url))
    for e in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO):
        yield ("ready", "ready-marker", errno.errorcode[e], _ready_case(e))


# -- one option reader for every rule (class 4)


def _pp_option_case(key: str, value: object) -> Callable[[], str | None]:
    @_guard
    def run() -> str | None:
        with workdir() as d:
            prof = local_profile(d, pp=2, extra=f"engine: {{{json.dumps(key)}: {json.dumps(value)}}}\n")
            r = _ppspec("check", str(prof), "--offline", "--json", cwd=d)
        try:
            codes = {f["code"] for f in json.loads(r.stdout).get("findings", [])}
        except ValueError:
            return f"no JSON: {r.stderr[-160:]}"
        if "pp-refused-option" in codes or "engine-ambiguous-option" in codes or "engine-bad-option-name" in codes:
            return None
        return f"engine.{key} passes check at PP 2; vLLM refuses it at start"

    return run


def option_reader_cases() -> Iterator[Case]:
    for key in ("enable_return-routed-experts", "--enable-return-routed-experts", "enable-return-routed",
                "Enable_Return_Routed_Experts", "enable-return-routed-e",
                "no-enable-return-routed-experts"):  # fmt: skip
        value = False if key.startswith("no-") else True
        yield ("option-reader", "pp-refused-option", key, _pp_option_case(key, value))


MECHANISMS4: dict[str, Callable[[], Iterator[Case]]] = {
    "costs": cost_cases,
    "bench-out": bench_out_cases,
    "bench-records": bench_record_cases,
    "env-moves": env_cases,
    "numbers": number_cases,
    "engine-scan": scan_cases,
    "exits": exit_cases,
    "exports-cluster": export_cases,
    "ready": ready_cases,
    "option-reader": option_reader_cases,
}
