"""Which vLLM releases ppspec's facts were verified against, and what a verdict for any other
version (a nightly, a release candidate, a fork's `+local` build, a release newer than ppspec) rests
on.

The rule: a release inside the verified tables gets that release's facts (today's exact verdict).
Any other version gets the facts of the closest verified release, carried forward and marked
unverified: `check` says so in a warning that names the version, the release the verdict comes
from, and the command that settles it where vLLM is installed (there the installed engine is read
by value: `ppspec check --probes`, and the plugin in every engine process). Nothing here claims
that vLLM refuses something ppspec has not seen.

Nothing here imports vLLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: The vLLM releases (minor series) ppspec's facts, packs and mirror cases were read off and tested
#: against. The one place that says so: docs/versions.md ("vLLM versions") and the `[cuda]` / `[cpu]`
#: extras in pyproject.toml agree with it (a test keeps them in step).
VERIFIED_SERIES: tuple[str, ...] = ("0.30", "0.31", "0.32", "0.33", "0.34")
#: The same as a PEP 440 range.
VERIFIED_RANGE = ">=0.30,<0.35"
#: The newest verified release: the facts carried forward to newer and unknown versions, and the
#: version a verdict is for when vLLM is not installed and the profile names no `engine_version`.
NEWEST_VERIFIED = "0.34.0"
#: The first release with speculative decoding under pipeline parallelism (PR #50514).
FIRST_PP_SPEC = "0.30.0"


def settle_command(profile: str | None = None) -> str:
    """The command that reads the installed engine by value (run it where vLLM is installed)."""
    return f"ppspec check {profile or 'PROFILE'} --probes"


@dataclass(frozen=True)
class VersionVerdict:
    """What a verdict for one vLLM version rests on."""

    version: str  # the version as reported (installed metadata or the profile's engine_version)
    facts_version: str  # the release whose facts the verdict uses
    verified: bool  # the version is a verified release (not a dev/rc/local build, not newer)
    why: str = ""  # why it is not verified ("" when it is)

    @property
    def carried_forward(self) -> bool:
        return self.facts_version != self.version

    def describe(self) -> str:
        """One phrase: 'verified' or 'unverified: <why>; verdict of vLLM <facts>'."""
        if self.verified:
            return "verified"
        return f"unverified: {self.why}; the verdict uses vLLM {self.facts_version}'s facts"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _range() -> SpecifierSet:
    return SpecifierSet(VERIFIED_RANGE)


def verdict(version: str | None) -> VersionVerdict:
    """Classify a vLLM version string.

    - a final (or post) release inside VERIFIED_RANGE, without a local label: verified, its own facts;
    - a pre-release, dev build or `+local` build of a release inside the range: unverified, that
      release's facts (0.34.0rc1 and 0.34.0+fork -> 0.34.0);
    - anything newer than the range (0.35.0, 0.35.0.dev12+g1234abc, 1.0): unverified, the newest
      verified release's facts;
    - older than the range (0.29.x): unverified, its own public version (ppspec knows only that it
      has no speculative decoding under PP: the `vllm-too-old` rule);
    - not a PEP 440 version: unverified, the newest verified release's facts.
    """
    raw = (version or "").strip()
    try:
        v = Version(raw)
    except InvalidVersion:
        return VersionVerdict(raw, NEWEST_VERIFIED, False, f"{raw!r} is not a version ppspec can compare")
    release = Version(v.base_version)  # 0.35.0.dev12+g1234abc -> 0.35.0
    rng = _range()
    kinds = []
    if v.is_devrelease:
        kinds.append("a development build")
    if v.is_prerelease and not v.is_devrelease:
        kinds.append("a pre-release")
    if v.local:
        kinds.append(f"a local build (+{v.local})")
    if release in rng:
        if not kinds:
            return VersionVerdict(raw, raw, True)
        return VersionVerdict(
            raw,
            str(release),
            False,
            f"vLLM {raw} is {' and '.join(kinds)} of {release}, not the release ppspec verified",
        )
    if release > Version(NEWEST_VERIFIED):
        what = " and ".join(kinds) if kinds else "a release"
        return VersionVerdict(
            raw,
            NEWEST_VERIFIED,
            False,
            f"vLLM {raw} is {what} newer than the newest verified release {NEWEST_VERIFIED}",
        )
    return VersionVerdict(
        raw,
        str(v.public if not v.local else release),
        False,
        f"vLLM {raw} is older than the verified releases ({', '.join(VERIFIED_SERIES)})",
    )


def verified_text() -> str:
    """'0.30, 0.31, 0.32, 0.33, 0.34 (>=0.30,<0.35)' for listings."""
    return f"{', '.join(VERIFIED_SERIES)} ({VERIFIED_RANGE})"
