"""Issue 32: exports carry what `check` says. Every warning (acknowledged risks under `trust:`
included) is printed on stderr and written as a comment in the exported file; Kubernetes names are
valid for their kind (a Service name is a DNS-1035 label); a P/D `shared_storage_path` is a path
risk like an engine option's. In process (tests/inprocess.py)."""

from __future__ import annotations

import re
from pathlib import Path

import inprocess
import pytest

from ppspec_cli.running.export import k8s_name

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _profile(tmp_path: Path, name: str = "w", extra: str = "") -> Path:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    (target / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,'
        ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 8192}'
    )
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"name: {name}\ntarget: {{model: {target}}}\nplatform: cuda\ntopology: {{pipeline_parallel: 2, "
        f"gpus_per_node: 1, nodes: 2}}\nlaunch: {{master_addr: 10.0.0.1}}\n{extra}"
    )
    return prof


STRANGER = "env: {LD_PRELOAD: /opt/x/libhook.so}\ntrust: {env: [LD_PRELOAD]}\n"


@pytest.mark.parametrize("kind", ["slurm", "k8s"])
def test_an_acknowledged_risk_is_on_stderr_and_in_the_file(tmp_path, kind):
    prof = _profile(tmp_path, extra=STRANGER)
    out = tmp_path / "out"
    args = ["export", kind, str(prof), "-o", str(out), "--offline"]
    if kind == "k8s":
        args += ["--image", "img:1", "--volume", f"models:{tmp_path}"]
    r = inprocess.run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check warning untrusted-acknowledged" in r.stderr and "LD_PRELOAD" in r.stderr
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("# check warning: untrusted-acknowledged")]
    assert lines and "LD_PRELOAD" in lines[0], out.read_text()[:800]


def test_without_the_risk_there_is_no_warning_line(tmp_path):
    """The test can fail: the same profile without the `env:` entry has no such line."""
    prof = _profile(tmp_path)
    out = tmp_path / "out"
    r = inprocess.run("export", "slurm", str(prof), "-o", str(out), "--offline")
    assert r.returncode == 0 and "untrusted-acknowledged" not in out.read_text()


@pytest.mark.parametrize("name", ["8b-llama", "9", "-x-", "Llama_3.1-8B", "a" * 80, "x" * 49 + "-" + "y", "ü-model"])
def test_k8s_names_are_dns_1035_labels(name):
    n = k8s_name(name)
    assert DNS_1035.fullmatch(n) and len(n) + len("-api-key") <= 63, n


def test_a_profile_named_8b_exports_a_valid_service_name(tmp_path):
    import yaml

    prof = _profile(tmp_path, name="8b-eagle3")
    r = inprocess.run("export", "k8s", str(prof), "--image", "img:1", "--offline", "--volume", f"models:{tmp_path}")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    names = {d["kind"]: d["metadata"]["name"] for d in docs}
    assert DNS_1035.fullmatch(names["Service"]), names
    assert re.fullmatch(r"p-8b-eagle3-[0-9a-f]{8}", names["Service"])  # issue 42: a changed name carries its hash


def test_a_pd_shared_storage_path_is_a_path_risk():
    """An error (serve refuses) until acknowledged under `trust.engine`, then a warning naming it."""
    from ppspec_cli.planning.engine_options import launch_refusals, pd_kv_view, untrusted_findings
    from ppspec_cli.planning.profile import KvTransfer

    kv = pd_kv_view(KvTransfer(connector="ExampleConnector", extra_config={"shared_storage_path": "/tmp/shared-kv"}))
    refused = [f for f in launch_refusals({}, {}, {}, kv) if f.code == "engine-untrusted-option"]
    assert refused and refused[0].field == "kv_transfer" and "KV cache" in refused[0].message
    acked = untrusted_findings({}, {}, {"engine": ["kv-transfer-config"]}, kv)
    assert [f.code for f in acked] == ["untrusted-acknowledged"] and acked[0].severity == "warning"
    none = pd_kv_view(KvTransfer(connector="ExampleConnector"))
    assert not [f for f in launch_refusals({}, {}, {}, none) if f.code == "engine-untrusted-option"]
