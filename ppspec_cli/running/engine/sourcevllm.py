"""One vLLM release, served to Python from its source, without importing vLLM: the harness the
pack proofs run in (packproof.py; docs/adapters.md, "Packs proven on each release's source").

A CUDA wheel cannot be imported on a CPU machine, and a whole vLLM cannot be imported next to the
installed one. What a pack's patches and behaviour checks touch is small: a few classes, their
bases and methods, and the handful of functions a check runs (vLLM's `EagleModelMixin`,
`spec_decode_needs_target_embed`, `PPHandler`...). So in a child process `install()` puts a finder
first on `sys.meta_path` that answers every `vllm` / `vllm.*` import with a `SourceModule`, whose
top-level names are built *when first looked up*, by executing the one top-level statement of the
release's file that binds the name, as written, at its own file and line numbers:

- `def` / `class` (methods keep their real code objects, signatures and defaults; a class gets its
  real bases, built the same way); an import binds the one name asked for (`from x import a, b`
  runs as `from x import a`); any other binding statement runs whole;
- annotations are not evaluated (as under `from __future__ import annotations`);
- a **decorator defined in vLLM on a top-level class or function is not applied** (e.g.
  `support_torch_compile`, which appends a torch.compile wrapper base and wraps `__init__`; what
  the patches read passes through it: `_unwrap` follows vLLM's wrapper, and the pack inserts its
  mixin right after `nn.Module`, before that base); decorators from other packages (`dataclass`,
  `runtime_checkable`, `lru_cache`) are applied. Each skipped decorator is recorded;
- statements that only *do* something at import (registrations, logging setup) never run;
- a name a statement failed to build is a `Missing` that raises `HarnessMissing` (naming the file,
  line and error) when used, so a check that needs it fails loudly instead of passing;
- other packages (torch, transformers, the standard library) are the installed ones.

Every statement executed, every name looked up that the release does not bind and every module it
lacks is recorded: `record()` is the release *snapshot*, exactly the source the proof touched, with
the file's sha256. `SnapshotSource` serves such a snapshot in place of the source tree, so CI proves
the packs against every release without its 240 MB wheel; a lookup the snapshot does not hold
raises `SnapshotIncomplete` (regenerate the snapshot from the wheel) instead of guessing.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import hashlib
import importlib.abc
import importlib.util
import linecache
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

#: Compile flag: annotations stay strings (a class body's `x: SomeVllmType` is never evaluated).
_ANNOTATIONS = __future__.annotations.compiler_flag


class HarnessMissing(RuntimeError):
    """A name the harness could not build from the release's source was used."""


class SnapshotIncomplete(RuntimeError):
    """A proof looked up something the committed snapshot does not hold: regenerate it from the wheel."""


class Missing:
    """Stands for a top-level name whose statement failed to run here. Any use raises HarnessMissing."""

    __slots__ = ("_why",)

    def __init__(self, why: str):
        object.__setattr__(self, "_why", why)

    def _fail(self, *_a: Any, **_k: Any) -> Any:
        raise HarnessMissing(object.__getattribute__(self, "_why"))

    def __getattr__(self, name: str) -> Any:
        return self._fail()

    __call__ = __iter__ = __bool__ = __len__ = __getitem__ = __mro_entries__ = __enter__ = _fail
    __instancecheck__ = __subclasscheck__ = __contains__ = __int__ = __index__ = __float__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _fail
    __mod__ = __pow__ = __and__ = __or__ = __ror__ = __xor__ = __lt__ = __le__ = __gt__ = __ge__ = _fail
    __neg__ = __invert__ = __setitem__ = __delitem__ = __matmul__ = _fail

    def __repr__(self) -> str:
        return f"<not built here: {object.__getattribute__(self, '_why')}>"


# ---------------------------------------------------------------------------------------------
# Where the source comes from


@dataclass
class Stmt:
    """One top-level statement of a module file (an import: one of its names)."""

    lines: tuple[int, int]  # first (decorators included) and last line, 1-based
    source: str  # the file's text of those lines
    binds: tuple[str, ...]  # names it binds at module level
    star: str | None = None  # `from X import *`: the module X (absolute)
    skip: tuple[int, ...] | None = None  # decorators (by index) not applied; None: decide from the source

    def key(self) -> tuple[int, int]:
        return self.lines


@dataclass
class ModuleText:
    name: str
    file: str  # path inside the wheel, e.g. vllm/model_executor/models/utils.py
    is_pkg: bool
    sha256: str
    stmts: list[Stmt]
    # names the source binds nowhere, known to be so (snapshots: looked up during generation)
    unbound: frozenset[str] = frozenset()
    complete: bool = True  # a whole file (False: a snapshot's excerpt)


