"""Shared, generic test helpers: real fixture configs, checkpoint directories built from them in
tmp_path, real safetensors files (header + sparse data region), profile files, and running the CLI
as a user would. Keep this small: feature-specific fixtures live in their own test files."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODELS = FIXTURES / "models"

#: safetensors dtype name -> bytes per element (the format's own table).
ST_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


#: The longest files first, so that `bash dev.sh test`'s two workers (one file at a time each,
#: --dist loadfile) do not end with one of them alone on a long engine file. Only the order changes;
#: a file missing here runs after these, in its usual place. The seconds (also the ETA's estimate of
#: the file in a fresh clone: tests/suiteprogress.py): the file's worker-seconds in a full run under
#: load (2026-12-04, load average 3-8); where a file was cut that evening, the figure of the file
#: (or the changed tests) run alone afterwards, with the load then.
LONG_FIRST: dict[str, float] = {
    "test_multinode_engine.py": 481,
    "test_gpu_validation_script.py": 443,  # alone at load 5-8 (381 s in the run, one arm more)
    "test_versions_engine.py": 183,  # alone at load 1-2.5 (494 s in the run)
    "test_bench_engine.py": 208,
    "test_pd_engine.py": 112,  # alone at load 4-7 (164 s in the run)
    "test_bench.py": 107,
    "test_demo.py": 102,
    "test_faults.py": 99,
    "test_serve_e2e.py": 93,
    "test_k8s_pods.py": 93,
    "test_plugin_confirm_engine.py": 85,  # alone at load 4-5 (160 s in the run)
    "test_demo_block.py": 81,
    "test_plugin_engine.py": 78,  # alone at load 3-5, less its lock wait (147 s in the run)
    "test_demo_engine.py": 64,
    "test_verify_e2e.py": 58,
    "test_suite.py": 43,  # tests/attack
    "test_export.py": 42,
    "test_faults_engine.py": 35,
    "test_wheel_install.py": 26,
}


def pytest_collection_modifyitems(config, items):
    """`-m "not slow"` selects the fast tests: a test that starts a vLLM engine or imports vLLM is
    slow too (its `engine`/`vllm` marker implies `slow`). Long files are put first (LONG_FIRST)."""
    for item in items:
        if item.get_closest_marker("engine") or item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONG_FIRST)}  # the dict's order
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))  # stable: the rest keep their order


#: What the workers of an xdist run report back (pytest_testnodedown), summed for the summary below.
_from_workers: dict[str, Any] = {"lock": {"seconds": 0.0, "times": 0}, "attack": {}}


def _session_report() -> dict[str, Any]:
    """This process's engine-lock waits and attacker-suite counts (tests/attack/counts.py)."""
    # read only if this session loaded them (a copy of this conftest elsewhere has neither)
    waited = getattr(sys.modules.get("enginehelpers"), "lock_waited", {"seconds": 0.0, "times": 0})
    counts = getattr(sys.modules.get("attack.counts"), "COUNTS", {})  # tests/attack/test_suite.py fills it
    return {"lock": dict(waited), "attack": {"\t".join(k): list(v) for k, v in counts.items()}}


def _merge(report: dict[str, Any]) -> None:
    _from_workers["lock"]["seconds"] += report["lock"]["seconds"]
    _from_workers["lock"]["times"] += report["lock"]["times"]
    for k, (n, bad) in report["attack"].items():
        old = _from_workers["attack"].get(k, (0, 0))
        _from_workers["attack"][k] = (old[0] + n, old[1] + bad)


class _XdistReports:
    """Registered only when pytest-xdist is loaded (its hooks exist only then)."""

    @pytest.hookimpl
    def pytest_testnodedown(self, node, error):
        report = getattr(node, "workeroutput", {}).get("ppspec")
        if report:
            _merge(json.loads(report))


