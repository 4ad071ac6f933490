"""`ppspec check | plan | serve --dry-run | export` on disaggregated prefill/decode profiles
(issue 15), in-process through the CLI: both engines, the KV layer names side by side, each
engine's launch with its --kv-transfer-config, the router line, and the refusals."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import fixture_config
from typer.testing import CliRunner

from ppspec_cli.cli import app
from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.operation import gather as gather_mod

pytestmark = pytest.mark.slow  # builds the tiny demo model

REPO = Path(__file__).resolve().parent.parent
TINY = str(REPO / "profiles" / "tiny_cpu_pd.yaml")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    if isinstance(r.exception, PpspecError):
        return r.exception.exit_code, r.stdout, r.exception.render()
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def test_tiny_pd_check_plan_and_both_launches(env):
    code, out, _ = cli("check", TINY)
    assert (
        code == 0
        and "tiny-cpu-pd-prefill" in out
        and "tiny-cpu-pd-decode" in out
        and "KV connector ExampleConnector" in out
    )
    code, out, _ = cli("plan", TINY, "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["kv_connector"] == "ExampleConnector"
    assert [r["partition"] for r in (data["roles"]["prefill"]["plan"], data["roles"]["decode"]["plan"])] == [
        [3, 3],
        [6],
    ]
    assert data["kv_layer_names"] == [
        {"first": 0, "last": 2, "prefill": ["target@0"], "decode": ["target@0"], "mismatch": False},
        {"first": 3, "last": 5, "prefill": ["target@1"], "decode": ["target@0"], "mismatch": False},
    ]
    code, out, _ = cli("serve", TINY, "--dry-run", "--json")
    d = json.loads(out)
    assert code == 0 and set(d["roles"]) == {"prefill", "decode"}
    for role, pp, port in (("prefill", "2", "8100"), ("decode", "1", "8200")):
        (node,) = d["roles"][role]["nodes"]
        argv = node["argv"]
        assert argv[argv.index("--pipeline-parallel-size") + 1] == pp and argv[argv.index("--port") + 1] == port
        assert argv[argv.index("--served-model-name") + 1] == "tiny-cpu-pd"
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv == {
            "kv_connector": "ExampleConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": "/tmp/ppspec-tiny-cpu-pd-kv"},
        }
        assert d["roles"][role]["run_dir"].endswith(f"tiny-cpu-pd-{role}")
    router = shlex.split(d["router"]["shell"])
    assert d["router"]["script"] == "examples/disaggregated/disaggregated_serving/disagg_proxy_demo.py"
    assert (
        router[router.index("--prefill") + 1] == "127.0.0.1:8100"
        and router[router.index("--decode") + 1] == "127.0.0.1:8200"
    )
    # one role: only that engine's launch, with the same config
    code, out, _ = cli("serve", TINY, "--role", "decode", "--dry-run", "--json")
    one = json.loads(out)
    assert code == 0 and one["nodes"][0]["argv"] == d["roles"]["decode"]["nodes"][0]["argv"]


def test_refusals(env):
    code, _, err = cli("serve", TINY)
    assert code == 2 and "start each with --role" in err
    code, _, err = cli("serve", str(REPO / "profiles" / "tiny_cpu_demo.yaml"), "--role", "prefill", "--dry-run")
    assert code == 2 and "--role is for disaggregated profiles" in err
    code, _, err = cli("serve", TINY, "--role", "mixed", "--dry-run")
    assert code == 2 and "not a role" in err
    code, _, err = cli("export", "slurm", TINY)
    assert code == 2 and "export writes one engine" in err


def test_k3_plan_marks_the_mismatch_and_serve_refuses(env, make_checkpoint, monkeypatch, tmp_path):
    """The field report's case with an EAGLE-1-style drafter and no global-ids pack (vLLM 0.32):
    the name table marks model.layers.46 and .93, check fails, serve --role refuses to start."""
    monkeypatch.setattr(gather_mod, "installed_vllm", lambda: VllmInstall("0.32.0", "vllm", "cuda"))  # the reader
    text = {**fixture_config("meta-llama__Llama-3.1-8B-Instruct"), "num_hidden_layers": 93}
    text.pop("architectures")
    t = make_checkpoint(
        "k3", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )
    dr = make_checkpoint(
        "e1",
        {
            "architectures": ["EagleLlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "vocab_size": 128256,
        },
    )
    data = yaml.safe_load((REPO / "profiles" / "kimi_k3_dspark_pd.yaml").read_text())
    data.update(
        target={"model": str(t)},
        drafter={"method": "eagle", "model": str(dr), "num_speculative_tokens": 3},
        adapter="kimi_k3",
    )
    prof = tmp_path / "k3.yaml"
    prof.write_text(yaml.safe_dump(data))
    code, out, _ = cli("plan", str(prof), "--json")
    rows = {(r["first"], r["last"]): r for r in json.loads(out)["kv_layer_names"]}
    assert rows[(46, 46)]["mismatch"] and rows[(46, 46)]["prefill"] == ["draft@1", "target@0"]
    assert rows[(93, 93)]["mismatch"] and rows[(93, 93)]["prefill"] == [] and rows[(93, 93)]["decode"] == ["draft@0"]
    assert not rows[(0, 45)]["mismatch"]
    code, out, _ = cli("plan", str(prof))
    assert "MISMATCH" in out
    code, out, _ = cli("check", str(prof))
    assert code == 1 and "pd-draft-layer-names" in out
    monkeypatch.setenv("VLLM_API_KEY", "x")
    code, out, err = cli("serve", str(prof), "--role", "decode")
    assert code == 1 and "refusing to launch" in err and "pd-draft-layer-names" in err  # before any engine start
