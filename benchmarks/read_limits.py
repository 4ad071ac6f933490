"""How long ppspec takes to read the flagship checkpoints' indexes, and a file at each read limit.

    .venv/bin/python benchmarks/read_limits.py

Prints seconds per read (generated files of the real sizes: tests/flagship.py) and the ratio of the
largest real index to its limit. A figure to watch, not an assert: the issue's target is "a 13 MB index
parses in well under a second"."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from flagship import DEEPSEEK_V3, KIMI_K2, write_index  # noqa: E402

from ppspec_cli.checkpoint import reader  # noqa: E402


def main() -> None:
    cfg = ROOT / "tests" / "fixtures" / "models" / "deepseek-ai__DeepSeek-V3" / "config.json"
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in (("DeepSeek-V3", DEEPSEEK_V3), ("Kimi-K2", KIMI_K2)):
            d = Path(tmp) / name
            d.mkdir()
            shutil.copy(cfg, d / "config.json")
            n, size = write_index(d / "model.safetensors.index.json", *shape)
            best = min(_timed(lambda d=d: reader.load_local(str(d), d)) for _ in range(3))
            print(
                f"{name:12s} index {size / 1e6:5.1f} MB, {n:7d} tensors: read in {best:.2f} s (best of 3); limit "
                f"{reader.MAX_INDEX_BYTES >> 20} MiB = {reader.MAX_INDEX_BYTES / size:.1f}x this file"
            )


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
