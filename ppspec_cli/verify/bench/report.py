"""`ppspec bench`'s outputs: the table and verdict printed to the terminal (fits 80 columns), the
Markdown report (every figure), and the PNG plots (matplotlib, the optional `bench` extra)."""

from __future__ import annotations

import functools
from pathlib import Path

from ppspec_cli.io import safeio


def _n(x, fmt: str = "{:.1f}") -> str:
    """A figure; a positive one that rounds to zero shows as "<0.01" (never a misleading 0.00)."""
    if not isinstance(x, (int, float)):
        return "-"
    s = fmt.format(x)
    if x > 0 and float(s) == 0:
        return "<" + fmt.format(10 ** -(int(fmt.split(".")[1][0]) if "." in fmt else 0))
    return s


def _ratio(r: dict | None, spread: bool = True) -> str:
    if not r:
        return "-"
    return f"{r['median']:.2f}x" + (f" ({r['min']:.2f}-{r['max']:.2f})" if spread else "")


def _sorted_runs(doc: dict) -> list[dict]:
    order = {a["name"]: i for i, a in enumerate(doc["arms"])}
    return sorted(doc["runs"], key=lambda r: (r["concurrency"], order.get(r["arm"], 99)))


def _vs_base(doc: dict, r: dict) -> str:
    base = next((x for x in doc["runs"] if x["arm"] == "baseline" and x["concurrency"] == r["concurrency"]), None)
    if (
        base is None
        or not base.get("output_tokens_per_s")
        or not isinstance(r.get("output_tokens_per_s"), (int, float))
    ):
        return "-"
    return f"{r['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}x"


def _pm(r: dict) -> str:
    s = r.get("spread") or {}
    if not s or s.get("n", 0) < 2 or not s.get("median"):
        return "-"
    return f"±{50 * (s['max'] - s['min']) / s['median']:.0f}%"


#: The terminal table: what fits 80 columns (report.md has every figure).
HEADER = ["c", "arm", "tok/s", "spread", "TPOT ms", "TTFT ms", "acc len", "vs base"]


def table_rows(doc: dict) -> list[list[str]]:
    rows = []
    for r in _sorted_runs(doc):
        rows.append(
            [
                str(r["concurrency"]),
                r["arm"],
                _n(r.get("output_tokens_per_s")),
                _pm(r),
                _n((r.get("tpot_ms") or {}).get("mean"), "{:.2f}"),
                _n((r.get("ttft_ms") or {}).get("mean")),
                _n(r.get("acceptance_length"), "{:.2f}"),
                _vs_base(doc, r),
            ]
        )
    return rows


FULL_HEADER = [
    "c",
    "arm",
    "repeats",
    "out tok/s median (min-max)",
    "req/s",
    "TPOT ms mean/p50/p99",
    "ITL ms mean/p50/p99",
    "TTFT ms mean/p99",
    "acc len",
    "acc rate",
    "per position",
    "vs baseline",
]


def full_rows(doc: dict) -> list[list[str]]:
    rows = []
    for r in _sorted_runs(doc):
        t, i, f, s = r.get("tpot_ms") or {}, r.get("itl_ms") or {}, r.get("ttft_ms") or {}, r.get("spread") or {}
        rows.append(
            [
                str(r["concurrency"]),
                r["arm"],
                str(r.get("repeats", 1)),
                f"{_n(r.get('output_tokens_per_s'))} ({_n(s.get('min'))}-{_n(s.get('max'))})",
                _n(r.get("request_throughput"), "{:.2f}"),
                f"{_n(t.get('mean'), '{:.2f}')} / {_n(t.get('p50'), '{:.2f}')} / {_n(t.get('p99'), '{:.2f}')}",
                f"{_n(i.get('mean'), '{:.2f}')} / {_n(i.get('p50'), '{:.2f}')} / {_n(i.get('p99'), '{:.2f}')}",
                f"{_n(f.get('mean'))} / {_n(f.get('p99'))}",
                _n(r.get("acceptance_length"), "{:.2f}"),
                _n(r.get("acceptance_rate"), "{:.2f}"),
                " ".join(f"{p:.2f}" for p in r.get("per_position_acceptance") or []) or "-",
                _vs_base(doc, r),
            ]
        )
    return rows


