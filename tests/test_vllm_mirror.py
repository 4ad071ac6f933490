"""ppspec's plan functions agree with the installed vLLM's own, on many generated inputs.

If vLLM changes a rule (partition, tap config keys, +1 offsets, defaults, sorting, slot layout,
speculators conversion, which targets opt in), these property tests fail before a user's launch
does. The number of examples each property tried is printed by the last test (run with -s or -rA).
"""

from __future__ import annotations

import ast
import copy
import importlib
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.vllm

hypothesis = pytest.importorskip("hypothesis", reason="the [test] extra (hypothesis) is needed for the property tests")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from mirror.cases import VERSIONS, Case, case_params, refusal_matching  # noqa: E402

from ppspec_cli.checkpoint.reader import speculators_view  # noqa: E402
from ppspec_cli.knowledge import facts  # noqa: E402
from ppspec_cli.knowledge.engine import installed_vllm  # noqa: E402
from ppspec_cli.knowledge.methods.block import parallel_drafting_token  # noqa: E402
from ppspec_cli.planning.plan import (  # noqa: E402
    EngineTaps,
    PlanInputs,
    build_plan,
    default_partition,
    default_taps,
    normalize_taps,
    stage_bounds,
    stage_taps,
    upstream_slots,
    v1_taps_from_config,
    v2_taps_from_config,
)

EXAMPLES: Counter = Counter()
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@pytest.fixture(scope="module")
def vllm_mods():
    """Import the vLLM functions once (importing vLLM takes tens of seconds on a small CPU box)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (install ppspec[cpu] or [cuda])")
    from vllm import envs
    from vllm.distributed import utils as dist_utils
    from vllm.model_executor.models.interfaces import EagleModelMixin, SupportsEagle3
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return SimpleNamespace(
        envs=envs,
        get_pp_indices=dist_utils.get_pp_indices,
        v2=eagle3_utils.get_eagle3_aux_layers_from_config,
        v1=GPUModelRunner._get_eagle3_aux_layers_from_config,
        EagleModelMixin=EagleModelMixin,
        SupportsEagle3=SupportsEagle3,
        SpeculatorsConfig=SpeculatorsConfig,
    )


@pytest.fixture(scope="module")
def env_uncached(vllm_mods):
    """vllm.envs reads VLLM_PP_LAYER_PARTITION on every access unless enable_envs_cache() wrapped
    its __getattr__ in functools.cache (the engine does that after start-up); make sure it is off."""
    envs = vllm_mods.envs
    was = envs._is_envs_cache_enabled()
    envs.disable_envs_cache()
    assert not envs._is_envs_cache_enabled()
    saved = os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    yield
    if saved is None:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    else:
        os.environ["VLLM_PP_LAYER_PARTITION"] = saved
    if was:
        envs.enable_envs_cache()


def _vllm_bounds(m, n: int, pp: int, env: str | None):
    """[(start, end)] per rank from vLLM, or the exception type it raises."""
    if env is None:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    else:
        os.environ["VLLM_PP_LAYER_PARTITION"] = env
    try:
        return [m.get_pp_indices(n, r, pp) for r in range(pp)]
    except ValueError:
        return ValueError
    finally:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)


# ---------------------------------------------------------------------------------------------
# Partition


def test_env_is_read_at_call_time(vllm_mods, env_uncached):
    """The precondition of the partition properties: setting the variable changes vLLM's answer."""
    assert _vllm_bounds(vllm_mods, 10, 2, "3,7") == [(0, 3), (3, 10)]
    assert _vllm_bounds(vllm_mods, 10, 2, None) == [(0, 5), (5, 10)]


@settings(max_examples=600, **SETTINGS)
@given(n=st.integers(1, 200), pp=st.integers(1, 16))
def test_default_partition_matches_get_pp_indices(vllm_mods, env_uncached, n, pp):
    EXAMPLES["default partition"] += 1
    assert [tuple(b) for b in stage_bounds(default_partition(n, pp))] == _vllm_bounds(vllm_mods, n, pp, None)


