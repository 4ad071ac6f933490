"""A pack against the installed vLLM: its status (native, patched by pack, unsupported, not
checked) from the pack's support tables and which of its modules import in this install, and its
engine state from a child interpreter (importing vLLM takes seconds; this process never does):
verified (a verified release in the pack's range), probed (an unverified version whose patch
anchors and native opt-ins, read by value, all match, and whose patches apply and pass their
behaviour checks there), drifted (an anchor moved) or refused (a behaviour check fails): the plugin
would refuse either. Its proof: per committed release, whether the pack was proven on that
release's source (knowledge/packproofs: tools/prove_packs.py ran the plugin's own
apply/verify/behaviour checks on it). What `adapters list` and `adapters show` render
(commands/adapters.py).

Whether a module imports is learnt once per install in a child interpreter and remembered in the
install-keyed cache (knowledge/installcache.py), keyed by the install and the versions of the
packages that decide it.
"""

from __future__ import annotations

import json
from typing import Any

from ppspec_cli.io import spawn
from ppspec_cli.knowledge import facts
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.engine import module_import_errors as import_errors
from ppspec_cli.knowledge.packs import Pack, load_packs
from ppspec_cli.knowledge.versions import verdict

STATUSES = ("native", "patched by pack", "unsupported", "not checked")


#: Capabilities without which the family does not work under PP at all (vLLM refuses the launch);
#: another unsupported capability is named in the status detail.
_GATING = ("aux_relay_over_pp", "global_draft_layer_ids")


#: The deadline of a child interpreter that imports modules or reads anchors of the installed vLLM.
IMPORT_CHECK_DEADLINE_S = 180


def modules_for(pack: Pack, platform: str, version: str | None = None) -> dict[str, str]:
    """module -> the architecture whose inner decoder lives there, on this platform (the pack's
    fact, else vLLM's source for that release: packs.inner_decoder_ref)."""
    from ppspec_cli.knowledge.packs import inner_decoder_ref

    out: dict[str, str] = {}
    for part in pack.parts:
        for arch in dict.fromkeys([*part.facts.inner_decoder, *part.matches.targets]):
            ref = inner_decoder_ref(part, arch, platform, version)
            if ref:
                out.setdefault(ref.partition(":")[0], arch)
    return out


def pack_status(
    pack: Pack, installed: VllmInstall | None, import_errs: dict[str, str | None] | None = None
) -> tuple[str, str]:
    """(status, why) of a pack against an installed vLLM (version, platform), from the pack's own
    support tables (`Pack.supports`) and, when given, which of its modules import here."""
    if installed is None:
        return "not checked", "vLLM is not installed here"
    version, platform = installed.version, installed.platform
    vv = verdict(version)
    parsed = facts.parse_version(vv.facts_version)
    if parsed is not None and parsed < facts.PP_SPEC_MIN_VERSION:
        return (
            "unsupported",
            f"vLLM {version} has no speculative decoding under pipeline parallelism (it arrived in "
            f"{facts.PP_SPEC_MIN_VERSION})",
        )
    if vv.verified and not pack.supports_vllm(version):
        return "unsupported", f"vLLM {version} is outside {pack.vllm_range}"
    # an unverified version (nightly, rc, fork, newer): the newest verified release's tables, carried
    # forward; the `engine` state (probed / drifted) says what the installed code itself showed
    answers = [
        pack.supports(cap, platform, vv.facts_version)
        for cap in dict.fromkeys(c for p in pack.parts for c in p.capabilities)
    ]
    bad = [a for a in answers if a.status == "unsupported"]
    if any(a.capability in _GATING for a in bad):
        return "unsupported", "; ".join(f"{a.capability}: {a.reason}" for a in bad)
    lacks = "".join(f"; but not {a.capability}: {a.reason}" for a in bad)
    broken = {m: err for m, err in (import_errs or {}).items() if err and m in modules_for(pack, platform)}
    if broken:
        m, err = next(iter(broken.items()))
        return (
            "unsupported",
            f"{modules_for(pack, platform)[m]}'s vLLM module {m} does not import in this install ({err})",
        )
    if any(a.status == "patched" for a in answers) or not pack.native:
        files = ", ".join(f"{name}/{f.name}" for name, f in pack.patch_files)
        return "patched by pack", f"the ppspec plugin patches vLLM {version} on {platform} ({files}){lacks}"
    return "native", f"vLLM {version} handles it on {platform}{lacks}"


