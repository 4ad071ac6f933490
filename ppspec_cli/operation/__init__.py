"""One run of ppspec: Operation -> gather (the only I/O) -> judge (pure: planning/judge.py) -> act
(pure: the Outcome, with its launch and exit code). Every command that judges a profile calls
`run` and renders the Outcome; `serve` hands it to running/serve/start.py."""

from __future__ import annotations

from typing import Callable

from ppspec_cli.errors import PpspecError
from ppspec_cli.operation.gather import engine_answers, gather_facts
from ppspec_cli.operation.operation import Kind, Operation
from ppspec_cli.operation.outcome import Outcome, act
from ppspec_cli.planning.judge import Judgment, judge
from ppspec_cli.planning.placement import PlacementArgs
from ppspec_cli.planning.profile import Profile

__all__ = ["Judgment", "Kind", "Operation", "Outcome", "PlacementArgs", "run"]


def run(op: Operation, progress: Callable[[str], None] | None = None) -> Outcome:
    """Gather the facts once, judge them, act. Where the judgment asks for the installed engine's
    own answers (check --probes; a launch nothing else refuses: its parser's option names, seconds
    the first time), they are gathered and the facts judged again (pure: it costs nothing more)."""
    facts = gather_facts(op, progress)
    _check_role(op, facts.profile)
    j = judge(facts, role=op.role)
    if op.probes and j.resolved is not None and j.resolved.vllm is not None:
        facts = engine_answers(facts, j.resolved, probes=True)
        j = judge(facts, role=op.role)
    elif op.kind in ("dry_run", "serve", "bench") and j.here_verdict.ok:
        facts = engine_answers(facts, None, probes=False)
        j = judge(facts, role=op.role)
    if progress is not None:
        for r in j.engines:
            for note in r.placement.notes:
                progress(note)
    return act(op, j, facts)


def _check_role(op: Operation, profile: Profile) -> None:
    if op.role is not None and op.role not in ("prefill", "decode"):
        raise PpspecError(
            f"--role {op.role[:40]!r} is not a role", where="--role", fix="use --role prefill or --role decode"
        )
    if op.role is not None and not profile.disaggregated:
        raise PpspecError(
            "--role is for disaggregated profiles (with `roles:`); this one runs one engine",
            where="--role",
            fix="drop --role",
        )
    if profile.disaggregated and op.role is None and op.starts:
        raise PpspecError(
            "this profile runs two engines (roles prefill and decode): start each with --role",
            where="--role",
            fix=f"ppspec serve {op.profile_path} --role prefill (and --role decode); --dry-run without --role "
            "prints both and the router",
        )
