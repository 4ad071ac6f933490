"""Read vLLM's drafter-side facts from its source, statically (`ast`, no import of vLLM or torch):
the companion of knowledge/archscan.py for the drafter, called by the same generator
(tools/vllm_arch_facts.py) into the same per-release tables (knowledge/arch/vllm-<version>.json).

What vLLM does with a drafter checkpoint before and while it builds it, per release:

- `rules(src)` -> the table's `drafter_rules`:
  - `speculators`: every algorithm vLLM's speculators loader registers
    (transformers_utils/configs/speculators/algos.py, `@register_speculator`): the class it serves
    the checkpoint as (a fixed class, a class per `transformer_layer_config.model_type` with the
    default type and where another type is refused, or the declared classes it keeps and its
    default), the keys it requires, the method it runs as (base.py's build of the speculative
    config: peagle -> eagle3, dflash2 -> dflash), and where it refuses an algorithm outright
    (0.34's P-EAGLE) or one it does not register (base.py);
  - `eagle_config`: how vLLM's EAGLEConfig renames a drafter's architectures per method
    (transformers_utils/configs/eagle.py: `Eagle<arch>` for eagle, `Eagle3<arch>` for eagle3,
    `DFlash<arch>` for dflash, with the names it keeps), and where the drafter config is wrapped
    (speculators-format configs are not);
  - `mtp_rewrite`: per MTP architecture the `mtp` method rewrites a target to
    (`SpeculativeConfig.hf_config_override`): the config keys its `n_predict` is read from (and
    default) or the fixed count vLLM uses, whether the rewrite sets `num_hidden_layers` (0: the MTP
    layers are numbered from 0, not from the target's depth); the families that refuse `mtp` and
    name another method; where vLLM requires `num_speculative_tokens` above `n_predict` to be a
    multiple of it.
- `annotate(scanner, drafters)`: per registered drafter class, added to its table entry:
  - `embed`: whether the drafter keeps its own input embedding or takes the target's
    (`has_own_embed_tokens`: set from the checkpoint's tensor names by `process_eagle_weight`, or
    fixed by the class), the config key its embedding width is read from, and whether vLLM's
    EAGLE weight hook can act on it (the class implements SupportsEagle / SupportsEagle3);
  - `d2t`: how its load reads a `d2t` tensor (draft -> target token ids) and what happens when a
    reduced-vocabulary checkpoint has none (zeros: every draft id maps to itself, vLLM starts;
    or a raise: vLLM refuses);
  - `layer_ids` (MTP classes): where the draft layers' ids start (the config key, e.g.
    `num_hidden_layers`, or 0);
  - `declares_method` (0.34+): the method the class declares (`speculator_config_class`); vLLM
    refuses a different configured method;
  - `fc_taps` (EAGLE3 classes): how the constructor sizes `fc` (`fc_input_size = width * count`).
- `rules` also reads `config_override` (hf_config_override step by step: it runs on every draft
  config), the methods' own class choice (`dspark_class`) and, 0.34+, each method's
  `uses_target_hidden_states` (`target_hidden_states`).

Where the source does not decide a fact statically the value is None; nothing is guessed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from ppspec_cli.knowledge import archscan, methods
from ppspec_cli.knowledge.archscan import (
    ClassInfo,
    Scanner,
    Source,
    _dotted,
    _literal,
    _owner,
    _self_assign,
)

ALGOS = "vllm.transformers_utils.configs.speculators.algos"
SPECULATORS_BASE = "vllm.transformers_utils.configs.speculators.base"
EAGLE_CONFIG = "vllm.transformers_utils.configs.eagle"
SPEC_CONFIG = "vllm.config.speculative"
#: Where vLLM 0.34+ keeps the per-method setup (speculator_config.py and <method>/config.py).
V2_SPEC_PKG = "vllm.v1.worker.gpu.spec_decode"
#: The modules whose code sets up a speculative config (the older and the 0.34 layout).
_SETUP_MODULES = (
    SPEC_CONFIG,
    f"{V2_SPEC_PKG}.speculator_config",
    f"{V2_SPEC_PKG}.eagle.config",
    f"{V2_SPEC_PKG}.mtp.config",
    f"{V2_SPEC_PKG}.dflash.config",
    f"{V2_SPEC_PKG}.dspark.config",
)
REGISTER_DECORATOR = "register_speculator"
ARCH_KEY = "architectures"
#: vLLM's message when num_speculative_tokens above n_predict is not a multiple of it.
DIVISIBLE_TEXT = "must be divisible by"
#: A refusal of one method that names the method to use instead.
OTHER_METHOD_RE = re.compile(r"[Uu]se speculative method '(\w+)'")
EAGLE_INTERFACES = frozenset({"SupportsEagle", "SupportsEagle3"})
EAGLE_BASE = "SupportsEagleBase"
OWN_EMBED = "has_own_embed_tokens"
EAGLE_WEIGHT_HOOK = "process_eagle_weight"
EMBED_LAYER = "VocabParallelEmbedding"
D2T_PARAM = "draft_id_to_target_id"


def _where(info: Any, node: Any) -> str:
    return f"{info.file}:{node.lineno}"


def _str_parts(node: ast.AST) -> str:
    """The literal text of a string expression (an f-string's constant parts joined)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(node, ast.BinOp):
        return _str_parts(node.left) + _str_parts(node.right)
    return ""


def _raise_text(n: ast.Raise) -> str:
    exc = n.exc
    if isinstance(exc, ast.Call) and exc.args:
        return " ".join(_str_parts(a) for a in exc.args)
    return ""


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    """A function's statements without its docstring."""
    b = list(fn.body)
    if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant):
        b = b[1:]
    return b


# ---------------------------------------------------------------------------------------------
# Speculators-format checkpoints


def _decorated_name(fn: ast.FunctionDef) -> str | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and (_dotted(d.func) or "").endswith(REGISTER_DECORATOR) and d.args:
            name = _literal(d.args[0])
            if isinstance(name, str):
                return name
    return None


def _arch_rule(fn: ast.FunctionDef, info: Any) -> dict[str, Any] | None:
    """The class an updater writes into the converted config's `architectures` (its last write)."""
    local: dict[str, ast.expr] = {}
    got = None
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            local[n.targets[0].id] = n.value
    writes = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Subscript) and _literal(t.slice) == ARCH_KEY for t in n.targets)
    ]
    for n in sorted(writes, key=lambda x: x.lineno):
        v = n.value
        at = _where(info, n)
        if isinstance(v, ast.List) and len(v.elts) == 1 and isinstance(_literal(v.elts[0]), str):
            got = {"fixed": _literal(v.elts[0]), "at": at}
        elif (
            isinstance(v, ast.List)
            and len(v.elts) == 1
            and isinstance(v.elts[0], ast.Subscript)
            and isinstance(v.elts[0].value, ast.Name)
            and isinstance(v.elts[0].slice, ast.Name)
        ):
            table = _literal(local.get(v.elts[0].value.id))
            key = local.get(v.elts[0].slice.id)
            default = (
                _literal(key.args[1])
                if isinstance(key, ast.Call) and (_dotted(key.func) or "").endswith(".get") and len(key.args) > 1
                else None
            )
            refused = next(
                (
                    _where(info, r)
                    for r in ast.walk(fn)
                    if isinstance(r, ast.If)
                    and isinstance(r.test, ast.Compare)
                    and isinstance(r.test.ops[0], ast.NotIn)
                    and any(isinstance(x, ast.Raise) for x in ast.walk(r))
                    for r in [next(x for x in ast.walk(r) if isinstance(x, ast.Raise))]
                ),
                None,
            )
            if isinstance(table, dict):
                got = {"by_model_type": table, "default_model_type": default, "other_refused_at": refused, "at": at}
        elif isinstance(v, ast.BoolOp) and isinstance(v.op, ast.Or) and len(v.values) == 2:
            default = _literal(v.values[1])
            kept_expr = local.get(_dotted(v.values[0]) or "")
            kept: list[str] = []
            if isinstance(kept_expr, ast.ListComp):
                for c in ast.walk(kept_expr):
                    if isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.In):
                        s = _literal(local.get(_dotted(c.comparators[0]) or "")) or _literal(c.comparators[0])
                        if isinstance(s, (set, list, tuple, frozenset)):
                            kept = sorted(x for x in s if isinstance(x, str))
            if isinstance(default, list) and default and kept:
                got = {"keeps_declared": kept, "default": default[0], "at": at}
    return got


