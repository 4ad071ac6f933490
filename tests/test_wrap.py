"""Issue 43 item 7: nothing ppspec writes breaks a word at the terminal's width. Its own message lines
(progress, errors, usage errors, dry-run comments, verify's gate lines) are wrapped between words
under their label when a width is known ($COLUMNS or a terminal; a pipe keeps each whole, for logs
and grep); a command to copy is broken only with ` \\` and still pastes as the same command;
`ppspec docs` reads as text (no Markdown tables or generator comments) and shows one key or code;
a misspelt profile key gets "did you mean"."""

from __future__ import annotations

import io
import re

import inprocess
import pytest
from conftest import REPO
from rich.console import Console

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import terminal

WORD = re.compile(r"\S+")


def _words(text: str) -> list[str]:
    return WORD.findall(text)


def _fits(text: str, width: int) -> list[str]:
    """The lines over `width` that hold more than one word (a single long word, a path, may overflow)."""
    return [ln for ln in text.splitlines() if len(ln) > width and len(ln.split()) > 1]


def test_wrap_block_breaks_between_words_under_each_label():
    text = (
        "error: "
        + "the engine exited with code 1 during start-up while loading the drafter " * 3
        + "\n  where: /a/very/long/path/"
        + "x" * 90
        + "\n  fix: stop the other server, then run the same command again with --resume"
    )
    out = terminal.wrap_block(text, 50)
    assert _fits(out, 50) == [] and _words(out) == _words(text)  # no word split, none lost
    lines = out.splitlines()
    assert lines[1].startswith(" " * 7) and not lines[1].startswith(" " * 8)  # under "error: "
    fix = next(i for i, ln in enumerate(lines) if ln.startswith("  fix: "))
    assert lines[fix + 1].startswith(" " * 7)  # under "  fix: "
    assert "x" * 90 in out  # the long path keeps its own line
    assert terminal.wrap_block(text, None) == text  # a pipe without COLUMNS: each message one line


def test_progress_and_errors_wrap_at_columns_and_stay_whole_in_a_pipe(monkeypatch, capsys):
    from ppspec_cli.commands.common import print_error, progress

    msg = "arm 2/3 spec-k2 repeat 1/2: serving the profile with num_speculative_tokens 2; 4 run(s) of c=1,2"
    monkeypatch.setenv("COLUMNS", "40")
    progress(msg)
    print_error(PpspecError("the results directory " + "is not writable " * 4, where="--out", fix="pass --out DIR"))
    err = capsys.readouterr().err
    assert _fits(err, 40) == [] and err.splitlines()[1].startswith(" " * 8)  # under "ppspec: "
    assert " ".join(_words(err)).startswith(f"ppspec: {msg} error: the results directory")
    monkeypatch.delenv("COLUMNS")
    progress(msg)  # stderr is captured (not a terminal), no COLUMNS: one line
    assert capsys.readouterr().err == f"ppspec: {msg}\n"


def test_a_command_block_pastes_as_the_same_command():
    """Broken with ` \\` at the end of each line: bash removes backslash-newline, so the words are
    the command's own (quotes, a JSON value with blanks, a ${VAR} reference kept whole)."""
    cmd = (
        "curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' "
        '-H "Authorization: Bearer ${VLLM_API_KEY}" -d \'{"model": "tiny-cpu-demo", "prompt": "hello world", '
        '"max_tokens": 16, "temperature": 0}\''
    )
    block = terminal.command_block("try:", cmd, 60, prefix=8)
    lines = block.splitlines()
    assert lines[0] == "try:" and all(ln.endswith(" \\") for ln in lines[1:-1])
    # over 60 only where one shell word (the quoted JSON body) is longer than the line
    assert [ln for ln in lines if len(ln) > 60 and len(terminal.shell_words(ln.removesuffix(" \\"))) > 1] == []
    assert terminal.shell_words(block.split("\n", 1)[1].replace("\\\n", "")) == terminal.shell_words(cmd)
    assert terminal.command_block("try:", cmd, None) == f"try: {cmd}"  # a pipe: one line, as before
    assert terminal.command_block("try:", "ppspec verify p.yaml", 80, prefix=8) == "try: ppspec verify p.yaml"


def test_gate_lines_and_bench_verdicts_wrap_between_words():
    from ppspec_cli.verify.report import print_gate_lines

    detail = "acceptance length 1.20 is below 0.95 x the baseline's 2.00 measured on the same drafter at PP=1 " * 2
    buf = io.StringIO()
    print_gate_lines(
        {"gates": [{"name": "acceptance", "status": "FAIL", "detail": detail}]}, Console(file=buf, width=60)
    )
    out = buf.getvalue()
    assert (
        _fits(out, 60) == [] and _words(out)[0] == "FAIL" and " ".join(_words(out)).endswith(" ".join(_words(detail)))
    )
    assert out.splitlines()[1].startswith("      ")  # under the gate's status