def _envelope(env: dict | None) -> str:
    if not env:
        return ""
    parts = []
    for key, what in (("vs_best", "the best arm"), ("vs_profile", "the profile's setting")):
        e = env.get(key)
        if e and e.get("arm") != env["recommended"]:
            parts.append(f"{_ratio(e['ratio'], False)} of {what} {e['arm']} ({e['verdict']})")
        elif e:
            parts.append(f"is {what}")
    return f"; recommended {env['recommended']} " + ", ".join(parts) if parts else ""


def _parity_line(p: dict) -> str:
    status = p.get("status") or ("identical" if p.get("identical") else "differs")
    checks = p.get("checks") or []
    shown = ", ".join(f"{ch['arm']} {_parity_word(ch)} ({ch['prompts']} prompts, by {ch['pass']})" for ch in checks)
    bad_load = [
        f"{x['arm']} c={x['concurrency']} repeat {x.get('repeat', 0) + 1} (request {x['first_difference']})"
        for x in p.get("load_runs") or []
        if not x["identical"]
    ]
    head = {
        "identical": "identical",
        "differs": "NOT identical",
        "incomplete": "identical so far",
        "not compared": "not compared (no speculative arm finished its parity pass)",
    }.get(status, status)
    return (
        f"parity: {head}"
        + (f": {shown}" if shown else "")
        + (f"; load-run texts differ: {', '.join(bad_load)}" if bad_load else "")
        + (f"; not measured for {', '.join(p['missing'])}" if p.get("missing") and checks else "")
    )


def verdict_lines(doc: dict) -> list[str]:
    rec = doc.get("recommendation") or {}
    lines = []
    for lv in doc.get("levels") or []:
        if lv.get("verdict") is None:
            continue
        lines.append(
            f"c={lv['concurrency']}: speculation vs none: {lv['verdict']}, {_ratio(lv.get('speedup'))} "
            f"({lv['best_speculative_arm']}){_envelope(lv.get('envelope'))}"
        )
    c = rec.get("crossover_concurrency")
    if rec.get("highest_measured") is not None:
        if c is None:
            lines.append("crossover: speculation is significantly faster at no measured concurrency")
        else:
            more = " (the highest level measured)" if c == rec.get("highest_measured") else ""
            lines.append(f"crossover: speculation significantly faster up to c={c}{more}")
    if rec.get("schedule"):
        state = (
            "recommended"
            if rec.get("schedule_recommended")
            else ("measured as `tuned`, not recommended" if rec.get("schedule_measured") else "proposed, not measured")
        )
        lines.append(f"schedule: {rec['schedule']} ({state})")
    p = doc.get("parity") or {}
    if p:
        lines.append(_parity_line(p))
    if rec.get("summary"):
        lines.append(f"verdict: {rec['summary']}")
    if rec.get("profile_change"):
        lines.append(f"profile change: {rec['profile_change']}")
    elif rec.get("withheld"):
        lines.append("profile change: none from this run, which drifted: rerun bench on a quieter machine")
    return lines


def print_report(doc: dict, console) -> None:
    from rich import box
    from rich.table import Table

    from ppspec_cli.io.terminal import plain, print_par

    t = Table(title=plain(f"ppspec bench: {doc.get('profile') or ''}"), box=box.SIMPLE_HEAD, pad_edge=False)
    for h in HEADER:
        t.add_column(h, justify="left" if h == "arm" else "right", no_wrap=True)
    for row in table_rows(doc):
        t.add_row(*[plain(c) for c in row])  # data, never markup (terminal.plain cleans it)
    console.print(t)
    for line in verdict_lines(doc):
        print_par(console, plain(line))
    for w in doc.get("warnings") or []:
        print_par(console, plain(f"warning: {w}"))