def _required_keys(fn: ast.FunctionDef) -> list[str]:
    """`config_dict["key"]` reads (a KeyError when the checkpoint lacks the key), except under an
    `if` whose test reads the same key (`if config_dict.get("key"): ... config_dict["key"]`)."""
    arg = fn.args.args[0].arg if fn.args.args else "config_dict"
    guarded: set[int] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.If):
            tested = {c.value for c in ast.walk(n.test) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            for st in n.body:
                for x in ast.walk(st):
                    if isinstance(x, ast.Subscript) and _literal(x.slice) in tested:
                        guarded.add(id(x))
    out = []
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Subscript)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and n.value.id == arg
            and isinstance(_literal(n.slice), str)
            and id(n) not in guarded
        ):
            out.append(_literal(n.slice))
    return sorted(set(out))


def speculators(src: Source) -> dict[str, Any] | None:
    """Every speculators algorithm the release registers, with the class it serves, its method,
    the keys it requires and its refusal (module doc)."""
    info = src.module(ALGOS)
    if info is None or info.tree is None:
        return None
    fns = {n.name: n for n in info.tree.body if isinstance(n, ast.FunctionDef)}
    types: dict[str, Any] = {}
    for fn in fns.values():
        name = _decorated_name(fn)
        if name is None:
            continue
        body = _body(fn)
        entry: dict[str, Any] = {"at": _where(info, fn)}
        if body and isinstance(body[0], ast.Raise):
            entry["refused"] = _raise_text(body[0])
            entry["refused_at"] = _where(info, body[0])
            types[name] = entry
            continue
        rule = _arch_rule(fn, info)
        reqs = set(_required_keys(fn))
        for called in (n.func for n in ast.walk(fn) if isinstance(n, ast.Call)):
            callee = fns.get(called.id) if isinstance(called, ast.Name) else None
            if callee is not None and callee is not fn:
                rule = rule or _arch_rule(callee, info)
                reqs |= set(_required_keys(callee))
        # an updater that calls another and then overrides `architectures` keeps its own write
        entry["architectures"] = rule
        entry["requires"] = sorted(reqs)
        types[name] = entry
    out: dict[str, Any] = {"types": dict(sorted(types.items()))}
    base = src.module(SPECULATORS_BASE)
    if base is not None and base.tree is not None:
        for n in ast.walk(base.tree):
            if isinstance(n, ast.Raise) and "Expected one of" in _raise_text(n):
                out["unregistered_refused_at"] = _where(base, n)
                break
        for kind, (method, refusal, at) in _speculators_methods(base).items():
            if kind in types:
                if method:
                    types[kind]["method"] = method
                if refusal:
                    types[kind].setdefault("refused", refusal)
                    types[kind].setdefault("refused_at", at)
                types[kind]["method_at"] = at
    for kind, entry in types.items():
        entry.setdefault("method", kind)
    return out


def _speculators_methods(base: Any) -> dict[str, tuple[str | None, str | None, str]]:
    """base.py's build_vllm_speculative_config: `if result["method"] == "X":` bodies that rename
    the method (`result.update({"method": "Y"})`, `result["method"] = "Y"`) or raise."""
    out: dict[str, tuple[str | None, str | None, str]] = {}
    for n in ast.walk(base.tree):
        if not (isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.ops[0], ast.Eq)):
            continue
        left = n.test.left
        if not (isinstance(left, ast.Subscript) and _literal(left.slice) == "method"):
            continue
        kind = _literal(n.test.comparators[0])
        if not isinstance(kind, str):
            continue
        method = refusal = None
        for st in n.body:
            for x in ast.walk(st):
                if isinstance(x, ast.Raise):
                    refusal = _raise_text(x)
                if isinstance(x, ast.Dict):
                    for k, v in zip(x.keys, x.values):
                        if _literal(k) == "method" and isinstance(_literal(v), str):
                            method = _literal(v)
                if (
                    isinstance(x, ast.Assign)
                    and any(isinstance(t, ast.Subscript) and _literal(t.slice) == "method" for t in x.targets)
                    and isinstance(_literal(x.value), str)
                ):
                    method = _literal(x.value)
        out[kind] = (method, refusal, _where(base, n))
    return out


# ---------------------------------------------------------------------------------------------
# EAGLEConfig's architecture renames


def _keep_rule(test: ast.expr, var: str) -> dict[str, list[str]] | None:
    """`arch.startswith("A") or arch.endswith("B") or arch == "C"` -> the names it keeps."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    out: dict[str, list[str]] = {"prefixes": [], "suffixes": [], "names": []}
    for p in parts:
        if (
            isinstance(p, ast.Call)
            and isinstance(p.func, ast.Attribute)
            and _dotted(p.func.value) == var
            and p.args
            and isinstance(_literal(p.args[0]), str)
        ):
            kind = {"startswith": "prefixes", "endswith": "suffixes"}.get(p.func.attr)
            if kind is None:
                return None
            out[kind].append(_literal(p.args[0]))
        elif (
            isinstance(p, ast.Compare)
            and isinstance(p.ops[0], ast.Eq)
            and _dotted(p.left) == var
            and isinstance(_literal(p.comparators[0]), str)
        ):
            out["names"].append(_literal(p.comparators[0]))
        else:
            return None
    return out


def _rename(comp: ast.ListComp) -> dict[str, Any] | None:
    """`[f"X{arch}" if not <keep> else arch for arch in ...]` (either branch order)."""
    if not (isinstance(comp.elt, ast.IfExp) and comp.generators and isinstance(comp.generators[0].target, ast.Name)):
        return None
    var = comp.generators[0].target.id
    e = comp.elt
    if isinstance(e.body, ast.Name) and isinstance(e.orelse, ast.JoinedStr):
        keep, fmt = _keep_rule(e.test, var), e.orelse
    elif isinstance(e.body, ast.JoinedStr) and isinstance(e.orelse, ast.Name):
        test = e.test.operand if isinstance(e.test, ast.UnaryOp) and isinstance(e.test.op, ast.Not) else None
        keep, fmt = (_keep_rule(test, var) if test is not None else None), e.body
    else:
        return None
    if keep is None:
        return None
    prefix = "".join(str(v.value) for v in fmt.values if isinstance(v, ast.Constant))
    return {
        "prefix": prefix,
        "keeps_prefixes": keep["prefixes"],
        "keeps_suffixes": keep["suffixes"],
        "keeps": keep["names"],
    }


def eagle_config(src: Source) -> dict[str, Any] | None:
    """EAGLEConfig's rename per method, and where vLLM wraps a drafter config in it."""
    info = src.module(EAGLE_CONFIG)
    cls = info.classes.get("EAGLEConfig") if info is not None else None
    init = cls.methods.get("__init__") if cls is not None else None
    if info is None or init is None:
        return None
    renames: dict[str, Any] = {}
    for n in ast.walk(init):
        if not (isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.ops[0], ast.Eq)):
            continue
        method = _literal(n.test.comparators[0])
        if not isinstance(method, str):
            continue
        for st in n.body:
            for x in ast.walk(st):
                if (
                    isinstance(x, ast.Assign)
                    and any(isinstance(t, ast.Subscript) and _literal(t.slice) == ARCH_KEY for t in x.targets)
                    and isinstance(x.value, ast.ListComp)
                    and (got := _rename(x.value)) is not None
                ):
                    renames.setdefault(method, {**got, "at": _where(info, x)})
    out: dict[str, Any] = {"renames": dict(sorted(renames.items()))}
    for mod in _SETUP_MODULES:
        m = src.module(mod)
        for n in ast.walk(m.tree) if m is not None and m.tree is not None else ():
            if isinstance(n, ast.Call) and _dotted(n.func) == "EAGLEConfig":
                out["wrapped_at"] = _where(m, n)
                break
        if "wrapped_at" in out:
            break
    return out


