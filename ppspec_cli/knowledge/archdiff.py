"""Two releases' architecture tables compared: what the generator lost (`losses`: a check, class,
fact or section the previous release's table had and this one lacks, each needing a reviewed,
committed acknowledgement) and what changed at the level of verdicts (`changes`: the answers
ppspec gives, with the file:line behind each side; moved lines are not changes).

Used by tools/vllm_arch_facts.py (the generator refuses to lose a fact quietly; `--diff` writes the
per-release page docs/releases/vllm-X.md) and by tests/test_arch_table.py (every committed table's
losses against its predecessor are acknowledged). Nothing here imports vLLM."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppspec_cli.knowledge import archtable
from ppspec_cli.knowledge.methods.eagle3 import EAGLE3

#: The method whose drafter-load verdict the comparison follows (the taps-reading drafter ppspec plans first).
_METHOD = EAGLE3.name

#: Where the reviewed acknowledgements live: one YAML file per release (`vllm-X.yaml`).
ACK_DIR = archtable.TABLE_DIR / "acks"

#: The per-platform facts whose loss (decided before, undecided now) the generator reports.
_FACTS = ("decoder", "target_model", "model_embed", "supports_pp", "supports_eagle3")
_DRAFTER_FACTS = ("numbering", "fc", "mtp_layers")
#: Top-level sections that must not go from non-empty to empty.
SECTIONS = ("checks", "mtp_rewrites", "runners", "config_hooks", "removed", "speculators_refused", "target_embed")


@dataclass(frozen=True)
class Loss:
    key: str  # stable across regenerations ("check:drafter_needs_target_embed", "class:Step5ForCausalLM@cuda")
    what: str  # one line for a human, with the old file:line


def _per_platform(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for plats, facts in (entry.get("platforms") or {}).items():
        for p in plats.split(","):
            out[p] = facts
    return out


def embed_decided(f: dict[str, Any]) -> bool:
    """The last-stage embedding is decided (a value, a config rule, not needed, or a language model
    the checkpoint's config names)."""
    return (
        f.get("embed_last_stage") is not None
        or bool(f.get("embed_rule"))
        or bool(f.get("embed_not_needed"))
        or bool(f.get("language_model_from"))
    )


def relay_decided(f: dict[str, Any]) -> bool:
    return bool(f.get("language_model_from")) or archtable.relay_verdict(f)[0] != "unknown"


def losses(old: dict[str, Any], new: dict[str, Any]) -> list[Loss]:
    """What `new` (a release's table) no longer says that `old` (the previous release's) did."""
    out: list[Loss] = []
    for sec in SECTIONS:
        if old.get(sec) and not new.get(sec):
            out.append(Loss(f"section:{sec}", f"the table's {sec} section is empty (it had {len(old[sec])} entries)"))
    for k, at in sorted((old.get("checks") or {}).items()):
        if k not in (new.get("checks") or {}):
            out.append(Loss(f"check:{k}", f"engine check {k} is gone (was {at})"))
    for group, fact_keys in (("targets", _FACTS), ("drafters", _DRAFTER_FACTS)):
        for arch, e in sorted((old.get(group) or {}).items()):
            ne = (new.get(group) or {}).get(arch)
            if ne is None:
                gone = (new.get("removed") or {}).get(arch)
                why = (
                    f"vLLM lists it as supported until {gone['until']} ({gone['at']})"
                    if gone
                    else "not registered any more"
                )
                out.append(Loss(f"arch:{arch}", f"{group[:-1]} {arch} ({e.get('registry')}) is gone: {why}"))
                continue
            op, np_ = _per_platform(e), _per_platform(ne)
            for p, f in sorted(op.items()):
                out += _platform_losses(arch, p, f, np_.get(p) or {}, fact_keys, old, new, group == "targets")
    out += _runner_losses(old.get("runners") or {}, new.get("runners") or {})
    for arch, h in sorted((old.get("config_hooks") or {}).items()):
        if arch not in (new.get("config_hooks") or {}) and arch in (new.get("targets") or {}) | (
            new.get("drafters") or {}
        ):
            out.append(
                Loss(
                    f"hook:{arch}",
                    f"{arch}'s config hook {h.get('hook')} ({h.get('at')}) no longer refuses anything read",
                )
            )
    for kind in ("model_type", "architecture"):
        for k, v in sorted(((old.get("mtp_rewrites") or {}).get(kind) or {}).items()):
            if k not in ((new.get("mtp_rewrites") or {}).get(kind) or {}):
                out.append(Loss(f"mtp-rewrite:{kind}:{k}", f"`method: mtp` no longer rewrites {kind} {k} (was {v})"))
    return out


def _platform_losses(
    arch: str,
    p: str,
    f: dict[str, Any],
    g: dict[str, Any],
    fact_keys: tuple[str, ...],
    old: dict[str, Any],
    new: dict[str, Any],
    target: bool,
) -> list[Loss]:
    """One architecture on one platform: its class, then its facts (a class that changed is judged
    by its verdicts, not by its parts)."""
    if f.get("class") and not g.get("class"):
        return [
            Loss(
                f"class:{arch}@{p}",
                f"{arch} on {p}: class {f['class']} ({f.get('at')}) cannot be read: {g.get('why', '')}",
            )
        ]
    if not g.get("class"):
        return []
    out = []
    for k in fact_keys:
        if k in ("decoder", "model_embed") and f.get("class") != g.get("class"):
            continue
        if f.get(k) is not None and g.get(k) is None and not (k == "decoder" and g.get("language_model_from")):
            out.append(
                Loss(
                    f"fact:{arch}@{p}:{k}",
                    f"{arch} on {p}: {k} was {_short(f.get(k))} ({f.get(k + '_at') or f.get('at')}), now unread",
                )
            )
    if not target:
        return out
    if f.get("supports_pp") and embed_decided(f) and not embed_decided(g):
        out.append(
            Loss(
                f"fact:{arch}@{p}:embed",
                f"{arch} on {p}: its last-stage embedding was decided ({_embed_text(f)}), now unknown: "
                f"{g.get('embed_why', '')}",
            )
        )
    if f.get("supports_eagle3") and relay_decided(f) and not relay_decided(g):
        out.append(
            Loss(
                f"fact:{arch}@{p}:relay",
                f"{arch} on {p}: its tap relay over PP was decided ({archtable.relay_verdict(f)[0]}), now unknown",
            )
        )
    a = archtable.drafter_load_verdict(f, old.get("checks") or {}, 1, _METHOD, _runner_of(old, p))[0]
    b = archtable.drafter_load_verdict(g, new.get("checks") or {}, 1, _METHOD, _runner_of(new, p))[0]
    if a != "unknown" and b == "unknown":
        out.append(
            Loss(
                f"fact:{arch}@{p}:drafter-load",
                f"{arch} on {p}: whether vLLM loads an {_METHOD} drafter on it was decided ({a}), now unknown",
            )
        )
    return out


def _runner_losses(orun: dict[str, Any], nrun: dict[str, Any]) -> list[Loss]:
    out = []
    for k, at in sorted((orun.get("classes") or {}).items()):
        if k not in (nrun.get("classes") or {}):
            out.append(Loss(f"runner:{k}", f"model runner {k} is gone (was {at})"))
    for p, e in sorted((orun.get("platforms") or {}).items()):
        if e.get("runner") and not ((nrun.get("platforms") or {}).get(p) or {}).get("runner"):
            out.append(
                Loss(
                    f"runner-platform:{p}",
                    f"the runner of platform {p} was {e['runner']} ({e.get('worker_at')}), now unread",
                )
            )
    for k, at in sorted((orun.get("relays_taps") or {}).items()):
        if at and k in (nrun.get("classes") or {}) and not (nrun.get("relays_taps") or {}).get(k):
            out.append(
                Loss(f"runner-fact:relays_taps.{k}", f"runner {k} relayed taps over PP ({at}); that is no longer read")
            )
    for sec in ("v1_refuses_methods", "v2_lacks_methods"):  # a method list that changes is a change, not a loss
        if orun.get(sec) and not nrun.get(sec):
            out.append(Loss(f"runner-fact:{sec}", f"runner fact {sec} is gone (was {_short(orun[sec])})"))
    for sec in ("v2_selection", "dynamic_sd", "cpu_standalone"):
        for k, v in sorted((orun.get(sec) or {}).items()):
            if k not in (nrun.get(sec) or {}):
                out.append(Loss(f"runner-fact:{sec}.{k}", f"runner fact {sec}.{k} is gone (was {_short(v)})"))
    return out


def _short(v: Any) -> str:
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _embed_text(f: dict[str, Any]) -> str:
    if f.get("embed_last_stage") is not None:
        return f"{'builds' if f['embed_last_stage'] else 'does not build'} it ({f.get('embed_at')})"
    if f.get("embed_rule"):
        return f"follows {f['embed_rule'].get('config_flag')} ({f['embed_rule'].get('at')})"
    if f.get("embed_not_needed"):
        return "not needed: no `.model`"
    return "from the checkpoint's language model"


# ---------------------------------------------------------------------------------------------
# Acknowledgements


def ack_file(version: str) -> Path:
    return ACK_DIR / f"vllm-{version}.yaml"


def acknowledged(version: str) -> dict[str, str]:
    """key -> why, from the release's committed acknowledgement file (empty when there is none).
    The file: `acknowledged: [{key: K, why: W} | {keys: [K, ...], why: W}, ...]`; every entry needs
    a `why`."""
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.io import safeio, yamlload

    path = ack_file(version)
    if not path.is_file():
        return {}
    text = safeio.read_text(path, limit=1 << 20, what="release acknowledgement file")
    doc = (
        yamlload.load(text, what="release acknowledgement file", source=str(path), max_nodes=20000, max_bytes=1 << 20)
        or {}
    )
    out: dict[str, str] = {}
    for e in doc.get("acknowledged") or [] if isinstance(doc, dict) else []:
        why = str(e.get("why") or "").strip() if isinstance(e, dict) else ""
        if not why:
            raise PpspecError(
                f"an acknowledgement without `why` ({str(e)[:80]})",
                where=str(path),
                fix="say why the loss is expected (which vLLM change, with its file:line)",
            )
        for k in [e["key"]] if "key" in e else list(e.get("keys") or []):
            out[str(k)] = why
    return out


def unacknowledged(found: list[Loss], acks: dict[str, str]) -> list[Loss]:
    return [x for x in found if x.key not in acks]


# ---------------------------------------------------------------------------------------------
# Verdict-level changes


def _runner_of(doc: dict[str, Any], platform: str) -> str:
    return (((doc.get("runners") or {}).get("platforms") or {}).get(platform) or {}).get("runner") or (
        "v1" if platform == "cpu" else "v2"
    )


def target_verdicts(doc: dict[str, Any], f: dict[str, Any], platform: str) -> dict[str, tuple[str, str]]:
    """The answers ppspec gives for one architecture on one platform, each (value, where)."""
    if not f.get("class"):
        return {"class": ("none on this platform", f.get("why", ""))}
    checks = doc.get("checks") or {}
    out: dict[str, tuple[str, str]] = {"class": (f["class"].rsplit(".", 1)[-1], f.get("at", ""))}
    out["PP"] = (
        ("allowed", f.get("at", ""))
        if f.get("supports_pp")
        else ("refused: not SupportsPP", checks.get("pp_needs_supports_pp", f.get("at", "")))
    )
    out["EAGLE3 interface"] = ("yes" if f.get("supports_eagle3") else "no", f.get("at", ""))
    if f.get("supports_pp") and f.get("supports_eagle3"):
        if f.get("language_model_from"):
            out["taps over PP"] = ("per checkpoint (its language model)", f.get("decoder_at", ""))
        else:
            st, _ = archtable.relay_verdict(f)
            rl = f.get("relay") or {}
            out["taps over PP"] = (st, rl.get("opt_in_at") or rl.get("forward_at") or f.get("decoder_at") or "")
    if f.get("supports_pp"):
        if f.get("embed_last_stage") is not None:
            out["last-stage embedding"] = (
                "builds" if f["embed_last_stage"] else "does not build",
                f.get("embed_at", ""),
            )
        elif f.get("embed_rule"):
            out["last-stage embedding"] = (
                f"follows {f['embed_rule'].get('config_flag')}",
                f["embed_rule"].get("at", ""),
            )
        elif f.get("embed_not_needed"):
            out["last-stage embedding"] = ("not needed (no `.model`)", f.get("target_model_at", ""))
        elif f.get("language_model_from"):
            out["last-stage embedding"] = ("per checkpoint", f.get("decoder_at", ""))
        else:
            out["last-stage embedding"] = ("unknown", "")
    runner = _runner_of(doc, platform)
    st, why = archtable.drafter_load_verdict(f, checks, 1, _METHOD, runner)
    out[f"{_METHOD} drafter load (PP=1)"] = (st, _at_in(why))
    return out


def _at_in(text: str) -> str:
    """The last `path.py:NNN` a reason names."""
    import re

    got = re.findall(r"(vllm/[\w/]+\.py:\d+)", text)
    return got[-1] if got else ""


def _hook_sig(r: dict[str, Any]) -> str:
    parts = []
    if r.get("pp"):
        parts.append("PP")
    if r.get("methods"):
        parts.append(f"methods {', '.join(r['methods'])}")
    elif r.get("only_methods"):
        parts.append(f"every method but {', '.join(r['only_methods'])}")
    elif r.get("aux_hidden_states"):
        parts.append("methods that read aux hidden states")
    elif r.get("speculation"):
        parts.append("speculative decoding")
    if r.get("when"):
        parts.append("when " + " and ".join(r["when"]))
    return " ".join(parts)


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The verdict-level changes from `old` to `new`, as markdown list items (tens, not thousands):
    runners, architectures added and removed, per-architecture answers that change (platforms with
    the same change folded), config hooks, drafter facts, engine checks."""
    nv = str(new.get("vllm_version"))
    lines: list[str] = []
    lines += _runner_changes(old, new)
    ot, nt = old.get("targets") or {}, new.get("targets") or {}
    removed = new.get("removed") or {}
    for arch in sorted(set(ot) - set(nt)):
        gone = removed.get(arch)
        lines.append(
            f"- **{arch} removed**: "
            + (
                f"vLLM {nv} refuses it as supported until {gone['until']} ({gone['at']})"
                if gone
                else f"not registered in {nv} (was {ot[arch].get('registry')})"
            )
            + "; check now says so as an error naming the release"
        )
    label = "drafter class"
    od, nd = old.get("drafters") or {}, new.get("drafters") or {}
    for arch in sorted(set(od) - set(nd)):
        lines.append(
            f"- **{label} {arch} removed** (was {od[arch].get('registry')}); a drafter declaring it is an error "
            f"naming {nv}"
        )
    for kind, e in sorted((new.get("speculators_refused") or {}).items()):
        if kind not in (old.get("speculators_refused") or {}):
            lines.append(f"- **speculators kind `{kind}` refused**: {e.get('message')} ({e.get('at')})")
    added_t = sorted(set(nt) - set(ot))
    if added_t:
        lines.append(
            f"- **{len(added_t)} architectures added**, decided like any other: "
            + ", ".join(_added(nt[a], a) for a in added_t)
        )
    added_d = sorted(set(nd) - set(od))
    if added_d:
        lines.append(f"- **{len(added_d)} drafter classes added**: " + ", ".join(added_d))
    for arch in sorted(set(ot) & set(nt)):
        lines += _arch_changes(arch, old, new, ot[arch], nt[arch])
    lines += _hook_changes(old, new)
    for arch in sorted(set(od) & set(nd)):
        lines += _drafter_changes(arch, od[arch], nd[arch])
    lines += _embed_rule_changes(old, new)
    oc, nc = old.get("checks") or {}, new.get("checks") or {}
    gone_checks = sorted(set(oc) - set(nc))
    if gone_checks:
        lines.append("- **engine checks gone**: " + ", ".join(f"`{k}` ({oc[k]})" for k in gone_checks))
    new_checks = sorted(set(nc) - set(oc))
    if new_checks:
        lines.append("- **engine checks added**: " + ", ".join(f"`{k}` ({nc[k]})" for k in new_checks))
    return lines


def _added(e: dict[str, Any], arch: str) -> str:
    per = _per_platform(e)
    f = per.get("cuda") or next(iter(per.values()), {})
    if not f.get("class"):
        return f"{arch} (no class on cuda)"
    bits = ["PP" if f.get("supports_pp") else "no PP"]
    if f.get("supports_pp") and f.get("language_model_from"):
        bits.append("taps over PP per checkpoint (its language model)")
    elif f.get("supports_pp") and f.get("supports_eagle3"):
        bits.append(f"taps over PP {archtable.relay_verdict(f)[0]}")
    return f"{arch} ({', '.join(bits)})"


def _fold(per: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p, text in per.items():
        out.setdefault(text, []).append(p)
    return out


def _arch_changes(
    arch: str, old: dict[str, Any], new: dict[str, Any], oe: dict[str, Any], ne: dict[str, Any]
) -> list[str]:
    """One line per group of platforms with the same changes. A class that only moved (same
    verdicts) is no change; where the platform's runner changed, the drafter-load verdict is
    summed up on the runner's line (`runner_moves`), not repeated per architecture."""
    op, np_ = _per_platform(oe), _per_platform(ne)
    per: dict[str, str] = {}
    for p in sorted(set(op) | set(np_)):
        a = target_verdicts(old, op.get(p) or {}, p)
        b = target_verdicts(new, np_.get(p) or {}, p)
        same_runner = _runner_of(old, p) == _runner_of(new, p)
        diffs = []
        for k in list(dict.fromkeys([*a, *b])):
            x, y = a.get(k), b.get(k)
            if (x[0] if x else None) == (y[0] if y else None) or (
                k.startswith(f"{_METHOD} drafter load") and not same_runner
            ):
                continue
            diffs.append(f"{k}: {_side(x)} -> {_side(y)}")
        if diffs and not all(d.startswith("class:") for d in diffs):
            per[p] = "; ".join(diffs)
    return [f"- {arch} [{','.join(ps)}]: {text}" for text, ps in _fold(per).items()]


def _side(v: tuple[str, str] | None) -> str:
    return "-" if v is None else f"{v[0]} ({v[1] or '-'})"


def runner_moves(old: dict[str, Any], new: dict[str, Any], platform: str) -> dict[str, list[str]]:
    """Where a platform's runner changed: the architectures whose eagle3 drafter-load verdict at
    PP = 1 moves, by 'old -> new'."""
    out: dict[str, list[str]] = {}
    for arch in sorted(set(old.get("targets") or {}) & set(new.get("targets") or {})):
        f = _per_platform(old["targets"][arch]).get(platform) or {}
        g = _per_platform(new["targets"][arch]).get(platform) or {}
        if not f.get("class") or not g.get("class"):
            continue
        a = archtable.drafter_load_verdict(f, old.get("checks") or {}, 1, _METHOD, _runner_of(old, platform))[0]
        b = archtable.drafter_load_verdict(g, new.get("checks") or {}, 1, _METHOD, _runner_of(new, platform))[0]
        if a != b:
            out.setdefault(f"{a} -> {b}", []).append(arch)
    return out


def _hook_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    oh, nh = old.get("config_hooks") or {}, new.get("config_hooks") or {}
    for arch in sorted(set(oh) | set(nh)):
        a = {_hook_sig(r): r.get("at") for r in (oh.get(arch) or {}).get("refuses", [])}
        b = {_hook_sig(r): r.get("at") for r in (nh.get(arch) or {}).get("refuses", [])}
        for s in sorted(set(b) - set(a)):
            out.append(f"- {arch}: vLLM's config hook now refuses {s} ({b[s]})")
        for s in sorted(set(a) - set(b)):
            out.append(f"- {arch}: vLLM's config hook no longer refuses {s} (was {a[s]})")
    return out


def _drafter_changes(arch: str, oe: dict[str, Any], ne: dict[str, Any]) -> list[str]:
    op, np_ = _per_platform(oe), _per_platform(ne)
    per: dict[str, str] = {}
    for p in sorted(set(op) | set(np_)):
        a, b = op.get(p) or {}, np_.get(p) or {}
        diffs = []
        if bool(a.get("class")) != bool(b.get("class")):
            diffs.append(f"class: {a.get('class') or 'none'} -> {b.get('class') or 'none'}")
        for k in ("numbering", "fc"):
            x, y = a.get(k), b.get(k)
            xv = x.get("rule") if isinstance(x, dict) else x
            yv = y.get("rule") if isinstance(y, dict) else y
            if xv != yv:
                diffs.append(f"{k}: {xv} ({a.get(k + '_at') or '-'}) -> {yv} ({b.get(k + '_at') or '-'})")
        xm, ym = a.get("mtp_layers") or {}, b.get("mtp_layers") or {}
        if (xm.get("keys"), xm.get("default")) != (ym.get("keys"), ym.get("default")):
            diffs.append(
                f"MTP layer count: {xm.get('keys')} default {xm.get('default')} ({xm.get('at', '-')}) -> "
                f"{ym.get('keys')} default {ym.get('default')} ({ym.get('at', '-')})"
            )
        if diffs:
            per[p] = "; ".join(diffs)
    return [f"- drafter {arch} [{','.join(ps)}]: {text}" for text, ps in _fold(per).items()]


def _runner_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    orun, nrun = old.get("runners") or {}, new.get("runners") or {}
    nv = new.get("vllm_version")
    for k in sorted(set(orun.get("classes") or {}) - set(nrun.get("classes") or {})):
        out.append(
            f"- **Model Runner {k.upper()} deleted** (was {(orun.get('classes') or {})[k]})"
            + (
                f"; `VLLM_USE_V2_MODEL_RUNNER` other than 1 is an error ({nrun['v1_env_error_at']})"
                if nrun.get("v1_env_error_at")
                else ""
            )
        )
    for p in sorted(set(orun.get("platforms") or {}) | set(nrun.get("platforms") or {})):
        a = ((orun.get("platforms") or {}).get(p) or {}).get("runner")
        b = ((nrun.get("platforms") or {}).get(p) or {}).get("runner")
        if a != b:
            e = (nrun.get("platforms") or {}).get(p) or {}
            extra = ""
            if p == "cpu" and (nrun.get("cpu_standalone") or {}).get("x86_needs_triton_at"):
                cs = nrun["cpu_standalone"]
                extra = (
                    f"; x86 needs triton-cpu ({cs['x86_needs_triton_at']}); a CPU without Triton gets the "
                    f"standalone runner ({cs.get('picked_at')}), which refuses speculative decoding "
                    f"({cs.get('refuses_speculation_at')})"
                )
            moves = runner_moves(old, new, p) if a and b else {}
            moved = "".join(
                f"; {_METHOD} drafter load at PP=1 {k}: {len(v)} ({', '.join(v[:6])}{', ...' if len(v) > 6 else ''})"
                for k, v in sorted(moves.items())
            )
            out.append(
                f"- **{p} runs {str(b).upper()}** (was {str(a).upper()}): {e.get('why', '')}{extra}. Rules that name "
                f"a runner follow (cpu-pp-taps, <method>-needs-v2, schedule warnings, drafter load){moved}"
            )
    for sec, label in (("v1_refuses_methods", "V1 refuses"), ("v2_lacks_methods", "V2 lacks (falls back to V1)")):
        a, b = orun.get(sec) or {}, nrun.get(sec) or {}
        for m in sorted(set(a) - set(b)):
            out.append(f"- {label} {m}: no longer (was {a[m]})")
        for m in sorted(set(b) - set(a)):
            out.append(f"- {label} {m} ({b[m]})")
    a, b = orun.get("dynamic_sd") or {}, nrun.get("dynamic_sd") or {}
    for k in sorted(set(a) | set(b)):
        if (a.get(k) is None) != (b.get(k) is None) or (isinstance(a.get(k), list) and a.get(k) != b.get(k)):
            out.append(
                f"- Dynamic SD `{k}`: {_short(a.get(k)) if a.get(k) is not None else '-'} -> "
                f"{_short(b.get(k)) if b.get(k) is not None else f'gone in {nv}'}"
            )
    return out


def _embed_rule_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    a, b = old.get("target_embed") or {}, new.get("target_embed") or {}
    if (a.get("methods"), a.get("reads")) == (b.get("methods"), b.get("reads")):
        return []

    def say(x: dict[str, Any]) -> str:
        if x.get("methods"):
            return (
                "methods "
                f"{', '.join(x['methods'])}"
                f"{' (+ mtp where the target opts in)' if x.get('mtp_when_target_opts_in') else ''} "
                f"({x.get('methods_at')})"
            )
        if x.get("reads"):
            return "reads " + " and ".join(f"`{r}` ({x.get(r + '_at')})" for r in x["reads"])
        return "-"

    return [f"- **last-stage target embedding** (`spec_decode_needs_target_embed`): {say(a)} -> {say(b)}"]
