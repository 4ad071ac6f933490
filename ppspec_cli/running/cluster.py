"""The SLURM allocation this process runs in, read: the variables srun/sbatch set, and the
allocation's hosts from `scontrol show hostnames` (bounded, with a deadline). The run's gatherer
(operation/gather.py) reads them; what they decide (the head, this node's rank and run directory)
is planning/placement.py's, pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ppspec_cli.errors import EXIT_REFUSED, EXIT_USAGE, PpspecError
from ppspec_cli.io import spawn
from ppspec_cli.planning.placement import Slurm, check_host

__all__ = ["Slurm", "check_host", "slurm_from_env", "slurm_hostnames"]

#: `scontrol` answers in well under a second; a hung controller must not hang `serve`.
SCONTROL_TIMEOUT_S = 15.0
_SCONTROL_MAX_BYTES = 1 << 20

#: A SLURM host list (`node[01-04,07],gpu-a1`): host-name characters, brackets, ranges, commas;
#: never a leading `-` (it reaches `scontrol show hostnames` as an argument).
_NODELIST = re.compile(r"[A-Za-z0-9_.\[][A-Za-z0-9_.\[\],-]*")
#: The longest host list ppspec reads: SLURM's compressed form of a 10,000-node allocation is far
#: shorter; 64 KiB is the bound the environment reader already gives a variable.
NODELIST_MAX = 65536


def _slurm_int(environ: Mapping[str, str], *names: str) -> int:
    for n in names:
        v = environ.get(n)
        if v is not None:
            if not re.fullmatch(r"[0-9]{1,6}", v):  # ASCII digits only: str.isdigit() takes '²' and '٣'
                raise PpspecError(
                    f"{n}={v[:40]!r} in the environment is not a node number",
                    where=n,
                    fix="run inside a SLURM allocation (srun/sbatch set it), or unset SLURM_JOB_ID",
                    exit_code=EXIT_USAGE,
                )
            return int(v)
    raise PpspecError(
        f"SLURM_JOB_ID is set but {names[0]} is not",
        where=names[0],
        fix="start each node with `srun` (it sets the node variables), or pass --node-rank and --master-addr",
        exit_code=EXIT_REFUSED,
    )


def slurm_from_env(environ: Mapping[str, str]) -> Slurm | None:
    """The allocation, or None outside SLURM (no SLURM_JOB_ID)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    if not nodelist:
        raise PpspecError(
            "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not",
            where="SLURM_JOB_NODELIST",
            fix="run inside a SLURM allocation, or pass --master-addr",
            exit_code=EXIT_REFUSED,
        )
    if len(nodelist) > NODELIST_MAX or not _NODELIST.fullmatch(nodelist):
        raise PpspecError(
            f"SLURM_JOB_NODELIST={nodelist[:40]!r} in the environment is not a SLURM host list",
            where="SLURM_JOB_NODELIST",
            fix="run inside a SLURM allocation (it sets e.g. `node[01-04]`), or pass --master-addr",
            exit_code=EXIT_USAGE,
        )
    s = Slurm(
        job_id=job[:64],
        node_id=_slurm_int(environ, "SLURM_NODEID"),
        nnodes=_slurm_int(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        nodelist=nodelist,
    )
    if s.node_id >= s.nnodes:
        raise PpspecError(
            f"SLURM_NODEID={s.node_id} is not a node of this {s.nnodes}-node allocation (0..{s.nnodes - 1})",
            where="SLURM_NODEID",
            fix="start each node with `srun` inside the allocation (it sets SLURM_NODEID), or pass --node-rank",
            exit_code=EXIT_USAGE,
        )
    return s


def slurm_hostnames(nodelist: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """`scontrol show hostnames NODELIST`: the allocation's hosts in SLURM's order (bounded, with a deadline)."""
    fix = "run `ppspec serve` where SLURM's `scontrol` works (a node of the allocation), or pass --master-addr"
    try:
        out = spawn.run(  # fixed argv, no shell
            ["scontrol", "show", "hostnames", nodelist],
            check=False,
            capture_output=True,
            timeout=SCONTROL_TIMEOUT_S,
            env=None if environ is None else dict(environ),
            stdin=spawn.DEVNULL,
        )
    except FileNotFoundError:
        raise PpspecError(
            "SLURM_JOB_NODELIST is set but `scontrol` is not on PATH", where="scontrol", fix=fix, exit_code=EXIT_REFUSED
        ) from None
    except spawn.TimeoutExpired:
        raise PpspecError(
            f"`scontrol show hostnames` did not answer within {SCONTROL_TIMEOUT_S:.0f}s",
            where="scontrol",
            fix=fix,
            exit_code=EXIT_REFUSED,
        ) from None
    except OSError as e:
        raise PpspecError(
            f"cannot run `scontrol`: {e.strerror or e}", where="scontrol", fix=fix, exit_code=EXIT_REFUSED
        ) from None
    if out.returncode != 0:
        raise PpspecError(
            f"`scontrol show hostnames` failed with exit code {out.returncode}",
            where="scontrol",
            fix=fix,
            exit_code=EXIT_REFUSED,
        )
    text = out.stdout[:_SCONTROL_MAX_BYTES].decode("utf-8", "replace")
    return [h.strip() for h in text.splitlines() if h.strip()]