# ---------------------------------------------------------------------------------------------
# MTP rewrites (SpeculativeConfig.hf_config_override) and the refusals around them


def _override_fn(src: Source) -> tuple[Any, ast.FunctionDef] | tuple[None, None]:
    info = src.module(SPEC_CONFIG)
    cls = info.classes.get("SpeculativeConfig") if info is not None else None
    fn = cls.methods.get("hf_config_override") if cls is not None else None
    return (info, fn) if fn is not None else (None, None)


def _module_int(src: Source, info: Any, fn: ast.FunctionDef, name: str) -> tuple[int, str] | None:
    """An int constant a function imports by name (`from m import NAME`) or its module defines."""
    mod = info.name
    for n in ast.walk(fn):
        if isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == name for a in n.names):
            mod = src._abs(info, n.level, n.module, False)
    m = src.module(mod)
    for st in m.tree.body if m is not None and m.tree is not None else ():
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
            v = _literal(st.value)
            if isinstance(v, int) and not isinstance(v, bool):
                return v, _where(m, st)
    return None


def _getattr_chain(node: ast.expr) -> tuple[list[str], Any, bool] | None:
    """`getattr(cfg, "a", getattr(cfg, "b", D))` -> (["a", "b"], D, has default);
    `cfg.a` -> (["a"], None, False); `x.get("a", D)` -> (["a"], D, True)."""
    if isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) >= 2:
        key = _literal(node.args[1])
        if not isinstance(key, str):
            return None
        if len(node.args) < 3:
            return [key], None, False
        inner = _getattr_chain(node.args[2])
        if inner is not None and isinstance(node.args[2], ast.Call) and _dotted(node.args[2].func) == "getattr":
            return [key, *inner[0]], inner[1], inner[2]
        return [key], _literal(node.args[2]), True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = _literal(node.args[0])
        head = (_dotted(node.func.value) or "").split(".")[-1]
        if isinstance(key, str):
            path = f"{head}.{key}" if head and head not in ("hf_config", "config", "text_config") else key
            return [path], _literal(node.args[1]) if len(node.args) > 1 else None, len(node.args) > 1
    if isinstance(node, ast.Attribute) and (_dotted(node.value) or "").split(".")[-1] in (
        "hf_config",
        "text_config",
        "config",
    ):
        return [node.attr], None, False
    return None


def _n_predict(src: Source, info: Any, fn: ast.FunctionDef, body: list[ast.stmt], value: ast.expr) -> dict[str, Any]:
    """How an `n_predict` value is computed in a rewrite branch: config keys (first present wins)
    and a default, a fixed count, or unknown."""
    if isinstance(_literal(value), int):
        return {"fixed": _literal(value), "at": _where(info, value)}
    if isinstance(value, ast.Name):
        assigns = [
            n
            for st in body
            for n in ast.walk(st)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
        ]
        keys: list[str] = []
        default: Any = None
        has_default = False
        at = None
        for a in sorted(assigns, key=lambda x: x.lineno):
            v = a.value
            at = at or _where(info, a)
            if isinstance(v, ast.Name) and (c := _module_int(src, info, fn, v.id)) is not None:
                return {"fixed": c[0], "at": _where(info, a), "constant_at": c[1]}
            if isinstance(_literal(v), int):
                return {"fixed": _literal(v), "at": _where(info, a)}
            chain = _getattr_chain(v)
            if chain is None:
                return {"keys": None, "why": f"{_where(info, a)}: n_predict = {ast.unparse(v)[:80]}"}
            keys += [k for k in chain[0] if k not in keys]
            if chain[2]:
                default, has_default = chain[1], True
        if keys:
            return {"keys": keys, "default": default if has_default else None, "at": at}
    chain = _getattr_chain(value)
    if chain is not None:
        return {"keys": chain[0], "default": chain[1], "at": _where(info, value)}
    return {"keys": None, "why": f"{_where(info, value)}: n_predict = {ast.unparse(value)[:80]}"}


def _branch_archs(body: list[ast.stmt]) -> list[tuple[str, ast.Dict]]:
    """The MTP architectures a rewrite branch writes through `hf_config.update({... "architectures":
    [...]})`: a literal, both sides of `"A" if flag else "B"`, every value of a dict looked up."""
    dicts = {
        t.id: n.value
        for st in body
        for n in ast.walk(st)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out: list[tuple[str, ast.Dict]] = []
    for st in body:
        for n in ast.walk(st):
            if not isinstance(n, ast.Dict):
                continue
            for k, v in zip(n.keys, n.values):
                if _literal(k) != ARCH_KEY or not isinstance(v, ast.List) or not v.elts:
                    continue
                el = v.elts[0]
                if isinstance(_literal(el), str):
                    out.append((_literal(el), n))
                elif isinstance(el, ast.IfExp):
                    out += [(x, n) for x in (_literal(el.body), _literal(el.orelse)) if isinstance(x, str)]
                elif isinstance(el, ast.Subscript) and isinstance(el.value, ast.Name) and el.value.id in dicts:
                    table = _literal(dicts[el.value.id])
                    out += [(x, n) for x in (table or {}).values() if isinstance(x, str)]
    return out


def mtp(src: Source) -> dict[str, Any]:
    """Per MTP architecture: n_predict's source and the `num_hidden_layers` the rewrite sets; the
    refusals of `mtp` that name another method; the multiple-of-n_predict rule (module doc)."""
    out: dict[str, Any] = {"architectures": {}, "refusals": []}
    info, fn = _override_fn(src)
    if info is not None and fn is not None:
        out["rewrite_at"] = _where(info, fn)
        out["architectures"] = _mtp_rewrites(src, info, fn)
    for mod in _SETUP_MODULES:
        m = src.module(mod)
        if m is None or m.tree is None:
            continue
        for n in ast.walk(m.tree):
            if isinstance(n, ast.Raise) and DIVISIBLE_TEXT in _raise_text(n) and "n_predict" in ast.unparse(n):
                out.setdefault("multiple_of_n_predict_at", _where(m, n))
            if isinstance(n, ast.If):
                out["refusals"] += _mtp_refusals(m, n)
    return out


def _mtp_rewrites(src: Source, info: Any, fn: ast.FunctionDef) -> dict[str, Any]:
    """Per MTP architecture the rewrite picks: where, its n_predict and the num_hidden_layers it sets."""
    archs: dict[str, Any] = {}
    for n in ast.walk(fn):
        if not isinstance(n, ast.If):
            continue
        for arch, upd in _branch_archs(n.body):
            if arch in archs:
                continue
            entry: dict[str, Any] = {"at": _where(info, upd)}
            for k, v in zip(upd.keys, upd.values):
                if _literal(k) == "n_predict":
                    entry["n_predict"] = _n_predict(src, info, fn, n.body, v)
                if _literal(k) == "num_hidden_layers" and isinstance(_literal(v), int):
                    entry["num_hidden_layers"] = _literal(v)
                    entry["num_hidden_layers_at"] = _where(info, v)
            archs[arch] = entry
    return dict(sorted(archs.items()))


def _mtp_refusals(m: Any, n: ast.If) -> list[dict[str, Any]]:
    """An `if` whose body refuses `mtp` for model_types and names another method: one refusal per
    model_type its test compares."""
    raises = [x for st in n.body for x in ast.walk(st) if isinstance(x, ast.Raise)]
    hit = next((r for r in raises if OTHER_METHOD_RE.search(_raise_text(r))), None)
    if hit is None:
        return []
    types = [
        _literal(c.comparators[0])
        for c in ast.walk(n.test)
        if isinstance(c, ast.Compare)
        and isinstance(c.ops[0], ast.Eq)
        and (_dotted(c.left) or "").endswith(".model_type")
        and isinstance(_literal(c.comparators[0]), str)
    ]
    said = OTHER_METHOD_RE.search(_raise_text(hit))
    assert said is not None  # `hit` was picked for matching it
    return [
        {
            "model_type": mt,
            "method": said.group(1),
            "message": " ".join(_raise_text(hit).split()),
            "at": _where(m, hit),
        }
        for mt in types
    ]


# ---------------------------------------------------------------------------------------------
# Every draft config: SpeculativeConfig.hf_config_override, step by step

#: The names a config override reads its config by.
_CFG = ("hf_config", "draft_hf_config")


def _is_cfg(node: ast.expr | None) -> bool:
    return node is not None and (_dotted(node) or "") in _CFG


def _key_path(node: ast.expr) -> tuple[str, str] | None:
    """`getattr(hf_config, "a", D)` / `getattr(getattr(hf_config, "a", None), "b", D)` ->
    ("config", "a.b"); on the text part (`text_config`) -> ("text", "a")."""
    if not (isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) >= 2):
        return None
    key = _literal(node.args[1])
    if not isinstance(key, str):
        return None
    inner = node.args[0]
    if _is_cfg(inner):
        return "config", key
    if (_dotted(inner) or "") == "text_config":
        return "text", key
    got = _key_path(inner)
    return (got[0], f"{got[1]}.{key}") if got is not None else None


