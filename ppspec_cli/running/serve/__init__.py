"""`ppspec serve`: check, write the plan, start vLLM, wait for health, stream the log, and shut the
whole process tree down cleanly on Ctrl-C / SIGTERM or when the engine dies.

- rundir: the run-dir lock, the files written before the engine starts, the engine's TMPDIR;
- supervise: the engine process, signals, log pump, health wait, termination;
- residue: /dev/shm tracking and the cleanup after a run, also of a run killed outright.
"""

from ppspec_cli.running.serve.supervise import (
    ServeResult,
    die_with_parent,
    health_ok,
    likely_cause,
    port_free,
    run_engine,
)

__all__ = ["ServeResult", "die_with_parent", "health_ok", "likely_cause", "port_free", "run_engine"]
