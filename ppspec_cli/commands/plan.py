"""`ppspec plan`: the stage plan of a profile (both engines' for a disaggregated one), with the
profile verdict `check` gives: the same exit code. `--predict` adds the cost model's prediction."""

from __future__ import annotations

import json

from ppspec_cli.commands.common import preflight_json, progress


def invalid_partition(r) -> list[int] | None:
    """The profile's `topology.layer_partition` when the plan could not use it (vLLM would refuse
    it: the plan fell back to the default split, which is not what the profile asks for)."""
    lp = r.profile.topology.layer_partition
    if lp and r.plan is not None and r.plan.partition_source != "profile":
        return list(lp)
    return None


def with_prediction(r, opts, *, json_out: bool):
    """`--predict`: the prediction's JSON, or print its text (commands/predict_render.py); a layout that does
    not fit its hardware's memory is not predicted (said instead)."""
    from ppspec_cli.commands.predict_render import DoesNotFit, prediction, render

    try:
        pred = prediction(r, opts)
    except DoesNotFit as e:
        if json_out:
            return {"predicted": False, "reason": e.reason, "memory": e.memory}
        print()
        print(e.reason)
        return None
    if json_out:
        return pred.to_json()
    print()
    print(render(pred))
    return None


def run(
    profile: str, json_out: bool, offline: bool, predict=None, verbose: bool = False, hardware: str | None = None
) -> int:
    """Print the plan and what to act on first (`verbose`: every finding); exit with the profile
    verdict (0 no error, 1 refused: no plan, an invalid layer_partition, or any other error `check` reports)."""
    from ppspec_cli import operation
    from ppspec_cli.commands.render import render_pd_plan, render_plan
    from ppspec_cli.planning.pd import name_table

    o = operation.run(operation.Operation("plan", profile, offline=offline, hardware=hardware), progress)
    pf = o.judgment
    if pf.deployment is not None and predict is not None:
        from ppspec_cli.errors import PpspecError

        raise PpspecError(
            "--predict covers one engine; this profile is disaggregated (`roles:`)",
            where=profile,
            fix="predict the decode engine from a profile of its own (its target, drafter and topology)",
        )
    d, r = pf.deployment, pf.resolved
    if json_out:
        out = preflight_json(pf)
        if d is None and (bad := invalid_partition(r)) is not None:
            out["plan"] = None  # the default split would read as the profile's
            out["invalid_layer_partition"] = bad
        if predict is not None:
            out["prediction"] = with_prediction(r, predict, json_out=True)
        print(json.dumps(out, indent=2))
    elif d is not None:
        render_pd_plan(pf, name_table(d), verbose=verbose)
    else:
        render_plan(pf, invalid_partition=invalid_partition(r), verbose=verbose)
        if predict is not None:
            with_prediction(r, predict, json_out=False)
    return o.exit_code