def pytest_configure(config):
    # The width of the shell that runs the suite is not the tests': with $COLUMNS exported (80 in the
    # lead's CI shell) every ppspec a test starts wraps its messages (io/terminal.wrap_width), and an
    # assertion on a sentence of a pipe's output meets it broken over two lines. A test about wrapping
    # sets COLUMNS itself (test_wrap.py, test_cli_output.py, the demo's one-screen test).
    os.environ.pop("COLUMNS", None)
    # `bash dev.sh test` starts its workers through tests/worker.sh (PPSPEC_WORKER_PYTHON set); a
    # worker started otherwise (`-n N` next to dev.sh's --tx specs makes plain ones) would share
    # /dev/shm with the other worker's engines and see their files as its own leftovers
    if (
        os.environ.get("PYTEST_XDIST_WORKER")
        and os.environ.get("PPSPEC_WORKER_PYTHON")
        and os.environ.get("PPSPEC_TEST_ISOLATED") != "1"
    ):
        raise pytest.UsageError(
            "this xdist worker was not started by tests/worker.sh: run the suite with `bash dev.sh test` (no -n)"
        )
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistReports(), "ppspec-xdist-reports")
    try:  # a count and an ETA every minute (PPSPEC_PROGRESS_SECONDS; issue 43 item 8)
        import suiteprogress
    except ImportError:  # a copy of this conftest elsewhere (test_devsh.py) has no progress module beside it
        return
    suiteprogress.register(config, LONG_FIRST)


def pytest_terminal_summary(terminalreporter):
    """The attacker suite's cases / problems per mechanism and class (issue 23), and how long the
    engine tests waited for the engine lock (other runs on this machine holding it): that time is
    in their durations but is not the suite's. Summed over the workers of an xdist run."""
    _merge(_session_report())
    attack, waited = _from_workers["attack"], _from_workers["lock"]
    tr = terminalreporter
    if attack:
        tr.section("attacker suite (issue 23): cases / problems per mechanism and class")
        by_mech: dict[str, list] = {}
        for key, (n, bad) in sorted(attack.items()):
            mech, cls = key.split("\t", 1)
            by_mech.setdefault(mech, []).append((cls, n, bad))
        for mech, rows in by_mech.items():
            total, bad = sum(r[1] for r in rows), sum(r[2] for r in rows)
            tr.write_line(
                f"{mech}: {total} cases, {bad} problems  (" + ", ".join(f"{c} {n}/{b}" for c, n, b in rows) + ")"
            )
    if waited["times"]:
        tr.write_line(
            f"engine lock: taken {waited['times']} time(s), {waited['seconds']:.0f} s spent waiting for other runs"
        )


