"""Every ppspec writer against every kind of thing that can already be at its path.

A writer writes a temporary file beside the path and renames it over: that must only ever replace
a regular file. A character device or FIFO the user names (`--out /dev/null`, a named pipe) is
written THROUGH, never replaced (issue 32: refusing them broke normal use); /dev/stdout and
/dev/stderr write to that descriptor. A socket, directory or symlink at the path is refused (exit
1/2, the path named), left exactly as it was, and no temporary file stays behind; a symlink is
never followed into a replacement. The device nodes are
private ones made with mknod in the test's own directory (same numbers as /dev/null and /dev/full):
no test ever writes to this machine's real /dev.

The CLI runs in process (typer's runner): no process boundary is under test here."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import inprocess
import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

KINDS = ["socket", "symlink", "dangling-symlink", "directory"]
#: Written through, never replaced (chardev-full: written through and refused by the device, ENOSPC).
THROUGH = ["chardev-null", "chardev-full", "fifo"]


def _cli(args: list[str]) -> tuple[int, str]:
    """The real entry point in process (tests/inprocess.py): exit code and everything printed."""
    r = inprocess.run(*args)
    return r.returncode, r.stdout + r.stderr


def _make(kind: str, path: Path) -> tuple[int, int]:
    """Put a `kind` at `path`; returns (inode, mode) to compare after the write attempt."""
    if kind.startswith("chardev"):
        if os.geteuid() != 0:
            pytest.fail("the device-node cases need root (mknod), as CI runs")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3 if kind == "chardev-null" else 7))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "symlink":
        (path.parent / "victim.txt").write_text("keep me\n")
        path.symlink_to(path.parent / "victim.txt")
    elif kind == "dangling-symlink":
        path.symlink_to(path.parent / "nowhere" / "x")
    elif kind == "directory":
        path.mkdir()
    st = os.lstat(path)
    return st.st_ino, st.st_mode


def _unchanged(path: Path, before: tuple[int, int]) -> None:
    st = os.lstat(path)
    assert (st.st_ino, st.st_mode) == before, f"{path} was replaced"
    if (path.parent / "victim.txt").exists():
        assert (path.parent / "victim.txt").read_text() == "keep me\n", "the symlink was followed"
    leftovers = [n for n in os.listdir(path.parent) if n.endswith(".ppspec-tmp")]
    assert not leftovers, leftovers


@pytest.mark.parametrize("kind", KINDS)
def test_write_text_never_replaces_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "out"
    before = _make(kind, path)
    with pytest.raises(PpspecError, match="cannot write") as e:
        safeio.write_text(path, "x\n", what="report")
    assert str(path) in e.value.where
    _unchanged(path, before)


def test_write_text_replaces_a_regular_file_and_creates_a_new_one(tmp_path):
    old = tmp_path / "old"
    old.write_text("before\n")
    safeio.write_text(old, "after\n")
    safeio.write_text(tmp_path / "new", "fresh\n")
    assert old.read_text() == "after\n" and (tmp_path / "new").read_text() == "fresh\n"
    assert sorted(os.listdir(tmp_path)) == ["new", "old"]


def test_a_failed_write_is_an_error_with_no_partial_file(tmp_path, monkeypatch):
    """ENOSPC at flush time (as a full disk gives it) is one error; nothing is renamed into place."""
    target = tmp_path / "out"
    target.write_text("intact\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(PpspecError, match="No space left"):
        safeio.write_text(target, "new\n")
    assert target.read_text() == "intact\n"
    assert os.listdir(tmp_path) == ["out"]


def _drain(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader at the FIFO (as `cat fifo` would be), collecting what is written through it."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


@pytest.mark.parametrize("kind", THROUGH)
def test_write_text_writes_through_a_device_or_fifo_and_never_replaces_it(tmp_path, kind):
    path = tmp_path / "out"
    before = _make(kind, path)
    reader = _drain(path) if kind == "fifo" else None
    if kind == "chardev-full":
        with pytest.raises(PpspecError, match="No space left"):
            safeio.write_text(path, "x\n", what="report", through=True)
    else:
        safeio.write_text(path, "x\n", what="report", through=True)
    if reader:
        reader[0].join(10)
        assert reader[1] == [b"x\n"]
    _unchanged(path, before)


@pytest.mark.parametrize("kind", THROUGH)
def test_ppspecs_own_files_are_never_written_through(tmp_path, kind):
    """Without through=True (a cache, a record, a run-dir file: no user named it), a device or FIFO
    planted there is refused as before, without blocking."""
    path = tmp_path / "out"
    before = _make(kind, path)
    with pytest.raises(PpspecError, match="cannot write"):
        safeio.write_text(path, "x\n", what="record")
    _unchanged(path, before)


def test_write_text_to_dev_stdout_writes_the_descriptor(tmp_path, capfd):
    safeio.write_text("/dev/stdout", "to stdout\n", through=True)
    assert capfd.readouterr().out == "to stdout\n"
    safeio.check_writable("/dev/stdout", where="--out")  # accepted at start too


@pytest.fixture
def slurm_profile(tmp_path) -> Path:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,'
        ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 8192}'
    )
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"name: w\ntarget: {{model: {target}}}\nplatform: cuda\ntopology: {{pipeline_parallel: 2, gpus_per_node: 1, "
        "nodes: 2}\nlaunch: {master_addr: 10.0.0.1}\n"
    )
    return prof


WRITERS = {
    "docs --out": lambda out, prof: ["docs", "--out", str(out)],
    "export slurm -o": lambda out, prof: ["export", "slurm", str(prof), "-o", str(out), "--offline"],
    # the profile's local target must be on a volume in the pods (--volume CLAIM:/path)
    "export k8s -o": lambda out, prof: [
        "export",
        "k8s",
        str(prof),
        "--image",
        "img:1",
        "-o",
        str(out),
        "--offline",
        "--volume",
        f"models:{prof.parent}",
    ],
    "verify --out": lambda out, prof: ["verify", "--endpoint", "http://127.0.0.1:9", "--out", str(out)],
    "verify --save-baseline": lambda out, prof: [
        "verify",
        "--endpoint",
        "http://127.0.0.1:9",
        "--save-baseline",
        str(out),
    ],
    "verify --save-reference": lambda out, prof: [
        "verify",
        "--endpoint",
        "http://127.0.0.1:9",
        "--save-reference",
        str(out),
    ],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_cli_writer_refuses_a_path_that_is_not_a_regular_file(tmp_path, slurm_profile, writer, kind):
    out = tmp_path / "dest"
    before = _make(kind, out)
    code, text = _cli(WRITERS[writer](out, slurm_profile))
    assert code in (1, 2), (code, text)
    assert "Traceback" not in text
    assert "dest" in text, text  # the path is named
    _unchanged(out, before)


@pytest.mark.parametrize("writer", sorted(w for w in WRITERS if not w.startswith("verify")))
def test_every_cli_writer_writes_through_dev_null_and_a_fifo(tmp_path, slurm_profile, writer):
    """`--out /dev/null` (here a private node with its numbers) and a named pipe work: exit 0, the
    node left as it was, the text in the pipe."""
    null = tmp_path / "null"
    before = _make("chardev-null", null)
    code, text = _cli(WRITERS[writer](null, slurm_profile))
    assert code == 0, text
    _unchanged(null, before)
    fifo = tmp_path / "fifo"
    before = _make("fifo", fifo)
    t, got = _drain(fifo)
    code, text = _cli(WRITERS[writer](fifo, slurm_profile))
    t.join(10)
    assert code == 0, text
    assert got and len(got[0]) > 0
    _unchanged(fifo, before)


@pytest.mark.parametrize("writer", sorted(w for w in WRITERS if not w.startswith("verify")))
def test_every_cli_writer_writes_a_regular_file(tmp_path, slurm_profile, writer):
    out = tmp_path / "dest"
    code, text = _cli(WRITERS[writer](out, slurm_profile))
    assert code == 0, text
    assert out.is_file() and out.stat().st_size > 0
