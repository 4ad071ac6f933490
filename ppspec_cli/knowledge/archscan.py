"""Read vLLM's model facts from its source, statically (`ast`, no import of vLLM or torch).

Given the directory that holds the `vllm` package (an unpacked wheel, or an installed
site-packages), walk vLLM's model registry (`model_executor/models/registry.py`: the dicts that
map an architecture name to a (module, class) pair) and read, per architecture and per platform:

- the class vLLM builds, its bases through inheritance (`SupportsPP`, `SupportsEagle3`,
  `SupportsEagle`);
- the inner decoder vLLM's PP gate reads (`model.model`, or `model.language_model.model` for a
  multimodal model) and, in that decoder's MRO, who defines the opt-in attribute
  `supports_aux_hidden_states_over_pp` and who defines the `forward` that runs, and whether that
  forward relays taps between stages (calls the mixin's collect/pack helpers). Both are needed:
  a subclass can inherit the attribute and override `forward` with one that never relays;
- whether the decoder builds a real embedding on the last stage when the method needs it;
- per drafter class: how draft layers are numbered (from the target's total depth, or from the
  stage-local count), how `fc` is sized;
- per MTP class: the config key its layer count is read from and its default;
- which MTP architecture the `mtp` method rewrites a target to (config/speculative.py);
- per hybrid target (`IsHybrid`): how its decoder decides a layer's kind (`layer_rule`): the
  per-layer config list its module reads (`config.layer_types[layer_idx]`: Qwen3-Next's
  `full_attention_interval` reaches vLLM as the `layer_types` list its config class builds), a
  predicate on the layer index (Bailing's `layer_group_size`, Kimi-Linear's
  `linear_attn_config["kda_layers"]` read by vLLM's config class), or one layer class for every
  layer (Falcon-H1).

Where the source does not decide a fact statically the value is None and a `why` says so; the
reader never guesses. The output is plain JSON-able data (`scan(root)`); tools/vllm_arch_facts.py
writes it per release, knowledge/archtable.py reads it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

#: The platforms a vLLM model package dispatches on (its `current_platform` branches).
PLATFORMS = ("cuda", "rocm", "xpu", "cpu", "tpu")
_PLATFORM_CALLS = {"is_rocm": "rocm", "is_xpu": "xpu", "is_cpu": "cpu", "is_cuda": "cuda", "is_tpu": "tpu"}

#: vLLM's names for what ppspec reads (interfaces.py); stable across 0.30-0.33.
OPT_IN_ATTR = "supports_aux_hidden_states_over_pp"
RELAY_CALLS = frozenset({"collect_remote_aux_hidden_states", "pack_local_aux_hidden_states"})
PP_INTERFACE = "SupportsPP"
TAPS_INTERFACE = "SupportsEagle3"
EAGLE1_INTERFACE = "SupportsEagle"
HYBRID_INTERFACE = "IsHybrid"
TARGET_EMBED_RULE = "spec_decode_needs_target_embed"
MISSING_LAYER = "PPMissingLayer"
EMBED_LAYER = "VocabParallelEmbedding"
#: The method a model embeds token ids with (VllmModel interface).
EMBED_METHOD = "embed_input_ids"
TOTAL_DEPTH_CALL = "get_total_num_hidden_layers"
LOCAL_DEPTH_CALL = "get_num_layers"
#: model_loader/utils.py: builds `model_class`, else the registered architecture its config names.
INIT_MODEL_CALL = "initialize_model"
REGISTRY = "vllm/model_executor/models/registry.py"
SPEC_CONFIG = "vllm/config/speculative.py"
_MODELS_PKG = "vllm.model_executor.models"
#: A decoder built from another package's class never carries vLLM's opt-in attribute.
EXTERNAL_NOTE = (
    "a class from outside vLLM, which never sets supports_aux_hidden_states_over_pp: vLLM's PP gate reads False"
)
#: decoder_why prefix: the language model is the registered architecture named by this config's
#: `architectures` (`text_config`, or `.` for the top-level config), resolved per profile.
LM_FROM_CONFIG = "language model: the registered architecture named by the config's architectures at "
_MAX_DEPTH = 12

#: What vLLM's drafter load reads off the target to share its embedding with an EAGLE/EAGLE3/
#: DFlash/DSpark/MTP drafter (v1/spec_decode/llm_base_proposer.py, SpecDecodeBaseProposer
#: `_maybe_share_embeddings`, at PP world size 1): `.model` of the target (of its language model
#: for a multimodal class), and on it the first of these attributes.
TARGET_EMBED_ATTRS = ("embed_tokens", "embedding")
PROPOSER_MODULE = "vllm.v1.spec_decode.llm_base_proposer"
NO_MODEL_TEXT = "Target model does not have 'model' attribute"
NO_EMBED_TEXT = "Target model does not have 'embed_tokens' or 'embedding' attribute"
#: Bases outside vLLM's source that add no module attribute (torch's Module, typing's Protocol).
_PLAIN_BASES = frozenset({"Module", "Protocol", "object", "Generic", "ABC"})


# ---------------------------------------------------------------------------------------------
# Modules and classes


@dataclass
class ClassInfo:
    name: str
    module: str
    file: str
    lineno: int
    bases: list[str]
    attrs: dict[str, ast.expr]
    attr_lines: dict[str, int]
    methods: dict[str, ast.FunctionDef]

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.name}"

    def where(self, line: int | None = None) -> str:
        return f"{self.file}:{line or self.lineno}"


@dataclass
class ModuleInfo:
    name: str
    file: str
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    # local name -> platform -> (module, name or None for a module alias)
    imports: dict[str, dict[str, tuple[str, str | None]]] = field(default_factory=dict)
    tree: ast.Module | None = None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    if isinstance(node, ast.Subscript):  # Generic[T], Protocol[...]
        return _dotted(node.value)
    return None


def _platforms_true(test: ast.expr) -> set[str] | None:
    """The platforms on which a module-level `if` test holds at run time (`current_platform.is_rocm()`,
    `...device_type == "tpu"`, `TYPE_CHECKING` (never), `not`, `or`, `and`); None when the test is not
    about the platform."""
    if isinstance(test, (ast.Name, ast.Attribute)) and (_dotted(test) or "").endswith("TYPE_CHECKING"):
        return set()
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in _PLATFORM_CALLS:
        return {_PLATFORM_CALLS[test.func.attr]}
    if isinstance(test, ast.Compare) and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant):
        v = test.comparators[0].value
        if (
            isinstance(v, str)
            and v in PLATFORMS
            and isinstance(test.left, ast.Attribute)
            and test.left.attr in ("device_type", "device_name")
        ):
            return {v} if isinstance(test.ops[0], ast.Eq) else set(PLATFORMS) - {v}
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _platforms_true(test.operand)
        return None if inner is None else set(PLATFORMS) - inner
    if isinstance(test, ast.BoolOp):
        parts = [_platforms_true(v) for v in test.values]
        if any(x is None for x in parts):
            return None
        out = set(parts[0] or ())
        for x in parts[1:]:
            out = (out | x) if isinstance(test.op, ast.Or) else (out & x)  # type: ignore[operator]
        return out
    return None


class Source:
    """The `vllm` package under `root`, parsed on demand."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._mods: dict[str, ModuleInfo | None] = {}

    def path_of(self, module: str) -> Path | None:
        rel = Path(*module.split("."))
        for p in (self.root / rel.with_suffix(".py"), self.root / rel / "__init__.py"):
            if p.is_file():
                return p
        return None

    def module(self, name: str) -> ModuleInfo | None:
        if name in self._mods:
            return self._mods[name]
        self._mods[name] = None
        p = self.path_of(name)
        if p is None:
            return None
        tree = parse_source(p)
        if tree is None:
            return None
        info = ModuleInfo(name, p.relative_to(self.root).as_posix(), tree=tree)
        is_pkg = p.name == "__init__.py"
        self._block(info, tree.body, set(PLATFORMS), is_pkg)
        self._mods[name] = info
        return info

    def _abs(self, info: ModuleInfo, level: int, mod: str | None, is_pkg: bool) -> str:
        if level == 0:
            return mod or ""
        parts = info.name.split(".")
        base = parts if is_pkg else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join([*base, *([mod] if mod else [])])

    def _block(self, info: ModuleInfo, body: list[ast.stmt], plats: set[str], is_pkg: bool) -> None:
        for st in body:
            if isinstance(st, ast.ImportFrom):
                src = self._abs(info, st.level, st.module, is_pkg)
                for a in st.names:
                    for p in plats:
                        info.imports.setdefault(a.asname or a.name, {})[p] = (src, a.name)
            elif isinstance(st, ast.Import):
                for a in st.names:
                    local = a.asname or a.name.split(".")[0]
                    for p in plats:
                        info.imports.setdefault(local, {})[p] = (a.name if a.asname else local, None)
            elif isinstance(st, ast.ClassDef):
                if plats:  # a class under `if TYPE_CHECKING:` never exists at run time
                    info.classes.setdefault(st.name, self._class(info, st))
            elif (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and isinstance(st.value, (ast.Name, ast.Attribute))
                and (alias := _dotted(st.value)) not in (None, st.targets[0].id)
            ):  # `Base = LlamaForCausalLM` (the run-time side of a TYPE_CHECKING stub): an alias
                for p in plats:
                    info.imports.setdefault(st.targets[0].id, {})[p] = (info.name, alias)
            elif isinstance(st, ast.If):
                true_on = _platforms_true(st.test)
                if true_on is None:
                    self._block(info, st.body, plats, is_pkg)
                    self._block(info, st.orelse, plats, is_pkg)
                else:
                    self._block(info, st.body, plats & true_on, is_pkg)
                    self._block(info, st.orelse, plats - true_on, is_pkg)
            elif isinstance(st, ast.Try):
                self._block(info, st.body, plats, is_pkg)

    def _class(self, info: ModuleInfo, node: ast.ClassDef) -> ClassInfo:
        attrs: dict[str, ast.expr] = {}
        lines: dict[str, int] = {}
        methods: dict[str, ast.FunctionDef] = {}
        for st in node.body:
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        attrs[t.id], lines[t.id] = st.value, st.lineno
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                attrs[st.target.id], lines[st.target.id] = st.value, st.lineno
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[st.name] = st  # type: ignore[assignment]
        bases = [b for b in (_dotted(x) for x in node.bases) if b]
        return ClassInfo(node.name, info.name, info.file, node.lineno, bases, attrs, lines, methods)

    # -- name resolution ----------------------------------------------------------------------

    def resolve(self, module: str, name: str, platform: str, depth: int = 0) -> ClassInfo | None:
        """The class `name` means inside `module` on `platform` (through imports and re-exports)."""
        if depth > _MAX_DEPTH:
            return None
        info = self.module(module)
        if info is None:
            return None
        head, _, rest = name.partition(".")
        if rest:
            target = info.imports.get(head, {}).get(platform)
            if target is None:
                return None
            mod = target[0] if target[1] is None else f"{target[0]}.{target[1]}"
            return self.resolve(mod, rest, platform, depth + 1)
        if name in info.classes:
            return info.classes[name]
        target = info.imports.get(name, {}).get(platform)
        if target is None and info.tree is not None:
            return self._lazy(info, name, platform, depth)
        if target is None or target[1] is None:
            return None
        return self.resolve(target[0], target[1], platform, depth + 1)

    def _lazy(self, info: ModuleInfo, name: str, platform: str, depth: int) -> ClassInfo | None:
        """A package's module-level `__getattr__(name)` (lazy re-exports), run for one name and
        platform: its if-tests on the name and the platform, its imports, its return."""
        body = info.tree.body if info.tree else []
        fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
        if fn is None or not fn.args.args:
            return None
        exported = next(
            (
                _literal(n.value)
                for n in body
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
            ),
            None,
        )
        env = _LazyRun(
            self, info, fn.args.args[0].arg, name, platform, exported if isinstance(exported, (list, tuple)) else ()
        )
        return env.run(fn.body, depth)

    def mro(self, cls: ClassInfo, platform: str) -> list[ClassInfo | str]:
        """C3 linearisation; bases outside the source stay as their dotted names."""
        return _c3(self, cls, platform, 0)


