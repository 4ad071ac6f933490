"""vLLM's drafter-side facts of one release (the table's `drafter_rules` and the per-class `embed`,
`d2t`, `layer_ids`, `declares_method` that knowledge/drafterscan.py reads off vLLM's source),
applied to one drafter config or one MTP target. Pure functions over an ArchTable; nothing here
imports vLLM, and nothing is guessed: where the table or the config does not say, the answer
says so (`None`, or a reason).

- `speculators_load(table, cfg)`: what vLLM's speculators loader does with a speculators-format
  config: the class it serves it as and the method it runs, or its refusal (with vLLM's message
  and file:line).
- `served_names(table, method, archs)`: the architectures vLLM builds the drafter as after
  EAGLEConfig's rename for the method (`Eagle<arch>`, `Eagle3<arch>`, `DFlash<arch>`).
- `mtp_facts(table, target, platform)`: the MTP architecture `mtp` rewrites the target to, how
  many draft layers it builds and the ids they get, its `n_predict` (num_speculative_tokens above
  it must be a multiple of it), and the refusal of `mtp` for a family that names another method.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ppspec_cli.knowledge.archtable import ArchTable

#: No real MTP target has more layers than this; a larger value is a corrupt or hostile config.
MAX_MTP_LAYERS = 64


def rules(table: ArchTable | None) -> dict[str, Any]:
    """The table's drafter rules ({} for a table generated before they were read)."""
    got = table.doc.get("drafter_rules") if table is not None else None
    return got if isinstance(got, dict) else {}


def as_dict(v: Any) -> dict[str, Any]:
    """`v` where it is a mapping, else an empty one (a table's JSON, typed for the readers)."""
    return v if isinstance(v, dict) else {}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ---------------------------------------------------------------------------------------------
# Speculators-format checkpoints


@dataclass(frozen=True)
class SpeculatorsLoad:
    """vLLM's reading of a speculators-format config: `refused` (vLLM raises at config load) with
    `why` and `at`, else the `architectures` it serves and the `method` it runs."""

    kind: str | None
    refused: bool
    why: str = ""
    at: str | None = None
    architectures: tuple[str, ...] = ()
    method: str | None = None


def speculators_load(table: ArchTable | None, cfg: Mapping[str, Any]) -> SpeculatorsLoad | None:
    """None when the config is not speculators format or the table does not carry the loader."""
    if not isinstance(cfg, Mapping) or cfg.get("speculators_config") is None:
        return None
    spec = rules(table).get("speculators")
    if not isinstance(spec, dict) or not isinstance(spec.get("types"), dict):
        return None
    kind = cfg.get("speculators_model_type")
    types: dict[str, Any] = spec["types"]
    ver = table.version if table is not None else "?"
    if not isinstance(kind, str) or kind not in types:
        return SpeculatorsLoad(
            kind if isinstance(kind, str) else None,
            True,
            f"vLLM {ver}'s speculators loader registers no algorithm {str(kind)[:40]!r} (it knows "
            f"{', '.join(sorted(types))}) "
            "and raises at config load ('Expected one of: ... Please ensure you're loading a speculators-format "
            "model.')",
            spec.get("unregistered_refused_at"),
        )
    t = types[kind]
    if t.get("refused"):
        return SpeculatorsLoad(
            kind,
            True,
            f"vLLM {ver} refuses the {kind!r} algorithm at config load ('{t['refused']}')",
            t.get("refused_at"),
        )
    missing = [k for k in t.get("requires") or () if k not in cfg]
    if missing:
        return SpeculatorsLoad(
            kind,
            True,
            f"vLLM {ver}'s {kind!r} conversion reads {', '.join(missing)}, which the config lacks: KeyError at config "
            "load",
            t.get("at"),
        )
    rule = t.get("architectures") or {}
    layer = cfg.get("transformer_layer_config")
    layer = layer if isinstance(layer, dict) else {}
    archs: tuple[str, ...] = ()
    if isinstance(rule.get("fixed"), str):
        archs = (rule["fixed"],)
    elif isinstance(rule.get("by_model_type"), dict):
        mt = layer.get("model_type", rule.get("default_model_type"))
        got = rule["by_model_type"].get(mt) if isinstance(mt, str) else None
        if got is None:
            return SpeculatorsLoad(
                kind,
                True,
                f"vLLM {ver}'s {kind!r} conversion serves transformer_layer_config.model_type "
                f"{', '.join(sorted(rule['by_model_type']))} "
                f"only; this config's is {str(mt)[:40]!r}: ValueError at config load ('Unsupported model_type {mt} "
                "for ... speculator')",
                rule.get("other_refused_at") or rule.get("at"),
            )
        archs = (got,)
    elif isinstance(rule.get("keeps_declared"), list):
        declared = cfg.get("architectures")
        declared = declared if isinstance(declared, list) else []
        kept = tuple(a for a in declared if a in rule["keeps_declared"])
        archs = kept or ((rule["default"],) if isinstance(rule.get("default"), str) else ())
    return SpeculatorsLoad(kind, False, "", rule.get("at"), archs, t.get("method") or kind)


