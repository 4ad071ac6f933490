"""The profile schema and loader: every field, and every way a user can get the file wrong.

Each wrong input must give one PpspecError naming the key and its line (or line:column for YAML
syntax), never a pydantic/yaml traceback."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ppspec_cli.errors import PpspecError
from ppspec_cli.planning.profile import MAX_PROFILE_BYTES, MAX_PROFILE_NODES, Profile, load_profile, parse_profile

FULL = """\
name: kimi-k3-dspark
description: Kimi-K3 with a DSpark drafter
target:
  model: moonshotai/Kimi-K3
  revision: abc123
drafter:
  method: dspark
  model: ./drafter
  revision: v2
  num_speculative_tokens: 7
  tensor_parallel: 1
  taps: [3, 31, 59]
  tap_convention: capture_point
  schedule: [[1, 4, 7], [5, 64, 0]]
topology:
  tensor_parallel: 8
  pipeline_parallel: 2
  data_parallel: 1
  nodes: 2
  gpus_per_node: 8
  layer_partition: [31, 30]
platform: cuda
engine_version: 0.33.0
adapter: kimi_k3
hardware: h200
dtype: bfloat16
trust_remote_code: true
server:
  host: 0.0.0.0
  port: 8123
  api_key_env: MY_KEY
  served_model_name: kimi
launch:
  executor: mp
  master_addr: 10.0.0.1
  master_port: 29555
  health_timeout_s: 1200
  slurm:
    time: "2-00:00:00"
    cpus_per_node: 64
    mem_per_node: 512G
engine:
  max-model-len: 4096
  enforce-eager: true
env:
  NCCL_DEBUG: INFO
trust:
  engine: [chat-template]
  env: [HF_ENDPOINT]
verify:
  num_prompts: 6
  max_tokens: 40
"""

#: The disaggregated keys (they exclude the top-level `topology`, so they get their own profile).
FULL_PD = """\
name: pd
target: {model: org/model}
roles:
  prefill:
    topology: {tensor_parallel: 8, pipeline_parallel: 2, nodes: 2, gpus_per_node: 8}
    engine: {block-size: 16}
    server: {port: 8100}
    launch: {executor: mp, master_addr: 10.0.0.1}
  decode:
    topology: {tensor_parallel: 8}
    engine: {}
    server: {port: 8200}
    launch: {executor: mp}
kv_transfer:
  connector: NixlConnector
  extra_config: {enforce_handshake_compat: true}
  options: {kv_buffer_device: cuda}
