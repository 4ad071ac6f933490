"""What every command shares: the stderr progress line, the error console, loading and resolving a
profile, and the JSON report of a resolved profile."""

from __future__ import annotations

import sys
from typing import Any


def err_console():
    from ppspec_cli.io import terminal

    return terminal.console(stderr=True)


def progress(msg: str) -> None:
    print(f"ppspec: {msg}", file=sys.stderr, flush=True)


def load(profile_path: str):
    """The profile, read and validated once per command (every step after gets the object)."""
    from ppspec_cli.planning.profile import load_profile

    return load_profile(profile_path)


def resolve_profile(prof, profile_path: str, offline: bool):
    from ppspec_cli.planning.resolve import resolve

    return resolve(prof, profile_path=profile_path, offline=offline, progress=progress)


def report_json(r, findings) -> dict[str, Any]:
    from ppspec_cli.planning.engine_options import refusals

    return {
        "ok": not refusals(findings),
        "profile": r.profile.name,
        "findings": [f.to_json() for f in findings],
        "platform": r.platform,
        "runner": r.runner,
        "vllm": None if r.vllm is None else {"version": r.vllm.version, "distribution": r.vllm.distribution},
        "engine_version": {"version": r.engine_version, "source": r.engine_version_source, **({"verified": r.version_verdict.verified, "facts_version": r.version_verdict.facts_version} if r.version_verdict else {})},
        "adapter": None if r.pack is None else r.pack.name,
        "target": None if r.target is None else r.target.to_json(),
        "drafter": None if r.drafter is None else r.drafter.to_json(),
        "plan": None if r.plan is None else r.plan.to_json(),
    }
