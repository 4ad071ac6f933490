"""Which adapter packs were proven on which vLLM release's source: the committed proofs
(`packproof/vllm-<version>.json`, written by tools/prove_packs.py; docs/adapters.md, "Packs proven
on each release's source").

Each file holds, for one release, the snapshot of the release's source the proof ran against (the
exact top-level statements it touched, with their files, lines and the files' sha256; vLLM is
Apache-2.0) and the outcome per pack: `proven`, `refused` (ppspec's plugin would refuse the engine
start: which patch, why) or `failed` (a name the pack states is not in the release, a probe failed).
tests/test_packproof.py re-runs every proof from its snapshot and requires the same outcome, so
what `ppspec adapters list` prints from here is what the checks do today.

Nothing here imports vLLM or torch.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

FORMAT = "ppspec-packproof/1"
PROOF_DIR = Path(__file__).resolve().parent / "packproof"
#: A proof file is ~100-300 KB (the source statements the proof touched); nothing larger is one.
MAX_PROOF_BYTES = 8 * 1024 * 1024
STATES = ("proven", "refused", "failed")


def _release(v: str) -> tuple[int, ...] | None:
    try:
        return Version(v).release
    except InvalidVersion:
        return None


def committed_versions() -> list[str]:
    """The releases with a committed proof, oldest first."""
    got = [p.name[len("vllm-") : -len(".json")] for p in PROOF_DIR.glob("vllm-*.json")]
    return sorted((v for v in got if _release(v) is not None), key=lambda v: _release(v))  # type: ignore[arg-type, return-value]


def proof_file(version: str) -> Path:
    return PROOF_DIR / f"vllm-{version}.json"


@lru_cache(maxsize=16)
def committed(version: str) -> dict[str, Any] | None:
    """The committed proof document of a release (its exact version), or None."""
    f = proof_file(version)
    if not f.is_file():
        return None
    doc = safeio.read_json(f, limit=MAX_PROOF_BYTES, what="pack proof")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PpspecError(
            f"pack proof {f.name} is not a {FORMAT} document",
            where=str(f),
            fix="regenerate it: python tools/prove_packs.py --committed --write",
        )
    return doc


def outcome(pack: str, version: str) -> dict[str, Any] | None:
    """{state, detail, ...} of one pack on one release's source, or None (no proof of that release,
    or the pack was not in it)."""
    doc = committed(version)
    if doc is None:
        return None
    return ((doc.get("proof") or {}).get("packs") or {}).get(pack)


def outcomes(pack: str) -> list[tuple[str, dict[str, Any]]]:
    """(release, outcome) for every committed release whose proof covers the pack, oldest first."""
    return [(v, o) for v in committed_versions() if (o := outcome(pack, v)) is not None]


def series(versions: list[str]) -> str:
    """`0.30-0.34`, `0.30, 0.32-0.34`: releases as minor series, consecutive committed ones joined."""
    if not versions:
        return "none"
    all_v = committed_versions()
    runs: list[list[str]] = []
    for v in versions:
        if runs and all_v.index(runs[-1][-1]) + 1 == all_v.index(v):
            runs[-1].append(v)
        else:
            runs.append([v])

    def minor(v: str) -> str:
        r = _release(v) or ()
        return ".".join(str(x) for x in r[:2])

    return ", ".join(minor(r[0]) if len(r) == 1 else f"{minor(r[0])}-{minor(r[-1])}" for r in runs)


def summary(pack: str) -> str:
    """One line for `adapters list`: 'proven on 0.30-0.34 source', or what was not and why."""
    got = outcomes(pack)
    if not got:
        return "not proven: no committed proof covers this pack (python tools/prove_packs.py --wheel W --write)"
    proven = [v for v, o in got if o.get("state") == "proven"]
    text = f"proven on {series(proven)} source" if proven else "proven on no release's source"
    # the releases that were not, grouped where the same thing failed (the detail names its release)
    groups: list[tuple[str, str, list[str]]] = []
    for v, o in got:
        if o.get("state") == "proven":
            continue
        key = (str(o.get("state")), str(o.get("detail", "")).replace(v, "{v}"))
        if groups and groups[-1][:2] == key:
            groups[-1][2].append(v)
        else:
            groups.append((*key, [v]))
    for state, detail, vs in groups:
        text += f"; {state} on {vs[0] if len(vs) == 1 else series(vs)}: {detail.replace('{v}', vs[-1])}"
    return text


def proven_range(pack: str) -> tuple[str | None, str | None]:
    """(first, last) release on whose source the pack was proven (None, None when none)."""
    proven = [v for v, o in outcomes(pack) if o.get("state") == "proven"]
    return (proven[0], proven[-1]) if proven else (None, None)


def record(pack: str) -> dict[str, dict[str, Any]]:
    """release -> {state, detail} for `adapters list --json` / `show --json`."""
    return {v: {"state": o.get("state"), "detail": o.get("detail", "")} for v, o in outcomes(pack)}
