"""`ppspec adapters list|show`: the packs, what they match and provide, and their status against
the installed vLLM (status, engine state and proof: knowledge/packstatus.py), rendered: one line
per pack by default, every pack in full with `--details`.
"""

from __future__ import annotations

import json
from typing import Any

from ppspec_cli.errors import EXIT_OK, PpspecError
from ppspec_cli.knowledge import packstatus
from ppspec_cli.knowledge.engine import installed_vllm
from ppspec_cli.knowledge.packs import CAPABILITIES, Pack, get_pack, load_packs, pack_rules, table_lines
from ppspec_cli.knowledge.versions import verdict


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
    for part in pack.parts:
        if part.rules_path is None:
            continue
        try:
            _rules, codes = pack_rules(part)
        except Exception as e:  # a broken rules file is shown, not a crash of `adapters show`
            rows.append(f"rules file of {part.name} does not load ({type(e).__name__}: {e})")
            continue
        rows += [f"{c.code} ({'/'.join(c.severities)}): {c.cause}" for c in codes]
    return "\n".join(rows)


def _console() -> Any:
    from ppspec_cli.io import terminal

    return terminal.console(soft_wrap=False)


def adapters_list(json_out: bool, details: bool = False) -> int:
    """Print every pack, one line each (details: every pack's status, engine, matches, then the
    per-release architecture tables), or one JSON object: packs, arch_tables, engine_arch_table. Exit code 0."""
    installed = installed_vllm()
    _judged, where = packstatus.judged_install(installed)
    records = packstatus.records(installed)
    if json_out:
        print(
            json.dumps(
                {
                    "packs": records,
                    "arch_tables": packstatus.arch_table_records(),
                    "engine_arch_table": packstatus.engine_arch_table(installed),
                },
                indent=2,
            )
        )
        return EXIT_OK
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
    return EXIT_OK


def _list_brief(records: list[dict[str, Any]], where: str) -> int:
    """One line per pack: name, status, engine state, the releases it is proven on, what it covers
    (a name when it fits)."""
    from ppspec_cli.io.terminal import plain, print_par, styled

    c = _console()
    print_par(c, styled("[bold]Adapter packs[/bold]: status against {}", where), hang=2)
    name_w = max(len(r["name"]) for r in records)
    status_w = max(len("status"), *(len(r["status"]) for r in records))
    engine_w = max(len("engine"), *(len(r["engine"]) for r in records))
    proven = {r["name"]: packstatus.proven_on(r) for r in records}
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
    return EXIT_OK


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


def adapters_show(name: str, json_out: bool) -> int:
    """Print one pack in full; NAME may also be an architecture (`Qwen3MoeForCausalLM`): then the
    pack(s) that cover it, each in full. Neither: PpspecError listing the known packs."""
    try:
        get_pack(name)
    except PpspecError:
        covering = packstatus.packs_covering(name)
        if not covering and packstatus.arch_known(name):
            return _show_arch(name, json_out)
        if not covering:
            names = ", ".join(sorted(p.name for p in load_packs()))
            raise PpspecError(
                f"unknown adapter pack {name[:80]!r}, and no pack covers an architecture of that name",
                where="NAME",
                fix=f"use a pack name ({names}) or an architecture from `ppspec adapters list`; an architecture no "
                "pack names runs under PP "
                "only where vLLM supports it natively (`ppspec check PROFILE` says)",
            ) from None
        if json_out:
            installed = installed_vllm()
            packs = [p for p, _ in covering]
            errs = packstatus.import_errors_for(packs, installed)
            print(
                json.dumps(
                    {
                        "architecture": name,
                        "packs": [
                            {**packstatus.pack_record(p, installed, errs), "covers_as": role} for p, role in covering
                        ],
                    },
                    indent=2,
                )
            )
            return EXIT_OK
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
        return EXIT_OK
    return _show(name, json_out)


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
        return EXIT_OK
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
                    f"{f['class']}; SupportsEagle3 {f.get('supports_eagle3')}; decoder {f.get('decoder')}; relays "
                    "taps over PP: "
                    f"{_RELAY_WORDS.get(f['relay_verdict'], f['relay_verdict'])}; embedding on the last stage: "
                    f"{f.get('embed_last_stage')}"
                )
            else:
                text = (
                    f"{f['class']}; draft layer numbering {f.get('numbering')}; fc "
                    f"{(f.get('fc') or {}).get('rule')}; MTP layers {f.get('mtp_layers')}"
                ) + drafterfacts.describe_class(f)
            print_wrapped(c, plain(text), indent=12, label=f"  {plat}")
    return EXIT_OK


def _show(name: str, json_out: bool) -> int:
    pack = get_pack(name)
    installed = installed_vllm()
    anchors = (
        packstatus.probe_anchors([pack], installed.platform, verdict(installed.version).facts_version)
        if installed and packstatus.needs_anchor_read(pack, installed)
        else {}
    )
    rec = packstatus.pack_record(pack, installed, packstatus.import_errors_for([pack], installed), anchors)
    if json_out:
        print(json.dumps(rec, indent=2))
        return EXIT_OK
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
    return EXIT_OK