def _target_names(t: ast.AST, out: list[str]) -> None:
    """The names an assignment target binds."""
    if isinstance(t, ast.Name):
        out.append(t.id)
    elif isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            _target_names(e, out)
    elif isinstance(t, ast.Starred):
        _target_names(t.value, out)


def _bound_by(n: ast.stmt, out: list[str]) -> None:
    """The module-level names statement `n` binds, its nested blocks included."""
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.append(n.name)
    elif isinstance(n, ast.Import):
        out.extend(a.asname or a.name.split(".")[0] for a in n.names)
    elif isinstance(n, ast.ImportFrom):
        out.extend(a.asname or a.name for a in n.names if a.name != "*")
    elif isinstance(n, ast.Assign):
        for t in n.targets:
            _target_names(t, out)
    elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and (not isinstance(n, ast.AnnAssign) or n.value is not None):
        _target_names(n.target, out)
    elif isinstance(n, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
        for block in ("body", "orelse", "finalbody"):
            for s in getattr(n, block, []) or []:
                _bound_by(s, out)
        for h in getattr(n, "handlers", []) or []:
            for s in h.body:
                _bound_by(s, out)


def _binds(node: ast.stmt) -> list[str]:
    """Module-level names a top-level statement binds (anywhere in its if/try/with blocks)."""
    out: list[str] = []
    _bound_by(node, out)
    return list(dict.fromkeys(out))


def _loads(e: ast.AST | None, out: list[str]) -> None:
    """The names an expression reads."""
    if e is None:
        return
    for n in ast.walk(e):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.append(n.id)


def _class_body_loads(stmts: list[ast.stmt], out: list[str]) -> None:
    """The names a class body reads while it runs (not inside its function bodies)."""
    for s in stmts:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in [*s.decorator_list, *s.args.defaults, *s.args.kw_defaults]:
                _loads(d, out)
        elif isinstance(s, ast.ClassDef):
            _class_loads(s, out)
        elif isinstance(s, ast.AnnAssign):
            _loads(s.value, out)  # the annotation stays a string
        else:
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.stmt):
                    _class_body_loads([child], out)
                else:
                    _loads(child, out)


def _class_loads(c: ast.ClassDef, out: list[str]) -> None:
    for e in [*c.bases, *(k.value for k in c.keywords), *c.decorator_list]:
        _loads(e, out)
    _class_body_loads(c.body, out)


def _class_level_names(node: ast.ClassDef) -> list[str]:
    """Names a class statement reads while it runs (bases, keywords, its body outside function
    bodies: method decorators and defaults, class attributes, nested class bodies)."""
    out: list[str] = []
    _class_loads(node, out)
    return list(dict.fromkeys(out))


def _absolute(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    parts = module.split(".")
    base = parts if is_pkg else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *([name] if name else [])])


def parse_module(name: str, file: str, is_pkg: bool, text: str) -> ModuleText:
    """Split a module file into top-level statements (imports: one per bound name)."""
    tree = ast.parse(text, filename=file)
    lines = text.splitlines(keepends=True)
    stmts: list[Stmt] = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        last = node.end_lineno or node.lineno
        src = "".join(lines[first - 1 : last])
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            stmts.append(Stmt((first, last), src, (), _absolute(name, is_pkg, node.level, node.module)))
            continue
        binds = _binds(node)
        if binds:
            stmts.append(Stmt((first, last), src, tuple(binds)))
    return ModuleText(name, file, is_pkg, hashlib.sha256(text.encode()).hexdigest(), stmts)