@settings(max_examples=400, **SETTINGS)
@given(data=st.data(), pp=st.integers(1, 8))
def test_valid_partitions_are_accepted_by_both(vllm_mods, env_uncached, data, pp):
    """Valid layer_partition lists (the profile's field) always agree, rank by rank."""
    parts = data.draw(st.lists(st.integers(1, 30), min_size=pp, max_size=pp))
    EXAMPLES["valid partitions"] += 1
    n = sum(parts)
    assert _vllm_bounds(vllm_mods, n, pp, ",".join(map(str, parts))) == [tuple(b) for b in stage_bounds(parts)]


# ---------------------------------------------------------------------------------------------
# Tap config rules

_IDS = st.lists(st.integers(-2, 130), max_size=5)
_OPT_IDS = st.one_of(st.none(), _IDS)
_CFG = st.fixed_dictionaries(
    {},
    optional={
        "eagle_aux_hidden_state_layer_ids": _OPT_IDS,
        "dflash_config": st.one_of(
            st.none(),
            st.text(max_size=2),
            st.fixed_dictionaries(
                {}, optional={"target_layer_ids": _OPT_IDS, "layer_ids": _OPT_IDS, "mask_token_id": st.integers(0, 9)}
            ),
        ),
        "dspark_target_layer_ids": _OPT_IDS,
        "model_type": st.sampled_from(["llama", "qwen3", "deepseek_v41", "deepseek_v4", "kimi_k3"]),
        "target_layer_ids": _OPT_IDS,
        "eagle_config": st.one_of(
            st.none(),
            st.lists(st.integers(0, 3), max_size=2),
            st.fixed_dictionaries(
                {},
                optional={
                    "eagle_aux_hidden_state_layer_ids": _OPT_IDS,
                    "layer_ids": _OPT_IDS,
                    "use_aux_hidden_state": st.booleans(),
                },
            ),
        ),
    },
)


def _spec(cfg: dict):
    """A SpeculativeConfig stand-in carrying `draft_model_config.hf_config` (attributes = config keys)."""
    return SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(**copy.deepcopy(cfg))))


@settings(max_examples=1500, **SETTINGS)
@given(cfg=_CFG)
def test_v2_taps_match_vllm(vllm_mods, cfg):
    EXAMPLES["V2 tap configs"] += 1
    assert v2_taps_from_config(cfg).taps == vllm_mods.v2(_spec(cfg))


@settings(max_examples=1500, **SETTINGS)
@given(cfg=_CFG)
def test_v1_taps_match_vllm(vllm_mods, cfg):
    EXAMPLES["V1 tap configs"] += 1
    runner = SimpleNamespace(speculative_config=_spec(cfg))
    assert v1_taps_from_config(cfg).taps == vllm_mods.v1(runner)


def test_tap_rules_on_the_fixture_configs(vllm_mods):
    import json

    from conftest import MODELS

    seen = 0
    for p in sorted(MODELS.glob("*/*.json")):
        cfg = json.loads(p.read_text())
        if "weight_map" in cfg or "shard_count" in cfg:
            continue
        view = speculators_view(cfg)
        assert v2_taps_from_config(view).taps == vllm_mods.v2(_spec(view)), p
        assert v1_taps_from_config(view).taps == vllm_mods.v1(SimpleNamespace(speculative_config=_spec(view))), p
        seen += 1
    assert seen >= 10


_SPECULATORS = st.builds(
    lambda kind, model_type, eagle_ids, aux_ids: {
        "speculators_model_type": kind,
        "speculators_config": {"algorithm": kind},
        "transformer_layer_config": {
            "model_type": model_type,
            "num_hidden_layers": 1,
            "hidden_size": 64,
            "vocab_size": 100,
        },
        "mask_token_id": 5,
        "draft_vocab_size": 32,
        **({"eagle_aux_hidden_state_layer_ids": eagle_ids} if eagle_ids is not None else {}),
        **({"aux_hidden_state_layer_ids": aux_ids} if kind in ("dflash", "dflash2", "dspark") else {}),
    },
    kind=st.sampled_from(["eagle3", "peagle", "dflash", "dflash2", "dspark"]),
    model_type=st.sampled_from(["llama", "qwen3"]),
    eagle_ids=_OPT_IDS,
    aux_ids=_IDS,
)


def _vllm_parallel_token(hf: dict):
    """The token vLLM's V2 runner feeds at parallel-drafting slots (None where it refuses)."""
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    try:
        return get_parallel_drafting_token_id(SimpleNamespace(**copy.deepcopy(hf)))
    except ValueError:
        return None


