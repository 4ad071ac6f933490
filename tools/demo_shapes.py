#!/usr/bin/env python3
"""The demo models' shapes, shipped beside the modules that register them
(ppspec_cli/demo/demo_shapes.json for the built-in models, ppspec_kit/demo_shapes.json for the
kit's): `check`, `plan` and `--predict` of a demo profile read them instead of running the builder
on fake tensors (torch imported, seconds of CPU) in every fresh cache.

    PYTHONPATH=. python tools/demo_shapes.py            # rewrite the files
    PYTHONPATH=. python tools/demo_shapes.py --check    # exit 1 if any is stale

Run it after changing a demo model's spec, its builder or FACTORY_VERSION (each entry carries the
key of all three; a stale entry is a miss, described afresh, never trusted). tests/test_demo.py
checks the files are current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import ppspec_kit  # noqa: E402, F401 - registers the kit's models
from ppspec_cli.demo import factory  # noqa: E402


def shipped_texts() -> dict[Path, str]:
    """Each shipped file's text, from the builders as they are now."""
    docs: dict[Path, dict] = {}
    for name, module in sorted(factory.registered_models().items()):
        path = factory.shipped_shapes_file(module)
        if path is None:
            raise SystemExit(f"demo model {name!r}: its builder's module {module} has no file to ship shapes beside")
        docs.setdefault(path, {"models": {}})["models"][name] = factory.shapes_doc(name, factory.described_afresh(name))
    return {p: json.dumps(d, sort_keys=True, indent=1) + "\n" for p, d in docs.items()}


def stale(texts: dict[Path, str]) -> list[Path]:
    return [p for p, t in texts.items() if not p.is_file() or p.read_text(encoding="utf-8") != t]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a shipped file is not current; write nothing")
    args = ap.parse_args(argv)
    texts = shipped_texts()
    if args.check:
        old = stale(texts)
        for p in old:
            print(f"stale: {p.relative_to(REPO)} (run: PYTHONPATH=. python tools/demo_shapes.py)", file=sys.stderr)
        return 1 if old else 0
    for p, t in texts.items():
        p.write_text(t, encoding="utf-8")
        n = t.count('"key"')
        print(f"wrote {p.relative_to(REPO)}: {n} model(s), {len(t) // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
