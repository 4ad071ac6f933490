"""Read limits from the field (issue 29 item 2): the flagship checkpoints' indexes are read, every limit
is one named constant per kind with margin over the largest real file, and a file over its limit is a
gap reported as unknown (the limit named), never advice to restore the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from flagship import DEEPSEEK_V3, KIMI_K2, write_index
from inprocess import run

from ppspec_cli.checkpoint import reader

FIXTURES = Path(__file__).parent / "fixtures" / "models"


def _checkpoint(tmp_path: Path, shape: tuple[int, int]) -> tuple[Path, int, int]:
    d = tmp_path / "ckpt"
    d.mkdir()
    shutil.copy(FIXTURES / "deepseek-ai__DeepSeek-V3" / "config.json", d / "config.json")
    n, size = write_index(d / "model.safetensors.index.json", *shape)
    return d, n, size


def _profile(tmp_path: Path, model: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(
        f"name: flagship\ntarget:\n  model: {model}\ndrafter:\n  method: mtp\n  num_speculative_tokens: "
        "1\ntopology:\n  tensor_parallel: 8\n  pipeline_parallel: 2\nplatform: cuda\n"
    )
    return p


@pytest.mark.parametrize(
    "shape,least_bytes,least_tensors",
    [(DEEPSEEK_V3, 8_500_000, 90_000), (KIMI_K2, 13_000_000, 135_000)],
    ids=["deepseek-v3", "kimi-k2"],
)
def test_flagship_index_is_read_and_planned(tmp_path, shape, least_bytes, least_tensors):
    ck_dir, n, size = _checkpoint(tmp_path, shape)
    assert size >= least_bytes and n >= least_tensors  # the real sizes, not a stand-in
    ck = reader.load_local(str(ck_dir), ck_dir)
    assert ck.weight_map is not None and len(ck.weight_map) == n
    assert not [g for g in ck.gaps if g.code in ("over-read-limit", "bad-index")]
    prof = _profile(tmp_path, ck_dir)
    plan = run("plan", str(prof), "--offline", "--json")
    doc = json.loads(plan.stdout)
    text = json.dumps(doc)
    assert "target-unreadable" not in text and "over-read-limit" not in text
    assert "61 layers" in run("plan", str(prof), "--offline").stdout
    chk = json.loads(run("check", str(prof), "--offline", "--json").stdout)
    assert not [f for f in chk["findings"] if f["code"].startswith("target-") and f["severity"] == "error"], chk[
        "findings"
    ]


def test_an_index_over_its_limit_is_unknown_not_corrupt(tmp_path, monkeypatch):
    ck_dir, _n, size = _checkpoint(tmp_path, (2, 4))
    monkeypatch.setattr(reader, "MAX_INDEX_BYTES", size - 1)
    ck = reader.load_local(str(ck_dir), ck_dir)
    gaps = {g.code: g.message for g in ck.gaps}
    assert "over-read-limit" in gaps and "MAX_INDEX_BYTES" in gaps["over-read-limit"]
    assert ck.num_layers == 61  # the config is still read: the layer count is known
    assert ck.weight_map is None


def test_over_limit_finding_is_a_warning_without_restore_advice(tmp_path, monkeypatch):
    ck_dir, _n, size = _checkpoint(tmp_path, (2, 4))
    monkeypatch.setattr(reader, "MAX_INDEX_BYTES", size - 1)
    doc = json.loads(run("check", str(_profile(tmp_path, ck_dir)), "--offline", "--json").stdout)
    f = next(f for f in doc["findings"] if f["code"] == "target-over-read-limit")
    assert f["severity"] == "warning"
    assert "restore" not in (f["message"] + f.get("hint", "")).lower()


def test_each_limit_has_margin_over_the_largest_real_file_of_its_kind():
    kimi_k2_index = 13_643_243  # the generated Kimi-K2-shaped index (write_index(KIMI_K2)), ~ the real 13 MB
    assert reader.MAX_INDEX_BYTES >= 4 * kimi_k2_index
    assert reader.MAX_HEADER_BYTES == 100_000_000  # the safetensors format's own ceiling
    assert reader.MAX_CONFIG_BYTES >= 20 * 30_000  # real configs are 1-30 KB
    assert reader.MAX_TENSORS >= 10 * 140_000
