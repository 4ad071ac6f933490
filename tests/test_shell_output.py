"""Every line ppspec prints for a shell is rendered by ppspec_cli/io/shellout.py and stays ONE inert
line when pasted, whatever a profile or server put into it. Proven by running the lines: `sh -n`
parses each, comment lines are executed and do nothing, command lines are executed with a fake
engine that records its argv (the hostile values arrive byte-exact, and no canary file appears)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import shellout
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.running.serve.supervise import curl_line

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "fixtures" / "bad"))
import ppspec_faults as PF  # noqa: E402

#: Named hostile values: each tries to run `touch CANARY` or to drive the terminal when pasted.
HOSTILE = [
    "a\ntouch CANARY",
    "'; touch CANARY; '",
    "$(touch CANARY)",
    "`touch CANARY`",
    '"; touch CANARY; "',
    "\r\x1b[2K\x1b[1A touch CANARY",
    "x\x1b]0;pwned\x07y",
    "safe\u202e;touch CANARY\u202c",
    "#\n#\ntouch CANARY #",
    "\\\ntouch CANARY",
    "\u2028touch CANARY\u0085",
    "ünïcødé ok & | > < * ? ~ !",
]


def _sh(line: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=30, env=env or {"PATH": "/usr/bin:/bin"}
    )


def _one_printable_line(line: str) -> None:
    assert "\n" not in line and "\r" not in line and line.isprintable(), repr(line)


@pytest.fixture
def recorder(tmp_path):
    """A fake command that writes its argv and $HOSTILE_ENV as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rec = bin_dir / "record"
    rec.write_text(
        f"#!{sys.executable}\nimport json, os, sys\njson.dump({{'argv': sys.argv[1:], 'env': "
        "os.environ.get('HOSTILE_ENV')}, open(os.environ['OUT'], 'w'))\n"
    )
    rec.chmod(0o755)
    return rec


@pytest.mark.parametrize("value", HOSTILE)
def test_command_and_comment_lines_are_inert(tmp_path, recorder, value):
    line = shellout.command([str(recorder), "--x", value], {"HOSTILE_ENV": value})
    _one_printable_line(line)
    assert _sh("set -n; " + line, tmp_path).returncode == 0
    out = tmp_path / "out.json"
    r = _sh(line, tmp_path, {"PATH": "/usr/bin:/bin", "OUT": str(out)})
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    want = value.rstrip("\n")  # command substitution drops trailing newlines (documented)
    assert got == {"argv": ["--x", want], "env": want}
    c = shellout.comment(f"warning x: {value}")
    _one_printable_line(c)
    assert _sh(c, tmp_path).returncode == 0
    assert not (tmp_path / "CANARY").exists()


@pytest.mark.parametrize("value", HOSTILE)
def test_curl_line_is_inert(tmp_path, value):
    line = curl_line("http://127.0.0.1:8000", value, "MY_KEY")
    _one_printable_line(line)
    assert _sh("set -n; " + line, tmp_path).returncode == 0
    # run it with `curl` replaced by a recorder of its -d body
    fake = tmp_path / "curl"
    fake.write_text(
        f"#!{sys.executable}\nimport sys, json\nargs = sys.argv[1:]\nopen('body.json', "
        "'w').write(args[args.index('-d') + 1])\n"
    )
    fake.chmod(0o755)
    r = _sh(line, tmp_path, {"PATH": f"{tmp_path}:/usr/bin:/bin", "MY_KEY": "k"})
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "body.json").read_text())["model"] == value
    assert not (tmp_path / "CANARY").exists()


@pytest.mark.parametrize("field", ["host", "served_model_name"])
@pytest.mark.parametrize("value", ["a\nb", "x\x1b[31m", "m\u202e", "t\x00"])
def test_control_characters_in_host_and_served_name_are_refused(field, value):
    doc = {"name": "p", "target": {"model": "/m"}, "server": {field: value}}
    with pytest.raises(PpspecError, match="non-printable"):
        parse_profile(yaml.safe_dump(doc))


@pytest.mark.slow  # runs the CLI in a subprocess
def test_dry_run_output_is_inert_end_to_end(tmp_path, recorder):
    """`serve --dry-run` of a profile whose env and engine values are hostile: every printed line is
    one printable line that `sh -n` accepts; comments do nothing; the command reaches the (fake)
    engine with the exact values."""
    PF.write_target(tmp_path / "t")
    value = "a'b\"c $(touch CANARY) `touch CANARY`;\x1b[2J\u202e"
    prof = {
        "name": "dry",
        "target": {"model": str(tmp_path / "t")},
        "platform": "cuda",
        "env": {"HOSTILE_ENV": value},
        "engine": {"served-model-name-x": value},
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    env = PF.ppspec_env({"PPSPEC_VLLM_EXECUTABLE": str(recorder), "PYTHONPATH": str(REPO)})
    cp = subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", "serve", str(tmp_path / "p.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    lines = [ln for ln in cp.stdout.split("\n") if ln]
    assert lines, cp.stderr
    commands = [ln for ln in lines if not ln.startswith("#")]
    assert len(commands) == 1, lines
    for ln in lines:
        _one_printable_line(ln)
        assert _sh("set -n; " + ln, tmp_path).returncode == 0, ln
        if ln.startswith("#"):
            assert _sh(ln, tmp_path).returncode == 0
    out = tmp_path / "out.json"
    r = _sh(commands[0], tmp_path, {"PATH": "/usr/bin:/bin", "OUT": str(out)})
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["env"] == value and value in got["argv"]
    assert not (tmp_path / "CANARY").exists()
