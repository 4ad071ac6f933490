"""Disaggregated prefill/decode: one resolved engine per role, the KV layer names each side
registers, and the checks that only make sense across the two engines.

A role is resolved exactly like a single-engine profile (Profile.for_role -> resolve -> plan ->
rules); this module adds what spans both: the layer names the KV connector matches between the
engines, the connector's facts (ppspec_cli/knowledge/connectors.py) against each side's layout, and the
launch of each side with the `--kv-transfer-config` it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

from ppspec_cli.findings import Finding, Severity, by_severity
from ppspec_cli.findings.codes import (
    PD_BLOCK_SIZE_MISMATCH,
    PD_CONNECTOR_PCP,
    PD_CONNECTOR_PP,
    PD_CONNECTOR_UNKNOWN,
    PD_CONNECTOR_UNSUITABLE,
    PD_DRAFT_LAYER_COLLISION,
    PD_DRAFT_LAYER_NAMES,
    PD_HYBRID_NOT_CHECKED,
    PD_HYBRID_PP,
    PD_KV_DTYPE_MISMATCH,
    PD_NAMES_NOT_CHECKED,
    PD_PORT_CLASH,
    PD_RANK_LAYOUT,
    PD_TP_MISMATCH,
)
from ppspec_cli.io import shellout
from ppspec_cli.knowledge import connectors
from ppspec_cli.planning.plan import pp_rank_of
from ppspec_cli.planning.profile import KV_FLAG, ROLES, Profile, Role
from ppspec_cli.planning.resolve import Resolved, mtp_facts
from ppspec_cli.planning.rules import run_rules


@dataclass(frozen=True)
class Deployment:
    profile: Profile
    roles: dict[Role, Resolved]

    @property
    def connector_name(self) -> str:
        assert self.profile.kv_transfer is not None
        return self.profile.kv_transfer.connector


def role_profile(profile: Profile, role: Role) -> Profile:
    """One engine's single-engine profile (Profile.for_role) with its `--kv-transfer-config`
    among the engine options, so resolve, rules and launch treat it like any other profile."""
    p = profile.for_role(role)
    return p.model_copy(update={"engine": {**p.engine, KV_FLAG: kv_transfer_config(profile, role)}})


# ---------------------------------------------------------------------------------------------
# KV layer names


@dataclass(frozen=True)
class KvLayer:
    """One attention layer an engine registers with the KV connector."""

    index: int  # the N in `model.layers.N`
    kind: str  # "target" | "draft"
    stage: int


def kv_layers(r: Resolved) -> list[KvLayer] | None:
    """The layers one engine registers, by layer index: the target's on their stages, the draft's
    (under the draft ids the plan computed, from the drafter's pack / method) on the last stage.
    None when the plan is unknown."""
    p = r.plan
    if p is None:
        return None
    out = [KvLayer(i, "target", s.rank) for s in p.stages for i in range(*s.layers)]
    out += [KvLayer(i, "draft", len(p.stages) - 1) for i in p.draft_layer_ids]
    return out


@dataclass(frozen=True)
class NameRow:
    """A run of consecutive layer indices that both engines register the same way."""

    first: int
    last: int
    prefill: tuple[str, ...]  # "target@0", "draft@1", ... (stage after @; empty: not registered)
    decode: tuple[str, ...]

    @property
    def mismatch(self) -> bool:
        """The engines disagree on what the name is (a layer may sit on different stages), or one
        engine gives one name to two layers."""
        kinds = [tuple(c.split("@")[0] for c in side) for side in (self.prefill, self.decode)]
        return kinds[0] != kinds[1] or len(self.prefill) > 1 or len(self.decode) > 1

    @property
    def names(self) -> str:
        return f"model.layers.{self.first}" if self.first == self.last else f"model.layers.{self.first}-{self.last}"


def _cell(layers: list[KvLayer], i: int) -> tuple[str, ...]:
    return tuple(sorted(f"{x.kind}@{x.stage}" for x in layers if x.index == i))


def name_table(d: Deployment) -> list[NameRow] | None:
    """The KV layer names of both engines side by side, consecutive equal rows merged."""
    pre, dec = kv_layers(d.roles["prefill"]), kv_layers(d.roles["decode"])
    if pre is None or dec is None:
        return None
    rows: list[NameRow] = []
    for i in sorted({x.index for x in pre} | {x.index for x in dec}):
        pc, dc = _cell(pre, i), _cell(dec, i)
        if rows and rows[-1].last == i - 1 and (rows[-1].prefill, rows[-1].decode) == (pc, dc):
            rows[-1] = NameRow(rows[-1].first, i, pc, dc)
        else:
            rows.append(NameRow(i, i, pc, dc))
    return rows


# ---------------------------------------------------------------------------------------------
# Cross-engine checks


def _role_field(role: Role, f: Finding) -> str:
    return f"roles.{role}.{f.field}" if f.field.startswith("topology") else f.field


def run_pd_rules(d: Deployment) -> list[Finding]:
    """Each engine's own findings (once when both engines have it, else naming the engine), then
    the cross-engine ones; errors first."""
    per_role = {role: run_rules(r) for role, r in d.roles.items()}
    out: list[Finding] = []
    seen: set[tuple] = set()
    for role, fs in per_role.items():
        other = per_role["decode" if role == "prefill" else "prefill"]
        for f in fs:
            key = (f.code, f.message)
            if key in seen:
                continue
            if any((g.code, g.message) == key for g in other):
                seen.add(key)
                out.append(f)
            else:
                out.append(replace(f, field=_role_field(role, f), message=f"{role} engine: {f.message}"))
    out.extend(cross_engine(d))
    return by_severity(out)


def _engine_opt(r: Resolved, name: str) -> Any:
    return r.options.get(name)


def cross_engine(d: Deployment) -> Iterator[Finding]:
    yield from _draft_names(d)
    yield from _connector(d)
    yield from _layouts(d)
    yield from _ports(d)


def _draft_names(d: Deployment) -> Iterator[Finding]:
    pre, dec = d.roles["prefill"], d.roles["decode"]
    if pre.plan is None or dec.plan is None:
        if pre.profile.drafter is not None:
            yield PD_NAMES_NOT_CHECKED.at(
                "target.model",
                "the KV layer names of the two engines were not compared: the target's layer count is unknown",
            )
        return
    a, b = pre.plan.draft_layer_ids, dec.plan.draft_layer_ids
    if a != b:
        numbering = pre.plan.draft_layer_numbering
        s = pre.support("global_draft_layer_ids")
        why = (
            f"the drafter numbers its layers {numbering}ly (vLLM {pre.engine_version}: {s.reason})"
            if s.pack
            else f"{pre.method} drafters number their layers PP-locally in vLLM {pre.engine_version}"
        )
        fix = (
            "use `adapter: eagle_global_layer_ids` (it numbers EAGLE-1 draft layers globally), or the same "
            "pipeline_parallel on both engines"
        )
        # only the method's own PP-local numbering has a pack that makes it global
        if pre.spec is None or pre.spec.numbering != "pp-local" or s.status == "unsupported":
            fix = (
                "give both engines the same pipeline_parallel (no pack numbers this drafter globally), or use a "
                "globally numbered drafter (EAGLE3/DFlash/DSpark)"
            )
        yield PD_DRAFT_LAYER_NAMES.at(
            "roles",
            f"the two engines name the draft layers differently: prefill (PP={pre.pp}) registers "
            f"model.layers.{_span(a)}, decode (PP={dec.pp}) model.layers.{_span(b)}; "
            f"{why}. The KV connector matches layers by name, so decode never receives the draft KV (the K3 field "
            "report: every registration timed out, no request answered)",
            fix=fix,
        )
    for role, r in d.roles.items():
        layers = kv_layers(r) or []
        targets = {x.index: x.stage for x in layers if x.kind == "target"}
        clash = [x for x in layers if x.kind == "draft" and x.index in targets]
        if clash:
            message, fix = _collision(role, r, clash, targets)
            yield PD_DRAFT_LAYER_COLLISION.at(f"roles.{role}.topology", message, fix=fix)


def _collision(role: str, r: Resolved, clash: list[KvLayer], targets: dict[int, int]) -> tuple[str, str]:
    """What collides (the draft layer and the target layer of one name), where (the stages), why
    the draft takes that name, and the fix in the profile's terms."""
    names = ", ".join(
        f"model.layers.{x.index} (the draft's on stage {x.stage}, the target's on stage {targets[x.index]})"
        for x in clash[:4]
    ) + (f" and {len(clash) - 4} more" if len(clash) > 4 else "")
    where = f"the {role} engine (PP={r.pp}) registers two layers under one name with the KV connector: {names}"
    m = r.spec
    if m is not None and not m.external_drafter:
        mf = mtp_facts(r)
        cls = mf.mtp_arch if mf is not None and mf.mtp_arch else "vLLM's MTP class for this target"
        why = mf.ids_why if mf is not None and mf.ids_why else f"{cls} numbers its layers from 0"
        return (
            f"{where}. The target's MTP layers draft here and vLLM {r.engine_version} names them from 0, not after "
            f"the target's {r.plan.num_layers if r.plan else '?'} layers ({why}); the connector matches layers by "
            "name, so it cannot tell the draft's KV from the target layer's",
            "vLLM's MTP class fixes these names (no option or adapter pack renames them): serve this target with "
            "mtp as one engine (remove `roles` and `kv_transfer`), or draft with an external drafter whose layers "
            "are numbered after the target's (drafter.method eagle3, dflash or dspark)",
        )
    s = r.support("global_draft_layer_ids")
    if m is not None and m.numbering == "pp-local" and s.status != "unsupported":
        fix = (
            f"set `adapter: eagle_global_layer_ids` (it numbers {m.title} draft layers after the target's), or "
            f"roles.{role}.topology.pipeline_parallel: 1"
        )
    else:
        fix = (
            f"set roles.{role}.topology.pipeline_parallel: 1 (no adapter pack numbers this drafter's layers after "
            "the target's), or use a drafter numbered globally (drafter.method eagle3, dflash or dspark)"
        )
    return (
        f"{where}. The drafter numbers its layers from the last stage's own layer count (PP-local numbering: "
        f"{r.method} in vLLM {r.engine_version}), which is already the name of a target layer on an earlier stage; "
        "the connector matches layers by name, so it cannot tell the two apart",
        fix,
    )


def _span(ids: tuple[int, ...]) -> str:
    if not ids:
        return "(none)"
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}..{ids[-1]}"


