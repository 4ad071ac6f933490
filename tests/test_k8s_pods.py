"""`ppspec export k8s` for real, without a cluster: a kubelet stand-in runs the manifest's pod as
Kubernetes would (its command and args with LWS's `$(VAR)`s expanded, the ConfigMap's files at
their mountPath, the run directory's emptyDir, its own /dev/shm) on a namespace host (tests/hosts.py,
the pod's own network stack and host name), and the readiness probe's GET /health comes from the
other host. The profile has a drafter whose taps are only nested in `eagle_config`: the pod's
`ppspec serve` must build the config overlay and confirm the plugin in every engine process
before it answers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from enginehelpers import PPSPEC, REPO, engine_env, engine_lock, free_port, vllm_cache_root
from hosts import Hosts, can_make_hosts

from ppspec_cli.running.serve.confirm import unconfirmed

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

BIN = Path(sys.executable).parent
START_S = 600


def expand(value: str, env: dict) -> str:
    """Kubernetes' `$(VAR)` expansion in command/args (`$$` is a literal `$`)."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and ")" in value[i:]:
            j = value.index(")", i)
            out.append(env.get(value[i + 2 : j], value[i : j + 1]))
            i = j + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def test_k8s_pod_builds_the_overlay_and_confirms_the_plugin(tmp_path):
    why = can_make_hosts()
    if why:
        pytest.skip(why)
    port = free_port()
    prof = tmp_path / "nested.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": "tiny-nested-k8s",
                "target": {"model": "demo:tiny-llama"},
                "drafter": {"method": "eagle3", "model": "demo:tiny-llama-eagle3-nested", "num_speculative_tokens": 2},
                "platform": "cpu",
                "server": {"port": port},
                "engine": {"max-model-len": 512, "enforce-eager": True, "max-num-seqs": 4},
            }
        )
    )
    home = Path(tempfile.mkdtemp(prefix="ppspec-pod-"))
    env = engine_env(
        {
            "HOME": str(home),
            "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep),
            "VLLM_CACHE_ROOT": vllm_cache_root(),  # vLLM's own cache: this run's (enginehelpers), not the new home's
        }
    )
    env.pop("PPSPEC_CACHE", None)
    manifest = subprocess.run(
        [*PPSPEC, "export", "k8s", str(prof), "--image", "reg/ppspec:1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert manifest.returncode == 0, manifest.stderr
    cm, lws, _svc = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    (c,) = pod["containers"]
    vols = {v["name"]: v for v in pod["volumes"]}
    # the kubelet stand-in: a private file system view for the pod (copies and binds, in its own mount namespace)
    podfs = tmp_path / "pod"
    mounts = []
    for m in c["volumeMounts"]:
        v = vols[m["name"]]
        src = podfs / m["name"]
        src.mkdir(parents=True)
        if "configMap" in v:
            assert v["configMap"]["name"] == cm["metadata"]["name"]
            for k, text in cm["data"].items():
                (src / k).write_text(text)
        elif v.get("emptyDir", {}).get("medium") == "Memory":
            mounts.append(f"mount -t tmpfs -o size=1g tmpfs {m['mountPath']}")
            continue
        else:
            assert v.get("emptyDir") == {}, v
        mounts.append(f"mkdir -p {m['mountPath']} 2>/dev/null || true; mount --bind {src} {m['mountPath']}")
    # mount points that do not exist on this machine (/etc/ppspec, /var/run/ppspec/...) are made in
    # copies of /etc and /run bound over them inside the pod's mount namespace only
    etc_copy = podfs / "etc"
    shutil.copytree(
        "/etc", etc_copy, symlinks=True, ignore_dangling_symlinks=True, ignore=shutil.ignore_patterns("netns")
    )
    setup = [f"mount --bind {etc_copy} /etc", "mount -t tmpfs tmpfs /run", *mounts]
    lws_env = {"LWS_LEADER_ADDRESS": "nodea", "LWS_WORKER_INDEX": "0", "LWS_GROUP_SIZE": "1"}
    argv = [expand(a, lws_env) for a in c["command"] + c["args"]]
    assert argv[0] == "ppspec"
    argv[0] = str(BIN / "ppspec")  # the image's ppspec
    pod_env = {**env, **lws_env}
    for e in c.get("env", []):
        pod_env[e["name"]] = expand(e["value"], pod_env)
    run_dir = podfs / "ppspec-run"
    log = tmp_path / "pod.log"
    with Hosts(2) as hosts, engine_lock():
        with open(log, "w") as f:
            proc = subprocess.Popen(
                hosts.argv(0, argv, mounts="\n".join(setup)),
                stdout=f,
                stderr=subprocess.STDOUT,
                env=pod_env,
                start_new_session=True,
            )
        try:
            probe = [
                sys.executable,
                "-c",
                "import urllib.request,sys; sys.exit(0 if "
                f"urllib.request.urlopen('http://{hosts.addrs[0]}:{port}/health', timeout=5).status == 200 else 1)",
            ]
            t0 = time.monotonic()
            ready = False
            while time.monotonic() - t0 < START_S and proc.poll() is None:
                if hosts.run(1, probe, timeout=30).returncode == 0:
                    ready = True
                    break
                time.sleep(2)
            text = log.read_text(errors="replace")
            assert ready, f"the pod never became ready (exit {proc.poll()}):\n{text[-4000:]}"
            # the overlay the pod's ppspec built: the nested taps as vLLM's top-level capture points
            cfg = json.loads((run_dir / "drafter-overlay" / "config.json").read_text())
            original = json.loads(
                (home / ".cache" / "ppspec" / "demo" / "tiny-llama-eagle3-nested" / "config.json").read_text()
            )
            assert (
                "eagle_aux_hidden_state_layer_ids" not in original
                and original["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
            )
            assert cfg["eagle_aux_hidden_state_layer_ids"] and "eagle_config" in cfg, cfg
            assert unconfirmed(run_dir / "plugin-status") is None
            # the health probe can answer before ppspec's own readiness poll prints its line: wait for it
            t1 = time.monotonic()
            while "ready in" not in text and time.monotonic() - t1 < 60 and proc.poll() is None:
                time.sleep(1)
                text = log.read_text(errors="replace")
            assert "serving at" in text and "ready in" in text, text[-3000:]
            print(
                f"k8s pod: ready after {time.monotonic() - t0:.0f}s, overlay taps "
                f"{cfg['eagle_aux_hidden_state_layer_ids']}"
            )
            proc.send_signal(signal.SIGTERM)  # what the kubelet sends on pod deletion
            assert proc.wait(timeout=180) == 143, log.read_text(errors="replace")[-3000:]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            shutil.rmtree(home, ignore_errors=True)
