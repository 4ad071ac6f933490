"""Files ppspec reads back (verify baselines and references, plugin status records, ...): one loader
that reads the file through safeio (bounded, regular files only) and validates it against a typed
pydantic model BEFORE anything long runs, with one error path that names the file and the field.

Models for such files derive from `Record`: unknown keys are kept (a newer ppspec may add some),
numbers are strict (a string or a bool is not a number) and finite (`1e999` reads as infinity in
JSON, and no measured figure is infinite), text is text.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ppspec_cli.errors import EXIT_USAGE, PpspecError
from ppspec_cli.io import safeio

M = TypeVar("M", bound=BaseModel)
_FLOAT_MAX = 2**1023


class Record(BaseModel):
    """Base of every persisted-record model."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)


def describe(e: ValidationError, limit: int = 3) -> str:
    """The first few problems of a validation error as `field.path: message (got VALUE)`."""
    parts = []
    for err in e.errors()[:limit]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "(the document)"
        if err.get("type") == "missing":
            parts.append(f"missing {loc}")
            continue
        got = repr(err.get("input"))
        parts.append(f"{loc}: {err.get('msg', 'invalid')} (got {got[:60]}{'...' if len(got) > 60 else ''})")
    more = e.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def non_finite(data: Any, path: str = "") -> str | None:
    """The path of the first infinite or NaN number anywhere in a JSON document, or None."""
    stack = [(data, path)]
    while stack:
        x, at = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return at or "(the document)"
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) > _FLOAT_MAX:  # 10**400: no float holds it
            return at or "(the document)"
        if isinstance(x, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(x))
    return None


def validate(
    model: type[M],
    data: Any,
    *,
    what: str,
    where: str,
    fix: str,
    exit_code: int = EXIT_USAGE,
    error: type[PpspecError] = PpspecError,
) -> M:
    """`data` as `model`, or one error naming `where` (the file) and the first bad fields. No
    number anywhere in it may be infinite or NaN (JSON's `1e999` reads as infinity)."""
    bad = non_finite(data)
    if bad is not None:
        raise error(
            f"{what} {where} is not valid: {bad} is not a finite number", where=where, fix=fix, exit_code=exit_code
        )
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(f"{what} {where} is not valid: {describe(e)}", where=where, fix=fix, exit_code=exit_code) from None


def load(
    path: str | Path,
    model: type[M],
    *,
    what: str,
    limit: int,
    fix: str,
    exit_code: int = EXIT_USAGE,
    error: type[PpspecError] = PpspecError,
) -> tuple[M, Any]:
    """Read the JSON file `path` (safeio: bounded, a regular file, not a FIFO, a device or a
    directory) and validate it as `model`. Returns the model and the raw document."""
    doc = safeio.read_json(path, limit=limit, what=f"{what} file", fix=fix, error=error, exit_code=exit_code)
    return validate(model, doc, what=f"{what} file", where=str(path), fix=fix, exit_code=exit_code, error=error), doc
