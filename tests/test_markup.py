"""Server text is never rich markup: a completion, model id, warning or gate detail carrying
`[/INST]`, `[bold]` or `[link=...]` prints as itself (it crashed the parity report: MarkupError)."""

from __future__ import annotations

import io

from rich.console import Console

from ppspec_cli.verify.report import render_table

HOSTILE = "[/INST] [bold]x[/bold] [link=file:///etc/passwd]y[/link] [/] \x1b[31m"


def test_report_with_markup_like_server_text_renders_verbatim():
    r = {
        "endpoint": "http://127.0.0.1:8000",
        "model": HOSTILE,
        "prompt_set": {"name": HOSTILE, "version": 1, "sha256": "0" * 64},
        "settings": {"num_prompts": 1, "max_tokens": 8, "seed": 0},
        "spec_decode": {"configured": False},
        "throughput": {},
        "warnings": [HOSTILE],
        "gates": [{"name": "parity", "status": "FAIL", "detail": f"completion differs: {HOSTILE!s}"}],
    }
    buf = io.StringIO()
    render_table(r, Console(file=buf, width=300, color_system=None))
    out = buf.getvalue()
    assert out.count("[/INST]") >= 3 and "[link=file:///etc/passwd]" in out
    assert "\x1b" not in out


from pathlib import Path  # noqa: E402

import inprocess  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "args,needle",
    [
        (["verify", "--endpoint", "http://127.0.0.1:9", "--min-acceptance", "nan"], "--min-acceptance"),
        (["verify", "--endpoint", "http://127.0.0.1:9", "--min-acceptance", "-1"], "--min-acceptance"),
        (["verify", "--endpoint", "http://127.0.0.1:9", "--parity-ratio", "inf"], "--parity-ratio"),
        (["verify", "--endpoint", "http://127.0.0.1:9", "--out", "/nonexistent-dir/r.json"], "does not exist"),
        (["verify", "--endpoint", "http://127.0.0.1:9", "--out", "/tmp/" + "x" * 300], "longer than"),
        (["docs", "--out", "/nonexistent-dir/ref.md"], "cannot write"),
        (["docs", "--out", "/"], "cannot write"),
    ],
)
def test_bad_options_are_refused_at_start_with_exit_2(args, needle):
    """Before any request: the endpoint is a closed port, so reaching it would be exit 1 instead."""
    cp = inprocess.run(
        *args, cwd=REPO, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    )  # in process: exit codes of main()
    assert cp.returncode == 2, cp.stderr
    assert needle in cp.stderr and "unexpected" not in cp.stderr and "Traceback" not in cp.stderr
