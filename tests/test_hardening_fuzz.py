"""Property-based fuzz of the preflight (generators in tests/fixtures/bad/ppspec_fuzz.py): generated
profiles, plausible and implausible, over generated checkpoints (random config.json, index and
safetensors header bytes). Everything `check`, `plan` and `serve --dry-run` do in process —
parse_profile, resolve, run_rules, the renderers, build_launch, the plan file, the drafter overlay —
must raise nothing but PpspecError and finish each input within ppspec_fuzz.HANG_S seconds (a
SIGALRM guard: hypothesis' own deadline cannot stop a real hang) and a memory cap.

benchmarks/robustness.py runs the same property over many more inputs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "bad"))
import ppspec_fuzz as F  # noqa: E402

pytestmark = pytest.mark.slow  # runs the CLI on generated profiles

#: Inputs per CI run (about 0.1 s each here); PPSPEC_FUZZ_EXAMPLES overrides.
EXAMPLES = int(os.environ.get("PPSPEC_FUZZ_EXAMPLES", "300"))
# CI replays a fixed sequence (a landing must not depend on luck); developers explore new inputs,
# and benchmarks/robustness.py explores at scale.
DERANDOMIZE = bool(os.environ.get("CI"))


def test_preflight_never_crashes_or_hangs(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path / "cache"))  # `demo:` refs never build into the user's cache
    stats = F.Stats()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE, phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
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
        pytest.xfail("known bugs (reported to the lead) reproduced: " + "; ".join(f"{k}: {F.KNOWN_BUGS[k][0]}" for k in stats.known))


def test_the_guards_catch_a_hang_and_a_crash(monkeypatch):
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