@settings(max_examples=400, **SETTINGS)
@given(cfg=_SPECULATORS)
def test_speculators_conversion_matches_vllm(vllm_mods, cfg):
    """speculators_view + our V2 reading == vLLM's speculators conversion + its V2 reading."""
    EXAMPLES["speculators configs"] += 1
    converted = vllm_mods.SpeculatorsConfig.extract_transformers_pre_trained_config(copy.deepcopy(cfg))
    assert v2_taps_from_config(speculators_view(cfg)).taps == vllm_mods.v2(_spec(converted))
    assert speculators_view(cfg).get("architectures") == converted.get("architectures")
    assert parallel_drafting_token(speculators_view(cfg))[1] == _vllm_parallel_token(converted)
    method = vllm_mods.SpeculatorsConfig.build_vllm_speculative_config(
        {
            **copy.deepcopy(cfg),
            "speculators_config": {"proposal_methods": [{"speculative_tokens": 3}], "verifier": {"name_or_path": "x"}},
        }
    )["method"]
    assert facts.method_of_drafter_config(cfg) == method


# ---------------------------------------------------------------------------------------------
# Defaults, sorting, slots


class _Holder:
    """A decoder holding `n` layers, as SupportsEagle3's default-tap method expects to find it."""

    def __init__(self, n: int):
        self.model = SimpleNamespace(layers=[None] * n)


@settings(max_examples=300, **SETTINGS)
@given(n=st.integers(1, 400))
def test_default_taps_match_vllm(vllm_mods, n):
    EXAMPLES["default taps"] += 1
    raw = vllm_mods.SupportsEagle3.get_eagle3_default_aux_hidden_state_layers(_Holder(n))
    holder = type("M", (vllm_mods.EagleModelMixin,), {})()
    holder._set_aux_hidden_state_layers(raw)
    assert default_taps(n) == holder.aux_hidden_state_layers


@settings(max_examples=300, **SETTINGS)
@given(taps=st.lists(st.integers(0, 200), max_size=8))
def test_sorting_and_dedup_match_vllm(vllm_mods, taps):
    EXAMPLES["sort/dedup"] += 1
    holder = type("M", (vllm_mods.EagleModelMixin,), {})()
    holder._set_aux_hidden_state_layers(tuple(taps))
    assert normalize_taps(tuple(taps)) == holder.aux_hidden_state_layers


@pytest.fixture(scope="module")
def fake_pp(vllm_mods):
    """Let EagleModelMixin compute its PP slot layout without a process group: a stand-in
    get_pp_group whose rank the test sets."""
    from vllm.distributed import parallel_state

    state = SimpleNamespace(rank=0, size=1)
    saved = (parallel_state.get_pp_group, parallel_state.model_parallel_is_initialized)
    parallel_state.get_pp_group = lambda: SimpleNamespace(
        world_size=state.size, is_first_rank=state.rank == 0, is_last_rank=state.rank == state.size - 1
    )
    parallel_state.model_parallel_is_initialized = lambda: True
    yield state
    parallel_state.get_pp_group, parallel_state.model_parallel_is_initialized = saved


def _vllm_stage_capture(m, fake_pp, taps: tuple[int, ...], bounds: list[tuple[int, int]]):
    """Run vLLM's own capture and slot bookkeeping (EagleModelMixin) over each stage's layer loop;
    yields (the stage's mixin, the taps it captured) rank by rank."""
    for rank, (start, end) in enumerate(bounds):
        fake_pp.rank, fake_pp.size = rank, len(bounds)
        mixin = type("M", (m.EagleModelMixin,), {})()
        mixin.start_layer = start
        mixin._set_aux_hidden_state_layers(taps)
        aux: list[int] = []
        if rank == 0:  # the model's forward captures the embeddings as tap `start` on the first rank
            mixin._maybe_add_hidden_state(aux, start, start, None)
        for idx in range(start, end):  # ... and tap idx + 1 after layer idx
            mixin._maybe_add_hidden_state(aux, idx + 1, idx + 1, None)
        yield mixin, aux