def import_errors_for(packs: list[Pack], installed: VllmInstall | None) -> dict[str, str | None]:
    if installed is None:
        return {}
    modules = [
        m
        for p in packs
        if p.supports_vllm(verdict(installed.version).facts_version)
        for m in modules_for(p, installed.platform)
    ]
    return import_errors(modules)


#: A pack against the installed engine: verified (a verified release in the pack's range), probed
#: (unverified, but every patch anchor and native opt-in read by value matches and every patch applies
#: and passes its behaviour check), drifted (a patch's anchor moved: the plugin would refuse), refused
#: (a patch's behaviour check fails: the plugin would refuse), not probed (the read could not run),
#: not checked (no vLLM).
ENGINE_STATES = ("verified", "probed", "drifted", "refused", "not probed", "not checked")


_ANCHOR_CHILD = """
import json, sys
from ppspec_cli.knowledge import engine
from ppspec_cli.knowledge.packs import get_pack, inner_decoder_ref
from ppspec_cli.running.engine.plugin import load_patches
platform, facts_version = sys.argv[1], sys.argv[2]
out = {}
for name in sys.argv[3:]:
    try:
        pack = get_pack(name)
        rows = []
        patches = [p for part, f in pack.patch_files for p in load_patches(part, f)]
        for p in patches:
            state, why = p.anchor()
            rows.append([p.qualname, state, why])
        if patches and not any(r[1] == "drifted" for r in rows):
            # what the plugin does next at engine start: apply, verify by value with each
            # behaviour check, then (here) revert; a failure is the plugin's refusal
            done = []
            try:
                for p in patches:
                    p.apply()
                    done.append(p)
                for p in patches:
                    try:
                        p.verify()
                    except Exception as e:
                        rows.append([p.qualname, "refused", (type(e).__name__ + ": " + str(e))[:400]])
                        break
            except Exception as e:
                rows.append([p.qualname, "refused", (type(e).__name__ + ": " + str(e))[:400]])
            finally:
                for p in reversed(done):
                    p.revert()
        for part in pack.parts:
            # a native opt-in the pack's table claims here must be there, by value
            claim = part.supports("aux_relay_over_pp", platform, facts_version).status
            if part.patches_path is not None or claim != "native":
                continue
            refs = []
            for arch in dict.fromkeys([*part.facts.inner_decoder, *part.matches.targets]):
                ref = inner_decoder_ref(part, arch, platform, facts_version)
                if ref and ref not in refs:
                    refs.append(ref)
            for ref in refs:
                    if ref:
                        try:
                            got = "native" if engine.relays_taps(engine.import_ref(ref)) else "lacks"
                            rows.append([ref, got, "supports_aux_hidden_states_over_pp"])
                        except Exception as e:
                            rows.append([ref, "absent", (type(e).__name__ + ": " + str(e))[:200]])
        out[name] = rows
    except BaseException as e:
        out[name] = (type(e).__name__ + ": " + str(e))[:300]
sys.stdout.write("PPSPEC-ANCHORS " + json.dumps(out))
"""


def probe_anchors(packs: list[Pack], platform: str, facts_version: str) -> dict[str, Any]:
    """Each pack's patch anchors (Patch.anchor) and native opt-ins, read in a child interpreter of
    this install (importing vLLM takes seconds; this process never does). name -> rows or error."""
    if not packs:
        return {}
    try:
        cp = spawn.run(
            spawn.python_argv("-c", _ANCHOR_CHILD, platform, facts_version, *[p.name for p in packs]),
            capture_output=True,
            text=True,
            timeout=IMPORT_CHECK_DEADLINE_S,
        )
        line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("PPSPEC-ANCHORS ")), None)
        return (
            json.loads(line.split(" ", 1)[1])
            if line
            else {p.name: f"the anchor read did not finish (exit {cp.returncode})" for p in packs}
        )
    except (OSError, spawn.TimeoutExpired, ValueError) as e:
        return {p.name: f"the anchor read could not run ({type(e).__name__})" for p in packs}


