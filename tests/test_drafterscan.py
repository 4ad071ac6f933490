"""The drafter side of vLLM's tables (knowledge/drafterscan.py): each reader on a small vLLM-shaped
tree it must read (and one it must not be fooled by), and the committed tables against lines read
by hand in each release's source."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppspec_cli.knowledge import archscan, archtable, drafterfacts, drafterscan

REPO = Path(__file__).resolve().parent.parent


def tree(tmp_path: Path, files: dict[str, str]) -> archscan.Scanner:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return archscan.Scanner(tmp_path)


REGISTRY = '_SPECULATIVE_DECODING_MODELS = {\n    "A": ("m", "A"),\n}\n'


def test_speculators_reader(tmp_path):
    sc = tree(
        tmp_path,
        {
            "vllm/transformers_utils/configs/speculators/algos.py": (
                "SUPPORTED_SPECULATORS_TYPES = {}\n"
                "def register_speculator(name):\n    return lambda f: f\n\n"
                '@register_speculator("one")\n'
                "def update_one(config_dict, pre_trained_config):\n"
                '    m = {"llama": "OneLlama"}\n'
                '    model_type = pre_trained_config.get("model_type", "llama")\n'
                "    if model_type not in m:\n        raise ValueError('no')\n"
                '    pre_trained_config["architectures"] = [m[model_type]]\n'
                '    if config_dict.get("opt"):\n        pre_trained_config["opt"] = config_dict["opt"]\n\n'
                '@register_speculator("two")\n'
                "def update_two(config_dict, pre_trained_config):\n"
                '    pre_trained_config["architectures"] = ["Two"]\n'
                '    pre_trained_config["x"] = config_dict["needed"]\n\n'
                '@register_speculator("three")\n'
                "def update_three(config_dict, pre_trained_config):\n"
                "    update_two(config_dict, pre_trained_config)\n"
                '    pre_trained_config["architectures"] = ["Three"]\n\n'
                '@register_speculator("gone")\n'
                "def update_gone(config_dict, pre_trained_config):\n"
                '    raise ValueError("gone is not supported.")\n'
            ),
            "vllm/transformers_utils/configs/speculators/base.py": (
                "def extract(config_dict):\n    raise ValueError(f'Expected one of: {x}.')\n"
                "def build(config_dict):\n"
                "    result = {}\n"
                '    if result["method"] == "three":\n        result["method"] = "two"\n'
            ),
        },
    )
    got = drafterscan.speculators(sc.src)
    t = got["types"]
    assert t["one"]["architectures"]["by_model_type"] == {"llama": "OneLlama"}
    assert t["one"]["architectures"]["default_model_type"] == "llama"
    assert t["one"]["architectures"]["other_refused_at"].endswith("algos.py:10")
    assert t["one"]["requires"] == []  # `opt` is read only under `if config_dict.get("opt")`
    assert t["two"]["architectures"]["fixed"] == "Two" and t["two"]["requires"] == ["needed"]
    assert t["three"]["architectures"]["fixed"] == "Three" and t["three"]["requires"] == ["needed"]
    assert t["three"]["method"] == "two" and t["two"]["method"] == "two"
    assert t["gone"]["refused"] == "gone is not supported." and "architectures" not in t["gone"]
    assert got["unregistered_refused_at"].endswith("base.py:2")


def test_eagle_rename_reader(tmp_path):
    sc = tree(
        tmp_path,
        {
            "vllm/transformers_utils/configs/eagle.py": (
                "class EAGLEConfig:\n"
                "    def __init__(self, model=None, method='eagle', **kwargs):\n"
                "        if method == 'eagle':\n"
                "            kwargs['architectures'] = [f'Eagle{a}' if not a.startswith('Eagle') else a for a in "
                "model.architectures]\n"
                "        elif method == 'dflash':\n"
                "            kwargs['architectures'] = [a if a.startswith('DFlash') or a.endswith('DFlash') or a == "
                "'Keep' else f'DFlash{a}' for a in model.architectures]\n"
                "        elif method == 'odd':\n"
                "            kwargs['architectures'] = [a.upper() for a in model.architectures]\n"
            )
        },
    )
    got = drafterscan.eagle_config(sc.src)["renames"]
    assert set(got) == {"eagle", "dflash"}  # a rename it cannot read is not guessed
    assert got["eagle"]["prefix"] == "Eagle" and got["eagle"]["keeps_prefixes"] == ["Eagle"]
    assert got["dflash"]["keeps"] == ["Keep"] and got["dflash"]["keeps_suffixes"] == ["DFlash"]
    assert drafterfacts.renamed(got["dflash"], "Keep") == "Keep"
    assert drafterfacts.renamed(got["dflash"], "Qwen3X") == "DFlashQwen3X"


def _draft_tree(tmp_path, model_src: str) -> archscan.Scanner:
    sc = tree(
        tmp_path,
        {"vllm/model_executor/models/registry.py": REGISTRY, "vllm/model_executor/models/m.py": model_src},
    )
    sc.read_registry()
    return sc


def test_layer_id_reader(tmp_path):
    """`range(config.num_hidden_layers, ...)` starts at the target depth, `range(n)` at 0, and an
    f-string that is no module's name (a weight mapper) decides nothing."""
    src = (
        "class P:\n"
        "    def __init__(self, config, prefix=''):\n"
        "        self.start = config.num_hidden_layers\n"
        "        self.layers = {str(i): L(prefix=f'{prefix}.layers.{i}') for i in range(self.start, self.start + 1)}\n"
        "class Q:\n"
        "    def __init__(self, config, prefix=''):\n"
        "        mapper = {f'mtp.layers.{i}': f'mtp.layers.{i + 7}' for i in range(3)}\n"
        "        self.layers = [L(f'{prefix}.layers.{i}') for i in range(2)]\n"
        "class A:\n"
        "    def __init__(self, config, prefix=''):\n"
        "        self.model = P(config)\n"
        "class B:\n"
        "    def __init__(self, config, prefix=''):\n"
        "        self.model = Q(config)\n"
    )
    sc = _draft_tree(tmp_path, src)
    get = lambda n: sc.src.resolve("vllm.model_executor.models.m", n, "cuda")  # noqa: E731
    assert drafterscan._layer_ids(sc, get("A"), "cuda") == {
        "key": "num_hidden_layers",
        "at": "vllm/model_executor/models/m.py:4",
    }
    assert drafterscan._layer_ids(sc, get("B"), "cuda") == {"fixed": 0, "at": "vllm/model_executor/models/m.py:8"}