def _connector(d: Deployment) -> Iterator[Finding]:
    name = d.connector_name
    version = d.roles["prefill"].facts_version
    c = connectors.get(name)
    if c is None:
        other = connectors.OTHER.get(name)
        if other is not None and ("not a prefill->decode" in other or "not registered" in other):
            yield PD_CONNECTOR_UNSUITABLE.at("kv_transfer.connector", f"{name}: {other}")
        else:
            yield PD_CONNECTOR_UNKNOWN.at(
                "kv_transfer.connector",
                f"{name}: "
                + (other or "ppspec has no facts about this connector")
                + "; whether it carries PP on each side was not checked",
            )
        return
    for role in ROLES:
        r = d.roles[role]
        if r.pp > 1:
            st, why, src = connectors.status(c.pp[role], version)
            if st == "refused":
                yield PD_CONNECTOR_PP.at(
                    f"roles.{role}.topology.pipeline_parallel",
                    f"{name} cannot serve PP={r.pp} on the {role} side (vLLM {version}: {why}; {src})",
                    fix=f"use pipeline_parallel: 1 on the {role} engine, or a connector that carries PP on that side",
                )
            elif st == "unknown":
                yield PD_CONNECTOR_PP.at(
                    f"roles.{role}.topology.pipeline_parallel",
                    f"{name} with PP={r.pp} on the {role} side: {why}",
                    severity="warning",
                )
            yield from _hybrid(c, role, r, version)
        pcp = _engine_opt(r, "prefill-context-parallel-size")
        if role == "decode" and isinstance(pcp, int) and pcp > 1 and c.pcp_decode:
            st, why, src = connectors.status(c.pcp_decode, version)
            if st == "refused":
                yield PD_CONNECTOR_PCP.at("roles.decode.engine", f"{name}: {why} (vLLM {version}; {src})")


