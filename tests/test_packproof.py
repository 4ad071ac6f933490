"""Adapter packs proven on each vLLM release's source (tools/prove_packs.py; docs/adapters.md,
"Packs proven on each release's source").

Fast: every pack x committed release: the pack's `vllm` range covers exactly the releases whose
proof it passed; the committed snapshots are the ones the proofs name (sha256); `adapters list`
prints what was proven. Slow (a child interpreter serving each release from its snapshot): the
proofs replay to the committed outcome, touching exactly the committed source, and planted sources
make them fail the way an engine start would (the 0.34 embedding rule before its fix, a relay one
layer early, a drifted anchor).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from ppspec_cli.knowledge import packproofs
from ppspec_cli.knowledge.packs import get_pack, in_range, load_packs
from ppspec_cli.running.engine import sourcevllm

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "packproof"
sys.path.insert(0, str(REPO / "tools"))
import prove_packs  # noqa: E402

RELEASES = packproofs.committed_versions()
PACKS = [p.name for p in load_packs()]


def _snapshot(version: str) -> dict:
    return json.loads((SNAPSHOTS / f"vllm-{version}.snapshot.json").read_text(encoding="utf-8"))


def test_every_release_from_030_to_034_has_a_committed_proof():
    assert RELEASES[:5] == ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"], RELEASES
    for v in RELEASES:
        doc = packproofs.committed(v)
        assert doc["vllm_version"] == v and doc["origin"].startswith("wheel vllm-" + v)
        assert set(doc["proof"]["packs"]) == set(PACKS), f"{v}: prove again (a pack was added or removed)"


@pytest.mark.parametrize("version", RELEASES)
def test_committed_snapshot_is_the_one_the_proof_names(version):
    doc = packproofs.committed(version)
    snap = _snapshot(version)
    assert doc["snapshot"] == f"tests/fixtures/packproof/vllm-{version}.snapshot.json"
    assert sourcevllm.snapshot_digest(snap) == doc["snapshot_sha256"]
    assert (snap["vllm_version"], snap["commit"]) == (version, doc["commit"]) and "Apache-2.0" in snap["license"]
    # every statement is whole top-level code at its own lines (what the harness compiles)
    for module, file, (a, b), source in sourcevllm.iter_statement_lines(snap):
        assert source.count("\n") == b - a + 1 and file.startswith("vllm/"), (module, a, b)


@pytest.mark.parametrize(("pack", "version"), [(p, v) for p in PACKS for v in RELEASES], ids=lambda x: x)
def test_pack_range_follows_its_proof(pack, version):
    """Each pack x release: the pack's `vllm` range covers the release exactly when the pack was
    proven on its source (set by tools/prove_packs.py --set-ranges)."""
    o = packproofs.outcome(pack, version)
    assert o is not None and o["state"] in packproofs.STATES
    p = get_pack(pack)
    assert in_range(p.vllm_range, version) == (o["state"] == "proven"), (
        f"{pack} is {o['state']} on {version} ({o.get('detail')}) but its range is {p.vllm_range}"
    )


def test_both_embedding_packs_load_on_034():
    """Issue 39: the deepseek_v3 and minimax_m2 packs load on vLLM 0.34.0's source (their embedding
    check asks 0.34's spec_decode_needs_target_embed in its own terms), and on 0.30-0.33 still."""
    for name in ("deepseek_v3", "minimax_m2"):
        assert packproofs.summary(name) == "proven on 0.30-0.34 source"
        rows = {r["patch"]: r for r in packproofs.outcome(name, "0.34.0")["patches"]}
        assert rows[f"{name}.target_embed_on_last_stage"]["outcome"] == "applied and verified by value"
        assert in_range(get_pack(name).vllm_range, "0.34.0")


def test_summary_names_what_was_not_proven(monkeypatch):
    real = packproofs.committed

    def planted(version):
        doc = copy.deepcopy(real(version))
        if version == "0.34.0":
            doc["proof"]["packs"]["minimax_m2"] = {
                "state": "refused",
                "detail": "minimax_m2.target_embed_on_last_stage: behaviour check failed",
            }
        return doc

    monkeypatch.setattr(packproofs, "committed", planted)
    text = packproofs.summary("minimax_m2")
    assert text.startswith("proven on 0.30-0.33 source; refused on 0.34.0: minimax_m2.target_embed_on_last_stage")
    assert packproofs.series(["0.30.0", "0.32.0", "0.33.0"]) == "0.30, 0.32-0.33"


