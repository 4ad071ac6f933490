"""`ppspec plan`: the stage plan of a profile."""

from __future__ import annotations

import json

from ppspec_cli.commands.check import pd_report
from ppspec_cli.commands.common import load, report_json, resolve_profile


def invalid_partition(r) -> list[int] | None:
    """The profile's `topology.layer_partition` when the plan could not use it (vLLM would refuse
    it: the plan fell back to the default split, which is not what the profile asks for)."""
    lp = r.profile.topology.layer_partition
    if lp and r.plan is not None and r.plan.partition_source != "profile":
        return list(lp)
    return None


def with_prediction(r, opts, *, json_out: bool):
    """`--predict`: the prediction's JSON, or print its text (commands/predict_render.py)."""
    from ppspec_cli.commands.predict_render import prediction, render

    pred = prediction(r, opts)
    if json_out:
        return pred.to_json()
    print()
    print(render(pred))
    return None


def run(profile: str, json_out: bool, offline: bool, predict=None) -> int:
    """Print the plan. Exit 0 when a plan of the profile's own split could be built (the findings
    printed with it; `check` gives the launch verdict); 1 when there is none or the profile's
    layer_partition is invalid (no table: the default split is not the profile's)."""
    from ppspec_cli.commands.render import render_plan
    from ppspec_cli.planning.rules import run_rules

    prof = load(profile)
    if prof.disaggregated:
        if predict is not None:
            from ppspec_cli.errors import PpspecError

            raise PpspecError("--predict covers one engine; this profile is disaggregated (`roles:`)", where=profile,
                              fix="predict the decode engine from a profile of its own (its target, drafter and topology)")
        return pd_report(prof, profile, offline, json_out, plan=True)
    r = resolve_profile(prof, profile, offline)
    findings = run_rules(r)
    bad = invalid_partition(r)
    if json_out:
        out = report_json(r, findings)
        if bad is not None:
            out["plan"] = None  # the default split would read as the profile's
            out["invalid_layer_partition"] = bad
        if predict is not None:
            out["prediction"] = with_prediction(r, predict, json_out=True)
        print(json.dumps(out, indent=2))
    else:
        render_plan(r, findings, invalid_partition=bad)
        if predict is not None:
            with_prediction(r, predict, json_out=False)
    return 1 if r.plan is None or bad is not None else 0
