"""check == serve: every refusal `serve` makes about engine options and the environment is a `check`
finding with the same code, from one rule set (engine_options.launch_refusals, codes in the registry's LAUNCH_REFUSALS).

The list of refusals is read from the registry, not written here: a new refusal without an example
below fails `test_every_refusal_has_an_example`. Each example runs the real `check` and the real
`serve` (in process; the engine executable does not exist, so a serve that did not refuse would
fail differently: "not found"), and both must name the same code.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ppspec_cli.cli import app
from ppspec_cli.errors import PpspecError
from ppspec_cli.findings.codes import LAUNCH_REFUSALS
from ppspec_cli.planning.engine_options import launch_refusals

REFUSALS = {c.code for c in LAUNCH_REFUSALS}

FIX = Path(__file__).resolve().parent / "fixtures" / "models" / "meta-llama__Llama-3.2-1B-Instruct"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None

#: code -> (profile changes, caller environment). One example per registered refusal.
EXAMPLES: dict[str, tuple[dict, dict]] = {
    "engine-bad-option-name": ({"engine": {"--max-model-len=4096": 1}}, {}),
    "engine-managed-option": ({"engine": {"-pp": 2}}, {}),
    "engine-refused-option": ({"engine": {"config": "more.yaml"}}, {}),
    "engine-overrides-depth": ({"engine": {"hf_overrides": '{"text_config": {"num_hidden_layers": 8}}'}}, {}),
    "engine-unknown-option": ({"engine": {"no-such-option-xyz": 1}}, {}),
    "env-secret": ({"env": {"MY_API_KEY": "x"}}, {}),
    "engine-secret-option": ({"engine": {"hf_token": "x"}}, {}),
    "env-overrides-plan": ({"env": {"VLLM_PP_LAYER_PARTITION": "8,8"}}, {}),
    "env-plugins-skip-ppspec": ({"env": {"VLLM_PLUGINS": "other"}}, {}),
    # the caller's shell: the `here` question's (check's "on this machine" part), serve refuses
    "shell-overrides-plan": ({}, {"VLLM_PP_LAYER_PARTITION": "8,8"}),
    "shell-plugins-skip-ppspec": ({}, {"VLLM_PLUGINS": "other"}),
    "api-key-env-unset": ({"server": {"api_key_env": "PPSPEC_TEST_UNSET_KEY"}}, {}),
    "engine-ambiguous-option": ({"engine": {"max-num": 8}}, {}),
    "engine-untrusted-option": ({"engine": {"worker_extension_cls": "evil.Ext"}}, {}),
    "env-untrusted-entry": ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, {}),
    # by hand, outside SLURM: check warns (SLURM and LWS supply the head), serve refuses
    "topology-master-addr": ({"topology": {"nodes": 2, "pipeline_parallel": 2}}, {}),
}
#: Codes only found with vLLM's parser imported: `check --probes` (and `serve`, always).
NEEDS_PARSER = {"engine-unknown-option"}


@pytest.fixture
def base(tmp_path, monkeypatch):
    target = tmp_path / "target"
    shutil.copytree(FIX, target)
    for k in ("VLLM_PLUGINS", "VLLM_PP_LAYER_PARTITION", "VLLM_USE_V2_MODEL_RUNNER", "PPSPEC_TEST_UNSET_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PPSPEC_VLLM_EXECUTABLE", str(tmp_path / "no-such-vllm"))
    # platform auto: a declared `cuda` on a machine with a CPU build of vLLM is itself a refusal
    # (platform-not-served), which would hide the one each example is about
    # max-model-len: the config's 131072 tokens need 4 GiB of KV cache, more than the 1 GiB ppspec gives vLLM on the
    # CPU platform: vLLM would refuse (kv-cache-too-small), which would hide the one each example is about
    return {
        "name": "refusal",
        "target": {"model": str(target)},
        "platform": "auto",
        "server": {"port": 18931},
        "engine": {"max-model-len": 4096},
    }


def _write(tmp_path: Path, data: dict, change: dict) -> Path:
    data = json.loads(json.dumps(data))
    for k, v in change.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    if isinstance(r.exception, PpspecError):
        return r.exception.exit_code, r.output + r.exception.render()
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


def _check_codes(profile: Path, probes: bool) -> dict[str, str]:
    """Every code `check` reports: the profile's and what this machine adds (`here`)."""
    r = CliRunner().invoke(app, ["check", str(profile), "--json", "--offline", "--probes" if probes else "--no-probes"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    return {f["code"]: f["severity"] for f in doc["findings"] + doc["here"]["findings"]}


def test_every_refusal_has_an_example():
    assert set(EXAMPLES) == REFUSALS, (
        "a refusal in the registry's LAUNCH_REFUSALS needs an example here (and vice versa)"
    )


def test_the_base_profile_is_not_refused(base, tmp_path):
    """The measurement can fail: without a change, check reports none of the codes and serve goes
    on to start the engine (here: the executable does not exist)."""
    prof = _write(tmp_path, base, {})
    assert not set(_check_codes(prof, probes=False)) & set(REFUSALS)
    rc, out = _cli("serve", str(prof), "--offline", "--run-dir", str(tmp_path / "run"))
    assert rc == 1 and "no-such-vllm not found" in out, out
    assert not any(c in out for c in REFUSALS)


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(c, marks=[pytest.mark.slow, pytest.mark.vllm] if c in NEEDS_PARSER else [])
        for c in sorted(REFUSALS)
    ],
)
def test_check_reports_what_serve_refuses(code, base, tmp_path, monkeypatch):
    if code in NEEDS_PARSER and not HAVE_VLLM:
        pytest.skip("needs vLLM's option parser (CI installs vLLM)")
    change, environ = EXAMPLES[code]
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    prof = _write(tmp_path, base, change)
    codes = _check_codes(prof, probes=code in NEEDS_PARSER)
    assert code in codes, f"check did not report {code}: {codes}"
    assert set(codes) & set(REFUSALS) == {code}, codes  # the example shows one refusal, not another
    rc, out = _cli("serve", str(prof), "--offline", "--run-dir", str(tmp_path / "run"))
    assert rc == 1, out
    assert code in out and "not found" not in out, out  # refused with this code; nothing was started


