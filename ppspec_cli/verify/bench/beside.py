"""Can `ppspec bench` serve the profile here, now? bench starts its own engines, one at a time, on
the profile's port and devices, from the profile's default run directory: beside a running
`ppspec serve` of the same profile (the usual "second terminal") it cannot. Asked before bench
writes or removes anything, so a run that never started leaves no bench.json, no report and no
`--resume` hint (issue 43 item 2). To measure servers that keep running, bench has
`--endpoint URL --baseline-endpoint URL`."""

from __future__ import annotations

from ppspec_cli.errors import EXIT_REFUSED, PpspecError

#: The one fix for a bench that cannot start beside a server (docs/bench.md says the same).
FIX = (
    "stop that server first (Ctrl-C in its terminal), then run the same bench command again; "
    "to measure servers you keep running instead, start one with the drafter and one without, "
    "then pass --endpoint URL --baseline-endpoint URL"
)


def refuse_if_busy(prof) -> None:
    """PpspecError (exit 1) when a `ppspec serve` holds the profile's run directory or something
    listens on its port; nothing is written either way."""
    from ppspec_cli.running.serve import port_free
    from ppspec_cli.running.serve.rundir import default_run_dir, in_use_by

    run_dir = default_run_dir(prof.name)
    holder = in_use_by(run_dir)
    host, port = prof.server.host, prof.server.port
    if holder is not None:
        raise PpspecError(
            f"{holder} is serving profile {prof.name} from {run_dir}: bench serves the profile itself, "
            f"one engine at a time on port {port}, so it cannot run beside that server",
            where=f"server.port {port}",
            fix=FIX,
            exit_code=EXIT_REFUSED,
        )
    if not port_free(host, port):
        raise PpspecError(
            f"port {port} on {host} is already in use: bench serves the profile itself on that port",
            where=f"server.port {port}",
            fix="stop what listens there, or set server.port to a free port; "
            "to measure servers already running, pass --endpoint URL --baseline-endpoint URL",
            exit_code=EXIT_REFUSED,
        )
