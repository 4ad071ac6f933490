"""`ppspec serve --dry-run`: the exact command lines and environment for every node, for the
shipped real-world profiles (single node, multi-node mp, Ray), on a machine without GPUs.

Checkpoint metadata comes from a local Hugging Face cache built from the real config fixtures and
read by huggingface_hub in offline mode (HF_HUB_OFFLINE=1), exactly as on a login node with a cache.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import inprocess
import pytest
import yaml

from ppspec_cli.running.launch import NodeLaunch

# Fast: the CLI runs in process (tests/inprocess.py) and `serve --dry-run` imports neither vLLM nor torch.

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "models"


def ppspec(*args: str, env: dict, cwd: Path = REPO) -> inprocess.Result:
    """`ppspec ARGS` in process through the real entry point (no process boundary is tested here)."""
    return inprocess.run(*args, env=env, cwd=cwd)


# hub id -> fixture config file (real configs; see tests/fixtures/models/SOURCES.md)
CACHE = {
    "meta-llama/Llama-3.1-8B-Instruct": [
        "meta-llama__Llama-3.1-8B-Instruct/config.json",
        "meta-llama__Llama-3.1-8B-Instruct/model.safetensors.index.json",
    ],
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": ["sgl-project__SpecForge/llama3-8B-eagle3.json"],
    "Qwen/Qwen3-8B": ["Qwen__Qwen3-8B/config.json"],
    "z-lab/Qwen3-8B-DFlash-b16": ["z-lab__Qwen3-8B-DFlash-b16/config.partial.json"],
    "meta-llama/Llama-3.3-70B-Instruct": ["meta-llama__Llama-3.3-70B-Instruct/config.json"],
}


def make_hf_cache(root: Path) -> Path:
    """HF_HUB_CACHE layout: models--org--name/{refs/main, snapshots/<commit>/...}."""
    commit = "0" * 40
    for repo, files in CACHE.items():
        d = root / ("models--" + repo.replace("/", "--"))
        snap = d / "snapshots" / commit
        snap.mkdir(parents=True)
        (d / "refs").mkdir()
        (d / "refs" / "main").write_text(commit)
        for i, f in enumerate(files):
            name = "config.json" if i == 0 else Path(f).name
            shutil.copy(FIX / f, snap / name)
    return root


@pytest.fixture(scope="module")
def hf_env(tmp_path_factory):
    cache = make_hf_cache(tmp_path_factory.mktemp("hf"))
    import os

    env = dict(os.environ)
    env.update(
        {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PPSPEC_CACHE": str(tmp_path_factory.mktemp("ppspec"))}
    )
    env.pop("HF_ENDPOINT", None)
    env.pop("COLUMNS", None)  # inprocess.run's 200: a width leaked from another test must not wrap the dry run
    return env


def dry(profile: str, env, *extra) -> tuple[int, dict, str]:
    p = ppspec("serve", profile, "--dry-run", "--json", *extra, env=env, cwd=REPO)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout), p.stderr


def test_llama31_eagle3_pp2_single_node(hf_env):
    rc, out, _ = dry("profiles/llama31_8b_eagle3_pp2.yaml", hf_env)
    assert rc == 0
    (node,) = out["nodes"]
    argv = node["argv"]
    assert argv[1:3] == ["serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 3
    # the SpecForge head config names no taps: vLLM taps the defaults; no overlay
    assert spec["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert node["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert node["env"]["PPSPEC_PLAN_FILE"].endswith("plan.json")
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert out["plan_data"]["plan"]["taps"] == [2, 16, 29]
    # the node's shell line (the text dry run's) is copy-pasteable and round-trips to the same argv
    words = shlex.split(NodeLaunch(**node).shell_line())
    assert words[len(node["env"]) :] == argv


def test_qwen3_dflash_taps_plus_one(hf_env):
    rc, out, _ = dry("profiles/qwen3_8b_dflash_pp2.yaml", hf_env)
    # the DFlash fixture is partial: warnings only, launch still printed
    plan = out["plan_data"]["plan"]
    assert plan["taps"] == [2, 10, 18, 26, 34]  # dflash_config.target_layer_ids + 1
    assert plan["taps_source"] == "dflash_config.target_layer_ids"
    assert rc == 0


def test_llama33_70b_pp4_partition_and_relay(hf_env):
    rc, out, _ = dry("profiles/llama33_70b_eagle3_pp4.yaml", hf_env)
    # no drafter metadata in the offline cache: the only profile error is that, the launch is still
    # shown (platform-not-served, this machine's CPU build of vLLM if any, is the here question's:
    # in `refused_by`, what serve would do here, not in the exit code)
    assert rc == 1 and {f["code"] for f in out["findings"] if f["severity"] == "error"} - {"platform-not-served"} == {
        "drafter-unreadable"
    }
    assert out["profile_verdict"]["refused_by"] == ["drafter-unreadable"]
    plan = out["plan_data"]["plan"]
    assert plan["partition"] == [20, 20, 20, 20]
    spec = json.loads(out["nodes"][0]["argv"][out["nodes"][0]["argv"].index("--speculative-config") + 1])
    assert spec["draft_tensor_parallel_size"] == 1


def test_kimi_multinode_mp_every_node(hf_env):
    rc, out, _ = dry("profiles/kimi_k3_dspark.yaml", hf_env)
    # no metadata for Kimi-K3 in the offline cache: check reports it, dry-run still shows the launch
    assert rc == 1
    assert [n["role"] for n in out["nodes"]] == ["head", "worker"]
    head, worker = (n["argv"] for n in out["nodes"])
    for argv, rank in ((head, "0"), (worker, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
        assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"
        assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert "--headless" in worker and "--headless" not in head
    assert "--port" in head and "--port" not in worker


def test_node_rank_selects_one_node(hf_env):
    p = ppspec("serve", "profiles/deepseek_v4_flash_mtp.yaml", "--dry-run", "--node-rank", "1", env=hf_env, cwd=REPO)
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")]
    assert len(lines) == 1 and "--node-rank 1" in lines[0] and "--headless" in lines[0]
    assert '\'"method":"mtp"' in lines[0] or '"method":"mtp"' in lines[0]
    bad = ppspec("serve", "profiles/deepseek_v4_flash_mtp.yaml", "--dry-run", "--node-rank", "5", env=hf_env, cwd=REPO)
    assert bad.returncode == 2 and "outside 0..1" in bad.stderr


def test_ray_executor(hf_env, tmp_path):
    data = yaml.safe_load((REPO / "profiles/kimi_k3_dspark.yaml").read_text())
    data["launch"] = {"executor": "ray", "master_addr": "10.0.0.1"}
    prof = tmp_path / "ray.yaml"
    prof.write_text(yaml.safe_dump(data))
    _, out, _ = dry(str(prof), hf_env)
    head, worker = out["nodes"]
    assert head["argv"][head["argv"].index("--distributed-executor-backend") + 1] == "ray"
    assert "--nnodes" not in head["argv"]
    assert worker["argv"][:2] == ["ray", "start"]


def test_secret_by_reference_and_shell_metacharacters(hf_env, tmp_path):
    """The API key appears only as a reference; a model name with shell metacharacters stays one word."""
    evil = tmp_path / "m; touch PWNED $(id)"
    shutil.copytree(FIX / "meta-llama__Llama-3.2-1B-Instruct", evil)
    prof = tmp_path / "p.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": "evil",
                "target": {"model": str(evil)},
                "platform": "cuda",
                "server": {"api_key_env": "MY_KEY", "host": "0.0.0.0"},
            }
        )
    )
    env = dict(hf_env, MY_KEY="sk-super-secret-value")
    p = ppspec("serve", str(prof), "--dry-run", env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "sk-super-secret-value" not in p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")][0]
    assert 'VLLM_API_KEY="${MY_KEY}"' in line
    words = shlex.split(line)
    assert str(evil) in words
    assert not (tmp_path / "PWNED").exists()


def test_engine_flag_managed_by_profile_is_refused(hf_env, tmp_path):
    data = yaml.safe_load((REPO / "profiles/llama31_8b_eagle3_pp2.yaml").read_text())
    data["engine"]["tensor-parallel-size"] = 4
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(data))
    p = ppspec("serve", str(prof), "--dry-run", env=hf_env, cwd=REPO)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    # refused once, in the verdict (issue 30): build_launch trusts it and the dry run shows the launch
    assert (
        "# error engine-managed-option: engine.tensor-parallel-size sets a flag ppspec derives from the profile "
        "(topology.tensor_parallel)" in p.stdout
    )
    assert "would refuse this profile" in p.stdout and "vllm serve" in p.stdout
    assert "[engine-managed-option]" not in p.stdout + p.stderr


def test_a_secret_engine_option_builds_no_launch(hf_env, tmp_path):
    """Where a launch cannot be built (a secret would be on its command line), build_launch still
    refuses, defensively: one message, where and fix, without the verdict's code."""
    data = yaml.safe_load((REPO / "profiles/llama31_8b_eagle3_pp2.yaml").read_text())
    data["engine"]["hf-token"] = "sk-abc-123"
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(data))
    p = ppspec("serve", str(prof), "--dry-run", env=hf_env, cwd=REPO)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert (
        "engine.hf-token is a secret" in p.stderr
        and "builds no launch" in p.stderr
        and "where: engine.hf-token" in p.stderr
    )
    assert "sk-abc-123" not in p.stdout + p.stderr and "engine-secret-option" not in p.stderr


