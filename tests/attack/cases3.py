"""Attack cases of round 3 (issue 32), generated per new entry point like cases.py: the environment
(PPSPEC_* and COLUMNS), shared caches, child Python processes, exports, bench records and YAML
budgets. Each case returns None when the guard holds, else what went wrong; test_round3.py also
breaks each guard and shows its cases then fail."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

Case = tuple[str, str, str, Callable[[], "str | None"]]


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- environment -------------------------------------------------------------------------------

BOUNDS = {
    "PPSPEC_STOP_GRACE_S": (0.0, 3600.0, True),
    "PPSPEC_HUB_DEADLINE": (0.0, 86400.0, False),
    "PPSPEC_HUB_DOWNLOAD_DEADLINE": (0.0, 86400.0, False),
    "PPSPEC_HUB_DOWNLOAD_LIMIT_GB": (0.0, float(1 << 20), False),
}
HOSTILE_NUMBERS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e999",
    "-1",
    "0",
    "1e9",
    "abc",
    "0x10",
    " 5 ",
    "\uff11",
    "1_0",
    "5\n",
    "-0",
    "3600.0001",
]


def _number_case(var: str, value: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.io import settings

        lo, hi, lo_ok = BOUNDS[var]
        field = var.removeprefix("PPSPEC_").lower()
        with env(**{var: value}):
            try:
                got = getattr(settings.settings(), field)
            except PpspecError as e:
                return (
                    None if e.exit_code == 2 and e.where == var else f"refused with exit {e.exit_code} at {e.where!r}"
                )
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:60]}"
        if got is None:
            return None
        if not math.isfinite(got) or got > hi or got < lo or (got == lo and not lo_ok):
            return f"accepted {got!r}"
        return None

    return run


def _cache_setting_case(kind: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.io import cache

        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "c"
            if kind == "file":
                p.write_text("x")
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "dangling-symlink":
                p.symlink_to(Path(td) / "nowhere")
            elif kind == "symlink-to-world-writable":  # a link planted in /tmp to a directory anyone can write
                (Path(td) / "d").mkdir()
                os.chmod(Path(td) / "d", 0o777)
                p.symlink_to(Path(td) / "d")
            elif kind == "world-writable":
                p.mkdir()
                os.chmod(p, 0o777)
            with env(PPSPEC_CACHE=str(p)):
                try:
                    cache.owned_dir("demo")
                except PpspecError as e:
                    return None if e.exit_code == 2 and "Traceback" not in str(e) else f"exit {e.exit_code}"
                except Exception as e:  # noqa: BLE001
                    return f"crashed: {type(e).__name__}: {str(e)[:60]}"
        return f"used a cache root that is a {kind}"

    return run


def _columns_case(value: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.io import terminal

        with env(COLUMNS=value):
            w = terminal.console(stderr=True).width
        return None if w >= terminal.MIN_COLUMNS else f"console width {w}: messages vanish"

    return run


def environment_cases() -> Iterator[Case]:
    for var in BOUNDS:
        for v in HOSTILE_NUMBERS:
            yield ("environment", var, repr(v), _number_case(var, v))
    for kind in ("file", "fifo", "dangling-symlink", "symlink-to-world-writable", "world-writable"):
        yield ("environment", "PPSPEC_CACHE", kind, _cache_setting_case(kind))
    for v in ("0", "-1", "1", "abc", "", "1e3", "99999999999999999999"):
        yield ("environment", "COLUMNS", repr(v), _columns_case(v))


# -- caches ------------------------------------------------------------------------------------


def _accessors() -> dict[str, Callable[[], object]]:
    from ppspec_cli.demo.factory import demo_cache_dir
    from ppspec_cli.knowledge import installcache
    from ppspec_cli.running.serve.rundir import default_run_dir

    return {
        "demo models": demo_cache_dir,
        "option names": lambda: installcache.path("serve-options", "k", create=True),
        "import check": lambda: installcache.path("imports", "k", create=True),
        "run dirs": lambda: default_run_dir("p"),
    }


def _cache_case(accessor: str, hostile: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError

        if hostile == "other-owner" and os.geteuid() != 0:
            return None  # chown needs root; CI runs as root (the class is covered there)
        with tempfile.TemporaryDirectory() as td:
            root = Path(td) / "cache"
            root.mkdir(mode=0o700)
            target = root / {"demo models": "demo", "run dirs": "runs"}.get(accessor, "")
            if target != root:
                target.mkdir(mode=0o700)
            if hostile == "group-writable":
                os.chmod(target, 0o770)
            elif hostile == "world-writable":
                os.chmod(target, 0o1777)
            elif hostile == "other-owner":
                os.chown(target, 65534, 65534)
            elif hostile == "symlink":  # the directory swapped for a link to one anyone can write
                (Path(td) / "theirs").mkdir()
                os.chmod(Path(td) / "theirs", 0o777)
                target.rmdir()
                target.symlink_to(Path(td) / "theirs")
            with env(PPSPEC_CACHE=str(root)):
                try:
                    _accessors()[accessor]()
                except PpspecError as e:
                    return (
                        None
                        if e.exit_code == 2 and str(target) in e.what
                        else f"refused without naming {target} (exit {e.exit_code}: {e.what[:80]})"
                    )
                except Exception as e:  # noqa: BLE001
                    return f"crashed: {type(e).__name__}: {str(e)[:60]}"
        return f"used a {hostile} cache directory"

    return run


def _planted_file_case(hostile: str) -> Callable[[], str | None]:
    """A planted option-name file: refused (its path named), never read."""

    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.io import cache
        from ppspec_cli.knowledge import installcache

        if hostile == "other-owner" and os.geteuid() != 0:
            return None
        with tempfile.TemporaryDirectory() as td, env(PPSPEC_CACHE=str(Path(td) / "c")):
            f = installcache.path("serve-options", "k", create=True)
            f.write_text(json.dumps({"key": "k", "data": ["evil-option"]}))
            if hostile == "group-writable":
                os.chmod(f, 0o664)
            elif hostile == "world-writable":
                os.chmod(f, 0o666)
            elif hostile == "other-owner":
                os.chown(f, 65534, 65534)
            elif hostile == "symlink":
                real = Path(td) / "theirs.json"
                f.rename(real)
                f.symlink_to(real)
            try:
                cache.owned_file(f)
            except PpspecError as e:
                return None if str(f) in e.what else "refused without naming the file"
        return f"trusted a {hostile} option-name file"

    return run


def cache_cases() -> Iterator[Case]:
    for accessor in ("demo models", "option names", "import check", "run dirs"):
        for hostile in ("group-writable", "world-writable", "other-owner", "symlink"):
            yield ("caches", accessor, hostile, _cache_case(accessor, hostile))
    for hostile in ("group-writable", "world-writable", "other-owner", "symlink"):
        yield ("caches", "planted file", hostile, _planted_file_case(hostile))


# -- child processes -----------------------------------------------------------------------------

#: Modules a child Python imports first thing (json for its answer; the rest at start-up or by
#: ppspec's child code), planted in the working directory.
PLANTED = [
    "json",
    "sitecustomize",
    "usercustomize",
    "importlib_metadata",
    "ppspec_cli",
    "vllm",
    "typing_extensions",
    "pydantic",
]


def _child_case(module: str, child: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.io import spawn

        with tempfile.TemporaryDirectory() as td:
            d = Path(td)
            if module == "ppspec_cli" or module == "vllm":
                (d / module).mkdir()
                (d / module / "__init__.py").write_text("print('PLANTED-RAN')\nraise SystemExit(7)\n")
            else:
                (d / f"{module}.py").write_text("print('PLANTED-RAN')\nraise SystemExit(7)\n")
            code = {
                "-c json": [
                    "-c",
                    f"import json, importlib\ntry:\n    importlib.import_module({module!r})\nexcept ImportError:\n   "
                    " pass\nprint('CHILD', json.dumps(1))",
                ],
                "-m": ["-m", "json.tool", "--help"],
            }[child]
            cp = spawn.run(
                spawn.python_argv(*code),
                cwd=d,
                capture_output=True,
                text=True,
                timeout=60,
                env=spawn.child_env({"PYTHONSTARTUP": str(d / f"{module}.py")}),
            )
            if "PLANTED-RAN" in cp.stdout:
                return "ran the planted module"
        return None

    return run


def child_cases() -> Iterator[Case]:
    for m in PLANTED:
        for child in ("-c json", "-m"):
            yield ("child-processes", child, m, _child_case(m, child))


# -- exports -----------------------------------------------------------------------------------

NAMES = [
    "8b-llama",
    "0",
    "-",
    "---a",
    "Z",
    "Llama_3.1-8B-Instruct",
    "a" * 200,
    "ü",
    "x.y.z",
    "1-2-3",
    "a-" * 40,
    "🙂model",
    "9" * 70,
    "ok-name",
]


def _name_case(name: str) -> Callable[[], str | None]:
    def run() -> str | None:
        import re

        from ppspec_cli.running.export import k8s_name

        n = k8s_name(name)
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", n):
            return f"{n!r} is not a DNS-1035 label"
        if len(n) + len("-profile") > 63:
            return f"{n!r} is too long with its suffixes"
        return None

    return run


def _header_case(warnings: list[str]) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.running.export import _header

        class _P:
            name = "p"

        class _R:
            profile = _P()

        lines = _header(_R(), "p.yaml", [], warnings)  # type: ignore[arg-type]
        for w in warnings:
            if not any(ln.startswith("# check warning:") and ln.count("\n") == 0 for ln in lines):
                return f"warning {w[:30]!r} not in the header"
        if any("\n" in ln or "\x1b" in ln for ln in lines):
            return "a warning broke out of its comment"
        return None

    return run


def export_cases() -> Iterator[Case]:
    for n in NAMES:
        yield ("exports", "k8s-names", repr(n[:20]), _name_case(n))
    for w in (
        ["untrusted-acknowledged: env.LD_PRELOAD loads code"],
        ["x\nrm -rf /"],
        ["\x1b]52;c;AAAA\x07"],
        ["a", "b", "c"],
        ["$(id)"],
    ):
        yield ("exports", "warning-header", repr(w)[:30], _header_case(w))


# -- bench records -----------------------------------------------------------------------------

GOOD_LEVEL = {
    "arm": "baseline",
    "concurrency": 1,
    "speculation": False,
    "num_prompts": 4,
    "max_tokens": 8,
    "input_len": 8,
    "completed": 4,
    "output_tokens_per_s": 10.0,
}
BAD_LEVELS = {
    "string count": {"completed": "4"},
    "bool count": {"completed": True},
    "huge int": {"completed": 10**400},
    "infinite": {"output_tokens_per_s": 1e999},
    "negative": {"output_tokens_per_s": -1.0},
    "missing arm": {"arm": None},
    "list for dict": {"tpot_ms": [1, 2]},
    "text for list": {"per_position_acceptance": "0.5"},
    "zero concurrency": {"concurrency": 0},
    "huge concurrency": {"concurrency": 10**6},
    "non-str warning": {"warnings": [{"html": "<script>"}]},
    "long arm": {"arm": "a" * 1000},
}


def _record_case(label: str, change: dict) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.verify.bench.results import load_record

        doc = {**GOOD_LEVEL, **change}
        doc = {k: v for k, v in doc.items() if v is not None}
        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "c1.json"
            p.write_text(json.dumps(doc) if label != "infinite" else json.dumps(doc).replace("Infinity", "1e999"))
            try:
                load_record(p)
            except PpspecError as e:
                return (
                    None
                    if e.exit_code == 2 and str(p) in e.what
                    else f"refused without naming the file (exit {e.exit_code})"
                )
            except Exception as e:  # noqa: BLE001
                return f"crashed: {type(e).__name__}: {str(e)[:60]}"
        return "accepted"

    return run


MARKDOWN_ATTACKS = [
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "![i](http://evil/x.png)",
    "<javascript:alert(1)>",
    "a | b | c",
    "x\n# heading",
    "https://evil.example/x",
    "<img src=x onerror=alert(1)>",
    "`code`",
    "**bold**",
    "www.evil.com",
    "&lt;script&gt;",
]


def _markdown_case(value: str) -> Callable[[], str | None]:
    def run() -> str | None:
        import re

        from ppspec_cli.verify.bench.report import markdown

        doc = {
            "profile": value,
            "created_at": value,
            "ppspec_version": value,
            "load_generator": value,
            "settings": {"concurrency": [1], "num_prompts": 1, "max_tokens": 1, "input_len": 1, "seed": 0},
            "arms": [{"name": value}],
            "runs": [{**GOOD_LEVEL, "arm": value}],
            "speedup": [],
            "warnings": [value],
            "recommendation": {"summary": value},
            "parity": {},
        }
        md = markdown(doc)
        if re.search(r"<[a-zA-Z/!]", md):
            return "raw HTML in report.md"
        if re.search(r"(?<!\\)\]\(", md) or re.search(r"(?<!\\)://", md) or "www." in md.lower():
            return "a link in report.md"
        lines = md.splitlines()
        if sum(1 for ln in lines if ln.startswith("# ")) > 1:
            return "a heading injected"
        rows = [ln for ln in lines if ln.startswith("| ")]
        if any(ln.count("|") - ln.count("\\|") != rows[0].count("|") for ln in rows):
            return "a table row broken"
        return None

    return run


def bench_cases() -> Iterator[Case]:
    for label, change in BAD_LEVELS.items():
        yield ("bench", "records", label, _record_case(label, change))
    for v in MARKDOWN_ATTACKS:
        yield ("bench", "report.md", repr(v)[:30], _markdown_case(v))


# -- YAML budget -------------------------------------------------------------------------------


def _yaml_case(text: str, expect: str) -> Callable[[], str | None]:
    def run() -> str | None:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.planning.profile import parse_profile

        try:
            parse_profile(text, "p.yaml")
        except PpspecError as e:
            return None if expect in e.what and e.exit_code == 2 else f"refused otherwise: {e.what[:80]}"
        except Exception as e:  # noqa: BLE001
            return f"crashed: {type(e).__name__}: {str(e)[:60]}"
        return "accepted"

    return run


def yaml_cases() -> Iterator[Case]:
    for copies, size in ((5000, 8000), (20000, 100), (600, 4000), (3000, 1000)):
        text = (
            "name: x\ntarget: {model: a/b}\nnote: &a "
            + "y" * size
            + "\nengine: {l: ["
            + ", ".join(["*a"] * copies)
            + "]}\n"
        )
        yield ("yaml", "byte-budget", f"{copies}x{size}", _yaml_case(text, "expands to more than"))
    nested = "name: x\ntarget: {model: a/b}\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefg", "bcdefgh")
    )
    yield ("yaml", "node-budget", "billion laughs", _yaml_case(nested, "expands to more than"))
    for v in (
        "2024-01-01",
        "2024-01-01 10:00:00",
        "!!binary aGk=",
        "!!set {a, b}",
        "!!omap [a: 1]",
        "!!pairs [a: 1]",
        ".nan",
        ".inf",
        "-.Inf",
        "!!timestamp 2001-12-14",
    ):
        yield (
            "yaml",
            "non-json",
            v,
            _yaml_case(f"name: x\ntarget: {{model: a/b}}\nengine:\n  x: {v}\n", "not a JSON value"),
        )


MECHANISMS3: dict[str, Callable[[], Iterator[Case]]] = {
    "environment": environment_cases,
    "caches": cache_cases,
    "child-processes": child_cases,
    "exports": export_cases,
    "bench": bench_cases,
    "yaml": yaml_cases,
}
