"""Will it fit (issue 44): GPU memory and KV capacity per stage, judged before the reservation. Real configs
(tests/fixtures/models, SOURCES.md), in-process, no engine. The held-out cases of the issue: a 235B MoE at
PP=4 on 80 GB cards is refused for memory and fits at TP4 x PP2; an 8B whose KV cache cannot hold one 128k
request at the profile's gpu-memory-utilization is refused naming the KV cache and fits at 8k. The agreement
with vLLM's own log lines is tests/test_memory_validation.py."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, fixture_config
from typer.testing import CliRunner

from ppspec_cli.cli import app
from ppspec_cli.errors import PpspecError
from ppspec_cli.planning import weights as wt
from ppspec_cli.planning.memory import GIB, KvLayer, MemoryInput, StageInput, plan_memory
from ppspec_cli.planning.partition import StageEnds, balance_memory, suggest_partition

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
    """A profile over a copy of a real config-only checkpoint, with changes."""

    def make(model: str, **changes) -> Path:
        shutil.copytree(MODELS / model, tmp_path / "target", dirs_exist_ok=True)
        data = {"name": "fit", "target": {"model": str(tmp_path / "target")}, "platform": "cuda"}
        data.update(changes)
        p = tmp_path / "p.yaml"
        p.write_text(yaml.safe_dump(data))
        return p

    return make


def findings(out: str) -> dict[str, dict]:
    d = json.loads(out)
    return {f["code"]: f for f in d["findings"]}


# ---------------------------------------------------------------------------------------------
# The held-out cases


@pytest.mark.parametrize(
    ("version", "budget"),
    [
        ("0.33.0", "72.8"),  # 79.2 GiB x the default gpu-memory-utilization 0.92 (config/cache.py in 0.33)
        ("0.34.0", "79.2"),  # 0.34: unset means 1.0 with the extensible KV cache (config/cache.py:495-500)
    ],
)
def test_a_235b_moe_at_pp4_on_80gb_cards_is_refused_and_fits_at_tp4_pp2(profile, version, budget):
    p = profile(
        "Qwen__Qwen3-235B-A22B",
        topology={"tensor_parallel": 1, "pipeline_parallel": 4, "gpus_per_node": 4},
        hardware="h100",
        engine_version=version,
    )
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert rc == 1 and "memory-weights-exceed" in f, out
    msg = f["memory-weights-exceed"]["message"]
    # 470 GB of bf16 weights over 4 stages: ~111 GiB on each GPU against the release's budget
    assert "stage" in msg and f"over its budget {budget} GiB" in msg, msg
    hint = f["memory-weights-exceed"]["hint"]
    assert "fit on 8 GPU(s) (none of 4 GPUs does): TP 1 x PP 8, TP 2 x PP 4, TP 4 x PP 2, TP 8 x PP 1" in hint, hint
    d = json.loads(out)["memory"]["plan"]
    assert all(105 * GIB < s["weights"] < 115 * GIB for s in d["stages"]), [s["weights"] / GIB for s in d["stages"]]

    p = profile(
        "Qwen__Qwen3-235B-A22B",
        topology={"tensor_parallel": 4, "pipeline_parallel": 2, "gpus_per_node": 8},
        hardware="h100",
        engine_version=version,
    )
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert "memory-weights-exceed" not in f and "kv-cache-too-small" not in f, out
    assert "memory-capacity" in f, out
    mem = json.loads(out)["memory"]["plan"]
    # ~54.8 GiB of weights per GPU; the rest of the budget holds hundreds of thousands of tokens
    assert all(50 * GIB < s["weights"] < 60 * GIB for s in mem["stages"])
    assert mem["engine_tokens"] > 400_000 and mem["limiting"] == 1


def test_an_8b_whose_kv_cache_cannot_hold_one_128k_request_is_refused_and_fits_at_8k(profile):
    engine = {"max-model-len": 131072, "gpu-memory-utilization": 0.3}
    p = profile("meta-llama__Llama-3.1-8B-Instruct", hardware="h100", engine=engine)
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert rc == 1 and set(f) >= {"kv-cache-too-small"} and "memory-weights-exceed" not in f, out
    msg = f["kv-cache-too-small"]["message"]
    # one 131072-token request of 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 16 GiB
    assert "KV cache" in msg and "needs 16.0 GiB" in msg and "To serve at least one request" in msg, msg
    hint = f["kv-cache-too-small"]["hint"]
    fit = int(re.search(r"at most ([\d,]+)", hint).group(1).replace(",", ""))
    assert 40_000 < fit < 70_000, hint

    p = profile("meta-llama__Llama-3.1-8B-Instruct", hardware="h100", engine={**engine, "max-model-len": 8192})
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert rc == 0 and "kv-cache-too-small" not in f and "memory-capacity" in f, out


def test_without_hardware_each_gpu_s_needs_are_shown_and_nothing_is_refused(profile):
    p = profile("Qwen__Qwen3-235B-A22B", topology={"tensor_parallel": 1, "pipeline_parallel": 4, "gpus_per_node": 4})
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert rc == 0 and "memory-needs" in f and "memory-weights-exceed" not in f, out
    assert "nothing is judged without `hardware`" in f["memory-needs"]["message"]
    # --hardware judges what the profile does not name
    rc, out = cli("check", str(p), "--offline", "--json", "--hardware", "h100")
    assert rc == 1 and "memory-weights-exceed" in findings(out)
    rc, out = cli("check", str(p), "--offline", "--json", "--hardware", "h200")  # 111 GiB of 129 GiB: fits
    assert rc == 0 and "memory-capacity" in findings(out), out
    rc, out = cli("check", str(p), "--offline", "--json", "--hardware", "rtx,mem=200")
    assert rc == 0 and "memory-capacity" in findings(out), out
    rc, out = cli("check", str(p), "--offline", "--json", "--hardware", "b300")
    assert rc == 1 and "hardware-unknown" in findings(out)
    # the plan's table: weights on one GPU and KV tokens per stage
    _, text = cli("plan", str(p), "--offline", "--hardware", "rtx,mem=200")
    assert "weights/GPU" in text and "KV tokens" in text and "memory: rtx" in text, text


def test_deepseek_v3_mla_and_mtp_plans_weights_and_predicts_on_a_login_node(profile):
    """Issue 43, item 3: MLA + MoE + MTP from config.json alone (FP8 block-quantized)."""
    p = profile(
        "deepseek-ai__DeepSeek-V3",
        drafter={"method": "mtp", "num_speculative_tokens": 1},
        topology={"tensor_parallel": 8, "pipeline_parallel": 2, "nodes": 2, "gpus_per_node": 8},
        hardware="h200",
    )
    rc, out = cli("plan", str(p), "--offline", "--json", "--predict")
    d = json.loads(out)
    assert all(s["weight_bytes"] for s in d["plan"]["stages"]), d["plan"]["stages"]
    assert "unknown" not in json.dumps(d["plan"]["stages"])
    assert d["prediction"]["levels"], d.get("prediction")
    kv = d["prediction"]["assumptions"]["kv_cache"]
    assert kv["kv_tokens"] == d["memory"]["plan"]["engine_tokens"] and kv["per_concurrency"][0]["fits"]
    # MLA caches one 576-element latent per token per layer on every TP rank: 1152 bytes in bf16
    mem = d["memory"]["plan"]
    assert mem["stages"][0]["bytes_per_block"] == 31 * 1152 * mem["block_size"]


def test_predict_only_predicts_layouts_that_fit(profile):
    p = profile(
        "deepseek-ai__DeepSeek-V3",
        drafter={"method": "mtp", "num_speculative_tokens": 1},
        topology={"tensor_parallel": 1, "pipeline_parallel": 4, "gpus_per_node": 4},
        hardware="h100",
    )
    rc, out = cli("plan", str(p), "--offline", "--json", "--predict")
    d = json.loads(out)
    assert rc == 1 and d["prediction"]["predicted"] is False and "does not fit h100" in d["prediction"]["reason"]
    rc, text = cli("plan", str(p), "--offline", "--predict")
    assert "not predicted: the layout does not fit h100" in text and "TPOT" not in text


# ---------------------------------------------------------------------------------------------
# Weights: the formulas and the TP rules


def test_the_formulas_give_the_model_cards_parameter_counts():
    def params(model: str, layout: str, mtp: int = 0) -> float:
        ts = wt.config_tensors(layout, fixture_config(model), 1, None, mtp_layers=mtp)
        return sum(t.nbytes for t in ts) / 1e9

    assert 30.4 < params("Qwen__Qwen3-30B-A3B", "sparse-gated") < 30.6  # "30.5B"
    assert 235.0 < params("Qwen__Qwen3-235B-A22B", "sparse-gated") < 235.2  # "235B"
    assert 670.9 < params("deepseek-ai__DeepSeek-V3", "mla-sparse-gated") < 671.1  # "671B" main model
    # + the MTP module with its embedding and head copies: the model card's "685B"
    cfg = fixture_config("deepseek-ai__DeepSeek-V3")
    copies = 2 * cfg["vocab_size"] * cfg["hidden_size"] / 1e9
    assert 684 < params("deepseek-ai__DeepSeek-V3", "mla-sparse-gated", mtp=1) + copies < 686
    # the 8B's formula is its index's total within 8 KiB
    total = json.loads((MODELS / "meta-llama__Llama-3.1-8B-Instruct" / "model.safetensors.index.json").read_text())[
        "metadata"
    ]["total_size"]
    got = sum(
        t.nbytes for t in wt.config_tensors("dense-gated", fixture_config("meta-llama__Llama-3.1-8B-Instruct"), 2, None)
    )
    assert abs(got - total) < 8 << 10


def test_fp8_block_quantization_counts_one_byte_and_the_block_scales():
    cfg = fixture_config("deepseek-ai__DeepSeek-V3")
    q = wt.quant_of(cfg)
    assert q.method == "fp8" and q.block == (128, 128)
    # one [7168, 2048] expert projection: 1 byte per element + an fp32 scale per 128 x 128 block
    assert q.nbytes(7168, 2048) == 7168 * 2048 + 56 * 16 * 4
    ts = wt.config_tensors("mla-sparse-gated", cfg, 2, q)
    by = {t.name: t for t in ts}
    assert by["model.embed_tokens.weight"].nbytes == 129280 * 7168 * 2  # the embedding stays bf16
    assert by["model.layers.5.mlp.gate.weight"].nbytes == 256 * 7168 * 2  # so does the router
    assert wt.quant_of({"quantization_config": {"quant_method": "mxfp4"}}).experts_only
    nv = wt.quant_of({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})
    assert nv.nbytes(16, 16) == 16 * 16 // 2 + 16  # 4 bits + an FP8 scale per 16 elements
    assert wt.quant_of({"quantization_config": {"quant_method": "bitsandbytes"}}) == "unknown"


def test_tp_splits_each_tensor_the_way_vllm_shards_it():
    kv = wt.Tensor("model.layers.0.self_attn.k_proj.weight", 4 * 128 * 4096 * 2, "kv", heads=4)
    assert wt.per_gpu(kv, 4, 4) == kv.nbytes / 4  # one KV head per rank
    assert wt.per_gpu(kv, 8, 8) == kv.nbytes / 4  # TP 8 > 4 KV heads: each rank keeps a replicated head
    emb = wt.Tensor("model.embed_tokens.weight", 151936 * 4096 * 2, "vocab", rows=151936)
    # 151936 rows padded to a multiple of 64 (151936 already is), then / TP
    assert wt.per_gpu(emb, 8, 8) == 151936 // 8 * 4096 * 2
    odd = wt.Tensor("lm_head.weight", 32001 * 10, "vocab", rows=32001)
    assert wt.per_gpu(odd, 2, 2) == math.ceil(32064 / 2) * 10  # 32001 -> 32064 rows
    for name, shard in (
        ("model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "replicated"),
        ("model.layers.3.self_attn.kv_b_proj.weight", "split"),
        ("model.layers.3.mlp.gate.weight", "replicated"),
        ("model.layers.3.mlp.gate_proj.weight", "split"),
        ("model.layers.3.mlp.experts.17.down_proj.weight_scale_inv", "experts"),
        ("model.layers.3.mlp.shared_experts.up_proj.weight", "split"),
        ("model.layers.3.input_layernorm.weight", "replicated"),
        ("fc.weight", "replicated"),
        ("model.layers.61.eh_proj.weight", "replicated"),
    ):
        assert wt.shard_of(name) == (shard, True), name
    experts = wt.Tensor("model.layers.3.mlp.experts.w13", 800, "experts")
    assert wt.per_gpu(experts, 2, 8) == 100  # TP 2 x DP 4: experts spread over 8 ranks


# ---------------------------------------------------------------------------------------------
# The KV cache, as vLLM sizes it


def _mi(stages, **kw) -> MemoryInput:
    base = {
        "device_bytes": 80 * GIB,
        "utilization": 0.9,
        "max_model_len": 4096,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "block_size": 16,
    }
    return MemoryInput(stages=tuple(stages), **{**base, **kw})


def test_the_engine_takes_the_smallest_stage_and_logs_tokens_as_vllm_does():
    layer = KvLayer(128 * 1024 // 32)  # Llama-3.1-8B: 4 KiB per token per layer
    light = StageInput(8 * GIB, (layer,) * 16, activation=GIB)
    heavy = StageInput(12 * GIB, (layer,) * 16, activation=2 * GIB)  # + lm_head and drafter
    mp = plan_memory(_mi([light, heavy]))
    budget = math.ceil(80 * GIB * 0.9)
    blocks = [int((budget - 9 * GIB) // (16 * 4096 * 16)), int((budget - 14 * GIB) // (16 * 4096 * 16))]
    assert [s.num_blocks for s in mp.stages] == blocks
    assert mp.engine_blocks == min(blocks) and mp.limiting == 1
    # kv_cache_utils.get_kv_cache_capacity: int(num_blocks / cdiv(max_model_len, block) x max_model_len)
    assert mp.engine_tokens == int(min(blocks) / (4096 // 16) * 4096)
    assert not mp.short_of_one_request() and mp.weights_fit


def test_a_sliding_window_layer_holds_a_bounded_number_of_blocks():
    full, window = KvLayer(1000), KvLayer(1000, window=128)
    mp = plan_memory(_mi([StageInput(GIB, (full, window))], max_model_len=32768, max_num_batched_tokens=2048))
    s = mp.stages[0]
    # full: 32768 / 16 blocks; window: cdiv(min(127 + 2048, 32768), 16) + 1 (kv_cache_interface.py:945-970)
    assert s.request_bytes == (2048 + math.ceil(2175 / 16) + 1) * 16 * 1000


def test_a_declared_partition_that_leaves_kv_memory_unused_is_a_warning(profile):
    p = profile(
        "meta-llama__Llama-3.3-70B-Instruct",
        topology={"tensor_parallel": 1, "pipeline_parallel": 2, "gpus_per_node": 2, "layer_partition": [30, 50]},
        hardware="h200",
        engine={"max-model-len": 8192},
    )
    rc, out = cli("check", str(p), "--offline", "--json")
    f = findings(out)
    assert "partition-kv-unused" in f and "stage 1" in f["partition-kv-unused"]["message"], out
    p = profile(
        "meta-llama__Llama-3.3-70B-Instruct",
        topology={"tensor_parallel": 1, "pipeline_parallel": 2, "gpus_per_node": 2, "layer_partition": [40, 40]},
        hardware="h200",
        engine={"max-model-len": 8192},
    )
    rc, out = cli("check", str(p), "--offline", "--json")
    assert "partition-kv-unused" not in findings(out), out


def test_the_memory_balance_keeps_the_time_balance_and_lifts_the_smallest_stage():
    n, pp = 32, 2
    time = [1.0] * n
    mem = [1.0] * n
    kv = [1.0] * n
    # the last stage carries an lm_head + 3 drafter passes of time but holds the drafter once, plus its KV
    got = balance_memory(
        time, mem, kv, pp, budget=40.0, ends=StageEnds(last_time=4.0, last_mem=6.0, last_kv=1.0), slack=0.0
    )
    assert got == suggest_partition(time, pp, last_extra=4.0)  # no slack: the time optimum
    got = balance_memory(
        time, mem, kv, pp, budget=40.0, ends=StageEnds(last_time=4.0, last_mem=6.0, last_kv=1.0), slack=0.2
    )
    caps = [(40.0 - got[0]) / got[0], (40.0 - got[1] - 6.0) / (got[1] + 1.0)]
    best_time = suggest_partition(time, pp, last_extra=4.0)
    caps_time = [(40.0 - best_time[0]) / best_time[0], (40.0 - best_time[1] - 6.0) / (best_time[1] + 1.0)]
    assert min(caps) >= min(caps_time) and max(got[0], got[1] + 4.0) <= 1.2 * max(best_time[0], best_time[1] + 4.0)
    assert balance_memory(time, mem, [0.0] * n, pp, budget=40.0) is None  # no KV known: nothing to balance


def test_deepseek_v3_with_its_index_uses_the_index_total(profile, tmp_path):
    """Issue 43, item 3: with the index (92k tensor names, MTP layer 61 with its own embedding and head copies),
    the formula is scaled to the index's total_size, less the copies vLLM shares."""
    cfg = fixture_config("deepseek-ai__DeepSeek-V3")
    formula = wt.config_tensors("mla-sparse-gated", cfg, 2, wt.quant_of(cfg), mtp_layers=1)
    copies = 2 * cfg["vocab_size"] * cfg["hidden_size"] * 2
    names = {}
    for t in formula:
        if ".experts." in t.name:  # the checkpoint names every expert and its block scales
            head, proj = t.name.rsplit(".experts.", 1)
            for j in range(cfg["n_routed_experts"]):
                names[f"{head}.experts.{j}.{proj}"] = "model-00001-of-00163.safetensors"
                names[f"{head}.experts.{j}.{proj}_scale_inv"] = "model-00001-of-00163.safetensors"
        else:
            names[t.name] = "model-00001-of-00163.safetensors"
    names["model.layers.61.embed_tokens.weight"] = names["model.layers.61.shared_head.head.weight"] = "x.safetensors"
    total = round(sum(t.nbytes for t in formula) * 1.01) + copies  # 1% the formula does not know of
    p = profile(
        "deepseek-ai__DeepSeek-V3",
        drafter={"method": "mtp", "num_speculative_tokens": 1},
        topology={"tensor_parallel": 8, "pipeline_parallel": 2, "nodes": 2, "gpus_per_node": 8},
        hardware="h200",
    )
    (tmp_path / "target" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": names})
    )
    rc, out = cli("plan", str(p), "--offline", "--json", "--predict")
    d = json.loads(out)
    assert len(names) > 90_000 and d["memory"]["weights_source"] == "the index and the config formula"
    assert any(
        "scaled x1.010 to the index's total_size (less 2 MTP embedding/head copies" in n for n in d["memory"]["notes"]
    )
    assert d["prediction"]["levels"]


