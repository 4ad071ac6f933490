"""Gates, synthetic-acceptance detection and reports for `ppspec verify` (no server needed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from rich.console import Console

from ppspec_cli.errors import PpspecError
from ppspec_cli.verify import gates as g
from ppspec_cli.verify.report import Report, load_report, render_table, save_report

FIX = Path(__file__).parent / "fixtures" / "metrics"


def _report(
    mal: float | None = 2.0,
    rate: float | None = 0.5,
    *,
    configured=True,
    outputs=None,
    task=(18, 20),
    sha="abc",
    synthetic=False,
) -> dict:
    outputs = (
        outputs if outputs is not None else [{"id": "g01", "text": "hello"}, {"id": "a01", "text": "The answer is 13."}]
    )
    status = "ok" if mal is not None else ("no drafts" if configured else "not configured")
    return Report(
        endpoint="http://127.0.0.1:8000",
        model="m",
        prompt_set={"name": "ppspec-verify", "version": "1", "sha256": sha},
        settings={"max_tokens": 64, "num_prompts": len(outputs), "seed": 0},
        speculative={"configured": configured, "synthetic_acceptance": synthetic},
        counters_delta={},
        spec_decode={
            "configured": configured,
            "status": status,
            "drafts": 100 if mal else 0,
            "draft_tokens": 300 if mal else 0,
            "accepted_tokens": int(round(((mal or 1) - 1) * 100)),
            "mean_acceptance_length": mal,
            "acceptance_rate": rate,
        },
        throughput={"output_tokens": 10, "wall_time_s": 1.0},
        outputs=outputs,
        task_score={"correct": task[0], "total": task[1], "score": task[0] / task[1]} if task else None,
    ).to_dict()


# ---------------------------------------------------------------------------------------------
# Synthetic acceptance


@pytest.mark.parametrize(
    "cfg,expected",
    [
        (None, False),
        ({}, False),
        ({"method": "eagle3", "num_speculative_tokens": 3}, False),
        (
            {
                "rejection_sample_method": "standard",
                "synthetic_acceptance_rates": None,
                "synthetic_acceptance_length": None,
            },
            False,
        ),
        ({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}, True),
        ({"rejection_sample_method": "SYNTHETIC"}, True),
        ({"synthetic_acceptance_rates": [0.7, 0.5]}, True),
        ({"synthetic-acceptance-length": 3.0}, True),
        ({"synthetic_acceptance_rate": 0.6}, True),  # the scalar spelling of other versions / forks
    ],
)
def test_synthetic_acceptance_configured(cfg, expected):
    assert g.synthetic_acceptance_configured(cfg) is expected


def test_recorded_served_config_is_not_synthetic():
    cfg = json.loads((FIX / "vllm_cpu_server_info_speculative_config.json").read_text())
    assert cfg["rejection_sample_method"] == "standard"
    assert g.synthetic_acceptance_configured(cfg) is False
    assert g.synthetic_acceptance_configured(dict(cfg, rejection_sample_method="synthetic")) is True


def _installed_speculative_config_source() -> tuple[set[str], tuple[str, ...]]:
    """Field names of SpeculativeConfig and the rejection methods, read from the installed vLLM source.

    Read with ast rather than imported: importing vllm pulls in torch (~30 s on 2 cores).
    """
    import ast
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    src = Path(list(spec.submodule_search_locations)[0]) / "config" / "speculative.py"
    assert src.is_file(), f"{src} moved: find SpeculativeConfig in the installed vLLM and update this test"
    tree = ast.parse(src.read_text(encoding="utf-8"))
    fields: set[str] = set()
    methods: tuple[str, ...] = ()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets.append(node.target.id)
        if "RejectionSampleMethod" in targets and isinstance(node.value, ast.Subscript):
            sl = node.value.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            methods = tuple(e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return fields, methods


@pytest.mark.vllm
def test_synthetic_fields_match_installed_vllm():
    """The field names we look for are the ones the installed vLLM's SpeculativeConfig has."""
    fields, methods = _installed_speculative_config_source()
    assert "rejection_sample_method" in fields and "num_speculative_tokens" in fields
    synthetic_fields = {f for f in fields if "synthetic" in f}
    assert synthetic_fields, "SpeculativeConfig has no synthetic-acceptance field any more: revisit gates.py"
    for f in synthetic_fields:
        value = [0.5] if "rates" in f else 0.5
        assert g.synthetic_acceptance_configured({f: value}), f
    assert "synthetic" in methods
    for m in methods:
        assert g.synthetic_acceptance_configured({"rejection_sample_method": m}) is (m == "synthetic")


