"""Generate ppspec's architecture table for one vLLM release from vLLM's own source, and hold it to
the previous release's.

    python tools/vllm_arch_facts.py --release 0.34.0             # the drill: download, generate, compare, diff, packs
    python tools/vllm_arch_facts.py --wheel vllm-0.34.0-...whl   # a release wheel
    python tools/vllm_arch_facts.py --source /path/site-packages # a dir holding vllm/
    python tools/vllm_arch_facts.py --unknowns [--table FILE]    # what the tables leave unknown, with why
    python tools/vllm_arch_facts.py --diff 0.33.0 0.34.0 --page docs/releases/vllm-0.34.0.md

The source is read with `ast` only (ppspec_cli.knowledge.archscan for every architecture,
.drafterscan for the drafter side, .releasescan for release-wide facts): nothing of vLLM
is imported, so any platform's wheel is read on any machine. The output carries the release's
version and, where the wheel's `vllm/_version.py` has one, its git commit.

After writing a table the generator compares it with the previous release's committed table
(ppspec_cli.knowledge.archdiff.losses): every engine check, class, fact, runner or config hook
the previous table had and this one lacks (a file vLLM deleted, a class behind a dispatch the
scanner cannot follow) is printed as LOST, and the exit code is 3 until each is covered by a
reviewed, committed acknowledgement (ppspec_cli/knowledge/arch/acks/vllm-X.yaml: `key` and `why`).
Exit codes: 0 done; 2 bad arguments or unreadable input; 3 facts lost without an acknowledgement;
4 (`--release`) a step failed (download, packs proof).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ppspec_cli.knowledge import archdiff, archscan, archtable, releasescan  # noqa: E402
from ppspec_cli.knowledge.archtable import SCHEMA, TABLE_DIR, table_document  # noqa: E402

#: The parts of a wheel the scan reads (the rest is never unpacked).
WHEEL_PARTS = (
    "vllm/model_executor/",
    "vllm/models/",
    "vllm/config/",
    "vllm/v1/",
    "vllm/transformers_utils/configs/",
    "vllm/platforms/",
    "vllm/triton_utils/",
    "vllm/_version.py",
)
EXIT_LOST = 3
EXIT_STEP = 4


def _unpack(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if (name.startswith(WHEEL_PARTS) and name.endswith(".py")) or (
                ".dist-info/" in name and name.endswith("METADATA")
            ):
                z.extract(name, into)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--unknowns",
        action="store_true",
        help="print, per committed table (or --table), the SupportsPP architectures whose PP verdict stays unknown, "
        "with vLLM's reason",
    )
    src.add_argument("--wheel", type=Path, help="a vLLM wheel (.whl)")
    src.add_argument(
        "--source", type=Path, help="a directory holding the vllm package (site-packages, an unpacked wheel)"
    )
    src.add_argument(
        "--diff",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="verdict-level changes between two tables (a committed version or a file)",
    )
    src.add_argument(
        "--release", metavar="X.Y.Z", help="the drill: download vllm==X.Y.Z, generate, compare, diff, prove the packs"
    )
    ap.add_argument(
        "--origin", help="what the table says it was generated from (default: the wheel's file name, or 'source <dir>')"
    )
    ap.add_argument("--out", type=Path, help=f"where to write (default: {TABLE_DIR}/vllm-<version>.json)")
    ap.add_argument(
        "--against",
        help="the table to compare with (a committed version or a file; default: the previous committed release)",
    )
    ap.add_argument(
        "--table", type=Path, action="append", help="--unknowns: read this table file instead of the committed ones"
    )
    ap.add_argument("--page", type=Path, help="--diff/--release: write the release page here (markdown)")
    ap.add_argument(
        "--wheel-dir", type=Path, help="--release: where the wheel is downloaded (default: a temporary directory)"
    )
    a = ap.parse_args(argv)
    if a.unknowns:
        docs = [(str(d.get("vllm_version")), d) for d in (_read(p) for p in a.table)] if a.table else None
        return _unknowns(docs)
    if a.diff:
        old, new = _doc(a.diff[0]), _doc(a.diff[1])
        page = release_page(old, new)
        _emit(page, a.page)
        return 0
    if a.release:
        return drill(a.release, a.wheel_dir, a.page)
    return generate(a.wheel, a.source, a.origin, a.out, a.against)[0]


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"vllm_arch_facts: cannot read the table {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SystemExit(f"vllm_arch_facts: {path} is not a schema-{SCHEMA} table")
    return doc


def _doc(ref: str) -> dict[str, Any]:
    """A table by committed version ("0.33.0") or by file."""
    p = Path(ref)
    if p.suffix == ".json" or p.exists():
        return _read(p)
    t = archtable.committed(ref)
    if t is None:
        raise SystemExit(
            f"vllm_arch_facts: no committed table for vLLM {ref} (committed: "
            f"{', '.join(archtable.committed_versions())})"
        )
    return t.doc


def _previous(version: str) -> dict[str, Any] | None:
    """The newest committed table of a release older than `version`."""
    from packaging.version import Version

    try:
        mine = Version(Version(version).base_version)
    except ValueError:
        return None
    older = [v for v in archtable.committed_versions() if Version(v) < mine]
    return archtable.committed(older[-1]).doc if older else None  # type: ignore[union-attr]


def generate(
    wheel: Path | None, source: Path | None, origin: str | None, out: Path | None, against: str | None
) -> tuple[int, dict[str, Any], list[archdiff.Loss], Path]:
    """Write the table; compare it with the previous release's. (exit code, table, unacknowledged losses, path)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = source
        origin = origin or (f"wheel {wheel.name}" if wheel else f"source {source}")
        if wheel:
            if not wheel.is_file():
                raise SystemExit(f"vllm_arch_facts: no wheel at {wheel}")
            root = Path(tmp)
            _unpack(wheel, root)
        assert root is not None
        doc = table_document(releasescan.scan(root), *archscan.source_version(root), origin=origin)
        out = out or TABLE_DIR / f"vllm-{doc['vllm_version']}.json"
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(
            f"{out}: schema {SCHEMA}, vLLM {doc['vllm_version']} ({doc['commit'] or 'no commit in the wheel'}): "
            f"{len(doc['targets'])} targets, {len(doc['drafters'])} drafters"
        )
        prev = _doc(against) if against else _previous(str(doc["vllm_version"]))
        if prev is None:
            print("no earlier release's table to compare with")
            return 0, doc, [], out
        found = archdiff.losses(prev, doc)
        _annotate_files(found, root)
    acks = archdiff.acknowledged(str(doc["vllm_version"]))
    lost = archdiff.unacknowledged(found, acks)
    stale = sorted(set(acks) - {x.key for x in found})
    print(
        f"against vLLM {prev.get('vllm_version')}: {len(found)} fact(s) the previous table had and this one lacks, "
        f"{len(found) - len(lost)} acknowledged ({_rel(archdiff.ack_file(str(doc['vllm_version'])))})"
    )
    for x in lost:
        print(f"LOST {x.key}: {x.what}", file=sys.stderr)
    for k in stale:
        print(f"note: acknowledgement {k!r} matches nothing lost now (remove it)", file=sys.stderr)
    if lost:
        print(
            f"vllm_arch_facts: {len(lost)} fact(s) lost without an acknowledgement: read each, fix the scanner where "
            "it can "
            f"read the new source, else add `key` + `why` to {_rel(archdiff.ack_file(str(doc['vllm_version'])))}",
            file=sys.stderr,
        )
        return EXIT_LOST, doc, lost, out
    return 0, doc, lost, out