class TreeSource:
    """The `vllm` package in a folder (an unpacked wheel, site-packages) or inside a wheel file."""

    def __init__(self, where: Path):
        self.where = Path(where)
        self._zip = zipfile.ZipFile(self.where) if self.where.is_file() else None
        self._names = set(self._zip.namelist()) if self._zip else None
        self._cache: dict[str, ModuleText | None] = {}

    def _read(self, rel: str) -> str | None:
        if self._zip is not None:
            if rel not in self._names:  # type: ignore[operator]
                return None
            return self._zip.read(rel).decode("utf-8")
        p = self.where / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def module(self, name: str) -> ModuleText | None:
        if name in self._cache:
            return self._cache[name]
        rel = name.replace(".", "/")
        got = None
        for file, is_pkg in ((f"{rel}.py", False), (f"{rel}/__init__.py", True)):
            text = self._read(file)
            if text is not None:
                got = parse_module(name, file, is_pkg, text)
                break
        if got is None and self._is_namespace(rel):
            got = ModuleText(name, f"{rel}/", True, "", [])
        self._cache[name] = got
        return got

    def _is_namespace(self, rel: str) -> bool:
        if self._zip is not None:
            return any(n.startswith(rel + "/") for n in self._names)  # type: ignore[union-attr]
        return (self.where / rel).is_dir()

    def version(self) -> tuple[str | None, str | None]:
        """(version, git commit) from the release's `vllm/_version.py`."""
        text = self._read("vllm/_version.py") or ""
        got: dict[str, Any] = {}
        try:
            for node in ast.parse(text).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
                    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(t, ast.Name):
                            got[t.id] = node.value.value
        except SyntaxError:
            pass
        commit = got.get("__commit_id__") or got.get("commit_id")
        version = got.get("__version__") or got.get("version")
        return (str(version) if version else None, str(commit) if commit else None)