# ---------------------------------------------------------------------------------------------
# SpeculativeConfig.hf_config_override: every draft config vLLM loads


@dataclass(frozen=True)
class Override:
    """What vLLM's config override does to one draft config: the `architectures` and `model_type`
    it leaves (unchanged when no step applied), the steps that applied (file:line), and `replaced`
    when a step hands back another config (whose architectures ppspec does not compute)."""

    architectures: tuple[str, ...]
    model_type: str | None
    applied: tuple[str, ...] = ()
    replaced: str | None = None
    at: str | None = None  # the function
    draft_applies_at: str | None = None  # where vLLM passes it as the draft's hf_overrides
    #: steps whose test ppspec does not evaluate (`unread` in the table) that name this config's
    #: model_type: vLLM may rewrite it there, and the class it builds is not decided here
    unread: tuple[tuple[str, str], ...] = ()  # (file:line, the test as written)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def _names_model_type(test: str, model_type: str | None) -> bool:
    """An unread step's test names this model_type: a quoted literal equal to it, or one it contains
    (vLLM's `'exaone4_5' in hf_config.model_type`)."""
    if not model_type:
        return False
    return any(lit == model_type or lit in model_type for lit in re.findall(r"'([^']{2,80})'", test))


def _holds(c: Mapping[str, Any], state: Mapping[str, Any], cfg: Mapping[str, Any], text: Mapping[str, Any]) -> bool:
    if "any" in c:
        return any(all(_holds(x, state, cfg, text) for x in alt) for alt in c["any"] if isinstance(alt, list))
    if "architecture" in c:
        archs = state["archs"]
        if c.get("any_declared"):
            return bool(set(c["architecture"]) & set(archs))
        now = archs[0] if archs else None
        return (now if c.get("current") else state["initial"]) in c["architecture"]
    if "model_type" in c:
        return state["model_type"] in c["model_type"]
    if "text_model_type" in c:
        return text.get("model_type") in c["text_model_type"]
    if "key" in c:
        return bool(_lookup(c["key"], (cfg,)))
    if "text_key" in c:
        return bool(_lookup(c["text_key"], (text,)))
    return False


def _apply_architectures(step: Mapping[str, Any], state: dict[str, Any], flags: Mapping[str, bool]) -> None:
    """One applied step's architectures: a name, a choice on a flag (the function's or the step's
    own), or a lookup by the current architecture."""
    local = {k: state["model_type"] in v for k, v in (step.get("flags") or {}).items() if isinstance(v, list)}
    arch = step.get("architectures")
    got: Any = None
    if isinstance(arch, str):
        got = arch
    elif isinstance(arch, dict) and "if" in arch:
        got = arch["then"] if {**flags, **local}.get(arch["if"], False) else arch["else"]
    elif isinstance(arch, dict) and isinstance(arch.get("by_architecture"), dict):
        got = arch["by_architecture"].get(state["archs"][0] if state["archs"] else None)
    if isinstance(got, str):
        state["archs"] = (got,)


