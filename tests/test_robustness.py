"""The robustness suite: hostile input through ppspec, one file (drivers in tests/fixtures/bad/).

1. The bad-input corpus (tests/fixtures/bad/cases.yaml): each profile through `ppspec check FILE
   --no-probes` (or `ppspec serve FILE --dry-run`) in a fresh, empty working directory, under a
   memory cap and a time limit. Each must end with the documented exit code and a message a user can
   act on: one paragraph on stderr for unusable input (exit 2) or a launch refusal, named findings on
   stdout for a bad checkpoint (exit 1). Never a traceback, never a raw control or bidi character on
   the terminal, nothing created in the working directory (so no profile value was executed).
   The CLI runs in process through its real entry point (tests/inprocess.py); a case that sets a
   variable huggingface_hub reads at import (HF_ENDPOINT, HF_HUB_CACHE) runs in a fresh interpreter.
2. The preflight fuzz (ppspec_fuzz.py): generated profiles over generated checkpoints through all
   that check / plan / serve --dry-run do in process; nothing but PpspecError, no hang.
3. The attacker suite (ppspec_attacks.py): named and generated cases per class of docs/security.md's
   security section (data loss, secrets, injections, hangs, unhandled); every class counts 0.

benchmarks/robustness.py runs 2 and 3 at scale, plus the serve faults of test_faults.py. Unit-level
detail of each parser lives in test_profile.py, test_checkpoint.py and test_hub.py.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import inprocess
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

BAD = Path(__file__).resolve().parent / "fixtures" / "bad"
sys.path.insert(0, str(BAD))
import ppspec_attacks as PA  # noqa: E402
import ppspec_fuzz as F  # noqa: E402

pytestmark = pytest.mark.slow  # runs the CLI over a corpus, the fuzz and the attacker suite (about a minute)

# ---------------------------------------------------------------------------------------------
# 1. the bad-input corpus

CASES = yaml.safe_load((BAD / "cases.yaml").read_text(encoding="utf-8"))
#: Address space one CLI run may use: `check` reads metadata only, so a run that needs more is a memory bomb.
MEMORY_CAP = 4 << 30
TIME_LIMIT_S = 60
#: Characters that must never reach a terminal raw: they hide or reorder what the user reads.
RAW_FORBIDDEN = ["\u202e", "\u202d", "\u2066", "\u2067", "\u200b", "\x00", "\x1b"]


class _TimeLimit(BaseException):
    """A corpus case ran past TIME_LIMIT_S (a BaseException: the CLI's `except Exception` must not eat it)."""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _case_env(case: dict, tmp_path: Path) -> dict[str, str]:
    env = {"HF_HUB_OFFLINE": "1", "COLUMNS": "200", "PPSPEC_CACHE": str(tmp_path / "cache")}
    for k, v in (case.get("env") or {}).items():
        if v == "{empty}":
            v = str(tmp_path / f"empty-{k}")
            os.mkdir(v)
        env[k] = v
    return env


def _case_argv(case: dict) -> list[str]:
    path = str(BAD / "profiles" / case["file"])
    return ["serve", path, "--dry-run"] if case.get("command") == "dry-run" else ["check", path, "--no-probes"]


def _needs_subprocess(case: dict) -> bool:
    return any(k in inprocess.IMPORT_TIME_ENV for k in case.get("env") or {})


def run_case(case: dict, tmp_path: Path) -> tuple[inprocess.Result, float]:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = _case_env(case, tmp_path)
    t0 = time.monotonic()
    if _needs_subprocess(case):
        full = dict(os.environ)
        full.pop("PPSPEC_DEBUG", None)
        full.update(env)
        cp = subprocess.run(
            [sys.executable, "-m", "ppspec_cli.cli", *_case_argv(case)],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            env=full,
            cwd=cwd,
            timeout=TIME_LIMIT_S,
            preexec_fn=_cap_memory,
        )
        return inprocess.Result(cp.returncode, cp.stdout, cp.stderr), time.monotonic() - t0

    def overtime(_sig, _frame):
        raise _TimeLimit()

    old_alarm = signal.signal(signal.SIGALRM, overtime)
    signal.alarm(TIME_LIMIT_S)
    old_as = F._limit_memory()  # the process' current size plus F.MEMORY_HEADROOM
    try:
        res = inprocess.run(*_case_argv(case), env=env, cwd=cwd)
    except _TimeLimit:
        pytest.fail(f"{case['file']}: no answer within {TIME_LIMIT_S}s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_alarm)
        F._restore_memory(old_as)
    return res, time.monotonic() - t0


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
    if cp.returncode == 2:
        assert_one_paragraph(cp.stderr)
    elif case.get("command") == "dry-run" and cp.returncode:
        if (
            "would refuse this profile" not in out
        ):  # else: the verdict rendered next to the launch serve would not start
            assert_one_paragraph(
                cp.stderr
            )  # a launch that cannot even be built (a secret, a key that is no option name)
    for code in case.get("codes", []):
        assert code in cp.stdout, f"finding {code} not reported:\n{cp.stdout[-3000:]}"
    if cp.returncode == 1 and case.get("codes"):
        assert "FAIL:" in cp.stdout
    assert os.listdir(tmp_path / "cwd") == [], (
        "the run created files in its working directory (a profile value was executed?)"
    )
    assert seconds < 30, f"took {seconds:.1f}s"


def test_every_corpus_file_has_a_case():
    """A file added to the corpus without an expectation would silently not be tested."""
    files = {p.name for p in (BAD / "profiles").iterdir()}
    assert files == {c["file"] for c in CASES}


def test_in_process_runs_keep_the_entry_points_answers(tmp_path):
    """The in-process runner is the real entry point: an internal error is exit 3 with its one-line
    wording (which test_bad_input rejects), a usage error exit 2, a variable read at import refused."""
    from ppspec_cli.planning import profile as profile_mod

    p = tmp_path / "p.yaml"
    p.write_text("name: x\ntarget: {model: ./t}\n")
    real = profile_mod.load_profile
    try:
        profile_mod.load_profile = lambda *a, **k: {}["boom"]
        res = inprocess.run("check", str(p), "--no-probes")
    finally:
        profile_mod.load_profile = real
    assert res.returncode == 3 and "error: unexpected KeyError" in res.stderr, res
    assert inprocess.run("check", str(p), "--bogus").returncode == 2
    with pytest.raises(RuntimeError, match="HF_ENDPOINT"):
        inprocess.run("check", str(p), env={"HF_ENDPOINT": "http://127.0.0.1:9"})


# ---------------------------------------------------------------------------------------------
# 2. the preflight fuzz

#: Inputs per CI run (about 0.1 s each here); PPSPEC_FUZZ_EXAMPLES overrides.
EXAMPLES = int(os.environ.get("PPSPEC_FUZZ_EXAMPLES", "300"))
# CI replays a fixed sequence (a landing must not depend on luck); developers explore new inputs,
# and benchmarks/robustness.py explores at scale.
DERANDOMIZE = bool(os.environ.get("CI"))


def test_preflight_never_crashes_or_hangs(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path / "cache"))  # `demo:` refs never build into the user's cache
    stats = F.Stats()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def prop(data):
        case = F.draw_case(data)
        try:
            F.run_case(case, stats)
        except Exception as e:  # noqa: BLE001
            if F.known_bug(e) is None:
                raise  # hypothesis shrinks it and shows the smallest failing input

    prop()
    with capsys.disabled():
        print(f"\n{stats.summary()}")
    assert stats.tried >= EXAMPLES
    assert not stats.crashes and not stats.hangs
    if stats.known:
        pytest.xfail(
            "known bugs (reported to the lead) reproduced: "
            + "; ".join(f"{k}: {F.KNOWN_BUGS[k][0]}" for k in stats.known)
        )


def test_the_fuzz_guards_catch_a_hang_and_a_crash(monkeypatch):
    """The property can fail: a pipeline that hangs or raises something else is reported."""
    import ppspec_cli.planning.profile as profile_mod

    monkeypatch.setattr(F, "HANG_S", 1)
    stats = F.Stats()
    case = F.Case("name: x\ntarget: {model: ./t}\n")

    def hang(*a, **k):
        while True:
            pass

    monkeypatch.setattr(profile_mod, "parse_profile", hang)
    with pytest.raises(F.Hang):
        F.run_case(case, stats)
    monkeypatch.setattr(profile_mod, "parse_profile", lambda *a, **k: {}["boom"])
    with pytest.raises(KeyError):
        F.run_case(case, stats)
    assert len(stats.hangs) == 1 and stats.crashes == ["KeyError: 'boom'"]


# ---------------------------------------------------------------------------------------------
# 3. the attacker suite


def test_attacker_suite_finds_nothing():
    t = PA.run_all(25, seed=12)
    assert all(t.cases[c] > 0 for c in PA.CLASSES), t.cases
    assert sum(t.problems.values()) == 0, "\n".join(t.notes)


def test_the_attacker_cli_guard_counts_a_crash_and_a_hang(monkeypatch, tmp_path):
    """The in-process CLI cases can fail: a documented answer counts nothing, an internal error
    (exit 3) is `unhandled`, a run past its deadline a hang that the alarm stops."""
    import ppspec_cli.planning.profile as profile_mod

    monkeypatch.setattr(PA, "HANG_S", 0.5)  # the alarm: int(0.5 * 4) = 2 s
    t = PA.Tally()
    PA.cli_run(t, ["plan", str(tmp_path / "none.yaml"), "--json"], tmp_path)  # exit 2: no such file
    assert sum(t.problems.values()) == 0, t.notes

    def hang(*a, **k):
        while True:
            time.sleep(0.05)

    p = tmp_path / "p.yaml"
    p.write_text("name: x\ntarget: {model: ./t}\n")
    monkeypatch.setattr(profile_mod, "load_profile", lambda *a, **k: {}["boom"])
    PA.cli_run(t, ["check", str(p), "--no-probes"], tmp_path)
    assert t.problems == {"unhandled": 1}, t.notes
    monkeypatch.setattr(profile_mod, "load_profile", hang)
    PA.cli_run(t, ["check", str(p), "--no-probes"], tmp_path)
    assert t.problems["unhandled"] == 2 and t.problems["hangs"] == 1, t.notes
    assert any("did not finish" in n for n in t.notes), t.notes
