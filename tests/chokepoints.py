"""The choke-point checker: an AST walk over ppspec_cli that finds every file write, delete, rename,
chmod/chown, child-process start, JSON/YAML load of a file and environment read, so that
tests/test_chokepoints.py can hold them all inside ppspec_cli/io/ (and a short named list of
exceptions, each with its reason).

What it sees (after resolving `import x as y` and `from x import y` aliases):

- write (a method judged by its name when called with no more arguments than pathlib's takes):
  builtin `open`/`io.open`/`os.fdopen`/`X.open(...)` with a mode holding w, a, x or +;
  `X.write_text`, `X.write_bytes`, `os.write`, `os.open`, `os.truncate`, `os.symlink`, `os.link`,
  `X.symlink_to`, `X.hardlink_to`, `X.touch`, `shutil.copy*`, `shutil.move`;
- delete: `os.remove/unlink/rmdir/removedirs`, `shutil.rmtree`, `X.unlink()`, `X.rmdir()`;
- rename: `os.rename/renames/replace`, `X.rename(one)`, `X.replace(one)` (str.replace takes two);
- chmod: `os.chmod/fchmod/lchmod/chown/fchown/lchown`, `shutil.chown`, `X.chmod`, `X.lchmod`;
- spawn: importing `subprocess`, `multiprocessing`, `pty` or `concurrent.futures.process` at all,
  `os.system/popen/fork/forkpty/exec*/spawn*/posix_spawn*`, `asyncio.create_subprocess_*`;
- load: `json.load` (a file object), every `yaml.*load*`/`yaml.compose*`/`yaml.parse`;
- env: `os.environ`/`os.environb` (any use), `os.getenv`, `os.putenv`, `os.unsetenv`;
- dynamic: `__import__`/`importlib.import_module` of one of the modules above, `getattr(os|shutil, ...)`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

WRITE_MODE = set("wax+")
SPAWN_MODULES = ("subprocess", "multiprocessing", "pty", "concurrent.futures.process")
_OS_SPAWN_PREFIX = ("os.exec", "os.spawn", "os.posix_spawn")
QUALIFIED = {
    **dict.fromkeys(
        (
            "os.write",
            "os.open",
            "os.truncate",
            "os.ftruncate",
            "os.symlink",
            "os.link",
            "os.mknod",
            "os.mkfifo",
            "shutil.copy",
            "shutil.copy2",
            "shutil.copyfile",
            "shutil.copytree",
            "shutil.copyfileobj",
            "shutil.move",
        ),
        "write",
    ),
    **dict.fromkeys(("os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree"), "delete"),
    **dict.fromkeys(("os.rename", "os.renames", "os.replace"), "rename"),
    **dict.fromkeys(
        ("os.chmod", "os.fchmod", "os.lchmod", "os.chown", "os.fchown", "os.lchown", "shutil.chown"), "chmod"
    ),
    **dict.fromkeys(
        (
            "os.system",
            "os.popen",
            "os.fork",
            "os.forkpty",
            "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell",
            "pty.spawn",
        ),
        "spawn",
    ),
    **dict.fromkeys(("json.load",), "load"),
    **dict.fromkeys(("os.getenv", "os.putenv", "os.unsetenv", "os.getenvb"), "env"),
}
#: Methods judged by name whatever the receiver (a Path, most often).
METHODS = {
    "write_text": "write",
    "write_bytes": "write",
    "symlink_to": "write",
    "hardlink_to": "write",
    "touch": "write",
    "unlink": "delete",
    "rmdir": "delete",
    "chmod": "chmod",
    "lchmod": "chmod",
}
#: The most positional arguments pathlib's method of that name takes: a call with more is another
#: object's method (io's RunDir.write_text(name, text), RunDir.unlink(name): descriptor-relative).
PATH_ARGS = {
    "write_text": 1,
    "write_bytes": 1,
    "symlink_to": 2,
    "hardlink_to": 1,
    "touch": 0,
    "unlink": 0,
    "rmdir": 0,
    "chmod": 1,
    "lchmod": 1,
}
ENV_NAMES = ("os.environ", "os.environb")
IO_LAYER = "ppspec_cli.io."


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    kind: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.what}"


def _aliases(tree: ast.AST) -> dict[str, str]:
    """local name -> the dotted name it stands for (`import os as o` -> o: os; `from os import
    remove` -> remove: os.remove)."""
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                out[a.asname or a.name] = f"{n.module}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _mode(call: ast.Call, pos: int) -> str | None:
    """The constant mode argument of an open-like call (None: not given or not a constant)."""
    for k in call.keywords:
        if k.arg == "mode":
            return k.value.value if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) else "?"
    if len(call.args) > pos:
        a = call.args[pos]
        return a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else "?"
    return None


def _writes(mode: str | None) -> bool:
    return mode is not None and (mode == "?" or bool(WRITE_MODE & set(mode)))


def _spawn_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in SPAWN_MODULES)


def _call_kind(call: ast.Call, aliases: dict[str, str]) -> tuple[str, str] | None:  # noqa: C901, PLR0911, PLR0912
    name = _dotted(call.func, aliases)
    if name and name.startswith(IO_LAYER):
        return None  # the choke points themselves
    if name in ("open", "io.open") and _writes(_mode(call, 1)):
        return "write", f"{name}(..., {_mode(call, 1)!r})"
    if name == "os.fdopen" and _writes(_mode(call, 1)):
        return "write", "os.fdopen(..., w)"
    if name in QUALIFIED:
        return QUALIFIED[name], name
    if name and name.startswith(_OS_SPAWN_PREFIX):
        return "spawn", name
    if name and name.startswith("yaml.") and any(w in name.rsplit(".", 1)[1] for w in ("load", "compose", "parse")):
        return "load", name
    if name and _spawn_module(name):
        return "spawn", name
    if (
        name in ("__import__", "importlib.import_module")
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    ):
        mod = call.args[0].value
        if _spawn_module(mod) or mod in ("shutil", "os"):
            return "dynamic", f"{name}({mod!r})"
    if name == "getattr" and call.args and _dotted(call.args[0], aliases) in ("os", "shutil", "subprocess"):
        return "dynamic", f"getattr({_dotted(call.args[0], aliases)}, ...)"
    if isinstance(call.func, ast.Attribute) and (name is None or not name.startswith(("os.", "shutil.", "io."))):
        attr = call.func.attr
        unbound = bool(name) and name.rsplit(".", 2)[-2:-1] in (
            ["Path"],
            ["PosixPath"],
            ["PurePath"],
        )  # Path.write_text(p, data)
        if attr in METHODS and (unbound or len(call.args) <= PATH_ARGS[attr]):
            return METHODS[attr], f".{attr}()"
        classmethod_of = (
            isinstance(call.func.value, ast.Name) and call.func.value.id[:1].isupper()
        )  # RunDir.open(path): a class's constructor
        if attr == "open" and not classmethod_of and _writes(_mode(call, 0)):
            return "write", f".open({_mode(call, 0)!r})"
        if attr in ("rename", "replace") and len(call.args) == 1 and not call.keywords:
            return "rename", f".{attr}(target)"
    return None


def scan(source: str, path: str = "<source>") -> list[Violation]:
    """Every choke-point operation in `source` (a module's text)."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: list[Violation] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found += [Violation(path, n.lineno, "spawn", f"import {a.name}") for a in n.names if _spawn_module(a.name)]
        elif isinstance(n, ast.ImportFrom) and n.module and _spawn_module(n.module):
            found.append(Violation(path, n.lineno, "spawn", f"from {n.module} import ..."))
        elif isinstance(n, ast.Call):
            hit = _call_kind(n, aliases)
            if hit:
                found.append(Violation(path, n.lineno, *hit))
        elif isinstance(n, (ast.Attribute, ast.Name)) and isinstance(getattr(n, "ctx", None), ast.Load):
            name = _dotted(n, aliases)
            if name in ENV_NAMES and not isinstance(getattr(n, "_parent_attr", None), ast.Attribute):
                found.append(Violation(path, n.lineno, "env", name))
    return sorted(set(found), key=lambda v: (v.line, v.kind, v.what))