def _rel(p: Path) -> Path:
    try:
        return p.relative_to(REPO)
    except ValueError:
        return p


def _annotate_files(found: list[archdiff.Loss], root: Path) -> None:
    """A lost check whose file is gone from the new source says so."""
    import re

    for i, x in enumerate(found):
        m = re.search(r"\((vllm/[\w/]+\.py):\d+\)", x.what)
        if m and not (root / m.group(1)).is_file():
            found[i] = archdiff.Loss(x.key, f"{x.what}; {m.group(1)} is deleted in this release")


def _unknowns(docs: list[tuple[str, dict[str, Any]]] | None = None) -> int:
    """Per release: SupportsPP targets whose tap relay over PP is unknown although they are
    SupportsEagle3 (EAGLE3/DFlash/DSpark at PP > 1), and those whose last-stage embedding is
    unknown (a drafter sharing the target's embedding at PP > 1), each with vLLM's reason; a class
    whose language model or embedding rule the checkpoint's config decides is counted as decided,
    and one vLLM's drafter load refuses first (no `.model`: `embed_not_needed`) as not needed.
    Also: the architectures whose eagle3 drafter load vLLM refuses at PP = 1, on the V1 runner and
    on Model Runner V2 (archtable.drafter_load_verdict), where the release has that runner."""
    if docs is None:
        docs = [(v, archtable.committed(v).doc) for v in archtable.committed_versions()]  # type: ignore[union-attr]
    for v, doc in docs:
        relay: dict[str, str] = {}
        embed: dict[str, str] = {}
        refused: dict[str, set[str]] = {"v1": set(), "v2": set()}
        runners = set((doc.get("runners") or {}).get("classes") or {"v1": 1, "v2": 1})
        for arch, e in doc["targets"].items():
            for f in e["platforms"].values():
                if not f.get("class") or f.get("supports_pp") is False or f.get("language_model_from"):
                    continue
                if f.get("supports_eagle3") and archtable.relay_verdict(f)[0] == "unknown":
                    relay[arch] = str(f.get("relay_why") or f.get("decoder_why") or "")
                if not archdiff.embed_decided(f):
                    embed[arch] = str(f.get("embed_why") or "")
                for run in runners & {"v1", "v2"}:
                    if archtable.drafter_load_verdict(f, doc.get("checks") or {}, 1, "eagle3", run)[0] == "refused":
                        refused[run].add(arch)
        loads = ", ".join(
            f"{'V1 runner' if k == 'v1' else 'Model Runner V2'} {len(refused[k])}"
            if k in runners
            else f"no {k.upper()} runner in this release"
            for k in ("v1", "v2")
        )
        print(
            f"vLLM {v}: {len(doc['targets'])} architectures; relay unknown {len(relay)} {sorted(relay)}; "
            f"last-stage embedding unknown {len(embed)} {sorted(embed)}; eagle3 drafter load refused at PP=1: {loads}"
        )
        for arch, why in sorted(relay.items()):
            print(f"  relay unknown {arch}: {why}")
        for arch, why in sorted(embed.items()):
            print(f"  last-stage embedding unknown {arch}: {why}")
    return 0


