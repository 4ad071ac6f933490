"""Act: a Judgment -> one Outcome, purely: the findings, both verdicts, the launch spec built from
the placed engine (a dry run's every node, an export's, this node's for `serve`; both engines' and
the router for a disaggregated dry run), and the exit code the command returns (Terraform's
`ExitStatus()` on the result). check, plan, the dry run and export render it; `serve` hands it to
running/serve/start.py; bench does per arm."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError
from ppspec_cli.findings.codes import ENGINE_BAD_OPTION_NAME, ENGINE_SECRET_OPTION, ENV_SECRET
from ppspec_cli.operation.operation import Operation
from ppspec_cli.planning.facts import Facts
from ppspec_cli.planning.judge import Judgment
from ppspec_cli.planning.pd import router_command
from ppspec_cli.planning.profile import Role
from ppspec_cli.planning.resolve import Resolved
from ppspec_cli.planning.verdict import Verdict
from ppspec_cli.running.launch import LaunchSpec, NodeLaunch, Site, build_launch


@dataclass(frozen=True)
class Outcome:
    """What one operation came to. `launch`: the one engine's launch (every node's); `launches`
    and `router`: both engines' and the router line of a disaggregated dry run."""

    operation: Operation
    judgment: Judgment
    launch: LaunchSpec | None = None
    launches: Mapping[Role, LaunchSpec] = field(default_factory=dict)
    router: tuple[str, str] | None = None

    @property
    def resolved(self) -> Resolved | None:
        """The placed engine (a role's, for `--role`); None for a disaggregated dry run or check."""
        j = self.judgment
        if j.deployment is not None and self.operation.role is not None:
            return j.deployment.roles[self.operation.role]
        return j.resolved

    @property
    def profile_verdict(self) -> Verdict:
        return self.judgment.profile_verdict

    @property
    def here_verdict(self) -> Verdict:
        return self.judgment.here_verdict

    @property
    def refused(self) -> bool:
        """`serve` would not start this here (the `here` verdict; what an operation that starts obeys)."""
        return not self.here_verdict.ok

    @property
    def node_rank(self) -> int | None:
        r = self.resolved
        return None if r is None else r.placement.node_rank

    @property
    def node(self) -> NodeLaunch | None:
        """The node this process starts (node 0 when the placement names none)."""
        if self.launch is None:
            return None
        return self.launch.nodes[self.node_rank or 0]

    @property
    def exit_code(self) -> int:
        """check, plan, the dry run, export: the profile verdict's (0 passes, 1 refused). An
        operation that starts an engine: 1 when it is refused here; else the engine's run decides."""
        if self.operation.starts:
            return EXIT_REFUSED if self.refused else EXIT_OK
        return self.profile_verdict.exit_code


def act(op: Operation, j: Judgment, facts: Facts) -> Outcome:
    """The launch the operation asks for, built from the judged engine (a refused `serve` gets none:
    its verdict is all there is to say)."""
    if not op.launches or (op.starts and not j.here_verdict.ok):
        return Outcome(op, j)
    _refuse_unbuildable(j)
    site = Site(facts.executable, facts.run_root, facts.host.name)
    if j.deployment is not None and op.role is None:
        rd = op.placement.run_dir
        specs = {
            role: build_launch(r, site, run_dir=Path(rd) / role if rd else None)
            for role, r in j.deployment.roles.items()
        }
        return Outcome(op, j, launches=specs, router=router_command(j.deployment))
    r = j.deployment.roles[op.role] if j.deployment is not None and op.role is not None else j.resolved
    assert r is not None
    _node_rank_in_range(r)
    return Outcome(op, j, launch=build_launch(r, site))


#: The refusals a launch cannot even be built with: a secret would be written into the argv, the
#: environment and launch.json (and an export's script); a key that is no option name is no flag.
#: The other refusals build a launch that `serve` never starts: the verdict refuses them once, and a
#: dry run or an export shows that launch next to the refusal.
UNBUILDABLE = frozenset({ENGINE_SECRET_OPTION, ENV_SECRET, ENGINE_BAD_OPTION_NAME})


def _refuse_unbuildable(j: Judgment) -> None:
    """What the verdict found that no launch can be built with (its message, where and fix; the code
    is in the verdict already)."""
    for f in j.findings:
        if f.kind in UNBUILDABLE:
            raise PpspecError(
                f"{f.message}: ppspec builds no launch with it", where=f.field, fix=f.hint, exit_code=EXIT_REFUSED
            )


def _node_rank_in_range(r: Resolved) -> None:
    t, rank = r.profile.topology, r.placement.node_rank
    if rank is not None and not (0 <= rank < t.nodes):
        raise PpspecError(
            f"--node-rank {rank} is outside 0..{t.nodes - 1}",
            where="--node-rank",
            fix=f"the profile has {t.nodes} node(s)",
        )