@settings(max_examples=500, **SETTINGS)
@given(data=st.data(), n=st.integers(2, 120), pp=st.integers(2, 8))
def test_stage_taps_slots_and_relay_match_vllm(vllm_mods, fake_pp, data, n, pp):
    """For each stage, run vLLM's own capture and slot bookkeeping (EagleModelMixin) over the
    stage's layer loop: the taps it captures, the upstream slot base (bisect_right) and the slots
    the hop after it carries equal ppspec's plan."""
    taps = tuple(sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6)))))
    EXAMPLES["stage taps / slots / relay"] += 1
    plan = build_plan(
        PlanInputs(
            num_layers=n,
            pp=pp,
            layer_partition=None,
            method="eagle3",
            runner="v2",
            taps=EngineTaps(taps, "test"),
            hidden_size=8,
            dtype_bytes=2,
            n_draft_layers=1,
            draft_numbering="global",
            drafter_needs_target_embed=True,
        )
    )
    bounds = stage_bounds(default_partition(n, pp))
    assert [list(s.taps) for s in plan.stages] == [list(t) for t in stage_taps(taps, bounds)]
    relayed = 0  # slots arriving from upstream
    for rank, (m, aux) in enumerate(_vllm_stage_capture(vllm_mods, fake_pp, taps, bounds)):
        start = bounds[rank][0]
        stage = plan.stages[rank]
        assert tuple(aux) == stage.taps
        assert m._aux_slot_base_cached == stage.upstream_slots == (upstream_slots(taps, start) if rank else 0)
        assert m._aux_slot_base_cached == relayed  # what the previous hop delivered
        local = m.pack_local_aux_hidden_states(aux)
        assert sorted(local) == [f"{m.AUX_HIDDEN_STATE_KEY}{m._aux_slot_base_cached + i}" for i in range(len(aux))]
        relayed = m._aux_slot_base_cached + len(local)
        if stage.relay_out is not None:
            assert stage.relay_out.slots == relayed
            assert stage.relay_out.bytes_per_token == relayed * 8 * 2
    assert relayed == len([t for t in taps if t <= n])


# ---------------------------------------------------------------------------------------------
# Which targets opt in to relaying taps over PP


def test_pack_support_tables_match_the_installed_vllm_classes(vllm_mods):
    """Every inner decoder class a pack names (on platforms whose implementation imports on this
    CPU host; ROCm modules abort the process here) opts in to relaying taps over PP exactly when
    the pack's support table says `native` for the installed vLLM; `patched` and `unsupported`
    mean the unpatched class does not."""
    from ppspec_cli.knowledge.engine import installed_vllm
    from ppspec_cli.knowledge.packs import PLATFORMS, inner_decoder_ref, load_packs

    version = installed_vllm()[0]
    checked, not_importable = 0, []
    for pack in load_packs():
        if "aux_relay_over_pp" not in pack.capabilities or not pack.supports_vllm(version):
            continue
        # the pack's own fact, else the decoder vLLM's source builds (knowledge/arch): packs keep only what vLLM lacks
        pairs = {
            (platform, ref)
            for part in pack.parts
            for arch in part.matches.targets
            for platform in PLATFORMS
            if platform != "rocm" and (ref := inner_decoder_ref(part, arch, platform, version))
        }
        for platform, ref in sorted(pairs):
            module, _, cls_name = ref.partition(":")
            try:
                cls = getattr(importlib.import_module(module), cls_name)
            except ImportError as e:  # e.g. MiniMax-M3 needs torchvision, which the CPU install removes
                not_importable.append(f"{ref}: {e}")
                continue
            got = getattr(cls, "supports_aux_hidden_states_over_pp", False) is True
            status = pack.supports("aux_relay_over_pp", platform, version).status
            assert status in ("native", "patched", "unsupported"), (pack.name, ref, platform, status)
            assert got is (status == "native"), f"{pack.name} {ref} on {platform}: opts in={got}, pack says {status}"
            EXAMPLES["target families"] += 1
            checked += 1
    assert checked >= 10, (checked, not_importable)


def test_target_embed_methods_match_vllm(vllm_mods, fake_pp):
    """Which methods make the last stage build the target's embedding (spec_decode_needs_target_embed)."""
    from vllm.model_executor.models.utils import spec_decode_needs_target_embed

    for method in sorted(facts.VLLM_METHODS):
        cfg = SimpleNamespace(speculative_config=SimpleNamespace(method=method))
        for rank, size in ((1, 2), (0, 2), (0, 1)):
            fake_pp.rank, fake_pp.size = rank, size
            expected = method in facts.TARGET_EMBED_METHODS and size > 1 and rank == size - 1
            assert spec_decode_needs_target_embed(cfg) == expected, (method, rank, size)
    assert spec_decode_needs_target_embed(SimpleNamespace(speculative_config=None)) is False