def test_embed_reader_sees_an_inert_weight_hook(tmp_path):
    """vLLM's EAGLE weight hook sets has_own_embed_tokens only on a SupportsEagle/SupportsEagle3
    class: a class that calls it without the interface keeps what its constructor set."""
    src = (
        "class SupportsEagle3:\n    supports_eagle3 = True\n"
        "class Inner:\n    def __init__(self, config):\n        self.embed_tokens = "
        "VocabParallelEmbedding(config.vocab_size, config.hidden_size)\n"
        "class A(SupportsEagle3):\n"
        "    def __init__(self, config):\n        self.model = Inner(config)\n"
        "    def load_weights(self, weights):\n        for n, w in weights:\n            process_eagle_weight(self, "
        "n)\n"
        "class B:\n"
        "    def __init__(self, config):\n        self.model = Inner(config)\n        self.has_own_embed_tokens = "
        "False\n"
        "    def load_weights(self, weights):\n        for n, w in weights:\n            process_eagle_weight(self, "
        "n)\n"
    )
    sc = _draft_tree(tmp_path, src)
    get = lambda n: sc.src.resolve("vllm.model_executor.models.m", n, "cuda")  # noqa: E731
    a = {**drafterscan._embed_facts(sc, get("A"), "cuda"), **drafterscan._embed_width(sc, get("A"), "cuda")}
    assert a["own"] == "checkpoint" and a["declared"] is True and a["width_key"] == "hidden_size"
    b = drafterscan._embed_facts(sc, get("B"), "cuda")
    assert b["own"] is False and b["hook_inert_at"].endswith("m.py:18")


# ---------------------------------------------------------------------------------------------
# The committed tables, against lines read by hand


def tables() -> dict[str, archtable.ArchTable]:
    return {v: archtable.committed(v) for v in archtable.committed_versions()}