class SnapshotSource:
    """A committed snapshot (SourceVllm.record()) in place of the source tree."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self._mods: dict[str, ModuleText] = {}
        for name, m in (doc.get("modules") or {}).items():
            stmts = []
            for s in m.get("statements") or []:
                node_src = s["source"]
                tree = ast.parse(node_src)
                node = tree.body[0]
                star = None
                if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                    star = _absolute(name, bool(m.get("package")), node.level, node.module)
                binds = () if star else tuple(_binds(node))
                skip = tuple(int(i) for i in s.get("skip_decorators") or ())
                stmts.append(Stmt((int(s["lines"][0]), int(s["lines"][1])), node_src, binds, star, skip))
            self._mods[name] = ModuleText(
                name,
                m["file"],
                bool(m.get("package")),
                m.get("sha256", ""),
                stmts,
                frozenset(m.get("unbound") or ()),
                complete=False,
            )
        self._absent = set(doc.get("absent_modules") or ())

    def module(self, name: str) -> ModuleText | None:
        if name in self._mods:
            return self._mods[name]
        if name in self._absent:
            return None
        raise SnapshotIncomplete(
            f"the proof imports {name}, which the vLLM {self.doc.get('vllm_version')} snapshot does not hold: "
            "regenerate it from the release's wheel (python tools/prove_packs.py --wheel W --write)"
        )

    def version(self) -> tuple[str | None, str | None]:
        return self.doc.get("vllm_version"), self.doc.get("commit")


# ---------------------------------------------------------------------------------------------
# The modules


class _Namespace(dict):
    """A SourceModule's globals: a missing name is built from the release's source on lookup."""

    def __init__(self, vm: SourceVllm, mod: _Mod):
        super().__init__()
        self._vm = vm
        self._mod = mod

    def __missing__(self, key: str) -> Any:
        return self._vm._build(self._mod, key)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        try:
            self[key]
        except KeyError:
            return False
        return True

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


class SourceModule:
    """Stands in sys.modules for one vLLM module of the release (see the module docstring)."""

    def __init__(self, vm: SourceVllm, mod: _Mod):
        self.__dict__ = mod.ns  # type: ignore[misc]

    def __getattr__(self, name: str) -> Any:
        ns = self.__dict__
        mod: _Mod = ns._mod  # type: ignore[attr-defined]
        vm: SourceVllm = ns._vm  # type: ignore[attr-defined]
        if name.startswith("__") and name.endswith("__") and name not in mod.binders:
            raise AttributeError(name)
        try:
            return ns[name]
        except KeyError:
            pass
        if mod.text.is_pkg:
            sub = f"{mod.text.name}.{name}"
            if vm.has_module(sub):
                return importlib.import_module(sub)
        hook = ns.get("__getattr__") if "__getattr__" in mod.binders else None
        if callable(hook):
            return hook(name)
        raise AttributeError(f"module {mod.text.name!r} has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"<vLLM source module {self.__dict__.get('__name__')}>"


@dataclass
class _Mod:
    text: ModuleText
    ns: _Namespace = field(init=False)
    binders: dict[str, list[int]] = field(default_factory=dict)
    stars: list[int] = field(default_factory=list)
    running: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, vm: SourceVllm):
        self.vm = vm

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        mod = self.vm.module(fullname)
        if mod is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} in vLLM {self.vm.version}'s source", name=fullname)
        return importlib.util.spec_from_loader(fullname, self, is_package=mod.text.is_pkg)

    def create_module(self, spec: Any) -> Any:
        mod = self.vm.module(spec.name)
        assert mod is not None
        return SourceModule(self.vm, mod)

    def exec_module(self, module: Any) -> None:
        return None


class SourceVllm:
    """A release's vLLM served from `source` (TreeSource or SnapshotSource)."""

    def __init__(self, source: TreeSource | SnapshotSource):
        self.source = source
        self.version, self.commit = source.version()
        self._mods: dict[str, _Mod] = {}
        self._absent: set[str] = set()
        self.touched: dict[str, set[tuple[int, int]]] = {}
        self.unbound: dict[str, set[str]] = {}
        self.skipped_decorators: dict[str, list[str]] = {}
        self.failures: dict[str, str] = {}
        self._skips: dict[tuple[str, tuple[int, int]], tuple[int, ...]] = {}
        self._finder: _Finder | None = None

    # -- modules ---------------------------------------------------------------------------------

    def has_module(self, name: str) -> bool:
        return self.module(name) is not None

    def module(self, name: str) -> _Mod | None:
        if name in self._mods:
            return self._mods[name]
        if name in self._absent:
            return None
        text = self.source.module(name)
        if text is None:
            self._absent.add(name)
            return None
        mod = _Mod(text)
        mod.ns = _Namespace(self, mod)
        for i, s in enumerate(text.stmts):
            if s.star:
                mod.stars.append(i)
            for b in s.binds:
                mod.binders.setdefault(b, []).append(i)
        dict.update(
            mod.ns,
            {
                "__name__": name,
                "__file__": text.file,
                "__package__": name if text.is_pkg else name.rpartition(".")[0],
                "__builtins__": builtins.__dict__,
                "__doc__": None,
            },
        )
        if text.is_pkg:
            dict.__setitem__(mod.ns, "__path__", [])
        self._mods[name] = mod
        self.touched.setdefault(name, set())
        return mod

    def install(self) -> None:
        """Serve `vllm` from this release in this process (a child process: there is no undo)."""
        if any(m == "vllm" or m.startswith("vllm.") for m in sys.modules):
            raise RuntimeError("vllm is already imported in this process; the source harness needs a fresh one")
        self._finder = _Finder(self)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        """Stop serving `vllm` (the caller drops the modules it imported: packproof.forget)."""
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._finder = None

    # -- names -----------------------------------------------------------------------------------

    def _build(self, mod: _Mod, name: str) -> Any:
        """Build top-level `name` of `mod` from the statement that binds it last (KeyError: none)."""
        ns = mod.ns
        for i in reversed(mod.binders.get(name, [])):
            if i in mod.running or i in mod.done:
                continue
            self._run(mod, i, name)
            if dict.__contains__(ns, name):
                return dict.__getitem__(ns, name)
        for i in reversed(mod.stars):
            star = mod.text.stmts[i].star
            if name.startswith("_"):
                continue
            self.touched[mod.text.name].add(mod.text.stmts[i].key())  # consulted: replay must consult it too
            src = self.module(star) if star else None
            if src is None:
                continue
            try:
                value = src.ns[name]
            except KeyError:
                continue
            dict.__setitem__(ns, name, value)
            return value
        if not mod.binders.get(name):
            if not mod.text.complete and name not in mod.text.unbound and not hasattr(builtins, name):
                raise SnapshotIncomplete(
                    f"the proof looks up {mod.text.name}.{name}, which the vLLM {self.version} snapshot does not "
                    "hold: regenerate it from the release's wheel (python tools/prove_packs.py --wheel W --write)"
                )
            if not hasattr(builtins, name):
                self.unbound.setdefault(mod.text.name, set()).add(name)
        raise KeyError(name)

    def _run(self, mod: _Mod, i: int, name: str) -> None:
        stmt = mod.text.stmts[i]
        node = ast.parse(stmt.source).body[0]
        ast.increment_lineno(node, stmt.lines[0] - 1)
        if isinstance(node, ast.ImportFrom):
            node.names = [a for a in node.names if (a.asname or a.name) == name] or node.names
        elif isinstance(node, ast.Import):
            node.names = [a for a in node.names if (a.asname or a.name.split(".")[0]) == name] or node.names
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            skip = stmt.skip
            if skip is None:
                skip = tuple(j for j, d in enumerate(node.decorator_list) if self._vllm_decorator(mod, d))
            self._skips[(mod.text.name, stmt.key())] = skip
            for j in skip:
                d = node.decorator_list[j]
                self.skipped_decorators.setdefault(f"{mod.text.name}:{node.name}", []).append(
                    f"@{ast.unparse(d)} ({mod.text.file}:{d.lineno})"
                )
            node.decorator_list = [d for j, d in enumerate(node.decorator_list) if j not in skip]
        tree = ast.Module(body=[node], type_ignores=[])
        self.touched[mod.text.name].add(stmt.key())
        if isinstance(node, ast.ClassDef):
            # A class body reads module globals with LOAD_NAME, which (Python 3.11) bypasses the
            # namespace's __missing__: build the names it reads first.
            for n in _class_level_names(node):
                if n != name and (n in mod.binders or mod.stars) and not dict.__contains__(mod.ns, n):
                    try:
                        mod.ns[n]
                    except KeyError:
                        pass
        file = f"vllm-{self.version}/{mod.text.file}"
        linecache.cache[file] = (
            len(stmt.source),
            None,
            [""] * (stmt.lines[0] - 1) + stmt.source.splitlines(True),
            file,
        )
        mod.running.add(i)
        # names this statement rebinds that were built already (an earlier binder of the same
        # name): keep the objects handed out, as the statement that binds them last decides
        kept = {b: dict.__getitem__(mod.ns, b) for b in stmt.binds if b != name and dict.__contains__(mod.ns, b)}
        try:
            code = compile(tree, file, "exec", flags=_ANNOTATIONS, dont_inherit=True)
            exec(code, mod.ns)
        except Exception as e:  # noqa: BLE001 - recorded; the names become Missing, loud when used
            why = (
                f"{mod.text.name}:{name} ({mod.text.file}:{stmt.lines[0]}) could not be built here: "
                f"{type(e).__name__}: {str(e)[:300]}"
            )
            self.failures[f"{mod.text.name}:{name}"] = why
            for b in stmt.binds if not isinstance(node, (ast.Import, ast.ImportFrom)) else (name,):
                if not dict.__contains__(mod.ns, b):
                    dict.__setitem__(mod.ns, b, Missing(why))
        finally:
            dict.update(mod.ns, kept)
            mod.running.discard(i)
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                mod.done.add(i)

    def _vllm_decorator(self, mod: _Mod, d: ast.expr) -> bool:
        """A decorator defined in vLLM (by its root name: bound in this module by a def, or imported from vllm)."""
        root = d
        while isinstance(root, (ast.Call, ast.Attribute, ast.Subscript)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if not isinstance(root, ast.Name):
            return False
        for i in mod.binders.get(root.id, []):
            node = ast.parse(mod.text.stmts[i].source).body[0]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef, ast.Assign)):
                return True
            if isinstance(node, ast.ImportFrom):
                target = _absolute(mod.text.name, mod.text.is_pkg, node.level, node.module)
                return target == "vllm" or target.startswith("vllm.")
            if isinstance(node, ast.Import):
                return any(a.name == "vllm" or a.name.startswith("vllm.") for a in node.names)
        return False

    # -- the snapshot ----------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """What the code run so far touched: per module the statements executed (their text and
        lines), the names looked up that the release binds nowhere, the file's sha256; the modules
        looked up that the release lacks. SnapshotSource(record) serves it back."""
        modules: dict[str, Any] = {}
        for name in sorted(self._mods):
            mod = self._mods[name]
            keys = self.touched.get(name, set())
            stmts = sorted((s for s in mod.text.stmts if s.key() in keys), key=lambda s: s.lines)
            modules[name] = {
                "file": mod.text.file,
                "package": mod.text.is_pkg,
                "sha256": mod.text.sha256,
                "statements": [
                    {
                        "lines": list(s.lines),
                        "source": s.source,
                        **({"skip_decorators": list(k)} if (k := self._skips.get((name, s.key()))) else {}),
                    }
                    for s in stmts
                ],
                "unbound": sorted(self.unbound.get(name, set()) | set(mod.text.unbound)),
            }
        return {
            "vllm_version": self.version,
            "commit": self.commit,
            "modules": modules,
            "absent_modules": sorted(self._absent),
            "skipped_decorators": {k: v for k, v in sorted(self.skipped_decorators.items())},
        }


def snapshot_digest(snapshot: dict[str, Any]) -> str:
    """sha256 over a snapshot's modules and absent modules (what SnapshotSource serves)."""
    import json

    body = {"modules": snapshot.get("modules"), "absent_modules": snapshot.get("absent_modules")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def iter_statement_lines(snapshot: dict[str, Any]) -> Iterator[tuple[str, str, tuple[int, int], str]]:
    """(module, file, lines, source) of every statement a snapshot holds."""
    for name, m in (snapshot.get("modules") or {}).items():
        for s in m.get("statements") or []:
            yield name, m["file"], (int(s["lines"][0]), int(s["lines"][1])), s["source"]