def _strs(node: ast.expr) -> list[str] | None:
    v = _literal(node)
    if isinstance(v, str):
        return [v]
    if isinstance(v, (tuple, list, set, frozenset)) and all(isinstance(x, str) for x in v):
        return sorted(v)
    return None


def _condition(part: ast.expr, initial: str | None) -> dict[str, Any] | None:
    """One conjunct of an override's test, as data (None: not one ppspec evaluates)."""
    if isinstance(part, ast.Compare) and len(part.ops) == 1:
        left, op, right = part.left, part.ops[0], part.comparators[0]
        vals = _strs(right)
        if isinstance(op, (ast.Eq, ast.In)) and vals is not None:
            if isinstance(left, ast.Name) and left.id == initial:
                return {"architecture": vals}
            if isinstance(left, ast.NamedExpr):
                left = left.value
            if isinstance(left, ast.Subscript) and (_dotted(left.value) or "").endswith(ARCH_KEY):
                return {"architecture": vals, "current": True}
            d = _dotted(left) or ""
            if d.endswith(".model_type") and d.rsplit(".", 1)[0] in _CFG:
                return {"model_type": vals}
            if d == "text_config.model_type" or _key_path(left) == ("text", "model_type"):
                return {"text_model_type": vals}
        return None
    if isinstance(part, ast.Call):
        got = _key_path(part)
        if got is not None:
            return {"key" if got[0] == "config" else "text_key": got[1]}
        # {"A", "B"}.intersection(getattr(hf_config, "architectures", None) or [])
        if isinstance(part.func, ast.Attribute) and part.func.attr == "intersection":
            vals = _strs(part.func.value)
            if vals is not None:
                return {"architecture": vals, "any_declared": True}
    return None