# ---------------------------------------------------------------------------------------------
# The mirror suite's case data (tests/mirror/cases), fed to the installed vLLM itself: proves that
# each expected value of the installed version is what vLLM answers (tests/mirror/test_mirror.py
# asks ppspec the same questions).

_INSTALLED = installed_vllm()
_INSTALLED_VERSION = _INSTALLED[0] if _INSTALLED else None


def test_installed_vllm_is_a_mirrored_version():
    """CI's vLLM must be one the mirror suite has cases for (else add its release's cases)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (install ppspec[cpu] or [cuda])")
    assert _INSTALLED_VERSION in VERSIONS, f"vLLM {_INSTALLED_VERSION} has no mirror cases: see tests/mirror/README.md"


def _vllm_answer(m, fake_pp, case: Case):
    """What the installed vLLM's own function answers for a case (same shape as case.expect)."""
    i = case.input
    if case.topic == "partition":
        if "env" in i:
            got = _vllm_bounds(m, i["num_layers"], i["pp"], i["env"])
            return "error" if got is ValueError else [list(b) for b in got]
        return list(_vllm_bounds(m, i["num_layers"], i["pp"], None)[i["rank"]])
    if case.topic == "contract":
        return _vllm_contract_answer(case)
    if case.topic == "speculators":
        converted = m.SpeculatorsConfig.extract_transformers_pre_trained_config(copy.deepcopy(i["config"]))
        return {k: converted.get(k) for k in case.expect}
    if case.check == "config":
        spec = _spec(i["config"])
        got = m.v2(spec) if i["runner"] == "v2" else m.v1(SimpleNamespace(speculative_config=spec))
        return None if got is None else list(got)
    if case.check in ("sorted", "defaults"):
        fake_pp.rank, fake_pp.size = 0, 1  # one stage, as the release tests build it
        holder = type("M", (m.EagleModelMixin,), {})()
        holder.start_layer = 0
        raw = (
            tuple(i["taps"])
            if case.check == "sorted"
            else m.SupportsEagle3.get_eagle3_default_aux_hidden_state_layers(_Holder(i["num_layers"]))
        )
        holder._set_aux_hidden_state_layers(raw)
        return list(holder.aux_hidden_state_layers)
    if case.check == "stages":
        bounds = stage_bounds(i["partition"])
        taps, slots, relay = [], [], []
        for mixin, aux in _vllm_stage_capture(m, fake_pp, tuple(i["taps"]), bounds):
            taps.append(list(aux))
            slots.append(mixin._aux_slot_base_cached)
            relay.append(mixin._aux_slot_base_cached + len(mixin.pack_local_aux_hidden_states(aux)))
        return {"stage_taps": taps, "upstream_slots": slots, "relay_slots": relay[:-1]}
    if case.check in ("refused", "errors"):  # the V2 runner runs the opt-in check only when aux states are used
        refused = _vllm_aux_required(m, i["method"], i.get("drafter")) and not _vllm_opted_in(case.inner_decoder)
        return refused if case.check == "refused" else ["target-not-opted-in"] if refused else []
    if case.check == "aux":
        return _vllm_aux_required(m, i["method"], i.get("drafter"))
    if case.check in ("needs_target_embed", "has_embedding"):
        from vllm.model_executor.models.utils import spec_decode_needs_target_embed

        fake_pp.rank, fake_pp.size = i["rank"], i["pp"]
        cfg = SimpleNamespace(speculative_config=None if i["method"] is None else SimpleNamespace(method=i["method"]))
        if case.check == "needs_target_embed":
            return spec_decode_needs_target_embed(cfg)
        # the target model's own condition: first rank, or the function with its include_mtp argument
        include_mtp = _include_mtp_of(_MINIMAX_M3_INNER, use_v2=i["platform"] != "cpu")
        return i["rank"] == 0 or spec_decode_needs_target_embed(cfg, include_mtp=include_mtp)
    if case.check == "draft_layer_ids":
        path, cls = case.source.removesuffix(".__init__").split("::")
        n, pp = i["target"]["num_hidden_layers"], i["pp"]
        start, end = _vllm_bounds(m, n, pp, None)[-1]
        first = n if _draft_start_is_global(path, cls) else end - start
        return list(range(first, first + i["drafter"]["num_hidden_layers"]))
    if case.check == "draft_layer_count":
        from transformers import PretrainedConfig
        from vllm.config.speculative import SpeculativeConfig

        raw = dict(i["target"])
        text = raw.pop("text_config", None)
        hf = PretrainedConfig(**raw)
        if text is not None:
            hf.text_config = PretrainedConfig(**text)
        return SpeculativeConfig.hf_config_override(hf).n_predict
    raise AssertionError(f"no vLLM function answers {case.topic}/{case.check} ({case.id})")


