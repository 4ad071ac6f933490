"""`ppspec --version`: ppspec's version, the installed vLLM (version, distribution, the platform
its build targets, verified or not) and the verified releases. Reads package metadata only (never
imports vLLM), so it answers at once on a login node and on a GPU node alike."""

from __future__ import annotations

from importlib import metadata as md

from ppspec_cli.knowledge.engine import installed_vllm
from ppspec_cli.knowledge.versions import NEWEST_VERIFIED, settle_command, verdict, verified_text


def ppspec_version() -> str:
    try:
        return md.version("ppspec")
    except md.PackageNotFoundError:
        from ppspec_cli import __version__

        return __version__


def version_lines() -> list[str]:
    """The lines `ppspec --version` prints."""
    lines = [f"ppspec {ppspec_version()}"]
    inst = installed_vllm()
    if inst is None:
        lines.append(
            f"vLLM: not installed here (check and plan give vLLM {NEWEST_VERIFIED}'s verdict, or the profile's "
            "engine_version's)"
        )
    else:
        vv = verdict(inst.version)
        state = (
            "verified"
            if vv.verified
            else f"unverified ({vv.why}; verdicts carry vLLM {vv.facts_version}'s facts forward until "
            f"`{settle_command()}` reads this engine by value)"
        )
        lines.append(f"vLLM: {inst.version} ({inst.distribution}, {inst.platform} build): {state}")
    lines.append(f"verified vLLM releases: {verified_text()}")
    return lines


def print_version() -> None:
    for line in version_lines():
        print(line)
