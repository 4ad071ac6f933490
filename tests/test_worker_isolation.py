"""`bash dev.sh test` runs the suite on two workers side by side (tests/worker.sh). That is sound only
if each worker has a /dev/shm and a temp dir of its own: the engine tests' "nothing left in /dev/shm
or the temp dir" checks compare before and after, and another worker's engine must not show up
there. This checks the launcher does what it says, in a worker of its own started here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "worker.sh"

PROBE = r"""
import json, os, tempfile
shm = os.path.realpath("/dev/shm")
with open("/proc/self/mountinfo") as f:
    mounts = [line.split() for line in f]
shm_fs = [m[m.index("-") + 1] for m in mounts if m[4] == shm]
open("/dev/shm/ppspec-isolation-probe", "w").close()
print(json.dumps({"tmp": tempfile.gettempdir(), "shm_fs": shm_fs, "shm": sorted(os.listdir("/dev/shm")),
                  "isolated": os.environ.get("PPSPEC_TEST_ISOLATED"), "mnt": os.readlink("/proc/self/ns/mnt")}))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="the worker launcher needs root and unshare (CI has both)",
)
def test_a_worker_has_its_own_shm_and_temp_dir():
    import json

    env = dict(os.environ, PPSPEC_WORKER_PYTHON=sys.executable)
    p = subprocess.run([str(WORKER), "-c", PROBE], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout)
    assert seen["isolated"] == "1"
    assert seen["shm_fs"] and seen["shm_fs"][-1] == "tmpfs", seen
    assert seen["shm"] == ["ppspec-isolation-probe"], "the worker's /dev/shm is not empty and private"
    assert "ppspec-isolation-probe" not in os.listdir("/dev/shm"), "the probe reached this /dev/shm"
    assert seen["mnt"] != os.readlink("/proc/self/ns/mnt"), "the worker shares this mount namespace"
    tmp = Path(seen["tmp"])
    assert tmp.name.startswith("ppspec-worker.") and tmp.parent == Path("/tmp")
    assert not tmp.exists(), "the worker's temp dir outlived it"


def test_the_launcher_refuses_to_run_without_its_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "PPSPEC_WORKER_PYTHON"}
    p = subprocess.run(
        ["sh", str(WORKER), "-c", "print(1)"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert p.returncode != 0 and "PPSPEC_WORKER_PYTHON" in p.stderr
