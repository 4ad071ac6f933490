"""Generate ppspec's architecture table for one vLLM release from vLLM's own source.

    python tools/vllm_arch_facts.py --wheel vllm-0.33.0-...whl            # a release wheel
    python tools/vllm_arch_facts.py --source /path/site-packages          # a dir holding vllm/
    python tools/vllm_arch_facts.py --wheel W --out ppspec_cli/knowledge/arch/vllm-0.33.0.json
    python tools/vllm_arch_facts.py --unknowns                            # what the committed tables leave unknown

The source is read with `ast` only (ppspec_cli.knowledge.archscan for every architecture,
ppspec_cli.knowledge.drafterscan for the drafter side): nothing of vLLM is imported,
so any platform's wheel is read on any machine. The output carries the release's version and,
where the wheel's `vllm/_version.py` has one, its git commit. Review the diff against the
previous release's table before committing (docs/adapters.md, "A new vLLM release").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ppspec_cli.knowledge import archscan, drafterscan  # noqa: E402
from ppspec_cli.knowledge.archtable import SCHEMA, TABLE_DIR, table_document  # noqa: E402

#: The parts of a wheel the scan reads (the rest is never unpacked).
WHEEL_PARTS = (
    "vllm/model_executor/",
    "vllm/models/",
    "vllm/config/",
    "vllm/v1/",
    "vllm/transformers_utils/configs/",
    "vllm/_version.py",
)


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
        help="print, per committed table, the SupportsPP architectures whose PP verdict stays unknown",
    )
    src.add_argument("--wheel", type=Path, help="a vLLM wheel (.whl)")
    src.add_argument(
        "--source", type=Path, help="a directory holding the vllm package (site-packages, an unpacked wheel)"
    )
    ap.add_argument(
        "--origin", help="what the table says it was generated from (default: the wheel's file name, or 'source <dir>')"
    )
    ap.add_argument("--out", type=Path, help=f"where to write (default: {TABLE_DIR}/vllm-<version>.json)")
    a = ap.parse_args(argv)
    if a.unknowns:
        return _unknowns()
    with tempfile.TemporaryDirectory() as tmp:
        root = a.source
        origin = a.origin or (f"wheel {a.wheel.name}" if a.wheel else f"source {a.source}")
        if a.wheel:
            root = Path(tmp)
            _unpack(a.wheel, root)
        doc = table_document(drafterscan.scan(root), *archscan.source_version(root), origin=origin)
    out = a.out or TABLE_DIR / f"vllm-{doc['vllm_version']}.json"
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"{out}: schema {SCHEMA}, vLLM {doc['vllm_version']} ({doc['commit'] or 'no commit in the wheel'}): {len(doc['targets'])} targets, {len(doc['drafters'])} drafters"
    )
    return 0


def _unknowns() -> int:
    """Per committed release: SupportsPP targets whose tap relay over PP is unknown although they
    are SupportsEagle3 (EAGLE3/DFlash/DSpark at PP > 1), and those whose last-stage embedding is
    unknown (a drafter sharing the target's embedding at PP > 1); a class whose language model or
    embedding rule the checkpoint's config decides is counted as decided, and one vLLM's drafter
    load refuses first (no `.model`: `embed_not_needed`) as not needed. Also: the architectures
    whose eagle3 drafter load vLLM refuses at PP = 1, on the V1 runner (CPU) and on Model Runner
    V2 (GPU) (archtable.drafter_load_verdict)."""
    from ppspec_cli.knowledge import archtable

    for v in archtable.committed_versions():
        t = archtable.committed(v)
        relay: set[str] = set()
        embed: set[str] = set()
        refused_v1: set[str] = set()
        refused_v2: set[str] = set()
        for arch, e in t.doc["targets"].items():
            for f in e["platforms"].values():
                if not f.get("class") or f.get("supports_pp") is False or f.get("language_model_from"):
                    continue
                if f.get("supports_eagle3") and archtable.relay_verdict(f)[0] == "unknown":
                    relay.add(arch)
                if f.get("embed_last_stage") is None and not f.get("embed_rule") and not f.get("embed_not_needed"):
                    embed.add(arch)
                if archtable.drafter_load_verdict(f, t.doc.get("checks") or {}, 1, "eagle3", "v1")[0] == "refused":
                    refused_v1.add(arch)
                if archtable.drafter_load_verdict(f, t.doc.get("checks") or {}, 1, "eagle3", "v2")[0] == "refused":
                    refused_v2.add(arch)
        print(
            f"vLLM {v}: {t.counts[0]} architectures; relay unknown {len(relay)} {sorted(relay)}; "
            f"last-stage embedding unknown {len(embed)} {sorted(embed)}; eagle3 drafter load refused at PP=1: V1 runner {len(refused_v1)}, Model Runner V2 {len(refused_v2)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
