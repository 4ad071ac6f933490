"""The facts of one run, gathered once before anything is judged (operation/gather.py is the only
I/O of a run) and handed, frozen, to the pure judge: `resolve(profile, facts)`, the rules, the
`here` rules and the launch builder read nothing else (vLLM's `VllmConfig` is the model: built
once, then handed everywhere).

What the profile question may read: the profile as written, its checkpoints' metadata, the
installed vLLM (it decides by value only where it serves the profile's platform) and its engine
table, the placement the command line and the scheduler give. What only the `here` question reads:
the caller's environment (`environ`), this host's network view (`host`), and, when the operation
asks for them, the installed parser's option names and the behaviour probes' findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ppspec_cli.checkpoint.reader import Checkpoint
from ppspec_cli.errors import PpspecError
from ppspec_cli.findings import Finding
from ppspec_cli.io.netinfo import NodeNet
from ppspec_cli.knowledge.archtable import ArchTable
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.planning.placement import PlacementArgs, Slurm
from ppspec_cli.planning.profile import Profile


@dataclass(frozen=True)
class CheckpointRead:
    """One model reference as read (its metadata: config, index, headers; never weights), or why not."""

    checkpoint: Checkpoint | None
    error: PpspecError | None = None


#: A model reference: (the profile's `model`, its `revision`).
Ref = tuple[str, "str | None"]


@dataclass(frozen=True)
class HostView:
    """This host as a multi-node launch sees it. `name` always (run directories are named by it);
    the rest only where a multi-node `mp` profile asks (the `here` question's network rules)."""

    name: str
    own_addrs: tuple[str, ...] | None = None  # what the host name resolves to here
    head_routes: Mapping[str, NodeNet] = field(default_factory=dict)  # head address -> this host's route to it


@dataclass(frozen=True)
class Facts:
    """Everything a run knows, gathered once. `profile` is as written (a role's and a bench arm's
    are derived from it by the judge); `checkpoints` holds every reference it names (the roles
    share them); `engine_table` is the installed engine's architecture table, read by value where
    that engine serves the profile; `node_net` this node's interface towards the head, read where
    the placement asks for it."""

    profile: Profile
    profile_path: str | None
    checkpoints: Mapping[Ref, CheckpointRead]
    install: VllmInstall | None
    environ: Mapping[str, str]
    host: HostView
    run_root: Path
    executable: str = "vllm"
    engine_table: ArchTable | Exception | None = None  # an Exception: its source could not be read
    placement: PlacementArgs = field(default_factory=PlacementArgs)
    slurm: Slurm | None = None
    node_net: NodeNet | None = None
    option_names: frozenset[str] | None = None  # the installed `vllm serve` parser's (None: not read)
    probe_findings: tuple[Finding, ...] | None = None  # the behaviour probes' (None: not run)

    def read(self, model: str, revision: str | None) -> CheckpointRead:
        """The reference as gathered (a reference the gatherer did not read is an error, never a read)."""
        got = self.checkpoints.get((model, revision))
        if got is None:
            return CheckpointRead(None, PpspecError(f"{model!r} was not read", where="target.model"))
        return got


def serves(platform: str, install: VllmInstall | None) -> bool:
    """Whether the vLLM installed here is the engine that serves a profile of `platform` (`auto`
    takes the installed build's): only then does it decide by value."""
    return install is not None and platform in ("auto", install.platform)
