"""The bad-input corpus (tests/fixtures/bad/cases.yaml) through the CLI, as a user meets it.

Each case runs `ppspec check FILE --no-probes` (or `ppspec serve FILE --dry-run`) in a fresh, empty
working directory, with a memory cap and a time limit, and must end with the documented exit code
and a message a user can act on: one paragraph on stderr for unusable input (exit 2) or a launch
refusal, named findings on stdout for a bad checkpoint (exit 1). Never a traceback, never a raw
control or bidi character on the terminal, and nothing created in the working directory (so no
profile value was executed). Unit-level detail of each parser lives in test_profile.py,
test_checkpoint.py and test_hub.py; this file is the end-to-end contract over one corpus.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs the CLI once per corpus file

BAD = Path(__file__).resolve().parent / "fixtures" / "bad"
CASES = yaml.safe_load((BAD / "cases.yaml").read_text(encoding="utf-8"))
#: Address space one CLI run may use: `check` reads metadata only, so a run that needs more is a memory bomb.
MEMORY_CAP = 4 << 30
TIME_LIMIT_S = 60
#: Characters that must never reach a terminal raw: they hide or reorder what the user reads.
RAW_FORBIDDEN = ["\u202e", "\u202d", "\u2066", "\u2067", "\u200b", "\x00", "\x1b"]


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_case(case: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = dict(os.environ)
    env.pop("PPSPEC_DEBUG", None)
    env.update({"HF_HUB_OFFLINE": "1", "COLUMNS": "200", "PPSPEC_CACHE": str(tmp_path / "cache")})
    for k, v in (case.get("env") or {}).items():
        if v == "{empty}":
            v = str(tmp_path / f"empty-{k}")
            os.mkdir(v)
        env[k] = v
    cmd = ["serve", str(BAD / "profiles" / case["file"]), "--dry-run"] if case.get("command") == "dry-run" else ["check", str(BAD / "profiles" / case["file"]), "--no-probes"]
    t0 = time.monotonic()
    cp = subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", *cmd],
        capture_output=True, text=True, errors="surrogateescape", env=env, cwd=cwd, timeout=TIME_LIMIT_S, preexec_fn=_cap_memory,
    )
    return cp, time.monotonic() - t0


def assert_one_paragraph(stderr: str) -> None:
    """The shape of every user-facing error: `error: what`, then `where:`/`fix:` lines, no gaps."""
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("ppspec: ")]
    text = "\n".join(lines)
    assert text.startswith("error: "), stderr
    assert "\n\n" not in text and "fix: " in text, stderr
    assert len(lines) <= 12, stderr


@pytest.mark.parametrize("case", CASES, ids=[c["file"].removesuffix(".yaml") for c in CASES])
def test_bad_input(case, tmp_path):
    cp, seconds = run_case(case, tmp_path)
    out = cp.stdout + cp.stderr
    if case.get("known_bug") and (cp.returncode == 3 or any(c in out for c in RAW_FORBIDDEN)):
        pytest.xfail(f"known bug, reported to the lead: {case['known_bug']}")
    assert cp.returncode == case["exit"], f"exit {cp.returncode}, expected {case['exit']}\n{out[-3000:]}"
    assert "Traceback" not in out, out
    assert "error: unexpected" not in cp.stderr, out  # the CLI's wording for an internal error (exit 3)
    for ch in RAW_FORBIDDEN:
        assert ch not in out, f"raw {ch!r} reached the terminal:\n{out[-2000:]}"
    for needle in case.get("expect", []):
        assert needle in out, f"{needle!r} not in the output:\n{out[-3000:]}"
    if cp.returncode == 2 or case.get("command") == "dry-run" and cp.returncode:
        assert_one_paragraph(cp.stderr)
    for code in case.get("codes", []):
        assert code in cp.stdout, f"finding {code} not reported:\n{cp.stdout[-3000:]}"
    if cp.returncode == 1 and case.get("codes"):
        assert "FAIL:" in cp.stdout
    assert os.listdir(tmp_path / "cwd") == [], "the run created files in its working directory (a profile value was executed?)"
    assert seconds < 30, f"took {seconds:.1f}s"


def test_every_corpus_file_has_a_case():
    """A file added to the corpus without an expectation would silently not be tested."""
    files = {p.name for p in (BAD / "profiles").iterdir()}
    assert files == {c["file"] for c in CASES}
