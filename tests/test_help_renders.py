"""Every `--help` and every usage error renders as plain text (issue 29 item 1).

typer 0.29 / click 8.5 probe the output stream by writing b"" to it and write bytes to any stream
that accepts them; ppspec's terminal wrapper once accepted bytes and printed their repr
(b''b"Usage: ..." with literal \\n). These run the real entry point on every command found in the
app itself, so a new command is covered without editing this file."""

from __future__ import annotations

import pytest
import typer
from inprocess import run

from ppspec_cli.cli import app


def _command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [()]

    def walk(cmd, prefix: tuple[str, ...]) -> None:
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            paths.append((*prefix, name))
            walk(sub, (*prefix, name))

    walk(typer.main.get_command(app), ())
    return paths


PATHS = _command_paths()


def _assert_plain(text: str, where: str) -> None:
    assert text.strip(), f"{where}: printed nothing"
    assert "b'" not in text and 'b"' not in text, f"{where}: a bytes repr reached the terminal:\n{text[:300]}"
    assert "\\n" not in text, f"{where}: literal \\n in the output:\n{text[:300]}"
    assert text.lstrip().startswith("Usage: ppspec"), f"{where}: does not start with the usage line:\n{text[:300]}"


def test_every_command_is_found():
    flat = {" ".join(p) for p in PATHS}
    for name in (
        "check",
        "plan",
        "serve",
        "verify",
        "bench",
        "docs",
        "export slurm",
        "export k8s",
        "adapters list",
        "adapters show",
    ):
        assert name in flat, f"{name} missing from {sorted(flat)}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "ppspec")
def test_help_is_plain_text(path):
    r = run(*path, "--help")
    assert r.returncode == 0, r.stderr
    _assert_plain(r.stdout, f"ppspec {' '.join(path)} --help")
    assert r.stderr == ""


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "ppspec")
def test_usage_error_is_plain_text(path):
    r = run(*path, "--no-such-option-here")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    _assert_plain(r.stderr, f"ppspec {' '.join(path)} --no-such-option-here")
    assert "No such option" in r.stderr


def test_the_wrapper_refuses_bytes_as_a_text_stream_does():
    """The cause, held directly: a text stream that accepts bytes is taken for a binary one."""
    import io

    from ppspec_cli.io import terminal

    s = terminal._TermStream(io.StringIO(), None)  # noqa: SLF001
    with pytest.raises(TypeError):
        s.write(b"")
    with pytest.raises(TypeError):
        terminal._Channel(False).write(b"")  # noqa: SLF001