def test_adapters_list_and_show_say_what_was_proven(capsys, monkeypatch):
    from ppspec_cli.commands import adapters as packs_cli

    monkeypatch.setattr(packs_cli, "installed_vllm", lambda: None)
    assert packs_cli.adapters_list(True) == 0
    recs = {r["name"]: r for r in json.loads(capsys.readouterr().out)["packs"]}
    assert recs["deepseek_v3"]["proof"]["0.34.0"] == {"state": "proven", "detail": ""}
    assert recs["deepseek_v3"]["proof_summary"] == "proven on 0.30-0.34 source"
    assert recs["qwen3_xpress"]["proof"]["0.32.0"]["state"] == "failed"
    assert packs_cli.adapters_list(False) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "  0.30-0.34  " in rows["deepseek_v3"] and "  0.33-0.34  " in rows["qwen3_xpress"]
    assert packs_cli.adapters_list(False, details=True) == 0
    assert "proof     proven on 0.30-0.34 source" in capsys.readouterr().out
    assert packs_cli.adapters_show("minimax_m2", False) == 0
    assert "proven on 0.30-0.34 source" in capsys.readouterr().out
    assert packs_cli.adapters_show("minimax_m2", True) == 0
    assert json.loads(capsys.readouterr().out)["proof"]["0.34.0"]["state"] == "proven"


def test_versions_page_lists_every_pack_range_and_proof():
    """docs/versions.md, "Adapter packs' ranges": one row per pack, its range and proof as today."""
    text = (REPO / "docs" / "versions.md").read_text(encoding="utf-8")
    table = text.split("### Adapter packs' ranges", 1)[1].split("\n\n| pack |", 1)[1].split("\n\n", 1)[0]
    rows = [r for r in ("| pack |" + table).splitlines() if r.startswith("| `")]
    want = [f"| `{p.name}` | `{p.vllm_range}` | {packproofs.summary(p.name)} |" for p in load_packs()]
    assert rows == want


# ---------------------------------------------------------------------------------------------
# The drill's interface (tools/prove_packs.py), on planted outcomes


def test_range_from_proofs():
    vs = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert prove_packs.range_from(["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"], vs) == ">=0.30,<0.35"
    assert prove_packs.range_from(["0.33.0", "0.34.0"], vs) == ">=0.33,<0.35"
    assert prove_packs.range_from(["0.30.0", "0.32.0"], vs) is None  # not one run: a person decides
    assert prove_packs.range_from([], vs) is None


def test_drill_exits_1_and_says_what_needs_a_human(monkeypatch, capsys):
    real = packproofs.committed

    def planted(version):
        doc = copy.deepcopy(real(version))
        if version == "0.34.0":
            doc["proof"]["packs"]["qwen3_moe"] = {
                "state": "refused",
                "detail": "qwen3_moe.relay_forward: anchor drifted",
            }
        return doc

    monkeypatch.setattr(packproofs, "committed", planted)
    got = prove_packs.needs_human("0.34.0")
    assert any(x.startswith("qwen3_moe is refused on 0.34.0: qwen3_moe.relay_forward: anchor drifted") for x in got)
    assert any("qwen3_moe: its range >=0.30,<0.35 includes 0.34.0, where it is refused" in x for x in got)
    monkeypatch.setattr(packproofs, "committed", real)
    assert prove_packs.needs_human("0.33.0") == []

    def fake_prove(jobs, **_):
        doc = copy.deepcopy(planted("0.34.0"))
        doc["snapshot"] = _snapshot("0.34.0")
        return [doc]

    monkeypatch.setattr(prove_packs, "prove_in_child", fake_prove)
    monkeypatch.setattr(packproofs, "committed", planted)
    assert prove_packs.main(["--committed", "--release", "0.34.0"]) == 1
    out = capsys.readouterr().out
    assert "needs a human:" in out and "qwen3_moe is refused on 0.34.0" in out
    assert prove_packs.main(["--wheel", "/nonexistent/vllm-9.9.9.whl"]) == 2


def test_drill_refuses_what_is_not_a_release(tmp_path, capsys):
    tree = _tree(tmp_path / "dev", {**PLANTED, "vllm/_version.py": "__version__ = '0.35.0.dev3+g123'\n"})
    assert prove_packs.main(["--source", str(tree)]) == 2
    assert "holds no vLLM release" in capsys.readouterr().err
    junk = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    assert prove_packs.main(["--wheel", str(junk)]) == 2
    assert "error:" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The harness, on a planted source tree (no vLLM: this process is not switched to it)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8")
    return tmp_path