def _sessions_text(settings: dict) -> str:
    if settings.get("sessions") == "per-arm":
        return "all of an arm's repeats in one engine session"
    if settings.get("sessions") == "per-repeat":
        return "each repeat in its own engine session, arms interleaved"
    return "engine sessions not recorded"


def markdown(doc: dict) -> str:
    """The Markdown report. Every value from the results (records read back with --resume, a
    server's figures, names) goes through io/markdown.text: no HTML, link or table break survives."""
    from ppspec_cli.io.markdown import link_target
    from ppspec_cli.io.markdown import text as md

    s = doc["settings"]
    per = s.get("prompts_per_level") or {}
    out = [
        f"# ppspec bench: {md(doc.get('profile'))}",
        "",
        f"{md(doc.get('created_at', ''))} · run {md(doc.get('run_id'))} on {md(doc.get('host'))} "
        f"({md(doc.get('device') or 'device unknown')}) · ppspec {md(doc.get('ppspec_version'))} · vLLM "
        f"{md(doc.get('vllm_version'))} · load generator: {md(doc.get('load_generator'))}",
        "",
        f"Settings: concurrency {md(', '.join(map(str, s['concurrency'])))}; requests per level "
        f"{md(', '.join(f'c={c}: {n}' for c, n in per.items()))} (seeded random prompts of {md(s['input_len'])} "
        f"tokens, seed {md(s['seed'])}), "
        f"{md(s['max_tokens'])} output tokens each (greedy, ignore_eos), after a warm-up; each (arm, level) measured "
        f"{md(s.get('repeat', 1))} time(s), {md(_sessions_text(s))}; arms: "
        f"{md(', '.join(str(a['name']) for a in doc['arms']))}.",
        "",
        "## Verdict",
        "",
        *[f"- {md(line)}" for line in verdict_lines(doc)],
        "",
        "A difference is significant when every repeat of one arm beat every repeat of the other (their min-max "
        "ranges do not",
        "overlap) and the medians differ by more than 3% (docs/bench.md, How a difference is judged).",
        "",
        "## Runs (medians over the repeats)",
        "",
        "| " + " | ".join(FULL_HEADER) + " |",
        "|" + "|".join("---" for _ in FULL_HEADER) + "|",
        *["| " + " | ".join(md(c) for c in row) + " |" for row in full_rows(doc)],
        "",
        "Throughput, TPOT, ITL and TTFT are `vllm bench serve`'s figures; acceptance length, rate and per-position",
        "acceptance are ppspec's, from the `/metrics` difference around each level's measured requests "
        "(docs/verify.md's formulas).",
        "ITL is per streamed chunk: where the server sends several tokens in one chunk the gaps inside it are ~0 "
        "(shown <0.01).",
        "Parity: each speculative arm's greedy token ids, one request at a time on the same seeded prompts, against "
        "the baseline's;",
        "and the texts of every load run against the baseline's at the same concurrency.",
    ]
    if doc.get("plots"):
        out += ["", "## Plots", "", *[f"![{md(Path(str(p)).stem)}]({link_target(p)})" for p in doc["plots"]]]
    if doc.get("warnings"):
        out += ["", "## Warnings", "", *[f"- {md(w)}" for w in doc["warnings"]]]
    return "\n".join(out) + "\n"


_VERDICT_COLOUR = {"faster": "green", "slower": "red"}


def _series(doc: dict, arm: str, key) -> tuple[list, list, list]:
    pts = sorted((r["concurrency"], key(r), r) for r in doc["runs"] if r["arm"] == arm and key(r) is not None)
    return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]


