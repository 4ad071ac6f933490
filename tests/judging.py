"""A profile judged on facts a test chooses: the vLLM installed here as a value, the caller's
environment as a mapping (operation/gather.py's `install` and `environ`), never by patching the
readers (HERE: this machine's). The rest is gathered as a run does (checkpoints, packs, placement)."""

from __future__ import annotations

from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.operation.gather import HERE, gather_facts
from ppspec_cli.operation.operation import Operation
from ppspec_cli.planning.facts import Facts
from ppspec_cli.planning.judge import Judgment, judge
from ppspec_cli.planning.placement import PlacementArgs
from ppspec_cli.planning.profile import Profile
from ppspec_cli.planning.resolve import Resolved, resolve


def facts(
    prof: Profile,
    *,
    install: VllmInstall | None | object = HERE,
    path: str = "",
    offline: bool = True,
    environ: dict[str, str] | None = None,
    kind: str = "check",
    **placement,
) -> Facts:
    op = Operation(kind, path, PlacementArgs(**placement), offline=offline, profile=prof)  # type: ignore[arg-type]
    return gather_facts(op, install=install, environ=environ if environ is not None else {})


def resolved(prof: Profile, **kw) -> Resolved:
    return resolve(prof, facts(prof, **kw))


def judged(prof: Profile, **kw) -> Judgment:
    return judge(facts(prof, **kw))
