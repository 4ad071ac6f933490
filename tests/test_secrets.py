"""No secret anywhere (ppspec_cli/io/redact.py): one name rule for secrets, one redaction layer for
every printed byte and written file, secrets never on an engine command line."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import inprocess
import pytest
import yaml

from ppspec_cli.io import redact, safeio

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "fixtures" / "bad"))
import ppspec_faults as PF  # noqa: E402

#: Real-world secret names (env variables and engine options), each spelling family.
SECRET_NAMES = [
    "API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "VLLM_API_KEY",
    "WANDB_API_KEY",
    "NGC_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "NPM_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "S3_SECRET_KEY",
    "AZURE_OPENAI_APIKEY",
    "MYAPIKEY",
    "apiKey",
    "hfToken",
    "DB_PASSWORD",
    "PGPASSWORD",
    "MYSQL_ROOT_PASSWORD",
    "REDIS_PASS",
    "CLIENT_SECRET",
    "SLACK_WEBHOOK_SECRET",
    "PRIVATE_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "REPLICATE_API_TOKEN",
    "api-key",
    "hf-token",
    "OPENAI_KEY",
    "SECRET",
    "TOKEN",
    "DOCKER_PASSWD",
    "SSH_PASSPHRASE",
]
#: Names that only look like it: must stay ordinary settings.
PLAIN_NAMES = [
    "TOKENIZERS_PARALLELISM",
    "MAX_NUM_BATCHED_TOKENS",
    "max-num-batched-tokens",
    "tokenizer",
    "tokenizer-mode",
    "PWD",
    "OLDPWD",
    "PATH",
    "HF_HOME",
    "SSL_KEYFILE",
    "ssl-keyfile",
    "ssl-certfile",
    "VLLM_CPU_KVCACHE_SPACE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "KEYBOARD_LAYOUT",
    "max-tokens",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name):
    assert redact.is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name):
    assert not redact.is_secret_name(name)


def test_redact_everywhere_in_text_and_data():
    redact.register("sk-unit-test-0123456789")
    assert redact.redact("a sk-unit-test-0123456789 b") == "a *** b"
    assert redact.redact_data({"k": ["x sk-unit-test-0123456789"], "sk-unit-test-0123456789": 1}) == {
        "k": ["x ***"],
        "***": 1,
    }
    redact.register("abc")  # too short to be registered: would redact ordinary words
    assert redact.redact("abc") == "abc"


def test_files_written_by_ppspec_are_redacted(tmp_path):
    redact.register("sk-file-test-9876543210")
    safeio.write_text(tmp_path / "f.json", '{"x": "sk-file-test-9876543210"}')
    assert "sk-file-test" not in (tmp_path / "f.json").read_text()


KEY = "sk-cli-DISTINCTIVE-5f4e3d2c1b"


def _ppspec(args, env, cwd):
    e = PF.ppspec_env({"PYTHONPATH": str(REPO), **env})
    return subprocess.run(
        [sys.executable, "-m", "ppspec_cli.cli", *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=120
    )


@pytest.mark.slow  # runs the CLI in a subprocess: the token is in the environment it starts with
def test_secret_env_values_never_printed(tmp_path):
    """A token in the environment that reaches a message (here: through a model path) is masked."""
    prof = {"name": "p", "target": {"model": f"/nonexistent/{KEY}"}, "platform": "cuda"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    cp = _ppspec(["check", str(tmp_path / "p.yaml")], {"HF_TOKEN": KEY}, tmp_path)
    assert cp.returncode in (1, 2) and "nonexistent" in cp.stdout + cp.stderr
    assert KEY not in cp.stdout + cp.stderr


@pytest.mark.parametrize(
    "where",
    [
        {"engine": {"hf-token": KEY}},
        {"engine": {"api-key": KEY}},
        {"env": {"API_KEY": KEY}},
        {"env": {"AWS_SECRET_ACCESS_KEY": KEY}},
    ],
)
def test_secrets_in_profile_are_refused_never_on_a_command_line(tmp_path, where):
    PF.write_target(tmp_path / "t")
    prof = {"name": "p", "target": {"model": str(tmp_path / "t")}, "platform": "cuda", **where}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    for extra in ([], ["--json"]):
        cp = inprocess.run("serve", str(tmp_path / "p.yaml"), "--dry-run", *extra, cwd=tmp_path)
        assert cp.returncode == 1 and ("secret" in cp.stdout + cp.stderr or "api_key_env" in cp.stderr)
        assert KEY not in cp.stdout + cp.stderr


class _Echo(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        self.send_response(302)
        self.send_header("Location", f"http://elsewhere.example/?k={key}")
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_server_echo_in_a_redirect_is_masked_in_output(tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        cp = inprocess.run(
            "verify", "--endpoint", url, "--api-key-env", "MY_SERVER_KEY", env={"MY_SERVER_KEY": KEY}, cwd=tmp_path
        )
    finally:
        srv.shutdown()
        srv.server_close()
    assert cp.returncode == 1 and "redirect" in cp.stdout + cp.stderr
    assert KEY not in cp.stdout + cp.stderr and "***" in cp.stdout + cp.stderr
    assert os.environ.get("MY_SERVER_KEY") is None