def pytest_sessionfinish(session, exitstatus):
    """A worker of an xdist run hands its report to the controller (see _XdistReports).

    In CI (CI set, as `.ci/run` runs), a skipped test fails the run: CI installs vLLM and .venv,
    so every skip reason above ("needs vLLM", "no .venv") would hide a broken install there."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ppspec"] = json.dumps(_session_report())
        return
    if not os.environ.get("CI") or exitstatus not in (0,):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reasons = sorted({str(r.longrepr[-1]) if isinstance(r.longrepr, tuple) else str(r.longrepr) for r in skipped})
        if reporter is not None:
            reporter.write_line(
                f"CI: {len(skipped)} test(s) skipped, which CI does not allow: " + "; ".join(reasons[:5]), red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def fixture_config(model_dir: str, file: str = "config.json") -> dict[str, Any]:
    """A real config copied into tests/fixtures/models (see SOURCES.md). Returns a fresh dict."""
    return json.loads((MODELS / model_dir / file).read_text(encoding="utf-8"))


def synthetic_kimi_k25_config() -> dict:
    """SYNTHETIC TEST CONFIG (not a real checkpoint's file): a Kimi-K2.5-style multimodal config,
    the text model under `text_config`, its values taken from the DeepSeek-V3 fixture (61 layers,
    hidden 7168, vocab 129280 there; Kimi's vocab 163840 set explicitly)."""
    text = fixture_config("deepseek-ai__DeepSeek-V3")
    text.pop("architectures", None)
    text["vocab_size"] = 163840
    return {
        "_synthetic": "test config built from the DeepSeek-V3 fixture; not a copy of any real file",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text,
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
    }


def safetensors_header(
    tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None
) -> tuple[bytes, int]:
    """The 8-byte length + JSON header for `tensors` laid out back to back; returns (prefix, data bytes)."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, (dtype, shape) in tensors.items():
        n = ST_DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw, off


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, list[int]]], *, metadata: dict[str, str] | None = None
) -> Path:
    """A valid safetensors file. The data region is sparse zeros, so multi-GB shapes cost nothing."""
    prefix, size = safetensors_header(tensors, metadata if metadata is not None else {"format": "pt"})
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(prefix)
        f.truncate(len(prefix) + size)
    return path


@pytest.fixture(autouse=True)
def _redactions_stay_in_their_test():
    """Secrets a test registers in this worker's process (redact.register, register_url: the attack
    suite's `http://user:secret@...` endpoint case) are forgotten after it: one left behind masks its
    value in every later in-process run of the worker ("engine-***-option", "test_***_by_reference"
    in a tmp path), which is a test leaking state, not what a user's one ppspec process does."""
    from ppspec_cli.io import redact

    saved = (set(redact._secrets), redact._pattern)  # noqa: SLF001 - the module's own state, restored as found
    yield
    redact._secrets.clear()  # noqa: SLF001
    redact._secrets.update(saved[0])  # noqa: SLF001
    redact._pattern = saved[1]  # noqa: SLF001


@pytest.fixture
def make_checkpoint(tmp_path: Path):
    """Factory: a checkpoint directory in tmp_path.

    config: a dict, or "<fixture dir>" / "<fixture dir>/<file>" to copy a real config (copied as
    config.json unless `config_name` says otherwise); None writes no config.
    index: a dict written as model.safetensors.index.json (or `index_name`).
    shards: {file name: {tensor: (dtype, shape)}} written as real safetensors files.
    """

    def make(
        name: str,
        config: dict | str | None,
        *,
        config_name: str = "config.json",
        index: dict | None = None,
        index_name: str = "model.safetensors.index.json",
        shards: dict[str, dict[str, tuple[str, list[int]]]] | None = None,
    ) -> Path:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        if isinstance(config, str):
            fixture_dir, _, file = config.partition("/")
            config = fixture_config(fixture_dir, file or "config.json")
        if config is not None:
            (d / config_name).write_text(json.dumps(config, indent=2), encoding="utf-8")
        if index is not None:
            (d / index_name).write_text(json.dumps(index, indent=2), encoding="utf-8")
        for fname, tensors in (shards or {}).items():
            write_safetensors(d / fname, tensors)
        return d

    return make


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory) -> Path:
    """A PPSPEC_CACHE with every demo model built once per test session, shared by the tests that
    only read them (a build per test would cost seconds and ~90 MB each). Treat it as read-only.
    The validation kit's listed models (ppspec_kit) are in it too."""
    import fcntl

    import ppspec_kit  # noqa: F401  (registers the kit's models in demo.DEMO_MODELS)
    from ppspec_cli import demo

    # One build for the whole run: an xdist worker's base temp dir is inside the controller's, so
    # the workers of one run share its parent (a run in one process uses its own base temp). The
    # first worker builds under a lock, the other waits and reads the same models (issue 43 item 8).
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "ppspec-demo-cache"
    with open(shared / "ppspec-demo-cache.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root.mkdir(mode=0o700, exist_ok=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PPSPEC_CACHE", str(root))
            for name in demo.DEMO_MODELS:
                demo.ensure_demo_model(name)  # a model already built (by the other worker) is only checked
    return root


@pytest.fixture
def write_profile(tmp_path: Path):
    """Factory: write YAML text to tmp_path/<name> and return its path."""

    def write(text: str, name: str = "profile.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return write


def run_ppspec(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter, as a user's shell would (no shell, captured output)."""
    full_env = dict(os.environ)
    full_env.setdefault("HF_HUB_OFFLINE", "1")
    full_env.pop("PPSPEC_DEBUG", None)
    full_env["COLUMNS"] = "200"  # keep rich from wrapping messages mid-word in assertions
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=str(cwd or REPO),
        timeout=timeout,
    )


def pack_rules(name: str):
    """A pack's rules module (adapters/<name>/rules.py), loaded as ppspec loads it: tests call the
    functions a family's drafter contract lives in through this, never through a core module."""
    from ppspec_cli.knowledge.packs import get_pack, load_pack_module

    pack = get_pack(name)
    return load_pack_module(pack.name, "rules", pack.rules_path)
