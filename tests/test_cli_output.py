"""What the CLI prints in an 80-column terminal or a pipe: `--help` shows boolean options as flags,
`adapters list` never breaks a name mid-word, wrapped finding text keeps its indentation, and a
plan without a tap-based drafter has no tap/relay columns."""

from __future__ import annotations

import io
import re

import pytest
import typer
import typer.testing
import yaml
from conftest import run_ppspec
from judging import judged
from rich.console import Console

from ppspec_cli.cli import app
from ppspec_cli.commands.render import render_findings, render_plan
from ppspec_cli.findings.codes import TAPS_PINNED_DIFFER
from ppspec_cli.knowledge.packs import load_packs
from ppspec_cli.planning.profile import parse_profile

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


def commands(cmd, path: tuple[str, ...] = ()):
    """(path, command) for the app, every group and every command (typer's own click objects)."""
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, (*path, name))


ALL = list(commands(typer.main.get_command(app)))


def help_text(path: tuple[str, ...]) -> str:
    res = typer.testing.CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    return res.output


def test_every_command_is_walked():
    assert {p for p, _ in ALL} >= {
        ("check",),
        ("plan",),
        ("serve",),
        ("verify",),
        ("docs",),
        ("adapters", "list"),
        ("adapters", "show"),
    }


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) or "ppspec" for p, _ in ALL])
def test_help_shows_boolean_options_as_flags(path, cmd):
    text = help_text(path)
    assert "<bool>" not in text and "BOOLEAN" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    flags = [p for p in cmd.params if p.param_type_name == "option" and p.is_flag]
    for opt in flags:
        names = " / ".join([*opt.opts, *opt.secondary_opts])
        line = next((ln for ln in text.splitlines() if ln.strip().startswith(names)), None)
        assert line is not None, f"{names} not listed in:\n{text}"
        rest = line.strip()[len(names) :]
        assert not rest.startswith((" <", " [", " BOOL", " TEXT")), f"{names} shown with a value: {line!r}"


@pytest.mark.slow  # runs the CLI in a subprocess
def test_adapters_list_in_a_pipe_at_80_columns():
    cp = run_ppspec("adapters", "list", "--details", env={"COLUMNS": "80"})  # stdout is a pipe, not a tty
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), "\n".join(ln for ln in lines if len(ln) > 80)
    assert all(ln == ln.rstrip() for ln in lines), "trailing blanks"
    words = {w for ln in lines for w in re.findall(r"[\w.]+", ln)}
    for pack in load_packs():
        assert pack.name in words
        for name in (*pack.matches.targets, *pack.matches.drafters, *pack.provides):
            assert name in words, f"{name} is broken across lines:\n{cp.stdout}"
    # wrapped list lines keep the value column: a line that is neither blank, a pack name nor a
    # labelled row is a continuation indented exactly like the values above it (proof: the releases
    # whose source proved the pack)
    labelled = re.compile(r"^  (status|engine|proof|targets|drafters|methods|provides|vLLM) +\S")
    names = {p.name for p in load_packs()}
    # the packs, then the section of vLLM's own facts per release (issue 31): rows labelled by release
    at = next(i for i, ln in enumerate(lines) if ln.startswith("vLLM's facts for every registered architecture"))
    assert all(re.match(r"^  \d+\.\d+\.\d+ +\d+ architectures|^ {12}\S", ln) for ln in lines[at + 1 :] if ln), lines[
        at:
    ]
    for ln in lines[1:at]:
        if ln and ln not in names and not labelled.match(ln):
            assert re.match(r"^ {12}\S", ln), f"continuation line lost its indentation: {ln!r}"


def test_wrapped_finding_text_keeps_its_indentation():
    long = "the drafter's fc layer is sized for taps " + ", ".join(f"EagleLlama4ForCausalLM{i}" for i in range(8))
    f = TAPS_PINNED_DIFFER.at("drafter.model", long, fix="run `ppspec serve` " + "to apply the overlay " * 6)
    buf = io.StringIO()
    render_findings(Console(file=buf, width=60, color_system=None, highlight=False), [f])
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("WARNING taps-pinned-differ")
    body = lines[1:]
    assert len(body) > 4  # message and fix both wrapped
    assert all(ln.startswith(" " * 8) and ln[8] != " " and len(ln) <= 60 and ln == ln.rstrip() for ln in body), body
    fix_at = next(i for i, ln in enumerate(body) if ln.lstrip().startswith("fix:"))
    assert " ".join(" ".join(body[:fix_at]).split()) == long  # words intact, none split
    assert " ".join(" ".join(body[fix_at:]).split()) == " ".join(("fix: " + f.hint).split())


def _plan_output(make_checkpoint, width: int = 160, pp: int = 2, **drafter) -> str:
    t = make_checkpoint("llama", LLAMA)
    prof = {
        "name": "t",
        "target": {"model": str(t)},
        "platform": "cuda",
        "adapter": "none",
        "topology": {"pipeline_parallel": pp},
    }
    if drafter:
        prof["drafter"] = {**drafter, "num_speculative_tokens": 3}
    p = parse_profile(yaml.safe_dump(prof))
    pf = judged(p)
    buf = io.StringIO()
    render_plan(pf, Console(file=buf, width=width, color_system=None, highlight=False))
    return buf.getvalue()


