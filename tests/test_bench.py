"""`ppspec bench` without an engine: the verdict, parity between arms, what --resume keeps, the
report and plots, usage errors. The real run on the CPU demo is tests/test_bench_engine.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.planning import schedule
from ppspec_cli.verify.bench import judge, report, results
from ppspec_cli.verify.bench.results import Arm
from ppspec_cli.verify.bench.session import Session

REPO = Path(__file__).resolve().parent.parent
ARMS = [Arm("baseline", False, None), Arm("spec-k1", True, 1), Arm("spec-k3", True, 3)]


def _run(arm: str, c: int, tps: float, tpot: float = 10.0, texts=None, k=None, r: int = 0) -> dict:
    spec = arm != "baseline"
    return {
        "arm": arm,
        "concurrency": c,
        "speculation": spec,
        "num_speculative_tokens": k if spec else None,
        "repeat": r,
        "seed": 0,
        "num_prompts": results.prompts_at(8, c),
        "max_tokens": 16,
        "input_len": 32,
        "completed": 8,
        "failed": 0,
        "output_tokens_per_s": tps,
        "request_throughput": tps / 16,
        "tpot_ms": {"mean": tpot, "p50": tpot, "p99": tpot * 2},
        "itl_ms": {"mean": tpot, "p50": 0.001, "p99": tpot},
        "ttft_ms": {"mean": 20.0, "p50": 20.0, "p99": 30.0},
        "acceptance_length": 1.8 if spec else None,
        "acceptance_rate": 0.4 if spec else None,
        "per_position_acceptance": [0.6, 0.2] if spec else None,
        "generated_texts": texts or ["a", "b"],
        "host": "h",
        "ppspec_version": "1",
        "vllm_version": "0.32.0",
        "run_id": "r1",
    }


def _runs(table: dict[int, tuple[float, float, float]]) -> list[dict]:
    out = []
    for c, (b, k1, k3) in table.items():
        out += [_run("baseline", c, b), _run("spec-k1", c, k1, k=1), _run("spec-k3", c, k3, k=3)]
    return out


STATIC = [("baseline", 0), ("spec-k1", 1), ("spec-k3", 3)]


def _grid(table: dict[tuple[str, int], list[float]]) -> dict:
    return {k: list(v) for k, v in table.items()}


# -- the test of a difference ---------------------------------------------------------------------


def test_a_difference_is_significant_only_beyond_the_spread_and_the_noise_floor():
    assert judge.compare([110, 112], [100, 101]) == judge.FASTER
    assert judge.compare([90, 91], [100, 101]) == judge.SLOWER
    assert judge.compare([110, 99], [100, 101]) == judge.SAME  # the ranges overlap
    assert judge.compare([102, 102.5], [100, 100.2]) == judge.SAME  # apart, but within the 3% floor
    assert judge.compare([150], [100]) == judge.SAME  # one repeat: no spread, never significant
    assert judge.compare(None, [100]) is None
    r = judge.ratio([110, 120], [100, 100])
    assert r == {"median": pytest.approx(1.15), "min": pytest.approx(1.1), "max": pytest.approx(1.2)}


def test_per_level_verdict_speedup_spread_and_the_k_the_schedule_takes():
    g = _grid(
        {
            ("baseline", 1): [100, 101],
            ("spec-k1", 1): [120, 122],
            ("spec-k3", 1): [140, 139],
            ("baseline", 4): [300, 305],
            ("spec-k1", 4): [302, 299],
            ("spec-k3", 4): [250, 255],
            ("baseline", 16): [800, 810],
            ("spec-k1", 16): [700, 690],
            ("spec-k3", 16): [600, 610],
        }
    )
    lv = judge.per_level(g, STATIC, [1, 4, 16])
    assert [x["verdict"] for x in lv] == [judge.FASTER, judge.SAME, judge.SLOWER]
    assert [x["best_speculative_arm"] for x in lv] == ["spec-k3", "spec-k1", "spec-k1"]
    # c=4: the baseline's median is the best, within the noise: speculation stays on (k of the best
    # speculative arm); c=16: the baseline is significantly faster: k=0
    assert [x["schedule_k"] for x in lv] == [3, 1, 0]
    assert lv[0]["speedup"]["median"] == pytest.approx(139.5 / 100.5)
    assert judge.proposed_schedule(lv) == [[1, 2, 3], [3, 8, 1], [9, schedule.TOP, 0]]
    # the H200 run of 2026-12-04 (docs/gpu-validation.md): at c=32 the baseline's median won inside
    # the noise in one run and lost in the identical next one; both derive the same schedule now
    first = _grid(
        {
            ("baseline", 16): [3001.3, 2952.6, 3024.2],
            ("spec-k1", 16): [3091.7, 2949.8, 3099.2],
            ("baseline", 32): [5239.9, 5024.5, 5399.1],
            ("spec-k1", 32): [5053.3, 5053.1, 5494.0],
        }
    )
    second = _grid(
        {
            ("baseline", 16): [2952.9, 2915.6, 3030.0],
            ("spec-k1", 16): [3222.4, 2896.2, 3326.5],
            ("baseline", 32): [5468.7, 5335.1, 5516.4],
            ("spec-k1", 32): [5623.0, 5620.6, 5791.8],
        }
    )
    k1 = [("baseline", 0), ("spec-k1", 1)]
    assert [judge.proposed_schedule(judge.per_level(g_, k1, [16, 32])) for g_ in (first, second)] == [
        [[1, schedule.TOP, 1]]
    ] * 2


def test_schedule_boundaries_are_geometric_midpoints_and_equal_neighbours_merge():
    assert schedule.derive([(1, 3), (4, 1), (16, 1), (32, 0)]) == [[1, 2, 3], [3, 22, 1], [23, schedule.TOP, 0]]
    assert schedule.derive([(4, 2), (1, 2)]) == [[1, schedule.TOP, 2]]
    sch = schedule.derive([(1, 2), (4, 1), (16, 0)])
    assert not schedule.structure_problems(sch)
    assert [schedule.k_at(sch, b) for b in (1, 2, 3, 8, 9, 100)] == [2, 2, 1, 1, 0, 0]
    assert schedule.k_at([[1, 2, 2], [5, 8, 0]], 3) == 2  # a gap carries the previous k (as vLLM does)


def test_vllm_structure_rules_for_a_schedule():
    assert schedule.structure_problems([[1, 4, 2], [5, 8, 0]]) == []
    assert "not 1" in schedule.structure_problems([[2, 4, 2]])[0]
    assert any("overlaps" in p for p in schedule.structure_problems([[1, 4, 2], [4, 8, 1]]))
    assert any("negative" in p for p in schedule.structure_problems([[1, 4, -1]]))
    assert any("starts after" in p for p in schedule.structure_problems([[1, 4, 1], [9, 5, 1]]))


def _check(sched, *, nst=2, dp=1, pp=1, runner="v2", platform="cuda", version="0.33.0", method="eagle3"):
    from types import SimpleNamespace

    from ppspec_cli.knowledge.facts import parse_version
    from ppspec_cli.planning.profile import parse_profile

    text = (REPO / "profiles/tiny_cpu_demo.yaml").read_text()
    prof = parse_profile(text)
    prof = prof.model_copy(
        update={
            "drafter": prof.drafter.model_copy(
                update={"schedule": sched, "num_speculative_tokens": nst, "method": method}
            ),
            "topology": prof.topology.model_copy(update={"data_parallel": dp}),
        }
    )
    from ppspec_cli.knowledge import archtable

    r = SimpleNamespace(
        profile=prof,
        version=parse_version(version),
        engine_version=version,
        runner=runner,
        platform=platform,
        pp=pp,
        arch_table=archtable.committed(version),  # the release's runner facts (Dynamic SD on V1)
    )
    return {f.code: f for f in schedule.check(r)}


def test_check_applies_vllms_rules_per_release_runner_and_topology():
    from ppspec_cli.planning import rules

    assert ("schedule", rules.schedule_rule) in rules.RULES  # `check` runs it
    assert _check(None) == {}
    assert set(_check([[1, 2, 2], [3, 4096, 2]])) == set()
    assert _check([[2, 8, 1]])["schedule-invalid"].severity == "error"
    assert _check([[1, 8, 3]], nst=2)["schedule-k-above-max"].severity == "error"
    assert "schedule-dp-disabled" in _check([[1, 8, 1]], dp=2)
    assert "schedule-cudagraph-piecewise" in _check([[1, 8, 1]], runner="v1")
    assert "schedule-cudagraph-piecewise" not in _check([[1, 8, 1]], runner="v1", platform="cpu")
    assert "schedule-release-unverified" in _check([[1, 8, 1]], version="0.29.0")
    assert "schedule-release-unverified" not in _check([[1, 8, 1]], version="0.30.0")
    assert "schedule-method-disabled" in _check([[1, 8, 1]], runner="v1", version="0.33.0", method="dspark")
    assert "schedule-method-disabled" not in _check([[1, 8, 1]], runner="v1", version="0.32.0", method="dspark")
    assert "schedule-pp-unverified" in _check([[1, 8, 1]], pp=2)
    both = _check([[1, 2, 2], [3, 64, 0]])
    assert both["schedule-boundary-thrash"].severity == "info" and "schedule-zero-k-cost" in both


def test_launch_passes_the_schedule_to_vllm():
    from types import SimpleNamespace

    from ppspec_cli.planning.profile import parse_profile
    from ppspec_cli.running import launch

    prof = parse_profile((REPO / "profiles/tiny_cpu_demo.yaml").read_text())
    prof = prof.model_copy(
        update={
            "drafter": prof.drafter.model_copy(
                update={"schedule": [[1, 2, 2], [3, 8, 0]], "model": None, "method": "mtp"}
            )
        }
    )
    r = SimpleNamespace(profile=prof, plan=None, drafter=None)
    cfg = launch._drafter_launch(r, Path("/tmp")).config
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 2, 2], [3, 8, 0]] and cfg["num_speculative_tokens"] == 2


# -- the recommendation ---------------------------------------------------------------------------


def test_the_profile_is_kept_unless_another_arm_is_significantly_better():
    g = _grid(
        {
            ("baseline", 1): [100, 110],
            ("spec-k1", 1): [108, 112],
            ("spec-k3", 1): [104, 115],
            ("baseline", 4): [300, 310],
            ("spec-k1", 4): [305, 312],
            ("spec-k3", 4): [298, 309],
        }
    )
    ch = judge.choose(g, STATIC, [1, 4], "spec-k3", None)
    assert ch == {"static": "spec-k3", "schedule": False, "moved": False}
    lv = judge.per_level(g, STATIC, [1, 4])
    rec = results.recommendation(lv, ch, ARMS, 3, judge.proposed_schedule(lv))
    assert rec["profile_change"] == "keep drafter.num_speculative_tokens: 3" and rec["changes_profile"] is False
    assert rec["crossover_concurrency"] is None and rec["schedule"] and rec["schedule_measured"] is False


def test_an_arm_that_dominates_replaces_the_profile_and_the_baseline_can_win():
    g = _grid(
        {
            ("baseline", 1): [100, 101],
            ("spec-k1", 1): [130, 131],
            ("spec-k3", 1): [110, 111],
            ("baseline", 4): [300, 301],
            ("spec-k1", 4): [301, 302],
            ("spec-k3", 4): [250, 251],
        }
    )
    assert judge.choose(g, STATIC, [1, 4], "spec-k3", None)["static"] == "spec-k1"
    slow = _grid({("baseline", 1): [100, 101], ("spec-k1", 1): [80, 81], ("spec-k3", 1): [70, 71]})
    ch = judge.choose(slow, STATIC, [1], "spec-k3", None)
    assert ch["static"] == "baseline"
    rec = results.recommendation(judge.per_level(slow, STATIC, [1]), ch, ARMS, 3, None)
    assert "delete the `drafter:` section" in rec["profile_change"] and rec["speculate"] is False


def test_a_schedule_is_recommended_only_when_it_beats_every_static_arm():
    base = {
        ("baseline", 1): [100, 101],
        ("spec-k1", 1): [130, 131],
        ("spec-k3", 1): [150, 151],
        ("baseline", 4): [300, 301],
        ("spec-k1", 4): [330, 331],
        ("spec-k3", 4): [280, 281],
    }
    arms = ARMS + [Arm("tuned", True, 3, None, ((1, 2, 3), (3, 4096, 1)))]
    # it costs 10% against k=3 at c=1 (the dynamic machinery's overhead): it does not beat that arm
    g = _grid({**base, ("tuned", 1): [135, 136], ("tuned", 4): [331, 332]})
    assert judge.choose(g, STATIC, [1, 4], "spec-k3", "tuned")["schedule"] is False
    # only as good as each static arm where that arm is best: beats neither beyond the noise everywhere...
    g = _grid({**base, ("tuned", 1): [150, 152], ("tuned", 4): [329, 332]})
    assert (
        judge.choose(g, STATIC, [1, 4], "spec-k3", "tuned")["schedule"] is True
    )  # ...but each where the other is best
    g = _grid({**base, ("tuned", 1): [160, 161], ("tuned", 4): [350, 352]})
    ch = judge.choose(g, STATIC, [1, 4], "spec-k3", "tuned")
    assert ch["schedule"] is True
    lv = judge.per_level(g, STATIC, [1, 4])
    rec = results.recommendation(lv, ch, arms, 3, None)
    assert (
        rec["configuration"] == "tuned" and rec["schedule"] == [[1, 2, 3], [3, 4096, 1]] and rec["schedule_recommended"]
    )
    assert rec["profile_change"].startswith("drafter.schedule: [[1, 2, 3], [3, 4096, 1]]")
    env = judge.envelope(g, [1, 4], "tuned", "spec-k3", [a.name for a in arms])
    assert env[0]["best_arm"] == "tuned" and env[0]["vs_best"]["verdict"] == judge.SAME
    assert env[1]["vs_profile"]["verdict"] == judge.FASTER and env[1]["vs_profile"]["ratio"]["median"] == pytest.approx(
        351 / 280.5
    )


def test_a_one_range_schedule_against_its_static_twin_exposes_drift():
    g = _grid(
        {("spec-k1", 1): [110, 126], ("tuned", 1): [134, 138], ("spec-k1", 4): [300, 310], ("tuned", 4): [301, 309]}
    )
    w = judge.drift_check(g, [1, 4], [[1, 4096, 1]], STATIC)
    assert len(w) == 1 and w[0].startswith("c=1:") and "spec-k1" in w[0] and "drifted" in w[0]
    assert judge.drift_check(g, [1, 4], [[1, 2, 1], [3, 4096, 0]], STATIC) == []  # two ranges: no twin
    assert judge.drift_check(g, [1, 4], [[1, 4096, 2]], STATIC) == []  # no static arm with k=2


def test_a_drifted_run_recommends_nothing_and_says_why(tmp_path):
    """Issue 43 item 4: the tuned arm serves [[1, 4096, 1]] (static k=1 through the dynamic path) and
    beats spec-k1 beyond the noise: that is the machine drifting, not the schedule. bench.json then
    recommends nothing (no configuration, no profile change, changes_profile false) and `withheld`
    says why; the same grid without the drift recommends as before (spec-k1, the profile's k)."""
    from types import SimpleNamespace

    settings = {
        "concurrency": [1, 4],
        "num_prompts": 8,
        "prompts_per_level": {"1": 8, "4": 16},
        "max_tokens": 16,
        "input_len": 32,
        "seed": 0,
        "repeat": 2,
        "parity_prompts": 8,
        "parity_source_prompts": 8,
    }
    prof = SimpleNamespace(name="demo", drafter=SimpleNamespace(num_speculative_tokens=1, schedule=None))
    tuned = Arm("tuned", True, 1, None, ((1, 4096, 1),))

    def assemble(tuned_tps: dict[int, float]) -> dict:
        out = tmp_path / str(tuned_tps[1])
        arms = [Arm("baseline", False, None), Arm("spec-k1", True, 1), tuned]
        tps = {"baseline": {1: 100.0, 4: 300.0}, "spec-k1": {1: 120.0, 4: 330.0}, "tuned": tuned_tps}
        for a in arms:
            for c in (1, 4):
                for r in range(2):
                    rec = _run(a.name, c, tps[a.name][c] * (1 + 0.005 * r), k=a.num_speculative_tokens, r=r)
                    rec.update(
                        num_prompts=settings["prompts_per_level"][str(c)],
                        schedule=a.schedule_list(),
                        load_generator="vllm bench serve",
                    )
                    (out / "arms" / a.name).mkdir(parents=True, exist_ok=True)
                    safeio.write_text(out / "arms" / a.name / results.record_name(c, r), json.dumps(rec))
        b = Session("p.yaml", prof, arms, settings, out, {"served": True})
        return b.assemble()

    doc = assemble({1: 140.0, 4: 380.0})  # 1.17x and 1.15x of spec-k1, which serves the same k
    rec = doc["recommendation"]
    assert any("drifted" in w for w in doc["warnings"])
    assert rec["configuration"] is None and rec["profile_change"] is None and rec["changes_profile"] is False
    assert rec["withheld"] and "drifted" in rec["withheld"] and "no recommendation" in rec["summary"]
    assert rec["schedule_recommended"] is False and all("envelope" not in lv for lv in doc["levels"])
    lines = report.verdict_lines(doc)
    assert "profile change: none from this run, which drifted: rerun bench on a quieter machine" in lines
    # the same run without the drift: the schedule is recommended, as before
    steady = assemble({1: 120.2, 4: 330.5})
    assert steady["recommendation"]["withheld"] is None and not any("drifted" in w for w in steady["warnings"])
    assert steady["recommendation"]["configuration"] == "spec-k1"


# -- runs, identity, parity -----------------------------------------------------------------------


def test_a_run_keeps_every_sample_next_to_the_median():
    recs = [
        _run("spec-k1", 4, 100, tpot=10, k=1, r=0),
        _run("spec-k1", 4, 130, tpot=8, k=1, r=1),
        _run("spec-k1", 4, 120, tpot=9, k=1, r=2),
    ]
    a = results.aggregate(recs)
    assert a["output_tokens_per_s"] == 120 and a["tpot_ms"]["mean"] == 9 and a["repeats"] == 3
    assert [x["output_tokens_per_s"] for x in a["samples"]] == [100, 130, 120] and [
        x["repeat"] for x in a["samples"]
    ] == [0, 1, 2]
    assert a["spread"] == {"median": 120, "min": 100, "max": 130, "n": 3}
    assert "generated_texts" not in a and a["completed"] == 24


def test_results_from_another_host_or_version_are_named():
    ident = {"host": "h", "ppspec_version": "1", "vllm_version": "0.32.0"}
    recs = [
        _run("baseline", 1, 1),
        {**_run("spec-k1", 1, 1), "host": "other", "run_id": "x"},
        {**_run("spec-k1", 4, 1), "host": "other", "run_id": "x"},
    ]
    lines = results.foreign(recs, ident)
    assert len(lines) == 1 and "'other'" in lines[0] and "run x" in lines[0]
    assert results.foreign([_run("baseline", 1, 1)], ident) == []


def test_resume_refuses_foreign_results_unless_allowed(tmp_path):
    from ppspec_cli.verify.bench.session import Session

    settings = {
        "concurrency": [1],
        "num_prompts": 8,
        "prompts_per_level": {"1": 8},
        "max_tokens": 16,
        "input_len": 32,
        "seed": 0,
        "repeat": 1,
        "parity_prompts": 8,
        "parity_source_prompts": 8,
    }
    ident = {"run_id": "new", "host": "h", "ppspec_version": "1", "vllm_version": "0.33.0", "served": True}
    b = Session("p.yaml", None, ARMS[:2], settings, tmp_path, ident)
    d = b.arm_dir(ARMS[0])
    d.mkdir(parents=True)
    safeio.write_text(d / "c1-r0.json", json.dumps(_run("baseline", 1, 100)))
    with pytest.raises(PpspecError, match="another machine or version") as e:
        b.check_kept(allow_mixed=False)
    assert e.value.exit_code == 2 and "--allow-mixed" in e.value.fix
    b.check_kept(allow_mixed=True)
    assert "vllm_version '0.32.0'" in b.warnings[0]


def _par(arm, ids):
    return {"arm": arm, "outputs": [{"index": i, "token_ids": t, "text": "x"} for i, t in enumerate(ids)]}


def test_parity_compares_token_ids_and_names_the_first_difference():
    runs = _runs({1: (1, 1, 1)})
    docs = {
        "baseline": _par("baseline", [[1, 2, 3], [4, 5, 6]]),
        "spec-k1": _par("spec-k1", [[1, 2, 3], [4, 5, 6]]),
        "spec-k3": _par("spec-k3", [[1, 2, 3], [4, 9, 6]]),
    }
    p = results.parity(ARMS, docs, runs)
    assert p["identical"] is False
    k1, k3 = p["checks"]
    assert k1["identical"] and k1["pass"] == "tokens"
    assert not k3["identical"] and k3["first_difference"] == {"prompt": 1, "token": 1}
    docs["spec-k3"] = docs["spec-k1"]
    assert results.parity(ARMS, docs, runs)["identical"] is True


def test_parity_also_compares_the_load_runs_and_says_when_nothing_was_compared():
    runs = _runs({1: (1, 1, 1)})
    runs[1]["generated_texts"] = ["a", "DIFFERENT"]
    same = _par("x", [[1]])
    p = results.parity(ARMS, {"baseline": same, "spec-k1": same, "spec-k3": same}, runs)
    assert p["identical"] is False and p["status"] == "differs"
    assert [x["first_difference"] for x in p["load_runs"] if not x["identical"]] == [1]
    p = results.parity(ARMS, {"baseline": same, "spec-k1": same, "spec-k3": None}, _runs({1: (1, 1, 1)}))
    assert p["identical"] is False and p["missing"] == ["spec-k3"] and p["status"] == "incomplete"
    # interrupted before any speculative arm finished: nothing compared, and the report says so
    p = results.parity(ARMS, {"baseline": same, "spec-k1": None, "spec-k3": None}, [])
    assert p["status"] == "not compared" and p["identical"] is False
    line = report._parity_line(p)
    assert "not compared" in line and "NOT identical" not in line


def test_int_lists():
    assert results.parse_int_list("4,1, 16,4", "--concurrency", 1, 64) == [1, 4, 16]
    for bad in ("", "0", "1,x", "-1", "1e3", "65"):
        with pytest.raises(PpspecError):
            results.parse_int_list(bad, "--concurrency", 1, 64)


def test_resume_keeps_only_runs_measured_with_the_same_settings(tmp_path):
    from ppspec_cli.verify.bench.session import Session, parity_key

    settings = {
        "concurrency": [1, 4],
        "num_prompts": 8,
        "prompts_per_level": {"1": 8, "4": 16},
        "max_tokens": 16,
        "input_len": 32,
        "seed": 0,
        "repeat": 2,
        "parity_prompts": 8,
        "parity_source_prompts": 8,
    }
    b = Session("p.yaml", None, ARMS[:2], settings, tmp_path, {"served": True})
    d = b.arm_dir(ARMS[0])
    d.mkdir(parents=True)
    assert results.prompts_at(8, 4) == 16 and results.prompts_at(64, 4) == 64  # at least 4 requests per slot
    safeio.write_text(d / "c1-r0.json", json.dumps(_run("baseline", 1, 100)))
    safeio.write_text(d / "c4-r0.json", json.dumps({**_run("baseline", 4, 100), "max_tokens": 99}))  # other settings
    safeio.write_text(d / "c4-r1.json", json.dumps(_run("baseline", 4, 100, r=1)))
    assert b.todo(ARMS[0]) == ([(4, 0), (1, 1)], True)  # repeats outermost
    safeio.write_text(
        d / "parity.json", json.dumps({"arm": "baseline", "outputs": [], "settings": parity_key(settings)})
    )
    assert b.todo(ARMS[0]) == ([(4, 0), (1, 1)], False)
    assert b.todo(ARMS[1]) == ([(1, 0), (4, 0), (1, 1), (4, 1)], True)
    # the tuned arm's results count only for the schedule they were measured with
    tuned = Arm("tuned", True, 2, None, ((1, 2, 2), (3, 4096, 0)))
    td = b.arm_dir(tuned)
    td.mkdir(parents=True)
    safeio.write_text(
        td / "c1-r0.json", json.dumps({**_run("tuned", 1, 100, k=2), "schedule": [[1, 2, 2], [3, 4096, 0]]})
    )
    safeio.write_text(td / "c4-r0.json", json.dumps({**_run("tuned", 4, 100, k=2), "schedule": [[1, 4096, 2]]}))
    assert b.todo(tuned)[0] == [(4, 0), (1, 1), (4, 1)]
    (d / "c1-r0.json").write_text("{not json")
    with pytest.raises(
        PpspecError
    ) as e:  # issue 32: a saved record that is not of its shape is refused, the file named
        b.todo(ARMS[0])
    assert e.value.where.endswith("c1-r0.json")


def test_sessions_interleave_the_arms_round_by_round_and_resume_keeps_finished_runs(tmp_path):
    """--sessions per-repeat (the default): round r serves every arm once for repeat r, so a drift of
    the machine between engine sessions lands in every arm's spread; each arm's parity pass joins
    its first session; a resume plans only what is missing. per-arm: one session per arm."""
    from ppspec_cli.verify.bench.session import PER_ARM, Session

    settings = {
        "concurrency": [1, 4],
        "num_prompts": 8,
        "prompts_per_level": {"1": 8, "4": 16},
        "max_tokens": 16,
        "input_len": 32,
        "seed": 0,
        "repeat": 3,
        "parity_prompts": 8,
        "parity_source_prompts": 8,
    }
    b = Session("p.yaml", None, ARMS[:2], settings, tmp_path, {"served": True})

    def plan(bench):
        return [(a.name, runs, par) for a, runs, par in bench.sessions(ARMS[:2])]

    assert plan(b) == [
        ("baseline", [(1, 0), (4, 0)], True),
        ("spec-k1", [(1, 0), (4, 0)], True),
        ("baseline", [(1, 1), (4, 1)], False),
        ("spec-k1", [(1, 1), (4, 1)], False),
        ("baseline", [(1, 2), (4, 2)], False),
        ("spec-k1", [(1, 2), (4, 2)], False),
    ]
    d = b.arm_dir(ARMS[0])
    d.mkdir(parents=True)
    for c in (1, 4):  # the baseline's first round is done, and one run of its second
        safeio.write_text(d / f"c{c}-r0.json", json.dumps(_run("baseline", c, 100)))
    safeio.write_text(d / "c1-r1.json", json.dumps(_run("baseline", 1, 100, r=1)))
    assert plan(b) == [
        ("spec-k1", [(1, 0), (4, 0)], True),
        ("baseline", [(4, 1)], True),
        ("spec-k1", [(1, 1), (4, 1)], False),
        ("baseline", [(1, 2), (4, 2)], False),
        ("spec-k1", [(1, 2), (4, 2)], False),
    ]
    for r in (1, 2):  # every run of the baseline kept, its parity pass not: a session of its own
        for c in (1, 4):
            safeio.write_text(d / f"c{c}-r{r}.json", json.dumps(_run("baseline", c, 100, r=r)))
    safeio.write_text(d / "c4-r1.json", json.dumps(_run("baseline", 4, 100, r=1)))
    assert plan(b)[-1] == ("baseline", [], True) and [x[0] for x in plan(b)] == ["spec-k1"] * 3 + ["baseline"]
    per_arm = Session("p.yaml", None, ARMS[:2], {**settings, "sessions": PER_ARM}, tmp_path, {"served": True})
    assert plan(per_arm) == [
        ("baseline", [], True),
        ("spec-k1", [(1, 0), (4, 0), (1, 1), (4, 1), (1, 2), (4, 2)], True),
    ]


def _doc(runs_by_rep: list[dict]):
    groups: dict = {}
    for r in runs_by_rep:
        groups.setdefault((r["arm"], r["concurrency"]), []).append(r)
    runs = [results.aggregate(v) for v in groups.values()]
    grid = {k: [x["output_tokens_per_s"] for x in v] for k, v in groups.items()}
    lv = judge.per_level(grid, STATIC, [1, 4])
    ch = judge.choose(grid, STATIC, [1, 4], "spec-k1", None)
    for x, env in zip(lv, judge.envelope(grid, [1, 4], ch["static"], "spec-k1", [a.name for a in ARMS])):
        x["envelope"] = env
    return {
        "profile": "demo",
        "settings": {
            "concurrency": [1, 4],
            "num_prompts": 8,
            "prompts_per_level": {"1": 8, "4": 16},
            "max_tokens": 16,
            "input_len": 32,
            "seed": 0,
            "repeat": 2,
        },
        "arms": [a.to_json() for a in ARMS],
        "runs": runs,
        "levels": lv,
        "parity": {"identical": True, "status": "identical", "checks": [], "load_runs": [], "missing": []},
        "recommendation": results.recommendation(lv, ch, ARMS, 1, judge.proposed_schedule(lv)),
        "warnings": [],
        "load_generator": "vllm bench serve",
        "run_id": "abc",
        "host": "h",
        "device": "cpu (x86_64, 2 cores)",
        "ppspec_version": "1",
        "vllm_version": "0.32.0",
    }


def _two_reps(table):
    out = []
    for r, scale in ((0, 1.0), (1, 1.01)):
        for x in _runs({c: tuple(v * scale for v in vals) for c, vals in table.items()}):
            out.append({**x, "repeat": r})
    return out


def test_report_fits_80_columns_and_plots_start_at_zero(tmp_path, monkeypatch):
    from rich.console import Console

    doc = _doc(_two_reps({1: (100, 130, 150), 4: (300, 250, 200)}))
    con = Console(width=80, record=True, color_system=None)
    report.print_report(doc, con)
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "spec-k3" in text and "1.50x" in text
    assert (
        "c=1: speculation vs none: faster, 1.50x (1.49-1.51) (spec-k3)" in text
    )  # the best arm's median over the baseline's, with its spread
    md = report.markdown(doc)
    from ppspec_cli.io.markdown import text as md_text

    assert (
        f"| 1 | spec-k3 | 2 | {md_text('150.8 (150.0-151.5)')} |" in md
        and md_text("10.00 / <0.01 / 10.00") in md
        and "/ 0.00 /" not in md
    )
    pytest.importorskip("matplotlib", reason="the `bench` extra (matplotlib) draws the plots")
    import matplotlib.axes

    bottoms = []
    orig = matplotlib.axes.Axes.set_ylim

    def set_ylim(self, *a, **kw):
        bottoms.append(kw.get("bottom", a[0] if a else None))
        return orig(self, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylim", set_ylim)
    made, why = report.plots(doc, tmp_path)
    assert why is None and sorted(p.name for p in made) == ["bench.png", "tokens_per_s.png", "tpot.png"]
    assert bottoms.count(0) == 4  # every panel's y-axis starts at zero (two in bench.png, one in each other plot)
    for p in made:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_json_schema_is_what_docs_bench_md_documents():
    """The keys docs/bench.md documents for bench.json, per level, per run and in the recommendation."""
    doc = _doc(_two_reps({1: (100, 130, 150), 4: (300, 250, 200)}))
    text = (REPO / "docs" / "bench.md").read_text()
    for key in (
        "run_id",
        "host",
        "device",
        "ppspec_version",
        "vllm_version",
        "levels",
        "runs",
        "recommendation",
        "parity",
        "settings",
    ):
        assert key in doc and f"`{key}`" in text, key
    lv = doc["levels"][0]
    for key in ("verdict", "speedup", "best_speculative_arm", "schedule_k", "envelope", "arms"):
        assert key in lv and f"`{key}`" in text, key
    for key in ("samples", "spread", "repeats"):
        assert key in doc["runs"][0] and f"`{key}`" in text, key
    for key in (
        "configuration",
        "profile_change",
        "changes_profile",
        "schedule",
        "schedule_recommended",
        "schedule_measured",
    ):
        assert key in doc["recommendation"] and f"`{key}`" in text, key
    json.dumps(doc)  # all of it is JSON


def test_write_bytes_writes_binary_and_refuses_what_write_text_refuses(tmp_path):
    p = tmp_path / "x.png"
    safeio.write_bytes(p, b"\x89PNG\x00\xff")
    assert p.read_bytes() == b"\x89PNG\x00\xff"
    with pytest.raises(PpspecError, match="a directory"):
        safeio.write_bytes(tmp_path, b"x")
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".ppspec-tmp")]