def _conditions(test: ast.expr, initial: str | None) -> list[dict[str, Any]] | None:
    """A test as conditions that must all hold; `A or B` as one condition `{"any": [[...], [...]]}`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        alts = [_conditions(v, initial) for v in test.values]
        return None if any(a is None for a in alts) else [{"any": alts}]
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    out = [_condition(p, initial) for p in parts]
    return None if any(c is None for c in out) else out  # type: ignore[return-value]


def _local_flags(body: list[ast.stmt], initial: str | None) -> dict[str, list[str]]:
    """`is_moe = hf_config.model_type in (...)` in a branch body (read before its own rewrite)."""
    out: dict[str, list[str]] = {}
    for st in body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            c = _condition(st.value, initial)
            if c is not None and list(c) == ["model_type"]:
                out[st.targets[0].id] = c["model_type"]
    return out


def _arch_effect(el: ast.expr, guard: str | None) -> Any:
    """What an `architectures` write sets: a name, or `A if flag else B` as data."""
    v = _literal(el)
    if isinstance(v, str):
        return (
            {"if": guard.lstrip("!"), "then": v, "else": None}
            if guard and not guard.startswith("!")
            else ({"if": guard[1:], "then": None, "else": v} if guard else v)
        )
    if isinstance(el, ast.IfExp) and isinstance(el.test, ast.Name):
        a, b = _literal(el.body), _literal(el.orelse)
        if isinstance(a, str) and isinstance(b, str):
            return {"if": el.test.id, "then": a, "else": b}
    if isinstance(el, ast.Subscript) and isinstance(el.value, ast.Name) and isinstance(el.slice, ast.Name):
        return {"lookup": el.value.id}  # resolved by _effects against the dict the body assigns
    return None


def _guard_name(test: ast.expr) -> str | None:
    """`if flag:` -> "flag"; `if not flag:` -> "!flag"; anything else None."""
    if isinstance(test, ast.Name):
        return test.id
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return f"!{test.operand.id}"
    return None


def _write(n: ast.AST, guard: str | None, out: dict[str, Any]) -> None:
    """One node's write to the config: an `update({...})` dict, or `cfg.model_type =` / `cfg.architectures =`
    / `x["architectures"] =`."""
    if isinstance(n, ast.Dict):
        for k, v in zip(n.keys, n.values):
            if _literal(k) == ARCH_KEY and isinstance(v, ast.List) and v.elts:
                got = _arch_effect(v.elts[0], guard)
                out["architectures"] = got if got is not None else {"unread": ast.unparse(v)[:80]}
            if _literal(k) == "model_type" and isinstance(_literal(v), str):
                out["model_type"] = _literal(v)
        return
    if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
        return
    t = n.targets[0]
    if (
        isinstance(t, ast.Attribute)
        and _is_cfg(t.value)
        and t.attr == "model_type"
        and isinstance(_literal(n.value), str)
    ):
        out["model_type"] = _literal(n.value)
    arch_target = (isinstance(t, ast.Attribute) and _is_cfg(t.value) and t.attr == ARCH_KEY) or (
        isinstance(t, ast.Subscript) and _literal(t.slice) == ARCH_KEY
    )
    if arch_target and isinstance(n.value, ast.List) and n.value.elts:
        got = _arch_effect(n.value.elts[0], guard)
        out["architectures"] = got if got is not None else {"unread": ast.unparse(n.value)[:80]}


def _effects(body: list[ast.stmt], guard: str | None = None) -> dict[str, Any]:
    """What a branch does to the config: the architectures it writes, the model_type it sets,
    whether it returns (and whether with another config: `replaces`)."""
    out: dict[str, Any] = {}
    dicts = {name: _literal(d) for name, d in archscan.assigned_dicts(body).items()}
    for st in body:
        if isinstance(st, ast.Return):
            out["returns"] = True
            if not _is_cfg(st.value):
                out["replaces"] = ast.unparse(st.value)[:80] if st.value is not None else "None"
            break
        name = _guard_name(st.test) if isinstance(st, ast.If) else None
        if isinstance(st, ast.If) and name:
            inner = _effects(st.body, name)
            if "architectures" in inner:
                out.setdefault("architectures", inner["architectures"])
            continue
        for n in ast.walk(st):
            _write(n, guard, out)
    arch = out.get("architectures")
    if isinstance(arch, dict) and "lookup" in arch:
        table = dicts.get(arch["lookup"])
        out["architectures"] = {"by_architecture": table} if isinstance(table, dict) else {"unread": arch["lookup"]}
    return out


def config_override(src: Source) -> dict[str, Any] | None:
    """`SpeculativeConfig.hf_config_override`, which vLLM passes as the draft ModelConfig's
    `hf_overrides`, so it runs on every draft config it loads (an EAGLE3 head's too), before
    EAGLEConfig's rename: its top-level steps in order. A step is a flag (`use_v32_mtp =
    hf_config.model_type in (...)`, read on the model type at that point) or an `if` whose test is
    read as conditions (`when`: the initial or current architecture, the model_type, the text
    model_type, a key that must be truthy) with what its body does (`architectures`, `model_type`,
    `returns`); a test ppspec does not evaluate is kept as `unread` (that step is never applied)."""
    info, fn = _override_fn(src)
    if info is None or fn is None:
        return None
    initial = next(
        (
            st.targets[0].id
            for st in fn.body
            if isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and isinstance(st.value, ast.Subscript)
            and (_dotted(st.value.value) or "").endswith(ARCH_KEY)
        ),
        None,
    )
    params = {a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs}
    steps: list[dict[str, Any]] = []
    for st in fn.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            c = _condition(st.value, initial)
            if c is not None and "model_type" in c:
                steps.append({"flag": st.targets[0].id, "model_type": c["model_type"], "at": _where(info, st)})
            continue
        if not isinstance(st, ast.If):
            continue
        if {x.id for x in ast.walk(st.test) if isinstance(x, ast.Name)} & params:
            continue  # a test on the caller's argument (the Transformers backend's MTP), not on the config
        eff = _effects(st.body)
        if not eff:
            continue
        conds = _conditions(st.test, initial)
        step: dict[str, Any] = {"at": _where(info, st), **eff}
        flags = _local_flags(st.body, initial)
        if flags:
            step["flags"] = flags
        if conds is None:
            step["unread"] = " ".join(ast.unparse(st.test).split())[:160]
        else:
            step["when"] = conds
        steps.append(step)
    out: dict[str, Any] = {"at": _where(info, fn), "steps": steps}
    for mod in _SETUP_MODULES:
        m = src.module(mod)
        for n in ast.walk(m.tree) if m is not None and m.tree is not None else ():
            if (
                isinstance(n, ast.Call)
                and (_dotted(n.func) or "").endswith("ModelConfig")
                and any(k.arg == "runner" and _literal(k.value) == "draft" for k in n.keywords)
            ):
                hk = next((k for k in n.keywords if k.arg == "hf_overrides"), None)
                if hk is not None:
                    out["draft_applies_at"] = _where(m, hk.value)
    return out


# ---------------------------------------------------------------------------------------------
# The class vLLM builds a `dspark` drafter as

DECLARED_ATTR = "speculator_config_class"


def _module_str(info: Any, node: ast.expr) -> str | None:
    """A string literal, or a module-level `NAME = "..."` constant of the module."""
    v = _literal(node)
    if isinstance(v, str):
        return v
    if isinstance(node, ast.Name) and info.tree is not None:
        for st in info.tree.body:
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in st.targets):
                got = _literal(st.value)
                return got if isinstance(got, str) else None
    return None


def _target_flag(body: list[ast.stmt]) -> dict[str, str] | None:
    """`is_v41 = <target>.hf_config.model_type == "x"` -> {"is_v41": "x"}."""
    for st in body:
        if (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and isinstance(st.value, ast.Compare)
            and isinstance(st.value.ops[0], ast.Eq)
            and "target" in (_dotted(st.value.left) or "")
            and (_dotted(st.value.left) or "").endswith(".model_type")
            and isinstance(_literal(st.value.comparators[0]), str)
        ):
            return {st.targets[0].id: _literal(st.value.comparators[0])}
    return None


def _fallback(body: list[ast.stmt], info: Any) -> dict[str, Any] | None:
    """The in-target class a branch writes: `["A" if is_v41 else "B"]` over the target's model_type."""
    flag = _target_flag(body) or {}
    for st in body:
        for n in ast.walk(st):
            if not (
                isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Attribute)
                and n.targets[0].attr == ARCH_KEY
                and isinstance(n.value, ast.List)
                and n.value.elts
            ):
                continue
            el = n.value.elts[0]
            if isinstance(el, ast.IfExp) and isinstance(el.test, ast.Name) and el.test.id in flag:
                a, b = _literal(el.body), _literal(el.orelse)
                if isinstance(a, str) and isinstance(b, str):
                    return {"by_target_model_type": {flag[el.test.id]: a}, "default": b, "at": _where(info, n)}
            if isinstance(_literal(el), str):
                return {"default": _literal(el), "at": _where(info, n)}
    return None


def _method_branches(info: Any, method: str) -> list[dict[str, Any]]:
    """0.30-0.33: the `self.method == <method>` branches of the speculative config's set-up: one that
    renames (`"X" in architectures and model_type == "y"` -> ["Z"]) and one that keeps the listed
    classes (`"A" not in architectures and ...`) and writes the in-target class otherwise."""
    out: list[dict[str, Any]] = []
    for n in ast.walk(info.tree):
        if not isinstance(n, ast.If):
            continue
        tests = [c for c in ast.walk(n.test) if isinstance(c, ast.Compare) and len(c.ops) == 1]
        if not any((_dotted(c.left) or "").endswith(".method") and _literal(c.comparators[0]) == method for c in tests):
            continue
        on_archs = [c for c in tests if (_dotted(c.comparators[0]) or "").endswith(f".{ARCH_KEY}")]
        kept = [_module_str(info, c.left) for c in on_archs if isinstance(c.ops[0], ast.NotIn)]
        has = [_module_str(info, c.left) for c in on_archs if isinstance(c.ops[0], ast.In)]
        types = [
            _literal(c.comparators[0])
            for c in tests
            if (_dotted(c.left) or "").endswith(".model_type") and isinstance(_literal(c.comparators[0]), str)
        ]
        fb = _fallback(n.body, info)
        if kept and fb is not None and all(isinstance(k, str) for k in kept):
            out.append({"keeps": sorted(k for k in kept if k), "fallback": fb, "at": _where(info, n)})
        elif has and fb is not None and "by_target_model_type" not in fb and all(isinstance(h, str) for h in has):
            when: list[dict[str, Any]] = [{"architecture": [h for h in has if h]}]
            if types:
                when.append({"model_type": types})
            out.append({"when": when, "architectures": fb["default"], "at": _where(info, n)})
    return sorted(out, key=lambda x: int(x["at"].rsplit(":", 1)[1]))


def _method_adapt(src: Source, v2_pkg: str) -> list[dict[str, Any]]:
    """0.34+: the method's SpeculatorConfig.adapt_draft_model_config (`<v2_pkg>/config.py`): a draft
    whose class declares no speculator (`draft.speculator_config_class is None`) is rewritten to the
    in-target class."""
    info = src.module(f"{V2_SPEC_PKG}.{v2_pkg}.config")
    for cls in info.classes.values() if info is not None else ():
        fn = cls.methods.get("adapt_draft_model_config")
        for n in ast.walk(fn) if fn is not None else ():
            if (
                isinstance(n, ast.If)
                and isinstance(n.test, ast.Compare)
                and isinstance(n.test.ops[0], ast.Is)
                and (_dotted(n.test.left) or "").endswith(f".{DECLARED_ATTR}")
                and _literal(n.test.comparators[0]) is None
            ):
                fb = _fallback(n.body, info)
                if fb is not None:
                    return [{"keeps": "declaring", "fallback": fb, "at": _where(info, n)}]
    return []


def method_class(src: Source, method: str, v2_pkg: str | None) -> dict[str, Any] | None:
    """How vLLM picks the class of a drafter of `method` (dspark) after the config override (which
    in 0.34 also renames a Qwen3 `DSparkDraftModel`): `steps` in order, each a rename (`when` ->
    `architectures`) or the keep rule (`keeps`: the classes listed in 0.30-0.33, or "declaring": a
    class that declares its speculator, 0.34) with the in-target `fallback` per target model_type.
    None: not found."""
    steps = _method_adapt(src, v2_pkg) if v2_pkg else []
    if not steps:
        info = src.module(SPEC_CONFIG)
        steps = _method_branches(info, method) if info is not None and info.tree is not None else []
    return {"steps": steps} if steps else None


# ---------------------------------------------------------------------------------------------
# 0.34+: which methods' drafters read the target's hidden states (SpeculatorConfig per method)

HIDDEN_STATES_ATTR = "uses_target_hidden_states"
CONFIG_BY_METHOD = "_CONFIG_BY_METHOD"


def hidden_state_methods(src: Source) -> dict[str, Any] | None:
    """Per built-in method, the `uses_target_hidden_states` of its SpeculatorConfig class (the class
    `_CONFIG_BY_METHOD` names, v1/worker/gpu/spec_decode/speculator_config.py, the attribute through
    its bases): what 0.34's `spec_decode_needs_target_embed` reads. None before 0.34 (no such map)."""
    info = src.module(f"{V2_SPEC_PKG}.speculator_config")
    table = next(
        (
            st.value
            for st in (info.tree.body if info is not None and info.tree is not None else ())
            if isinstance(st, (ast.Assign, ast.AnnAssign))
            and any(isinstance(t, ast.Name) and t.id == CONFIG_BY_METHOD for t in _targets(st))
            and isinstance(st.value, ast.Dict)
        ),
        None,
    )
    if info is None or not isinstance(table, ast.Dict):
        return None
    out: dict[str, Any] = {}
    for k, v in zip(table.keys, table.values):
        method = _literal(k)
        if not (isinstance(method, str) and isinstance(v, ast.Call) and len(v.args) == 2):
            continue
        mod, name = _literal(v.args[0]), _literal(v.args[1])
        m = src.module(f"{V2_SPEC_PKG}.{mod}") if isinstance(mod, str) else None
        cls = m.classes.get(name) if m is not None and isinstance(name, str) else None
        owner = _owner(src.mro(cls, "cuda"), attr=HIDDEN_STATES_ATTR) if cls is not None else None
        value = _literal(owner.attrs[HIDDEN_STATES_ATTR]) if owner is not None else None
        if isinstance(value, bool):
            assert owner is not None
            out[method] = {"value": value, "at": owner.where(owner.attr_lines[HIDDEN_STATES_ATTR]), "config": name}
    return dict(sorted(out.items())) or None


def _targets(st: ast.stmt) -> list[ast.expr]:
    return list(st.targets) if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []


def rules(src: Source) -> dict[str, Any]:
    """The table's `drafter_rules` (module doc)."""
    return {
        "speculators": speculators(src),
        "eagle_config": eagle_config(src),
        "mtp_rewrite": mtp(src),
        "config_override": config_override(src),
        "target_hidden_states": hidden_state_methods(src),
        # the methods that pick their drafter's class themselves (`class_rule`: dspark_class)
        **{
            m.class_rule: method_class(src, m.name, m.v2_speculator)
            for m in methods.REGISTRY.values()
            if m.class_rule is not None
        },
    }


# ---------------------------------------------------------------------------------------------
# Per drafter class


def _assigns_attr(fn: ast.AST, attr: str) -> list[ast.Assign]:
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr for t in n.targets)
    ]


def _calls_named(fn: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and (_dotted(n.func) or "").split(".")[-1] == name]


def _eagle_capable(mro: list[ClassInfo | str]) -> bool:
    names = {c.name if isinstance(c, ClassInfo) else c.rsplit(".", 1)[-1] for c in mro}
    if names & EAGLE_INTERFACES:
        return True
    return any(
        isinstance(c, ClassInfo)
        and any(_literal(c.attrs.get(a)) is True for a in ("supports_eagle", "supports_eagle3"))
        for c in mro
    )


def _loaders(mro: list[ClassInfo | str]) -> list[tuple[ClassInfo, ast.FunctionDef]]:
    """The `load_weights` that runs and those it reaches through `super().load_weights(...)`."""
    out: list[tuple[ClassInfo, ast.FunctionDef]] = []
    rest = list(mro)
    while rest:
        owner = _owner(rest, method="load_weights")
        if owner is None:
            break
        fn = owner.methods["load_weights"]
        out.append((owner, fn))
        calls_super = any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "load_weights"
            and isinstance(n.func.value, ast.Call)
            and _dotted(n.func.value.func) == "super"
            for n in ast.walk(fn)
        )
        if not calls_super:
            break
        rest = rest[rest.index(owner) + 1 :]
    return out


def _embed_facts(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any]:
    """Whether the drafter keeps its own embedding (`own`: "checkpoint" | True | False | None)."""
    mro = sc.src.mro(cls, platform)
    capable = _eagle_capable(mro)
    names = {c.name if isinstance(c, ClassInfo) else c.rsplit(".", 1)[-1] for c in mro}
    declared = (
        EAGLE_BASE in names
        or capable
        or any(
            isinstance(c, ClassInfo)
            and (OWN_EMBED in c.attrs or any(_assigns_attr(fn, OWN_EMBED) for fn in c.methods.values()))
            for c in mro
        )
    )
    facts: dict[str, Any] = {"declared": declared}
    # `hasattr(model_cls, "has_own_embed_tokens")`: a class attribute (its own or a base's, the EAGLE
    # interfaces' default included), not one only __init__ or the load sets: what vLLM 0.34's
    # registry records as `may_use_target_embed` (model_executor/models/registry.py)
    holder = _owner(mro, attr=OWN_EMBED)
    facts["class_attr"] = holder is not None
    if holder is not None:
        facts["class_attr_at"] = holder.where(holder.attr_lines[OWN_EMBED])
    # the load that runs (and the ones it reaches through super()) sets it from the checkpoint's
    # tensor names (vLLM's EAGLE weight hook acts only on a class that implements
    # SupportsEagle/SupportsEagle3)
    for loader, lw in _loaders(mro):
        hook = _calls_named(lw, EAGLE_WEIGHT_HOOK)
        sets = [a for a in _assigns_attr(lw, OWN_EMBED) if _literal(a.value) is True]
        if (hook and capable) or sets:
            facts.update(own="checkpoint", at=loader.where((hook or sets)[0].lineno))
            return facts
        if hook:
            facts["hook_inert_at"] = loader.where(hook[0].lineno)
    for c in mro:
        if not isinstance(c, ClassInfo):
            continue
        init = c.methods.get("__init__")
        got = _assigns_attr(init, OWN_EMBED) if init is not None else []
        if got:
            v = _literal(got[0].value)
            facts.update(own=v if isinstance(v, bool) else None, at=c.where(got[0].lineno))
            if not isinstance(v, bool):
                facts["why"] = f"{c.where(got[0].lineno)}: {OWN_EMBED} = {ast.unparse(got[0].value)[:80]}"
            return facts
        if OWN_EMBED in c.attrs:
            v = _literal(c.attrs[OWN_EMBED])
            facts.update(own=v if isinstance(v, bool) else None, at=c.where(c.attr_lines[OWN_EMBED]))
            return facts
    facts.update(own=None if declared else False, at=cls.where())
    if declared:
        facts["why"] = f"{cls.where()}: nothing in the class sets {OWN_EMBED}"
    return facts


def _embed_width(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any]:
    """The config key the drafter's own embedding width is read from (`hidden_size`), where its
    inner model (`.model`) builds `embed_tokens = VocabParallelEmbedding(vocab, width)`."""
    inner, _, _ = sc._built_class(cls, "model", platform)
    for holder in (inner, cls):
        if holder is None:
            continue
        for c in sc.src.mro(holder, platform):
            if not isinstance(c, ClassInfo) or "__init__" not in c.methods:
                continue
            init = c.methods["__init__"]
            v = _self_assign(init, "embed_tokens")
            if isinstance(v, ast.Call) and (_dotted(v.func) or "").endswith(EMBED_LAYER) and len(v.args) >= 2:
                w = v.args[1]
                d = _dotted(w) or ""
                if d.startswith("self.") and d.count(".") == 1:
                    w2 = _self_assign(init, d[5:])
                    d = _dotted(w2) or "" if w2 is not None else d
                key = d.rsplit(".", 1)[-1] if "." in d else None
                return {"width_key": key, "width_at": c.where(v.lineno)} if key else {}
            if v is not None:
                return {}
    return {}


def _d2t_facts(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any] | None:
    """How the drafter's load reads `d2t`, and what a reduced vocabulary without it gives."""
    mro = sc.src.mro(cls, platform)
    loaders = _loaders(mro)
    hit = next(
        (
            (loader, n)
            for loader, lw in loaders
            for n in ast.walk(lw)
            if isinstance(n, ast.Constant) and n.value == "d2t"
        ),
        None,
    )
    if hit is None:
        return None
    out: dict[str, Any] = {"reads_at": hit[0].where(hit[1].lineno)}
    refusal = next(
        (
            (loader, r)
            for loader, lw in loaders
            for r in ast.walk(lw)
            if isinstance(r, ast.Raise) and "d2t" in _raise_text(r)
        ),
        None,
    )
    if refusal is not None:
        out.update(
            missing="refused",
            missing_at=refusal[0].where(refusal[1].lineno),
            message=" ".join(_raise_text(refusal[1]).split()),
        )
        return out
    for c in mro:
        if not isinstance(c, ClassInfo) or "__init__" not in c.methods:
            continue
        v = _self_assign(c.methods["__init__"], D2T_PARAM)
        if v is not None and any(
            isinstance(x, ast.Call) and (_dotted(x.func) or "").endswith("zeros") for x in ast.walk(v)
        ):
            out.update(missing="zeros", missing_at=c.where(v.lineno))
            return out
    out["missing"] = None
    return out


_CONFIG_NAMES = ("config", "hf_config", "text_config", "target_config")


def _config_attr(node: ast.expr, init: ast.AST) -> str | None:
    """`config.key` (also through a local `target_config = vllm_config.model_config.hf_config`):
    the key; None for anything else."""
    if not isinstance(node, ast.Attribute):
        return None
    head = _dotted(node.value) or ""
    if head.split(".")[-1] in _CONFIG_NAMES:
        return node.attr
    return None


def _range_start(node: ast.expr, init: ast.AST) -> dict[str, Any] | None:
    """The first id a `range(...)` over draft layers yields: 0, a config key, or a fixed int."""
    if not (isinstance(node, ast.Call) and _dotted(node.func) == "range" and node.args):
        return None
    if len(node.args) == 1:
        return {"fixed": 0}
    start = node.args[0]
    d = _dotted(start) or ""
    if d.startswith("self.") and d.count(".") == 1:
        v = _self_assign(init, d[5:])
        start = v if v is not None else start
    if isinstance(_literal(start), int):
        return {"fixed": _literal(start)}
    if (key := _config_attr(start, init)) is not None:
        return {"key": key}
    if (
        isinstance(start, ast.BinOp)
        and isinstance(start.op, ast.Mult)
        and (key := _config_attr(start.left, init)) is not None
        and isinstance(_literal(start.right), int)
    ):
        return {"key": key, "times": _literal(start.right)}
    return {"why": ast.unparse(start)[:80]}


def _layer_name_args(n: ast.AST) -> list[ast.JoinedStr]:
    """The f-strings a loop body passes as a module's name: a `prefix=` keyword, or a positional
    argument whose text names layers (a weight-name mapper's f-strings are neither)."""
    out = []
    for c in ast.walk(n):
        if not isinstance(c, ast.Call):
            continue
        for k in c.keywords:
            if k.arg == "prefix":
                value = k.value
                if isinstance(value, ast.Name):  # `layer_prefix = f"..."` earlier in the loop body
                    var = value.id
                    value = next(
                        (
                            a.value
                            for a in ast.walk(n)
                            if isinstance(a, ast.Assign)
                            and any(isinstance(t, ast.Name) and t.id == var for t in a.targets)
                        ),
                        value,
                    )
                out += [x for x in ast.walk(value) if isinstance(x, ast.JoinedStr)]
        for a in c.args:
            out += [x for x in ast.walk(a) if isinstance(x, ast.JoinedStr) and "layers" in _str_parts(x)]
    return out


def _offset_start(names: list[ast.JoinedStr], var: str, init: ast.AST) -> dict[str, Any] | None:
    """`f"...layers.{idx + start}"`: the ids start at `start` (over `range(count)`)."""
    for s in names:
        for f in s.values:
            v = f.value if isinstance(f, ast.FormattedValue) else None
            if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
                other = v.right if _dotted(v.left) == var else v.left if _dotted(v.right) == var else None
                if other is not None:
                    fake = ast.Call(func=ast.Name("range"), args=[other, other], keywords=[])
                    return _range_start(fake, init)
    return None


def _layer_ids(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any] | None:
    """Where an MTP class's draft layer ids start: the `range(...)` whose variable names the layer
    modules (`prefix=f"{prefix}.layers.{idx}"`) in the constructors of the class and of the
    modules it builds (its predictor, a layer container)."""
    todo: list[ClassInfo] = [cls]
    seen: set[str] = set()
    while todo and len(seen) < 12:
        k = todo.pop(0)
        if k.ref in seen:
            continue
        seen.add(k.ref)
        for m in sc.src.mro(k, platform):
            if not isinstance(m, ClassInfo) or "__init__" not in m.methods:
                continue
            init = m.methods["__init__"]
            for n in ast.walk(init):
                gens = (
                    n.generators
                    if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))
                    else [n]
                    if isinstance(n, ast.For)
                    else []
                )
                for g in gens:
                    if not isinstance(g.target, ast.Name):
                        continue
                    var = g.target.id
                    names = [
                        s
                        for s in _layer_name_args(n)
                        if any(
                            isinstance(f, ast.FormattedValue)
                            and var in {x.id for x in ast.walk(f) if isinstance(x, ast.Name)}
                            for f in s.values
                        )
                    ]
                    if not names:
                        continue
                    got = _offset_start(names, var, init) or _range_start(g.iter, init)
                    if got is not None:
                        return {**got, "at": m.where(getattr(n, "lineno", init.lineno))}
            for st in ast.walk(init):
                if (
                    isinstance(st, ast.Assign)
                    and any(isinstance(t, ast.Attribute) and _dotted(t.value) == "self" for t in st.targets)
                    and isinstance(st.value, ast.Call)
                    and (fname := _dotted(st.value.func))
                    and (sub := sc.src.resolve(m.module, fname, platform)) is not None
                    and sub.module.startswith("vllm.model")
                ):
                    todo.append(sub)
    return None


def _declared_method(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any] | None:
    """0.34+: the method a drafter class declares (`speculator_config_class`'s `base_method`)."""
    mro = sc.src.mro(cls, platform)
    owner = _owner(mro, attr="speculator_config_class")
    if owner is None:
        return None
    ref = _dotted(owner.attrs["speculator_config_class"])
    conf = sc.src.resolve(owner.module, ref, platform) if ref else None
    if conf is None:
        return None
    base = _owner(sc.src.mro(conf, platform), attr="base_method")
    method = _literal(base.attrs["base_method"]) if base is not None else None
    if not isinstance(method, str):
        return None
    return {"method": method, "at": owner.where(owner.attr_lines["speculator_config_class"]), "config": conf.name}


FC_SIZE = "fc_input_size"


def _var(node: ast.expr) -> str | None:
    """`x` or `self.x` as a variable name."""
    d = _dotted(node) or ""
    return d if isinstance(node, ast.Name) or (d.startswith("self.") and d.count(".") == 1) else None


def _assigned(init: ast.AST, var: str) -> list[ast.expr]:
    """Every value assigned to `var` in a constructor, in source order."""
    got = [
        n
        for n in ast.walk(init)
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        and any(_var(t) == var for t in _targets(n))
        and n.value is not None
    ]
    return [n.value for n in sorted(got, key=lambda x: x.lineno) if n.value is not None]


def _config_get(node: ast.expr, init: ast.AST) -> list[str] | None:
    """`getattr(<config>, "k", ...)` -> ["k"]; `<d>.get("k")` where d = getattr(<config>, "n", ...) -> ["n.k"];
    `a or b` -> both in order; a Name -> what it is assigned."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        out: list[str] = []
        for v in node.values:
            got = _config_get(v, init)
            if got is None:
                return None
            out += got
        return out
    if isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) >= 2:
        key = _literal(node.args[1])
        head = (_dotted(node.args[0]) or "").split(".")[-1]
        if not (isinstance(key, str) and head in _CONFIG_NAMES):
            return None
        dflt = node.args[2] if len(node.args) > 2 else None
        # getattr(config, "target_hidden_size", config.hidden_size): the default is another key
        more = [dflt.attr] if isinstance(dflt, ast.Attribute) and _config_attr(dflt, init) else []
        return [key, *more]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key, holder = _literal(node.args[0]), _var(node.func.value)
        if not isinstance(key, str) or holder is None:
            return None
        src = _assigned(init, holder)
        parent = _config_get(src[0], init) if src else None
        prefix = parent[0] if parent and len(parent) == 1 else holder.split(".")[-1]
        return [f"{prefix}.{key}"]
    if (name := _var(node)) is not None:
        vals = _assigned(init, name)
        return _config_get(vals[0], init) if len(vals) == 1 else None
    return None


def _count_rule(init: ast.AST, var: str, depth: int = 0) -> dict[str, Any] | None:
    """How a constructor computes a count: the config keys it tries in order (a count, or a list whose
    length counts) and the default when none is set."""
    keys: list[str] = []
    default = None
    for v in _assigned(init, var):
        if isinstance(v, ast.IfExp) and isinstance(v.body, ast.Call) and _dotted(v.body.func) == "len":
            got = _config_get(v.body.args[0], init) if v.body.args else None
            if got is None or not isinstance(_literal(v.orelse), int):
                return None
            keys += got
            default = _literal(v.orelse)
        elif (other := _var(v)) is not None and depth < 3 and not _config_get(v, init):
            inner = _count_rule(init, other, depth + 1)
            if inner is None:
                return None
            keys += inner["keys"]
            default = inner["default"] if inner["default"] is not None else default
        else:
            got = _config_get(v, init)
            if got is None:
                return None
            keys += got
    return {"keys": list(dict.fromkeys(keys)), "default": default} if keys else None


def _fc_product(c: ClassInfo, init: ast.FunctionDef, n: ast.Assign) -> dict[str, Any]:
    """The rule of one `fc_input_size = <width> * <count>`: which side is the count, its keys and
    default, the width's keys."""
    assert isinstance(n.value, ast.BinOp)
    sides = [_var(n.value.left), _var(n.value.right)]

    def width_of(v: str | None) -> list[str] | None:
        vals = _assigned(init, v) if v else []
        return _config_get(vals[0], init) if len(vals) == 1 else None

    for w, k in (sides, sides[::-1]):
        width, count = width_of(w), _count_rule(init, k) if k else None
        if width is not None and count is not None:
            return {**count, "width_keys": width, "at": c.where(n.lineno)}
    return {"why": f"{c.where(n.lineno)}: {ast.unparse(n)[:100]}"}


def _fc_sizing(sc: Scanner, cls: ClassInfo, platform: str) -> dict[str, Any] | None:
    """How an EAGLE3 drafter sizes `fc` (its constructor's `fc_input_size = <width> * <count>`): the
    config keys the tap count is read from, first set wins (a list counts by its length), the count
    when none is set, and the keys of the width. None where the class has no such product."""
    inner, _, _ = sc._built_class(cls, "model", platform)
    for holder in (inner, cls):
        for c in sc.src.mro(holder, platform) if holder is not None else ():
            init = c.methods.get("__init__") if isinstance(c, ClassInfo) else None
            if not isinstance(c, ClassInfo) or init is None:
                continue
            for n in ast.walk(init):
                if (
                    isinstance(n, ast.Assign)
                    and any((_var(t) or "").split(".")[-1] == FC_SIZE for t in n.targets)
                    and isinstance(n.value, ast.BinOp)
                    and isinstance(n.value.op, ast.Mult)
                ):
                    return _fc_product(c, init, n)
    return None


def class_facts(sc: Scanner, arch: str, platform: str, mtp_class: bool = False) -> dict[str, Any]:
    """The drafter-side facts of one registered drafter class on one platform (module doc);
    `mtp_class`: it numbers no layers from a depth call (an MTP class: where its ids start)."""
    cls = sc.cls(arch, platform)
    if cls is None:
        return {}
    out: dict[str, Any] = {"embed": {**_embed_facts(sc, cls, platform), **_embed_width(sc, cls, platform)}}
    d2t = _d2t_facts(sc, cls, platform)
    if d2t is not None:
        out["d2t"] = d2t
    if mtp_class:
        ids = _layer_ids(sc, cls, platform)
        if ids is not None:
            out["layer_ids"] = ids
    declared = _declared_method(sc, cls, platform)
    if declared is not None:
        out["declares_method"] = declared
    fc = _fc_sizing(sc, cls, platform) if not mtp_class else None
    if fc is not None:
        out["fc_taps"] = fc
    return out


def scan(root: Path, extra: Any = None) -> dict[str, Any]:
    """archscan.scan's facts of every registered architecture (with `extra`'s release-wide sections:
    knowledge/releasescan.scan, the whole table, passes them), with the drafter side added
    (`drafter_rules`, and per drafter class `embed`, `d2t`, `layer_ids`, `declares_method`)."""
    doc = archscan.scan(root, extra=extra)
    sc = Scanner(Path(root))
    sc.read_registry()
    annotate(sc, doc["drafters"])
    doc["drafter_rules"] = rules(sc.src)
    return doc


def annotate(sc: Scanner, drafters: dict[str, Any]) -> None:
    """Add class_facts to every drafter entry of a scanned table (platform groups already folded:
    the facts of a group's first platform, which share one class)."""
    for arch, entry in drafters.items():
        for plats, facts in (entry.get("platforms") or {}).items():
            if isinstance(facts, dict) and facts.get("class"):
                mtp_class = facts.get("numbering") is None
                facts.update(class_facts(sc, arch, plats.split(",")[0], mtp_class))
