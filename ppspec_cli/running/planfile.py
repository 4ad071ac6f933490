"""The plan file: how `ppspec serve` tells the in-engine plugin what it planned.

JSON, written before the engine starts and named by the environment variable PPSPEC_PLAN_FILE:

    {"format": "ppspec-plan/1",
     "profile": "<profile name>",
     "pack": "<pack name, a+b for a composite, or null>",
     "plan": {...the stage plan (Plan.to_json()): num_layers, partition, taps, method, stages...},
     "expect": {"pp": 2, "partition": [3, 3], "taps": [1, 3, 5], "draft_layer_start": 6, ...},
     "status_dir": "<folder where every engine process writes <pid>.json>"}

`expect` lists what the plugin's in-engine tripwires must find; a key that is absent or null is not
checked. One typed model (`PlanFile`, pydantic, strict) is the schema for both sides: `serve`
validates what it writes, the plugin what it reads (pydantic is a dependency of vLLM itself, so it
is there in every engine process).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ppspec_cli.errors import PpspecError
from ppspec_cli.io.safeio import read_json, write_text

PLAN_FORMAT = "ppspec-plan/1"
MAX_PLAN_BYTES = 4 << 20


class PlanFileError(PpspecError):
    """The plan file is missing, unreadable, not JSON, or not a ppspec plan."""


class _Model(BaseModel):
    # strict: an int is an int (not "2", not true); unknown keys are kept (a newer ppspec may add
    # some) and ignored by the plugin.
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Need(_Model):
    """A behaviour the profile needs from the engine, asserted by value in every process."""

    behaviour: str | None = None
    arch: str | None = None
    decoder: str | None = None


class Expect(_Model):
    """What the plugin's in-engine tripwires must find; None (or absent) is not checked."""

    pp: int | None = None
    tp: int | None = None
    partition: list[int] | None = None
    taps: list[int] | None = None
    method: str | None = None
    draft_layer_start: int | None = None
    platform: str | None = None
    num_layers: int | None = None
    needs: list[Need] | None = None


class PlanFile(_Model):
    """The plan file, one model for its writer (`serve`) and its reader (the plugin)."""

    format: Literal["ppspec-plan/1"]
    profile: str
    pack: str | None
    plan: dict[str, Any] | None
    expect: Expect
    status_dir: str | None = None


#: The keys every plan file carries (the model's required fields).
REQUIRED_KEYS = tuple(n for n, f in PlanFile.model_fields.items() if f.is_required() and n != "format")
#: expect keys the plugin understands (others are kept and ignored).
EXPECT_KEYS = tuple(Expect.model_fields)


def _validate(data: Any, where: str) -> dict[str, Any]:
    """`data` checked against PlanFile; one PlanFileError naming the first problem."""
    fix = "let `ppspec serve` write it"
    if not isinstance(data, dict):
        raise PlanFileError("plan file is not a JSON object", where=where, fix=fix)
    fmt = data.get("format")
    if fmt != PLAN_FORMAT:
        raise PlanFileError(
            f"plan file has format {str(fmt)[:40]!r}, expected {PLAN_FORMAT!r}",
            where=where,
            fix="use the ppspec that wrote the plan file (or re-run `ppspec serve`)",
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise PlanFileError(f"plan file lacks {', '.join(missing)}", where=where, fix=fix)
    try:
        PlanFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise PlanFileError(f"plan file {loc}: {err['msg'][:120]}", where=where, fix=fix) from None
    return data


def plan_file_text(data: dict[str, Any], where: str = "plan file") -> str:
    """The plan file's text: validated, with the format tag."""
    data = dict(data)
    data.setdefault("format", PLAN_FORMAT)
    _validate(data, where)
    try:
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise PlanFileError(
            f"plan data is not JSON-serializable: {e}", where=where, fix="report this as a ppspec bug"
        ) from None


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
    data = read_json(
        path,
        limit=MAX_PLAN_BYTES,
        what="plan file",
        fix="point PPSPEC_PLAN_FILE at the plan.json `ppspec serve` wrote",
        error=PlanFileError,
    )
    return _validate(data, str(path))