def _cli(*args, cwd=REPO):
    import os

    return subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.slow
def test_bench_beside_a_running_serve_refuses_before_writing_anything(tmp_path, monkeypatch):
    """Issue 43 item 2: bench serves the profile itself, so beside a `ppspec serve` of the same
    profile (its run directory locked; here held by this process as serve holds it) it refuses with
    one message (exit 1) whose fix names a real path (stop that server, or --endpoint /
    --baseline-endpoint), before it writes or removes anything: no results directory, no report,
    no --resume hint, earlier results untouched. A taken port is refused the same way."""
    import socket

    import inprocess
    from enginehelpers import free_port, write_profile

    from ppspec_cli.running.serve.rundir import default_run_dir, lock_run_dir

    cache = tmp_path / "cache"
    monkeypatch.setenv("PPSPEC_CACHE", str(cache))
    port = free_port()
    prof = write_profile("profiles/tiny_cpu_demo.yaml", tmp_path / "demo.yaml", **{"server.port": port})
    run_dir = default_run_dir("tiny-cpu-demo")
    run_dir.mkdir(parents=True, exist_ok=True)
    held = lock_run_dir(run_dir)
    kept = tmp_path / "earlier"
    (kept / "arms" / "baseline").mkdir(parents=True)
    safeio.write_text(kept / "arms" / "baseline" / "c1-r0.json", "{}")
    try:
        for out in ([], ["--out", str(kept)]):
            r = inprocess.run("bench", str(prof), *out, env={"PPSPEC_CACHE": str(cache)})
            assert r.returncode == 1, r.stderr
            assert r.stderr.count("error:") == 1 and "is serving profile tiny-cpu-demo" in r.stderr, r.stderr
            assert "stop that server first" in r.stderr and "--endpoint URL --baseline-endpoint URL" in r.stderr
            assert "--run-dir" not in r.stderr and "--resume" not in r.stderr and "wrote" not in r.stderr
        assert not (cache / "runs" / "tiny-cpu-demo-bench").exists()
        assert (kept / "arms" / "baseline" / "c1-r0.json").read_text() == "{}"  # not removed
    finally:
        held.close()
    with socket.socket() as s:  # something else listens on the profile's port
        s.bind(("127.0.0.1", port))
        s.listen()
        r = inprocess.run("bench", str(prof), env={"PPSPEC_CACHE": str(cache)})
    assert r.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in r.stderr, r.stderr
    assert not (cache / "runs" / "tiny-cpu-demo-bench").exists()


