"""The per-version mirror suite: vLLM's own release-test cases, fed to ppspec.

Each case (tests/mirror/cases/*.yaml) holds an input and the value vLLM's release test (or, marked
`derived: source`, vLLM's function) expects in a given vLLM version; this runner asks ppspec's own
functions the same question for that version and asserts the same answer. tests/test_vllm_mirror.py
feeds the cases of the installed vLLM's version to vLLM itself, which proves the data.
"""

from __future__ import annotations

from typing import Any

import pytest

from mirror.cases import VERSIONS, Case, case_params, load_cases
from ppspec_cli.checkpoint import speculators_view
from ppspec_cli.plan import (
    build_plan,
    default_partition,
    default_taps,
    normalize_taps,
    partition_from_env_string,
    stage_bounds,
    v1_taps_from_config,
    v2_taps_from_config,
)


def test_cases_load_and_cover_every_version():
    """The data parses, and every mirrored release has cases (a typo must not drop a version)."""
    cases = load_cases()
    for v in VERSIONS:
        assert sum(v in c.versions for c in cases) >= 20, v
    assert {c.topic for c in cases} >= {"partition", "taps", "speculators"}


# ---------------------------------------------------------------------------------------------
# partition: vLLM distributed/utils.py::get_pp_indices


@pytest.mark.parametrize(("case", "version"), case_params("partition"))
def test_partition(case: Case, version: str):
    i = case.input
    n, pp = i["num_layers"], i["pp"]
    if "env" in i:
        try:
            ours: Any = [list(b) for b in stage_bounds(partition_from_env_string(i["env"], n, pp))]
        except ValueError:
            ours = "error"
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
            num_layers=i["num_layers"], pp=len(part), layer_partition=part, method="eagle3", runner="v2", taps=tuple(i["taps"]),
            taps_source="mirror", trained=None, overlay=None, hidden_size=8, dtype_bytes=2, n_draft_layers=1,
            draft_numbering="global", drafter_needs_target_embed=True,
        )  # fmt: skip
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
