"""Prove ppspec's adapter packs against a vLLM release's source, without CUDA (docs/adapters.md,
"Packs proven on each release's source").

    python tools/prove_packs.py --wheel vllm-0.34.0-...whl        # prove, print, exit 1 if a human is needed
    python tools/prove_packs.py --wheel W --write                 # also commit knowledge/packproof/vllm-<v>.json
    python tools/prove_packs.py --wheel W --write --set-ranges    # and set each pack's `vllm:` range from the proofs
    python tools/prove_packs.py --source DIR                      # a folder holding vllm/ (an unpacked wheel)
    python tools/prove_packs.py --committed [--release 0.34.0] [--write]  # re-run the committed snapshots (no wheel)

Per pack the proof does what ppspec's plugin does at engine start, with the plugin's own code, on
the release's source served by ppspec_cli/running/engine/sourcevllm.py (nothing of vLLM is
imported; the wheel is read in place): anchors, apply, verify by value with each behaviour check,
the behaviours the pack adds, the names the pack states, the pack's probes.

Exit status: 0 nothing needs a human; 1 something does (printed under "needs a human": a pack
refused or failed where the previous release proved it, a range that disagrees with the proofs);
2 the proof could not run (an unreadable wheel, a crashed child: the message says).
A release drill calls `main(["--wheel", W, "--write", "--set-ranges"])` or runs this file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ppspec_cli.knowledge import packproofs  # noqa: E402
from ppspec_cli.knowledge.packs import clear_cache, in_range, load_packs  # noqa: E402
from ppspec_cli.running.engine.packproof import ProofError, prove_in_child  # noqa: E402
from ppspec_cli.running.engine.sourcevllm import TreeSource, snapshot_digest  # noqa: E402

#: Where the release snapshots live: test data (CI proves the packs from them), not in the wheel.
SNAPSHOT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "packproof"
SNAPSHOT_FORMAT = "ppspec-packproof-snapshot/1"
LICENSE = (
    "Excerpts of vLLM (https://github.com/vllm-project/vllm), Apache-2.0, Copyright contributors to the vLLM project."
)


def snapshot_file(version: str) -> Path:
    return SNAPSHOT_DIR / f"vllm-{version}.snapshot.json"


_RANGE_LINE = re.compile(r'^vllm:\s*"[^"\n]*"\s*$', re.M)


def _is_release(v: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return not Version(v).is_prerelease and not Version(v).local
    except InvalidVersion:
        return False


def _minor(v: str) -> tuple[int, int]:
    from packaging.version import Version

    r = Version(v).release
    return (r[0], r[1] if len(r) > 1 else 0)


def range_from(proven: list[str], all_versions: list[str]) -> str | None:
    """`>=A,<B` covering exactly the proven releases (B = the minor after the last proven one), or
    None when they are not one consecutive run of the committed releases."""
    if not proven:
        return None
    idx = [all_versions.index(v) for v in proven]
    if idx != list(range(idx[0], idx[0] + len(idx))):
        return None
    lo, hi = _minor(proven[0]), _minor(proven[-1])
    return f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1] + 1}"


def set_ranges(dry: bool = False) -> list[str]:
    """Rewrite each built-in pack's `vllm:` line from the committed proofs. Returns what changed
    (and what could not be set, prefixed `cannot:`)."""
    out = []
    versions = packproofs.committed_versions()
    for pack in load_packs():
        if pack.path is None or pack.source != "built-in":
            continue
        proven = [v for v, o in packproofs.outcomes(pack.name) if o.get("state") == "proven"]
        want = range_from(proven, versions)
        if want is None:
            out.append(
                f"cannot: {pack.name}: proven on {packproofs.series(proven)}, not one run of releases: set its range "
                "by hand"
            )
            continue
        if want == pack.vllm_range:
            continue
        manifest = pack.path / "pack.yaml"
        text = manifest.read_text(encoding="utf-8")
        if len(_RANGE_LINE.findall(text)) != 1:
            out.append(f'cannot: {pack.name}: {manifest} has no single `vllm: "..."` line to rewrite')
            continue
        if not dry:
            manifest.write_text(_RANGE_LINE.sub(f'vllm: "{want}"', text), encoding="utf-8")
        out.append(f"{pack.name}: vllm {pack.vllm_range} -> {want}")
    clear_cache()
    return out


def needs_human(version: str, doc: dict[str, Any] | None = None) -> list[str]:
    """What a person must look at after proving `version` (its proof `doc`, else the committed one),
    against the committed proof of the release before it."""
    from packaging.version import Version

    out = []
    doc = doc if doc is not None else packproofs.committed(version)
    if doc is None:
        return [f"no proof of {version}"]
    older = [v for v in packproofs.committed_versions() if Version(v) < Version(version)]
    prev = older[-1] if older else None
    core = (doc.get("proof") or {}).get("core") or {}
    if core.get("state") != "proven":
        out.append(f"the plugin's own patches are not proven on {version}: {core.get('detail')}")
    outcomes = (doc.get("proof") or {}).get("packs") or {}
    outside: list[str] = []
    for pack in load_packs():
        o = outcomes.get(pack.name)
        if o is None:
            if pack.source == "built-in":
                out.append(f"{pack.name} is not in the proof of {version}: prove again")
            continue
        proven = o.get("state") == "proven"
        before = packproofs.outcome(pack.name, prev) if prev else None
        regression = before.get("state") == "proven" if before is not None else in_range(pack.vllm_range, version)
        if not proven and regression:
            out.append(f"{pack.name} is {o.get('state')} on {version}: {o.get('detail')}")
        if proven and not in_range(pack.vllm_range, version):
            outside.append(pack.name)
        if not proven and in_range(pack.vllm_range, version):
            out.append(
                f"{pack.name}: its range {pack.vllm_range} includes {version}, where it is {o.get('state')} "
                "(--set-ranges sets ranges from the proofs)"
            )
    if outside:
        out.append(
            f"proven on {version} but outside their range: {', '.join(outside)} (--write --set-ranges extends them)"
        )
    return out


def _print(doc: dict[str, Any], stream: Any = sys.stdout) -> None:
    proof = doc["proof"]
    print(f"vLLM {doc['vllm_version']} ({doc.get('commit') or 'no commit'}): pack proofs on its source", file=stream)
    core = proof["core"]
    print(f"  {'(plugin core)':24} {core['state']}{': ' + core['detail'] if core['detail'] else ''}", file=stream)
    for name, o in sorted(proof["packs"].items()):
        print(f"  {name:24} {o['state']}{': ' + o['detail'] if o.get('detail') else ''}", file=stream)
    missing = doc["snapshot"].get("skipped_decorators") or {}
    if missing:
        print(f"  ({len(missing)} vLLM decorators on touched definitions not applied by the harness)", file=stream)


def write(doc: dict[str, Any], *, snapshot: bool = True) -> list[Path]:
    """Commit one release's proof (ppspec_cli/knowledge/packproof/) and, from a wheel, its snapshot
    (tests/fixtures/packproof/)."""
    version = str(doc["vllm_version"])
    out = []
    snap = snapshot_file(version)
    if snapshot:
        SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
        body = {
            "format": SNAPSHOT_FORMAT,
            "vllm_version": version,
            "commit": doc.get("commit"),
            "origin": doc.get("origin"),
            "license": LICENSE,
            **doc["snapshot"],
        }
        snap.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        out.append(snap)
    record = {
        "format": packproofs.FORMAT,
        "vllm_version": version,
        "commit": doc.get("commit"),
        "origin": doc.get("origin"),
        "snapshot": str(snap.relative_to(SNAPSHOT_DIR.parent.parent.parent)),
        "snapshot_sha256": snapshot_digest(doc["snapshot"]),
        "proof": doc["proof"],
    }
    proof = packproofs.proof_file(version)
    proof.parent.mkdir(parents=True, exist_ok=True)
    proof.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    packproofs.committed.cache_clear()
    out.append(proof)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", type=Path, help="a vLLM release wheel (.whl), read in place")
    src.add_argument("--source", type=Path, help="a folder holding the vllm package")
    src.add_argument("--committed", action="store_true", help="re-run the committed proofs from their snapshots")
    ap.add_argument("--release", help="with --committed: only this release")
    ap.add_argument("--write", action="store_true", help="write the proof under ppspec_cli/knowledge/packproof/")
    ap.add_argument("--set-ranges", action="store_true", help="rewrite each pack's `vllm:` range from the proofs")
    ap.add_argument("--json", action="store_true", help="print the proof documents as JSON")
    a = ap.parse_args(argv)
    docs: list[dict[str, Any]] = []
    try:
        if a.committed:
            versions = [a.release] if a.release else packproofs.committed_versions()
            jobs = []
            for v in versions:
                if not snapshot_file(v).is_file():
                    print(f"error: no committed snapshot of vLLM {v} ({snapshot_file(v)})", file=sys.stderr)
                    return 2
                jobs.append(("snapshot", snapshot_file(v)))
            docs = prove_in_child(jobs)
            for doc, (_, f) in zip(docs, jobs):
                committed_snapshot = json.loads(f.read_text(encoding="utf-8"))
                doc["origin"] = committed_snapshot.get("origin")
                if snapshot_digest(doc["snapshot"]) != snapshot_digest(committed_snapshot):
                    print(
                        f"error: replaying {f.name} touched other source than the snapshot holds: "
                        "regenerate it from the wheel (--wheel W --write)",
                        file=sys.stderr,
                    )
                    return 2
        else:
            where = a.wheel or a.source
            if not where.exists():
                print(f"error: {where} does not exist", file=sys.stderr)
                return 2
            version = TreeSource(where).version()[0]
            if not version or not _is_release(version):
                print(
                    f"error: {where} holds no vLLM release (vllm/_version.py names {version!r}); "
                    "give a release wheel (pip download vllm==X.Y.Z --no-deps)",
                    file=sys.stderr,
                )
                return 2
            (doc,) = prove_in_child([("source", where)])
            doc["origin"] = f"wheel {where.name}" if a.wheel else f"source {where.name}"
            docs.append(doc)
    except (ProofError, OSError, zipfile.BadZipFile) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for doc in docs:
        if a.json:
            print(json.dumps({k: v for k, v in doc.items() if k != "snapshot"}, indent=1, sort_keys=True))
        else:
            _print(doc)
        if a.write:
            for line in write(doc, snapshot=not a.committed):
                print(f"wrote {line}")
    if a.set_ranges:
        if not a.write and not a.committed:
            print("error: --set-ranges reads the committed proofs: add --write", file=sys.stderr)
            return 2
        for line in set_ranges():
            print(f"range: {line}")
    human: list[str] = []
    for doc in docs:
        human += needs_human(doc["vllm_version"], doc)
    if human:
        print("\nneeds a human:")
        for line in dict.fromkeys(human):
            print(f"  - {line}")
        return 1
    print("\nnothing needs a human: every pack's range agrees with its proofs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
