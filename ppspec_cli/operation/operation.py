"""One request of a run (Terraform's `backend.Operation` is the model): what the command line asked,
before anything is read. `operation.run(op)` gathers its facts once, judges them and returns one
Outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ppspec_cli.planning.placement import PlacementArgs
from ppspec_cli.planning.profile import Profile, Role

#: check, plan: the profile's verdict; dry_run: what `serve` would start (every node, or one);
#: export: the launch for a scheduler's nodes; serve: start this node's engine; bench: serve an arm.
Kind = Literal["check", "plan", "dry_run", "export", "serve", "bench"]


@dataclass(frozen=True)
class Operation:
    """`profile_path` anchors relative paths and messages; `profile`: a changed copy of the file's
    (a bench arm) judged instead of it. `placement`: the command line's placement; `role`: one
    engine of a disaggregated profile; `probes`: ask the installed engine itself (check --probes);
    `read_headers`: read safetensors headers (a calibration leaves them); `hardware`: the command
    line's `--hardware`, over the profile's own `hardware:`."""

    kind: Kind
    profile_path: str
    placement: PlacementArgs = field(default_factory=PlacementArgs)
    role: Role | None = None
    offline: bool = False
    probes: bool = False
    profile: Profile | None = None
    read_headers: bool = True
    hardware: str | None = None

    @property
    def launches(self) -> bool:
        """The operation builds a launch (a dry run, an export, a start)."""
        return self.kind in ("dry_run", "export", "serve", "bench")

    @property
    def starts(self) -> bool:
        """The operation starts an engine here: the `here` verdict decides."""
        return self.kind in ("serve", "bench")