PLANTED = {
    "vllm/__init__.py": "",
    "vllm/_version.py": "__version__ = '9.9.0'\n__commit_id__ = 'gplanted'\n",
    "vllm/m.py": (
        "import functools\n\n"
        "def register(cls):\n    raise RuntimeError('vLLM registration ran')\n\n"
        "BASE = 2\n"
        "registry_call = print('import-time side effect')\n\n"
        "@register\n@functools.total_ordering\nclass Thing:\n    scale: 'Unbuilt' = BASE\n"
        "    def __eq__(self, o): return True\n    def __lt__(self, o): return False\n"
        "    def twice(self, x):\n        return x * BASE * helper()\n\n"
        "def helper():\n    return 1\n\n"
        "broken = undefined_name + 1\n"
    ),
}


def test_harness_builds_only_what_is_looked_up_and_records_it(tmp_path):
    vm = sourcevllm.SourceVllm(sourcevllm.TreeSource(_tree(tmp_path, PLANTED)))
    assert (vm.version, vm.commit) == ("9.9.0", "gplanted")
    ns = vm.module("vllm.m").ns
    thing = ns["Thing"]
    assert thing().twice(3) == 6 and thing.scale == 2  # methods run with the module's globals, built on use
    assert vm.skipped_decorators == {"vllm.m:Thing": ["@register (vllm/m.py:9)"]}  # a vLLM decorator: not applied
    assert thing() <= thing()  # functools.total_ordering (another package's): applied
    with pytest.raises(sourcevllm.HarnessMissing, match=r"vllm.m:broken \(vllm/m.py:21\).*NameError"):
        ns["broken"] + 1
    with pytest.raises(KeyError):
        ns["nowhere"]
    snap = vm.record()
    lines = [s["lines"] for s in snap["modules"]["vllm.m"]["statements"]]
    assert [9, 16] in lines and [6, 6] in lines and [18, 19] in lines
    assert [7, 7] not in lines  # never needed: the side effect never ran
    assert "nowhere" in snap["modules"]["vllm.m"]["unbound"]
    # the snapshot serves the same again, and nothing else
    again = sourcevllm.SourceVllm(sourcevllm.SnapshotSource(snap))
    ans = again.module("vllm.m").ns
    assert ans["Thing"]().twice(5) == 10
    with pytest.raises(KeyError):
        ans["nowhere"]
    with pytest.raises(sourcevllm.SnapshotIncomplete, match="regenerate it from the release's wheel"):
        ans["registry_call"]
    with pytest.raises(sourcevllm.SnapshotIncomplete):
        again.module("vllm.other")


def test_harness_reads_a_wheel_in_place(tmp_path):
    whl = tmp_path / "vllm-9.9.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for rel, text in PLANTED.items():
            z.writestr(rel, text)
    vm = sourcevllm.SourceVllm(sourcevllm.TreeSource(whl))
    assert vm.module("vllm.m").ns["helper"]() == 1 and vm.module("vllm.none") is None


# ---------------------------------------------------------------------------------------------
# Slow: the proofs themselves, replayed from the snapshots, and planted ones that must fail


@pytest.fixture(scope="module")
def replayed():
    from ppspec_cli.running.engine.packproof import prove_in_child

    docs = prove_in_child([("snapshot", SNAPSHOTS / f"vllm-{v}.snapshot.json") for v in RELEASES])
    return dict(zip(RELEASES, docs))


