"""`ppspec check`: the preflight's findings and the verdict, rendered (one engine, or both engines of
a disaggregated profile). The exit code is the profile verdict; what this machine adds (the `here`
question: would `serve` start it here) is its own section and changes nothing of it."""

from __future__ import annotations

import json

from ppspec_cli.commands.common import preflight_json, progress
from ppspec_cli.errors import EXIT_USAGE


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
    from ppspec_cli import operation
    from ppspec_cli.commands.render import SEVERITIES, render_check, render_pd_check
    from ppspec_cli.errors import PpspecError

    if min_severity not in SEVERITIES:
        raise PpspecError(
            f"--severity {min_severity[:40]!r} is not a severity",
            where="--severity",
            fix="use error, warning or info",
            exit_code=EXIT_USAGE,
        )
    op = operation.Operation("check", profile, offline=offline, probes=probes, hardware=hardware)
    o = operation.run(op, progress)
    pf = o.judgment
    if json_out:
        print(json.dumps(preflight_json(pf), indent=2))
    elif pf.deployment is not None:
        render_pd_check(pf, min_severity="info" if verbose else min_severity)
    else:
        render_check(pf, min_severity="info" if verbose else min_severity)
    return o.exit_code