def test_speculative_config_from_engine_dict_forms():
    assert g.speculative_config_from_engine(None) is None
    assert g.speculative_config_from_engine({"max-model-len": 4096}) is None
    assert g.speculative_config_from_engine({"speculative-config": {"method": "eagle3"}}) == {"method": "eagle3"}
    assert g.speculative_config_from_engine({"speculative_config": '{"rejection_sample_method": "synthetic"}'}) == {
        "rejection_sample_method": "synthetic"
    }
    dotted = g.speculative_config_from_engine({"speculative-config.rejection_sample_method": "synthetic"})
    assert g.synthetic_acceptance_configured(dotted)
    with pytest.raises(PpspecError, match="not (valid )?JSON"):
        g.speculative_config_from_engine({"speculative-config": "{oops"})


def test_gates_refused_on_a_synthetic_report():
    r = _report(synthetic=True)
    with pytest.raises(PpspecError, match="synthetic"):
        g.evaluate_gates(r, ["drafter"])
    assert g.evaluate_gates(r, []) == []


# ---------------------------------------------------------------------------------------------
# Selection


def test_default_gates_follow_the_inputs():
    assert g.resolve_gates(None, have_baseline=False, have_reference=False, speculative=False) == []
    assert g.resolve_gates(None, have_baseline=False, have_reference=False, speculative=True) == ["drafter"]
    assert g.resolve_gates(None, have_baseline=True, have_reference=True, speculative=True) == [
        "acceptance",
        "drafter",
        "output",
        "task",
    ]


def test_explicit_gates():
    assert g.resolve_gates(["drafter,task", "output"], have_baseline=False, have_reference=True, speculative=True) == [
        "drafter",
        "task",
        "output",
    ]
    assert g.resolve_gates(["none"], have_baseline=True, have_reference=True, speculative=True) == []
    assert g.resolve_gates(["all"], have_baseline=True, have_reference=True, speculative=True) == list(g.GATE_NAMES)
    with pytest.raises(PpspecError, match="unknown gate"):
        g.resolve_gates(["speed"], have_baseline=True, have_reference=True, speculative=True)
    with pytest.raises(PpspecError, match="needs a baseline") as ei:
        g.resolve_gates(["acceptance"], have_baseline=False, have_reference=True, speculative=True)
    assert "--baseline" in ei.value.fix
    with pytest.raises(PpspecError, match="needs a reference") as ei:
        g.resolve_gates(["output"], have_baseline=True, have_reference=False, speculative=True)
    assert "--reference" in ei.value.fix


# ---------------------------------------------------------------------------------------------
# The gates


def test_acceptance_parity_pass_fail_and_ratio():
    base = _report(2.0)
    r = g.gate_acceptance_parity(_report(1.95), base)
    assert r.passed and r.threshold == pytest.approx(1.9)
    r = g.gate_acceptance_parity(_report(1.85), base)
    assert not r.passed and "1.850 < 0.95 x baseline 2.000" in r.detail
    assert g.gate_acceptance_parity(_report(1.85), base, ratio=0.9).passed
    assert r.line().startswith("FAIL  acceptance parity:")


def test_doctored_baseline_makes_parity_fail():
    cur = _report(2.0)
    base = copy.deepcopy(cur)
    assert g.gate_acceptance_parity(cur, base).passed
    base["spec_decode"]["mean_acceptance_length"] = 3.0
    assert not g.gate_acceptance_parity(cur, base).passed


def test_acceptance_parity_refusals():
    with pytest.raises(PpspecError, match="different prompt set"):
        g.gate_acceptance_parity(_report(2.0), _report(2.0, sha="zzz"))
    with pytest.raises(PpspecError, match="no mean acceptance length"):
        g.gate_acceptance_parity(_report(2.0), _report(None, None))
    with pytest.raises(PpspecError, match="synthetic"):
        g.gate_acceptance_parity(_report(2.0), _report(2.0, synthetic=True))
    with pytest.raises(PpspecError, match="parity-ratio"):
        g.gate_acceptance_parity(_report(2.0), _report(2.0), ratio=0)
    r = g.gate_acceptance_parity(_report(None, None), _report(2.0))
    assert not r.passed and "no drafts" in r.detail