class _LazyRun:
    """Follows one path through a lazy `__getattr__` for a known name and platform."""

    def __init__(self, src: Source, info: ModuleInfo, arg: str, name: str, platform: str, exported: Any):
        self.src, self.info, self.arg, self.name, self.platform, self.exported = (
            src,
            info,
            arg,
            name,
            platform,
            tuple(exported),
        )
        self.bound: dict[str, tuple[str, str | None]] = {}
        self.base = info.name  # a package's __init__: relative imports start here

    def _truth(self, test: ast.expr) -> bool | None:
        plats = _platforms_true(test)
        if plats is not None:
            return self.platform in plats
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.left, ast.Name)
            and test.left.id == self.arg
        ):
            right = test.comparators[0]
            vals = self.exported if isinstance(right, ast.Name) and right.id == "__all__" else _literal(right)
            if isinstance(test.ops[0], ast.Eq):
                return vals == self.name
            if isinstance(test.ops[0], ast.In) and isinstance(vals, (list, tuple, set, frozenset)):
                return self.name in vals
            if isinstance(test.ops[0], ast.NotEq):  # `if name != "X": raise` (vLLM 0.34's vllm/models/step5)
                return vals != self.name
            if isinstance(test.ops[0], ast.NotIn) and isinstance(vals, (list, tuple, set, frozenset)):
                return self.name not in vals
        return None

    def run(self, body: list[ast.stmt], depth: int) -> ClassInfo | None:
        for st in body:
            if isinstance(st, ast.If):
                t = self._truth(st.test)
                if t is None:
                    return None  # a test the source does not decide statically
                got = self.run(st.body if t else st.orelse, depth)
                if got is not None or self._returned:
                    return got
            elif isinstance(st, ast.ImportFrom):
                mod = self.src._abs(self.info, st.level, st.module, True)
                for a in st.names:
                    sub = f"{mod}.{a.name}"
                    self.bound[a.asname or a.name] = (sub, None) if self.src.path_of(sub) else (mod, a.name)
            elif isinstance(st, ast.Raise):
                self._returned = True
                return None
            elif isinstance(st, ast.Return) and st.value is not None:
                self._returned = True
                return self._value(st.value, depth)
        return None

    _returned = False

    def _value(self, v: ast.expr, depth: int) -> ClassInfo | None:
        if (
            isinstance(v, ast.Subscript)
            and isinstance(v.value, ast.Dict)
            and isinstance(v.slice, ast.Name)
            and v.slice.id == self.arg
        ):
            hit = next((val for key, val in zip(v.value.keys, v.value.values) if _literal(key) == self.name), None)
            return self._value(hit, depth) if hit is not None else None
        if (
            isinstance(v, ast.Call)
            and _dotted(v.func) == "getattr"
            and len(v.args) == 2
            and isinstance(v.args[0], ast.Name)
        ):
            b = self.bound.get(v.args[0].id)
            return self.src.resolve(b[0], self.name, self.platform, depth + 1) if b and b[1] is None else None
        d = _dotted(v)
        if not d:
            return None
        head, _, rest = d.partition(".")
        b = self.bound.get(head)
        if b is None:
            return None
        if b[1] is None:
            return self.src.resolve(b[0], rest, self.platform, depth + 1) if rest else None
        return self.src.resolve(b[0], b[1], self.platform, depth + 1) if not rest else None


def _c3(src: Source, cls: ClassInfo, platform: str, depth: int) -> list[ClassInfo | str]:
    if depth > _MAX_DEPTH:
        return [cls]
    seqs: list[list[ClassInfo | str]] = []
    for b in cls.bases:
        got = src.resolve(cls.module, b, platform)
        seqs.append(_c3(src, got, platform, depth + 1) if got is not None else [b])
    seqs.append([(src.resolve(cls.module, b, platform) or b) for b in cls.bases])
    out: list[ClassInfo | str] = [cls]
    key = lambda c: c.ref if isinstance(c, ClassInfo) else c  # noqa: E731
    seqs = [list(s) for s in seqs if s]
    while seqs:
        for s in seqs:
            head = s[0]
            if not any(key(head) in {key(x) for x in t[1:]} for t in seqs):
                break
        else:  # inconsistent: fall back to depth-first order without repeats
            seen = {key(c) for c in out}
            for c in (c for s in seqs for c in s):
                if key(c) not in seen:
                    seen.add(key(c))
                    out.append(c)
            return out
        out.append(head)
        seqs = [[c for c in t if key(c) != key(head)] for t in seqs]
        seqs = [t for t in seqs if t]
    return out


def _name(c: ClassInfo | str) -> str:
    return c.name if isinstance(c, ClassInfo) else c.rsplit(".", 1)[-1]


def _calls(fn: ast.AST) -> set[str]:
    """Every function or method name a body calls (bare names and attribute names)."""
    out: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                out.add(n.func.id)
            elif isinstance(n.func, ast.Attribute):
                out.add(n.func.attr)
    return out


def _names(fn: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _owner(mro: list[ClassInfo | str], *, attr: str | None = None, method: str | None = None) -> ClassInfo | None:
    for c in mro:
        if isinstance(c, ClassInfo) and ((attr and attr in c.attrs) or (method and method in c.methods)):
            return c
    return None


def _self_assign(fn: ast.AST, attr: str) -> ast.expr | None:
    """The value of the first `self.<attr> = ...` in a body (nested blocks included)."""
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and t.attr == attr
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and n.value is not None
                ):
                    return n.value
    return None