class _LoadedPastTheChecks(Exception):
    """Qwen3 DSpark load_weights got past its tensor checks (to the model it would now fill)."""


class _NoModel:
    def __getattr__(self, name):
        raise _LoadedPastTheChecks


def _vllm_contract_answer(case: Case):
    """The installed vLLM's own functions on a contract case: the token resolver, the draft
    layers' attention resolver (per layer, under the case's runner) and Qwen3 DSpark's
    load_weights on a bare instance (tensor names only; it stops before touching the model)."""
    i = case.input
    if case.check == "dflash_served":
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.transformers_utils.configs.eagle import EAGLEConfig

        served = EAGLEConfig(copy.deepcopy(i["config"]), method="dflash").architectures
        return {"served": served, "registered": [a in ModelRegistry.get_supported_archs() for a in served]}
    if case.check == "mask_token":
        token = _vllm_parallel_token(i["config"])
        return "refused" if token is None else token
    if case.check == "layer_attention":
        from vllm.model_executor.models import qwen3_dflash

        cfg = SimpleNamespace(**copy.deepcopy(i["config"]))
        real = qwen3_dflash.get_current_vllm_config
        qwen3_dflash.get_current_vllm_config = lambda: SimpleNamespace(use_v2_model_runner=i["runner"] == "v2")
        try:
            for layer in range(cfg.num_hidden_layers):
                qwen3_dflash._resolve_layer_attention(cfg, layer)
        except NotImplementedError:
            return ["dflash-mixed-attention-v1"]
        except ValueError:
            return ["dflash-no-sliding-window"]
        finally:
            qwen3_dflash.get_current_vllm_config = real
        return []
    if case.check == "dspark_weights":
        import torch
        from vllm.model_executor.models.qwen3_dspark import Qwen3DSparkForCausalLM

        model = Qwen3DSparkForCausalLM.__new__(Qwen3DSparkForCausalLM)
        torch.nn.Module.__init__(model)
        model.config = SimpleNamespace(**i["config"])
        model.target_vocab_size = i["target_vocab"]
        object.__setattr__(model, "model", _NoModel())
        try:
            model.load_weights((name, torch.empty(0)) for name in i["tensors"])
        except _LoadedPastTheChecks:
            return []
        except ValueError as e:
            msg = str(e)
            return [
                "dspark-embed-missing"
                if "embed_tokens" in msg
                else "dspark-lm-head-missing"
                if "lm_head" in msg
                else "dspark-d2t-missing"
            ]
    if case.check == "omni":
        from vllm.config.speculative import _validate_qwen3_omni_dspark

        t, d = copy.deepcopy(i["target"]), copy.deepcopy(i["drafter"])
        text = SimpleNamespace(**t["thinker_config"]["text_config"])
        thinker = SimpleNamespace(text_config=text)
        target = SimpleNamespace(
            hf_config=SimpleNamespace(
                model_type=t["model_type"], architectures=t["architectures"], thinker_config=thinker
            ),
            hf_text_config=text,
            architectures=t["architectures"],
            get_hidden_size=lambda: text.hidden_size,
            get_total_num_hidden_layers=lambda: text.num_hidden_layers,
            get_vocab_size=lambda: text.vocab_size,
        )
        try:
            _validate_qwen3_omni_dspark(
                target,
                SimpleNamespace(hf_config=SimpleNamespace(**d), architectures=d["architectures"]),
                i["num_speculative_tokens"],
            )
        except ValueError as e:
            return refusal_matching(case.expect, str(e))
        return "ok"
    raise AssertionError(f"no vLLM function answers contract/{case.check} ({case.id})")


