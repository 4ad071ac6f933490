"""Checkpoint metadata from local directories: configs, indexes and safetensors headers.

Checkpoints are built in tmp_path from the real configs in tests/fixtures/models; tensors are real
safetensors files (sparse data region), lying headers are raw bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import fixture_config, safetensors_header, synthetic_kimi_k25_config, write_safetensors

from ppspec_cli.checkpoint.reader import (
    MAX_CONFIG_BYTES,
    MAX_HEADER_BYTES,
    is_local_ref,
    load_checkpoint,
    load_local,
    parse_safetensors_header,
    speculators_view,
    text_part,
)
from ppspec_cli.errors import PpspecError

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


def gaps(ck) -> set[str]:
    return {g.code for g in ck.gaps}


def llama_shards(hidden=4096, vocab=128256, layers=2, dtype="BF16"):
    """A 2-shard Llama-shaped checkpoint: embedding in shard 1, lm_head in shard 2."""
    s1 = {"model.embed_tokens.weight": (dtype, [vocab, hidden])}
    s2 = {"lm_head.weight": (dtype, [vocab, hidden]), "model.norm.weight": (dtype, [hidden])}
    for i in range(layers):
        (s1 if i < layers // 2 else s2)[f"model.layers.{i}.mlp.down_proj.weight"] = (dtype, [hidden, 4 * hidden])
    return {"model-00001-of-00002.safetensors": s1, "model-00002-of-00002.safetensors": s2}


def index_for(shards):
    return {"metadata": {"total_size": 1}, "weight_map": {t: f for f, ts in shards.items() for t in ts}}


# ---------------------------------------------------------------------------------------------
# Config only (a login node)


def test_config_only_directory_is_normal(make_checkpoint):
    d = make_checkpoint("llama", LLAMA)
    ck = load_local("./llama", d)
    assert (ck.num_layers, ck.hidden_size, ck.vocab_size, ck.dtype_bytes) == (32, 4096, 128256, 2)
    assert ck.architectures == ["LlamaForCausalLM"] and ck.model_type == "llama"
    assert ck.tensors is None and ck.weight_map is None and ck.tensor_names() is None
    assert gaps(ck) == {"no-weights"}
    assert ck.find_tensor(["model.embed_tokens.weight"]) is None
    j = ck.to_json()
    assert j["num_hidden_layers"] == 32 and j["tensors_read"] is False and j["index"] is False


def test_config_and_index_without_weights_finds_embedding_via_index(make_checkpoint):
    d = make_checkpoint("llama", LLAMA, index=fixture_config(LLAMA, "model.safetensors.index.json"))
    ck = load_local("llama", d)
    assert gaps(ck) == {"no-weights"}  # index names 4 shards, none present: metadata-only, not "missing"
    assert ck.index_total_size == 16060522496
    assert ck.find_tensor(["language_model.model.embed_tokens.weight", "model.embed_tokens.weight"]) == (
        "model.embed_tokens.weight",
        "model-00001-of-00004.safetensors",
    )
    assert ck.find_tensor(["lm_head.weight"]) == ("lm_head.weight", "model-00004-of-00004.safetensors")


def test_missing_config(make_checkpoint):
    ck = load_local("x", make_checkpoint("empty", None))
    assert gaps(ck) == {"missing-config"} and ck.config is None and ck.num_layers is None


def test_partial_config_is_reported_not_filled(make_checkpoint):
    d = make_checkpoint(
        "rh", "RedHatAI__Llama-3.1-8B-Instruct-speculator.eagle3/config.partial.json", config_name="config.partial.json"
    )
    ck = load_local("rh", d)
    assert "partial-config" in gaps(ck)
    # the partial file has no transformer_layer_config: layer count, hidden and vocab stay unknown
    assert {"missing-num-hidden-layers", "missing-hidden-size", "missing-vocab-size"} <= gaps(ck)
    assert ck.num_layers is None and ck.hidden_size is None and ck.vocab_size is None


def test_partial_index_is_reported(make_checkpoint):
    d = make_checkpoint(
        "dsv3",
        "deepseek-ai__DeepSeek-V3",
        index=fixture_config("deepseek-ai__DeepSeek-V3", "model.safetensors.index.partial.json"),
        index_name="model.safetensors.index.partial.json",
    )
    ck = load_local("dsv3", d)
    assert {"partial-index", "bad-index"} <= gaps(ck)  # marked partial and no usable weight_map
    assert ck.weight_map is None and ck.num_layers == 61


@pytest.mark.parametrize(
    "patch,code",
    [
        ({"num_hidden_layers": None}, "missing-num-hidden-layers"),
        ({"num_hidden_layers": "32"}, "bad-num-hidden-layers"),
        ({"num_hidden_layers": True}, "bad-num-hidden-layers"),
        ({"num_hidden_layers": 0}, "bad-num-hidden-layers"),
        ({"hidden_size": -4096}, "bad-hidden-size"),
        ({"hidden_size": None}, "missing-hidden-size"),
        ({"vocab_size": 1.5}, "bad-vocab-size"),
        ({"vocab_size": None}, "missing-vocab-size"),
        ({"architectures": None}, "missing-architectures"),
        ({"architectures": "LlamaForCausalLM"}, "missing-architectures"),
    ],
)
def test_config_field_gaps(make_checkpoint, patch, code):
    cfg = fixture_config(LLAMA)
    for k, v in patch.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    ck = load_local("x", make_checkpoint("m", cfg))
    assert code in gaps(ck)
    key = code.split("-", 1)[1].replace("-", "_")
    if key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        assert getattr(ck, {"num_hidden_layers": "num_layers"}.get(key, key)) is None  # never guessed


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
    ],
)
def test_unreadable_config_is_one_error(tmp_path, content, needle):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_bytes(content)
    with pytest.raises(PpspecError) as ei:
        load_local("m", d)
    assert needle in ei.value.what and ei.value.exit_code == 1


def test_huge_config_is_refused(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    with (d / "config.json").open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    ck = load_local("m", d)
    gaps = {g.code: g.message for g in ck.gaps}
    assert "MAX_CONFIG_BYTES" in gaps["config-over-read-limit"] and ck.num_layers is None


def test_not_a_directory(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("{}")
    with pytest.raises(PpspecError) as ei:
        load_local("x", f)
    assert "not a directory" in ei.value.what
    with pytest.raises(PpspecError) as ei:
        load_local("x", tmp_path / "nope")
    assert "not found" in ei.value.what


# ---------------------------------------------------------------------------------------------
# Multimodal and speculators configs


def test_multimodal_text_config(make_checkpoint):
    ck = load_local("k", make_checkpoint("kimi", synthetic_kimi_k25_config()))
    assert ck.text_path == "text_config"
    assert (ck.num_layers, ck.hidden_size, ck.vocab_size) == (61, 7168, 163840)  # not the vision tower's 27
    assert ck.architectures == ["KimiK25ForConditionalGeneration"]
    assert ck.dtype_bytes is None or ck.dtype_bytes in (1, 2)


def test_text_part():
    assert text_part({"num_hidden_layers": 3}) == ({"num_hidden_layers": 3}, "")
    assert text_part({"text_config": {"num_hidden_layers": 3}, "num_hidden_layers": 9})[1] == "text_config"
    # a text_config without model dimensions is not taken for the text model
    assert text_part({"text_config": {"foo": 1}, "num_hidden_layers": 9})[1] == ""


def test_speculators_format_drafter(make_checkpoint):
    d = make_checkpoint("nm", "nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    ck = load_local("nm", d)
    assert ck.text_path == "transformer_layer_config"
    assert (ck.num_layers, ck.hidden_size, ck.vocab_size) == (1, 4096, 128256)
    view = speculators_view(ck.config)
    assert view["draft_vocab_size"] == 32000 and view["speculators_model_type"] == "eagle3"
    assert "target_hidden_size" not in view  # null in the file: not carried (vLLM skips None)
    assert "eagle_aux_hidden_state_layer_ids" not in view  # the file names no taps


def test_speculators_view_maps_taps_like_vllm():
    base = {
        "speculators_config": {"algorithm": "x"},
        "transformer_layer_config": {"num_hidden_layers": 1, "hidden_size": 8},
    }
    e3 = speculators_view({**base, "speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    assert e3["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    df = speculators_view({**base, "speculators_model_type": "dflash", "aux_hidden_state_layer_ids": [2, 10]})
    assert df["eagle_aux_hidden_state_layer_ids"] == [2, 10] and df["dflash_config"]["target_layer_ids"] == [1, 9]
    ds = speculators_view({**base, "speculators_model_type": "dspark", "aux_hidden_state_layer_ids": [5, 31]})
    assert ds["eagle_aux_hidden_state_layer_ids"] == [5, 31] and ds["target_layer_ids"] == [4, 30]
    assert speculators_view({"hidden_size": 1}) == {"hidden_size": 1}  # not speculators: unchanged


# ---------------------------------------------------------------------------------------------
# Weights: headers, shards, indexes


def test_headers_are_read_and_embedding_found_with_its_shard(make_checkpoint):
    shards = llama_shards()
    d = make_checkpoint("llama", LLAMA, index=index_for(shards), shards=shards)
    ck = load_local("llama", d)
    assert gaps(ck) == set()
    assert ck.tensors is not None and ck.tensors["lm_head.weight"].shape == (128256, 4096)
    assert ck.find_tensor(["model.embed_tokens.weight"]) == (
        "model.embed_tokens.weight",
        "model-00001-of-00002.safetensors",
    )
    per = ck.layer_weight_bytes(32)
    assert per[0] == per[1] == 4096 * 4 * 4096 * 2 and per[2] == 0
    # headers only: the 1 GB data region of each shard was never read
    assert ck.tensors["model.embed_tokens.weight"].nbytes == 128256 * 4096 * 2


def test_single_file_without_index(make_checkpoint):
    d = make_checkpoint("one", LLAMA, shards={"model.safetensors": {"model.embed_tokens.weight": ("F16", [10, 4])}})
    ck = load_local("one", d)
    assert ck.weight_map is None and ck.find_tensor(["model.embed_tokens.weight"]) == (
        "model.embed_tokens.weight",
        "model.safetensors",
    )


def test_matches_the_safetensors_package(tmp_path):
    """Our header parser agrees with a file written by the safetensors package itself."""
    np = pytest.importorskip("numpy", reason="numpy writes the reference file")
    from safetensors.numpy import save_file

    p = tmp_path / "ref.safetensors"
    save_file(
        {
            "a": np.zeros((3, 5), dtype=np.float16),
            "fc.weight": np.ones((4, 12), dtype=np.float32),
            "b": np.zeros((0,), dtype=np.int64),
        },
        str(p),
    )
    raw = p.read_bytes()
    got = parse_safetensors_header(raw, file="ref.safetensors", file_size=len(raw))
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {
        "a": ("F16", (3, 5)),
        "fc.weight": ("F32", (4, 12)),
        "b": ("I64", (0,)),
    }


def test_index_with_missing_shards(make_checkpoint):
    shards = llama_shards()
    only_first = {k: v for k, v in shards.items() if "00001" in k}
    d = make_checkpoint("llama", LLAMA, index=index_for(shards), shards=only_first)
    ck = load_local("llama", d)
    assert "missing-shards" in gaps(ck)
    assert "model-00002-of-00002.safetensors" in next(g.message for g in ck.gaps if g.code == "missing-shards")
    assert ck.tensors is None  # incomplete: the index stays the name list
    assert ck.find_tensor(["lm_head.weight"]) == ("lm_head.weight", "model-00002-of-00002.safetensors")


def test_index_that_disagrees_with_the_headers(make_checkpoint):
    shards = llama_shards()
    idx = index_for(shards)
    idx["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors"  # it lives in shard 2
    idx["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"  # in no shard
    ck = load_local("llama", make_checkpoint("llama", LLAMA, index=idx, shards=shards))
    assert "index-mismatch" in gaps(ck)
    assert "2 tensor(s)" in next(g.message for g in ck.gaps if g.code == "index-mismatch")
    assert ck.find_tensor(["lm_head.weight"])[1] == "model-00002-of-00002.safetensors"  # the headers win


@pytest.mark.parametrize(
    "evil", ["../outside.safetensors", "/etc/outside.safetensors", "sub/../../outside.safetensors"]
)
def test_path_tricks_in_shard_names_are_never_followed(make_checkpoint, tmp_path, evil):
    write_safetensors(tmp_path / "outside.safetensors", {"secret.weight": ("F32", [2])})
    shards = llama_shards()
    idx = index_for(shards)
    idx["weight_map"]["model.embed_tokens.weight"] = evil
    ck = load_local("llama", make_checkpoint("llama", LLAMA, index=idx, shards=shards))
    assert "unsafe-shard-name" in gaps(ck)
    assert ck.tensors is None or "secret.weight" not in ck.tensors


def test_bad_index_weight_map(make_checkpoint):
    ck = load_local("m", make_checkpoint("m", LLAMA, index={"weight_map": {"a": 3}}))
    assert "bad-index" in gaps(ck) and ck.weight_map is None


# ---- lying and broken headers


def _write_raw(d: Path, raw: bytes, name="model.safetensors") -> Path:
    (d / name).write_bytes(raw)
    return d


def _valid(tensors=None):
    tensors = tensors or {"model.embed_tokens.weight": ("F16", [8, 4])}
    prefix, size = safetensors_header(tensors)
    return prefix, size


def _json_header(obj) -> bytes:
    raw = json.dumps(obj).encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize(
    "build,needle",
    [
        (lambda: _valid()[0] + b"\x00" * (_valid()[1] - 1), "past the end"),  # data region one byte short
        (lambda: _valid()[0], "past the end"),  # header only, no data at all
        (
            lambda: _json_header({"t": {"dtype": "F16", "shape": [8, 4], "data_offsets": [0, 60]}}) + b"\x00" * 64,
            "span 60 bytes",
        ),
        (
            lambda: _json_header({"t": {"dtype": "F16", "shape": [8, 4], "data_offsets": [10, 5]}}) + b"\x00" * 64,
            "bad data_offsets",
        ),
        (
            lambda: _json_header({"t": {"dtype": "F16", "shape": [8, -4], "data_offsets": [0, 64]}}) + b"\x00" * 64,
            "bad shape",
        ),
        (
            lambda: _json_header({"t": {"dtype": "Q4", "shape": [8, 4], "data_offsets": [0, 64]}}) + b"\x00" * 64,
            "unknown dtype",
        ),
        (lambda: _json_header({"t": [1, 2]}) + b"\x00" * 64, "not an object"),
        (lambda: _json_header([1, 2]), "not a JSON object"),
        (lambda: struct.pack("<Q", 200) + b'{"t": {"dtype": "F16"', "truncated"),  # download cut short
        (lambda: struct.pack("<Q", 9) + b"{not json", "not valid JSON"),
        (lambda: struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc", "not valid JSON"),
        (lambda: struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", "exceeds"),
        (lambda: struct.pack("<Q", 2**64 - 1), "exceeds"),
        (lambda: b"\x01\x02\x03", "shorter than"),
        (lambda: b"", "shorter than"),
    ],
)
def test_lying_or_broken_headers_are_gaps(make_checkpoint, build, needle):
    d = _write_raw(make_checkpoint("m", LLAMA), build())
    ck = load_local("m", d)
    msgs = [g.message for g in ck.gaps if g.code == "bad-safetensors"]
    assert msgs and needle in msgs[0], ck.gaps
    assert ck.tensors is None


def test_huge_claimed_header_is_not_read_whole(make_checkpoint, monkeypatch):
    """A header claiming ~100 MB on a small file: we read what is there, never allocate the claim."""
    d = _write_raw(make_checkpoint("m", LLAMA), struct.pack("<Q", MAX_HEADER_BYTES) + b"{}")
    ck = load_local("m", d)
    assert "truncated" in next(g.message for g in ck.gaps if g.code == "bad-safetensors")


def test_one_bad_shard_among_good_ones(make_checkpoint):
    shards = llama_shards()
    d = make_checkpoint("llama", LLAMA, index=index_for(shards), shards=shards)
    p = d / "model-00002-of-00002.safetensors"
    with p.open("r+b") as fh:  # a truncated download: only the first 100 bytes arrived
        fh.truncate(100)
    ck = load_local("llama", d)
    assert "bad-safetensors" in gaps(ck) and "model-00002-of-00002.safetensors" in next(
        g.message for g in ck.gaps if g.code == "bad-safetensors"
    )
    assert ck.tensors is None


def test_read_headers_false_skips_weights(make_checkpoint):
    shards = llama_shards()
    ck = load_local(
        "llama", make_checkpoint("llama", LLAMA, index=index_for(shards), shards=shards), read_headers=False
    )
    assert ck.tensors is None and ck.weight_map is not None and gaps(ck) == set()


# ---------------------------------------------------------------------------------------------
# References


@pytest.mark.parametrize(
    "ref,local",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", False),
        ("Qwen/Qwen3-8B", False),
        ("./models/llama", True),
        ("../llama", True),
        ("/abs/llama", True),
        ("~/llama", True),
        ("a/b/c", True),
        ("llama", True),
    ],
)
def test_is_local_ref(ref, local):
    assert is_local_ref(ref) is local


def test_existing_directory_that_looks_like_a_hub_id_is_local(tmp_path, monkeypatch, make_checkpoint):
    make_checkpoint("org/name", LLAMA)
    monkeypatch.chdir(tmp_path)
    assert is_local_ref("org/name")
    assert load_checkpoint("org/name").source == "local"


def test_relative_paths_resolve_against_the_profile_directory(tmp_path, make_checkpoint, monkeypatch):
    make_checkpoint("models/llama", LLAMA)
    monkeypatch.chdir("/")
    ck = load_checkpoint("./models/llama", base_dir=tmp_path)
    assert ck.source == "local" and ck.num_layers == 32


def test_relative_references_ignore_the_working_directory(tmp_path, make_checkpoint, monkeypatch):
    """Issue 29: `model: models/llama` (hub-id-shaped) next to the profile is that folder from any
    working directory, with a note saying it was read as a folder; `./models/llama` is the profile's
    folder's even when the working directory has one of its own; a hub id stays a hub id when only
    the working directory has such a folder."""
    make_checkpoint("prof/models/llama", LLAMA)
    base = tmp_path / "prof"
    other = tmp_path / "elsewhere"
    (other / "models" / "llama").mkdir(parents=True)  # an empty folder of the same name where ppspec runs
    (other / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(other)
    for ref in ("models/llama", "./models/llama"):
        assert is_local_ref(ref, base)
        ck = load_checkpoint(ref, base_dir=base)
        assert (ck.source, ck.num_layers, ck.location) == ("local", 32, str(base / "models" / "llama")), ref
        notes = [g.message for g in ck.gaps if g.code == "local-folder"]
        if ref.startswith("./"):
            assert notes == []
        else:
            assert notes == [
                f"'models/llama' has the form of a hub id (org/name) and is the folder {base / 'models' / 'llama'} "
                "next to the profile: it is read as that folder"
            ]
    assert not is_local_ref("org/name", base)  # the working directory's folder does not count
    monkeypatch.chdir("/")
    with pytest.raises(PpspecError) as ei:
        load_checkpoint("models/llama/extra", base_dir=base)
    assert f"(next to the profile: {base / 'models' / 'llama' / 'extra'})" in ei.value.what


def test_neither_directory_nor_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PpspecError) as ei:
        load_checkpoint("not/a/hub/id")
    assert "neither an existing directory nor a hub id" in ei.value.what and ei.value.exit_code == 1
    with pytest.raises(PpspecError) as ei:
        load_checkpoint("./missing-dir")
    assert "not found" in ei.value.what


def test_layer_bytes_skip_encoder_towers_and_mtp_layers(make_checkpoint):
    """Vision-tower layers and MTP layers past num_hidden_layers are not decoder layers."""
    cfg = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"num_hidden_layers": 2, "hidden_size": 8, "vocab_size": 16},
    }
    shards = {
        "model.safetensors": {
            "language_model.model.layers.0.mlp.weight": ("F32", [8, 8]),
            "language_model.model.layers.1.mlp.weight": ("F32", [8, 4]),
            "language_model.model.layers.2.mlp.weight": ("F32", [8, 2]),  # an MTP layer
            "vision_tower.encoder.layers.0.mlp.weight": ("F32", [100, 100]),
            "multi_modal_projector.layers.0.weight": ("F32", [50, 50]),
        }
    }
    ck = load_local("mm", make_checkpoint("mm", cfg, shards=shards))
    assert ck.layer_weight_bytes(2) == [8 * 8 * 4, 8 * 4 * 4]
    # a pack's tower_prefixes decide instead of the usual names: here only the vision tower is one
    assert ck.layer_weight_bytes(2, ("vision_tower.",)) == [8 * 8 * 4 + 50 * 50 * 4, 8 * 4 * 4]
    assert ck.layer_weight_bytes(2, ("vision_tower.", "multi_modal_projector.")) == [8 * 8 * 4, 8 * 4 * 4]


def test_verify_names_a_relative_target_by_its_absolute_path(tmp_path, make_checkpoint, monkeypatch):
    """The lm_eval line verify prints names the target's tokenizer: a relative model path is the
    profile's folder's, whatever the working directory; a hub id and a demo model stay as written."""
    from ppspec_cli.verify.measure import tokenizer_ref as _tokenizer_ref

    make_checkpoint("prof/models/llama", LLAMA)
    monkeypatch.chdir("/")
    prof = str(tmp_path / "prof" / "p.yaml")
    assert _tokenizer_ref("models/llama", prof) == str(tmp_path / "prof" / "models" / "llama")
    assert _tokenizer_ref("./models/llama", prof) == str(tmp_path / "prof" / "models" / "llama")
    assert _tokenizer_ref("org/name", prof) == "org/name"
    assert _tokenizer_ref("demo:tiny-llama", prof) is None