def layer_types(r: Resolved) -> tuple[list[str], str] | None:
    """Each target layer's attention type and where that came from: the config's `layer_types`,
    else the family pack's `linear_layers` fact. None when neither says (never guessed)."""
    if r.target is None or r.plan is None:
        return None
    n = r.plan.num_layers
    types = r.target.text.get("layer_types")
    if isinstance(types, list) and len(types) == n and all(isinstance(t, str) for t in types):
        return list(types), "the config's layer_types"
    part = r.target_pack
    ll = part.facts.linear_layers if part is not None else None
    if ll is None:
        return None
    cur: Any = r.target.text
    for k in ll.key.split("."):
        cur = cur.get(k) if isinstance(cur, dict) else None
    if not (isinstance(cur, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in cur)):
        return None
    linear = {i - ll.base for i in cur}
    assert part is not None  # ll came from it
    return [
        "linear_attention" if i in linear else "full_attention" for i in range(n)
    ], f"{ll.key} (the {part.name} pack)"


def _hybrid(c: connectors.Connector, role: Role, r: Resolved, version: str) -> Iterator[Finding]:
    """Which stages hold which attention types, and whether the connector carries that under PP."""
    if not (c.pp_hybrid or c.pp_mamba) or r.plan is None:
        return
    got = layer_types(r)
    if got is None:
        st, why, src = connectors.status(c.pp_hybrid, version)
        if st == "refused":
            yield PD_HYBRID_NOT_CHECKED.at(
                f"roles.{role}.topology.pipeline_parallel",
                f"if the target mixes attention types (a hybrid KV cache), {c.name} refuses PP={r.pp} on the {role} "
                f"side ({why}; {src}); "
                "neither its config (`layer_types`) nor its pack says which layers are which, so ppspec could not tell",
            )
        return
    types, source = got
    if len(set(types)) < 2:
        return
    per_stage = [sorted({types[i] for i in range(*s.layers)}) for s in r.plan.stages]
    mamba = any("linear" in t or "mamba" in t for t in types)
    st, why, src = connectors.status(c.pp_mamba if mamba and c.pp_mamba else c.pp_hybrid, version)
    where = "; ".join(f"stage {i}: {', '.join(ts)}" for i, ts in enumerate(per_stage))
    sev: Severity = "error" if st == "refused" else "info"
    yield PD_HYBRID_PP.at(
        f"roles.{role}.topology.pipeline_parallel",
        f"hybrid target on the {role} engine (PP={r.pp}; {where}; from {source}): {c.name} "
        f"{'refuses' if st == 'refused' else 'handles'} it (vLLM {version}: {why}; {src})"
        + (
            "; stages with different attention types advertise different KV region members"
            if len({tuple(x) for x in per_stage}) > 1
            else ""
        ),
        severity=sev,
        fix="pipeline_parallel: 1 on this engine, or a connector that routes hybrid layers by name under PP"
        if sev == "error"
        else "",
    )