def config_override(table: ArchTable | None, cfg: Mapping[str, Any]) -> Override | None:
    """vLLM's `SpeculativeConfig.hf_config_override` over a draft config, step by step as the
    table read it (drafterscan.config_override). None when the table does not carry it, or the
    config is a speculators-format one (vLLM loads it as its own config class, whose model_type no
    step names)."""
    rule = rules(table).get("config_override")
    if not isinstance(rule, dict) or not isinstance(rule.get("steps"), list) or not isinstance(cfg, Mapping):
        return None
    if cfg.get("speculators_config") is not None:
        return None
    archs = (
        tuple(a for a in cfg.get("architectures") or () if isinstance(a, str))
        if isinstance(cfg.get("architectures"), list)
        else ()
    )
    mt = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    tc = cfg.get("text_config")
    text: Mapping[str, Any] = tc if isinstance(tc, Mapping) else cfg
    state: dict[str, Any] = {"initial": archs[0] if archs else None, "archs": archs, "model_type": mt}
    flags: dict[str, bool] = {}
    applied: list[str] = []
    unread: list[tuple[str, str]] = []
    replaced = None
    for step in rule["steps"]:
        if not isinstance(step, dict):
            continue
        if "flag" in step:
            flags[str(step["flag"])] = state["model_type"] in (step.get("model_type") or ())
            continue
        if isinstance(step.get("unread"), str):
            if _names_model_type(step["unread"], state["model_type"]):
                unread.append((str(step.get("at")), step["unread"]))
            continue  # never applied: the finding says vLLM may rewrite the config there
        when = step.get("when")
        if not isinstance(when, list) or not all(isinstance(c, dict) and _holds(c, state, cfg, text) for c in when):
            continue
        applied.append(str(step.get("at")))
        _apply_architectures(step, state, flags)
        if isinstance(step.get("model_type"), str):
            state["model_type"] = step["model_type"]
        if step.get("replaces"):
            replaced = str(step["replaces"])
        if step.get("returns"):
            break
    return Override(
        tuple(state["archs"]),
        state["model_type"],
        tuple(applied),
        replaced,
        rule.get("at"),
        rule.get("draft_applies_at"),
        tuple(unread),
    )


# ---------------------------------------------------------------------------------------------
# The class vLLM picks for a method's drafter (dspark: drafterscan.dspark_class)


@dataclass(frozen=True)
class ClassChoice:
    """The architectures vLLM builds the drafter as after the method's own class choice, the steps
    that decided it (file:line), and `fallback` when it replaced the checkpoint's class with the
    in-target one (`why`: the keep rule, in words)."""

    architectures: tuple[str, ...]
    applied: tuple[str, ...] = ()
    fallback: bool = False
    why: str = ""


def _keeps(table: ArchTable, step: Mapping[str, Any], archs: tuple[str, ...], platform: str) -> tuple[bool, str]:
    keeps = step.get("keeps")
    if keeps == "declaring":  # the class of the first registered architecture declares its speculator
        arch = next((a for a in archs if table.registers(a)), None)
        facts = table.drafter(arch, platform) if arch else None
        dm = as_dict((facts or {}).get("declares_method"))
        return bool(dm.get("method")), (
            f"vLLM {table.version} keeps a draft class that declares its speculator (speculator_config_class)"
        )
    kept = [k for k in keeps or () if isinstance(k, str)]
    return bool(set(kept) & set(archs)), f"vLLM {table.version} keeps only {', '.join(kept)}"


def class_choice(
    table: ArchTable | None,
    section: str | None,
    archs: tuple[str, ...] | list[str],
    model_type: str | None,
    target_model_type: str | None,
    platform: str,
) -> ClassChoice | None:
    """The release's class choice for the method (`section` of the table's drafter rules) applied to
    the drafter's architectures and model_type (as the config override left them). None when the
    method has none or the table does not carry it."""
    rule = rules(table).get(section) if section else None
    if table is None or not isinstance(rule, dict) or not isinstance(rule.get("steps"), list):
        return None
    cur = tuple(archs)
    applied: list[str] = []
    for step in rule["steps"]:
        if not isinstance(step, dict):
            continue
        if "keeps" in step:
            kept, why = _keeps(table, step, cur, platform)
            if kept:
                return ClassChoice(cur, tuple(applied))
            fb = as_dict(step.get("fallback"))
            by = as_dict(fb.get("by_target_model_type"))
            got = by.get(target_model_type or "", fb.get("default"))
            if not isinstance(got, str):
                return None
            return ClassChoice((got,), (*applied, str(step.get("at"))), True, f"{why} ({step.get('at')})")
        when: list[Any] = step["when"] if isinstance(step.get("when"), list) else []
        ok = all(
            (set(c["architecture"]) & set(cur)) if "architecture" in c else model_type in (c.get("model_type") or ())
            for c in when
            if isinstance(c, dict)
        )
        if ok and isinstance(step.get("architectures"), str):
            applied.append(str(step.get("at")))
            return ClassChoice((step["architectures"],), tuple(applied))  # an if/elif: the keep rule is not read
    return ClassChoice(cur, tuple(applied))


# ---------------------------------------------------------------------------------------------
# EAGLEConfig's renames