def engine_state(pack: Pack, installed: VllmInstall | None, anchors: dict[str, Any] | None) -> tuple[str, str]:
    """(state, detail) of a pack against the installed engine (ENGINE_STATES)."""
    if installed is None:
        return "not checked", "vLLM is not installed here"
    vv = verdict(installed.version)
    if vv.verified and pack.supports_vllm(installed.version):
        return "verified", f"vLLM {installed.version} is a verified release in the pack's range {pack.vllm_range}"
    got = (anchors or {}).get(pack.name)
    if got is None:
        return (
            "not probed",
            f"vLLM {installed.version} is outside the pack's verified range {pack.vllm_range}; run `ppspec adapters "
            "list` again to read its anchors",
        )
    if isinstance(got, str):
        return "not probed", got
    drifted = [r for r in got if r[1] in ("drifted", "lacks")]
    if drifted:
        return "drifted", "; ".join(f"{q}: {why if r == 'drifted' else 'does not set ' + why}" for q, r, why in drifted)
    refused = [r for r in got if r[1] == "refused"]
    if refused:
        return "refused", "; ".join(f"{q}: {why}" for q, _, why in refused) + " (the plugin refuses this engine)"
    native = [q for q, r, _ in got if r == "native"]
    applies = [q for q, r, _ in got if r == "matches"]
    parts = []
    if applies:
        parts.append(f"anchors match and behaviour checks pass: {', '.join(applies)}")
    if native:
        parts.append(f"vLLM {installed.version} already does it: {', '.join(native)}")
    absent = [f"{q} ({why})" for q, r, why in got if r == "absent"]
    if absent:
        parts.append(f"not importable here: {'; '.join(absent)}")
    return (
        "probed",
        f"vLLM {installed.version} is unverified ({vv.why if not vv.verified else 'outside ' + pack.vllm_range}); "
        "read by value: " + ("; ".join(parts) or "nothing to patch"),
    )


def needs_anchor_read(pack: Pack, installed: VllmInstall | None) -> bool:
    return installed is not None and not (verdict(installed.version).verified and pack.supports_vllm(installed.version))