def _layouts(d: Deployment) -> Iterator[Finding]:
    pre, dec = d.roles["prefill"], d.roles["decode"]
    c = connectors.get(d.connector_name)
    version = pre.facts_version
    checks = (
        (
            "tensor parallel",
            pre.profile.topology.tensor_parallel,
            dec.profile.topology.tensor_parallel,
            "tp_mismatch",
            PD_TP_MISMATCH,
            "topology.tensor_parallel",
        ),
        (
            "block size",
            _engine_opt(pre, "block-size"),
            _engine_opt(dec, "block-size"),
            "block_size_mismatch",
            PD_BLOCK_SIZE_MISMATCH,
            "engine.block-size",
        ),
        (
            "KV cache dtype",
            _engine_opt(pre, "kv-cache-dtype") or "auto",
            _engine_opt(dec, "kv-cache-dtype") or "auto",
            "kv_dtype_mismatch",
            PD_KV_DTYPE_MISMATCH,
            "engine.kv-cache-dtype",
        ),
    )
    for what, a, b, attr, code, fld in checks:
        if a == b:
            continue
        if c is None:
            yield code.at(
                f"roles.*.{fld}",
                f"the engines differ in {what} (prefill {a}, decode {b}); whether {d.connector_name} maps that is "
                "not known",
                severity="warning",
            )
            continue
        st, why, src = connectors.status(getattr(c, attr), version)
        if st == "refused":
            yield code.at(
                f"roles.*.{fld}",
                f"the engines differ in {what} (prefill {a}, decode {b}) and {c.name} cannot map it "
                f"(vLLM {version}: {why}; {src})",
            )
        elif st == "unknown" or not getattr(c, attr):
            yield code.at(
                f"roles.*.{fld}",
                f"the engines differ in {what} (prefill {a}, decode {b}); ppspec does not know whether {c.name} maps "
                "it",
                severity="warning",
            )
    for role, r in d.roles.items():
        t = r.profile.topology
        pcp = _engine_opt(r, "prefill-context-parallel-size")
        pcp = pcp if isinstance(pcp, int) and pcp > 0 else 1
        if t.data_parallel > 1 and t.pipeline_parallel > 1:
            world = t.data_parallel * t.pipeline_parallel * pcp * t.tensor_parallel
            stages = [pp_rank_of(g, tp=t.tensor_parallel, pp=t.pipeline_parallel, pcp=pcp) for g in range(world)]
            per_dp = t.pipeline_parallel * pcp * t.tensor_parallel
            first = ", ".join(
                f"stage {s}: ranks {[g for g in range(per_dp) if stages[g] == s]}" for s in range(t.pipeline_parallel)
            )
            yield PD_RANK_LAYOUT.at(
                f"roles.{role}.topology",
                f"{role} engine: {world} ranks laid out DP x PP x PCP x TP = {t.data_parallel} x "
                f"{t.pipeline_parallel} x {pcp} x {t.tensor_parallel} (TP fastest); "
                f"stage of global rank g = (g // (PCP*TP)) % PP, so DP replica 0 has {first}, replica k adds "
                f"{per_dp}*k. A connector or plugin that divides by TP alone puts ranks on the wrong stage",
            )


