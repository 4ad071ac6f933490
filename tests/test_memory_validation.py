"""The memory model against vLLM's own log lines (issue 44, item 6): docs/memory.md's validation block is what
tools/memory_validation.py writes from the committed engine logs (regenerate: `PYTHONPATH=. python
tools/memory_validation.py`), and on every engine of every record the predicted KV tokens are within 10% of
the "KV cache size: N tokens" vLLM logged (the held-out bar), the weights per GPU within 5% of "Model loading
took X GiB"."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("memory_validation", REPO / "tools" / "memory_validation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["memory_validation"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_page_is_current():
    tool = _tool()
    assert tool.page_text() == tool.PAGE.read_text(encoding="utf-8"), (
        "docs/memory.md's validation block is stale: run `PYTHONPATH=. python tools/memory_validation.py`"
    )


def test_every_logged_engine_is_predicted_within_the_bar():
    tool = _tool()
    rows = tool.rows()
    assert rows and len({r["record"] for r in rows}) == len(tool.RECORDS), "a record without a logged engine"
    for r in rows:
        assert r["tokens_log"] is not None, r
        e = tool.err(r["tokens_pred"], r["tokens_log"])
        assert e is not None and abs(e) <= 0.10, (r["record"], r["engine"], e)
        if r["weights_log"] is not None:
            w = tool.err(r["weights_pred"], r["weights_log"])
            assert abs(w) <= 0.05, (r["record"], r["engine"], w)


def test_the_log_reader_finds_each_engine_and_its_settings():
    tool = _tool()
    text = (
        "(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'gpu_memory_utilization': 0.5, "
        "'speculative_config': {'method': 'eagle3', 'num_speculative_tokens': 2}}\n"
        "(Worker pid=2) INFO [model_runner.py:429] Model loading took 14.29 GiB memory and 3.1 seconds\n"
        "(Worker pid=2) INFO [gpu_worker.py:795] Available KV cache memory: 22.71 GiB\n"
        "(EngineCore pid=3) INFO [kv_cache_utils.py:1170] GPU KV cache size: 186,032 tokens, Maximum concurrency ...\n"
        "(APIServer pid=4) INFO [api_utils.py:286] non-default args: {'gpu_memory_utilization': 0.9}\n"
        "(EngineCore pid=5) INFO [kv_cache_utils.py:1170] GPU KV cache size: 400,000 tokens, Maximum ...\n"
    )
    a, b = tool.engines_of(text, "engine.log")
    assert (a.args["gpu_memory_utilization"], a.loading_gib, a.kv_gib, a.kv_tokens) == (0.5, 14.29, 22.71, 186032)
    assert (b.args, b.loading_gib, b.kv_tokens) == ({"gpu_memory_utilization": 0.9}, None, 400000)
    # an engine without a speculative config is predicted without the profile's drafter
    prof = tool.profile_for(
        {"name": "x", "target": {"model": "m"}, "drafter": {"method": "eagle3"}}, tool.RECORDS[0], b.args
    )
    assert "drafter" not in prof and prof["engine"]["gpu-memory-utilization"] == 0.9
