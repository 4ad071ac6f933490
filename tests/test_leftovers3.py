"""Issue 32's leftovers from the earlier corpora: a second serve on a held run directory says the
directory is in use (not "port in use"); a `user:password@` endpoint never reaches bench's files;
`--num-prompts` is bounded; bench's saved records are typed and report.md shows their text inert."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError

REPO = Path(__file__).resolve().parent.parent


def test_a_held_run_dir_is_reported_as_in_use(tmp_path):
    from ppspec_cli.running.serve.rundir import in_use_by, lock_run_dir

    d = tmp_path / "run"
    assert in_use_by(d) is None  # absent: free
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\nfrom ppspec_cli.running.serve.rundir import "
            f"lock_run_dir\nrd = lock_run_dir(__import__('pathlib').Path({str(d)!r}))\nprint('held', "
            "flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        who = in_use_by(d)
        assert who is not None and f"pid {holder.pid}" in who
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert in_use_by(d) is None  # released with its holder
    lock_run_dir(d).close()


def test_serve_asks_the_run_dir_before_the_port(monkeypatch):
    """The same serve holds both: the run directory is named, not the port."""
    import inspect

    from ppspec_cli.running.serve import start

    src = inspect.getsource(start.start)
    assert src.index("in_use_by(") < src.index("port_free(")


def test_endpoint_credentials_never_reach_bench_files(tmp_path):
    from ppspec_cli.io import redact, safeio

    redact.register_url("http://alice:pw@10.0.0.1:8000/v1")
    out = tmp_path / "bench.json"
    safeio.write_text(out, json.dumps({"endpoint": "http://alice:pw@10.0.0.1:8000/v1"}))
    assert "alice:pw" not in out.read_text() and "10.0.0.1:8000" in out.read_text()


def test_num_prompts_is_bounded():
    import inprocess

    r = inprocess.run(
        "bench",
        str(REPO / "profiles" / "tiny_cpu_demo.yaml"),
        "--num-prompts",
        str(10**9),
        "--endpoint",
        "http://127.0.0.1:9",
        "--baseline-endpoint",
        "http://127.0.0.1:9",
    )
    assert r.returncode == 2 and "--num-prompts must be in 1..131072" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("bad", [{"completed": "4"}, {"concurrency": 10**400}, {"arm": 1}, {"warnings": "x"}])
def test_a_saved_record_of_another_shape_is_refused_with_its_file(tmp_path, bad):
    from ppspec_cli.verify.bench.results import load_record

    p = tmp_path / "c1.json"
    p.write_text(
        json.dumps(
            {
                "arm": "baseline",
                "concurrency": 1,
                "speculation": False,
                "num_prompts": 4,
                "max_tokens": 8,
                "input_len": 8,
                **bad,
            }
        )
    )
    with pytest.raises(PpspecError) as e:
        load_record(p)
    assert str(p) in e.value.what and e.value.exit_code == 2


def test_report_md_shows_record_text_inert():
    from ppspec_cli.verify.bench.report import markdown

    evil = "<img src=x onerror=alert(1)> [click](javascript:alert(1)) | x"
    doc = {
        "profile": evil,
        "settings": {"concurrency": [1], "num_prompts": 1, "max_tokens": 1, "input_len": 1, "seed": 0},
        "arms": [{"name": evil}],
        "runs": [{"arm": evil, "concurrency": 1, "speculation": False}],
        "speedup": [],
        "warnings": [evil],
        "parity": {},
    }
    md = markdown(doc)
    import re

    assert "<img" not in md and "&lt;img" in md
    # no link can form: every bracket of the record's text is escaped (a `(` after an escaped `]` is plain text)
    assert "\\[click\\](javascript" in md and not re.search(r"(?<!\\)[\[\]]click|click(?<!\\)\]", md)
    assert not re.search(r"(?<!\\)\]\(javascript", md)
    row = next(ln for ln in md.splitlines() if ln.startswith("| 1 "))
    from ppspec_cli.verify.bench.report import FULL_HEADER

    assert row.count("|") - row.count("\\|") == len(FULL_HEADER) + 1