def rename_rule(table: ArchTable | None, method: str | None) -> dict[str, Any] | None:
    ec = rules(table).get("eagle_config")
    renames = ec.get("renames") if isinstance(ec, dict) else None
    got = renames.get(method) if isinstance(renames, dict) and isinstance(method, str) else None
    return got if isinstance(got, dict) else None


def renames(table: ArchTable | None, method: str | None) -> bool | None:
    """Whether vLLM renames a drafter for this method (None: the table does not say)."""
    ec = rules(table).get("eagle_config")
    if not isinstance(ec, dict) or not isinstance(ec.get("renames"), dict):
        return None
    return isinstance(method, str) and method in ec["renames"]


def renamed(rule: Mapping[str, Any], arch: str) -> str:
    """One architecture name through an EAGLEConfig rename rule."""
    keep = (
        any(arch.startswith(p) for p in rule.get("keeps_prefixes") or ())
        or any(arch.endswith(s) for s in rule.get("keeps_suffixes") or ())
        or arch in (rule.get("keeps") or ())
    )
    return arch if keep else f"{rule.get('prefix', '')}{arch}"


def served_names(
    table: ArchTable | None, method: str | None, archs: list[str] | tuple[str, ...], speculators: bool = False
) -> list[str] | None:
    """The architectures vLLM builds a drafter as: EAGLEConfig's rename for the method (a
    speculators-format config is not renamed); unchanged for a method vLLM does not rename. None
    when the table does not carry EAGLEConfig's rules."""
    r = renames(table, method)
    if r is None:
        return None
    rule = rename_rule(table, method)
    if speculators or not r or rule is None:
        return list(archs)
    return [renamed(rule, a) for a in archs]


# ---------------------------------------------------------------------------------------------
# MTP


@dataclass(frozen=True)
class MtpFacts:
    """What vLLM's `mtp` method builds for a target, read from the table and the target config."""

    mtp_arch: str | None
    count: int | None = None  # draft layers the MTP class builds (None: unknown / none)
    count_why: str = ""
    ids: tuple[int, ...] | None = None  # their layer ids (None: unknown)
    ids_why: str = ""
    n_predict: int | None = None  # num_speculative_tokens above it must be a multiple of it
    n_predict_at: str | None = None
    multiple_at: str | None = None
    refusal: dict[str, Any] | None = None  # the family refuses `mtp` and names another method
    at: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _lookup(key: str, cfgs: tuple[Mapping[str, Any], ...]) -> Any:
    """A (dotted) config key in the first config that has it."""
    for c in cfgs:
        cur: Any = c
        for part in key.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        if cur is not None:
            return cur
    return None


def _count(keys: list[str], default: Any, cfgs: tuple[Mapping[str, Any], ...]) -> tuple[int | None, str]:
    for k in keys:
        v = _lookup(k, cfgs)
        if v is not None:
            if _is_int(v) and 0 <= v <= MAX_MTP_LAYERS:
                return v, f"`{k}` = {v}"
            return None, f"`{k}` = {str(v)[:40]!r} is not a layer count ppspec plans with"
    if _is_int(default):
        return default, f"vLLM's default {default} (the config sets none of {', '.join(keys)})"
    return None, f"the config sets none of {', '.join(f'`{k}`' for k in keys)} and vLLM's source gives no default"


def _ids_start(
    version: str, mtp_arch: str, cls: Mapping[str, Any], rw: Mapping[str, Any], cfgs: tuple
) -> tuple[int | None, str]:
    """Where the MTP class numbers its layers from (None: the source does not say statically), and why."""
    start_rule = cls.get("layer_ids") if isinstance(cls.get("layer_ids"), dict) else None
    if start_rule is None:
        return None, f"vLLM {version}'s source does not say statically how {mtp_arch} numbers its layers"
    if _is_int(start_rule.get("fixed")):
        start = start_rule["fixed"]
        return start, f"{mtp_arch} numbers its layers from {start} ({start_rule.get('at')})"
    if not isinstance(start_rule.get("key"), str):
        return None, (
            f"{mtp_arch} numbers its layers from `{start_rule.get('why')}` ({start_rule.get('at')}), which "
            "ppspec does not evaluate"
        )
    key = start_rule["key"]
    if key == "num_hidden_layers" and _is_int(rw.get("num_hidden_layers")):
        v: Any = rw["num_hidden_layers"]
        src = f", which vLLM's mtp rewrite sets to {v} ({rw.get('num_hidden_layers_at')})"
    else:
        v = _lookup(key, cfgs)
        src = f" = {v}" if _is_int(v) else ""
    times = start_rule.get("times", 1)
    if _is_int(v) and _is_int(times):
        start = v * times
        return start, (
            f"{mtp_arch} numbers its layers from config.{key}{f' x {times}' if times != 1 else ''} "
            f"({start_rule.get('at')}){src}: from {start}"
        )
    return None, (
        f"{mtp_arch} numbers its layers from the config's `{key}`, which it does not set ({start_rule.get('at')})"
    )


