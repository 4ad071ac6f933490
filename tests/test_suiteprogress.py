"""Issue 43 item 8: `bash dev.sh test` shows a count and an ETA (tests/suiteprogress.py), also with
xdist's two workers, and `bash dev.sh install` shows pip's phases instead of minutes of silence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from suiteprogress import Tally

REPO = Path(__file__).resolve().parent.parent


def test_the_line_counts_and_estimates_from_file_durations():
    t = Tally(expected={"test_engine.py": 300.0, "tests/test_fast.py": 2.0}, workers=2)
    assert t.line(5) == "progress: 0/? tests, 0 failed, 0m05s"
    t.collected(
        ["tests/test_engine.py::a", "tests/test_engine.py::b"] + [f"tests/test_fast.py::t{i}" for i in range(4)]
    )
    t.collected(["tests/other.py::x"])  # the second worker's collection is the same run: ignored
    assert t.total == 6
    assert t.line(0) == "progress: 0/6 tests, 0 failed, 0m00s; about 2m31s left (2 workers)"  # (300 + 2) / 2
    for when, d in (("setup", 1.0), ("call", 100.0), ("teardown", 1.0)):
        t.report("tests/test_engine.py::a", when, d, failed=when == "call")
    assert t.done == 1 and t.failed == 1
    assert t.line(102).endswith("about 1m40s left (2 workers)")  # 300 - 102 of the engine file, + 2
    for i in range(4):
        t.report(f"tests/test_fast.py::t{i}", "call", 2.0, failed=False)  # 8 s where 2 were expected
        t.report(f"tests/test_fast.py::t{i}", "teardown", 0.0, failed=False)
    t.report("tests/test_engine.py::b", "setup", 0.0, failed=True)  # an error in setup counts once
    t.report("tests/test_engine.py::b", "teardown", 0.0, failed=True)
    assert t.done == 6 and t.failed == 2 and t.line(400) == "progress: 6/6 tests, 2 failed, 6m40s"


@pytest.mark.slow  # runs pytest in subprocesses
@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_prints_the_count_and_keeps_each_files_seconds(tmp_path, workers):
    d = tmp_path / "suite"
    d.mkdir()
    (d / "test_one.py").write_text(
        textwrap.dedent(
            """
            def test_a(): pass
            def test_b(): pass
            def test_c(): assert False
            """
        )
    )
    (d / "test_two.py").write_text("def test_d(): pass\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "PPSPEC_PROGRESS_SECONDS": "0.000001"}
    env.pop("PYTEST_XDIST_WORKER", None)
    args = [sys.executable, "-m", "pytest", "-p", "suiteprogress", "-o", f"cache_dir={tmp_path / 'cache'}", str(d)]
    if workers > 1:
        args += ["-n", str(workers)]
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "progress: 4/4 tests, 1 failed" in r.stdout, r.stdout[-3000:]
    assert "progress: 1/4 tests" in r.stdout and (f"({workers} workers)" if workers > 1 else "(1 worker)") in r.stdout
    import json

    kept = json.loads((tmp_path / "cache" / "v" / "ppspec" / "file-seconds").read_text())
    assert set(kept) == {f"{d.name}/test_one.py", f"{d.name}/test_two.py"} or all(k.endswith(".py") for k in kept)
    off = subprocess.run(
        args[:-2] if workers > 1 else args,
        capture_output=True,
        text=True,
        env={**env, "PPSPEC_PROGRESS_SECONDS": "0"},
        cwd=tmp_path,
        timeout=300,
    )
    assert "progress:" not in off.stdout


@pytest.mark.slow  # runs bash
def test_the_install_shows_pips_phases_and_its_last_lines_on_a_failure(tmp_path):
    """dev.sh's pip_phases on a stand-in for pip (its output as pip prints it): the package count,
    each large download, the install step, a line while a step is silent, the whole output kept in
    .venv/pip-install.log; a failure prints pip's last lines and keeps pip's exit status."""
    fn = (REPO / "dev.sh").read_text()
    body = fn[fn.index("pip_phases() {") : fn.index("\n}\n", fn.index("pip_phases() {")) + 3]
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/bash\n"
        'for i in $(seq 1 60); do echo "Collecting pkg$i"; done\n'
        'echo "  Downloading torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (190.2 MB)"\n'
        'echo "  Downloading small-1.0-py3-none-any.whl (1.2 MB)"\n'
        'echo "Installing collected packages: a, b, c"\n'
        "sleep 2\n"
        'echo "Successfully installed a b c"\n'
        'if [ "$FAIL" = 1 ]; then echo "ERROR: boom"; exit 3; fi\n'
    )
    fake.chmod(0o755)
    script = (
        'set -euo pipefail\nlog() { printf "ppspec: %s\\n" "$*" >&2; }\n'
        f'PY={fake}\nVENV={tmp_path}\nPIP_LOG="$VENV/pip-install.log"\n{body}\npip_phases install x\n'
    )
    env = {**os.environ, "PPSPEC_PIP_HEARTBEAT": "1"}
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "resolving: 25 packages so far" in err and "resolving: 50 packages so far" in err
    assert "downloading torch-2.13.0+cpu" in err and "(190.2 MB)" in err and "small-1.0" not in err
    assert "resolved 60 packages" in err and "installing 3 packages" in err and "installed (" in err
    assert "still installing" in err  # the 2 s of silence, with a 1 s heartbeat
    assert (tmp_path / "pip-install.log").read_text().count("Collecting") == 60
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**env, "FAIL": "1"}, timeout=60)
    assert r.returncode == 3 and "pip failed (exit 3)" in r.stderr and "ERROR: boom" in r.stderr