def _param_default(fn: ast.AST, name: str) -> ast.expr | None:
    """The default of a function's parameter `name` (keyword-only or positional), None without one."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = fn.args
    pos = a.posonlyargs + a.args
    pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults)) + [
        (p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None
    ]
    return next((d for p, d in pairs if p.arg == name), None)


def _returned_calls(fn: ast.AST) -> list[ast.Call]:
    """The calls a function returns: `return X(...)`, or `return name` where the function assigns
    `name = X(...)` (its last such assignment)."""
    local: dict[str, ast.Call] = {}
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Call)
        ):
            local[n.targets[0].id] = n.value
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Call):
            out.append(n.value)
        elif isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id in local:
            out.append(local[n.value.id])
    return out


#: decoder_why's config path for `config.get_text_config()`: the checkpoint's text config.
TEXT_CONFIG_PATH = "(text config)"
_CONFIG_HEADS = ("config", "hf_config", "self.config", "vllm_config.model_config.hf_config", "self.hf_config")


def _config_path(node: ast.expr | None, fn: ast.AST | None, hops: int = 0) -> str | None:
    """Which part of the checkpoint's config an expression is: "." (the whole), a top-level key
    ("text_config"), TEXT_CONFIG_PATH (`.get_text_config()`), through one local or `self.` alias
    assigned in `fn`; None when it is none of these."""
    if node is None or hops > 2:
        return None
    if isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("get_text_config"):
        return TEXT_CONFIG_PATH
    d = _dotted(node) or ""
    if d in _CONFIG_HEADS:
        return "."
    head, _, key = d.rpartition(".")
    if head in _CONFIG_HEADS and key:
        return key
    if fn is not None and d:
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and any(_dotted(t) == d for t in n.targets):
                return _config_path(n.value, fn, hops + 1)
    return None


# ---------------------------------------------------------------------------------------------
# Facts per class


class Scanner:
    def __init__(self, root: Path):
        self.src = Source(root)
        self.registry: dict[str, tuple[str, str]] = {}
        self.registry_lines: dict[str, int] = {}
        self.registry_kind: dict[str, str] = {}

    # registry ---------------------------------------------------------------------------------

    def read_registry(self) -> None:
        info = self.src.module("vllm.model_executor.models.registry")
        if info is None or info.tree is None:
            raise FileNotFoundError(f"no {REGISTRY} under {self.src.root}")
        for st in info.tree.body:
            if not (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and isinstance(st.value, ast.Dict)
            ):
                continue
            group = st.targets[0].id
            if not group.endswith("_MODELS") or group in (
                "_VLLM_MODELS",
                "_PREVIOUSLY_SUPPORTED_MODELS",
                "_OOT_SUPPORTED_MODELS",
            ):
                continue
            for k, v in zip(st.value.keys, st.value.values):
                arch, pair = _literal(k), _literal(v)
                if (
                    isinstance(arch, str)
                    and isinstance(pair, tuple)
                    and len(pair) == 2
                    and all(isinstance(x, str) for x in pair)
                ):
                    self.registry.setdefault(arch, pair)
                    self.registry_lines.setdefault(arch, k.lineno if k is not None else st.lineno)
                    self.registry_kind.setdefault(arch, group.strip("_").lower())

    def module_of(self, arch: str) -> str:
        mod = self.registry[arch][0]
        return mod if mod.startswith("vllm.") else f"{_MODELS_PKG}.{mod}"

    def cls(self, arch: str, platform: str) -> ClassInfo | None:
        mod = self.module_of(arch)
        return self.src.resolve(mod, self.registry[arch][1], platform)

    # class facts -------------------------------------------------------------------------------

    def _built_class(self, holder: ClassInfo, attr: str, platform: str) -> tuple[ClassInfo | None, str, str]:
        """The class `self.<attr> = X(...)` builds in the first constructor of holder's MRO that
        assigns it: (class, where, why-not)."""
        for c in self.src.mro(holder, platform):
            if not isinstance(c, ClassInfo) or "__init__" not in c.methods:
                continue
            val = _self_assign(c.methods["__init__"], attr)
            if val is None:
                continue
            where = c.where(val.lineno)
            if isinstance(val, ast.Name):  # `lm = X(...)` then `self.<attr> = lm`
                val = next(
                    (
                        n.value
                        for n in ast.walk(c.methods["__init__"])
                        if isinstance(n, ast.Assign)
                        and isinstance(n.value, ast.Call)
                        and any(isinstance(t, ast.Name) and t.id == val.id for t in n.targets)
                    ),
                    val,
                )
            if not isinstance(val, ast.Call):
                return None, where, f"self.{attr} is not built by a constructor call"
            fname = _dotted(val.func)
            if fname is None:
                return None, where, f"self.{attr} is built by an expression the source does not name"
            if fname.startswith("self."):
                return self._built_by_self(holder, fname, platform, where, attr)
            if fname.endswith("init_vllm_registered_model"):
                return self._registered(val, platform, where, c.methods["__init__"])
            if fname.split(".")[-1] == INIT_MODEL_CALL:
                return self._initialized(val, c, platform, where)
            mod, fname = self._param_value(holder, c, fname, platform)
            got = self.src.resolve(mod, fname, platform)
            if got is None and self._outside(mod, fname, platform):
                return None, where, f"self.{attr} is built by {fname}: {EXTERNAL_NOTE}"
            return got, where, "" if got else f"self.{attr} is built by {fname}, which is not a class in vLLM's source"
        return None, holder.where(), f"no constructor in the MRO assigns self.{attr}"

    def _built_by_self(
        self, holder: ClassInfo, fname: str, platform: str, where: str, attr: str
    ) -> tuple[ClassInfo | None, str, str]:
        """`self.<attr> = self.<maker>(...)`: what the method returns, or the class attribute names."""
        mro = self.src.mro(holder, platform)
        if (maker := _owner(mro, method=fname[5:])) is not None:
            return self._returned(holder, maker, fname[5:], platform, where, attr)
        ref = _owner(mro, attr=fname[5:])
        cref = _dotted(ref.attrs[fname[5:]]) if ref else None
        got = self.src.resolve(ref.module, cref, platform) if ref and cref else None
        return got, where, "" if got else f"self.{attr} is built by {fname}, not a class named in the source"

    def _param_value(self, holder: ClassInfo, c: ClassInfo, name: str, platform: str) -> tuple[str, str]:
        """What `name` means in c's constructor when vLLM builds holder (its loader passes only
        vllm_config and prefix): not a parameter of it, the name itself; a parameter, the class a
        more derived constructor passes to `super().__init__(name=...)` (its own parameter: that
        parameter's default), else c's default. (module, dotted name) to resolve; the name unchanged
        where no default names a class."""
        chain = [x for x in self.src.mro(holder, platform) if isinstance(x, ClassInfo) and "__init__" in x.methods]
        if c not in chain or _param_default(c.methods["__init__"], name) is None:
            return c.module, name
        for x in chain[: chain.index(c)]:
            sup = next(
                (
                    n
                    for n in ast.walk(x.methods["__init__"])
                    if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "__init__"
                    and isinstance(n.func.value, ast.Call)
                    and _dotted(n.func.value.func) == "super"
                ),
                None,
            )
            passed = next((k.value for k in sup.keywords if k.arg == name), None) if sup is not None else None
            if passed is None:
                continue
            own = _param_default(x.methods["__init__"], _dotted(passed) or "")
            return x.module, _dotted(own if own is not None else passed) or name
        return c.module, _dotted(_param_default(c.methods["__init__"], name)) or name  # type: ignore[arg-type]

    def _outside(self, module: str, fname: str, platform: str, fn: ast.AST | None = None) -> bool:
        """The name comes from a package other than vLLM (transformers, torch): imported so at the
        module's top, or inside the function `fn` that uses it."""
        info = self.src.module(module)
        head = fname.split(".")[0]
        got = info.imports.get(head, {}).get(platform) if info else None
        if got is None and fn is not None:
            got = next(
                (
                    (st.module or "", a.name)
                    for st in ast.walk(fn)
                    if isinstance(st, ast.ImportFrom) and st.level == 0
                    for a in st.names
                    if (a.asname or a.name) == head
                ),
                None,
            )
        return got is not None and not got[0].startswith("vllm") and got[0] != "" and not got[0].startswith(".")

    def _returned(
        self, holder: ClassInfo, owner: ClassInfo, method: str, platform: str, where: str, attr: str
    ) -> tuple[ClassInfo | None, str, str]:
        """`self.<attr> = self.<method>(...)`: the one class the method's `return X(...)` names (X a
        class, `self.<cls_attr>` a class attribute of the built object's class, or a local name the
        method assigns `X(...)` to)."""
        fn = owner.methods[method]
        calls = _returned_calls(fn)
        found = {_dotted(c.func) for c in calls}
        found.discard(None)
        if len(calls) == 1 and (f := _dotted(calls[0].func) or "").endswith("init_vllm_registered_model"):
            return self._registered(calls[0], platform, where)
        if len(calls) == 1 and f.split(".")[-1] == INIT_MODEL_CALL:
            return self._initialized(calls[0], owner, platform, where)
        outside = {f for f in found if f and self._outside(owner.module, f, platform, fn)}
        if outside and outside == found:
            return (
                None,
                where,
                f"self.{attr} is built by self.{method} ({owner.where(fn.lineno)}), which returns "
                f"{', '.join(sorted(outside))}: {EXTERNAL_NOTE}",
            )
        classes = [
            c for c in (self._class_named(holder, owner, f, platform) for f in sorted(f for f in found if f)) if c
        ]
        if len(classes) == 1 and len(found) == 1:
            return classes[0], where, ""
        return (
            None,
            where,
            f"self.{attr} is built by self.{method} ({owner.where(fn.lineno)}), which does not return one class "
            "named in the source",
        )

    def _class_named(self, holder: ClassInfo, owner: ClassInfo, name: str, platform: str) -> ClassInfo | None:
        """The class `name` means in a method of `owner` run on an instance of `holder`: a
        `self.<attr>` reads the class attribute through holder's MRO (a subclass's override wins)."""
        if not name.startswith("self."):
            return self.src.resolve(owner.module, name, platform)
        ref = _owner(self.src.mro(holder, platform), attr=name[5:])
        cref = _dotted(ref.attrs[name[5:]]) if ref else None
        return self.src.resolve(ref.module, cref, platform) if ref and cref else None

    def _initialized(
        self, call: ast.Call, c: ClassInfo, platform: str, where: str
    ) -> tuple[ClassInfo | None, str, str]:
        """`initialize_model(vllm_config=..., model_class=X)` builds X; without `model_class` it
        builds the registered architecture the config names: a literal list passed to
        `vllm_config.with_hf_config(cfg, [arch])`, else the config's own `architectures`."""
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        if (mc := _dotted(kw["model_class"]) if "model_class" in kw else None) is not None:
            got = self.src.resolve(c.module, mc, platform)
            return got, where, "" if got else f"initialize_model builds {mc}, which is not a class in vLLM's source"
        vc = kw.get("vllm_config")
        if isinstance(vc, ast.Call) and (_dotted(vc.func) or "").endswith("with_hf_config") and vc.args:
            archs = (
                _literal(vc.args[1])
                if len(vc.args) > 1
                else _literal(next((k.value for k in vc.keywords if k.arg == "architectures"), None))
            )
            if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in self.registry:
                return self.cls(archs[0], platform), where, ""
            cfg = (_dotted(vc.args[0]) or "").split(".")
            if len(cfg) == 2 and cfg[0] in ("config", "hf_config"):
                return None, where, f"{LM_FROM_CONFIG}{cfg[1]}"
        return (
            None,
            where,
            "the language model is chosen at run time from the config's architectures (initialize_model)",
        )

    def _registered(
        self, call: ast.Call, platform: str, where: str, fn: ast.AST | None = None
    ) -> tuple[ClassInfo | None, str, str]:
        """`init_vllm_registered_model(...)`: the registered architecture an `architectures` list
        names (its own keyword, or `vllm_config.with_hf_config(cfg, architectures=[...])`), else
        the one the checkpoint's sub-config names (`hf_config=config.text_config`, also through
        `self.text_config = config.text_config` or a local in the constructor `fn`;
        `config.get_text_config()`: the checkpoint's text config)."""
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        vc = kw.get("vllm_config")
        wh = vc if isinstance(vc, ast.Call) and (_dotted(vc.func) or "").endswith("with_hf_config") else None
        archs_node = kw.get("architectures")
        if archs_node is None and wh is not None:
            archs_node = (
                wh.args[1]
                if len(wh.args) > 1
                else next((k.value for k in wh.keywords if k.arg == "architectures"), None)
            )
        archs = _literal(archs_node)
        if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in self.registry:
            return self.cls(archs[0], platform), where, ""
        cfg_node = kw.get("hf_config") or (wh.args[0] if wh is not None and wh.args else None)
        path = _config_path(cfg_node, fn) if cfg_node is not None else None
        if path is not None:
            return None, where, f"{LM_FROM_CONFIG}{path}"
        return (
            None,
            where,
            "the language model is chosen at run time from the config's architectures (init_vllm_registered_model)",
        )

    def decoder(self, outer: ClassInfo, platform: str) -> tuple[ClassInfo | None, str, str]:
        """The inner decoder vLLM's PP gate reads: `.model` of the model or of its language model."""
        mro = self.src.mro(outer, platform)
        lm_attr = _language_model_attr(mro)
        has_lm = lm_attr is not None and _self_assign_in_mro(mro, lm_attr) is not None
        if has_lm and lm_attr is not None:
            lm, where, why = self._built_class(outer, lm_attr, platform)
            if lm is None:
                return None, where, why
            inner, w2, why2 = self._built_class(lm, "model", platform)
            if inner is None and why2.startswith("no constructor"):
                return None, where, "the language model has no `.model`: vLLM's PP gate reads none and refuses"
            return inner, w2, why2
        return self._built_class(outer, "model", platform)

    def relay(self, dec: ClassInfo, platform: str) -> dict[str, Any]:
        mro = self.src.mro(dec, platform)
        opt = _owner(mro, attr=OPT_IN_ATTR)
        fwd = _owner(mro, method="forward")
        opt_val = _literal(opt.attrs[OPT_IN_ATTR]) if opt else False
        relays_fwd = False
        if fwd is not None:
            seen: set[str] = set()
            todo = ["forward"]
            while todo:  # the forward and the own methods it calls
                m = todo.pop()
                if m in seen:
                    continue
                seen.add(m)
                owner = _owner(mro, method=m)
                if owner is None:
                    continue
                called = _calls(owner.methods[m])
                if called & RELAY_CALLS:
                    relays_fwd = True
                    break
                todo += [x for x in called if _owner(mro, method=x) is not None and x not in RELAY_CALLS]
                if "super" in called and m in called:  # super().<m>(...): the next definition up the MRO
                    rest = mro[mro.index(owner) + 1 :]
                    up = _owner(rest, method=m)
                    if up is not None and _calls(up.methods[m]) & RELAY_CALLS:
                        relays_fwd = True
                        break
        return {
            "opt_in": opt_val is True,
            "opt_in_defined_by": opt.ref if opt else None,
            "opt_in_at": opt.where(opt.attr_lines[OPT_IN_ATTR]) if opt else None,
            "forward_defined_by": fwd.ref if fwd else None,
            "forward_at": fwd.where(fwd.methods["forward"].lineno) if fwd else None,
            "forward_relays": relays_fwd,
            "relays_over_pp": bool(opt_val is True and relays_fwd),
        }

    def model_embed(self, dec: ClassInfo, platform: str) -> dict[str, Any]:
        """Which of vLLM's TARGET_EMBED_ATTRS the inner decoder has (`model_embed`: its name, or
        False), as its constructors (or a class attribute or property) in the MRO assign it; null
        where a base outside vLLM's source or a non-constructor method may add it."""
        mro = self.src.mro(dec, platform)
        for attr in TARGET_EMBED_ATTRS:
            for c in mro:
                if not isinstance(c, ClassInfo):
                    continue
                val = _self_assign(c.methods["__init__"], attr) if "__init__" in c.methods else None
                if val is not None:
                    return {"model_embed": attr, "model_embed_at": c.where(val.lineno)}
                if attr in c.attrs or attr in c.methods:
                    return {
                        "model_embed": attr,
                        "model_embed_at": c.where(c.attr_lines.get(attr) or c.methods[attr].lineno),
                    }
        outside = [_name(c) for c in mro if not isinstance(c, ClassInfo) and _name(c) not in _PLAIN_BASES]
        if outside:
            return {
                "model_embed": None,
                "model_embed_why": f"{dec.where()}: a base outside vLLM's source ({', '.join(outside)}) may add it",
            }
        late = [
            f"{c.name}.{m}"
            for c in mro
            if isinstance(c, ClassInfo)
            for m, fn in c.methods.items()
            if m != "__init__" and any(_self_assign(fn, a) is not None for a in TARGET_EMBED_ATTRS)
        ]
        if late:
            return {
                "model_embed": None,
                "model_embed_why": f"{dec.where()}: assigned outside the constructor ({', '.join(late)})",
            }
        return {"model_embed": False, "model_embed_at": dec.where()}

    def embed_last_stage(self, dec: ClassInfo, platform: str, depth: int = 0) -> tuple[bool | None, str]:
        names: set[str] = set()
        where = dec.where()
        for c in self.src.mro(dec, platform):
            if isinstance(c, ClassInfo) and "__init__" in c.methods:
                init = c.methods["__init__"]
                names |= _names(init)
                where = c.where(init.lineno)
                if "super" not in _calls(init):
                    break
        if not names:
            return None, "no readable constructor"
        if TARGET_EMBED_RULE in names:
            return True, where
        if (every := _embed_every_stage(self.src.mro(dec, platform))) is not None:
            return True, every  # a PPMissingLayer elsewhere (the norm) does not touch the embedding
        if MISSING_LAYER not in names and EMBED_LAYER in names:
            return True, where
        if MISSING_LAYER in names:
            return False, where
        sub = self._embed_holder(dec, platform)
        if sub is not None and depth < 3 and (got := self.embed_last_stage(sub, platform, depth + 1))[0] is not None:
            return got
        return None, f"{where}: the constructor neither builds {EMBED_LAYER} nor a {MISSING_LAYER}"

    def _embed_holder(self, dec: ClassInfo, platform: str) -> ClassInfo | None:
        """The child module a decoder's `embed_input_ids` hands the lookup to (`return
        self.<child>.<method>(...)`, OPT's `self.decoder`): the class its constructor builds there."""
        mro = self.src.mro(dec, platform)
        owner = _owner(mro, method=EMBED_METHOD)
        if owner is None:
            return None
        subs = {
            d.split(".")[1]
            for n in ast.walk(owner.methods[EMBED_METHOD])
            if isinstance(n, ast.Call) and (d := _dotted(n.func) or "").startswith("self.") and d.count(".") == 2
        }
        return self._built_class(dec, subs.pop(), platform)[0] if len(subs) == 1 else None

    def target(self, arch: str, platform: str) -> dict[str, Any] | None:
        outer = self.cls(arch, platform)
        if outer is None:
            return None
        mro = self.src.mro(outer, platform)
        names = {_name(c) for c in mro}
        attr_true = lambda a: any(isinstance(c, ClassInfo) and _literal(c.attrs.get(a)) is True for c in mro)  # noqa: E731
        out: dict[str, Any] = {
            "class": outer.ref,
            "at": outer.where(),
            "supports_pp": PP_INTERFACE in names,
            "supports_eagle3": TAPS_INTERFACE in names or attr_true("supports_eagle3"),
            "supports_eagle": EAGLE1_INTERFACE in names or attr_true("supports_eagle"),
            "is_hybrid": HYBRID_INTERFACE in names,  # mixes attention with linear/state-space layers
        }
        dec, where, why = self.decoder(outer, platform)
        out["decoder"] = dec.ref if dec else None
        out["decoder_at"] = where
        if dec is None and why.startswith(LM_FROM_CONFIG):
            out["language_model_from"] = why[len(LM_FROM_CONFIG) :]
        out.update(_target_model_fact(mro, dec, where, why))
        if dec is None:
            out["decoder_why"] = why
            if out["is_hybrid"]:
                out["layer_rule"] = None
                out["layer_rule_why"] = f"no decoder read statically: {why}"
            gate_reads_none = (
                "reads none" in why
                or EXTERNAL_NOTE in why
                or (why.startswith("no constructor") and _owner(mro, attr="model") is None)
            )
            out.update(
                relay=None
                if not gate_reads_none
                else {"opt_in": False, "forward_relays": False, "relays_over_pp": False},
                embed_last_stage=None,
                embed_why=why,
            )
            if not gate_reads_none:
                out["relay_why"] = why
            if (rule := _pp_embed_rule(mro)) is not None:
                out["embed_rule"] = rule
            elif (whole := _no_pp_split(mro)) is not None:
                out.pop("embed_why")
                out.update(embed_last_stage=True, embed_at=whole)
            if picked := self._dispatched(outer, platform):
                out = {k: v for k, v in out.items() if k not in ("embed_why", "target_model_why")} | picked
            return out
        out.update(self.model_embed(dec, platform))
        out["relay"] = self.relay(dec, platform)
        if out["is_hybrid"]:
            rule = layer_rule(self.src, dec.module, dec)
            out["layer_rule"] = rule
            if rule is None:
                out["layer_rule_why"] = (
                    f"{dec.where()}: its module reads no per-layer config list (layer_types, layers_block_type, "
                    "hybrid_override_pattern) indexed by the layer"
                )
        emb, ewhere = self.embed_last_stage(dec, platform)
        out["embed_last_stage"] = emb
        out["embed_at" if emb is not None else "embed_why"] = ewhere
        return out

    def _dispatched(self, outer: ClassInfo, platform: str) -> dict[str, Any]:
        """A class whose `__new__` returns an instance of a class it picks from a module-level dict
        (MiniCPM-V: `_SUPPORT_VERSION.get(version)`): the drafter-load and last-stage embedding facts
        every class of the dict agrees on (`model_embed`, `embed_last_stage`, `target_model`), with
        where the dict and the `__new__` are; nothing where they differ or one is unread."""
        new = outer.methods.get("__new__")
        info = self.src.module(outer.module)
        if new is None or info is None or info.tree is None:
            return {}
        picked = {
            _dotted(n.func.value)
            for n in ast.walk(new)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and isinstance(n.func.value, ast.Name)
        }
        table = next(
            (
                st
                for st in info.tree.body
                if isinstance(st, ast.Assign)
                and isinstance(st.value, ast.Dict)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id in picked
            ),
            None,
        )
        if table is None:
            return {}
        facts = []
        for v in table.value.values:  # type: ignore[attr-defined]
            c = self.src.resolve(outer.module, _dotted(v) or "", platform)
            dec = self.decoder(c, platform)[0] if c is not None else None
            if c is None or dec is None:
                return {}
            facts.append(
                (self.embed_last_stage(dec, platform)[0], self.model_embed(dec, platform)["model_embed"], c.name)
            )
        if len({f[:2] for f in facts}) != 1 or facts[0][0] is None or facts[0][1] is None:
            return {}
        at = outer.where(table.lineno)
        return {
            "embed_last_stage": facts[0][0],
            "embed_at": at,
            "model_embed": facts[0][1],
            "model_embed_at": at,
            "target_model": True,
            "target_model_at": at,
            "dispatch": {"at": outer.where(new.lineno), "table_at": at, "classes": [f[2] for f in facts]},
        }

    # drafters and MTP -------------------------------------------------------------------------

    def drafter(self, arch: str, platform: str) -> dict[str, Any] | None:
        c = self.cls(arch, platform)
        if c is None:
            return None
        info = self.src.module(c.module)
        mro = self.src.mro(c, platform)
        out: dict[str, Any] = {"class": c.ref, "at": c.where()}
        # the most derived constructor that reads a depth decides (it builds the draft model it names)
        decider = next(
            (
                (x, cs)
                for x in mro
                if isinstance(x, ClassInfo)
                and "__init__" in x.methods
                and (cs := _calls(x.methods["__init__"]) & {TOTAL_DEPTH_CALL, LOCAL_DEPTH_CALL})
            ),
            None,
        )
        if decider is not None and len(decider[1]) == 1:
            out["numbering"] = "global" if TOTAL_DEPTH_CALL in decider[1] else "pp-local"
            out["numbering_at"] = decider[0].where(decider[0].methods["__init__"].lineno)
        elif decider is not None:
            out["numbering"] = None
            out["numbering_why"] = f"{decider[0].where()}: the constructor reads both depths"
        else:
            out["numbering"] = None
            out["numbering_why"] = f"the constructor calls neither {TOTAL_DEPTH_CALL} nor {LOCAL_DEPTH_CALL}"
        out["fc"] = _fc_rule(info.tree) if info and info.tree else None
        mtp = _mtp_layers(self.src, c, platform) if out["numbering"] is None else None
        if mtp is not None:
            out["mtp_layers"] = mtp
        return out


#: A method that splits a model over PP stages itself (the Transformers backend's `pipeline_parallel`).
PP_SPLIT_METHOD = "pipeline_parallel"
TIE_FLAG = "tie_word_embeddings"


def _embed_every_stage(mro: list[ClassInfo | str]) -> str | None:
    """Where a constructor builds `self.embed_tokens = VocabParallelEmbedding(...)` as a statement of
    its own body, outside any `if` (so on every PP stage, the last included: Qwen3-Next/Qwen3.5,
    Qwen3-MoE); None when no constructor of the chain does."""
    for c in mro:
        if not isinstance(c, ClassInfo) or "__init__" not in c.methods:
            continue
        for st in c.methods["__init__"].body:
            if (
                isinstance(st, (ast.Assign, ast.AnnAssign))
                and any(
                    isinstance(t, ast.Attribute) and t.attr in TARGET_EMBED_ATTRS and _dotted(t.value) == "self"
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
                )
                and isinstance(st.value, ast.Call)
                and (_dotted(st.value.func) or "").endswith(EMBED_LAYER)
            ):
                return c.where(c.methods["__init__"].lineno)
        if "super" not in _calls(c.methods["__init__"]):
            break
    return None


def _pp_embed_rule(mro: list[ClassInfo | str]) -> dict[str, Any] | None:
    """A class that places its modules on PP stages itself and keeps the modules before the layer
    list (the embedding) on a stage other than the first only under `if ... (self.<m>() and
    ...is_last_rank): continue`, where `<m>` reads the config's tie_word_embeddings: the last stage
    holds the embedding exactly when the checkpoint ties it (`{"config_flag", "at", "flag_at"}`)."""
    owner = _owner(mro, method=PP_SPLIT_METHOD)
    if owner is None:
        return None
    for n in ast.walk(owner.methods[PP_SPLIT_METHOD]):
        if not (isinstance(n, ast.If) and any(isinstance(b, ast.Continue) for b in n.body)):
            continue
        names = {x.attr for x in ast.walk(n.test) if isinstance(x, ast.Attribute)}
        if "is_last_rank" not in names:
            continue
        for call in (x for x in ast.walk(n.test) if isinstance(x, ast.Call)):
            m = (_dotted(call.func) or "").removeprefix("self.")
            flag_owner = _owner(mro, method=m) if m and "." not in m else None
            if flag_owner is not None and any(
                isinstance(c, ast.Constant) and c.value == TIE_FLAG for c in ast.walk(flag_owner.methods[m])
            ):
                return {
                    "config_flag": TIE_FLAG,
                    "at": owner.where(n.lineno),
                    "flag_at": flag_owner.where(flag_owner.methods[m].lineno),
                }
    return None


def _no_pp_split(mro: list[ClassInfo | str]) -> str | None:
    """Where a class overrides the Transformers backend's PP split with a method that does nothing
    (the MTP draft: "runs whole on the last PP rank"): no module is replaced by a missing layer, so
    the last stage holds the whole model, its embedding included."""
    owner = _owner(mro, method=PP_SPLIT_METHOD)
    if owner is None:
        return None
    fn = owner.methods[PP_SPLIT_METHOD]
    body = [st for st in fn.body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
    return owner.where(fn.lineno) if body and all(isinstance(st, ast.Pass) for st in body) else None


#: The interface whose default `get_language_model` returns the child built under
#: `with self._mark_language_model(...)` (interfaces.SupportsMultiModal).
MM_INTERFACE = "SupportsMultiModal"
LM_MARK = "_mark_language_model"


def _language_model_attr(mro: list[ClassInfo | str]) -> str | None:
    """The attribute vLLM's PP gate and EAGLE loader take the language model from
    (`model.get_language_model()` if the model has one, else `model.language_model`): an override
    `return self.<attr>` (`return self`: none, the model is its own language model), else the
    attribute a constructor assigns inside `with self._mark_language_model(...)` (the interface's
    default), else `language_model`."""
    got = _owner(mro, method="get_language_model")
    if got is not None and got.name != MM_INTERFACE:
        ret = next(
            (
                n.value
                for n in ast.walk(got.methods["get_language_model"])
                if isinstance(n, ast.Return) and n.value is not None
            ),
            None,
        )
        d = _dotted(ret) if ret is not None else None
        if d == "self":
            return None
        if d and d.startswith("self.") and d.count(".") == 1:
            return d[5:]
    for c in mro:
        if not isinstance(c, ClassInfo) or "__init__" not in c.methods:
            continue
        for w in ast.walk(c.methods["__init__"]):
            if isinstance(w, ast.With) and any(
                isinstance(i.context_expr, ast.Call) and (_dotted(i.context_expr.func) or "").endswith(LM_MARK)
                for i in w.items
            ):
                for st in w.body:
                    for t in (
                        st.targets
                        if isinstance(st, ast.Assign)
                        else [st.target]
                        if isinstance(st, ast.AnnAssign)
                        else []
                    ):
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            return t.attr
    return "language_model"


def _target_model_fact(mro: list[ClassInfo | str], dec: ClassInfo | None, where: str, why: str) -> dict[str, Any]:
    """`target_model`: whether the target (its language model, for a multimodal class) has the
    `.model` vLLM's drafter load reads; null where the source does not say (a class chosen at run
    time, a base outside vLLM's source)."""
    if EXTERNAL_NOTE in why:
        return {
            "target_model": True,
            "target_model_at": where,
            "model_embed": None,
            "model_embed_why": f"{why.split(':', 1)[0]}: whether that class has embed_tokens or embedding is its "
            "library's, not vLLM's",
        }
    if dec is not None:
        return {"target_model": True, "target_model_at": where}
    outside = any(not isinstance(c, ClassInfo) and _name(c) not in _PLAIN_BASES for c in mro)
    no_lm_model = why.startswith("the language model has no `.model`")
    no_model = (
        why.startswith("no constructor in the MRO assigns self.model")
        and _owner(mro, attr="model") is None
        and _owner(mro, method="model") is None
    )
    if (no_lm_model or no_model) and not outside:
        return {"target_model": False, "target_model_at": where}
    return {"target_model": None, "target_model_why": why}


def _self_assign_in_mro(mro: list[ClassInfo | str], attr: str) -> ast.expr | None:
    for c in mro:
        if isinstance(c, ClassInfo) and "__init__" in c.methods:
            v = _self_assign(c.methods["__init__"], attr)
            if v is not None:
                return v
    return None


def _fc_rule(tree: ast.Module) -> dict[str, Any] | None:
    """How the drafter module sizes `fc`: from the taps when the config names them, else from the
    drafter's num_hidden_layers (`len(taps) if taps else config.num_hidden_layers`), else from a
    fixed count. None when the module has no such expression."""
    for n in ast.walk(tree):
        if isinstance(n, ast.IfExp) and isinstance(n.body, ast.Call) and _dotted(n.body.func) == "len":
            other = _dotted(n.orelse) or ""
            if other.endswith(".num_hidden_layers"):
                return {
                    "rule": "taps-else-num-hidden-layers",
                    "at_line": n.lineno,
                    "text": "fc width = target hidden x (number of taps the config names, else the drafter's "
                    "num_hidden_layers)",
                }
            fallback = _literal(n.orelse)
            if isinstance(fallback, int):
                return {
                    "rule": "taps-else-fixed",
                    "fixed": fallback,
                    "at_line": n.lineno,
                    "text": f"fc width = target hidden x (number of taps the config names, else {fallback})",
                }
    return None


def _mtp_layers(src: Source, c: ClassInfo, platform: str) -> dict[str, Any] | None:
    """`self.X = getattr(config, "key", default)` (or `config.key`) where X is iterated by range()
    in a constructor of the class or of the module it builds as `self.model`."""
    seen: list[ClassInfo] = []
    todo = [c]
    while todo and len(seen) < 8:
        k = todo.pop(0)
        if any(k.ref == s.ref for s in seen):
            continue
        seen.append(k)
        for m in src.mro(k, platform):
            if not isinstance(m, ClassInfo) or "__init__" not in m.methods:
                continue
            init = m.methods["__init__"]
            got = _ranged_count(init)
            if got is not None:
                got["at"] = m.where(got.pop("line"))
                return got
            v = _self_assign(init, "model")
            if isinstance(v, ast.Call) and (fname := _dotted(v.func)):
                sub = src.resolve(m.module, fname, platform)
                if sub is not None:
                    todo.append(sub)
    return None


def _self_attrs(expr: ast.AST) -> set[str]:
    """The `self.X` attributes an expression reads (X only)."""
    out = set()
    for x in ast.walk(expr):
        d = _dotted(x) if isinstance(x, ast.Attribute) else ""
        if d and d.startswith("self.") and d.count(".") == 1:
            out.add(d[5:])
    return out


def _ranged_count(init: ast.AST) -> dict[str, Any] | None:
    """The attribute that counts the layers a constructor builds with range(): `range(self.n)`, or
    `range(self.start, self.start + self.n)`, where the start (the first layer's id, e.g.
    `config.num_hidden_layers` in DeepSeek/GLM MTP) is not the count."""
    ranged = set()
    for n in ast.walk(init):
        if isinstance(n, ast.Call) and _dotted(n.func) == "range" and n.args:
            if len(n.args) == 1:
                ranged |= _self_attrs(n.args[0])
            else:
                ranged |= _self_attrs(n.args[1]) - _self_attrs(n.args[0])
    for n in ast.walk(init):
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        t = n.targets[0]
        if not (
            isinstance(t, ast.Attribute) and t.attr in ranged and isinstance(t.value, ast.Name) and t.value.id == "self"
        ):
            continue
        v = n.value
        if (
            isinstance(v, ast.Call)
            and _dotted(v.func) == "getattr"
            and len(v.args) >= 2
            and isinstance(v.args[1], ast.Constant)
        ):
            default = _literal(v.args[2]) if len(v.args) > 2 else None
            return {"keys": [v.args[1].value], "default": default, "line": n.lineno}
        if isinstance(v, ast.Attribute) and (_dotted(v.value) or "").split(".")[-1] in (
            "config",
            "hf_config",
            "text_config",
        ):
            return {"keys": [v.attr], "default": None, "line": n.lineno}
    return None


# ---------------------------------------------------------------------------------------------
# MTP rewrite (config/speculative.py)


def mtp_rewrites(src: Source) -> dict[str, dict[str, str]]:
    """What `method: mtp` rewrites a target to: {"model_type": {mt: mtp_arch}, "architecture":
    {arch: mtp_arch}}, read from the if-chain in SpeculativeConfig's config override: a test on
    `hf_config.model_type` or `hf_config.architectures[0]`, a body that sets the model type (a
    rewrite, followed) or the architectures list."""
    info = src.module("vllm.config.speculative")
    out: dict[str, dict[str, str]] = {"model_type": {}, "architecture": {}}
    if info is None or info.tree is None:
        return out
    renames: dict[str, str] = {}
    by_type: dict[str, str] = {}
    by_arch: dict[str, str] = {}
    branch: dict[str, list[ast.stmt]] = {}
    flags = _flags(info.tree)
    for n in ast.walk(info.tree):
        if not isinstance(n, ast.If):
            continue
        kind, keys = _test_keys(n.test)
        if not kind:
            continue
        new_type = _type_rename(n.body)
        for k in keys:
            arch = _arch_in(n.body, k, flags)
            if arch:
                (by_type if kind == "model_type" else by_arch).setdefault(k, arch)
                branch.setdefault(k, n.body)
            elif new_type and kind == "model_type" and new_type != k and not _writes_architectures(n.body):
                renames.setdefault(k, new_type)
    for mt, new in renames.items():
        hops = 0
        while new in renames and hops < 4:
            new, hops = renames[new], hops + 1
        if new in branch:  # the branch of the renamed type, decided for the original one
            got = _arch_in(branch[new], mt, flags)
            if got:
                by_type.setdefault(mt, got)
    out["model_type"], out["architecture"] = dict(sorted(by_type.items())), dict(sorted(by_arch.items()))
    return out


def _test_keys(test: ast.expr) -> tuple[str | None, list[str]]:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None, []
    left = _dotted(test.left) or ""
    if isinstance(test.left, ast.Subscript) and (_dotted(test.left.value) or "").endswith("architectures"):
        kind = "architecture"
    elif isinstance(test.left, ast.NamedExpr) and isinstance(test.left.value, ast.Subscript):
        kind = "architecture"
    elif left.endswith(".model_type"):
        kind = "model_type"
    else:
        return None, []
    v = _literal(test.comparators[0])
    if isinstance(test.ops[0], ast.Eq) and isinstance(v, str):
        return kind, [v]
    if isinstance(test.ops[0], ast.In) and isinstance(v, (tuple, list, set, frozenset)):
        return kind, [x for x in v if isinstance(x, str)]
    if isinstance(test.ops[0], ast.In) and isinstance(v, str):  # `in ("x")` is a plain string
        return kind, [v]
    return None, []


def assigned_dicts(body: list[ast.stmt]) -> dict[str, ast.Dict]:
    """The dict literals a branch assigns to plain names (`maps = {"ArchA": "MtpA", ...}`), by name."""
    return {
        t.id: n.value
        for st in body
        for n in ast.walk(st)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def _arch_in(body: list[ast.stmt], key: str, flags: dict[str, set[str]]) -> str | None:
    """The MTP architecture a branch writes into `architectures` for `key`: a literal,
    `"A" if flag else "B"` where the branch set `flag = <config>.model_type in (...)`, a lookup
    `maps[arch]` in a dict literal the branch assigns (`maps = {"ArchA": "MtpA", ...}`), or
    `x["architectures"] = [literal]` (under `if not flag:`: only for keys the flag does not hold)."""
    dicts = assigned_dicts(body)
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values, strict=True):
                    if _literal(k) == "architectures" and isinstance(v, ast.List) and v.elts:
                        got = _arch_value(v.elts[0], key, flags, dicts)
                        if got:
                            return got
            if (
                isinstance(n, ast.Assign)
                and _stores_architectures(n)
                and isinstance(n.value, ast.List)
                and n.value.elts
            ):
                got = _arch_value(n.value.elts[0], key, flags, dicts)
                if got and not _guarded_out(st, n, key, flags):
                    return got
    return None


def _arch_value(el: ast.expr, key: str, flags: dict[str, set[str]], dicts: dict[str, ast.Dict]) -> str | None:
    if isinstance(el, ast.Constant) and isinstance(el.value, str):
        return el.value
    if isinstance(el, ast.IfExp) and isinstance(el.test, ast.Name):
        flag = flags.get(el.test.id)
        a, b = _literal(el.body), _literal(el.orelse)
        if flag is not None and isinstance(a, str) and isinstance(b, str):
            return a if key in flag else b
    if isinstance(el, ast.Subscript) and isinstance(el.value, ast.Name) and el.value.id in dicts:
        table = _literal(dicts[el.value.id])
        got = table.get(key) if isinstance(table, dict) else None
        return got if isinstance(got, str) else None
    return None


def _stores_architectures(n: ast.Assign) -> bool:
    return any(isinstance(t, ast.Subscript) and _literal(t.slice) == "architectures" for t in n.targets)


def _flag_excludes(test: ast.expr, key: str, flags: dict[str, set[str]]) -> bool:
    """`if not flag:` where `key` sets the flag, or `if flag:` where it does not: the branch does
    not run for `key`."""
    neg = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    name = test.operand if isinstance(test, ast.UnaryOp) and neg else test
    if not isinstance(name, ast.Name) or name.id not in flags:
        return False
    return (key in flags[name.id]) == neg


def _guarded_out(top: ast.stmt, target: ast.stmt, key: str, flags: dict[str, set[str]]) -> bool:
    """`target` sits in an `if` (under `top`) that does not run for `key`."""
    for n in ast.walk(top):
        if (
            isinstance(n, ast.If)
            and _flag_excludes(n.test, key, flags)
            and any(x is target for b in n.body for x in ast.walk(b))
        ):
            return True
    return False


def _writes_architectures(body: list[ast.stmt]) -> bool:
    """The branch sets `architectures` itself (a dict key or `x["architectures"] = ...`): a rename
    in it is not followed (what it writes, where unreadable, stays unknown)."""
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Dict) and any(_literal(k) == "architectures" for k in n.keys):
                return True
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and _literal(n.slice) == "architectures":
                return True
    return False


def _flags(tree: ast.AST) -> dict[str, set[str]]:
    """`name = <config>.model_type in (...)` anywhere in the module: the model types that set it
    (read on the config's original model type, before any rename)."""
    out: dict[str, set[str]] = {}
    for st in ast.walk(tree):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            kind, keys = _test_keys(st.value)
            if kind == "model_type":
                out.setdefault(st.targets[0].id, set(keys))
    return out


def _type_rename(body: list[ast.stmt]) -> str | None:
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Assign) and any((_dotted(t) or "").endswith(".model_type") for t in n.targets):
                v = _literal(n.value)
                if isinstance(v, str):
                    return v
    return None