# ---------------------------------------------------------------------------------------------
# The release page and the drill


def release_page(old: dict[str, Any], new: dict[str, Any], *, drill_note: str = "") -> str:
    """docs/releases/vllm-X.md: what the generator lost and why (the acknowledgements), the
    verdict-level changes, the shipped profiles' verdicts on both releases."""
    ov, nv = old.get("vllm_version"), new.get("vllm_version")
    found = archdiff.losses(old, new)
    acks = archdiff.acknowledged(str(nv))
    lines = [
        f"# vLLM {nv} against {ov}",
        "",
        f"Generated by `python tools/vllm_arch_facts.py --diff {ov} {nv} --page docs/releases/vllm-{nv}.md` from the "
        "committed",
        f"tables ({new.get('origin')}, commit {new.get('commit')}; {old.get('origin')}, commit {old.get('commit')}).",
        "Verdict-level changes only, each with the old and the new file:line: a fact that only moved to another line "
        "is not listed. ppspec's answers for vLLM "
        + str(nv)
        + " come from its own table; nothing of "
        + str(ov)
        + " is carried forward.",
    ]
    if drill_note:
        lines += ["", drill_note]
    lines += ["", "## Verdict changes", ""]
    lines += archdiff.changes(old, new) or ["- none"]
    lines += [
        "",
        f"## What the generator no longer reads, and why ({_rel(archdiff.ack_file(str(nv)))})",
        "",
    ]
    by_why: dict[str, list[str]] = {}
    for x in found:
        by_why.setdefault(acks.get(x.key, "NOT ACKNOWLEDGED"), []).append(x.key)
    for why, keys in by_why.items():
        lines.append(f"- {', '.join(f'`{k}`' for k in keys)}: {why}")
    if not found:
        lines.append("- nothing")
    lines += ["", "## Shipped profiles", ""]
    lines += profile_changes(str(ov), str(nv))
    return "\n".join(lines) + "\n"


def profile_changes(old_version: str, new_version: str) -> list[str]:
    """Each profiles/*.yaml checked as on a login node (no installed vLLM) with `engine_version` set
    to each release: the finding codes that appear or go. Checkpoint metadata is read as `check`
    reads it (the Hugging Face cache, offline: HF_HUB_OFFLINE=1 HF_HUB_CACHE=... for a local cache)."""
    from ppspec_cli.operation.gather import gather_facts
    from ppspec_cli.operation.operation import Operation
    from ppspec_cli.planning.judge import judge
    from ppspec_cli.planning.profile import load_profile

    def preflight(prof, path: str):
        """The profile judged as on a login node: no installed vLLM, an empty environment."""
        return judge(gather_facts(Operation("check", path, offline=True, profile=prof), install=None, environ={}))

    out = []
    for path in sorted((REPO / "profiles").glob("*.yaml")):
        got: dict[str, dict[str, str]] = {}
        for v in (old_version, new_version):
            prof = load_profile(str(path))
            if prof.disaggregated:
                break
            prof = prof.model_copy(update={"engine_version": v})
            pf = preflight(prof, str(path))
            got[v] = {f.code: f.severity for f in pf.findings if f.code not in ("vllm-unverified",)}
        if len(got) < 2:
            out.append(
                f"- {path.name}: a disaggregated profile (both engines checked by `ppspec check`; not compared here)"
            )
            continue
        a, b = got[old_version], got[new_version]
        unread = [c for c in b if c.endswith("-unreadable")]
        moved = [f"+{c} ({b[c]})" for c in sorted(set(b) - set(a))] + [
            f"-{c} ({a[c]})" for c in sorted(set(a) - set(b))
        ]
        moved += [f"{c}: {a[c]} -> {b[c]}" for c in sorted(set(a) & set(b)) if a[c] != b[c]]
        note = f" (checkpoint metadata not in the cache: {', '.join(unread)})" if unread else ""
        verdicts = " -> ".join("refused" if "error" in got[v].values() else "ok" for v in (old_version, new_version))
        out.append(f"- {path.name}: {verdicts}; " + ("; ".join(moved) if moved else "same findings") + note)
    return out