def _ports(d: Deployment) -> Iterator[Finding]:
    a, b = d.roles["prefill"].profile.server, d.roles["decode"].profile.server
    if a.port == b.port and a.host == b.host:
        yield PD_PORT_CLASH.at("roles", f"both engines listen on {a.host}:{a.port}")


# ---------------------------------------------------------------------------------------------
# Launch


def kv_transfer_config(profile: Profile, role: Role) -> dict[str, Any]:
    """The `--kv-transfer-config` of one engine: the connector, the `kv_role` the connector wants on
    that side (its facts), the profile's extra config and options."""
    kt = profile.kv_transfer
    assert kt is not None
    c = connectors.get(kt.connector)
    kv_role = c.kv_role[role] if c is not None else ("kv_producer" if role == "prefill" else "kv_consumer")
    cfg: dict[str, Any] = {"kv_connector": kt.connector, "kv_role": kv_role, **kt.options}
    if kt.extra_config:
        cfg["kv_connector_extra_config"] = kt.extra_config
    return cfg


def router_command(d: Deployment, port: int = 8000) -> tuple[str, str]:
    """The proxy vLLM ships for this connector (in vLLM's source tree: the wheel does not carry it)
    as a shell line with both engines' addresses (inert when pasted: every value quoted, only
    $VLLM_SRC expands), and the script's path in that tree."""
    c = connectors.get(d.connector_name)
    script = (
        c.router if c is not None and c.router else "examples/disaggregated/disaggregated_serving/disagg_proxy_demo.py"
    )
    pre, dec = d.roles["prefill"].profile.server, d.roles["decode"].profile.server
    name = pre.served_model_name or d.profile.name

    def reach(host: str) -> str:
        return "127.0.0.1" if host in ("0.0.0.0", "::") else host

    if script.endswith("toy_proxy_server.py"):
        args = [
            "--port",
            str(port),
            "--prefiller-host",
            reach(pre.host),
            "--prefiller-port",
            str(pre.port),
            "--decoder-host",
            reach(dec.host),
            "--decoder-port",
            str(dec.port),
        ]
    else:
        args = [
            "--model",
            name,
            "--prefill",
            f"{reach(pre.host)}:{pre.port}",
            "--decode",
            f"{reach(dec.host)}:{dec.port}",
            "--port",
            str(port),
        ]
    return 'python "$VLLM_SRC"/' + shellout.quote(script) + " " + shellout.command(args), script
