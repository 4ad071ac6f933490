"""benchmarks/gpu_wheels.sh and serve's `vllm` command lookup (issue 13's first two script bugs):
the device install keeps every wheel's console scripts, including `vllm`, and a vllm package that
imports without its command is reported as exactly that."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge import engine as launch  # the vllm command is a fact of the install

pytestmark = pytest.mark.slow  # runs the wheel script in subprocesses

REPO = Path(__file__).resolve().parent.parent
WHEELS = REPO / "benchmarks" / "gpu_wheels.sh"


def _wheel(tmp: Path, name: str, script: str | None) -> Path:
    """A tiny pure-Python wheel, with a console script when `script` is given."""
    src = tmp / f"src-{name}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text("def main():\n    print('hi')\n")
    entry = f"\n[project.scripts]\n{script} = '{name}:main'\n" if script else ""
    (src / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "1.0"
        """)
        + entry
    )
    out = tmp / f"whl-{name}"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(out.glob("*.whl"))


def test_install_keeps_the_vllm_command(tmp_path):
    fake_vllm = _wheel(tmp_path, "fakevllm", "vllm")
    fake_ppspec = _wheel(tmp_path, "fakeppspec", "ppspec")
    parts, ppspec_dir, device_parts, site = (
        tmp_path / "parts",
        tmp_path / "ppspec",
        tmp_path / "dev-parts",
        tmp_path / "site",
    )
    parts.mkdir()
    ppspec_dir.mkdir()
    (ppspec_dir / fake_ppspec.name).write_bytes(fake_ppspec.read_bytes())
    subprocess.run(
        f"tar -C {fake_vllm.parent} -cf - {fake_vllm.name} | split -b 1k -d -a 3 - {parts}/part-",
        shell=True,
        check=True,
    )
    subprocess.run("sha256sum part-* > SHA256SUMS", shell=True, check=True, cwd=parts)
    env = dict(
        os.environ,
        PARTS_DIR=str(parts),
        PPSPEC_WHL_DIR=str(ppspec_dir),
        DEVICE_PARTS=str(device_parts),
        DEVICE_SITE=str(site),
        DEVICE_WHEELS=str(tmp_path / "dev-wheels"),
    )
    for p in sorted(parts.glob("part-*")):
        r = subprocess.run(
            ["bash", str(WHEELS), "receive", p.name], env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
    # `install` ends with an import check of torch and vllm, which this machine's fakes do not pass:
    # what matters is what pip left in the target before that
    subprocess.run(["bash", str(WHEELS), "install"], env=env, capture_output=True, text=True, timeout=300)
    assert (site / "bin" / "vllm").exists() and (site / "bin" / "ppspec").exists()
    assert (site / "fakevllm").is_dir() and (site / "fakeppspec").is_dir()


def test_force_carry_names_the_nccl_the_device_needs():
    text = WHEELS.read_text()
    assert 'FORCE_CARRY="${FORCE_CARRY:-nvidia-nccl-cu13==2.30.7}"' in text


def _fake_vllm_pkg(root: Path, with_bin: bool) -> Path:
    site = root / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    if with_bin:
        (site / "bin").mkdir()
        (site / "bin" / "vllm").write_text("#!/bin/sh\n")
    return site


@pytest.mark.parametrize("with_bin", [False, True])
def test_vllm_command_beside_a_target_install_or_a_clear_error(tmp_path, monkeypatch, with_bin):
    site = _fake_vllm_pkg(tmp_path, with_bin)
    monkeypatch.delenv(launch.ENV_VLLM_EXECUTABLE, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "nobin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.syspath_prepend(str(site))
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    if with_bin:
        assert launch.vllm_executable() == str((site / "bin" / "vllm").resolve())
    else:
        with pytest.raises(PpspecError) as e:
            launch.vllm_executable()
        assert "the `vllm` command is not on PATH" in e.value.what and launch.ENV_VLLM_EXECUTABLE in (e.value.fix or "")
    monkeypatch.setenv(launch.ENV_VLLM_EXECUTABLE, "/opt/x/vllm")
    assert launch.vllm_executable() == "/opt/x/vllm"
