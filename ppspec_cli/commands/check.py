"""`ppspec check`: the preflight's findings and the verdict, rendered (one engine, or both engines of
a disaggregated profile). The exit code is the profile verdict; what this machine adds (the `here`
question: would `serve` start it here) is its own section and changes nothing of it."""

from __future__ import annotations

import json

from ppspec_cli.commands.common import load, preflight_json, progress, with_hardware


def run(
    profile: str,
    json_out: bool,
    offline: bool,
    probes: bool,
    min_severity: str = "warning",
    verbose: bool = False,
    hardware: str | None = None,
) -> int:
    """Preflight one profile; the profile verdict's exit code (0 no error, 1 refused). `min_severity`:
    the least severe findings shown in the table (`verbose`: all, with the plan's notes); the verdict
    and the JSON count all."""
    from ppspec_cli.commands.render import SEVERITIES, render_check, render_pd_check
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.preflight.core import preflight, probed

    if min_severity not in SEVERITIES:
        raise PpspecError(
            f"--severity {min_severity[:40]!r} is not a severity",
            where="--severity",
            fix="use error, warning or info",
            exit_code=2,
        )
    prof = with_hardware(load(profile), hardware)
    pf = preflight(prof, profile, offline=offline, progress=progress)
    if probes:
        pf = probed(pf)
    if json_out:
        print(json.dumps(preflight_json(pf), indent=2))
    elif pf.deployment is not None:
        render_pd_check(pf, min_severity="info" if verbose else min_severity)
    else:
        render_check(pf, min_severity="info" if verbose else min_severity)
    return pf.profile_verdict.exit_code
