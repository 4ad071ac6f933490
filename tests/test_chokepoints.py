"""Choke points nothing can bypass, held structurally (issue 32): outside ppspec_cli/io/, no module
writes, deletes, renames or chmods a file, starts a process, loads JSON/YAML from a file or reads
the environment itself (tests/chokepoints.py says exactly what it sees). The few named exceptions
below each carry their reason; a new violation fails here with its file and line.

Also held here: every child Python ppspec starts is isolated (`-P`: nothing from the working
directory is imported), shown by planting a `json.py` that would announce itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.chokepoints import scan

PKG = Path(__file__).resolve().parent.parent / "ppspec_cli"

#: (module, what the checker reports) -> why it may do so outside io/. Each entry is one operation,
#: not a whole file: anything else the module starts doing still fails.
EXCEPTIONS: dict[tuple[str, str], str] = {
    (
        "running/engine/plugin.py",
        "import multiprocessing",
    ): "reads the engine worker's process name (multiprocessing.current_process); starts nothing",
    ("running/engine/plugin.py", "multiprocessing.current_process"): "the same read of the worker's name",
}
#: Modules whose writes and deletes ARE a choke point of their own, kept beside the code they
#: serve (they import the launch spec, a layer above io): the run directory's descriptor-relative
#: layer (RunDir: openat-style operations under the directory ppspec holds locked, never following
#: a link). The kinds listed are allowed there; a spawn, a YAML/JSON load or an environment read is not.
CHOKE_MODULES: dict[str, tuple[str, ...]] = {
    "running/serve/rundir.py": ("write", "delete", "rename"),
}


def _violations() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if rel.startswith("io/"):
            continue
        for v in scan(p.read_text(encoding="utf-8"), rel):
            if (rel, v.what) in EXCEPTIONS or v.kind in CHOKE_MODULES.get(rel, ()):
                continue
            out.append(str(v))
    return out


def test_every_write_delete_spawn_load_and_environment_read_goes_through_io():
    bad = _violations()
    assert not bad, (
        "outside ppspec_cli/io/ (route it through an io/ function, or name an exception with its reason):\n"
        + "\n".join(bad)
    )


def test_every_exception_is_still_needed():
    """A named exception nothing uses any more is removed (the list stays the real one)."""
    used = set()
    for mod, what in EXCEPTIONS:
        used |= {(mod, v.what) for v in scan((PKG / mod).read_text(encoding="utf-8"), mod) if v.what == what}
    assert used == set(EXCEPTIONS), f"exceptions no longer needed: {sorted(set(EXCEPTIONS) - used)}"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ('open(p, "w")', "write"),
        ('open(p, mode="a")', "write"),
        ('open(p, "r+")', "write"),
        ("open(p, m)", "write"),  # a mode we cannot read is a write
        ('Path(p).write_text("x")', "write"),
        ('Path.write_text(p, "x")', "write"),
        ("pathlib.Path.unlink(p)", "delete"),
        ('Path(p).open("w")', "write"),
        ("os.write(fd, b'x')", "write"),
        ("shutil.copy(a, b)", "write"),
        ("os.remove(p)", "delete"),
        ("Path(p).unlink()", "delete"),
        ("shutil.rmtree(p)", "delete"),
        ("os.replace(a, b)", "rename"),
        ("Path(a).rename(b)", "rename"),
        ("os.chmod(p, 0o777)", "chmod"),
        ("subprocess.run(['x'])", "spawn"),
        ("os.system('x')", "spawn"),
        ("os.execv('x', ['x'])", "spawn"),
        ("os.posix_spawn('x', ['x'], {})", "spawn"),
        ("json.load(f)", "load"),
        ("yaml.safe_load(t)", "load"),
        ("os.environ.get('X')", "env"),
        ("os.environ['X']", "env"),
        ("os.getenv('X')", "env"),
        ("environ.get('X')", "env"),
        ("rm(p)", "delete"),
        ("getattr(os, 'system')('x')", "dynamic"),
        ("__import__('subprocess')", "dynamic"),
    ],
)
def test_the_checker_sees_each_kind(line, kind):
    src = (
        "import os, json, shutil, subprocess, yaml, pathlib\nfrom pathlib import Path\nfrom os import environ\nfrom "
        "os import remove as rm\n" + line + "\n"
    )
    found = [v for v in scan(src, "x.py") if v.line == 5]
    assert [v.kind for v in found] == [kind], (line, found)


@pytest.mark.parametrize(
    "line",
    [
        "'a-b'.replace('-', '_')",
        "d.write_text('name', 'text')",
        "rd.unlink('READY')",
        "RunDir.open(path, create=False)",
        "open(p)",
        "open(p, 'rb')",
        "safeio.write_text(p, 'x')",
        "json.loads(s)",
    ],
)
def test_the_checker_leaves_alone_what_is_not_an_operation(line):
    src = "import json\nfrom ppspec_cli.io import safeio\n" + line + "\n"
    assert scan(src, "x.py") == []


@pytest.mark.parametrize("added", ['open(p, "w").write("x")', "subprocess.run(['true'])", "os.environ.get('HOME')"])
def test_adding_a_raw_operation_to_a_real_module_fails(added):
    """The test can fail: a temp copy of a real module with one raw write / spawn / environment
    read added is reported, with that line."""
    rel = "commands/check.py"
    text = (PKG / rel).read_text(encoding="utf-8")
    hostile = text + "\n\nimport os\nimport subprocess\n\n\ndef _sneak(p):\n    " + added + "\n"
    found = [str(v) for v in scan(hostile, rel) if v.line > len(text.splitlines())]
    assert found, f"{added!r} was not reported"
    assert not [str(v) for v in scan(text, rel)], "the unmodified module is clean"


def test_a_child_python_never_imports_from_the_working_directory(tmp_path):
    """A `json.py` planted in the working directory (a shared directory, another user's) would run
    in every child Python that imports json; ppspec's children are started with -P and it does not.
    Without -P (the old argv), the same child runs it: the plant works."""
    from ppspec_cli.io import spawn

    (tmp_path / "json.py").write_text("import sys\nsys.stdout.write('PLANTED-RAN\\n')\nraise SystemExit(7)\n")
    child = "import json; print('CHILD-OK', json.dumps(1))"
    safe = spawn.run(spawn.python_argv("-c", child), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "PLANTED-RAN" not in safe.stdout and "CHILD-OK 1" in safe.stdout, safe
    unsafe = subprocess.run([sys.executable, "-c", child], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "PLANTED-RAN" in unsafe.stdout, "the plant must work without -P, or this test proves nothing"


def test_spawn_refuses_a_child_python_that_is_not_isolated():
    from ppspec_cli.io import spawn

    with pytest.raises(ValueError, match="isolated"):
        spawn.run([sys.executable, "-c", "pass"])
    with pytest.raises(ValueError, match="isolated"):
        spawn.popen([sys.executable, "-m", "json.tool"])


def test_every_child_python_argv_in_the_code_is_built_isolated():
    """No module builds a `sys.executable` argv by hand for a spawn (spawn.python_argv does it)."""
    hand = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        text = p.read_text(encoding="utf-8")
        if rel.startswith("io/"):
            continue
        hand += [f"{rel}: {ln.strip()}" for ln in text.splitlines() if "spawn." in ln and "sys.executable" in ln]
    assert not hand, hand