"""

MIN = "name: p\ntarget: {model: org/model}\n"


def err(text: str, source: str = "p.yaml") -> PpspecError:
    with pytest.raises(PpspecError) as ei:
        parse_profile(text, source)
    return ei.value


def test_every_field_is_read():
    p = parse_profile(FULL, "full.yaml")
    assert p.name == "kimi-k3-dspark" and p.description.startswith("Kimi-K3")
    assert (p.target.model, p.target.revision) == ("moonshotai/Kimi-K3", "abc123")
    d = p.drafter
    assert (d.method, d.model, d.revision, d.num_speculative_tokens, d.tensor_parallel) == (
        "dspark",
        "./drafter",
        "v2",
        7,
        1,
    )
    assert d.taps == [3, 31, 59] and d.tap_convention == "capture_point" and d.schedule == [[1, 4, 7], [5, 64, 0]]
    t = p.topology
    assert (t.tensor_parallel, t.pipeline_parallel, t.data_parallel, t.nodes, t.gpus_per_node) == (8, 2, 1, 2, 8)
    assert t.layer_partition == [31, 30]
    assert (p.platform, p.adapter, p.dtype, p.trust_remote_code) == ("cuda", "kimi_k3", "bfloat16", True)
    assert p.hardware == "h200"
    assert p.engine_version == "0.33.0"
    assert (p.server.host, p.server.port, p.server.api_key_env, p.server.served_model_name) == (
        "0.0.0.0",
        8123,
        "MY_KEY",
        "kimi",
    )
    assert (p.launch.executor, p.launch.master_addr, p.launch.master_port, p.launch.health_timeout_s) == (
        "mp",
        "10.0.0.1",
        29555,
        1200,
    )
    assert (p.launch.slurm.time, p.launch.slurm.cpus_per_node, p.launch.slurm.mem_per_node) == (
        "2-00:00:00",
        64,
        "512G",
    )
    assert p.engine == {"max-model-len": 4096, "enforce-eager": True}
    assert p.env == {"NCCL_DEBUG": "INFO"}
    assert (p.verify.num_prompts, p.verify.max_tokens) == (6, 40)
    assert p.speculative


def test_the_schema_has_no_field_this_test_does_not_set():
    """If someone adds a field, FULL (and the test above) must grow with it."""
    import yaml

    data = yaml.safe_load(FULL)

    def missing(model, d, prefix=""):
        out = []
        for name, f in model.model_fields.items():
            if name not in d:
                out.append(prefix + name)
            else:
                ann = f.annotation
                for cand in (ann, *getattr(ann, "__args__", ())):
                    if isinstance(cand, type) and hasattr(cand, "model_fields") and isinstance(d[name], dict):
                        out += missing(cand, d[name], prefix + name + ".")
        return out

    assert missing(Profile, data) == ["roles", "kv_transfer"]  # in FULL_PD (they exclude a top-level topology)
    from ppspec_cli.planning.profile import KvTransfer, RoleSpec

    pd = yaml.safe_load(FULL_PD)
    # their sub-models (Topology, Server, Launch) are covered by FULL
    assert set(RoleSpec.model_fields) == set(pd["roles"]["prefill"]) == set(pd["roles"]["decode"])
    assert set(KvTransfer.model_fields) == set(pd["kv_transfer"])


def test_every_pd_field_is_read():
    p = parse_profile(FULL_PD)
    pre, dec = p.roles["prefill"], p.roles["decode"]
    assert (pre.topology.pipeline_parallel, pre.topology.nodes, dec.topology.tensor_parallel) == (2, 2, 8)
    assert pre.engine == {"block-size": 16} and (pre.server.port, dec.server.port) == (8100, 8200)
    assert pre.launch.master_addr == "10.0.0.1"
    kt = p.kv_transfer
    assert (kt.connector, kt.extra_config, kt.options) == (
        "NixlConnector",
        {"enforce_handshake_compat": True},
        {"kv_buffer_device": "cuda"},
    )
    assert p.for_role("prefill").engine == {"block-size": 16}


def test_defaults():
    p = parse_profile(MIN)
    assert p.drafter is None and not p.speculative
    assert (p.topology.tensor_parallel, p.topology.pipeline_parallel, p.topology.data_parallel, p.topology.nodes) == (
        1,
        1,
        1,
        1,
    )
    assert p.topology.gpus_per_node is None and p.topology.layer_partition is None
    assert (p.platform, p.adapter, p.trust_remote_code) == ("auto", "auto", False)
    assert (p.server.host, p.server.port, p.server.api_key_env) == ("127.0.0.1", 8000, None)
    assert (p.launch.executor, p.launch.master_port) == ("mp", 29501)
    assert p.engine == {} and p.env == {}
    assert (p.verify.num_prompts, p.verify.max_tokens) == (None, None)
    p2 = parse_profile(MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 3}\n")
    assert p2.drafter.tap_convention == "auto" and p2.drafter.taps is None and p2.drafter.tensor_parallel is None


@pytest.mark.parametrize(
    "text,key,line",
    [
        (MIN + "speculative: 3\n", "speculative", 3),
        ("name: p\ntarget:\n  model: a/b\n  revison: main\n", "target.revison", 4),
        (MIN + "topology:\n  pipeline_parallel: 2\n  layer_partitions: [1, 2]\n", "topology.layer_partitions", 5),
        (MIN + "drafter:\n  method: eagle3\n  model: a/b\n  num_speculative_tokens: 2\n  tap: [1]\n", "drafter.tap", 7),
        (MIN + "server:\n  hostname: x\n", "server.hostname", 4),
        (MIN + "launch: {execuor: ray}\n", "launch.execuor", 3),
    ],
)
def test_unknown_key_names_key_and_line(text, key, line):
    e = err(text)
    assert f"`{key}`" in e.what and "unknown key" in e.what
    assert f"line {line}" in e.what
    assert e.where == f"p.yaml:{line}"
    assert e.exit_code == 2


def test_several_errors_are_all_listed_with_their_lines():
    e = err("name: p\ntarget: {model: a/b}\nfoo: 1\ntopology:\n  bar: 2\n")
    assert "line 3: unknown key `foo`" in e.what and "line 5: unknown key `topology.bar`" in e.what


@pytest.mark.parametrize(
    "text,line,col",
    [
        ("name: a\ntarget: {model: x/y\n  foo: [\n", 3, 6),
        ("name: a\n  target: b\n", 2, 9),
        ("name: a\ntarget: [1, 2\n", 3, 1),
        ("name: 'unterminated\n", 2, 1),
        ("name: a\n\ttarget: b\n", 2, 1),
    ],
)
def test_malformed_yaml_gives_line_and_column(text, line, col):
    e = err(text)
    assert "not valid YAML" in e.what
    assert e.where == f"p.yaml:{line}:{col}"


@pytest.mark.parametrize(
    "field_yaml,needle",
    [
        ("topology: {pipeline_parallel: '2'}", "topology.pipeline_parallel"),
        ("topology: {pipeline_parallel: true}", "topology.pipeline_parallel"),
        ("topology: {pipeline_parallel: 2.0}", "topology.pipeline_parallel"),
        ("topology: {pipeline_parallel: 0}", "topology.pipeline_parallel"),
        ("topology: {tensor_parallel: -1}", "topology.tensor_parallel"),
        ("topology: {layer_partition: 47}", "topology.layer_partition"),
        ("topology: {layer_partition: [47, '46']}", "topology.layer_partition[1]"),
        ("topology: {gpus_per_node: 65}", "topology.gpus_per_node"),
        ("topology: [1, 2]", "topology"),
        ("trust_remote_code: 'yes'", "trust_remote_code"),
        ("platform: tpu", "platform"),
        ("adapter: 'bad name!'", "adapter"),
        ("server: {port: 70000}", "server.port"),
        ("server: {api_key_env: 'sk-123 secret'}", "server.api_key_env"),
        ("launch: {executor: slurm}", "launch.executor"),
        ("launch: {health_timeout_s: 1}", "launch.health_timeout_s"),
        ("env: {'1BAD': x}", "env"),
        ("env: {OK: 1}", "env.OK"),
        ("engine: [max-model-len]", "engine"),
        ("dtype: 16", "dtype"),
        ("description: [a]", "description"),
    ],
)
def test_wrong_types_and_ranges_name_the_field_and_line(field_yaml, needle):
    e = err(MIN + field_yaml + "\n")
    assert f"`{needle}`" in e.what
    assert "line 3" in e.what and e.where == "p.yaml:3"


@pytest.mark.parametrize(
    "text,needle",
    [
        ("name: bad name\ntarget: {model: a/b}\n", "`name`"),
        ("name: p\ntarget: {model: ''}\n", "`target.model`"),
        ("name: p\ntarget: {model: ' a/b'}\n", "`target.model`"),
        ('name: p\ntarget: {model: "a/b\\n"}\n', "`target.model`"),
        ("name: p\ntarget: a/b\n", "`target`"),
        ("name: 2024-01-01\ntarget: {model: a/b}\n", "`name`"),
        (
            MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 0}\n",
            "`drafter.num_speculative_tokens`",
        ),
        (
            MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 65}\n",
            "`drafter.num_speculative_tokens`",
        ),
        (MIN + "drafter: {method: medusa, model: a/b, num_speculative_tokens: 1}\n", "`drafter.method`"),
        (
            MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, tap_convention: sglang}\n",
            "`drafter.tap_convention`",
        ),
        (
            MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, tensor_parallel: 0}\n",
            "`drafter.tensor_parallel`",
        ),
    ],
)
def test_invalid_values(text, needle):
    e = err(text)
    assert needle in e.what and e.where.startswith("p.yaml:")


def test_missing_required_keys():
    e = err("target: {model: a/b}\n")
    assert "missing required key `name`" in e.what
    e = err("name: p\n")
    assert "missing required key `target`" in e.what
    e = err("name: p\ntarget: {revision: main}\n")
    assert "missing required key `target.model`" in e.what and "line 2" in e.what
    e = err(MIN + "drafter:\n  method: eagle3\n  model: a/b\n")
    assert "missing required key `drafter.num_speculative_tokens`" in e.what and "line 3" in e.what
    e = err(MIN + "drafter: {model: a/b, num_speculative_tokens: 3}\n")
    assert "missing required key `drafter.method`" in e.what


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark", "eagle"])
def test_external_drafters_need_a_model(method):
    e = err(MIN + f"drafter: {{method: {method}, num_speculative_tokens: 2}}\n")
    assert f"method {method!r} needs `model`" in e.what and "line 3" in e.what
    p = parse_profile(MIN + f"drafter: {{method: {method}, model: a/b, num_speculative_tokens: 2}}\n")
    assert p.drafter.model == "a/b"


def test_mtp_needs_no_model_and_refuses_one():
    p = parse_profile(MIN + "drafter: {method: mtp, num_speculative_tokens: 1}\n")
    assert p.drafter.method == "mtp" and p.drafter.model is None
    e = err(MIN + "drafter: {method: mtp, model: a/b, num_speculative_tokens: 1}\n")
    assert "remove `model`" in e.what


def test_engine_version_must_be_a_version():
    assert parse_profile(MIN + "engine_version: 0.32.0+cpu\n").engine_version == "0.32.0+cpu"
    assert "not a version" in err(MIN + "engine_version: latest\n").what


def test_taps_validation():
    ok = parse_profile(MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, taps: [0, 2, 61]}\n")
    assert ok.drafter.taps == [0, 2, 61]
    assert (
        "non-negative"
        in err(MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, taps: [-1, 2]}\n").what
    )
    assert (
        "only applies to eagle3, dflash, dspark"
        in err(MIN + "drafter: {method: mtp, num_speculative_tokens: 1, taps: [1]}\n").what
    )
    assert (
        "only applies" in err(MIN + "drafter: {method: eagle, model: a/b, num_speculative_tokens: 1, taps: [1]}\n").what
    )
    assert (
        "`drafter.taps[1]`"
        in err(MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, taps: [1, x]}\n").what
    )
    assert (
        "`drafter.taps`"
        in err(MIN + "drafter: {method: eagle3, model: a/b, num_speculative_tokens: 1, taps: 3}\n").what
    )
    many = ", ".join(str(i) for i in range(65))
    assert (
        "`drafter.taps`"
        in err(MIN + f"drafter: {{method: eagle3, model: a/b, num_speculative_tokens: 1, taps: [{many}]}}\n").what
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n"])
def test_empty_profile(text):
    e = err(text)
    assert e.what == "the profile is empty" and e.exit_code == 2


@pytest.mark.parametrize("text,kind", [("- a\n- b\n", "list"), ("just a string\n", "str"), ("42\n", "int")])
def test_non_mapping_profile(text, kind):
    e = err(text)
    assert "must be a YAML mapping" in e.what and kind in e.what


def test_non_string_top_level_key():
    assert "keys must be strings" in err(MIN + "1: x\n").what


def test_duplicate_keys_are_errors_with_both_lines():
    e = err("name: a\ntarget: {model: x/y}\nname: b\n")
    assert "duplicate key `name`" in e.what and "lines 1 and 3" in e.what and e.where == "p.yaml:3"
    e = err(MIN + "topology:\n  pipeline_parallel: 2\n  pipeline_parallel: 4\n")
    assert "duplicate key `topology.pipeline_parallel`" in e.what and "lines 4 and 5" in e.what


def test_alias_bomb_is_refused_quickly():
    """A ~500-byte YAML alias bomb expands to 9**9 values; it must fail in well under a second."""
    import time

    lines = ["name: bomb", "target: {model: a/b}", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("engine: {k: *a8}")
    t0 = time.perf_counter()
    e = err("\n".join(lines) + "\n")
    assert time.perf_counter() - t0 < 2.0
    assert f"more than {MAX_PROFILE_NODES} values" in e.what


def test_deep_nesting_is_a_clear_error():
    e = err("name: x\ntarget: {model: a/b}\nengine: {a: " + "[" * 1000 + "]" * 1000 + "}\n")
    assert "nests too deeply" in e.what


def test_overlong_value_is_shown_shortened():
    e = err("name: p\ntarget: {model: a/b}\ndtype: '" + "x" * 5000 + "'\n")
    assert "`dtype`" in e.what and len(e.what) < 600


# ---- files


def test_load_profile_reads_a_file(write_profile):
    p = load_profile(write_profile(FULL))
    assert p.name == "kimi-k3-dspark"


def test_missing_file(tmp_path):
    with pytest.raises(PpspecError) as ei:
        load_profile(tmp_path / "nope.yaml")
    assert "does not exist" in ei.value.what and ei.value.exit_code == 2


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(PpspecError) as ei:
        load_profile(tmp_path)
    assert "is a directory" in ei.value.what


def test_non_utf8_file(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("name: caf\xe9\ntarget: {model: a/b}\n".encode("latin-1"))
    with pytest.raises(PpspecError) as ei:
        load_profile(p)
    assert "not UTF-8" in ei.value.what and ei.value.where == str(p)


def test_binary_file(tmp_path):
    p = tmp_path / "weights.yaml"
    p.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PpspecError):
        load_profile(p)


def test_huge_file_is_refused_without_parsing(tmp_path):
    p = tmp_path / "huge.yaml"
    p.write_text(MIN + "description: '" + "x" * (MAX_PROFILE_BYTES + 10) + "'\n", encoding="utf-8")
    with pytest.raises(PpspecError) as ei:
        load_profile(p)
    assert "larger than" in ei.value.what
    with pytest.raises(PpspecError):
        parse_profile(p.read_text())


def test_unreadable_file(write_profile, monkeypatch):
    """Permission errors (simulated: the suite may run as root) become one clear message."""
    import errno
    import os

    p = write_profile(MIN)
    real_open = os.open

    def deny(path, *a, **k):
        if str(path) == str(p):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(PpspecError) as ei:
        load_profile(p)
    assert "cannot read profile file: Permission denied" in ei.value.what


def test_profile_is_immutable():
    p = parse_profile(MIN)
    with pytest.raises(ValidationError, match="frozen"):
        p.name = "other"  # type: ignore[misc]