def _panel(doc: dict, ax, key, ylabel: str, annotate: bool, title: str) -> None:
    """One panel: every arm's line over the concurrency levels (with the repeats' min-max range as
    error bars, and the best arm's speedup labelled, where `annotate`)."""
    levels = sorted({r["concurrency"] for r in doc["runs"]})
    for arm in [a["name"] for a in doc["arms"]]:
        xs, ys, rs = _series(doc, arm, key)
        if not xs:
            continue
        style = (
            {"linestyle": "--"}
            if arm == "baseline"
            else ({"linewidth": 2.5, "color": "black"} if arm == "tuned" else {})
        )
        label = arm + {"baseline": " (no speculation)", "tuned": " (schedule)"}.get(arm, "")
        if annotate:  # the repeats' min-max range as error bars
            lo = [y - ((r.get("spread") or {}).get("min", y)) for y, r in zip(ys, rs)]
            hi = [((r.get("spread") or {}).get("max", y)) - y for y, r in zip(ys, rs)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label, **style)
        else:
            ax.plot(xs, ys, marker="o", label=label, **style)
    if annotate:
        _label_speedups(doc, ax, key, levels)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.margins(x=0.08, y=0.15)
    ax.set_ylim(bottom=0)  # from zero: a small gap must not look large


def _label_speedups(doc: dict, ax, key, levels: list) -> None:
    """At each level, the best speculative arm's median speedup, coloured by the level's verdict."""
    lv = {x["concurrency"]: x for x in doc.get("levels") or []}
    for c in levels:
        x = lv.get(c) or {}
        best, sp = x.get("best_speculative_arm"), x.get("speedup")
        y = next((key(r) for r in doc["runs"] if r["arm"] == best and r["concurrency"] == c), None)
        if best is not None and sp and y is not None:
            ax.annotate(
                f"{sp['median']:.2f}x",
                (c, y),
                textcoords="offset points",
                xytext=(0, 10),
                ha="center",
                fontsize=9,
                color=_VERDICT_COLOUR.get(x.get("verdict"), "gray"),
                fontweight="bold",
            )


def plots(doc: dict, out_dir: Path) -> tuple[list[Path], str | None]:
    """bench.png (both panels), tokens_per_s.png, tpot.png; or ([], why) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "no PNG plots: matplotlib is not installed (pip install 'ppspec[bench]')"
    panel = functools.partial(_panel, doc)
    tps = lambda r: r.get("output_tokens_per_s")  # noqa: E731
    tpot = lambda r: (r.get("tpot_ms") or {}).get("mean")  # noqa: E731
    name = doc.get("profile") or ""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    panel(
        a1,
        tps,
        "output tokens/s (higher is better)",
        True,
        "throughput (bars: min-max of the repeats)\nlabel: best speculative arm over none; green faster, red slower, "
        "gray within noise",
    )
    panel(a2, tpot, "TPOT mean, ms (lower is better)", False, "time per output token")
    fig.suptitle(f"ppspec bench: {name}", fontsize=11)
    fig.tight_layout()
    made.append(_save(fig, out_dir / "bench.png"))
    plt.close(fig)
    for fname, key, ylabel, ann, title in (
        ("tokens_per_s.png", tps, "output tokens/s", True, "throughput; label: best speculative arm over none"),
        ("tpot.png", tpot, "TPOT mean, ms", False, "time per output token"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        panel(ax, key, ylabel, ann, f"{name}: {title}")
        fig.tight_layout()
        made.append(_save(fig, out_dir / fname))
        plt.close(fig)
    return made, None


def _save(fig, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    safeio.write_bytes(path, buf.getvalue(), what="bench plot")
    return path


def _parity_word(ch: dict) -> str:
    """`identical`, or where the arm's greedy output first differs from the baseline's."""
    if ch["identical"]:
        return "identical"
    first = ch.get("first_difference") or {}
    return f"DIFFERS at prompt {first.get('prompt')}, token {first.get('token')}"
