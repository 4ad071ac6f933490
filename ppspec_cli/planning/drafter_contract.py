"""The drafter contract: what vLLM requires of a drafter's config and tensors when it builds it,
per vLLM version. Two owners, one entry point (`check`):

- the method's own contract, for every drafter of the method (knowledge/methods: DFlash's
  registry check, DSpark's top-k bound, the n_predict and block-width checks);
- the drafter packs' contracts (adapters/<pack>/rules.py, declared by the manifest's `contract`:
  its drafter classes or targets, and the codes it owns). Their rules get a `DrafterView` (the
  drafter config as vLLM sees it, architectures, target config facts, tensor names, version,
  runner), never the resolved profile.

Nothing is filled in: a key or tensor ppspec cannot see is not judged. Both owners yield findings
made from the owner's code objects (a method's `contract_codes`, a drafter pack's `CODES`); the
`drafter-contract` rule in rules.py passes them on.
"""

from __future__ import annotations

from typing import Iterable

from packaging.version import Version

from ppspec_cli.findings import Finding, guard
from ppspec_cli.findings.codes import PACK_RULE_FAILED
from ppspec_cli.knowledge import methods, packs
from ppspec_cli.knowledge.methods import DrafterView, declared_architectures, is_int
from ppspec_cli.knowledge.methods.block import parallel_drafting_token

__all__ = [
    "DrafterView",
    "check",
    "judges_vocabulary",
    "parallel_drafting_token",
    "registered_dflash",
    "served_architectures",
    "view",
]


def served_architectures(method: str, cfg: dict, version: Version, target_model_type: str | None = None) -> list[str]:
    """The architectures vLLM builds the drafter as by the method's own rename (with the packs'
    classes); resolve's `drafter_served` (the release's table: the config override, the renames,
    the method's class choice) is what the rules pass when the table says."""
    return methods.get(method).served_architectures(cfg, version, target_model_type, packs.drafter_classes())


def registered_dflash(arch: str, version: Version) -> bool:
    """Whether vLLM `version`'s model registry has this (served) DFlash architecture: the release's
    table (knowledge/arch), never a hand-written list."""
    from ppspec_cli.knowledge import archtable

    t = archtable.committed(str(version))
    return t is not None and t.drafter(arch, "cuda") is not None


def view(
    method: str,
    cfg: dict,
    *,
    version: Version,
    runner: str,
    names: Iterable[str] | None,
    num_speculative_tokens: int,
    target_config: dict | None = None,
    target_text: dict | None = None,
    served: tuple[str, ...] | None = None,
) -> DrafterView:
    """The narrow view a contract reads (`served`: the architectures vLLM builds the drafter as, by
    the release's table; None: the method's own rename)."""
    tcfg, text = target_config or {}, target_text or {}
    tmt = tcfg.get("model_type") if isinstance(tcfg.get("model_type"), str) else None
    return DrafterView(
        method=methods.get(method).name,
        config=cfg,
        declared=tuple(declared_architectures(cfg)),
        served=served if served is not None else tuple(served_architectures(method, cfg, version, tmt)),
        version=version,
        runner=runner,
        num_speculative_tokens=num_speculative_tokens,
        tensor_names=None if names is None else frozenset(names),
        target_architectures=tuple(declared_architectures(tcfg)),
        target_model_type=tmt,
        target_config=tcfg,
        target_text=text,
        target_vocab=text.get("vocab_size") if is_int(text.get("vocab_size")) else None,
    )


def _applies(pack: packs.Pack, v: DrafterView) -> bool:
    """A drafter pack's contract covers this drafter: one of its served classes, or its target."""
    c = pack.contract
    assert c is not None
    if not (c.drafters or c.targets or c.target_model_types):
        return True
    return bool(
        set(c.drafters.get(v.method, ())) & set(v.served)
        or set(c.targets) & set(v.target_architectures)
        or (v.target_model_type is not None and v.target_model_type in c.target_model_types)
    )


def _pack_findings(pack: packs.Pack, v: DrafterView) -> list[Finding]:
    """One drafter pack's rules over the view, in the one guard. A rule file that fails to load, a
    rule that crashes or reports a code its file does not own is a `pack-rule-failed` finding,
    never a traceback."""
    try:
        rules, owned = packs.pack_rules(pack)
    except Exception as e:  # noqa: BLE001 - a broken pack must not break check
        assert pack.rules_path is not None
        return [
            PACK_RULE_FAILED.at(
                "adapter",
                f"pack {pack.name}: its rules ({pack.rules_path.name}) cannot be loaded: {type(e).__name__}: {e}",
            )
        ]
    out: list[Finding] = []
    for name, fn in rules:
        got: list = []
        with guard(out, f"pack {pack.name}: rule {name!r}", code=PACK_RULE_FAILED, field="adapter", fix=_AUTHOR):
            got = list(fn(v))
        for b in got:
            if isinstance(b, Finding) and b.kind in owned:
                out.append(b)
            else:
                out.append(
                    PACK_RULE_FAILED.at(
                        "adapter",
                        f"pack {pack.name}: rule {name!r} produced {b!r}, not a Finding of a code its `CODES` lists "
                        f"({', '.join(sorted(c.code for c in owned))})",
                        fix=_AUTHOR,
                    )
                )
    return out


_AUTHOR = "report this to the pack's author"


def check(
    method: str,
    cfg: dict,
    *,
    version: Version,
    runner: str,
    names: set[str] | None,
    num_speculative_tokens: int,
    target_config: dict | None = None,
    target_text: dict | None = None,
    served: tuple[str, ...] | None = None,
) -> list[Finding]:
    """Every finding of vLLM's drafter contract in this drafter config, for `version` and `runner`
    ("v1" | "v2"), against the target's raw config and its text part: the method's own contract,
    then every drafter pack's whose contract covers the drafter (in pack order)."""
    v = view(
        method,
        cfg,
        version=version,
        runner=runner,
        names=names,
        num_speculative_tokens=num_speculative_tokens,
        target_config=target_config,
        target_text=target_text,
        served=served,
    )
    out = methods.get(method).contract(v, packs.drafter_classes())
    for pack in packs.drafter_packs(method):
        if _applies(pack, v):
            out.extend(_pack_findings(pack, v))
    return out


def judges_vocabulary(method: str, cfg: dict, version: Version, served_as: tuple[str, ...] | None = None) -> bool:
    """A drafter pack's contract judges this drafter's vocabularies and vocabulary tensors (its
    `contract.vocabulary` names the served class), so the generic shapes rule leaves them alone."""
    served = set(served_as) if served_as is not None else set(served_architectures(method, cfg, version))
    return any(
        p.contract is not None
        and set(p.contract.vocabulary)
        & set(next((v for k, v in p.contract.drafters.items() if k == method), ()))
        & served
        for p in packs.drafter_packs(method)
    )