def test_drafter_sanity():
    assert g.gate_drafter_sanity(_report(2.0, 0.3)).passed
    r = g.gate_drafter_sanity(_report(1.01, 0.01))
    assert not r.passed and "0.010 < floor 0.05" in r.detail
    assert g.gate_drafter_sanity(_report(1.01, 0.01), min_acceptance=0.005).passed
    r = g.gate_drafter_sanity(_report(None, None))
    assert not r.passed and "no drafts" in r.detail
    r = g.gate_drafter_sanity(_report(None, None, configured=False))
    assert not r.passed and "not configured" in r.detail
    with pytest.raises(PpspecError):
        g.gate_drafter_sanity(_report(), min_acceptance=1.5)


def test_output_parity():
    ref = _report(None, None, configured=False)
    assert g.gate_output_parity(_report(), ref).passed
    changed = _report(outputs=[{"id": "g01", "text": "hello"}, {"id": "a01", "text": "The answer is 14."}])
    r = g.gate_output_parity(changed, ref)
    assert not r.passed
    assert "1 of 2 outputs differ; first a01 at character 15" in r.detail
    assert "bf16" in r.detail
    with pytest.raises(PpspecError, match="other prompts"):
        g.gate_output_parity(_report(outputs=[{"id": "g02", "text": "x"}, {"id": "a01", "text": "y"}]), ref)


def test_task_score():
    ref = _report(task=(18, 20))
    assert g.gate_task_score(_report(task=(18, 20)), ref).passed
    assert g.gate_task_score(_report(task=(17, 20)), ref).passed  # within 0.05
    r = g.gate_task_score(_report(task=(16, 20)), ref)
    assert not r.passed and "16/20" in r.detail
    assert g.gate_task_score(_report(task=(16, 20)), ref, tolerance=0.1).passed
    with pytest.raises(PpspecError, match="no arithmetic"):
        g.gate_task_score(_report(task=None), ref)


def test_evaluate_gates_order_and_results():
    cur = _report(1.5, 0.2)
    res = g.evaluate_gates(
        cur, ["task", "drafter", "acceptance"], baseline=_report(2.0), reference=_report(task=(18, 20))
    )
    assert [r.name for r in res] == ["acceptance", "drafter", "task"]
    assert [r.passed for r in res] == [False, True, True]


# ---------------------------------------------------------------------------------------------
# Reports


def test_report_round_trip_and_render(tmp_path):
    rep = Report.from_dict(_report(), "mem")
    rep.gates = [g.gate_drafter_sanity(rep.to_dict()).to_dict(), g.GateResult("acceptance", False, "x").to_dict()]
    assert rep.passed is False
    p = save_report(rep, tmp_path / "r.json")
    doc = load_report(p)
    assert doc["passed"] is False and doc["spec_decode"]["mean_acceptance_length"] == 2.0
    con = Console(record=True, width=120)
    render_table(doc, con)
    text = con.export_text()
    assert "mean acceptance length" in text and "2.000" in text
    assert "PASS  drafter sanity" in text and "FAIL  acceptance parity" in text


def test_render_no_drafts_and_not_configured():
    con = Console(record=True, width=120)
    render_table(_report(None, None), con)
    assert "no drafts (acceptance undefined)" in con.export_text()
    con = Console(record=True, width=120)
    render_table(_report(None, None, configured=False), con)
    assert "not configured" in con.export_text()


def test_load_report_errors(tmp_path):
    with pytest.raises(PpspecError, match="not found"):
        load_report(tmp_path / "missing.json", "baseline")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PpspecError, match="not (valid )?JSON"):
        load_report(bad, "baseline")
    bad.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(PpspecError, match="not a ppspec verify report"):
        load_report(bad, "baseline")
    doc = _report()
    del doc["spec_decode"]
    bad.write_text(json.dumps(doc))
    with pytest.raises(PpspecError, match="missing spec_decode"):
        load_report(bad, "reference")