def test_plan_without_a_tap_drafter_has_no_tap_columns(make_checkpoint):
    out = _plan_output(make_checkpoint)
    assert "32 layers over 2 stage(s)" in out and "lm_head" in out
    for gone in ("taps made", "taps received", "sends to next stage", "B/token", "capture points"):
        assert gone not in out, out
    d = make_checkpoint("sf", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    out = _plan_output(make_checkpoint, method="eagle3", model=str(d))
    for shown in ("taps made", "taps received", "sends to next stage", "KiB/token", "taps are vLLM capture points"):
        assert shown in out, out


def test_plan_tap_columns_hold_tap_ids_not_counts(make_checkpoint):
    """Issue 26: a column of slot counts (`2`) read like tap 2. Stage 1 of a 32-layer PP=2 plan with
    taps [2, 16, 29] receives taps 2 and 16 and sends nothing; stage 0 sends 2 and 16."""
    d = make_checkpoint("sf", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    out = _plan_output(make_checkpoint, method="eagle3", model=str(d))
    lines = [ln for ln in out.splitlines() if ln.startswith("│")]
    rows = {
        ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[1:-1]]
        for ln in lines
        if ln.split("│")[1].strip().isdigit()
    }
    cols = slice(3, 6)  # stage, node, layers, then the tap columns
    assert rows["0"][cols] == ["2, 16", "—", "2, 16"], rows
    assert lines[1].split("│")[6].strip() == "(16.0 KiB/token)", lines  # the size, under the taps it is for
    assert rows["1"][cols] == ["29", "2, 16", "—"], rows


def test_plan_fits_80_columns(make_checkpoint, monkeypatch):
    """Issue 29: at 80 columns the stages are stacked (one block per stage) rather than a table cut
    to `embeddi…`; no line is over 80 and every value of the wide table is there. `ppspec plan`
    itself, with COLUMNS=80."""
    d = make_checkpoint("sf", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    wide = _plan_output(make_checkpoint, width=400, pp=4, method="eagle3", model=str(d))
    values = []
    for ln in wide.splitlines():
        if ln.startswith("│"):
            values += [c.strip().rstrip(",") for c in ln.split("│")[1:-1] if c.strip()]
    assert "embedding (for the drafter)" in values and "(16.0 KiB/token)" in values, values
    t = make_checkpoint("llama", LLAMA)
    prof = t.parent / "p.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "target": {"model": str(t)},
                "platform": "cuda",
                "adapter": "none",
                "topology": {"pipeline_parallel": 4},
                "drafter": {"method": "eagle3", "model": str(d), "num_speculative_tokens": 3},
            }
        )
    )
    res = typer.testing.CliRunner().invoke(
        app, ["plan", str(prof), "--offline"], env={"COLUMNS": "80", "HF_HUB_OFFLINE": "1"}, terminal_width=80
    )
    out = res.stdout
    assert "stage 3: node 0, GPU 3, layers" in out, out
    assert "…" not in out and max(len(ln) for ln in out.splitlines()) <= 80, out
    flat = " ".join(out.split())
    for v in values:
        assert v in flat, (v, out)


def readme_rows() -> dict[tuple[str, ...], str]:
    """The command table of docs/commands.md: {command path: the usage text in its first cell}."""
    from conftest import REPO

    rows = {}
    for line in (REPO / "docs" / "commands.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `ppspec ([^`]+)` \|", line)
        if m:
            usage = m.group(1).replace("\\|", "|")
            path = tuple(w for w in re.match(r"^([a-z0-9 ]+?)(?= [A-Z\[]|$)", usage).group(1).split())
            rows[path] = usage[len(" ".join(path)) :]
    return rows


def test_commands_page_matches_the_cli():
    """Every command has a row in docs/commands.md listing exactly its options: flags bare (`[--json]`), value
    options with a value (`[--endpoint URL]`), arguments by their metavar (`[PROFILE]` when optional)."""
    from conftest import REPO

    rows = readme_rows()
    leaves = {p: c for p, c in ALL if p and not getattr(c, "commands", None)}
    assert set(rows) == set(leaves), f"docs/commands.md rows {sorted(rows)} vs commands {sorted(leaves)}"
    for path, cmd in leaves.items():
        usage = rows[path]
        shown = {}
        for group in re.findall(r"\[(--[^\]]+)\]", usage) + re.findall(
            r"(?:^| )(--[a-z-]+ [A-Z]+)(?= |$)", usage
        ):  # [optional] or required
            opt, *value = group.split()
            shown[opt] = value
        expected = {p.opts[0]: p for p in cmd.params if p.param_type_name == "option" and p.name != "help"}
        assert set(shown) == set(expected), (
            f"`ppspec {' '.join(path)}`: docs/commands.md lists {sorted(shown)}, the CLI has {sorted(expected)}"
        )
        for opt, p in expected.items():
            assert len(shown[opt]) == (0 if p.is_flag else 1), (
                f"`ppspec {' '.join(path)}`: {opt} is {'a flag' if p.is_flag else 'an option with a value'}"
            )
        for arg in (p for p in cmd.params if p.param_type_name == "argument"):
            want = arg.metavar if arg.required else f"[{arg.metavar}]"
            assert re.search(rf"(^| ){re.escape(want)}( |$)", usage), (
                f"`ppspec {' '.join(path)}`: argument {want} missing"
            )
    readme = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    for p in typer.main.get_command(app).params:
        if p.name != "help":
            assert f"`ppspec {p.opts[0]}" in readme, f"global option {p.opts[0]} is not in docs/commands.md"