def pack_record(
    pack: Pack,
    installed: VllmInstall | None,
    import_errs: dict[str, str | None] | None = None,
    anchors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status, why = pack_status(pack, installed, import_errs)
    state, detail = engine_state(pack, installed, anchors)
    rec = pack.to_json()
    rec.update({"status": status, "status_detail": why, "engine": state, "engine_detail": detail})
    rec.update(proof(pack))
    if installed is not None:
        vv = verdict(installed.version)
        rec["installed_vllm"] = {
            "version": installed.version,
            "platform": installed.platform,
            "verified": vv.verified,
            "facts_version": vv.facts_version,
        }
    return rec


def proof(pack: Pack) -> dict[str, Any]:
    """`proof`: per release, {state, detail} of each part on that release's source; `proof_summary`:
    one line ('proven on 0.30-0.34 source', else what was not and why)."""
    from ppspec_cli.knowledge import packproofs

    def summary(p: Pack) -> str:
        if p.source != "built-in":
            return f"not proven by ppspec: its proofs cover the built-in packs (this one is from {p.source})"
        return packproofs.summary(p.name)

    def record(p: Pack) -> dict[str, Any]:
        return packproofs.record(p.name) if p.source == "built-in" else {}

    if len(pack.parts) == 1:
        return {"proof": record(pack), "proof_summary": summary(pack)}
    return {
        "proof": {p.name: record(p) for p in pack.parts},
        "proof_summary": "; ".join(f"{p.name}: {summary(p)}" for p in pack.parts),
    }


def proven_on(record: dict[str, Any]) -> str:
    """The releases on whose source the pack was proven (tools/prove_packs.py), short: '0.30-0.34', 'none'."""
    from ppspec_cli.knowledge.packproofs import series

    got = [v for v, o in (record.get("proof") or {}).items() if o.get("state") == "proven"]
    return series(got) if got else "none"


def judged_install(installed: VllmInstall | None) -> tuple[VllmInstall, str]:
    """The vLLM a pack's status is judged against, and the header's words for it: the installed
    one; on a machine without vLLM (a login node) the newest verified release for cuda, as `check`
    judges a profile that names no engine_version there."""
    from ppspec_cli.knowledge.versions import NEWEST_VERIFIED

    if installed is not None:
        v = "verified" if verdict(installed.version).verified else "unverified"
        return installed, f"vLLM {installed.version} ({installed.platform}, {v})"
    return (
        VllmInstall(NEWEST_VERIFIED, "vllm", "cuda"),
        f"vLLM {NEWEST_VERIFIED} (cuda), the newest verified release: no vLLM is installed here, so this is what "
        "`check` judges a profile against",
    )


def arch_table_records() -> list[dict[str, Any]]:
    """Per committed release, what its table covers and where it came from (the text's last block)."""
    from ppspec_cli.knowledge import archtable, drafterfacts

    return [
        {**t.summary(), **drafterfacts.coverage(t)}
        for v in archtable.committed_versions()
        if (t := archtable.committed(v)) is not None
    ]


def engine_arch_table(installed: VllmInstall | None) -> dict[str, Any] | None:
    """The table verdicts on the installed engine use: a verified release's committed table, else
    the installed source read by value (cached per install); None without an installed vLLM."""
    if installed is None:
        return None
    from ppspec_cli.knowledge import archtable, drafterfacts

    v = verdict(installed.version)
    try:
        engine: archtable.ArchTable | Exception | None = archtable.engine_table(installed)
    except Exception as e:  # noqa: BLE001 - a fork's source the scanner cannot read: the committed table says so
        engine = e
    t = archtable.pick(installed.platform, installed, v.facts_version, engine)
    return {**t.summary(), **drafterfacts.coverage(t)} if t is not None else None


def packs_covering(arch: str) -> list[tuple[Pack, str]]:
    """(pack, "target" | "drafter") for every pack that names architecture `arch` (exact name first;
    else a case-insensitive match), as `adapter: auto` matches them."""
    for same in (lambda a, b: a == b, lambda a, b: a.lower() == b.lower()):
        got = [
            (p, role)
            for p in load_packs()
            for role, names in (("target", p.matches.targets), ("drafter", p.matches.drafters))
            if any(same(n, arch) for n in names)
        ]
        if got:
            return got
    return []


def arch_known(name: str) -> bool:
    from ppspec_cli.knowledge import archtable

    return any((t := archtable.committed(v)) is not None and t.registers(name) for v in archtable.committed_versions())


def records(installed: VllmInstall | None) -> list[dict[str, Any]]:
    """Every pack's record against the installed vLLM (status, engine state): the import check
    and, for packs outside a verified release, the anchor read (both in child interpreters)."""
    packs = load_packs()
    errs = import_errors_for(packs, installed)
    anchors = (
        probe_anchors(
            [p for p in packs if needs_anchor_read(p, installed)],
            installed.platform,
            verdict(installed.version).facts_version,
        )
        if installed
        else {}
    )
    out = [pack_record(p, installed, errs, anchors) for p in packs]
    if installed is None:  # the status as on the newest verified release; the engine state stays "not checked"
        judged, _ = judged_install(None)
        for rec, p in zip(out, packs):
            rec["status"], rec["status_detail"] = pack_status(p, judged, {})
            rec["judged_for"] = {"version": judged.version, "platform": judged.platform, "installed": False}
    return out