def mtp_facts(
    table: ArchTable | None,
    model_type: str | None,
    arch: str | None,
    config: Mapping[str, Any],
    text: Mapping[str, Any],
    platform: str,
) -> MtpFacts | None:
    """None when the table cannot say (no table, or it carries no MTP rules)."""
    if table is None:
        return None
    mtp = rules(table).get("mtp_rewrite")
    if not isinstance(mtp, dict):
        return None
    cfgs = (text, config) if text is not config else (config,)
    refusal = next(
        (x for x in mtp.get("refusals") or () if isinstance(x, dict) and x.get("model_type") == model_type), None
    )
    mtp_arch = table.mtp_architecture(model_type, arch)
    if refusal is not None:
        return MtpFacts(mtp_arch, refusal=refusal, multiple_at=mtp.get("multiple_of_n_predict_at"))
    if mtp_arch is None:
        return MtpFacts(None, multiple_at=mtp.get("multiple_of_n_predict_at"))
    rw = (mtp.get("architectures") or {}).get(mtp_arch) or {}
    cls = table.drafter(mtp_arch, platform) or {}
    # n_predict: what vLLM writes into the draft config (divisibility of num_speculative_tokens)
    npred = as_dict(rw.get("n_predict"))
    n_predict: int | None = None
    if _is_int(npred.get("fixed")):
        n_predict = npred["fixed"]
    elif isinstance(npred.get("keys"), list):
        n_predict = _count(npred["keys"], npred.get("default"), cfgs)[0]
    # the layers the class builds: its own constructor's key and default, else the rewrite's count
    layers = cls.get("mtp_layers") if isinstance(cls.get("mtp_layers"), dict) else None
    if layers and layers.get("keys"):
        count, why = _count(list(layers["keys"]), layers.get("default"), cfgs)
        why = f"{why} ({mtp_arch}, {layers.get('at')})"
    elif n_predict is not None:
        count, why = n_predict, f"the rewrite's n_predict {n_predict} ({npred.get('at')})"
    else:
        count, why = None, f"vLLM {table.version}'s source does not say statically how many layers {mtp_arch} builds"
    # ids: where the class's layer ids start; the rewrite may set num_hidden_layers (0)
    ids: tuple[int, ...] | None = None
    start, ids_why = _ids_start(table.version, mtp_arch, cls, rw, cfgs)
    if start is not None and count is not None:
        ids = tuple(range(start, start + count))
    return MtpFacts(
        mtp_arch,
        count=count,
        count_why=why,
        ids=ids,
        ids_why=ids_why,
        n_predict=n_predict,
        n_predict_at=npred.get("at"),
        multiple_at=mtp.get("multiple_of_n_predict_at"),
        at=rw.get("at"),
    )


# ---------------------------------------------------------------------------------------------
# 0.34+: the last stage's target embedding follows the method's config and the draft class


