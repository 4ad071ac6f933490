"""`ppspec bench`'s outputs: the table and verdict printed to the terminal, the Markdown report,
and the PNG plots (matplotlib, the optional `bench` extra)."""

from __future__ import annotations

from pathlib import Path

from ppspec_cli.io import safeio


def _n(x, fmt: str = "{:.1f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def table_rows(doc: dict) -> list[list[str]]:
    sp = {s["concurrency"]: s for s in doc.get("speedup", [])}
    rows = []
    for r in sorted(doc["runs"], key=lambda r: (r["concurrency"], r["speculation"], r.get("num_speculative_tokens") or 0)):
        s = sp.get(r["concurrency"], {}).get("arms", {}).get(r["arm"])
        t, i, f = r.get("tpot_ms") or {}, r.get("itl_ms") or {}, r.get("ttft_ms") or {}
        rows.append([
            str(r["concurrency"]),
            r["arm"],
            _n(r.get("output_tokens_per_s")),
            _n(r.get("request_throughput"), "{:.2f}"),
            f"{_n(t.get('mean'), '{:.2f}')} / {_n(t.get('p50'), '{:.2f}')} / {_n(t.get('p99'), '{:.2f}')}",
            f"{_n(i.get('mean'), '{:.2f}')} / {_n(i.get('p50'), '{:.2f}')} / {_n(i.get('p99'), '{:.2f}')}",
            f"{_n(f.get('mean'))} / {_n(f.get('p99'))}",
            _n(r.get("acceptance_length"), "{:.2f}"),
            _n(r.get("acceptance_rate"), "{:.2f}"),
            " ".join(f"{p:.2f}" for p in r.get("per_position_acceptance") or []) or "-",
            f"{s['speedup']:.2f}x" if s else ("1.00x" if not r["speculation"] else "-"),
        ])
    return rows


HEADER = ["c", "arm", "out tok/s", "req/s", "TPOT ms mean/p50/p99", "ITL ms mean/p50/p99", "TTFT ms mean/p99", "acc len", "acc rate", "per position", "speed-up"]


def verdict_lines(doc: dict) -> list[str]:
    rec = doc.get("recommendation") or {}
    lines = []
    sp = [s for s in doc.get("speedup", []) if s.get("speedup") is not None]
    if sp:
        lines.append("speed-up (best speculative arm over no speculation, output tokens/s): " + ", ".join(f"c={s['concurrency']} {s['speedup']:.2f}x" for s in sp))
        lines.append("best num_speculative_tokens: " + ", ".join(f"c={s['concurrency']} k={s['best_num_speculative_tokens'] if s['best_num_speculative_tokens'] is not None else '?'}" for s in sp))
    c = rec.get("crossover_concurrency")
    if rec.get("speculate") is False:
        lines.append("crossover: speculation pays at no measured concurrency")
    elif c is not None:
        more = " (the highest level measured: the crossover lies above it)" if c == rec.get("highest_measured") else ""
        lines.append(f"crossover: speculation still pays at c={c}{more}")
    p = doc.get("parity") or {}
    if p:
        checks = p.get("checks") or []
        shown = ", ".join(
            f"{ch['arm']} {'identical' if ch['identical'] else 'DIFFERS at prompt ' + str((ch.get('first_difference') or {}).get('prompt')) + ', token ' + str((ch.get('first_difference') or {}).get('token'))} ({ch['prompts']} prompts, by {ch['pass']})"
            for ch in checks
        )
        bad_load = [f"{x['arm']} c={x['concurrency']} (request {x['first_difference']})" for x in p.get("load_runs") or [] if not x["identical"]]
        lines.append(f"parity: {'identical' if p.get('identical') else 'NOT identical'}" + (f": {shown}" if shown else "") + (f"; load-run texts differ: {', '.join(bad_load)}" if bad_load else "") + (f"; not measured for {', '.join(p['missing'])}" if p.get("missing") else ""))
    if rec.get("summary"):
        lines.append(f"verdict: {rec['summary']}")
    if rec.get("profile_change"):
        lines.append(f"profile change: {rec['profile_change']}")
    return lines


def print_report(doc: dict, console) -> None:
    from rich.table import Table

    from ppspec_cli.io.terminal import plain

    t = Table(title=plain(f"ppspec bench: {doc.get('profile') or ''}"), show_lines=False)
    for h in HEADER:
        t.add_column(h, justify="left" if h == "arm" else "right")
    for row in table_rows(doc):
        t.add_row(*[plain(c) for c in row])  # data, never markup (terminal.plain cleans it)
    console.print(t)
    for line in verdict_lines(doc):
        console.print(plain(line))
    for w in doc.get("warnings") or []:
        console.print(plain(f"warning: {w}"))


def markdown(doc: dict) -> str:
    """The Markdown report. Every value from the results (records read back with --resume, a
    server's figures, names) goes through io/markdown.text: no HTML, link or table break survives."""
    from ppspec_cli.io.markdown import link_target
    from ppspec_cli.io.markdown import text as md

    s = doc["settings"]
    out = [
        f"# ppspec bench: {md(doc.get('profile'))}",
        "",
        f"{md(doc.get('created_at', ''))} · ppspec {md(doc.get('ppspec_version'))} · load generator: {md(doc.get('load_generator'))}",
        "",
        f"Settings: concurrency {md(', '.join(map(str, s['concurrency'])))}; {md(s['num_prompts'])} seeded random prompts of {md(s['input_len'])} tokens (seed {md(s['seed'])}), "
        f"{md(s['max_tokens'])} output tokens each (greedy, ignore_eos), after a warm-up; arms: {md(', '.join(str(a['name']) for a in doc['arms']))}.",
        "",
        "## Verdict",
        "",
        *[f"- {md(line)}" for line in verdict_lines(doc)],
        "",
        "## Runs",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
        *["| " + " | ".join(md(c) for c in row) + " |" for row in table_rows(doc)],
        "",
        "Throughput, TPOT, ITL and TTFT are `vllm bench serve`'s figures; acceptance length, rate and per-position",
        "acceptance are ppspec's, from the `/metrics` difference around each level's measured requests (docs/verify.md's formulas).",
        "Parity: each speculative arm's greedy token ids, one request at a time on the same seeded prompts, against the baseline's;",
        "and the texts of every load run against the baseline's at the same concurrency.",
    ]
    if doc.get("plots"):
        out += ["", "## Plots", "", *[f"![{md(Path(str(p)).stem)}]({link_target(p)})" for p in doc["plots"]]]
    if doc.get("warnings"):
        out += ["", "## Warnings", "", *[f"- {md(w)}" for w in doc["warnings"]]]
    return "\n".join(out) + "\n"


def plots(doc: dict, out_dir: Path) -> tuple[list[Path], str | None]:
    """bench.png (both panels), tokens_per_s.png, tpot.png; or ([], why) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "no PNG plots: matplotlib is not installed (pip install 'ppspec[bench]')"
    runs = doc["runs"]
    arms = [a["name"] for a in doc["arms"]]
    levels = sorted({r["concurrency"] for r in runs})
    sp = {s["concurrency"]: s for s in doc.get("speedup", [])}

    def series(arm: str, key):
        pts = sorted((r["concurrency"], key(r)) for r in runs if r["arm"] == arm and key(r) is not None)
        return [p[0] for p in pts], [p[1] for p in pts]

    def panel(ax, key, ylabel: str, annotate: bool, title: str):
        for arm in arms:
            xs, ys = series(arm, key)
            if xs:
                ax.plot(xs, ys, marker="o", linestyle="--" if arm == "baseline" else "-", label=arm + (" (no speculation)" if arm == "baseline" else ""))
        if annotate:
            for c in levels:
                s = sp.get(c) or {}
                best = s.get("best_arm")
                if best is None:
                    continue
                y = next((key(r) for r in runs if r["arm"] == best and r["concurrency"] == c), None)
                if y is not None:
                    ax.annotate(f"{s['speedup']:.2f}x", (c, y), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9, color="green" if s["pays"] else "red", fontweight="bold")
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels)
        ax.set_xticklabels([str(c) for c in levels])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax.margins(x=0.08, y=0.15)

    tps = lambda r: r.get("output_tokens_per_s")  # noqa: E731
    tpot = lambda r: (r.get("tpot_ms") or {}).get("mean")  # noqa: E731
    name = doc.get("profile") or ""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    panel(a1, tps, "output tokens/s (higher is better)", True, "throughput; label: speed-up of the best arm")
    panel(a2, tpot, "TPOT mean, ms (lower is better)", False, "time per output token")
    fig.suptitle(f"ppspec bench: {name}", fontsize=11)
    fig.tight_layout()
    made.append(_save(fig, out_dir / "bench.png"))
    plt.close(fig)
    for fname, key, ylabel, ann, title in (("tokens_per_s.png", tps, "output tokens/s", True, "throughput; label: speed-up of the best arm"), ("tpot.png", tpot, "TPOT mean, ms", False, "time per output token")):
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