# ---------------------------------------------------------------------------------------------
# The whole table


def _is_drafter(kind: str) -> bool:
    return kind == "speculative_decoding_models"


def scan(
    root: Path,
    platforms: tuple[str, ...] = ("cuda", "rocm", "xpu", "cpu"),
    extra: Callable[[Source], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every registered architecture's facts, per platform (JSON-able); `extra` adds release-wide
    sections read from the same parsed source (knowledge/releasescan.scan passes its readers)."""
    sc = Scanner(Path(root))
    sc.read_registry()
    targets: dict[str, Any] = {}
    drafters: dict[str, Any] = {}
    for arch in sorted(sc.registry):
        kind = sc.registry_kind[arch]
        per: dict[str, Any] = {}
        for p in platforms:
            try:
                got = sc.drafter(arch, p) if _is_drafter(kind) else sc.target(arch, p)
            except (RecursionError, MemoryError):  # a source nested past the walks' depth: a miss
                got = None
            per[p] = (
                got
                if got is not None
                else {
                    "class": None,
                    "why": f"{sc.module_of(arch)}:{sc.registry[arch][1]} is not a class in the source on {p}",
                }
            )
        entry = {"registry": f"{REGISTRY}:{sc.registry_lines[arch]}", "group": kind, "platforms": _fold(per)}
        (drafters if _is_drafter(kind) else targets)[arch] = entry
    checks = engine_checks(sc.src)
    has_v1 = sc.src.module(V1_RUNNER_MODULE) is not None
    _embed_not_needed(targets, checks, has_v1=has_v1)
    return {
        "targets": targets,
        "drafters": drafters,
        "mtp_rewrites": mtp_rewrites(sc.src),
        "checks": checks,
        **(extra(sc.src) if extra is not None else {}),
    }


#: Model Runner V1's module (deleted in vLLM 0.34).
V1_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"


def _embed_not_needed(targets: dict[str, Any], checks: dict[str, str], *, has_v1: bool = True) -> None:
    """A target without `.model` never reaches the last-stage embedding question: vLLM's drafter
    load reads `.model` at any pipeline_parallel (V1 `_maybe_share_lm_head`; V2's eagle/mtp/dspark
    loaders) and refuses first; a dflash drafter under PP passes vLLM's relay gate only through the
    inner decoder `.model`, which it lacks (its relay verdict is unsupported). A release without
    Model Runner V1 (0.34) needs only V2's read."""
    at, v2 = checks.get("drafter_reads_target_model"), checks.get("v2_reads_target_model_eagle")
    if v2 is None or (at is None and has_v1):
        return
    v1_part = f"the V1 runner reads target.model at any pipeline_parallel, {at}; " if at is not None else ""
    for entry in targets.values():
        for f in entry["platforms"].values():
            if f.get("target_model") is False and f.get("embed_last_stage") is None and not f.get("embed_rule"):
                f["embed_not_needed"] = (
                    f"no `.model`: vLLM refuses the drafter before any stage needs the embedding ({v1_part}"
                    f"Model Runner V2 for eagle/eagle3/mtp/dspark, {v2}; for dflash its PP gate reads `.model` and "
                    "finds none)"
                )


#: Where vLLM refuses pipeline parallelism for a model that does not implement SupportsPP
#: (config/model.py, ModelConfig.verify_with_parallel_config): the message it raises.
PP_REFUSAL_TEXT = "Pipeline parallelism is not supported for this model"


def engine_checks(src: Source) -> dict[str, str]:
    """Engine-wide rules a verdict cites, each as a file:line: `pp_needs_supports_pp` (the `raise`
    for PP > 1 with a model that is not SupportsPP); `lm_arch_from_transformers` (where
    `VllmConfig.with_hf_config` gives a sub-config without `architectures` transformers' causal-LM
    class for its model_type: the language model of a multimodal class whose config names none)."""
    out: dict[str, str] = {}
    info = src.module("vllm.config.model")
    for n in ast.walk(info.tree) if info is not None and info.tree is not None else ():
        if isinstance(n, ast.Raise) and any(
            isinstance(c, ast.Constant) and isinstance(c.value, str) and PP_REFUSAL_TEXT in c.value for c in ast.walk(n)
        ):
            out["pp_needs_supports_pp"] = f"{info.file}:{n.lineno}"  # type: ignore[union-attr]
            break
    info = src.module("vllm.config.vllm")
    for n in ast.walk(info.tree) if info is not None and info.tree is not None else ():
        if isinstance(n, ast.FunctionDef) and n.name == "with_hf_config":
            hit = next(
                (
                    x
                    for x in ast.walk(n)
                    if isinstance(x, ast.ImportFrom) and any(a.name == CAUSAL_LM_MAPPING for a in x.names)
                ),
                None,
            )
            if hit is not None:
                out["lm_arch_from_transformers"] = f"{info.file}:{hit.lineno}"  # type: ignore[union-attr]
            break
    out.update(_proposer_checks(src))
    out.update(_v2_checks(src))
    return out


#: Model Runner V2's speculator packages (v1/worker/gpu/spec_decode/<dir>, dispatched on the method
#: in its __init__.py) and the methods each serves.
def _v2_spec_dirs() -> dict[str, tuple[str, ...]]:
    """Model Runner V2's speculator package -> the methods it loads (each method object's `v2_speculator`)."""
    from ppspec_cli.knowledge.methods import REGISTRY

    out: dict[str, tuple[str, ...]] = {}
    for m in REGISTRY.values():
        if m.v2_speculator:
            out[m.v2_speculator] = out.get(m.v2_speculator, ()) + (m.name,)
    return out


def _shared_loader_home() -> str | None:
    """The V2 package whose utils define the shared EAGLE loader (EAGLE3's own package)."""
    from ppspec_cli.knowledge.methods.eagle3 import EAGLE3

    return EAGLE3.v2_speculator


V2_SPEC_PKG = "vllm.v1.worker.gpu.spec_decode"
SHARED_EAGLE_LOADER = "load_eagle_model"


def _unguarded_model_read(tree: ast.Module) -> int | None:
    """The line of the first `<lm>.model` read where `<lm>` was bound from a `get_language_model()`
    expression (an attribute read, not a getattr with a default)."""
    lms = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and "get_language_model" in ast.unparse(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    hits = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr == "model" and isinstance(n.value, ast.Name) and n.value.id in lms
    ]
    return min(hits) if hits else None


def _v2_checks(src: Source) -> dict[str, str]:
    """`v2_reads_target_model_<method>`: where Model Runner V2's drafter load for that method reads
    the target's (language model's) `.model` unguarded (eagle/utils.py `load_eagle_model`, which the
    mtp package imports; dspark/utils.py); a method whose loader reads it through getattr with a
    default (dflash) gets no key."""
    lines: dict[str, str] = {}
    shares: set[str] = set()
    dirs = _v2_spec_dirs()
    for d in dirs:
        for mod in (f"{V2_SPEC_PKG}.{d}.utils", f"{V2_SPEC_PKG}.{d}.speculator"):
            info = src.module(mod)
            if info is None or info.tree is None:
                continue
            if (line := _unguarded_model_read(info.tree)) is not None and d not in lines:
                lines[d] = f"{info.file}:{line}"
            if any(
                isinstance(n, ast.ImportFrom)
                and (n.module or "").endswith(".eagle.utils")
                and any(a.name == SHARED_EAGLE_LOADER for a in n.names)
                for n in ast.walk(info.tree)
            ):
                shares.add(d)
    out: dict[str, str] = {}
    home = _shared_loader_home()
    for d, methods in dirs.items():
        at = lines.get(d) or (lines.get(home) if home and d in shares else None)
        for m in methods:
            if at is not None:
                out[f"v2_reads_target_model_{m}"] = at
    return out


def _raise_line(fn: ast.AST, text: str) -> int | None:
    for n in ast.walk(fn):
        if isinstance(n, ast.Raise) and any(
            isinstance(c, ast.Constant) and isinstance(c.value, str) and text in c.value for c in ast.walk(n)
        ):
            return n.lineno
    return None


def _proposer_checks(src: Source) -> dict[str, str]:
    """vLLM's drafter load (SpecDecodeBaseProposer): `drafter_needs_target_model` and
    `drafter_needs_target_embed`, the raises of `_maybe_share_embeddings` for a target without
    `.model` / without `.model.embed_tokens` or `.model.embedding`; `drafter_share_embed_pp1`, the
    `if` that runs them at PP world size 1 only; `drafter_reads_target_model`, the unguarded
    `target_language_model.model` read in `_maybe_share_lm_head` (any PP)."""
    info = src.module(PROPOSER_MODULE)
    cls = info.classes.get("SpecDecodeBaseProposer") if info is not None else None
    if info is None or cls is None:
        return {}
    out: dict[str, str] = {}
    share = cls.methods.get("_maybe_share_embeddings")
    if share is not None:
        for key, text in (("drafter_needs_target_model", NO_MODEL_TEXT), ("drafter_needs_target_embed", NO_EMBED_TEXT)):
            if (line := _raise_line(share, text)) is not None:
                out[key] = f"{info.file}:{line}"
        gate = next(
            (
                n
                for n in ast.walk(share)
                if isinstance(n, ast.If) and "world_size" in ast.unparse(n.test) and _raise_line(n, NO_MODEL_TEXT)
            ),
            None,
        )
        if gate is not None and "== 1" in ast.unparse(gate.test):
            out["drafter_share_embed_pp1"] = f"{info.file}:{gate.lineno}"
    head = cls.methods.get("_maybe_share_lm_head")
    if head is not None and len(head.args.args) > 1:
        param = head.args.args[1].arg
        hit = next(
            (
                n
                for n in ast.walk(head)
                if isinstance(n, ast.Attribute)
                and n.attr == "model"
                and isinstance(n.value, ast.Name)
                and n.value.id == param
            ),
            None,
        )
        if hit is not None:
            out["drafter_reads_target_model"] = f"{info.file}:{hit.lineno}"
    return out


#: transformers' model_type -> causal-LM class name table vLLM falls back on (config/vllm.py).
CAUSAL_LM_MAPPING = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"


def _fold(per: dict[str, Any]) -> dict[str, Any]:
    """Platforms with the same facts share one entry: {"cuda,rocm,xpu,cpu": {...}}."""
    groups: list[tuple[list[str], Any]] = []
    for p, v in per.items():
        for ps, w in groups:
            if w == v:
                ps.append(p)
                break
        else:
            groups.append(([p], v))
    return {",".join(ps): v for ps, v in groups}


#: The largest source file the scan reads: vLLM 0.34.0's largest module is 262 KB
#: (models/mistral/mistral_large4/amd/specialized_decode/mono/kernel.py); x16. A larger file is a
#: miss (its facts unknown), never read whole.
MAX_SOURCE_BYTES = 4 << 20


def parse_source(p: Path) -> ast.Module | None:
    """A vLLM module's AST, or None (a miss: its facts are unknown) when the file is not one the
    scan can read: over MAX_SOURCE_BYTES, not a regular file (a FIFO, a device), not UTF-8, not
    Python, or nested deeper than the parser (or the scan's own walks) go."""
    try:
        return ast.parse(safeio.read_text(p, limit=MAX_SOURCE_BYTES, what="vLLM source file"))
    except (PpspecError, SyntaxError, ValueError, RecursionError, MemoryError, OSError):
        return None


def source_version(root: Path) -> tuple[str | None, str | None]:
    """(version, git commit) of the vLLM source under root, from `vllm/_version.py` (written at
    build time; a wheel without a commit says None), else the dist-info's METADATA."""
    root = Path(root)
    version = commit = None
    vf = root / "vllm" / "_version.py"
    if vf.is_file():
        tree = parse_source(vf)
        for n in ast.walk(tree) if tree else ():
            if isinstance(n, ast.Assign):
                names = {t.id for t in ast.walk(n) if isinstance(t, ast.Name)}
                v = _literal(n.value) if not isinstance(n.value, ast.Name) else None
                if "version" in names and isinstance(v, str):
                    version = v
                if "commit_id" in names and (isinstance(v, str) or v is None) and not isinstance(n.value, ast.Name):
                    commit = v
    if version is None:
        for meta in sorted(root.glob("vllm*.dist-info/METADATA")):
            try:
                text = safeio.read_bytes(meta, limit=MAX_SOURCE_BYTES, what="vLLM METADATA").decode("utf-8", "replace")
            except PpspecError:
                continue
            for line in text.splitlines():
                if line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                    break
    return version, commit


# ---------------------------------------------------------------------------------------------
# Hybrid layer layouts


#: How a hybrid decoder is told a layer's kind: a per-layer config list indexed by the layer's
#: index (`config.layer_types[layer_idx]`, `config.hybrid_override_pattern[layer_idx]`), or
#: iterated (`for i, t in enumerate(config.layers_block_type)`).
_LAYER_INDEX_CALL = "extract_layer_index"


def _indexes_a_layer(node: ast.expr) -> bool:
    for x in ast.walk(node):
        if isinstance(x, ast.Call) and (_dotted(x.func) or "").endswith(_LAYER_INDEX_CALL):
            return True
        if isinstance(x, ast.Name) and "layer" in x.id:
            return True
    return False


def _config_key(node: ast.expr) -> str | None:
    d = _dotted(node) or ""
    head, _, key = d.rpartition(".")
    # a layout list is named for what it holds (layer_types, layers_block_type,
    # hybrid_override_pattern); per-layer counts (layers_num_experts) are not layouts
    ok = (
        head.split(".")[-1] in ("config", "hf_config", "text_config")
        and ("type" in key or "pattern" in key)
        and not key.startswith("mlp_")
    )
    return key if ok else None


def _layer_kinds(tree: ast.Module, aliases: dict[str, str] | None = None) -> dict[str, str | None]:
    """The layer kinds the module names: the keys of a module-level dict literal that maps a kind to
    a decoder-layer class (`{"attention": JambaAttentionDecoderLayer, ...}`: kind -> class), else
    the string constants compared with a `layer_type`/`is_attn` value (kind -> None)."""
    for st in tree.body:
        if (
            isinstance(st, ast.Assign)
            and isinstance(st.value, ast.Dict)
            and any("LAYER_TYPES" in (_dotted(t) or "") for t in st.targets)
        ):
            got = {
                k.value: _dotted(v)
                for k, v in zip(st.value.keys, st.value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
            if got:
                return got
    kinds: dict[str, str | None] = {}
    aliases = aliases or {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Eq | ast.NotEq):
            sides = [n.left, n.comparators[0]]
            const = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            other = [s for s in sides if not isinstance(s, ast.Constant)]
            if (
                const
                and other
                and (
                    (_dotted(other[0]) or "").endswith("layer_type")
                    or (
                        isinstance(other[0], ast.Subscript)
                        and (_config_key(other[0].value) or (_dotted(other[0].value) or "") in aliases)
                    )
                )
            ):
                kinds.setdefault(const[0], None)
    return dict(sorted(kinds.items()))


def layer_rule(src: Source, module: str, decoder: ClassInfo | None = None) -> dict[str, Any] | None:
    """How a hybrid model's module decides, per layer, the layer's kind (full attention vs linear
    attention / mamba / ...), with the file:line that decides it; None when the source does not say:

    - a per-layer config list indexed by the layer (`config.layer_types[layer_idx]`, also through a
      local `layer_types = config.layer_types`): {"key", "at", "kinds"};
    - a predicate on the layer index called where the layer is built (`_is_kda_layer(layer_id,
      config.layer_group_size, ...)`, `config.is_kda_layer(layer_idx)` on vLLM's config class):
      {"rule": "every" | "listed", ...} (`_predicate_rule`);
    - every layer the same class (`make_layers(n, get_layer)` whose `get_layer` builds one class,
      Falcon-H1's parallel attention + SSM layer): {"rule": "uniform", "layer_class", "at"}.
    (An MLP layout list, `mlp_layer_types`, is not a layer-kind layout.)"""
    info = src.module(module)
    if info is None or info.tree is None:
        return None
    aliases = _config_aliases(info.tree)
    for n in ast.walk(info.tree):
        if (
            isinstance(n, ast.Subscript)
            and (key := _config_key(n.value) or aliases.get(_dotted(n.value) or ""))
            and _indexes_a_layer(n.slice)
        ):
            return {"key": key, "at": f"{info.file}:{n.lineno}", "kinds": _layer_kinds(info.tree, aliases)}
        if isinstance(n, ast.Call) and _dotted(n.func) == "enumerate" and n.args and (key := _config_key(n.args[0])):
            return {"key": key, "at": f"{info.file}:{n.lineno}", "kinds": _layer_kinds(info.tree, aliases)}
    got = _predicate_rule(src, info, decoder)
    if got is not None:
        return got
    return _uniform_rule(src, info, decoder)


def _config_aliases(tree: ast.Module) -> dict[str, str]:
    """`layer_types = config.layer_types` (a local name for a layout list): name -> key."""
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and (key := _config_key(n.value))
        ):
            out.setdefault(n.targets[0].id, key)
    return out


_PRED_PREFIXES = ("is_", "_is_")


def _predicate_name(fname: str) -> str | None:
    """`is_linear_layer` / `_is_kda_layer` -> "linear" / "kda" (the kind the predicate names)."""
    last = fname.rsplit(".", 1)[-1]
    if not last.startswith(_PRED_PREFIXES) or not last.endswith("_layer"):
        return None
    core = last.lstrip("_")[len("is_") : -len("_layer")]
    return core or None


def _predicate_rule(src: Source, info: ModuleInfo, decoder: ClassInfo | None = None) -> dict[str, Any] | None:
    """A call `is_<kind>_layer(<layer index>, ...)` in the module: a module-level function of the
    module, or a method of vLLM's config class (`config.is_kda_layer(layer_idx)`, the class imported
    from vllm.transformers_utils.configs), read by `_read_predicate`."""
    assert info.tree is not None
    funcs = {n.name: n for n in info.tree.body if isinstance(n, ast.FunctionDef)}
    init = decoder.methods.get("__init__") if decoder is not None and decoder.module == info.name else None
    # the call where the decoder builds its layers first (it decides), then any other in the module
    calls = [*(ast.walk(init) if init is not None else ()), *ast.walk(info.tree)]
    for n in calls:
        in_init = init is not None and any(n is x for x in ast.walk(init))
        if not (
            isinstance(n, ast.Call)
            and n.args
            and (fname := _dotted(n.func))
            and (kind := _predicate_name(fname))
            and (_indexes_a_layer(n.args[0]) or (in_init and isinstance(n.args[0], ast.Name)))
        ):
            continue
        if "." not in fname and fname in funcs:
            fn, where = funcs[fname], f"{info.file}:{funcs[fname].lineno}"
            params = [a.arg for a in fn.args.args]
            bind = {p: _arg_key(a, info.tree) for p, a in zip(params[1:], n.args[1:])}
            got = _read_predicate(fn, params[0], bind, None)
        elif (
            isinstance(n.func, ast.Attribute)
            and (_dotted(n.func.value) or "").split(".")[-1] in ("config", "hf_config", "text_config")
            and (m := _config_method(src, info, fname.rsplit(".", 1)[-1]))
        ):
            fn, where = m
            params = [a.arg for a in fn.args.args]
            got = _read_predicate(fn, params[1], {}, params[0]) if len(params) > 1 else None
        else:
            continue
        if got is not None:
            return {**got, "hit": kind, "miss": f"not {kind}", "at": where, "called_at": f"{info.file}:{n.lineno}"}
    return None


def _arg_key(arg: ast.expr, tree: ast.Module) -> tuple[str, Any] | None:
    """What a call argument reads from the config: `config.key` -> (key, None);
    `self.attr` assigned `getattr(config, "key", default)` (or `config.key`) in the module -> (key, default)."""
    if (key := _config_key_any(arg)) is not None:
        return key, None
    d = _dotted(arg) or ""
    if d.startswith("self.") and d.count(".") == 1:
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and _dotted(n.targets[0]) == d:
                v = n.value
                if (
                    isinstance(v, ast.Call)
                    and _dotted(v.func) == "getattr"
                    and len(v.args) >= 2
                    and isinstance(v.args[1], ast.Constant)
                ):
                    return str(v.args[1].value), _literal(v.args[2]) if len(v.args) > 2 else None
                if (key := _config_key_any(v)) is not None:
                    return key, None
    return None


def _config_key_any(node: ast.expr) -> str | None:
    d = _dotted(node) or ""
    head, _, key = d.rpartition(".")
    return key if head.split(".")[-1] in ("config", "hf_config", "text_config") else None


def _config_method(src: Source, info: ModuleInfo, method: str) -> tuple[ast.FunctionDef, str] | None:
    """The method on a vLLM config class the module imports (vllm.transformers_utils.configs)."""
    for per in info.imports.values():
        for mod, name in per.values():
            if not mod.startswith("vllm.transformers_utils.configs") or name is None:
                continue
            cls = src.resolve(mod, name, "cuda")
            if cls is not None and method in cls.methods:
                return cls.methods[method], cls.where(cls.methods[method].lineno)
    return None


def _read_predicate(
    fn: ast.FunctionDef, layer: str, bind: dict[str, tuple[str, Any] | None], this: str | None
) -> dict[str, Any] | None:
    """The rule a layer predicate computes, from its returned expression (guards such as
    `x is not None and ...` or an `if g > 0:` around the return are passed through):

    - `(layer + c) % G == 0` (negated or `!=`): {"rule": "every", "key", "default", "offset": c,
      "hit_on_multiple": whether the predicate holds on those layers, "tail": whether
      `or layer >= N // G * G` also makes the layers after the last full group behave like them};
    - `(layer + c) in <config>.A["B"]`: {"rule": "listed", "key": ["A", "B"], "offset": c}."""
    ret = next(
        (
            n.value
            for n in ast.walk(fn)
            if isinstance(n, ast.Return) and n.value is not None and not isinstance(n.value, ast.Constant)
        ),
        None,
    )
    if ret is None:
        return None
    neg = False
    while isinstance(ret, ast.UnaryOp) and isinstance(ret.op, ast.Not):
        neg, ret = not neg, ret.operand
    parts = ret.values if isinstance(ret, ast.BoolOp) else [ret]
    tail = isinstance(ret, ast.BoolOp) and isinstance(ret.op, ast.Or) and any(_is_tail(x, layer) for x in parts)

    def key_of(node: ast.expr) -> tuple[str, Any] | None:
        d = _dotted(node) or ""
        if this and d.startswith(this + ".") and d.count(".") == 1:
            return d.split(".", 1)[1], None
        return bind.get(d) if isinstance(node, ast.Name) else None

    for x in parts:
        if not (isinstance(x, ast.Compare) and len(x.ops) == 1):
            continue
        off = _layer_offset(
            x.left.left if isinstance(x.left, ast.BinOp) and isinstance(x.left.op, ast.Mod) else x.left, layer
        )
        if (
            off is not None
            and isinstance(x.left, ast.BinOp)
            and isinstance(x.left.op, ast.Mod)
            and _literal(x.comparators[0]) == 0
            and (k := key_of(x.left.right))
        ):
            eq = isinstance(x.ops[0], ast.Eq)
            return {
                "rule": "every",
                "key": k[0],
                "default": k[1],
                "offset": off,
                "hit_on_multiple": eq != neg,
                "tail": bool(tail),
            }
        if off is not None and isinstance(x.ops[0], ast.In) and isinstance(x.comparators[0], ast.Subscript):
            sub = x.comparators[0]
            if (k := key_of(sub.value)) and isinstance(_literal(sub.slice), str) and not neg:
                return {"rule": "listed", "key": [k[0], _literal(sub.slice)], "offset": off}
    return None


def _layer_offset(node: ast.expr, layer: str) -> int | None:
    """`layer` -> 0, `layer + c` / `(layer + c)` -> c; else None."""
    if isinstance(node, ast.Name) and node.id == layer:
        return 0
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Name)
        and node.left.id == layer
        and isinstance(_literal(node.right), int)
    ):
        return int(_literal(node.right))
    return None


def _is_tail(node: ast.expr, layer: str) -> bool:
    """`layer >= N // G * G`: the layers after the last whole group."""
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.GtE)
        and _layer_offset(node.left, layer) == 0
        and isinstance(node.comparators[0], ast.BinOp)
        and isinstance(node.comparators[0].op, ast.Mult)
        and isinstance(node.comparators[0].left, ast.BinOp)
        and isinstance(node.comparators[0].left.op, ast.FloorDiv)
    )


