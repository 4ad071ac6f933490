"""`ppspec adapters list|show`: the packs, what they match and provide, and their status against
the installed vLLM. Reads package metadata only (no vLLM import), so it answers in well under a second.

Status:
- native: the installed vLLM handles the family itself (pack has no patches);
- patched by pack: the installed vLLM needs the pack's patches, which the plugin applies;
- unsupported: the installed vLLM is outside the pack's version range, or the implementation this
  platform loads does not opt in and the pack has no patch for it;
- not checked: no vLLM installed here.
"""

from __future__ import annotations

import json
from typing import Any

from ..packs import CAPABILITIES, Pack, get_pack, load_packs
from .probes import installed_vllm

STATUSES = ("native", "patched by pack", "unsupported", "not checked")


def pack_status(pack: Pack, installed: tuple[str, str] | None) -> tuple[str, str]:
    """(status, why) of a pack against an installed vLLM (version, platform), from the pack's own
    support tables (`Pack.supports`)."""
    if installed is None:
        return "not checked", "vLLM is not installed here"
    version, platform = installed
    if not pack.supports_vllm(version):
        return "unsupported", f"vLLM {version} is outside {pack.vllm_range}"
    answers = [pack.supports(cap, platform, version) for cap in dict.fromkeys(c for p in pack.parts for c in p.capabilities)]
    bad = [a for a in answers if a.status == "unsupported"]
    if bad:
        return "unsupported", "; ".join(f"{a.capability}: {a.reason}" for a in bad)
    if any(a.status == "patched" for a in answers) or not pack.native:
        files = ", ".join(f"{name}/{f.name}" for name, f in pack.patch_files)
        return "patched by pack", f"the ppspec plugin patches vLLM {version} on {platform} ({files})"
    return "native", f"vLLM {version} handles it on {platform}"


def pack_record(pack: Pack, installed: tuple[str, str] | None) -> dict[str, Any]:
    status, why = pack_status(pack, installed)
    rec = pack.to_json()
    rec.update({"status": status, "status_detail": why})
    if installed is not None:
        rec["installed_vllm"] = {"version": installed[0], "platform": installed[1]}
    return rec


def _matches_text(pack: Pack) -> str:
    parts = []
    for label, names in (("targets", pack.matches.targets), ("drafters", pack.matches.drafters), ("methods", pack.matches.methods)):
        if names:
            parts.append(f"{label}:\n" + "\n".join(f"  {n}" for n in names))
    return "\n".join(parts) or "(anything)"


def _console() -> Any:
    from rich.console import Console

    return Console(soft_wrap=False)


def adapters_list(json_out: bool) -> int:
    """Print every pack (table, or a JSON list with name/matches/provides/status...). Exit code 0."""
    installed = installed_vllm()
    records = [pack_record(p, installed) for p in load_packs()]
    if json_out:
        print(json.dumps(records, indent=2))
        return 0
    where = f"vLLM {installed[0]} ({installed[1]})" if installed else "no vLLM installed"
    # One block per pack, not a table: class names are up to ~40 characters, and five columns of
    # them cannot fit 80 columns (or a pipe) without breaking names mid-word. Lists are joined with
    # ", " so they wrap between names; wrapped lines keep the value column's indentation.
    from rich.markup import escape

    from ..render import print_wrapped

    colors = {"native": "green", "patched by pack": "cyan", "unsupported": "red", "not checked": "yellow"}
    packs = {p.name: p for p in load_packs()}
    c = _console()
    c.print(f"[bold]Adapter packs[/bold] — status against {escape(where)}", highlight=False)
    for rec in records:
        p = packs[rec["name"]]
        c.print()
        c.print(f"[bold]{escape(p.name)}[/bold]", highlight=False)
        print_wrapped(c, f"[{colors[rec['status']]}]{rec['status']}[/]: {escape(rec['status_detail'])}", indent=12, label="  status")
        for label, names in (("targets", p.matches.targets), ("drafters", p.matches.drafters), ("methods", p.matches.methods)):
            if names:
                print_wrapped(c, escape(", ".join(names)), indent=12, label=f"  {label}")
        print_wrapped(c, escape(", ".join(p.provides) or "nothing (describes the family only)"), indent=12, label="  provides")
        print_wrapped(c, escape(p.vllm_range), indent=12, label="  vLLM")
    return 0


def adapters_show(name: str, json_out: bool) -> int:
    """Print one pack in full. Unknown name: PpspecError listing the known ones."""
    pack = get_pack(name)
    installed = installed_vllm()
    rec = pack_record(pack, installed)
    if json_out:
        print(json.dumps(rec, indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    c = _console()
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row("pack", f"{pack.name} ({pack.source})")
    t.add_row("", pack.description)
    t.add_row("matches", _matches_text(pack))
    t.add_row("vLLM range", pack.vllm_range)
    t.add_row("status", f"{rec['status']}: {rec['status_detail']}")
    t.add_row("provides", "\n".join(f"{cap}: {CAPABILITIES[cap]}" for cap in pack.provides))
    patches = [str(f) for _, f in pack.patch_files]
    t.add_row("patches", "\n".join(patches) if patches else "none (native)")
    f = pack.facts
    if f.inner_decoder:
        t.add_row(
            "inner decoder",
            "\n".join(f"{arch}: " + ", ".join(f"{platform}={ref}" for platform, ref in per.items()) for arch, per in f.inner_decoder.items()),
        )
    if f.inner_decoder_path:
        t.add_row("decoder path", "\n".join(f"{arch}: {path}" for arch, path in f.inner_decoder_path.items()))
    for part in pack.parts:
        for cap, lines in part.capabilities.items():
            rows = [f"{'/'.join(x.platforms)}{' vLLM ' + x.vllm if x.vllm else ''}: {x.status}" + (f" ({x.reason})" if x.reason else "") for x in lines]
            t.add_row(cap, escape("\n".join(rows)))
    if f.embedding_tensors:
        t.add_row("embedding tensors", ", ".join(f.embedding_tensors))
    if f.name_mapping:
        t.add_row("name mapping", "\n".join(f"{k} -> {v}" for k, v in f.name_mapping.items()))
    if f.text_config_key:
        t.add_row("text config", f.text_config_key)
    t.add_row("tap convention", f.tap_convention)
    if f.installed_vllm:
        t.add_row("found in vLLM", f.installed_vllm)
    for n in f.notes:
        t.add_row("note", n)
    c.print(t)
    return 0


__all__ = ["adapters_list", "adapters_show", "pack_status", "pack_record", "STATUSES"]