def test_usage_errors_wrap_between_words():
    r = inprocess.run("bench", "profiles/tiny_cpu_demo.yaml", "--repeat", "many", env={"COLUMNS": "44"}, cwd=REPO)
    assert r.returncode == 2 and "Invalid value for '--repeat'" in r.stderr
    assert _fits(r.stderr, 44) == [], r.stderr


def test_dry_run_comments_wrap_and_stay_comments():
    """Every comment line of `serve --dry-run` at 80 columns starts with `#` and breaks no word; the
    command lines are unchanged (one line each: a script may read them)."""
    r = inprocess.run(
        "serve", "profiles/kimi_k3_dspark.yaml", "--dry-run", "--offline", env={"COLUMNS": "80"}, cwd=REPO
    )
    out = r.stdout
    comments = [ln for ln in out.splitlines() if not re.match(r"^[A-Z_]+=|^/|^\S*vllm ", ln)]
    assert comments and all(ln.startswith("#") for ln in comments), out
    assert _fits("\n".join(comments), 80) == [], out
    assert any(ln.startswith("#   ") for ln in comments)  # a long one was wrapped, its rest indented
    assert all(len(ln.split()) > 5 for ln in out.splitlines() if " serve " in ln and not ln.startswith("#"))


def test_docs_reads_as_text_and_shows_one_key_or_code():
    full = inprocess.run("docs", env={"COLUMNS": "80"})
    assert full.returncode == 0
    text = full.stdout
    assert "<!--" not in text and "|---" not in text and "| `" not in text, text[:500]
    assert _fits(text, 80) == [] and "drafter.taps  list[int] (optional)" in text
    one = inprocess.run("docs", "drafter.taps", env={"COLUMNS": "80"})
    assert one.returncode == 0 and one.stdout.startswith("drafter.taps  ") and "capture-point" in one.stdout
    assert len(one.stdout.splitlines()) < 8
    code = inprocess.run("docs", "taps-pinned-off-by-one", env={"COLUMNS": "80"})
    assert code.returncode == 0 and code.stdout.startswith("taps-pinned-off-by-one  warning") and "fix:" in code.stdout
    sec = inprocess.run("docs", "topology", env={"COLUMNS": "80"})
    assert sec.returncode == 0 and "topology.layer_partition" in sec.stdout and "drafter.taps" not in sec.stdout
    typo = inprocess.run("docs", "drafter.tap", env={"COLUMNS": "80"})
    assert typo.returncode == 2 and "did you mean drafter.taps" in " ".join(typo.stderr.split()), typo.stderr
    md = inprocess.run("docs", "--markdown")
    assert md.stdout == (REPO / "docs" / "profile-reference.md").read_text(encoding="utf-8")
    findings = inprocess.run("docs", "--findings", env={"COLUMNS": "80"})
    assert "taps-pinned-off-by-one  warning" in findings.stdout and "|---" not in findings.stdout


@pytest.mark.parametrize(
    ("yaml_text", "fix"),
    [
        (
            "drafter:\n  method: eagle3\n  model: m\n  num_speculative_tokens: 1\n  tap: [2]\n",
            "did you mean `taps`? write `taps:` under `drafter:`",
        ),
        (
            "topology:\n  pipline_parallel: 2\n",
            "did you mean `pipeline_parallel`? write `pipeline_parallel:` under `topology:`",
        ),
        ("servr:\n  port: 1\n", "did you mean `server`? write `server:`"),
        (
            "drafter:\n  method: eagle3\n  model: m\n  num_speculative_tokens: 1\n  zzzqqq: 1\n",
            "remove it; `ppspec docs drafter` lists the keys there",
        ),
    ],
)
def test_a_misspelt_key_gets_did_you_mean(yaml_text, fix):
    from ppspec_cli.planning.profile import parse_profile

    with pytest.raises(PpspecError) as e:
        parse_profile("name: t\ntarget: {model: demo:tiny-llama}\n" + yaml_text)
    assert e.value.fix == fix and "unknown key" in e.value.what and " — " not in e.value.what


def test_an_export_ends_with_its_errors_not_its_warnings(tmp_path):
    """A fatal error is the last thing on the screen: export prints the warnings it carries first,
    then the errors that refuse the profile, then the count."""
    import yaml

    data = yaml.safe_load((REPO / "profiles" / "tiny_cpu_demo.yaml").read_text())
    data["drafter"]["taps"] = [0, 2, 5]  # each one below the head's [1, 3, 6]: a warning
    data["topology"]["layer_partition"] = [6]
    data["topology"]["pipeline_parallel"] = 2  # an error (and the partition's length another)
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(data))
    r = inprocess.run("export", "slurm", str(prof), "-o", str(tmp_path / "job.sbatch"), cwd=REPO)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ppspec: check ")]
    kinds = [ln.split()[2] for ln in lines]
    assert r.returncode == 1 and "warning" in kinds and "error" in kinds, r.stderr
    assert kinds == sorted(kinds, key=lambda k: k == "error"), kinds  # every warning before every error
    assert r.stderr.rstrip().splitlines()[-1].startswith("ppspec: `check` found")