def test_a_tied_lm_head_is_the_embedding_once_at_pp1_and_again_on_the_last_stage(profile):
    """Llama-3.2-1B ties its lm_head to the embedding: at PP=1 one matrix, at PP=2 the last stage builds it."""
    cfg = fixture_config("meta-llama__Llama-3.2-1B-Instruct")
    assert cfg["tie_word_embeddings"] is True
    vocab = cfg["vocab_size"] * cfg["hidden_size"] * 2
    layers = sum(t.nbytes for t in wt.config_tensors("dense-gated", cfg, 2, None) if t.layer is not None)
    for pp, want in ((1, [layers + vocab]), (2, [layers / 2 + vocab, layers / 2 + vocab])):
        p = profile("meta-llama__Llama-3.2-1B-Instruct", topology={"pipeline_parallel": pp}, hardware="h100")
        _, out = cli("plan", str(p), "--offline", "--json")
        got = [s["weights"] for s in json.loads(out)["memory"]["plan"]["stages"]]
        assert all(abs(g - w) < 64 << 10 for g, w in zip(got, want)), (pp, got, want)


def test_an_index_total_alone_gives_memory_and_a_prediction_for_a_family_without_a_formula(profile, tmp_path):
    """Issue 43, item 3: the index's total is usable where no pack declares a formula (an architecture no pack
    describes): weights per GPU spread over the layers (a lower bound at TP > 1, said), and --predict runs."""
    p = profile(
        "deepseek-ai__DeepSeek-V3",
        drafter={"method": "mtp", "num_speculative_tokens": 1},
        topology={"tensor_parallel": 8, "pipeline_parallel": 2, "nodes": 2, "gpus_per_node": 8},
        hardware="h200",
        adapter="none",
    )
    cfg = json.loads((tmp_path / "target" / "config.json").read_text())
    cfg["architectures"] = ["NoPackDescribesThisForCausalLM"]
    (tmp_path / "target" / "config.json").write_text(json.dumps(cfg))
    names = {f"model.layers.{i}.mlp.down_proj.weight": "a.safetensors" for i in range(62)}
    names |= {"model.embed_tokens.weight": "a.safetensors", "lm_head.weight": "a.safetensors"}
    (tmp_path / "target" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 688_000_000_000}, "weight_map": names})
    )
    rc, out = cli("plan", str(p), "--offline", "--json", "--predict")
    d = json.loads(out)
    assert d["memory"]["weights_source"] == "the index's total_size", d["memory"]
    assert any("a lower bound at TP > 1" in n for n in d["memory"]["notes"])
    assert d["prediction"]["levels"], d["prediction"]
    assert any("index's total_size spread over the layers" in n for n in d["prediction"]["assumptions"]["notes"])
