"""Bounded reads (ppspec_cli/io/safeio.py), the one way ppspec reads an input file: every hostile file
type and size is refused before a byte is read, JSON nesting is bounded, and the CLI turns each
refusal into one message and exit 2 (never a hang, never a traceback)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ppspec_cli.checkpoint.reader import load_local
from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

REPO = Path(__file__).resolve().parent.parent


def test_fifo_is_refused_without_blocking(tmp_path):
    f = tmp_path / "fifo"
    os.mkfifo(f)
    with pytest.raises(PpspecError, match="a FIFO, not a regular file"):
        safeio.read_bytes(f, limit=100, what="profile")


def test_device_and_socket_and_directory_are_refused(tmp_path):
    with pytest.raises(PpspecError, match="character device"):
        safeio.read_bytes("/dev/zero", limit=100)
    s = socket.socket(socket.AF_UNIX)
    sp = tmp_path / "sock"
    s.bind(str(sp))
    try:
        with pytest.raises(PpspecError, match="a socket, not a regular file"):
            safeio.read_bytes(sp, limit=100)
    finally:
        s.close()
    with pytest.raises(PpspecError, match="directory"):
        safeio.read_bytes(tmp_path, limit=100)


def test_size_is_checked_before_reading(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GiB announced
    reads = []
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real(fd, n))
    with pytest.raises(PpspecError, match="larger than 8 MiB"):
        safeio.read_bytes(big, limit=8 << 20, what="config.json")
    assert reads == []


def test_symlink_refused_where_it_matters(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("{}")
    link = tmp_path / "l.json"
    link.symlink_to(target)
    assert safeio.read_json(link, limit=100) == {}
    with pytest.raises(PpspecError, match="symbolic link"):
        safeio.read_json(link, limit=100, follow_symlinks=False)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper than the 64 levels"),
        ('{"a": ' * 70 + "1" + "}" * 70, "nests 70 levels"),
        ('{"x": NaN}', "not valid JSON"),
        ('{"x": -Infinity}', "not valid JSON"),
        ('{"x": 1', "not valid JSON (line 1"),
    ],
)
def test_json_bounds(text, needle):
    with pytest.raises(PpspecError, match=needle.replace("(", r"\(")):
        safeio.parse_json(text, what="config.json")


def test_depth_ignores_brackets_inside_strings():
    assert safeio.json_depth(safeio.parse_json('{"a": "[[[[[[[[[[{{{{"}')) == 1
    assert safeio.json_depth(safeio.parse_json('[[], {"a": [1, {"b": []}]}]')) == 5
    assert safeio.json_depth(3) == 0
    assert safeio.parse_json('{"a": "' + "[" * 1000 + '\\"]"}') == {"a": "[" * 1000 + '"]'}


def _shard(path: Path, tensors: int) -> None:
    header = {
        f"{path.stem}{i}": {"dtype": "F16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i in range(tensors)
    }
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (2 * tensors))


def test_safetensors_tensor_count_is_bounded_across_shards(tmp_path, monkeypatch):
    import ppspec_cli.checkpoint.reader as C

    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["X"], "num_hidden_layers": 1, "hidden_size": 8, "vocab_size": 8})
    )
    _shard(tmp_path / "a.safetensors", 6)
    _shard(tmp_path / "b.safetensors", 6)
    monkeypatch.setattr(C, "MAX_TENSORS", 10)  # each shard alone is under the bound, both together are not
    ck = load_local("m", tmp_path)
    assert [g.code for g in ck.gaps] == ["over-read-limit"] and "more than 10 tensors" in ck.gaps[0].message
    assert ck.tensors is None


def test_safetensors_fifo_shard_is_a_gap_not_a_hang(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["X"], "num_hidden_layers": 1, "hidden_size": 8, "vocab_size": 8})
    )
    _shard(tmp_path / "a.safetensors", 1)
    os.mkfifo(tmp_path / "b.safetensors")
    ck = load_local("m", tmp_path)  # the FIFO is not a file: not read
    assert ck.tensors is not None and set(ck.tensors) == {"a0"}


@pytest.mark.slow  # runs the CLI in a subprocess
@pytest.mark.parametrize("kind", ["fifo", "devzero", "deep-config"])
def test_cli_refuses_hostile_files_with_exit_2_or_1(tmp_path, kind):
    """End to end: a profile that is a FIFO or /dev/zero, a config nested 100k deep: one message, no hang."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    if kind == "fifo":
        prof = tmp_path / "p.yaml"
        os.mkfifo(prof)
    elif kind == "devzero":
        prof = Path("/dev/zero")
    else:
        m = tmp_path / "m"
        m.mkdir()
        (m / "config.json").write_text("[" * 100_000 + "]" * 100_000)
        prof = tmp_path / "p.yaml"
        prof.write_text(f"name: x\ntarget:\n  model: {m}\nplatform: cpu\n")
    r = subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", "check", str(prof)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode in (1, 2), r.stderr
    assert "Traceback" not in r.stderr + r.stdout and "unexpected" not in (r.stderr + r.stdout).lower()
    msg = r.stderr + r.stdout
    assert {"fifo": "FIFO", "devzero": "character device", "deep-config": "nests deeper than the 64 levels"}[
        kind
    ] in msg
