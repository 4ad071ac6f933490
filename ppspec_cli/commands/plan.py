"""`ppspec plan`: the stage plan of a profile."""

from __future__ import annotations

import json

from ppspec_cli.commands.check import pd_report
from ppspec_cli.commands.common import load, report_json, resolve_profile


def run(profile: str, json_out: bool, offline: bool) -> int:
    """Print the plan; 0 when a plan could be built, else 1."""
    from ppspec_cli.commands.render import render_plan
    from ppspec_cli.planning.rules import run_rules

    prof = load(profile)
    if prof.disaggregated:
        return pd_report(prof, profile, offline, json_out, plan=True)
    r = resolve_profile(prof, profile, offline)
    findings = run_rules(r)
    if json_out:
        print(json.dumps(report_json(r, findings), indent=2))
    else:
        render_plan(r, findings)
    return 0 if r.plan is not None else 1
