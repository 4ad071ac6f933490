"""Terminal rendering of check results and plans (rich). Data in, text out: nothing here decides."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ppspec_cli.io import terminal
from ppspec_cli.io.terminal import safe, styled  # noqa: F401 - safe: for callers of render.safe
from ppspec_cli.knowledge import methods

Console = Any  # a terminal.console(): the only console ppspec prints through

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


SEVERITIES = ("error", "warning", "info")


def shown(findings, min_severity: str = "info") -> list:
    """The findings at `min_severity` or worse (error > warning > info)."""
    keep = SEVERITIES[: SEVERITIES.index(min_severity) + 1]
    return [f for f in findings if f.severity in keep]


def group_by_fix(findings) -> list[list]:
    """Findings of one severity with the same fix, together (in the order of the first of each
    group): `target-no-weights` and `drafter-no-weights` say one thing twice otherwise."""
    groups: dict[tuple, list] = {}
    for i, f in enumerate(findings):
        groups.setdefault((f.severity, f.hint) if f.hint else (i,), []).append(f)
    return list(groups.values())


def render_findings(console: Console, findings) -> None:
    """One block per finding: severity and code, the field, the message; the fix once per group
    of findings of one severity that share it."""
    if not findings:
        console.print(styled("[green]no findings[/green]"))
        return
    for group in group_by_fix(findings):
        for f in group:
            style = _SEV_STYLE[f.severity]
            console.print(
                styled(f"[{style}]{{:7}}[/] [bold]{{}}[/bold]  [dim]({{}})[/dim]", f.severity.upper(), f.code, f.field)
            )
            print_wrapped(console, terminal.plain(f.message))
        hint = group[0].hint
        if hint:
            label = "fix:" if len(group) == 1 else f"fix (the {len(group)} above):"
            print_wrapped(console, styled(f"[dim]{label}[/dim] {{}}", hint))


def print_wrapped(console: Console, text: Text, *, indent: int = 8, label: str = "") -> None:
    """A Text (terminal.styled / terminal.plain) wrapped at the console width between words, every line indented by
    `indent` columns
    (a wrapped line keeps the indentation; a label shorter than `indent` starts the first line).
    No trailing blanks, so piped output stays clean."""
    for i, line in enumerate(text.wrap(console, max(20, console.width - indent))):
        line.rstrip()
        console.print(Text(label.ljust(indent) if i == 0 else " " * indent) + line, soft_wrap=True)


def _engine_line(console: Console, r) -> None:
    p = r.profile
    topo = p.topology
    rest = (
        f"target {p.target.model}"
        + (f", drafter {p.drafter.method} {p.drafter.model or '(in-model)'}" if p.drafter else ", no drafter")
        + f"; TP{topo.tensor_parallel} x PP{topo.pipeline_parallel}"
        + (f" x DP{topo.data_parallel}" if topo.data_parallel > 1 else "")
        + f" on {topo.nodes} node(s); platform {r.platform} ({r.platform_source}), runner {r.runner.upper()}"
        + (f"; adapter {r.pack.name}" if r.pack is not None else "")
    )
    _wrapped(console, styled("[bold]{}[/bold]: {}", p.name, rest))


def render_check(pf, console: Console | None = None, min_severity: str = "warning") -> None:
    """One engine: what it is, which vLLM the verdict is for, the findings at `min_severity` or
    worse, the profile verdict, then what this machine says (only when it differs)."""
    console = console or terminal.console()
    r = pf.resolved
    _engine_line(console, r)
    _version_line(console, r)
    _render_verdict(console, list(pf.findings), min_severity)
    render_here(console, pf)


def _version_line(console: Console, r, prefix: str = "") -> None:
    vv = r.version_verdict
    unverified = (
        f"; unverified: vLLM {vv.facts_version}'s facts carried forward" if vv is not None and not vv.verified else ""
    )
    _wrapped(
        console,
        terminal.plain(
            f"{prefix}verdict for {r.platform}, vLLM {r.engine_version} ({r.engine_version_source}{unverified})"
        ),
    )


def render_here(console: Console, pf) -> None:
    """The `here` question as its own section, when its answer differs from the profile's: what
    `ppspec serve` would refuse on this machine, and the installed build; then this machine's own
    warnings (its view of a multi-node launch's network)."""
    known = set(pf.profile_verdict.refused)
    extra = [f for f in pf.here_verdict.refused if f not in known]
    notes = [f for f in pf.here if f.severity == "warning" and f not in extra]
    if extra:
        _refused_here(console, pf, extra)
    if notes:
        _wrapped(
            console,
            styled(
                "[bold yellow]on this machine[/bold yellow]: {} warning(s): {}",
                len(notes),
                ", ".join(f.code for f in notes),
            ),
        )
        for f in notes:
            print_wrapped(console, styled("{}: {}", f.code, f.message))


def _refused_here(console: Console, pf, extra) -> None:
    inst = next((r.installed for r in pf.engines if r.installed is not None), None)
    build = f"{inst.distribution} {inst.version} ({inst.platform} build)" if inst is not None else "vLLM not installed"
    _wrapped(
        console,
        styled(
            "[bold yellow]on this machine[/bold yellow]: `ppspec serve` would refuse: {}; {}",
            ", ".join(sorted({f.code for f in extra})),
            build,
        ),
    )
    for f in extra:
        print_wrapped(console, styled("{}: {}", f.code, f.message))


def _render_verdict(console: Console, findings, min_severity: str = "warning") -> None:
    """The findings at `min_severity` or worse, then the profile verdict over all of them (any error
    refuses), and how many were left out."""
    show = shown(findings, min_severity)
    if show or len(show) == len(findings):
        render_findings(console, show)
    n_err = sum(f.severity == "error" for f in findings)
    n_warn = sum(f.severity == "warning" for f in findings)
    n_info = sum(f.severity == "info" for f in findings)
    hidden = len(findings) - len(show)
    rest = f", {n_info} info" + (f" ({hidden} finding(s) not shown: --verbose shows all)" if hidden else "")
    if n_err:
        console.print(styled("[bold red]FAIL[/bold red]: {} error(s), {} warning(s){}", n_err, n_warn, rest))
    else:
        console.print(styled("[bold green]OK[/bold green]: 0 errors, {} warning(s){}", n_warn, rest))
    if n_err or n_warn:
        console.print(styled("[dim]every code, its cause and fix: `ppspec docs --findings` (docs/findings.md)[/dim]"))


def render_refusal(outcome, console: Console | None = None) -> int:
    """`serve` refusing to start here (an Outcome whose `here` verdict refuses): the reasons; its
    exit code (1)."""
    con = console or terminal.console(stderr=True)
    v = outcome.here_verdict
    _wrapped(
        con,
        styled(
            "[bold red]ppspec: refusing to launch {}[/bold red]: {} reason(s), which `ppspec check` reports too",
            outcome.resolved.profile.name,
            len(v.refused),
        ),
    )
    render_findings(con, list(v.refused))
    return outcome.exit_code


def _act_first(console: Console, pf, verbose: bool) -> None:
    """Under a plan: the verdict and what to act on first (the errors); `verbose`: every finding."""
    fs = list(pf.findings)
    if verbose:
        _render_verdict(console, fs, "info")
        render_here(console, pf)
        return
    errors = [f for f in fs if f.severity == "error"]
    n_warn = sum(f.severity == "warning" for f in fs)
    if errors:
        console.print(
            styled("[bold red]FAIL[/bold red]: `ppspec serve` would refuse this profile; act on these first:")
        )
        for f in errors:
            print_wrapped(console, styled("[bold red]{}[/bold red]: {}", f.code, f.message), indent=2)
    else:
        console.print(styled("[bold green]OK[/bold green]: no errors"))
    if n_warn or len(fs) > len(errors):
        _wrapped(
            console,
            styled(
                "[dim]{} warning(s), {} info: `ppspec check` (or `plan --verbose`) shows them[/dim]",
                n_warn,
                len(fs) - len(errors) - n_warn,
            ),
        )
    render_here(console, pf)


#: The plan table's tap columns (docs/guide.md: Reading the plan). Each holds tap ids.
PLAN_TAP_COLUMNS = ("taps made", "taps received", "sends to next stage")
PLAN_TAP_LEGEND = (
    "taps are vLLM capture points (tap L = the output of layer L-1; 0 = the embeddings). taps made: the ones this "
    "stage's layers produce; taps received: those arriving from earlier stages; sends to next stage: every tap "
    "made so far, relayed over the hop, and its size per token. weights: this stage's share of the checkpoint."
)


def _ids(taps) -> str:
    return ", ".join(map(str, taps)) if taps else "—"


def _plan_rows(r, plan, taps_shown: bool, mem=None) -> list[tuple[str, ...]]:
    """The plan table's cells, one tuple per stage, in the order of _plan_columns (`mem`: the memory plan,
    planning/memory_inputs.Memory: weights on one GPU and KV tokens per stage instead of the stage's weights)."""
    mp = mem.plan if mem is not None else None
    topo = r.profile.topology
    where = stage_placement(topo.tensor_parallel, len(plan.stages), topo.data_parallel, topo.nodes)
    rows = []
    for s in plan.stages:
        relay = (
            "—"
            if s.relay_out is None
            else f"{_ids(s.relay_out.taps)} ({_human_bytes(s.relay_out.bytes_per_token)}/token)"
        )
        holds = []
        if s.embedding == "first":
            holds.append("embedding")
        elif s.embedding == "drafter-needs":
            holds.append("embedding (for the drafter)")
        if s.lm_head:
            holds.append("lm_head")
        if s.drafter:
            holds.append("drafter")
        received = tuple(x for x in plan.taps if x <= s.layers[0]) if s.rank > 0 else ()
        tap_cells = (_ids(s.taps), _ids(received), relay) if taps_shown else ()
        node, devs = where[s.rank] if s.rank < len(where) else (None, [])
        rows.append(
            (
                str(s.rank),
                "?" if node is None else f"{node}, {_devices(r.platform, devs)}",
                f"{s.layers[0]}-{s.layers[1] - 1}" if s.layers[1] > s.layers[0] else "none",
                *tap_cells,
                ", ".join(holds) or "—",
                *(
                    (_human_bytes(s.weight_bytes),)
                    if mp is None
                    else (
                        _human_bytes(mp.stages[s.rank].weights),
                        "—" if mp.stages[s.rank].tokens is None else f"{mp.stages[s.rank].tokens:,}",
                    )
                ),
            )
        )
    return rows


def _plan_columns(taps_shown: bool, memory: bool = False) -> tuple[str, ...]:
    tail = ("weights/GPU", "KV tokens") if memory else ("weights",)
    return ("stage", "node", "layers", *(PLAN_TAP_COLUMNS if taps_shown else ()), "holds", *tail)


def _print_plan_stages(console: Console, cols: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """The stages as a table when it fits the terminal's width; else one block per stage (the
    table's values, one `column: value` line each, wrapped between words), so no value is cut."""
    from rich.cells import cell_len

    # in the table a list stacks one item a line, a size goes under its taps
    cells_of = [
        tuple(c.replace(", ", ",\n") if col == "holds" else c.replace(" (", "\n(") for col, c in zip(cols, row))
        for row in rows
    ]
    # the table's natural width: each column's widest line plus its padding (2), and the borders
    natural = (
        sum(max(cell_len(ln) for c in col for ln in c.split("\n")) + 2 for col in zip(cols, *cells_of)) + len(cols) + 1
    )
    if natural <= console.width:
        t = Table(show_header=True, header_style="bold")
        for col in cols:
            t.add_column(col, no_wrap=True)
        for row in cells_of:
            t.add_row(*(terminal.plain(c) for c in row))
        console.print(t)
        return
    for row in rows:
        cells = dict(zip(cols, row))
        _wrapped(
            console,
            styled(
                "[bold]stage {}[/bold]: node {}, layers {}, weights {}",
                cells["stage"],
                cells["node"],
                cells["layers"],
                cells.get("weights", cells.get("weights/GPU", "?")) + (" per GPU" if "weights/GPU" in cells else ""),
            ),
        )
        for col, value in cells.items():
            if col not in ("stage", "node", "layers", "weights", "weights/GPU"):
                _wrapped(console, styled("{}: {}", col, value), first=2, rest=4)


def _wrapped(console: Console, text: Text, *, first: int = 0, rest: int = 2) -> None:
    """`text` wrapped between words at the console's width: the first line indented `first`
    columns, the others `rest`; no trailing blanks."""
    for i, line in enumerate(text.wrap(console, max(20, console.width - max(first, rest)))):
        line.rstrip()
        console.print(Text(" " * (first if i == 0 else rest)) + line, soft_wrap=True)


def render_plan(
    pf, console: Console | None = None, invalid_partition: list[int] | None = None, verbose: bool = False
) -> None:
    """The plan table of one engine, then the verdict and what to act on first."""
    console = console or terminal.console()
    _plan_table(console, pf.resolved, invalid_partition)
    _act_first(console, pf, verbose)


def _plan_table(console: Console, r, invalid_partition: list[int] | None = None) -> None:
    """The plan: one line on the split, the drafter's taps, the stages (a table, or stacked when the
    table is wider than the terminal), the notes; every line wrapped at the terminal's width."""
    plan = r.plan
    if plan is None:
        console.print(styled("[bold red]no plan[/bold red]: the target's layer count is unknown"))
        return
    if invalid_partition is not None:
        console.print(
            styled(
                "[bold]{}[/bold]: {} [bold red]INVALID[/bold red]: no plan (vLLM would refuse this split at engine "
                "start)",
                r.profile.name,
                f"{plan.num_layers} layers over {len(plan.partition)} stage(s); layer_partition {invalid_partition} "
                "(profile)",
            )
        )
        return
    _wrapped(
        console,
        styled(
            "[bold]{}[/bold]: {}",
            r.profile.name,
            f"{plan.num_layers} layers over {len(plan.partition)} stage(s) {list(plan.partition)} "
            f"({plan.partition_source}); runner {plan.runner.upper()}",
        ),
    )
    if plan.method:
        _wrapped(
            console,
            terminal.plain(
                f"drafter {plan.method}: taps {list(plan.taps) or '—'} (vLLM capture points: tap L = output of layer "
                f"L-1; source: {plan.taps_source})"
                + (f"; trained on {list(plan.trained_taps)} via {plan.trained_source}" if plan.trained_taps else "")
            ),
        )
        if plan.overlay:
            _wrapped(console, styled("[yellow]drafter config overlay at launch:[/yellow] {}", plan.overlay))
        if plan.draft_layer_ids:
            _wrapped(
                console,
                terminal.plain(
                    f"draft layer ids {list(plan.draft_layer_ids)} ({plan.draft_layer_numbering} numbering)"
                ),
            )
    # Tap and relay columns only for drafters that read the target's hidden states (`reads_taps`):
    # without one nothing is tapped or relayed, and zeros there would read as a broken relay.
    # Every tap column holds tap ids (vLLM capture points), never counts: a count read like tap 2.
    spec = methods.of(plan.method)
    taps_shown = spec is not None and spec.reads_taps
    from ppspec_cli.planning.memory_inputs import memory_of

    mem = r.memory if r.memory is not None else memory_of(r)
    shown = mem if mem.plan is not None else None
    _print_plan_stages(console, _plan_columns(taps_shown, shown is not None), _plan_rows(r, plan, taps_shown, shown))
    if taps_shown:
        _wrapped(console, styled("[dim]{}[/dim]", PLAN_TAP_LEGEND), rest=0)
    _memory_line(console, mem)
    for note in plan.notes:
        _wrapped(console, styled("[dim]note: {}[/dim]", note))
    for note in mem.notes:
        _wrapped(console, styled("[dim]note: {}[/dim]", note))


def _memory_line(console: Console, mem) -> None:
    """One line on memory under the plan: the budget and the engine's KV capacity, or what each GPU needs."""
    mp, s = mem.plan, mem.settings
    if mp is None or s is None:
        _wrapped(console, styled("[dim]memory: not judged ({})[/dim]", mem.unknown or "unknown"))
        return
    lens = f"max-model-len {s.max_model_len:,}" if s.max_model_len else "max-model-len unknown"
    if mp.budget is None and mp.engine_tokens is not None:
        lim = "" if mp.limiting is None or len(mp.stages) < 2 else f"; stage {mp.limiting} limits it"
        conc = "" if mp.max_concurrency is None else f" = {mp.max_concurrency:.1f} requests at {lens}"
        _wrapped(
            console,
            terminal.plain(
                f"memory: a KV cache of {_human_bytes(s.kv_cache_memory_bytes)} per worker (kv-cache-memory-bytes, or "
                f"VLLM_CPU_KVCACHE_SPACE on the CPU platform); the engine's KV cache {mp.engine_tokens:,} "
                f"tokens{conc}{lim}"
            ),
        )
        return
    if mp.budget is None:
        need = ", ".join(f"stage {x.rank} {_human_bytes(int(x.needed))}" for x in mp.stages)
        _wrapped(
            console,
            terminal.plain(
                f"memory: one GPU needs {need} (weights, activations, CUDA graphs, runtime and one {lens} request's KV "
                "cache); set `hardware:` or --hardware to judge the fit"
            ),
        )
        return
    dev = mem.device
    lim = "" if mp.limiting is None or len(mp.stages) < 2 else f"; stage {mp.limiting} limits it"
    conc = "" if mp.max_concurrency is None else f" = {mp.max_concurrency:.1f} requests at {lens}"
    _wrapped(
        console,
        terminal.plain(
            f"memory: {dev.name if dev else '?'} {_human_bytes(mp.device_bytes)} x gpu-memory-utilization "
            f"{s.utilization:g} = "
            f"{_human_bytes(mp.budget)} per GPU; the engine's KV cache "
            + ("unknown" if mp.engine_tokens is None else f"{mp.engine_tokens:,} tokens")
            + f"{conc}{lim} (KV tokens: what each stage alone would hold; vLLM takes the smallest)"
        ),
    )


def stage_placement(tp: int, pp: int, dp: int, nodes: int) -> list[tuple[int | None, list[int]]]:
    """Node and local device indices of each pipeline stage (of data-parallel replica 0), as vLLM
    lays ranks out: global rank = (dp_rank x PP + stage) x TP + tp_rank, node i holding ranks
    i x R .. (i+1) x R - 1 with R = TP x PP x DP / nodes, device = rank mod R. (None, []) when the
    ranks do not split evenly over the nodes (`check` reports that)."""
    world = tp * pp * dp
    if nodes < 1 or world % nodes:
        return [(None, [])] * pp
    per = world // nodes
    out = []
    for stage in range(pp):
        ranks = [stage * tp + i for i in range(tp)]
        hosts = sorted({rk // per for rk in ranks})
        out.append((hosts[0] if len(hosts) == 1 else None, [rk % per for rk in ranks]))
    return out


def _devices(platform: str, idx: list[int]) -> str:
    if platform == "cpu":
        return "CPU"
    if not idx:
        return "?"
    span = (
        f"{idx[0]}"
        if len(idx) == 1
        else (f"{idx[0]}-{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else ",".join(map(str, idx)))
    )
    return f"GPU {span}"


def render_pd_check(pf, console: Console | None = None, min_severity: str = "warning") -> None:
    """A disaggregated profile: one line per engine, the connector, then the findings and verdict."""
    console = console or terminal.console()
    d = pf.deployment
    for r in d.roles.values():
        _engine_line(console, r)
    _version_line(console, d.roles["prefill"], f"KV connector {d.connector_name}; ")
    _render_verdict(console, list(pf.findings), min_severity)
    render_here(console, pf)


def render_pd_plan(pf, rows, console: Console | None = None, verbose: bool = False) -> None:
    """Both engines' plans, then the KV layer names each registers, side by side, mismatches marked."""
    console = console or terminal.console()
    d = pf.deployment
    for role, r in d.roles.items():
        console.print(styled("[bold]{} engine[/bold]", role))
        _plan_table(console, r)
        console.print("")
    if rows is None:
        console.print(styled("[bold red]KV layer names unknown[/bold red]: the target's layer count is unknown"))
    else:
        console.print(f"KV layer names each engine registers with {d.connector_name} (kind@stage):")
        t = Table(show_header=True, header_style="bold")
        for col in ("layer name", "prefill", "decode", ""):
            t.add_column(col)
        for row in rows:
            t.add_row(
                terminal.plain(row.names),
                terminal.plain(", ".join(row.prefill) or "—"),
                terminal.plain(", ".join(row.decode) or "—"),
                styled("[bold red]MISMATCH[/bold red]") if row.mismatch else "ok",
            )
        console.print(t)
    _act_first(console, pf, verbose)