def test_nested_eagle_config_served_through_overlay(hf_env, tmp_path):
    """The seed's trap: a SpecForge head nesting [2, 30, 58] for a 61-layer target is served with
    a top-level capture-point list [3, 31, 59] through a local overlay of its config."""
    target = tmp_path / "target"
    target.mkdir()
    cfg = json.loads((FIX / "meta-llama__Llama-3.1-8B-Instruct/config.json").read_text())
    cfg.update({"num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840})  # synthetic 61-layer test target
    (target / "config.json").write_text(json.dumps(cfg))
    prof = tmp_path / "p.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": "nested",
                "target": {"model": str(target)},
                "platform": "cuda",
                "drafter": {
                    "method": "eagle3",
                    "model": str(FIX / "AQ-MedAI__Kimi-K25-eagle3"),
                    "num_speculative_tokens": 3,
                },
                "topology": {"pipeline_parallel": 2},
            }
        )
    )
    rc, out, _ = dry(str(prof), hf_env)
    assert rc == 0
    plan = out["plan_data"]["plan"]
    assert plan["taps"] == [3, 31, 59] and plan["taps_source"] == "overlay"
    spec = json.loads(out["nodes"][0]["argv"][out["nodes"][0]["argv"].index("--speculative-config") + 1])
    assert spec["model"] == out["overlay_dir"]
    assert out["overlay"] == {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}


