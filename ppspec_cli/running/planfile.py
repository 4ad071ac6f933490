"""The plan file: how `ppspec serve` tells the in-engine plugin what it planned.

JSON, written before the engine starts and named by the environment variable PPSPEC_PLAN_FILE:

    {"format": "ppspec-plan/1",
     "profile": "<profile name>",
     "pack": "<pack name, a+b for a composite, or null>",
     "plan": {...the stage plan (Plan.to_json()): num_layers, partition, taps, method, stages...},
     "expect": {"pp": 2, "partition": [3, 3], "taps": [1, 3, 5], "draft_layer_start": 6, ...},
     "status_dir": "<folder where every engine process writes <pid>.json>"}

`expect` lists what the plugin's in-engine tripwires must find; a key that is absent or null is not
checked. Standard library only: the plugin reads this in every engine process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError
from ppspec_cli.io.safeio import read_json, write_text

PLAN_FORMAT = "ppspec-plan/1"
REQUIRED_KEYS = ("profile", "pack", "plan", "expect")
#: expect keys the plugin understands (others are kept and ignored).
EXPECT_KEYS = ("pp", "tp", "partition", "taps", "method", "draft_layer_start", "platform", "num_layers", "needs")
MAX_PLAN_BYTES = 4 << 20


class PlanFileError(PpspecError):
    """The plan file is missing, unreadable, not JSON, or not a ppspec plan."""


def _validate(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise PlanFileError("plan file is not a JSON object", where=where, fix="let `ppspec serve` write it")
    fmt = data.get("format")
    if fmt != PLAN_FORMAT:
        raise PlanFileError(
            f"plan file has format {fmt!r}, expected {PLAN_FORMAT!r}",
            where=where,
            fix="use the ppspec that wrote the plan file (or re-run `ppspec serve`)",
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise PlanFileError(f"plan file lacks {', '.join(missing)}", where=where, fix="let `ppspec serve` write it")
    if data["pack"] is not None and not isinstance(data["pack"], str):
        raise PlanFileError("plan file `pack` must be a pack name or null", where=where, fix="let `ppspec serve` write it")
    if data["plan"] is not None and not isinstance(data["plan"], dict):
        raise PlanFileError("plan file `plan` must be an object or null", where=where, fix="let `ppspec serve` write it")
    if not isinstance(data["expect"], dict):
        raise PlanFileError("plan file `expect` must be an object", where=where, fix="let `ppspec serve` write it")
    exp = data["expect"]
    for k in ("pp", "tp", "draft_layer_start", "num_layers"):
        if exp.get(k) is not None and (not isinstance(exp[k], int) or isinstance(exp[k], bool)):
            raise PlanFileError(f"plan file expect.{k} must be an integer or null", where=where, fix="let `ppspec serve` write it")
    for k in ("partition", "taps"):
        v = exp.get(k)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
            raise PlanFileError(f"plan file expect.{k} must be a list of integers or null", where=where, fix="let `ppspec serve` write it")
    needs = exp.get("needs")
    if needs is not None and not (
        isinstance(needs, list)
        and all(isinstance(n, dict) and all(isinstance(n.get(k), str) or n.get(k) is None for k in ("behaviour", "arch", "decoder")) for n in needs)
    ):
        raise PlanFileError("plan file expect.needs must be a list of {behaviour, arch, decoder} objects", where=where, fix="let `ppspec serve` write it")
    if data.get("status_dir") is not None and not isinstance(data["status_dir"], str):
        raise PlanFileError("plan file `status_dir` must be a path", where=where, fix="let `ppspec serve` write it")
    return data


def plan_file_text(data: dict[str, Any], where: str = "plan file") -> str:
    """The plan file's text: validated, with the format tag."""
    data = dict(data)
    data.setdefault("format", PLAN_FORMAT)
    _validate(data, where)
    try:
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise PlanFileError(f"plan data is not JSON-serializable: {e}", where=where, fix="report this as a ppspec bug") from None


def write_plan_file(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Validate and write atomically (a reader never sees half a file). Adds the format tag."""
    path = Path(path)
    text = plan_file_text(data, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text, what="plan file", error=PlanFileError)
    return path


def read_plan_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate; PlanFileError with one clear message otherwise."""
    # A device would be read until memory runs out, a FIFO would block the engine forever: safeio refuses both.
    data = read_json(path, limit=MAX_PLAN_BYTES, what="plan file", fix="point PPSPEC_PLAN_FILE at the plan.json `ppspec serve` wrote", error=PlanFileError)
    return _validate(data, str(path))