@pytest.mark.slow
@pytest.mark.parametrize(("pack", "version"), [(p, v) for p in PACKS for v in RELEASES], ids=lambda x: x)
def test_pack_proof_replays_on_the_release_source(replayed, pack, version):
    """Each pack x release, proven again now (anchors, apply, verify with the behaviour checks,
    needs, names, probes) on the release's snapshot: the committed outcome is today's."""
    assert replayed[version]["proof"]["packs"][pack] == packproofs.outcome(pack, version), (
        "the proof changed: python tools/prove_packs.py --committed --write (and --set-ranges)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_replay_touches_exactly_the_committed_source(replayed, version):
    got = replayed[version]
    assert got["proof"]["core"] == packproofs.committed(version)["proof"]["core"]
    assert sourcevllm.snapshot_digest(got["snapshot"]) == sourcevllm.snapshot_digest(_snapshot(version)), (
        "the proof now reads other vLLM source: regenerate the snapshot from the wheel (tools/prove_packs.py --wheel "
        "W --write)"
    )


def _plant(tmp_path: Path, version: str, module: str, first_line: int, edit) -> Path:
    snap = _snapshot(version)
    st = next(s for s in snap["modules"][module]["statements"] if s["lines"][0] == first_line)
    new = edit(st["source"])
    assert new != st["source"] and new.count("\n") == st["source"].count("\n")
    st["source"] = new
    f = tmp_path / f"planted-{version}-{module}-{first_line}.json"
    f.write_text(json.dumps(snap), encoding="utf-8")
    return f


def _statement(version: str, module: str, startswith: str) -> int:
    snap = _snapshot(version)
    return next(s["lines"][0] for s in snap["modules"][module]["statements"] if s["source"].startswith(startswith))


@pytest.mark.slow
def test_planted_sources_make_the_proof_fail(tmp_path):
    """The proof can fail, the way an engine start fails: a last-stage embedding rule that reads a
    field the check's config lacks (the 0.34 break, planted again on 0.33), a mixin that numbers a
    stage's relay slots from one tap too few (a boundary tap's slot is overwritten), and a forward
    whose parameters moved (anchor drift)."""
    from ppspec_cli.running.engine.packproof import prove_in_child

    utils = "vllm.model_executor.models.utils"
    rule = _plant(
        tmp_path,
        "0.33.0",
        utils,
        _statement("0.33.0", utils, "def spec_decode_needs_target_embed"),
        lambda s: s.replace("if speculative_config is None:", "if speculative_config.draft_is_new_in_0_99:"),
    )
    interfaces = "vllm.model_executor.models.interfaces"
    early = _plant(
        tmp_path,
        "0.34.0",
        interfaces,
        _statement("0.34.0", interfaces, "class EagleModelMixin"),
        lambda s: s.replace(
            "self.aux_hidden_state_layers, self.start_layer", "self.aux_hidden_state_layers, self.start_layer - 1"
        ),
    )
    moe = "vllm.model_executor.models.qwen3_moe"
    drift = _plant(
        tmp_path,
        "0.32.0",
        moe,
        _statement("0.32.0", moe, "@support_torch_compile"),
        lambda s: s.replace(
            "        input_ids: torch.Tensor | None,\n", "        token_ids: torch.Tensor | None,\n", 1
        ),
    )
    eagle = "vllm.model_executor.models.llama_eagle"
    numbered = _plant(
        tmp_path,
        "0.34.0",
        eagle,
        _statement("0.34.0", eagle, "class EagleLlamaForCausalLM"),
        lambda s: s.replace("model_config.get_num_layers(", "model_config.get_total_num_hidden_layers("),
    )
    a, b, c, d = prove_in_child([("snapshot", rule), ("snapshot", early), ("snapshot", drift), ("snapshot", numbered)])
    pa = a["proof"]["packs"]
    for name in ("deepseek_v3", "minimax_m2"):
        assert pa[name]["state"] == "refused" and pa[name]["detail"].startswith(f"{name}.target_embed_on_last_stage")
        assert "AttributeError" in pa[name]["detail"] and "draft_is_new_in_0_99" in pa[name]["detail"]
    assert pa["qwen3_moe"]["state"] == "proven"  # its embedding patch stands aside: Qwen3MoeModel builds it itself
    pb = b["proof"]["packs"]
    for name in ("deepseek_v3", "minimax_m2", "qwen3_moe"):
        assert pb[name]["state"] == "refused" and "relay_forward" in pb[name]["detail"], pb[name]
        assert "differs from the unsplit run" in pb[name]["detail"] or "produced" in pb[name]["detail"], pb[name]
    assert b["proof"]["core"]["state"] == "proven"  # the tap watch does not capture
    pc = c["proof"]["packs"]["qwen3_moe"]
    assert pc["state"] == "refused" and "anchor drifted" in pc["detail"] and "token_ids" in pc["detail"]
    # a drafter that numbers its layers globally itself: the numbering patch stands aside there
    pd = d["proof"]["packs"]["eagle_global_layer_ids"]
    rows = {r["patch"].rsplit(".", 1)[-1]: r for r in pd["patches"]}
    assert pd["state"] == "proven" and rows["EagleLlamaForCausalLM"]["anchor"] == "native"
    assert rows["EagleLlamaForCausalLM"]["outcome"].startswith("skipped: the installed vLLM already does this")
    assert rows["EagleCohereForCausalLM"]["outcome"] == "applied and verified by value"


@pytest.mark.slow
def test_a_drafter_that_stops_reading_the_stage_count_fails_the_numbering_check(tmp_path):
    """The numbering wrapper only changes `get_num_layers`: a drafter whose constructor reads the
    layer count some other way is refused, not silently left PP-local."""
    from ppspec_cli.running.engine.packproof import prove_in_child

    eagle = "vllm.model_executor.models.cohere_eagle"
    other = _plant(
        tmp_path,
        "0.33.0",
        eagle,
        _statement("0.33.0", eagle, "class EagleCohereForCausalLM"),
        lambda s: s.replace("model_config.get_num_layers(", "model_config.get_layers_of_this_stage("),
    )
    (doc,) = prove_in_child([("snapshot", other)])
    pe = doc["proof"]["packs"]["eagle_global_layer_ids"]
    assert pe["state"] == "refused" and "EagleCohereForCausalLM" in pe["detail"]
    assert "no longer reads model_config.get_num_layers" in pe["detail"]


_BEFORE_THE_FIX = """
import json, sys
from types import SimpleNamespace
from pathlib import Path
from ppspec_cli.running.engine import sourcevllm
vm = sourcevllm.SourceVllm(sourcevllm.SnapshotSource(json.loads(Path(sys.argv[1]).read_text())))
vm.install()
from ppspec_cli.running.engine import relay
old = SimpleNamespace(speculative_config=SimpleNamespace(method="eagle3"))  # the check before issue 39
try:
    with relay.simulated_pp(1, 2):
        relay.needs_target_embed(old)
    print("OLD-PASSED")
except AttributeError as e:
    print("OLD-TRIPS", e)
print("NEW", relay.check_target_embed_rule())
"""


@pytest.mark.slow
@pytest.mark.parametrize(("version", "old_trips"), [("0.33.0", False), ("0.34.0", True)])
def test_the_embedding_check_before_its_fix_trips_on_034_only(version, old_trips):
    """The historical break, reproduced on the release source: the check that asked vLLM's rule with
    only `method` set trips on 0.34.0 (whose rule reads uses_target_hidden_states) and passed on
    0.33.0; the fixed check passes on both."""
    from ppspec_cli.io import spawn

    env = {k: v for k, v in os.environ.items() if k != "PPSPEC_PLAN_FILE"}
    cp = spawn.run(
        spawn.python_argv("-c", _BEFORE_THE_FIX, str(SNAPSHOTS / f"vllm-{version}.snapshot.json")),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    if old_trips:
        assert "OLD-TRIPS" in cp.stdout and "uses_target_hidden_states" in cp.stdout, cp.stdout
    else:
        assert "OLD-PASSED" in cp.stdout, cp.stdout
    assert "NEW True" in cp.stdout


WHEELS = Path(os.environ.get("PPSPEC_VLLM_WHEELS", "/tmp/wheels"))


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_snapshot_statements_are_the_wheels_text(version):
    """Each committed statement is the wheel's own text at its lines, from a file with the recorded
    sha256 (CI has no wheels: there the digests above hold the snapshots)."""
    import hashlib

    wheel = next(iter(WHEELS.glob(f"vllm-{version}-*.whl")), None)
    if wheel is None:
        pytest.skip(
            f"no vllm-{version} wheel in {WHEELS} (set PPSPEC_VLLM_WHEELS); the snapshot digests are checked above"
        )
    snap = _snapshot(version)
    with zipfile.ZipFile(wheel) as z:
        for name, m in snap["modules"].items():
            if not m["sha256"]:
                continue  # a namespace package: no file
            text = z.read(m["file"]).decode("utf-8")
            assert hashlib.sha256(text.encode()).hexdigest() == m["sha256"], name
            lines = text.splitlines(keepends=True)
            for s in m["statements"]:
                a, b = s["lines"]
                assert "".join(lines[a - 1 : b]) == s["source"], (name, a, b)


@pytest.mark.slow
def test_proving_the_wheels_again_gives_the_committed_proofs():
    """From the wheels themselves (where they are at hand): the same outcome and the same snapshot."""
    from ppspec_cli.running.engine.packproof import prove_in_child

    wheels = {v: next(iter(WHEELS.glob(f"vllm-{v}-*.whl")), None) for v in RELEASES}
    if any(w is None for w in wheels.values()):
        pytest.skip(f"the release wheels are not all in {WHEELS} (set PPSPEC_VLLM_WHEELS); CI replays the snapshots")
    docs = prove_in_child([("source", w) for w in wheels.values()])
    for v, doc in zip(wheels, docs):
        assert doc["vllm_version"] == v and doc["proof"] == packproofs.committed(v)["proof"], v
        assert doc["snapshot_sha256"] == packproofs.committed(v)["snapshot_sha256"], v