def _uniform_rule(src: Source, info: ModuleInfo, decoder: ClassInfo | None) -> dict[str, Any] | None:
    """The decoder builds its layers with `make_layers(n, get_layer)` where `get_layer` returns one
    class for every index (through a local `layer_class = X`)."""
    init = decoder.methods.get("__init__") if decoder is not None else None
    if init is None:
        return None
    nested = {f.name: f for f in ast.walk(init) if isinstance(f, ast.FunctionDef) and f is not init}
    for n in ast.walk(init):
        if not (
            isinstance(n, ast.Call)
            and (_dotted(n.func) or "").endswith("make_layers")
            and len(n.args) >= 2
            and isinstance(n.args[1], ast.Name)
        ):
            continue
        fn = nested.get(n.args[1].id)
        if fn is None:
            continue
        local = {
            t.id: _dotted(a.value)
            for a in ast.walk(fn)
            if isinstance(a, ast.Assign)
            for t in a.targets
            if isinstance(t, ast.Name) and isinstance(a.value, ast.Name | ast.Attribute)
        }
        made = {
            local.get(_dotted(r.value.func) or "", _dotted(r.value.func))
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and isinstance(r.value, ast.Call)
        }
        classes = [c for m in made if m and (c := src.resolve(decoder.module, m, "cuda")) is not None]  # type: ignore[union-attr]
        if len(made) == 1 and len(classes) == 1:
            cls = classes[0]
            return {
                "rule": "uniform",
                "layer_class": cls.name,
                "class_at": cls.where(),
                "at": f"{info.file}:{fn.lineno}",
            }
    return None