def _emit(text: str, page: Path | None) -> None:
    if page is None:
        print(text, end="")
        return
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")


def _packs_proof(wheel: Path) -> tuple[str, int | None]:
    """The adapter packs proven against the release's source: the packs work's tool
    (`tools/prove_packs.py --wheel W --write --set-ranges`: exit 0 nothing needs a human, 1 something
    does, 2 the proof could not run), run when the checkout has it."""
    tool = REPO / "tools" / "prove_packs.py"
    if not tool.is_file():
        return (
            "packs: NOT PROVEN - tools/prove_packs.py is not in this checkout (issue 39 item 5): prove each patching "
            f"pack's anchors against {wheel.name} and set its range by hand",
            None,
        )
    p = subprocess.run([sys.executable, str(tool), "--wheel", str(wheel), "--write", "--set-ranges"], check=False)
    return f"packs: tools/prove_packs.py exited {p.returncode} (its 'needs a human' lines above)", p.returncode


def drill(version: str, wheel_dir: Path | None, page: Path | None) -> int:
    """Download the release's wheel, generate its table, compare with the previous release, write
    the release page, prove the packs, and print what needs a human. Timed."""
    t0 = time.monotonic()
    human: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        wd = wheel_dir or Path(tmp) / "wheels"
        wd.mkdir(parents=True, exist_ok=True)
        wheels = sorted(wd.glob(f"vllm-{version}-*.whl"))
        if not wheels:
            print(f"downloading vllm=={version} (no dependencies) into {wd}")
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    f"vllm=={version}",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-d",
                    str(wd),
                ],
                check=False,
            )
            wheels = sorted(wd.glob(f"vllm-{version}-*.whl"))
            if p.returncode != 0 or not wheels:
                print(f"vllm_arch_facts: pip could not download vllm=={version} (exit {p.returncode})", file=sys.stderr)
                return EXIT_STEP
        t1 = time.monotonic()
        code, doc, lost, out = generate(wheels[0], None, None, None, None)
        t2 = time.monotonic()
        if lost:
            human.append(
                f"{len(lost)} fact(s) lost without an acknowledgement (LOST lines above): fix the scanner or "
                "acknowledge each"
            )
        prev = _previous(version)
        proof, rc = _packs_proof(wheels[0])
        t3 = time.monotonic()
        if rc is None or rc != 0:
            human.append(proof)
        if prev is not None:
            text = release_page(prev, doc)
            _emit(text, page or REPO / "docs" / "releases" / f"vllm-{version}.md")
            human.append(
                f"read docs/releases/vllm-{version}.md (the verdict changes and the shipped profiles) and decide: a "
                "new rule, a pack, a docs line"
            )
        t4 = time.monotonic()
        _unknowns([(version, doc)])
        from ppspec_cli.knowledge.versions import verdict

        if not verdict(version).verified:
            human.append(
                f"add {'.'.join(version.split('.')[:2])} to knowledge/versions.py (VERIFIED_SERIES, VERIFIED_RANGE, "
                "NEWEST_VERIFIED), "
                "the [cuda] extra and docs/versions.md; run tests/test_arch_table.py and tests/test_release.py"
            )
    total = time.monotonic() - t0
    print(
        f"\ndrill for vLLM {version}: {total:.0f} s (download {t1 - t0:.0f} s, generate and compare {t2 - t1:.0f} s, "
        f"packs {t3 - t2:.0f} s, release page {t4 - t3:.0f} s); table {out}"
    )
    print("needs a human:")
    for h in human:
        print(f"  - {h}")
    return code if code else (EXIT_STEP if rc not in (None, 0) else 0)


if __name__ == "__main__":
    sys.exit(main())
