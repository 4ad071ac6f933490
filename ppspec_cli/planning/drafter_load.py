"""vLLM's verdict on loading the drafter, read from the release's table (knowledge/drafterscan.py,
applied by knowledge/drafterfacts.py): no hand-written family rule. Each function yields findings
over a Resolved; rules.py runs them as the `drafter-load` rule.

- the speculators loader refuses the config (an algorithm it does not register, one it refuses,
  a transformer_layer_config model_type it has no class for, a key it reads that is missing);
- the architecture vLLM builds the drafter as (EAGLEConfig's `Eagle<arch>` / `Eagle3<arch>` /
  `DFlash<arch>`) is not in its model registry (`<method>-arch-unknown`);
- 0.34+: the drafter class declares another method than the profile's (`drafter-method-declared`);
- the drafter shares the target's input embedding (it has none of its own, or its class always
  takes the target's) at another width than its own hidden size (`drafter-embed-width`);
- `mtp`: the family refuses it and names another method (`mtp-refused`); num_speculative_tokens
  above the rewrite's n_predict and not a multiple of it (`mtp-k-not-multiple`).
"""

from __future__ import annotations

from typing import Iterator

from ppspec_cli.findings import Finding
from ppspec_cli.findings.codes import (
    DRAFTER_EMBED_WIDTH,
    DRAFTER_METHOD_DECLARED,
    DRAFTER_OVERRIDE_UNREAD,
    SPECULATORS_REFUSED,
)
from ppspec_cli.knowledge import drafterfacts, methods
from ppspec_cli.planning.resolve import Resolved, drafter_facts, mtp_facts


def _ver(r: Resolved) -> str:
    return r.arch_table.version if r.arch_table is not None else r.engine_version


def speculators_refused(r: Resolved) -> Iterator[Finding]:
    sp = r.speculators
    if r.profile.drafter is None or sp is None or not sp.refused:
        return
    yield SPECULATORS_REFUSED.at(
        "drafter.model",
        f"the drafter is a speculators-format checkpoint (speculators_model_type {str(sp.kind)[:40]!r}): {sp.why}"
        + (f" ({sp.at})" if sp.at else ""),
        fix="use a drafter whose speculators algorithm this vLLM registers (the message lists them), the original "
        "checkpoint it was converted from, or a vLLM release that registers the algorithm (`ppspec adapters list` "
        "lists them per release)",
    )


def served_unregistered(r: Resolved) -> list[str]:
    """The architectures vLLM builds the drafter as that its registry lacks ([] when they are all
    registered or the table cannot say)."""
    if r.arch_table is None or not r.drafter_served:
        return []
    return [a for a in r.drafter_served if not r.arch_table.registers(a)]


def arch_unknown(r: Resolved) -> Iterator[Finding]:
    d, m = r.profile.drafter, r.spec
    if d is None or m is None or not m.external_drafter or r.drafter is None or m.arch_unknown is None:
        return
    if r.speculators is None and not drafterfacts.renames(r.arch_table, d.method):
        return  # vLLM does not serve it by the name it gives (dspark: its own rewrite)
    missing = served_unregistered(r)
    if not missing or len(missing) != len(r.drafter_served or ()):
        return  # vLLM builds the first registered one
    declared = methods.declared_architectures(r.drafter_view or {})
    rule = drafterfacts.rename_rule(r.arch_table, d.method)
    ov = r.drafter_override
    rewritten = list(ov.architectures) if ov is not None else declared
    how = (
        f"EAGLEConfig renames it for {d.method} ({rule.get('at')})"
        if rule is not None and rewritten != missing and r.speculators is None
        else "it is served as named"
    )
    fix = (
        f"use a drafter whose config names an architecture this vLLM serves for {d.method} (`ppspec adapters show "
        "<class>` shows one), or the method the drafter was trained for"
    )
    if ov is not None:
        mt = (r.drafter_view or {}).get("model_type")
        how = (
            f"vLLM's config override, which it applies to every draft config it loads ({ov.draft_applies_at}), "
            f"rewrites its model_type {str(mt)[:40]!r} to {ov.model_type!r} and its architectures to "
            f"{list(ov.architectures)} ({', '.join(ov.applied)}); then {how}"
        )
        fix = (
            f"give the drafter's config.json the model_type of the model its layers are (e.g. `llama` for an EAGLE "
            f"head), not its target's {str(mt)[:40]!r}, through a local copy of the checkpoint; or " + fix
        )
    yield m.arch_unknown.at(
        "drafter.model",
        f"vLLM {_ver(r)} builds this {m.title} drafter (architectures {declared}) as {missing}: {how}, and its model "
        "registry has no such class, so vLLM refuses at start ('Model architectures ... are not supported for now')",
        fix=fix,
    )


