"""Every `PPSPEC_*` environment variable, read as ONE typed object with bounds (pydantic-settings).

A value out of its bounds (a NaN grace period, a negative deadline, a cache path that is a file)
is one PpspecError naming the variable, what it must be and the fix, exit 2 (a usage error), never
a silent default and never a traceback. Each bound is traced to the largest real value of its kind:

- STOP_GRACE_S: [0, 3600] s. A DeepSeek-V3-sized engine on 16 GPUs frees its memory in well under
  five minutes; an hour is the most any engine may be waited for.
- HUB_DEADLINE / HUB_DOWNLOAD_DEADLINE: (0, 86400] s: one day is more than a 700 GB drafter on a
  slow link takes.
- HUB_DOWNLOAD_LIMIT_GB: (0, 1048576]: a PiB, far over any drafter.

The cache root defaults to the per-user cache directory (platformdirs: `~/.cache/ppspec` on Linux,
honouring XDG_CACHE_HOME), never a path shared between users such as /tmp.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ppspec_cli.errors import EXIT_USAGE, PpspecError

#: The fix each variable's refusal names (its range, in words).
_WHAT = {
    "cache": "a directory path (it is created if missing)",
    "debug": "any non-empty value to show tracebacks",
    "stop_grace_s": "a number of seconds in [0, 3600]",
    "hub_deadline": "a number of seconds in (0, 86400]",
    "hub_download_deadline": "a number of seconds in (0, 86400]",
    "hub_download_limit_gb": "a size in GB in (0, 1048576]",
    "vllm_executable": "the path of a `vllm` executable",
    "plan_file": "(set by ppspec for the engine; do not set it yourself)",
}


class Settings(BaseSettings):
    """The `PPSPEC_*` variables. None: unset (the caller's default applies)."""

    model_config = SettingsConfigDict(
        env_prefix="PPSPEC_", case_sensitive=True, extra="ignore", env_ignore_empty=True, validate_default=False
    )

    cache: Optional[Path] = Field(default=None, alias="PPSPEC_CACHE")
    debug: str = Field(default="", alias="PPSPEC_DEBUG")
    stop_grace_s: Optional[float] = Field(default=None, ge=0, le=3600, allow_inf_nan=False, alias="PPSPEC_STOP_GRACE_S")
    hub_deadline: Optional[float] = Field(
        default=None, gt=0, le=86400, allow_inf_nan=False, alias="PPSPEC_HUB_DEADLINE"
    )
    hub_download_deadline: Optional[float] = Field(
        default=None, gt=0, le=86400, allow_inf_nan=False, alias="PPSPEC_HUB_DOWNLOAD_DEADLINE"
    )
    hub_download_limit_gb: Optional[float] = Field(
        default=None, gt=0, le=1 << 20, allow_inf_nan=False, alias="PPSPEC_HUB_DOWNLOAD_LIMIT_GB"
    )
    vllm_executable: Optional[str] = Field(default=None, alias="PPSPEC_VLLM_EXECUTABLE")
    plan_file: Optional[str] = Field(default=None, alias="PPSPEC_PLAN_FILE")

    @field_validator("stop_grace_s", "hub_deadline", "hub_download_deadline", "hub_download_limit_gb", mode="before")
    @classmethod
    def _number(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                f = float(v.strip())
            except ValueError:
                raise ValueError("not a number") from None
            if not math.isfinite(f):
                raise ValueError("not a finite number")
            return f
        return v

    @field_validator("cache", mode="after")
    @classmethod
    def _cache(cls, v: Optional[Path]) -> Optional[Path]:
        if v is None:
            return v
        v = v.expanduser()
        if v.exists() and not v.is_dir():
            raise ValueError("exists and is not a directory")
        return v

    @property
    def debugging(self) -> bool:
        return bool(self.debug)


def env_name(field: str) -> str:
    return "PPSPEC_" + field.upper()


def settings() -> Settings:
    """The `PPSPEC_*` variables of this process, validated now (read afresh on each call: a test or a
    library may change the environment between two calls)."""
    try:
        return Settings()
    except ValidationError as e:
        err = e.errors()[0]
        loc = str(err.get("loc", ("?",))[0])
        field = loc.removeprefix("PPSPEC_").lower()
        name = env_name(field)
        raw = str(err.get("input", ""))
        raise PpspecError(
            f"{name}={raw[:60]!r} is not valid: {err.get('msg', 'invalid').removeprefix('Value error, ')}",
            where=name,
            fix=f"set {name} to {_WHAT.get(field, 'a valid value')}, or unset it",
            exit_code=EXIT_USAGE,
        ) from None


def cache_root() -> Path:
    """Where ppspec keeps its caches and default run dirs: $PPSPEC_CACHE, else the per-user cache
    directory (never a directory shared between users)."""
    s = settings()
    if s.cache is not None:
        return s.cache
    import platformdirs

    return Path(platformdirs.user_cache_dir("ppspec", appauthor=False))