# Spellings vLLM reads as the same option (FlexibleArgumentParser: `_` = `-`; argparse: a unique
# prefix, `--no-x` of a boolean; vLLM's short forms; `--x.y` sets part of `--x`).
MANAGED_SPELLINGS = [
    "pipeline_parallel_size",
    "--pipeline-parallel-size",
    "-pp",
    "pp",
    "tp",
    "--dp",
    "no-trust-remote-code",
    "trust-remote",
    "tensor_parallel",
    "speculative_config.method",
    "served-model",
]


@pytest.mark.parametrize("key", MANAGED_SPELLINGS)
def test_every_spelling_of_a_managed_option_is_refused(key):
    codes = [f.code for f in launch_refusals({key: 1}, {})]
    assert codes == ["engine-managed-option"], (key, codes)


@pytest.mark.parametrize(
    "key",
    [
        "max-model-len",
        "max_model_len",
        "--enforce-eager",
        "no-enable-prefix-caching",
        "compilation-config",
        "hf-overrides",
    ],
)
def test_ordinary_options_pass(key):
    assert launch_refusals({key: {"rope_scaling": None}}, {}) == []


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, "env.VLLM_USE_V2_MODEL_RUNNER"),
        ({"PPSPEC_PLAN_FILE": "/tmp/other.json"}, "env.PPSPEC_PLAN_FILE"),
    ],
)
def test_plan_overrides_in_env(env, field):
    got = [(f.code, f.field) for f in launch_refusals({}, env)]
    assert got == [("env-overrides-plan", field)]


def test_plugins_allow_list_with_ppspec_passes():
    assert launch_refusals({}, {"VLLM_PLUGINS": "other,ppspec"}) == []
    # vLLM splits VLLM_PLUGINS on "," and compares names exactly: " ppspec" is not ppspec
    assert [f.code for f in launch_refusals({}, {"VLLM_PLUGINS": "other, ppspec"})] == ["env-plugins-skip-ppspec"]
    assert [f.field for f in launch_refusals({}, {"VLLM_PLUGINS": "other"})] == ["env.VLLM_PLUGINS"]


def test_hf_overrides_that_keep_the_depth_pass():
    assert launch_refusals({"hf-overrides": {"rope_theta": 1e6}}, {}) == []
    assert [f.code for f in launch_refusals({"hf-overrides": {"num_nextn_predict_layers": 2}}, {})] == [
        "engine-overrides-depth"
    ]


# One verdict for "would this launch" (planning/verdict.py): `check`, `serve --dry-run` and
# `export slurm` exit alike on the same profile, and a dry run names the reason when it is no.


def _verdicts(prof: Path, tmp_path: Path) -> dict[str, tuple[int, str]]:
    out = {"check": _cli("check", str(prof), "--offline")}
    out["dry-run"] = _cli("serve", str(prof), "--offline", "--dry-run", "--run-dir", str(tmp_path / "run"))
    rc, text = _cli("serve", str(prof), "--offline", "--dry-run", "--json", "--run-dir", str(tmp_path / "run"))
    out["dry-run --json"] = (rc, text)
    out["export slurm"] = _cli("export", "slurm", str(prof), "--offline", "-o", str(tmp_path / "job.sbatch"))
    return out


def test_an_unset_api_key_is_a_warning_for_all_three_and_a_refusal_at_launch(base, tmp_path):
    """The key is exported where the engine serves, not necessarily where the profile is checked or
    exported: check, the dry run and the export all pass (the profile verdict, with the warning);
    serve itself refuses here, and the dry run's `ok` says so (its here-verdict is serve's)."""
    prof = _write(tmp_path, base, {"server": {"api_key_env": "PPSPEC_TEST_UNSET_KEY"}})
    v = _verdicts(prof, tmp_path)
    assert {k: rc for k, (rc, _) in v.items()} == {"check": 0, "dry-run": 0, "dry-run --json": 0, "export slurm": 0}, v
    assert "api-key-env-unset" in v["check"][1] and "api-key-env-unset" in v["dry-run"][1]
    assert "on this machine: `ppspec serve` would refuse: api-key-env-unset" in v["check"][1]
    js = json.loads(v["dry-run --json"][1])
    assert (
        js["ok"] is False
        and js["refused_by"] == ["api-key-env-unset"]
        and js["profile_verdict"] == {"ok": True, "refused_by": []}
    )
    rc, out = _cli("serve", str(prof), "--offline", "--run-dir", str(tmp_path / "run"))
    assert rc == 1 and "api-key-env-unset" in out and "not found" not in out, out


def test_an_error_is_a_no_from_all_three_with_the_reason(base, tmp_path):
    prof = _write(tmp_path, base, {"topology": {"pipeline_parallel": 2, "layer_partition": [10, 20]}})
    v = _verdicts(prof, tmp_path)
    assert {k: rc for k, (rc, _) in v.items()} == {"check": 1, "dry-run": 1, "dry-run --json": 1, "export slurm": 1}, v
    assert "would refuse this profile: 1 error(s): partition-sum" in v["dry-run"][1]
    assert json.loads(v["dry-run --json"][1])["refused_by"] == ["partition-sum"]
    assert "partition-sum" in v["export slurm"][1]