def method_declared(r: Resolved) -> Iterator[Finding]:
    """0.34+: the draft class names its own method (`speculator_config_class`); vLLM refuses another."""
    d = r.profile.drafter
    if d is None or r.arch_table is None or r.drafter is None:
        return
    archs = methods.declared_architectures(r.drafter_view or {})
    got = drafterfacts.drafter_class(r.arch_table, archs[:1], r.platform)
    if got is None:
        return
    dm = drafterfacts.as_dict(got[1].get("declares_method"))
    if not isinstance(dm.get("method"), str) or dm["method"] == d.method:
        return
    yield DRAFTER_METHOD_DECLARED.at(
        "drafter.method",
        f"vLLM {_ver(r)}'s {got[0]} declares method {dm['method']!r} ({dm.get('config')}, {dm.get('at')}) and the "
        f"profile asks for {d.method!r}: vLLM refuses at start ('speculative_config requested method={d.method!r}, "
        f"but the draft model ... is a {dm['method']!r} checkpoint')",
        fix=f"set drafter.method: {dm['method']}, or use a {d.method} drafter",
    )


def shares_target_embed(r: Resolved) -> bool | None:
    """Whether vLLM gives the drafter the target's input embedding under PP, by its class's rule in
    the table (`embed.own`): a class that fixes it says so whatever the checkpoint holds; one that
    follows the checkpoint shares exactly when it has no embed_tokens; Model Runner V2 leaves a
    class without the attribute alone under PP (eagle/utils.py maybe_share_target_embed). None:
    the table does not say (or the tensors were not read)."""
    facts = drafter_facts(r) or {}
    emb = facts.get("embed") if isinstance(facts.get("embed"), dict) else None
    if emb is None or r.drafter is None:
        return None
    own = emb.get("own")
    if r.runner == "v2" and r.pp > 1 and emb.get("declared") is False:
        return False
    if own is True:
        return False
    if own is False:
        return True
    names = r.drafter.tensor_names()
    if own == "checkpoint" and names is not None:
        return not any(x.endswith("embed_tokens.weight") for x in names)
    return None


def takes_target_embed(r: Resolved) -> bool:
    """shares_target_embed, else (the table does not say) the checkpoint's tensors: no embed_tokens."""
    got = shares_target_embed(r)
    if got is not None:
        return got
    names = r.drafter.tensor_names() if r.drafter is not None else None
    return names is not None and not any(x.endswith("embed_tokens.weight") for x in names)


def share_reason(r: Resolved) -> str:
    """Why the drafter takes the target's embedding, in words (for embed-last-stage)."""
    facts = drafter_facts(r) or {}
    emb = drafterfacts.as_dict(facts.get("embed"))
    if emb.get("own") is False:
        cls = str(facts.get("class", "?")).rsplit(":", 1)[-1]
        return f"vLLM's {cls} always takes the target's embedding, whatever its checkpoint holds ({emb.get('at')})"
    return "the drafter has no embed_tokens of its own and shares the target's"


def embed_width(r: Resolved) -> Iterator[Finding]:
    """The drafter takes the target's input embedding at the target's width; a drafter narrower or
    wider than its target fails there (Model Runner V2 shares it without a width check,
    eagle/utils.py maybe_share_target_embed); the V1 runner keeps the drafter's own instead, which
    a checkpoint without embed_tokens never loads."""
    d, m = r.profile.drafter, r.spec
    if d is None or m is None or not m.external_drafter or r.drafter is None or r.target is None:
        return
    facts = drafter_facts(r) or {}
    emb = facts.get("embed") if isinstance(facts.get("embed"), dict) else None
    th, view = r.target.hidden_size, r.drafter_view or {}
    key = emb.get("width_key") if emb else None
    dw = view.get(key) if key else None
    if emb is None or not isinstance(dw, int) or isinstance(dw, bool) or not th or dw == th:
        return
    names = r.drafter.tensor_names()
    own = emb.get("own")
    has = None if names is None else any(x.endswith("embed_tokens.weight") for x in names)
    if own == "checkpoint" and has is None:
        return  # whether it has its own is in its tensors, which were not read
    if own is True or (own == "checkpoint" and has):
        return
    if own not in (False, "checkpoint"):
        return
    if r.pp > 1 and r.runner == "v2" and not emb.get("declared"):
        return  # vLLM leaves a drafter without the attribute alone under PP
    cls = facts.get("class", "?").rsplit(":", 1)[-1]
    why = (
        f"{cls} always takes the target's embedding ({emb.get('at')})"
        if own is False
        else f"the checkpoint has no embed_tokens, so {cls} takes the target's ({emb.get('at')})"
    )
    fix = "use a drafter whose checkpoint carries its own embed_tokens, or one built for this target's hidden size"
    if r.runner == "v2":
        yield DRAFTER_EMBED_WIDTH.at(
            "drafter.model",
            f"{why}: {th} wide, but the drafter embeds at its own {key} {dw} ({emb.get('width_at')}). vLLM {_ver(r)} "
            "shares it without a width check (eagle/utils.py maybe_share_target_embed) and the start-up dummy run "
            "fails on the shape",
            fix=fix,
        )
    else:
        yield DRAFTER_EMBED_WIDTH.at(
            "drafter.model",
            f"{why}, but its {key} is {dw} and the target's embedding {th} wide: vLLM {_ver(r)}'s V1 runner starts "
            "and keeps the drafter's own embedding instead, which this checkpoint does not have, so it is never "
            "loaded and acceptance collapses. ppspec refuses what would serve garbage drafts",
            fix=fix,
        )