def test_usage_errors_exit_2(tmp_path):
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--endpoint", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--baseline-endpoint" in r.stderr
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--concurrency", "1,zero")
    assert r.returncode == 2 and "--concurrency" in r.stderr
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--repeat", "0")
    assert r.returncode == 2 and "--repeat must be in 1..20" in r.stderr
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--sessions", "each")
    assert r.returncode == 2 and "--sessions must be per-repeat or per-arm" in r.stderr
    nodrafter = tmp_path / "p.yaml"
    import yaml

    data = yaml.safe_load((REPO / "profiles/tiny_cpu_demo.yaml").read_text())
    data.pop("drafter")
    nodrafter.write_text(yaml.safe_dump(data))
    r = _cli("bench", str(nodrafter), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "names no drafter" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture
def fake_servers(tmp_path):
    """Two stand-in servers (tests/fake_openai.py): the speculative one and the baseline."""
    from enginehelpers import free_port

    procs = []

    def start(*flags):
        port = free_port()
        p = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "fake_openai.py"), str(port), *flags],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_endpoint_mode_measures_two_running_servers_and_parity_fails_on_a_divergence(tmp_path, fake_servers):
    base = fake_servers()
    args = [
        "bench",
        "profiles/tiny_cpu_demo.yaml",
        "--concurrency",
        "1,2",
        "--num-prompts",
        "6",
        "--max-tokens",
        "8",
        "--input-len",
        "16",
        "--json",
        "--baseline-endpoint",
        base,
    ]
    r = _cli(*args, "--endpoint", fake_servers("--spec"), "--out", str(tmp_path / "ok"))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert sorted((x["arm"], x["concurrency"]) for x in doc["runs"]) == [
        ("baseline", 1),
        ("baseline", 2),
        ("spec-k2", 1),
        ("spec-k2", 2),
    ]
    spec = [x for x in doc["runs"] if x["speculation"]]
    # the stand-in's counters: N/2 drafts of 2 tokens per request, the first accepted; the client's test request stays
    # outside
    n = {1: 6, 2: 8}  # at least --num-prompts, at least 4 per slot
    assert all(
        x["acceptance_length"] == 2.0
        and x["per_position_acceptance"] == [1.0, 0.0]
        and x["spec_decode"]["drafts"] == n[x["concurrency"]] * 4
        for x in spec
    )
    assert all(
        x["output_tokens"] == n[x["concurrency"]] * 8
        and x["completed"] == 2 * n[x["concurrency"]]
        and len(x["samples"]) == 2
        for x in doc["runs"]
    )
    assert doc["parity"]["identical"] is True and doc["parity"]["checks"][0]["prompts"] == 6
    assert doc["recommendation"]["profile_change"] and "the schedule is proposed, not measured" in " ".join(
        doc["warnings"]
    )
    assert [a["name"] for a in doc["arms"]] == ["baseline", "spec-k2"] and doc["recommendation"]["schedule"][0][0] == 1
    assert all(lv["verdict"] in ("faster", "slower", "no significant difference") for lv in doc["levels"])
    assert (tmp_path / "ok" / "report.md").is_file() and (
        tmp_path / "ok" / "arms" / "spec-k2" / "c2-r1.vllm.json"
    ).is_file()
    # one load generator for both arms (issue 43: vLLM's client imported once per run, not per session)
    log = (tmp_path / "ok" / "loadgen.log").read_text()
    assert log.count("==== load generator ") == 1 and log.count("==== job: arm ") == 4, log[
        -2000:
    ]  # 2 arms x 2 repeats

    r = _cli(*args, "--endpoint", fake_servers("--spec", "--diverge"), "--out", str(tmp_path / "bad"))
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["parity"]["identical"] is False
    diff = doc["parity"]["checks"][0]["first_difference"]
    assert diff["token"] == 3 and doc["parity"]["checks"][0]["pass"] == "tokens"
    assert "parity" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ctrl_c_stops_the_load_generator_and_keeps_the_report(tmp_path, fake_servers):
    import os
    import signal
    import time

    from enginehelpers import alive, descendants

    out = tmp_path / "out"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ppspec_cli.cli",
            "bench",
            "profiles/tiny_cpu_demo.yaml",
            "--concurrency",
            "1",
            "--num-prompts",
            "2",
            "--max-tokens",
            "4",
            "--endpoint",
            fake_servers("--spec"),
            "--baseline-endpoint",
            fake_servers(),
            "--out",
            str(out),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen |= descendants(p.pid)
        if seen:  # the load generator (importing vLLM)
            time.sleep(1)
            break
        time.sleep(0.1)
    assert seen, "bench started no load generator"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "--resume" in err and "Traceback" not in err
    assert [pid for pid in seen if alive(pid)] == []
    doc = json.loads((out / "bench.json").read_text())
    assert doc["complete"] is False and doc["runs"] == []


@pytest.mark.slow
def test_a_dead_endpoint_is_one_clear_error_and_the_finished_levels_are_kept(tmp_path, fake_servers):
    """Issue 29 item 3: a measurement that fails (here the speculative server is not there) ends with
    one error and the documented exit code, not AttributeError/exit 3; the baseline's levels stay."""
    from enginehelpers import free_port

    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{free_port()}"
    r = _cli(
        "bench",
        "profiles/tiny_cpu_demo.yaml",
        "--concurrency",
        "1",
        "--num-prompts",
        "2",
        "--max-tokens",
        "4",
        "--input-len",
        "16",
        "--endpoint",
        dead,
        "--baseline-endpoint",
        fake_servers(),
        "--out",
        str(out),
        "--json",
    )
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr and "unexpected" not in r.stderr
    assert r.stderr.count("error:") >= 1 and dead.split("//")[1] in r.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert [(x["arm"], x["concurrency"]) for x in doc["runs"]] == [("baseline", 1)]
    assert doc["complete"] is False