_MINIMAX_M3_INNER = "vllm/models/minimax_m3/nvidia/model.py::MiniMaxM3Model"


def _vllm_source(path: str) -> ast.Module:
    """The installed vLLM's source file `vllm/...py`, parsed (model modules that cannot be imported
    on this CPU machine can still be read)."""
    import vllm

    root = Path(vllm.__file__).resolve().parent.parent
    return ast.parse((root / path).read_text(encoding="utf-8"))


def _class_def(path: str, cls: str) -> ast.ClassDef:
    found = [n for n in ast.walk(_vllm_source(path)) if isinstance(n, ast.ClassDef) and n.name == cls]
    assert len(found) == 1, (path, cls)
    return found[0]


def _vllm_opted_in(ref: str | None) -> bool:
    """`supports_aux_hidden_states_over_pp = True` in the class body (the flag is False by default in
    vLLM's EagleModelMixin; the classes the cases name set it themselves or not at all)."""
    assert ref, "a refused case must name the inner decoder class vLLM checks"
    path, cls = ref.split("::")
    for node in _class_def(path, cls).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "supports_aux_hidden_states_over_pp" for t in node.targets
        ):
            return ast.literal_eval(node.value) is True
    return False


def _vllm_aux_required(m, method: str, drafter: dict | None) -> bool:
    """Whether the V2 runner uses aux hidden states: vLLM's requires_aux_hidden_states where the
    installed release has it (0.33+), else the method tuple its model runner tests (0.30-0.32)."""
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils

    if hasattr(eagle3_utils, "requires_aux_hidden_states"):
        spec = SimpleNamespace(
            method=method, draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(**copy.deepcopy(drafter or {})))
        )
        return bool(eagle3_utils.requires_aux_hidden_states(spec))
    for node in ast.walk(_vllm_source("vllm/v1/worker/gpu/model_runner.py")):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and getattr(node.test.left, "attr", None) == "method"
            and any(
                isinstance(b, ast.Assign) and getattr(b.targets[0], "attr", None) == "use_aux_hidden_state_outputs"
                for b in node.body
            )
        ):
            return method in ast.literal_eval(node.test.comparators[0])
    raise AssertionError("the installed V2 model runner has neither requires_aux_hidden_states nor a method tuple")


def _include_mtp_of(ref: str, *, use_v2: bool) -> bool:
    """The include_mtp argument the class's __init__ passes to spec_decode_needs_target_embed."""
    path, cls = ref.split("::")
    for node in ast.walk(_class_def(path, cls)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "spec_decode_needs_target_embed":
            kw = {k.arg: k.value for k in node.keywords}
            if "include_mtp" not in kw:
                return False
            assert getattr(kw["include_mtp"], "attr", None) == "use_v2_model_runner", ast.dump(kw["include_mtp"])
            return use_v2
    return False


def _draft_start_is_global(path: str, cls: str) -> bool:
    """Whether the drafter's __init__ numbers from the global depth (get_total_num_hidden_layers)
    rather than the stage's own layer count (get_num_layers)."""
    calls = {
        n.func.attr
        for n in ast.walk(_class_def(path, cls))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    assert ("get_total_num_hidden_layers" in calls) != ("get_num_layers" in calls), (path, cls)
    return "get_total_num_hidden_layers" in calls


@pytest.mark.parametrize(
    ("case", "version"), case_params(version=_INSTALLED_VERSION, pending_xfail=False) if _INSTALLED_VERSION else []
)
def test_mirror_case_holds_in_installed_vllm(vllm_mods, env_uncached, fake_pp, case: Case, version: str):
    EXAMPLES["mirror cases proven on vLLM"] += 1
    assert _vllm_answer(vllm_mods, fake_pp, case) == case.expect, case.source


def test_examples_tried():
    """Runs last: how many generated examples each property compared with vLLM."""
    print(
        "\nvLLM mirror, examples tried: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(EXAMPLES.items()))
        + f"; total {sum(EXAMPLES.values())}"
    )
    if len(EXAMPLES) < 5:
        pytest.skip("run the whole file to count examples (a -k selection ran only part of it)")
    assert (
        EXAMPLES["V2 tap configs"] >= 500 and EXAMPLES["V1 tap configs"] >= 500 and EXAMPLES["default partition"] >= 500
    )