def target_embed(table: ArchTable | None, method: str | None, cls_name: str | None, cls: Mapping[str, Any] | None):
    """Whether the last PP stage builds the target's input embedding for this drafter, where the
    release's `spec_decode_needs_target_embed` reads the speculative config's
    `uses_target_hidden_states` and the draft class's `may_use_target_embed` (0.34: the method's
    SpeculatorConfig, and `hasattr(draft class, "has_own_embed_tokens")`): (True | False | None
    (unknown), why). None when the release's rule is a list of methods (0.30-0.33: the caller's)."""
    te = as_dict(table.doc.get("target_embed")) if table is not None else {}
    reads = te.get("reads") or []
    if table is None or "uses_target_hidden_states" not in reads:
        return None
    rule = f"spec_decode_needs_target_embed ({te.get('at')})"
    hs = as_dict(as_dict(rules(table).get("target_hidden_states")).get(method or ""))
    if not isinstance(hs.get("value"), bool):
        return None, f"vLLM {table.version}'s table does not say whether {method} reads the target's hidden states"
    if not hs["value"]:
        return False, f"{hs.get('config')} does not use the target's hidden states ({hs.get('at')}): {rule}"
    if "may_use_target_embed" not in reads:
        return True, f"{hs.get('config')} uses the target's hidden states ({hs.get('at')}): {rule}"
    emb = as_dict((cls or {}).get("embed"))
    if not isinstance(emb.get("class_attr"), bool):
        return None, f"vLLM {table.version}'s table has no class facts for the draft class {cls_name}"
    if not emb["class_attr"]:
        return False, (
            f"{cls_name} has no class attribute has_own_embed_tokens, so vLLM's registry says it may not use the "
            f"target's embedding: {rule}"
        )
    return True, (
        f"{hs.get('config')} uses the target's hidden states ({hs.get('at')}) and {cls_name} has "
        f"has_own_embed_tokens ({emb.get('class_attr_at')}): {rule}"
    )


# ---------------------------------------------------------------------------------------------
# Per drafter class


def drafter_class(
    table: ArchTable | None, names: list[str] | tuple[str, ...], platform: str
) -> tuple[str, dict] | None:
    """The first of `names` the release registers as a drafter class, with its facts."""
    if table is None:
        return None
    for n in names:
        got = table.drafter(n, platform)
        if got is not None:
            return n, got
    return None


# ---------------------------------------------------------------------------------------------
# What a release's table covers on the drafter side (`adapters list`)


def coverage(table: ArchTable) -> dict[str, Any]:
    """The drafter side of a table: drafter/MTP classes, the speculators algorithms the loader
    registers (and those it refuses), the methods EAGLEConfig renames, the MTP architectures the
    rewrite knows and the families that refuse `mtp`."""
    r = rules(table)
    spec = as_dict(r.get("speculators"))
    types = as_dict(spec.get("types"))
    ec = as_dict(r.get("eagle_config"))
    mtp = as_dict(r.get("mtp_rewrite"))
    return {
        "drafter_classes": table.counts[1],
        "speculators_algorithms": sorted(k for k, t in types.items() if not t.get("refused")),
        "speculators_refused": sorted(k for k, t in types.items() if t.get("refused")),
        "renamed_methods": sorted(ec.get("renames") or ()),
        "mtp_architectures": len(mtp.get("architectures") or ()),
        "mtp_refusals": sorted({x.get("model_type") for x in mtp.get("refusals") or () if isinstance(x, dict)}),
    }


def coverage_text(table: ArchTable) -> str:
    """', speculators: eagle3, peagle, ...; N MTP rewrites' (empty for a table without drafter rules)."""
    if not rules(table):
        return ""
    c = coverage(table)
    refused = f" (refused: {', '.join(c['speculators_refused'])})" if c["speculators_refused"] else ""
    return f", speculators {', '.join(c['speculators_algorithms'])}{refused}, {c['mtp_architectures']} MTP rewrites"


def describe_class(f: Mapping[str, Any]) -> str:
    """'; embedding: ...; d2t: ...; layer ids from ...; declares ...' for a drafter class's facts."""
    out = []
    emb = f.get("embed") if isinstance(f.get("embed"), dict) else None
    if emb:
        own = {
            "checkpoint": "its own when the checkpoint has embed_tokens, else the target's",
            True: "its own",
            False: "the target's",
        }.get(emb.get("own"), "not said")
        out.append(f"embedding: {own} ({emb.get('at')})")
    d2t = f.get("d2t") if isinstance(f.get("d2t"), dict) else None
    if d2t:
        miss = {"zeros": "without it the map is zeros, vLLM starts", "refused": "without it vLLM refuses"}.get(
            d2t.get("missing"), ""
        )
        out.append(f"d2t read ({d2t.get('reads_at')}){'; ' + miss if miss else ''}")
    ids = f.get("layer_ids") if isinstance(f.get("layer_ids"), dict) else None
    if ids:
        start = ids.get("fixed") if "fixed" in ids else ids.get("key") or ids.get("why")
        out.append(f"layer ids from {start}{' x ' + str(ids['times']) if ids.get('times') else ''} ({ids.get('at')})")
    dm = f.get("declares_method") if isinstance(f.get("declares_method"), dict) else None
    if dm:
        out.append(f"declares method {dm.get('method')} ({dm.get('at')})")
    return "".join(f"; {x}" for x in out)
