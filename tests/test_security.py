"""Security properties of ppspec, each proven against what actually runs:

- profiles (and pack files) are read with yaml.safe_load only, and a `!!python/...` tag is refused;
- profile values never pass through a shell: a model name full of shell metacharacters reaches the
  engine's argv as one argument and nothing is executed (the fake engine records its argv), and a
  value that looks like an option (`--trust-remote-code`) stays a value for vLLM's own parser;
- the server binds 127.0.0.1 unless the profile says otherwise; `trust_remote_code` reaches the
  engine only when the profile sets it (with a warning);
- the API key comes from the environment and appears in no file of the run directory, no output of
  serve / serve --dry-run / verify, and no verify report — even when the server echoes it back;
- the in-engine plugin activates only from the plan file ppspec wrote, and refuses plan files it
  cannot parse or that are not regular files.

The bad-input corpus (test_robustness.py) covers the CLI's answers to hostile profiles; the real
engine's bind address and key handling are checked in test_demo_engine.py. `serve --dry-run` runs in
process (tests/inprocess.py); serve itself, verify and the plugin probe in subprocesses.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import inprocess
import pytest
import yaml
from judging import resolved

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "fixtures" / "bad"))
import ppspec_faults as PF  # noqa: E402
from fake_vllm import make_fake_engine  # noqa: E402

pytestmark = pytest.mark.slow  # runs ppspec and a fake engine in subprocesses

PPSPEC = [sys.executable, "-m", "ppspec_cli.cli"]
KEY = "sk-ppspec-" + hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:24] + "-DISTINCTIVE"


# ---------------------------------------------------------------------------------------------
# YAML and subprocess use in the sources


def _sources() -> list[Path]:
    return sorted(p for d in ("ppspec_cli", "adapters") for p in (REPO / d).rglob("*.py"))


def test_sources_use_safe_yaml_and_no_shell():
    """Static guard over every module ppspec ships (the CLI, the plugin, the packs)."""
    bad = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if owner == "yaml" and name in (
                "load",
                "load_all",
                "unsafe_load",
                "unsafe_load_all",
                "full_load",
                "full_load_all",
            ):
                bad.append(f"{where}: yaml.{name}")
            if owner == "os" and name in ("system", "popen", "execl", "execlp", "spawnl", "spawnlp"):
                bad.append(f"{where}: os.{name}")
            if owner == "subprocess" and name in ("getoutput", "getstatusoutput"):
                bad.append(f"{where}: subprocess.{name}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    bad.append(f"{where}: shell=...")
                if kw.arg == "Loader" and "Safe" not in ast.unparse(kw.value):
                    bad.append(f"{where}: Loader={ast.unparse(kw.value)}")
    assert len(_sources()) > 10
    assert bad == []


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['touch {m}']",
        "!!python/name:os.system",
        "!!python/object/new:subprocess.Popen [['touch', '{m}']]",
        "!!python/module:os",
    ],
)
def test_python_yaml_tags_are_refused(tag, tmp_path):
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.planning.profile import parse_profile

    marker = tmp_path / "EXECUTED"
    text = f"name: {tag.format(m=marker)}\ntarget: {{model: ./x}}\n"
    with pytest.raises(PpspecError) as ei:
        parse_profile(text, source="evil.yaml")
    assert "not valid YAML" in ei.value.what and "could not determine a constructor" in ei.value.what
    assert ei.value.exit_code == 2 and not marker.exists()


# ---------------------------------------------------------------------------------------------
# what reaches the engine: a fake engine records it


EVIL_DIR = "m; touch PWNED-a $(touch PWNED-b) `touch PWNED-c` && echo \"x\" | tee PWNED-d 'q'"


def _serve_fake(
    tmp_path: Path, profile: dict, env: dict | None = None, extra: dict | None = None
) -> tuple[int, str, dict, Path]:
    """`ppspec serve` on the fake engine until it is ready, then SIGTERM. Returns (rc, output, the
    fake's record, run dir). Runs in a directory that must stay empty (nothing executed). The profile
    gets the fault profiles' max-model-len unless it has one: write_target's real 128k-context config
    on the CPU platform is otherwise refused (kv-cache-too-small), as vLLM itself would refuse it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    profile = {**profile, "engine": {"max-model-len": PF.MAX_MODEL_LEN, **profile.get("engine", {})}}
    fake = make_fake_engine(tmp_path / "bin")
    prof = tmp_path / "profile.yaml"
    prof.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    run_dir = tmp_path / "run"
    record = tmp_path / "record.json"
    e = PF.ppspec_env(
        {"PPSPEC_VLLM_EXECUTABLE": str(fake), "FAKE_VLLM_MODE": "serve", "FAKE_VLLM_RECORD": str(record), **(env or {})}
    )
    p = subprocess.Popen(
        PPSPEC + ["serve", str(prof), "--run-dir", str(run_dir)],
        cwd=cwd,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        t0 = time.monotonic()
        while not (run_dir / "ready").exists():
            if p.poll() is not None or time.monotonic() - t0 > 60:
                out = p.communicate(timeout=30)[0] if p.poll() is not None else ""
                raise AssertionError(f"not ready (rc {p.poll()}):\n{out}")
            time.sleep(0.05)
        if extra and extra.get("while_serving"):
            extra["while_serving"](run_dir)
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert os.listdir(cwd) == [], f"files appeared in the working directory: {os.listdir(cwd)}"
    return p.returncode, out, json.loads(record.read_text()), run_dir


def _value(argv: list[str], flag: str) -> str:
    for i, a in enumerate(argv):
        if a == flag:
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    raise KeyError(flag)


def test_shell_metacharacters_reach_the_engine_as_one_argument(tmp_path):
    evil = PF.write_target(tmp_path / EVIL_DIR)
    name = "x'; touch PWNED-e; echo '"
    profile = {
        "name": "evil",
        "target": {"model": str(evil)},
        "platform": "cpu",
        "server": {"host": "127.0.0.1", "port": PF.free_port(), "served_model_name": name},
        "env": {"SECURITY_T_FOO": "$(touch PWNED-f) `touch PWNED-g`; touch PWNED-h"},
    }
    rc, out, rec, _ = _serve_fake(tmp_path, profile, env={"FAKE_VLLM_ENV_KEYS": "SECURITY_T_FOO"})
    assert rc == 143, out  # stopped by SIGTERM (serve exits 128+N)
    argv = rec["argv"]
    assert argv[:2] == ["serve", str(evil)]
    assert _value(argv, "--served-model-name") == name
    assert rec["env"]["SECURITY_T_FOO"] == profile["env"]["SECURITY_T_FOO"]
    assert not list(tmp_path.rglob("PWNED*")), "a profile value was executed"


def test_option_like_values_stay_values(tmp_path):
    """A target directory named like an option and option-like names reach the engine as values."""
    dash = PF.write_target(tmp_path / "--trust-remote-code")
    profile = {
        "name": "dashes",
        "target": {"model": "--trust-remote-code"},
        "platform": "cpu",
        "server": {"host": "127.0.0.1", "port": PF.free_port(), "served_model_name": "--trust-remote-code"},
    }
    (tmp_path / "cwd").mkdir()
    # the profile sits next to the directory, so `check` finds it (relative to the profile)
    rc, out, rec, _ = _serve_fake(tmp_path, profile)
    assert rc == 143, out  # stopped by SIGTERM (serve exits 128+N)
    argv = rec["argv"]
    assert "--trust-remote-code" not in argv, argv
    assert argv[1] == str(dash)
    assert "--served-model-name=--trust-remote-code" in argv


@pytest.mark.vllm
def test_vllms_parser_reads_option_like_values_as_values(tmp_path):
    """The argv build_launch makes for a hostile profile, parsed by the installed vLLM's own
    `serve` parser: every hostile value lands in its field; nothing turns on trust_remote_code."""
    from ppspec_cli.knowledge.engine import vllm_serve_parser
    from ppspec_cli.planning.profile import parse_profile
    from ppspec_cli.running.launch import Site, build_launch

    PF.write_target(tmp_path / "-rf")
    text = yaml.safe_dump(
        {
            "name": "hostile",
            "target": {"model": "./-rf", "revision": "--trust-remote-code"},
            "platform": "cpu",
            "server": {"host": "127.0.0.1", "served_model_name": "--trust-remote-code"},
            "engine": {"seed": "-1", "max-model-len": 512},
        }
    )
    prof_path = tmp_path / "p.yaml"
    prof_path.write_text(text)
    r = resolved(parse_profile(text, str(prof_path)), path=str(prof_path))
    argv = build_launch(r, Site("vllm", tmp_path, "host"), run_dir=tmp_path / "run").nodes[0].argv
    parser = vllm_serve_parser()
    assert parser is not None, "the installed vLLM's serve parser was not found (moved again?)"
    assert argv[1] == "serve"
    args = parser.parse_args(argv[2:])
    assert args.trust_remote_code is False
    assert args.model_tag == str(tmp_path / "-rf")
    assert args.revision == "--trust-remote-code"
    assert args.served_model_name == ["--trust-remote-code"] and args.seed == -1


def _dry(tmp_path: Path, profile: dict) -> tuple[int, dict, str]:
    PF.write_target(tmp_path / "t")
    profile = {"name": "dry", "target": {"model": str(tmp_path / "t")}, "platform": "cuda", **profile}
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(profile))
    cp = inprocess.run("serve", str(prof), "--dry-run", "--json", cwd=REPO)  # a dry run: no process boundary to test
    return cp.returncode, json.loads(cp.stdout), cp.stderr


def test_binds_loopback_unless_the_profile_says_otherwise(tmp_path):
    rc, out, _ = _dry(tmp_path, {})
    assert rc == 0 and _value(out["nodes"][0]["argv"], "--host") == "127.0.0.1"
    assert out["url"].startswith("http://127.0.0.1:")
    rc, out, _ = _dry(tmp_path, {"server": {"host": "0.0.0.0"}})
    assert _value(out["nodes"][0]["argv"], "--host") == "0.0.0.0"
    assert "server-exposed-no-key" in {f["code"] for f in out["findings"]}
    rc, out, _ = _dry(tmp_path, {"server": {"host": "0.0.0.0", "api_key_env": "SOME_KEY"}})
    assert "server-exposed-no-key" not in {f["code"] for f in out["findings"]}


def test_trust_remote_code_only_when_the_profile_sets_it(tmp_path):
    rc, out, _ = _dry(tmp_path, {})
    assert "--trust-remote-code" not in out["nodes"][0]["argv"] and "trust-remote-code" not in {
        f["code"] for f in out["findings"]
    }
    rc, out, _ = _dry(tmp_path, {"trust_remote_code": True})
    assert "--trust-remote-code" in out["nodes"][0]["argv"]
    warn = [f for f in out["findings"] if f["code"] == "trust-remote-code"]
    assert warn and warn[0]["severity"] == "warning"
    for engine in (
        {"trust-remote-code": True},
        {"trust_remote_code": True},
        {"--trust-remote-code": True},
        {"config": "/tmp/x.yaml"},
    ):
        rc, out, err = _dry(tmp_path, {"engine": engine})
        assert rc == 1 and {"engine-managed-option", "engine-refused-option"} & set(out["refused_by"]), (
            engine,
            out.get("refused_by"),
            err,
        )


@pytest.mark.vllm
def test_abbreviated_managed_flags_are_refused_at_serve():
    """argparse accepts unambiguous prefixes (`--trust-remote` for `--trust-remote-code`): the
    engine-option reader resolves a prefix as vLLM's parser does, so a prefix of a managed flag is
    refused as that flag, and a prefix of an ordinary option is that option (not "unknown")."""
    from ppspec_cli.knowledge.engine import serve_option_names
    from ppspec_cli.planning.engine_options import launch_refusals, read_options, unknown_options

    got = unknown_options(
        read_options({"trust-remote": True, "max-model": 512, "no-such-option-xyz": 1}), serve_option_names()
    )
    assert [f.field for f in got] == ["engine.no-such-option-xyz"]
    assert [f.code for f in launch_refusals({"trust-remote": True}, {})] == ["engine-managed-option"]


# ---------------------------------------------------------------------------------------------
# the API key


def _all_text(paths: list[Path]) -> str:
    chunks = []
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
        for f in files:
            chunks.append(f.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)


def test_api_key_stays_out_of_files_logs_and_reports(tmp_path):
    port = PF.free_port()
    target = PF.write_target(tmp_path / "t")
    profile = {
        "name": "keyed",
        "target": {"model": str(target)},
        "platform": "cpu",
        "server": {"host": "127.0.0.1", "port": port, "api_key_env": "PPSPEC_TEST_KEY"},
    }
    env = {"PPSPEC_TEST_KEY": KEY, "FAKE_VLLM_REFLECT": "1"}
    verify_out: list[str] = []

    def while_serving(run_dir: Path) -> None:
        # verify against the careless server: it echoes the Authorization header in its errors
        cp = subprocess.run(
            PPSPEC
            + [
                "verify",
                str(tmp_path / "profile.yaml"),
                "--out",
                str(tmp_path / "report.json"),
                "--num-prompts",
                "1",
                "--max-tokens",
                "4",
            ],
            capture_output=True,
            text=True,
            env=PF.ppspec_env(env),
            cwd=REPO,
            timeout=120,
        )
        verify_out.append(cp.stdout + cp.stderr)
        assert cp.returncode != 0 and "Traceback" not in verify_out[0], verify_out[0]

    rc, out, rec, run_dir = _serve_fake(tmp_path, profile, env=env, extra={"while_serving": while_serving})
    assert rc == 143, out  # stopped by SIGTERM (serve exits 128+N)
    assert rec["api_key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest(), "the key did not reach the engine"
    dry = inprocess.run("serve", str(tmp_path / "profile.yaml"), "--dry-run", env=env, cwd=REPO)
    dry_json = inprocess.run("serve", str(tmp_path / "profile.yaml"), "--dry-run", "--json", env=env, cwd=REPO)
    assert 'VLLM_API_KEY="${PPSPEC_TEST_KEY}"' in dry.stdout
    assert "500" in verify_out[0] and "Bearer" in verify_out[0], verify_out[0]  # the echo reached verify's message...
    everything = "\n".join(
        [
            out,
            verify_out[0],
            dry.stdout,
            dry.stderr,
            dry_json.stdout,
            dry_json.stderr,
            _all_text([run_dir, tmp_path / "profile.yaml"]),
        ]
    )
    if (tmp_path / "report.json").exists():
        everything += _all_text([tmp_path / "report.json"])
    assert KEY not in everything  # ...but not the key
    assert KEY[:16] not in everything


def test_verify_redacts_a_key_echoed_where_its_message_is_cut(tmp_path):
    """verify shortens a server's error text for its message; an echoed key that straddles the cut
    must not leave its first characters behind."""
    port = PF.free_port()
    target = PF.write_target(tmp_path / "t")
    profile = {
        "name": "cut",
        "target": {"model": str(target)},
        "platform": "cpu",
        "server": {"host": "127.0.0.1", "port": port, "api_key_env": "PPSPEC_TEST_KEY"},
    }
    # error body: {"error": "<pad>bad request with Authorization: Bearer KEY"}: the key starts at 50 + pad
    env = {"PPSPEC_TEST_KEY": KEY, "FAKE_VLLM_REFLECT": "1", "FAKE_VLLM_REFLECT_PAD": "242"}
    seen: list[str] = []

    def while_serving(_run_dir: Path) -> None:
        cp = subprocess.run(
            PPSPEC
            + [
                "verify",
                "--endpoint",
                f"http://127.0.0.1:{port}",
                "--api-key-env",
                "PPSPEC_TEST_KEY",
                "--num-prompts",
                "1",
            ],
            capture_output=True,
            text=True,
            env=PF.ppspec_env(env),
            cwd=REPO,
            timeout=120,
        )
        seen.append(cp.stdout + cp.stderr)

    rc, out, _, _ = _serve_fake(tmp_path, profile, env=env, extra={"while_serving": while_serving})
    assert rc == 143, out  # stopped by SIGTERM (serve exits 128+N)
    assert "Bearer" in seen[0], seen[0]  # the echo is in the message, cut somewhere after "Bearer "
    assert KEY[:4] not in seen[0].split("Bearer", 1)[1], seen[0]


# ---------------------------------------------------------------------------------------------
# the plugin's plan file


def test_engine_reads_the_plan_file_ppspec_wrote(tmp_path):
    from ppspec_cli.running.planfile import PLAN_FORMAT, read_plan_file

    target = PF.write_target(tmp_path / "t")
    rc, out, rec, run_dir = _serve_fake(
        tmp_path,
        {
            "name": "planned",
            "target": {"model": str(target)},
            "platform": "cpu",
            "server": {"host": "127.0.0.1", "port": PF.free_port()},
        },
    )
    assert rc == 143, out  # stopped by SIGTERM (serve exits 128+N)
    assert rec["plan_file"] == str(run_dir / "plan.json")
    data = read_plan_file(rec["plan_file"])
    assert data["format"] == PLAN_FORMAT and data["profile"] == "planned"


PLUGIN_PROBE = r"""
import json, os, sys
from ppspec_cli.running.engine import plugin

out = {}
for name, path in json.loads(sys.argv[1]).items():
    os.environ["PPSPEC_PLAN_FILE"] = path
    plugin.reset_for_tests()
    try:
        plugin.register()
        out[name] = "activated"
    except plugin.PluginRefusal as e:
        out[name] = "refused: " + str(e)
    except BaseException as e:
        out[name] = f"crashed: {type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""


@pytest.mark.vllm
def test_plugin_refuses_foreign_and_unreadable_plan_files(tmp_path):
    """In a fresh interpreter, as in an engine process. (Unit tests of each refusal: test_plugin.py.)"""
    evil_pack = tmp_path / "evil"
    evil_pack.mkdir()
    marker = tmp_path / "PACK-EXECUTED"
    (evil_pack / "patches.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef get_patches():\n    return []\n")
    plan = {
        "format": "ppspec-plan/1",
        "profile": "p",
        "pack": None,
        "plan": None,
        "expect": {},
        "status_dir": str(tmp_path / "status"),
    }
    files = {
        "pack-path-trick": {**plan, "pack": "../../../../" + str(evil_pack)},
        "foreign-format": {**plan, "format": "other-tool/1"},
        "not-json": "{not json",
        "a-list": [1, 2],
    }
    paths = {}
    for name, content in files.items():
        p = tmp_path / f"{name}.json"
        p.write_text(content if isinstance(content, str) else json.dumps(content))
        paths[name] = str(p)
    paths["missing"] = str(tmp_path / "nope.json")
    paths["a-directory"] = str(tmp_path)
    cp = subprocess.run(
        [sys.executable, "-c", PLUGIN_PROBE, json.dumps(paths)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=PF.ppspec_env({}),
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    for name in paths:
        assert res[name].startswith("refused: ppspec plugin refused to start the engine"), (name, res[name])
    assert "unknown adapter pack" in res["pack-path-trick"]
    assert not marker.exists(), "the plugin executed a file named by the plan"


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_plan_file_must_be_a_regular_file(special, tmp_path):
    """A plan file path naming a device or a FIFO must be refused, not read until memory runs out
    or block the engine forever."""
    if special == "fifo":
        special = str(tmp_path / "plan.fifo")
        os.mkfifo(special)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from ppspec_cli.running.planfile import PlanFileError, read_plan_file\n"
        "try:\n    read_plan_file(sys.argv[1])\nexcept PlanFileError as e:\n    print('refused:', e.what)\n"
    )
    cp = subprocess.run([sys.executable, "-c", code, special], capture_output=True, text=True, cwd=REPO, timeout=20)
    assert cp.stdout.startswith("refused:"), cp.stdout + cp.stderr