def test_materialize_overlay_keeps_original(tmp_path):
    from ppspec_cli.running.launch import LaunchSpec, materialize_overlay

    src = tmp_path / "drafter"
    shutil.copytree(FIX / "AQ-MedAI__Kimi-K25-eagle3", src)
    (src / "model.safetensors").write_bytes(b"weights")
    original = (src / "config.json").read_text()
    spec = LaunchSpec(
        [],
        "http://x",
        tmp_path,
        tmp_path / "plan.json",
        {},
        {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]},
        tmp_path / "ov",
        str(src),
    )
    materialize_overlay(spec)
    assert (src / "config.json").read_text() == original
    cfg = json.loads((tmp_path / "ov" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert (tmp_path / "ov" / "model.safetensors").resolve() == (src / "model.safetensors").resolve()


def test_materialize_overlay_in_a_held_run_dir_never_follows_a_link(tmp_path):
    """With the run directory held by descriptor (serve), the overlay is built relative to it: a
    symbolic link planted at drafter-overlay is unlinked, never followed into."""
    from ppspec_cli.running.launch import LaunchSpec, materialize_overlay
    from ppspec_cli.running.serve.rundir import RunDir

    src = tmp_path / "drafter"
    shutil.copytree(FIX / "AQ-MedAI__Kimi-K25-eagle3", src)
    (src / "model.safetensors").write_bytes(b"weights")
    run_dir, victim = tmp_path / "run", tmp_path / "victim"
    run_dir.mkdir()
    victim.mkdir()
    (victim / "precious").write_text("keep\n")
    (run_dir / "drafter-overlay").symlink_to(victim)
    spec = LaunchSpec(
        [],
        "http://x",
        run_dir,
        run_dir / "plan.json",
        {},
        {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]},
        run_dir / "drafter-overlay",
        str(src),
    )
    with RunDir.open(run_dir) as rd:
        materialize_overlay(spec, rd=rd)
    assert sorted(p.name for p in victim.iterdir()) == ["precious"]
    ov = run_dir / "drafter-overlay"
    assert ov.is_dir() and not ov.is_symlink()
    assert json.loads((ov / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert (ov / "model.safetensors").resolve() == (src / "model.safetensors").resolve()


def test_the_hosts_network_is_the_here_question(hf_env, tmp_path, monkeypatch):
    """Issue 30: a multi-node profile's host-name and head-route checks are this machine's (`here`
    findings, `check` shows them in its "on this machine" part); the profile findings keep the ports."""
    from ppspec_cli.io import netinfo

    monkeypatch.setattr(netinfo, "host_name", lambda: "nodeb")
    monkeypatch.setattr(
        netinfo, "resolve", lambda h, timeout_s=5.0: [h] if h[0].isdigit() else {"nodeb": ["127.0.1.1"]}.get(h, [])
    )
    monkeypatch.setattr(netinfo, "route_to", lambda a: None)
    data = yaml.safe_load((REPO / "profiles/llama31_8b_eagle3_pp2.yaml").read_text())
    data["topology"]["nodes"] = 2
    data["launch"] = {"executor": "mp", "master_addr": "nodez"}
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(data))
    p = ppspec("check", str(prof), "--json", env=hf_env, cwd=REPO)
    out = json.loads(p.stdout)
    profile_codes, here_codes = {f["code"] for f in out["findings"]}, {f["code"] for f in out["here"]["findings"]}
    assert "node-ports" in profile_codes and not {"node-hostname-loopback", "node-head-unroutable"} & profile_codes
    assert {"node-hostname-loopback", "node-head-unroutable"} <= here_codes
    text = ppspec("check", str(prof), env=hf_env, cwd=REPO).stdout
    assert (
        "on this machine" in text
        and "node-hostname-loopback: on this host (nodeb)" in text
        and "node-head-unroutable: from this host (nodeb)" in text
    ), text


def test_a_launch_is_built_linearly_in_its_nodes(tmp_path, monkeypatch):
    """Issue 41: build_launch built every node's whole launch once per node (a schema-valid
    `topology.nodes: 4096` grew with the square). The argv every node shares is built once; each
    node adds only its own part, in its own run directory."""
    from judging import resolved

    from ppspec_cli.planning.profile import parse_profile
    from ppspec_cli.running import launch

    calls: list[str] = []
    for name in ("_shared_engine_args", "_plan_data"):
        real = getattr(launch, name)
        monkeypatch.setattr(launch, name, lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    prof = parse_profile(
        yaml.safe_dump(
            {
                "name": "wide",
                "target": {"model": "demo:tiny-llama"},
                "platform": "cpu",
                "topology": {"nodes": 64, "pipeline_parallel": 64},
                "launch": {"master_addr": "10.0.0.1"},
            }
        )
    )
    spec = launch.build_launch(resolved(prof, install=None), launch.Site("vllm", tmp_path, "hostx"))
    assert len(spec.nodes) == 64 and sorted(calls) == ["_plan_data", "_shared_engine_args"], calls
    assert [n.env["PPSPEC_PLAN_FILE"] for n in spec.nodes[:2]] == [
        str(tmp_path / "wide" / "hostx-node0" / "plan.json"),
        str(tmp_path / "wide" / "hostx-node1" / "plan.json"),
    ]