@pytest.mark.parametrize("v", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_every_release_table_carries_the_drafter_side(v):
    t = tables()[v]
    r = t.doc["drafter_rules"]
    assert set(r["speculators"]["types"]) >= {"eagle3", "peagle", "dflash", "dflash2", "dspark"}
    assert set(r["eagle_config"]["renames"]) == {"eagle", "eagle3", "dflash"}
    # LiLiCorrDraftModel keeps its name from 0.31 on (transformers_utils/configs/eagle.py)
    keeps = r["eagle_config"]["renames"]["dflash"]["keeps"]
    assert keeps == ([] if v == "0.30.0" else ["LiLiCorrDraftModel"])
    assert r["mtp_rewrite"]["multiple_of_n_predict_at"]
    assert {x["model_type"] for x in r["mtp_rewrite"]["refusals"]} == {"deepseek_v41"}
    # P-EAGLE: served in 0.30-0.33, refused in 0.34
    assert bool(r["speculators"]["types"]["peagle"].get("refused")) is (v == "0.34.0")


#: MTP classes whose layer ids vLLM's source does not give (none of them is an MTP family a user
#: plans layer ids for): Mistral Large 3's `mtp` rewrite picks an EAGLE-1 class (numbered PP-local),
#: Nemotron Parse 3.5's auxiliary MTP has no attention layers.
NO_LAYER_IDS = {"EagleMistralLarge3ForCausalLM", "ParseAuxMTPModel"}


@pytest.mark.parametrize("v", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_every_mtp_family_has_its_draft_ids(v):
    """Every architecture the `mtp` rewrite picks (cuda) says where its layer ids start and how
    many layers it builds: plan's draft ids are vLLM's for every registered MTP family."""
    t = tables()[v]
    missing = []
    for arch, rw in t.doc["drafter_rules"]["mtp_rewrite"]["architectures"].items():
        f = t.drafter(arch, "cuda")
        if f is None or f.get("numbering") is not None or arch in NO_LAYER_IDS:
            continue  # not an MTP class (numbers from a depth call) or listed above
        ids = f.get("layer_ids") or {}
        count = (
            (f.get("mtp_layers") or {}).get("keys")
            or (rw.get("n_predict") or {}).get("keys")
            or ((rw.get("n_predict") or {}).get("fixed") is not None)
        )
        if not (("fixed" in ids or "key" in ids) and count):
            missing.append(arch)
    assert missing == []


@pytest.mark.parametrize(
    ("arch", "start"),
    [
        ("DeepSeekMTPModel", {"key": "num_hidden_layers"}),  # deepseek_mtp.py:151-162
        ("Glm4MoeMTPModel", {"key": "num_hidden_layers"}),  # glm4_moe_mtp.py:135-149
        ("Glm4MoeLiteMTPModel", {"key": "num_hidden_layers"}),  # with the rewrite's num_hidden_layers: 0
        ("Qwen3NextMTP", {"fixed": 0}),  # qwen3_next_mtp.py:89-96, range(num_mtp_layers)
        ("Qwen3_5MTP", {"fixed": 0}),  # qwen3_5_mtp.py:118-124
        ("MiMoV2MTPModel", {"fixed": 0}),  # mimo_v2_mtp.py:157-166, `{prefix}.{i}` under mtp.layers
        ("LongCatFlashMTPModel", {"key": "num_layers", "times": 2}),  # longcat_flash_mtp.py:85
    ],
)
def test_mtp_layer_ids_read_by_hand_033(arch, start):
    f = tables()["0.33.0"].drafter(arch, "cuda")
    assert {k: v for k, v in f["layer_ids"].items() if k != "at"} == start


def test_mtp_rewrites_that_number_from_zero_033():
    """The rewrites that set num_hidden_layers: 0 (config/speculative.py, 0.33): MiMo, MiMo-V2 (Pro,
    Omni, Flash), GLM-4.7-Flash (Glm4MoeLite), GLM-OCR."""
    rw = tables()["0.33.0"].doc["drafter_rules"]["mtp_rewrite"]["architectures"]
    zero = sorted(a for a, e in rw.items() if e.get("num_hidden_layers") == 0)
    assert zero == ["Glm4MoeLiteMTPModel", "GlmOcrMTPModel", "MiMoMTPModel", "MiMoV2MTPModel", "MiMoV2OmniMTPModel"]
    assert rw["MiMoV2MTPModel"]["n_predict"]["fixed"] == 1  # _MIMO_V2_PRO_NUM_MTP_LAYERS, mimo_v2_mtp.py:53
    assert rw["Gemma4MTPModel"]["n_predict"]["fixed"] == 1
    assert rw["Qwen4ExpMTP"]["n_predict"]["keys"] == ["mtp_num_hidden_layers", "num_nextn_predict_layers"]


def test_adapters_list_counts_the_drafter_side():
    c = drafterfacts.coverage(tables()["0.34.0"])
    assert (
        c["drafter_classes"] == 69
        and "peagle" in c["speculators_refused"]
        and "peagle" not in c["speculators_algorithms"]
    )
    assert "speculators dflash, dflash2, dspark, eagle3" in drafterfacts.coverage_text(tables()["0.34.0"])