def mtp_rules(r: Resolved) -> Iterator[Finding]:
    d, m = r.profile.drafter, r.spec
    if d is None or m is None or m.external_drafter:
        return
    mf = mtp_facts(r)
    if mf is None:
        return
    if mf.refusal is not None and m.family_refusal is not None:
        rf = mf.refusal
        yield m.family_refusal.at(
            "drafter.method",
            f"vLLM {_ver(r)} refuses {m.name} for model_type {rf.get('model_type')!r} and names another method "
            f"({rf.get('at')}): '{rf.get('message')}'",
            fix=f"set drafter.method: {rf.get('method')}",
        )
        return
    k, n = d.num_speculative_tokens, mf.n_predict
    if n and k > n and k % n and m.k_not_multiple is not None:
        yield m.k_not_multiple.at(
            "drafter.num_speculative_tokens",
            f"vLLM {_ver(r)} rewrites the target to {mf.mtp_arch} with n_predict {n} ({mf.n_predict_at}); "
            f"num_speculative_tokens {k} is above it and not a multiple: vLLM refuses at start "
            f"('num_speculative_tokens:{k} must be divisible by n_predict={n}', {mf.multiple_at})",
            fix=f"use num_speculative_tokens <= {n} or a multiple of {n}",
        )


def override_unread(r: Resolved) -> Iterator[Finding]:
    """A step of vLLM's config override names the drafter's model_type under a test ppspec does not
    evaluate (the table keeps it `unread`): said, never applied nor passed over in silence."""
    ov = r.drafter_override
    if r.profile.drafter is None or ov is None or not ov.unread:
        return
    mt = (r.drafter_view or {}).get("model_type")
    at, test = ov.unread[0]
    yield DRAFTER_OVERRIDE_UNREAD.at(
        "drafter.model",
        f"vLLM {_ver(r)}'s config override, which it applies to every draft config ({ov.draft_applies_at}), has a "
        f"step for model_type {str(mt)[:40]!r} at {at} under a test ppspec does not evaluate ({test[:160]}): vLLM may "
        "rewrite this drafter's architectures there, and which class it builds is not decided here",
    )


def findings(r: Resolved) -> Iterator[Finding]:
    yield from speculators_refused(r)
    yield from override_unread(r)
    yield from arch_unknown(r)
    yield from method_declared(r)
    yield from embed_width(r)
    yield from mtp_rules(r)


def load_refused(r: Resolved) -> bool:
    """vLLM refuses this drafter by the table (its speculators loader, a served architecture its
    registry lacks, a class that declares another method): ppspec's own method recognition
    (method-mismatch) has nothing to add."""
    if r.speculators is not None and r.speculators.refused:
        return True
    if any(True for _ in arch_unknown(r)):
        return True
    return any(True for _ in method_declared(r))


def served_class_known(r: Resolved) -> bool:
    """vLLM builds the drafter as a drafter class its registry has (whatever the config's own
    architecture name says: an official EAGLE-3 head naming LlamaForCausalLM is served as
    Eagle3LlamaForCausalLM). Not when the class is the method's in-target fallback (a DSpark drafter
    vLLM keeps none of the names of is served as DeepSeek-V4's own): that says nothing of the checkpoint."""
    if r.drafter_choice is not None and r.drafter_choice.fallback:
        return False
    return drafter_facts(r) is not None and r.drafter_served is not None
